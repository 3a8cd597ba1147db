"""The direct B-tree path of the SQLite writer: valid files, the same rows as SQLite's own INSERT."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from dbdump import sqlite_dump

from ptexport.export import _btree
from ptexport.export.writer import open_writer

pytestmark = pytest.mark.skipif(not _btree.available(), reason="numba is not installed")


def _columns(rng, ids):
    k = ids.size
    big = rng.integers(-(1 << 63), (1 << 63) - 1, k, dtype=np.int64)
    pick = rng.integers(0, 8, k)
    # every integer storage class: 0, 1, 1/2/3/4/6/8-byte values, negatives
    vals = np.choose(pick, [np.zeros(k, np.int64), np.ones(k, np.int64), rng.integers(-128, 128, k),
                            rng.integers(-32768, 32768, k), rng.integers(-(1 << 23), 1 << 23, k),
                            rng.integers(-(1 << 31), 1 << 31, k), rng.integers(-(1 << 47), 1 << 47, k), big])
    return {"id": ids, "ip": vals, "to_ip": big, "time": ids * 1000 + 7, "branch_type": pick,
            "call_path_id": np.roll(vals, 1), "thread_id": rng.integers(0, 300, k)}


def _write(path, mode, batches, **kw):
    with open_writer(str(path), mode=mode, **kw) as w:
        if mode == "btree":
            assert w.mode == "btree"
        for ids in batches:
            rng = np.random.default_rng(int(ids[0]))
            w.write_samples(_columns(rng, ids))
            w.write_calls({"id": ids, "call_time": ids * 3, "return_time": ids * 3 + 2, "parent_id": ids // 2})
        return w


def _check(path):
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    # the index built by SQLite on the spliced table agrees with the table
    assert c.execute("SELECT COUNT(*) FROM calls WHERE parent_id = 7").fetchone() == (2,)
    c.close()


@pytest.mark.parametrize("page_size", [512, 4096])
def test_btree_path_writes_the_same_rows_as_sqlite_insert(tmp_path, page_size):
    batches = [np.arange(1, 4001), np.arange(4001, 4002), np.arange(4002, 9000)]
    _write(tmp_path / "b.db", "btree", batches, page_size=page_size)
    _write(tmp_path / "s.db", "executemany", batches, page_size=page_size)
    _check(tmp_path / "b.db")
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")
    c = sqlite3.connect(tmp_path / "b.db")
    assert c.execute("PRAGMA page_size").fetchone() == (page_size,)
    if page_size == 512:  # deep enough for three levels of interior pages
        assert c.execute("SELECT COUNT(*) FROM samples").fetchone()[0] > 33 * 33 * 2


def test_out_of_order_batch_is_spliced_then_continues_through_sql(tmp_path):
    batches = [np.arange(100, 200), np.arange(1, 100), np.arange(200, 300)]
    _write(tmp_path / "b.db", "btree", batches)
    _write(tmp_path / "s.db", "executemany", batches)
    _check(tmp_path / "b.db")
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")


def test_bind_path_matches_too(tmp_path):
    batches = [np.arange(1, 3000)]
    _write(tmp_path / "b.db", "bind", batches)
    _write(tmp_path / "s.db", "executemany", batches)
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")


def test_pending_byte_page_is_skipped(tmp_path, monkeypatch):
    """The page holding the 1 GiB lock byte is never used; pretend it is near the start."""
    monkeypatch.setattr(_btree, "PENDING_BYTE", 59 * 4096 + 100)  # page 60: among the samples leaves
    batches = [np.arange(1, 6000)]
    _write(tmp_path / "b.db", "btree", batches)
    _write(tmp_path / "s.db", "executemany", batches)
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")
    c = sqlite3.connect(tmp_path / "b.db")
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert c.execute("PRAGMA page_count").fetchone()[0] > 70
    # no B-tree uses page 60 and it is all zero; its neighbours are samples leaves
    used = dict(c.execute("SELECT pageno, name FROM dbstat WHERE pageno BETWEEN 59 AND 61"))
    assert used == {59: "samples", 61: "samples"}
    assert (tmp_path / "b.db").read_bytes()[59 * 4096: 60 * 4096] == bytes(4096)


def test_spool_files_are_removed_on_abort(tmp_path):
    with pytest.raises(RuntimeError):
        with open_writer(str(tmp_path / "x.db"), mode="btree") as w:
            w.write_samples({"id": np.arange(1, 1000)})
            raise RuntimeError
    assert list(tmp_path.iterdir()) == []
