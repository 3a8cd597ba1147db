"""The PostgreSQL server's disk really full (issue #18): the export's tables go to a tablespace on
a small tmpfs.

No option of ptexport is needed: libpq's ``options`` parameter in the URL
(``?options=-c default_tablespace=NAME``) sets the sessions' default tablespace, where the
export's CREATE TABLE and CREATE INDEX put their files (the temporary database itself, its
catalogs and the server's WAL stay in pg_default).  The tiny trace's tables take about 12 MB
and their keys and indexes 2.4 MB: an 8 MB tablespace fills while COPY loads the samples, a
13 MB one while the keys and indexes are built.  Each time: exit 74, one line with the
server's message, the temporary database dropped (its files gone from the tablespace), the
database ``--force`` was replacing intact.  Skipped where this process cannot mount a tmpfs
(not root) or the server cannot use a directory of this machine (not local).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from faultstest import PG_BASE, main_captured, pg_check_precious, pg_databases, pg_precious, pg_url

pytestmark = pytest.mark.postgres


@pytest.fixture
def small_tablespace(pg_admin):
    """A tablespace on a tmpfs owned by the server's user; ``resize(size)`` sets the tmpfs' size."""
    import pwd
    import uuid

    import psycopg

    try:
        owner = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no user postgres on this machine: the server is not local")
    d = Path(tempfile.mkdtemp(prefix="ptx-faults-ts-"))  # under /tmp: the server must reach it
    d.chmod(0o755)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=8m,uid={owner.pw_uid},gid={owner.pw_gid},mode=0700",
                        "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        d.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    name = f"ptx_faults_{uuid.uuid4().hex[:8]}"
    try:
        pg_admin.execute(f"CREATE TABLESPACE {name} LOCATION '{d}'")
    except psycopg.Error as e:
        subprocess.run(["umount", str(d)], capture_output=True)
        d.rmdir()
        pytest.skip(f"the server cannot use {d}: {str(e).strip().splitlines()[0]}")

    def resize(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(d)], check=True, capture_output=True)

    try:
        yield name, d, resize
    finally:
        pg_admin.execute(f"DROP TABLESPACE IF EXISTS {name}")
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def _used(d: Path) -> int:
    st = os.statvfs(d)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.mark.slow
# the load (which table fills the disk first depends on the tables' sizes: samples, or the aggregates
# written after them), or the keys and indexes built after it
@pytest.mark.parametrize("size,when", [("8m", r"writing \w+"), ("13m", "finishing the database")])
def test_server_disk_really_full(tiny_trace, small_tablespace, pg_admin, pg_name, capsys, size, when):
    space, d, resize = small_tablespace
    resize(size)
    pg_precious(pg_admin, pg_name)  # in pg_default
    url = pg_url(pg_name, f"options=-c%20default_tablespace%3D{space}")
    rc, out, err = main_captured([str(tiny_trace), "--db", url, "--force"], capsys)
    assert rc == 74, err
    lines = err.splitlines()
    assert len(lines) == 1 and re.match(rf"ptexport: error: {re.escape(PG_BASE)}/{pg_name}: {when}: ", lines[0]), err
    assert ": the server's disk is full (could not extend file " in lines[0], err
    # the server's two forms of it: the write failed (ENOSPC), or it wrote a part of the 8 KiB
    # block (the tmpfs had a 4 KiB page left: "wrote only 4096 of 8192 bytes at block N")
    assert re.search(r"(: No space left on device|: wrote only \d+ of \d+ bytes at block \d+)\)$", lines[0]), err
    assert pg_databases(pg_admin, pg_name) == [pg_name], "the temporary database is dropped"
    pg_check_precious(pg_name)
    assert _used(d) < 64 << 10, "its files are gone from the tablespace"
