"""The check of every SQLite database ptexport writes (issue #18): ``PRAGMA integrity_check`` and the
header against the file, run on the temporary before the rename when ``$PTEXPORT_VERIFY_DB`` is set
(tests/conftest.py sets it for the whole suite and its child processes) or ``verify=True``.

A checked writer with a bug planted in its page writer (header page count, interior keys, index
order) fails with CorruptDatabaseError and leaves nothing; the same bug without the check leaves a
database SQLite calls malformed, so the check is what stops it.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ptexport.cli import main
from ptexport.errors import CorruptDatabaseError, InputError
from ptexport.writers import _btree
from known_db import build_fixture_db
from ptexport.writers.migrate import Migration, upgrade
from ptexport.writers.schema import load_schema
from ptexport.writers.verify import VERIFY_ENV, check_database, header_problems, verify_requested
from ptexport.writers import open_writer

needs_numba = pytest.mark.skipif(not _btree.available(), reason="numba is not installed")


def _write(path, n=6000, **kw):
    """Samples and calls (pcpid_idx, pid_idx) over several leaves and an interior level, page path."""
    ids = np.arange(1, n + 1)
    with open_writer(str(path), mode="btree", **kw) as w:
        assert w.mode == "btree"
        w.write_samples({"id": ids, "ip": ids * 4099, "time": ids * 10, "thread_id": ids % 7})
        w.write_calls({"id": ids, "call_time": ids * 3, "return_time": ids * 3 + 2, "parent_id": ids // 2,
                       "parent_call_path_id": (ids * 7919) % 1013})
    return w


def test_the_suite_asks_for_the_check(tmp_path):
    assert os.environ.get(VERIFY_ENV) not in (None, "", "0"), "tests/conftest.py sets it"
    assert verify_requested() and verify_requested(True) and not verify_requested(False)
    w = _write(tmp_path / "a.db", n=10)
    assert w.verify
    assert check_database(tmp_path / "a.db") == []


def _bad_header_count(monkeypatch):
    orig = _btree._PageFile.close

    def close(self):
        self.npages -= 1  # the header says one page less than was written
        orig(self)

    monkeypatch.setattr(_btree._PageFile, "close", close)


def _bad_interior_keys(monkeypatch):
    orig = _btree._build_table_interiors
    monkeypatch.setattr(_btree, "_build_table_interiors",
                        lambda pgnos, keys, starts, ps, out: orig(pgnos, keys - 1, starts, ps, out))


def _bad_index_order(monkeypatch):
    orig = _btree._build_index_leaves

    def leaves(ent, ps, out, seps):
        ent = ent.copy()
        keys = ent[:, :-1]
        differ = np.flatnonzero((keys[1:] != keys[:-1]).any(axis=1))
        if len(differ):  # two neighbours' keys swapped, their rowids kept
            i = int(differ[0])
            keys[[i, i + 1]] = keys[[i + 1, i]]
        return orig(ent, ps, out, seps)

    monkeypatch.setattr(_btree, "_build_index_leaves", leaves)


BUGS = {"header page count": _bad_header_count, "interior keys": _bad_interior_keys,
        "index order": _bad_index_order}


@needs_numba
@pytest.mark.parametrize("bug", list(BUGS))
def test_a_page_writer_bug_is_stopped_before_the_rename(tmp_path, monkeypatch, bug):
    BUGS[bug](monkeypatch)
    unchecked = tmp_path / "unchecked"
    unchecked.mkdir()
    _write(unchecked / "u.db", verify=False)
    found = check_database(unchecked / "u.db")
    assert found, "the planted bug makes a file SQLite finds wrong"
    checked = tmp_path / "checked"
    checked.mkdir()
    with pytest.raises(CorruptDatabaseError) as e:
        _write(checked / "c.db")  # the suite's switch: checked
    msg = str(e.value)
    assert msg.startswith(f"{checked / 'c.db'}: the database written fails its check (a bug in ptexport): ")
    assert found[0] in msg and "\n" not in msg
    assert list(checked.iterdir()) == [], "no target, no temporary, no lock"


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    assert main(["synth", "--out", str(d), "--program", "calls", "--branches", "20000", "--seed", "5"],
                out=io.StringIO()) == 0
    return d / "perf.data"


CHILD = """
import sys
from ptexport.cli import main
from ptexport.writers import _btree
orig = _btree._build_table_interiors
_btree._build_table_interiors = lambda pgnos, keys, starts, ps, out: orig(pgnos, keys - 1, starts, ps, out)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@needs_numba
def test_an_export_in_a_child_process_is_checked_too(small_trace, tmp_path):
    """The switch reaches ptexport run as a process (inherited environment): exit 70, one line."""
    target = tmp_path / "t.db"
    r = subprocess.run([sys.executable, "-c", CHILD, str(small_trace), "--db", str(target), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == CorruptDatabaseError.exit_code == 70, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"ptexport: error: {target}: the database written fails its check (a bug in ptexport): "), r.stderr
    assert "out of order" in lines[0] or "Rowid" in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == []


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_upgrade_checks_the_upgraded_copy(tmp_path):
    db = tmp_path / "f.db"
    build_fixture_db(str(db))
    before = _digest(db)

    def bad(mdb):  # a migration that points one index at another index's pages
        mdb.execute("PRAGMA writable_schema = ON")
        mdb.execute("UPDATE sqlite_master SET rootpage = (SELECT rootpage FROM sqlite_master WHERE name = "
                    "'pid_idx') WHERE name = 'pcpid_idx'")

    with pytest.raises(CorruptDatabaseError, match=r": the upgraded database fails its check \(a bug in ptexport\): "):
        upgrade(str(db), migrations=[Migration("9999_bad", "bad", bad)])
    assert _digest(db) == before and sorted(p.name for p in tmp_path.iterdir()) == ["f.db"]
    # a harmless migration: applied, and the result passes
    assert upgrade(str(db), migrations=[Migration("9999_ok", "ok", lambda mdb: None)]) == ["9999_ok"]
    assert check_database(db) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["f.db"]


def test_upgrade_of_a_damaged_input_blames_the_input(tmp_path):
    db = tmp_path / "f.db"
    build_fixture_db(str(db))
    c = sqlite3.connect(db)
    root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'symbols'").fetchone()[0]
    ps = c.execute("PRAGMA page_size").fetchone()[0]
    c.close()
    raw = bytearray(db.read_bytes())
    raw[(root - 1) * ps + 3: (root - 1) * ps + 5] = b"\x7f\xff"  # the symbols leaf claims 32767 cells
    db.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"f\.db: not a sound SQLite database: "):
        upgrade(str(db), migrations=[Migration("9999_ok", "ok", lambda mdb: None)])
    assert db.read_bytes() == bytes(raw) and sorted(p.name for p in tmp_path.iterdir()) == ["f.db"]


