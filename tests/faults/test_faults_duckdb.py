"""A full file system under a DuckDB (``--db NAME.duckdb``) or Parquet (``--parquet DIR``) export: one
line naming the target and the cause, exit 74 (StorageError), nothing temporary left, and the target
an export with --force was replacing untouched - the SQLite target's rules (test_faults_disk_full.py).

DuckDB writes the row groups of its load transaction as it goes and reports a failed write as "the
transaction is aborted" at the next statement; the writer names the full file system then.  A small
tmpfs fills while the rows are written, a larger one while the export finishes (the sorted calls,
the views and checkpoint; for Parquet the files copied out of the staging database).
"""

from __future__ import annotations

import hashlib
import os

import pytest
from faultstest import run
from ptxtest import slow_after

ENOSPC = "no space left on device (ENOSPC)"


def _precious(target, kind: str) -> str:
    """Something someone cares about at the target (a file, or a directory with a file); its digest."""
    if kind == "parquet":
        target.mkdir()
        (target / "keep.parquet").write_bytes(b"precious" * 100)
        return hashlib.sha256((target / "keep.parquet").read_bytes()).hexdigest()
    target.write_bytes(b"precious" * 100)
    return hashlib.sha256(target.read_bytes()).hexdigest()


CASES = [("duckdb", "1m"), ("parquet", "1m"), ("duckdb", "6m"), ("parquet", "6m")]


@pytest.mark.parametrize("kind,size", slow_after(CASES, unpack=True))
def test_a_real_full_file_system(small_trace, small_tmpfs, kind, size):
    """The 200 K-branch trace (a few MB of DuckDB database; DuckDB keeps a transaction's rows in memory
    until a row group fills, so the disk may fill while writing or at the commit when finishing)."""
    d = small_tmpfs(size)
    target = d / ("t.duckdb" if kind == "duckdb" else "pq")
    digest = _precious(target, kind)
    where = ["--db", str(target)] if kind == "duckdb" else ["--parquet", str(target)]
    r = run([str(small_trace), *where, "--force", "--jobs", "1"])
    assert r.returncode == 74, r.stderr
    error = [line for line in r.stderr.splitlines() if not line.startswith("ptexport: warning: ")]
    whens = ("writing ", f"finishing the {'directory' if kind == 'parquet' else 'database'}: ")
    assert len(error) == 1 and error[0].startswith(tuple(f"ptexport: error: {target}: {w}" for w in whens)), r.stderr
    assert error[0].endswith(": " + ENOSPC), r.stderr
    assert sorted(p.name for p in d.iterdir()) == [target.name], "everything temporary is removed"
    kept = target / "keep.parquet" if kind == "parquet" else target
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == digest, "the previous target is untouched"
    st = os.statvfs(d)
    assert (st.f_blocks - st.f_bfree) * st.f_frsize < 1 << 20, "the file system's space is given back"
