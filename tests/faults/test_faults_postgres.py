"""PostgreSQL: temporary databases of exports that died, two exports at once, the server's disk
full during COPY (issue #18).  Against the real server on 127.0.0.1:5432."""

from __future__ import annotations

import io
import itertools

import pytest

from faultstest import PG_BASE, dead_pid, pg_databases
from ptexport.cli import main

pytestmark = pytest.mark.postgres


def _create(pg_admin, name: str, table: str | None = None) -> None:
    pg_admin.execute(f'CREATE DATABASE "{name}"')
    if table:
        import psycopg

        with psycopg.connect(f"{PG_BASE}/{name}", autocommit=True) as c:
            c.execute(f"CREATE TABLE {table} (x int)")
            c.execute(f"INSERT INTO {table} VALUES (42)")


def _other_session():
    import psycopg

    return psycopg.connect(f"{PG_BASE}/postgres", autocommit=True)


@pytest.mark.slow
def test_next_export_drops_a_dead_exports_temporary_database(pg_admin, pg_name, small_trace, capsys):
    from ptexport.writers.leftovers import advisory_key, pg_tmp_name

    stale = pg_tmp_name(pg_name, dead_pid())
    _create(pg_admin, stale, "half_written")
    # the temporary of a live export on another host: its PID means nothing here (dead), it holds the lock
    remote = pg_tmp_name(pg_name, dead_pid() + 1)
    _create(pg_admin, remote)
    other = _other_session()
    try:
        assert other.execute("SELECT pg_try_advisory_lock(%s)", (advisory_key("tmp", remote),)).fetchone()[0]
        rc = main([str(small_trace), "--db", f"{PG_BASE}/{pg_name}"], out=io.StringIO())
        err = capsys.readouterr().err
        assert rc == 0, err
        (line,) = err.splitlines()
        assert line.startswith("ptexport: removed 1 temporary database (") and "MiB)" in line, err
        assert line.endswith(f" of exports to {PG_BASE}/{pg_name} that died"), err
        assert pg_databases(pg_admin, pg_name) == sorted([pg_name, remote])
    finally:
        other.close()


def test_clean_lists_then_drops(pg_admin, pg_name):
    from ptexport.writers.leftovers import pg_tmp_name

    stale = pg_tmp_name(pg_name, dead_pid())
    _create(pg_admin, stale)
    url = f"{PG_BASE}/{pg_name}"
    out = io.StringIO()
    assert main(["clean", url, "--dry-run"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"would remove: {stale} (temporary database, pid {dead_pid()}, ")
    assert lines[1].startswith(f"{url}: would remove 1 (")
    assert pg_databases(pg_admin, pg_name) == [stale]
    out = io.StringIO()
    assert main(["clean", url], out=out) == 0
    assert out.getvalue().splitlines()[0].startswith(f"removed: {stale} ")
    assert pg_databases(pg_admin, pg_name) == []
    out = io.StringIO()
    assert main(["clean", url], out=out) == 0
    assert out.getvalue() == f"{url}: nothing to clean\n"


def test_second_export_to_the_same_database_refuses(pg_admin, pg_name, small_trace, capsys):
    """An export holds the target's advisory lock for its whole run: here another session holds it."""
    from ptexport.writers.leftovers import advisory_key, pg_tmp_name

    stale = pg_tmp_name(pg_name, dead_pid())
    _create(pg_admin, stale)
    other = _other_session()
    try:
        assert other.execute("SELECT pg_try_advisory_lock(%s)", (advisory_key("target", pg_name),)).fetchone()[0]
        url = f"{PG_BASE}/{pg_name}"
        rc = main([str(small_trace), "--db", url], out=io.StringIO())
        assert rc == 75
        assert capsys.readouterr().err.splitlines() == [
            f"ptexport: error: {url}: another export is writing it; try again when it has finished"]
        out = io.StringIO()
        assert main(["clean", url], out=out) == 0
        assert out.getvalue().splitlines()[0] == f"busy: {url} (an export is writing it: left alone)"
        assert pg_databases(pg_admin, pg_name) == [stale], "nothing dropped while the target is busy"
    finally:
        other.close()


def test_server_disk_full_during_copy(pg_admin, pg_name, small_trace, monkeypatch, capsys):
    """DiskFull (SQLSTATE 53100) at the 3rd COPY write: one line, exit 74, no temporary database,
    the database --force was replacing untouched."""
    import psycopg
    import psycopg.errors

    _create(pg_admin, pg_name, "precious")
    orig = psycopg.Copy.write
    count = itertools.count(1)
    fired = []

    def write(self, buffer):
        if next(count) == 3:
            fired.append(1)
            raise psycopg.errors.DiskFull('could not extend file "base/1/2": No space left on device')
        return orig(self, buffer)

    monkeypatch.setattr(psycopg.Copy, "write", write)
    url = f"{PG_BASE}/{pg_name}"
    rc = main([str(small_trace), "--db", url, "--force"], out=io.StringIO())
    err = capsys.readouterr().err
    assert fired and rc == 74, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ptexport: error: {url}: writing "), err
    assert lines[0].endswith(": the server's disk is full (could not extend file \"base/1/2\": "
                             "No space left on device)"), err
    assert pg_databases(pg_admin, pg_name) == [pg_name]
    with psycopg.connect(url) as c:
        assert c.execute("SELECT x FROM precious").fetchall() == [(42,)]
        assert c.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'samples'").fetchone() == (0,)