def test_header_check_sees_what_integrity_check_does_not(tmp_path):
    """Bytes past the header's page count are invisible to SQLite (it trusts a valid count)."""
    db = tmp_path / "f.db"
    _write(db, n=100)
    ps = sqlite3.connect(db).execute("PRAGMA page_size").fetchone()[0]
    pages = db.stat().st_size // ps
    with open(db, "ab") as f:
        f.write(bytes(ps))
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert check_database(db) == [f"header: page count {pages} ({pages * ps} bytes) but the file has "
                                  f"{(pages + 1) * ps} bytes ({pages + 1} pages)"]
    with open(db, "ab") as f:
        f.write(b"x")
    assert f"file size {(pages + 1) * ps + 1} is not a multiple of the page size {ps}" in header_problems(db)
    (tmp_path / "t.txt").write_text("hello")
    assert check_database(tmp_path / "t.txt") == ["not a SQLite database (no 'SQLite format 3' header)"]


def test_the_check_gives_way_to_a_signal(tmp_path):
    """integrity_check is one long C call: Ctrl-C during it still ends it (KeyboardInterrupt)."""
    db = tmp_path / "big.db"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b)")
    c.execute("CREATE INDEX t_a ON t (a)")
    n = 100_000
    c.executemany("INSERT INTO t VALUES (?, ?, ?)", ((i, (i * 7919) % 1000003, -i) for i in range(n)))
    c.commit()
    c.close()
    t0 = time.monotonic()
    assert check_database(db) == []
    whole = time.monotonic() - t0

    def alarm(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, whole / 10)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            check_database(db)
        assert time.monotonic() - t0 < whole * 0.6 + 0.05
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    for t in threading.enumerate():  # the check itself was interrupted and has closed its connection
        if t.name == "ptexport-integrity-check":
            # (the interrupt may have come while start() waited for the thread to run: it runs soon)
            for _ in range(3000):
                try:
                    t.join(30)
                    break
                except RuntimeError:  # "cannot join thread before it is started"
                    time.sleep(0.01)
            assert not t.is_alive()


def test_page_writer_rows_never_need_overflow_pages():
    """The page writer writes no overflow pages: a table whose widest row could need one at this
    page size goes through SQLite instead (sqlite_writer), and LeafSpool refuses it."""
    schema = load_schema("sqlite")
    widest = max(len(cols) for cols in schema.tables.values())
    assert _btree.fits_in_leaf(widest, 512)  # every ptexport table, at the smallest page size
    assert _btree.max_payload(23) == 200  # samples: 24-byte header, 22 8-byte values
    assert not _btree.fits_in_leaf(60, 512) and _btree.fits_in_leaf(60, 1024)
    with pytest.raises(ValueError, match="overflow page"):
        _btree.LeafSpool(None, 60, 512)


def test_check_subcommand(tmp_path, capsys):
    good, bad = tmp_path / "good.db", tmp_path / "bad.db"
    _write(good, n=3000)
    shutil.copy(good, bad)
    with open(bad, "ab") as f:
        f.write(b"\0" * 4096)  # a page past the header's count
    out = io.StringIO()
    assert main(["check", str(good)], out=out) == 0
    assert out.getvalue() == f"{good}: ok\n"
    out = io.StringIO()
    assert main(["check", str(good), str(bad)], out=out) == 1
    lines = out.getvalue().splitlines()
    assert lines[0] == f"{good}: ok" and len(lines) == 2 and lines[1].startswith(f"{bad}: header: page count ")
    assert main(["check", str(tmp_path / "none.db")], out=io.StringIO()) == 2
    assert capsys.readouterr().err == f"ptexport: error: {tmp_path / 'none.db'}: no such database\n"
