"""A database past 2 GiB from the page writer (issue #18): valid, and the rows read back as written.

A 50 M-branch export is too slow for the suite, so the SQLite writer is driven directly with
synthetic columnar batches: ~10.6 M samples of 8-byte values (~200-byte records, ~2.2 GiB of
leaves spliced across the 1 GiB pending-byte page and past 2^31 bytes), then calls with the two
indexes the page writer lays down itself (pcpid_idx, pid_idx: entries merged from several sorted
runs, placed past 2^31), call paths and context switches whose indexes SQLite builds after the
splice (its pages past 2^31 too), a few samples held back until the end (inserted by SQLite into the
spliced B-tree: leaf splits, new pages at the end of a > 2 GiB file), and symbols and DSOs with
names longer than a page (overflow chains; the page writer itself never writes overflow pages,
see test_export_verify).

Checked: ``PRAGMA integrity_check`` (full) and the header's page count against the file size, by
the writer's own check before the rename (``verify=True``); page numbers past 2^31 bytes found by walking the B-trees
from their root pages in Python; counts, min/max ids, random rows equal to what was written, index
lookups (``INDEXED BY``) equal to numpy's answer.
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
import time

import numpy as np
import pytest

from ptexport.writers import _btree

from ptexport.writers import sqlite as sqlite_writer
from ptexport.writers import open_writer

pytestmark = pytest.mark.skipif(not _btree.available(), reason="numba is not installed")

TWO_GIB = 1 << 31
N_SAMPLES = 10_600_000
N_CALLS = 1_200_000
N_CALL_PATHS = 200_000
BATCH = 1 << 18
#: samples ids held back and written last: below the spooled ids, so SQLite inserts them after the splice
LATE = np.arange(50_021, N_SAMPLES, 100_003)
M = (1 << 64) - 1


def _mix(ids: np.ndarray, j: int) -> np.ndarray:
    """A deterministic 64-bit value per (id, column) (splitmix64): mostly 8-byte integers, some negative."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64((j * 0xBF58476D1CE4E5B9) & M)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z.view(np.int64)


def _samples(names: list[str], ids: np.ndarray) -> dict[str, np.ndarray]:
    cols = {c: _mix(ids, j) for j, c in enumerate(names) if c != "id"}
    cols["id"] = ids
    cols["branch_type"] = ids % 16  # perf's branch types: a few distinct values (branch_types rows)
    return cols


def _calls(names: list[str], ids: np.ndarray) -> dict[str, np.ndarray]:
    cols = {c: _mix(ids, 100 + j) for j, c in enumerate(names) if c != "id"}
    cols["id"] = ids
    cols["comm_id"] = ids % 4
    cols["parent_call_path_id"] = _mix(ids, 7) % 50_000  # many rows per key
    cols["parent_id"] = ids // 3
    return cols


