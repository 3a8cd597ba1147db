"""A full disk (ENOSPC), an exceeded quota (EDQUOT) or an I/O error (EIO) anywhere in a SQLite
export: one line naming the target and the cause, exit 74 (StorageError), nothing temporary
left, and the database an export with --force was replacing untouched (issue #18).

The faults are injected in-process at the Nth write of each kind of file the writer writes
(the spooled pages, their flush at close, the index runs, the splice into the database,
SQLite's own pages, the final fsync) and, where this machine lets root mount one, come from a
real tmpfs that is too small.
"""

from __future__ import annotations

import errno
import hashlib
import io
import itertools
import os
import sqlite3
import threading

import pytest

from faultstest import run
from ptexport.cli import main
from ptexport.errors import StorageError
from ptexport.writers import _btree
from ptexport.writers import sqlite as sqlite_writer
from ptxtest import slow_after

CAUSE = {errno.ENOSPC: "no space left on device (ENOSPC)", errno.EDQUOT: "disk quota exceeded (EDQUOT)",
         errno.EIO: "input/output error (EIO)"}


def _precious(path) -> str:
    """A database someone cares about at ``path``; its digest."""
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE precious (x)")
        c.execute("INSERT INTO precious VALUES (42)")
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Failing:
    """A file object whose Nth ``write`` (or its ``close``) fails with ``err``."""

    def __init__(self, f, fail) -> None:
        self._f = f
        self._fail = fail

    def write(self, data):
        self._fail("write")
        return self._f.write(data)

    def close(self):
        self._f.close()  # closed all the same, as a BufferedWriter whose flush failed
        self._fail("close")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def _inject_open(monkeypatch, module, modes: tuple[str, ...], op: str, nth: int, err: int) -> list[int]:
    """Files ``module`` opens in one of ``modes`` fail at the ``nth`` ``op`` over all of them."""
    count = itertools.count(1)
    lock = threading.Lock()
    fired: list[int] = []

    def fail(what: str) -> None:
        if what != op:
            return
        with lock:
            k = next(count)
        if k == nth:
            fired.append(k)
            raise OSError(err, os.strerror(err))

    def fake_open(path, mode="r", *a, **kw):
        f = open(path, mode, *a, **kw)
        return _Failing(f, fail) if mode in modes else f

    monkeypatch.setattr(module, "open", fake_open, raising=False)
    return fired


def _inject_spill(monkeypatch, nth: int, err: int) -> list[int]:
    monkeypatch.setattr(sqlite_writer, "INDEX_RUN_ROWS", 1 << 14)  # runs spill to their file early
    orig = sqlite_writer._IndexRuns._spill
    count = itertools.count(1)
    fired: list[int] = []

    def spill(self):
        if self._n and next(count) == nth:
            fired.append(nth)
            raise OSError(err, os.strerror(err))
        orig(self)

    monkeypatch.setattr(sqlite_writer._IndexRuns, "_spill", spill)
    return fired


def _inject_sqlite_full(monkeypatch) -> list[int]:
    orig = sqlite_writer.SqliteWriter._open

    def _open(self):
        orig(self)
        self.conn.execute("PRAGMA max_page_count = 200")  # SQLite's own SQLITE_FULL past 200 pages

    monkeypatch.setattr(sqlite_writer.SqliteWriter, "_open", _open)
    return [1]


def _inject_fsync(monkeypatch, err: int) -> list[int]:
    fired: list[int] = []

    def fsync(fd):
        fired.append(fd)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "fsync", fsync)
    return fired


SITES = {
    # site: (inject, the cause in the line)
    "spooled pages, 3rd write": (lambda mp: _inject_open(mp, _btree, ("wb",), "write", 3, errno.ENOSPC),
                                 CAUSE[errno.ENOSPC]),
    "spooled pages, flush at close": (lambda mp: _inject_open(mp, _btree, ("wb",), "close", 1, errno.ENOSPC),
                                      CAUSE[errno.ENOSPC]),
    "index runs, 2nd spill": (lambda mp: _inject_spill(mp, 2, errno.EDQUOT), CAUSE[errno.EDQUOT]),
    "splice into the database": (lambda mp: _inject_open(mp, _btree, ("r+b",), "write", 2, errno.EIO),
                                 CAUSE[errno.EIO]),
    "SQLite's own pages": (_inject_sqlite_full, "no space left on device (SQLITE_FULL)"),
    "final fsync": (lambda mp: _inject_fsync(mp, errno.EIO), CAUSE[errno.EIO]),
}


@pytest.mark.slow
@pytest.mark.parametrize("site", list(SITES))
def test_storage_fault_is_one_line_and_leaves_nothing(small_trace, tmp_path, monkeypatch, capsys, site):
    inject, cause = SITES[site]
    target = tmp_path / "t.db"
    digest = _precious(target)
    fired = inject(monkeypatch)
    rc = main([str(small_trace), "--db", str(target), "--force"], out=io.StringIO())
    err = capsys.readouterr().err
    assert fired, "the fault was not reached"
    assert rc == StorageError.exit_code == 74, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ptexport: error: {target}: "), err
    assert lines[0].endswith(f": {cause}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.db"], "everything temporary is removed"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == digest, "the previous database is untouched"


@pytest.mark.slow
@pytest.mark.parametrize("size,when", slow_after([("2m", "writing"), ("16m", "finishing the database")], unpack=True))
def test_a_real_full_file_system(small_trace, small_tmpfs, size, when):
    """A 200 K-branch export needs about 25 MB at its peak (a 14 MB database): a 2 MB tmpfs fills while
    pages are written, a 16 MB one while they are spliced into the database."""
    d = small_tmpfs(size)
    target = d / "t.db"
    digest = _precious(target)
    r = run([str(small_trace), "--db", str(target), "--force"])
    assert r.returncode == 74, r.stderr
    warn, error = r.stderr.splitlines()  # the estimate warned first
    assert warn.startswith(f"ptexport: warning: {target}: ") and "MiB free in" in warn
    assert error.startswith(f"ptexport: error: {target}: {when}") and error.endswith(": " + CAUSE[errno.ENOSPC])
    assert sorted(p.name for p in d.iterdir()) == ["t.db"]
    assert hashlib.sha256(target.read_bytes()).hexdigest() == digest
    st = os.statvfs(d)
    assert (st.f_blocks - st.f_bfree) * st.f_frsize < 1 << 20, "the file system's space is given back"


def test_space_estimate_against_a_real_export(small_trace, tmp_path):
    """The estimate of a database is within a factor 2 of the database the export writes."""
    from ptexport.writers.space import estimate

    target = tmp_path / "t.db"
    est = estimate(str(small_trace), str(target))
    assert est is not None and not est.short  # plenty of room here: no warning
    assert main([str(small_trace), "--db", str(target), "-q"], out=io.StringIO()) == 0
    real = target.stat().st_size
    assert 0.5 < est.database / real < 2, (est.database, real)
    assert est.peak > est.database
    assert estimate("-", str(tmp_path / "x.db")) is None
    assert estimate(str(small_trace), "postgresql://u@h/db") is None