def _call_paths(ids: np.ndarray) -> dict[str, np.ndarray]:
    return {"id": ids, "parent_id": ids // 5, "symbol_id": ids % 300, "ip": _mix(ids, 300)}


def _long_name(i: int) -> str:
    return f"sym{i}_" + "x" * (5000 + 997 * i)  # longer than a page: an overflow chain each


# ---------------------------------------------------------------- reading pages without SQLite

def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = 0
    for k in range(8):
        c = b[i + k]
        v = (v << 7) | (c & 0x7F)
        if c < 0x80:
            return v, i + k + 1
    return (v << 8) | b[i + 8], i + 9


def _page(f, ps: int, pgno: int) -> tuple[bytes, int]:
    f.seek((pgno - 1) * ps)
    return f.read(ps), 100 if pgno == 1 else 0


def _path_to_rowid(f, ps: int, root: int, rowid: int) -> tuple[list[int], bytes]:
    """Page numbers from a table's root to the leaf that holds ``rowid`` (table-interior cells:
    4-byte left child, varint key = the child's largest rowid; right child at offset 8), and the leaf."""
    path = [root]
    while True:
        b, o = _page(f, ps, path[-1])
        if b[o] == 0x0D:
            return path, b
        assert b[o] == 0x05, (path, b[o])
        (n,) = struct.unpack_from(">H", b, o + 3)
        (child,) = struct.unpack_from(">I", b, o + 8)
        for i in range(n):
            (p,) = struct.unpack_from(">H", b, o + 12 + 2 * i)
            (left,) = struct.unpack_from(">I", b, p)
            if rowid <= _varint(b, p + 4)[0]:
                child = left
                break
        path.append(child)


def _leaf_rowids(b: bytes) -> list[int]:
    (n,) = struct.unpack_from(">H", b, 3)
    out = []
    for i in range(n):
        (p,) = struct.unpack_from(">H", b, 8 + 2 * i)
        _, q = _varint(b, p)
        out.append(_varint(b, q)[0])
    return out


def _index_depth(f, ps: int, root: int) -> tuple[int, int]:
    """Levels of an index B-tree (interior 0x02 down the leftmost children to a leaf 0x0A), and the
    largest page number met on the way."""
    pgno, depth, top = root, 1, root
    while True:
        b, o = _page(f, ps, pgno)
        if b[o] == 0x0A:
            return depth, top
        assert b[o] == 0x02, b[o]
        (n,) = struct.unpack_from(">H", b, o + 3)
        (p,) = struct.unpack_from(">H", b, o + 12 + 2 * (n - 1))
        (pgno,) = struct.unpack_from(">I", b, p)  # the last cell's left child
        top = max(top, pgno)
        depth += 1


@pytest.fixture
def scratch(tmp_path):
    """``tmp_path``, emptied afterwards whatever happened (pytest keeps the last few tmp dirs: not 2 GiB ones)."""
    free = shutil.disk_usage(tmp_path).free
    if free < 3 * TWO_GIB + (2 << 30):
        pytest.skip(f"needs ~8 GiB free under {tmp_path} (the spooled pages and the database), has {free >> 30} GiB")
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.soak
def test_page_writer_file_past_2_gib(scratch, monkeypatch, capsys):
    db = scratch / "big.db"
    checks = []
    orig = sqlite_writer.require_sound

    def timed(path, target, *a, **kw):
        t = time.monotonic()
        orig(path, target, *a, **kw)  # raises CorruptDatabaseError listing what integrity_check found
        checks.append((path.stat().st_size, time.monotonic() - t))

    monkeypatch.setattr(sqlite_writer, "require_sound", timed)
    t0 = time.monotonic()
    with open_writer(str(db), mode="btree", verify=True) as w:
        assert w.mode == "btree"
        w.write_rows("dsos", [(1, 0, "long", "/" + "d" * 9000, "")])
        w.write_rows("symbols", [(i, 1, 0x1000 * i, 0x1000 * i + 0x10, 1, _long_name(i)) for i in range(1, 41)])
        names = w.columns("samples")
        for start in range(1, N_SAMPLES + 1, BATCH):
            ids = np.arange(start, min(start + BATCH, N_SAMPLES + 1), dtype=np.int64)
            keep = ids[~np.isin(ids, LATE)]
            w.write_samples(_samples(names, keep))
        cnames = w.columns("calls")
        for start in range(1, N_CALLS + 1, BATCH):
            w.write_calls(_calls(cnames, np.arange(start, min(start + BATCH, N_CALLS + 1), dtype=np.int64)))
        w.write_call_paths(_call_paths(np.arange(1, N_CALL_PATHS + 1, dtype=np.int64)))
        cs = np.arange(1, 5001, dtype=np.int64)
        w.write_columns("context_switches", {"id": cs, "time": _mix(cs, 400), "cpu": cs % 8})
        w.write_samples(_samples(names, LATE))  # below the spooled ids: inserted by SQLite after the splice
        assert len(w._late["samples"][0]) == len(LATE)
    written = time.monotonic() - t0
    assert len(checks) == 1, "the writer ran the check on the finished file"
    size, checked = checks[0]
    assert db.stat().st_size == size
    assert size > TWO_GIB + (64 << 20)

    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ps = c.execute("PRAGMA page_size").fetchone()[0]
    assert c.execute("PRAGMA page_count").fetchone()[0] * ps == size
    with open(db, "rb") as f:
        assert struct.unpack_from(">I", f.read(100), 28)[0] * ps == size  # the header's page count

    # samples: every row, the ends, random rows (some past 2^31 bytes, some held back) as written
    assert c.execute("SELECT COUNT(*), MIN(id), MAX(id) FROM samples").fetchone() == (N_SAMPLES + 1, 0, N_SAMPLES)
    rng = np.random.default_rng(18)
    pick = np.unique(np.concatenate([rng.integers(1, N_SAMPLES + 1, 200), LATE[:5], [1, N_SAMPLES]]))
    want = _samples(names, pick)
    q = f"SELECT {', '.join(names)} FROM samples WHERE id = ?"
    for k, i in enumerate(pick.tolist()):
        assert c.execute(q, (i,)).fetchone() == tuple(int(want[n][k]) for n in names), i
    # the pages: the last samples leaf lies past 2^31 bytes, reached through 4-byte page numbers
    roots = dict(c.execute("SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0"))
    with open(db, "rb") as f:
        path, leaf = _path_to_rowid(f, ps, roots["samples"], N_SAMPLES)
        assert N_SAMPLES in _leaf_rowids(leaf)
        assert (path[-1] - 1) * ps >= TWO_GIB and len(path) >= 3, path
        path_late, leaf_late = _path_to_rowid(f, ps, roots["samples"], int(LATE[-1]))
        assert int(LATE[-1]) in _leaf_rowids(leaf_late)
        depth = {name: _index_depth(f, ps, roots[name]) for name in ("pcpid_idx", "pid_idx", "call_paths_parent_idx")}
    for name, (levels, top) in depth.items():
        assert levels >= 3 and (top - 1) * ps >= TWO_GIB, (name, levels, top)

    # calls and their page-written indexes: lookups through each index equal numpy's answer
    assert c.execute("SELECT COUNT(*), MIN(id), MAX(id) FROM calls").fetchone() == (N_CALLS + 1, 0, N_CALLS)
    ids = np.arange(1, N_CALLS + 1, dtype=np.int64)
    calls = _calls(cnames, ids)
    for key in (1, 4242, 49_999, int(calls["parent_call_path_id"][-1])):
        got = [r[0] for r in c.execute("SELECT id FROM calls INDEXED BY pcpid_idx WHERE parent_call_path_id = ? "
                                       "ORDER BY id", (key,))]
        assert got == ids[calls["parent_call_path_id"] == key].tolist(), key
    for key in (1, 333_333, N_CALLS // 3):
        got = [r[0] for r in c.execute("SELECT id FROM calls INDEXED BY pid_idx WHERE parent_id = ?", (key,))]
        assert sorted(got) == ids[calls["parent_id"] == key].tolist(), key
    assert c.execute("SELECT COUNT(*) FROM calls INDEXED BY pid_idx WHERE parent_id > 0").fetchone() == (N_CALLS - 2,)
    row = c.execute(f"SELECT {', '.join(cnames)} FROM calls WHERE id = ?", (N_CALLS,)).fetchone()
    assert row == tuple(int(calls[n][-1]) for n in cnames)
    # call paths (index built by SQLite after the splice), overflowing text, a held-back sample
    assert c.execute("SELECT COUNT(*) FROM call_paths INDEXED BY call_paths_parent_idx WHERE parent_id = 777"
                     ).fetchone() == (5,)
    assert c.execute("SELECT name FROM symbols WHERE id = 40").fetchone() == (_long_name(40),)
    assert c.execute("SELECT length(long_name) FROM dsos WHERE id = 1").fetchone() == (9001,)
    assert c.execute("SELECT COUNT(*) FROM context_switches INDEXED BY context_switches_cpu_time_idx "
                     "WHERE cpu = 3").fetchone() == (625,)
    c.close()
    with capsys.disabled():
        print(f"\n{size / (1 << 30):.2f} GiB ({size // ps} pages of {ps}): written and checked in {written:.0f} s "
              f"(integrity_check {checked:.0f} s); samples leaf path {path}, held-back row's {path_late}; "
              f"index levels {depth}")


def test_deep_trees_at_the_smallest_page_size(tmp_path, monkeypatch):
    """512-byte pages: table and page-written index B-trees four and more levels deep, index
    entries merged from many sorted runs; checked by the writer (the suite's switch) and read back."""
    monkeypatch.setattr(sqlite_writer, "INDEX_RUN_ROWS", 1 << 13)
    db = tmp_path / "deep.db"
    n = 60_000
    ids = np.arange(1, n + 1, dtype=np.int64)
    with open_writer(str(db), mode="btree", page_size=512) as w:
        assert w.verify and w.mode == "btree"
        names, cnames = w.columns("samples"), w.columns("calls")
        for start in range(0, n, 5_000):
            w.write_samples(_samples(names, ids[start:start + 5_000]))
            w.write_calls(_calls(cnames, ids[start:start + 5_000]))
        w._drain()  # (the index keys are collected by the table's thread)
        assert len(w._index_runs["pcpid_idx"].runs) >= 5  # merged when the index is laid down
    c = sqlite3.connect(db)
    roots = dict(c.execute("SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0"))
    with open(db, "rb") as f:
        for table in ("samples", "calls"):
            path, leaf = _path_to_rowid(f, 512, roots[table], n)
            assert len(path) >= 4 and n in _leaf_rowids(leaf), (table, path)
        for name in ("pcpid_idx", "pid_idx"):
            assert _index_depth(f, 512, roots[name])[0] >= 4, name
    calls = _calls(cnames, ids)
    for key in (3, 4242, int(calls["parent_call_path_id"][-1])):
        got = [r[0] for r in c.execute("SELECT id FROM calls INDEXED BY pcpid_idx WHERE parent_call_path_id = ?",
                                       (key,))]
        assert got == ids[calls["parent_call_path_id"] == key].tolist(), key
    assert c.execute("SELECT id FROM calls INDEXED BY pid_idx WHERE parent_id = ?", (n // 3,)).fetchall() == \
        [(i,) for i in range(n // 3 * 3, min(n, n // 3 * 3 + 2) + 1)]
    want = _samples(names, ids[-1:])
    assert c.execute(f"SELECT {', '.join(names)} FROM samples WHERE id = ?", (n,)).fetchone() == \
        tuple(int(want[x][0]) for x in names)
