"""The direct B-tree path of the SQLite writer: valid files, the same rows as SQLite's own INSERT."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from dbdump import sqlite_dump

from ptexport.writers import _btree
from ptexport.errors import PtExportError
from ptexport.writers import open_writer

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


def _check_pending_page_skipped(tmp_path, monkeypatch, page: int, rows: int) -> None:
    """The page holding the 1 GiB lock byte is never used; pretend it is page ``page``, among the
    samples leaves: no B-tree uses it, it is all zero, its neighbours are samples leaves."""
    monkeypatch.setattr(_btree, "PENDING_BYTE", (page - 1) * 4096 + 100)
    batches = [np.arange(1, rows)]
    _write(tmp_path / "b.db", "btree", batches)
    _write(tmp_path / "s.db", "executemany", batches)
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")
    c = sqlite3.connect(tmp_path / "b.db")
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert c.execute("PRAGMA page_count").fetchone()[0] > page + 10
    used = dict(c.execute("SELECT pageno, name FROM dbstat WHERE pageno BETWEEN ? AND ?", (page - 1, page + 1)))
    assert used == {page - 1: "samples", page + 1: "samples"}
    assert (tmp_path / "b.db").read_bytes()[(page - 1) * 4096: page * 4096] == bytes(4096)


def test_pending_byte_page_is_skipped(tmp_path, monkeypatch):
    if _insert_range_works_in(tmp_path):  # the copying splice, not the adopting one (test below)
        monkeypatch.setattr(_btree, "_insert_range", lambda fd, offset, length: False)
    _check_pending_page_skipped(tmp_path, monkeypatch, 60, 6000)


def test_spool_files_are_removed_on_abort(tmp_path):
    with pytest.raises(RuntimeError):
        with open_writer(str(tmp_path / "x.db"), mode="btree") as w:
            w.write_samples({"id": np.arange(1, 1000)})
            raise RuntimeError
    assert list(tmp_path.iterdir()) == []


def _spliced_db(path, page_size, columns, rows):
    """Table ``t`` (``id`` and the integer ``columns``) and its index ``ti`` on all of ``columns``, both
    laid down by the page builders from ``rows`` (id first); returns the connection."""
    from pathlib import Path

    c = sqlite3.connect(path, isolation_level=None)
    c.execute(f"PRAGMA page_size = {page_size}")
    c.execute(f"CREATE TABLE t (id integer PRIMARY KEY, {', '.join(f'{x} bigint' for x in columns)})")
    c.execute(f"CREATE INDEX ti ON t ({', '.join(columns)})")
    roots = dict(c.execute("SELECT name, rootpage FROM sqlite_master"))
    c.close()
    assert _btree.check_file(path) == page_size
    sp = _btree.LeafSpool(Path(f"{path}.pages"), rows.shape[1], page_size)
    sp.reserve(int(rows[-1, 0]))
    sp.add(rows)
    _btree.splice(path, roots["t"], sp)
    sp.remove()
    _btree.splice_index(path, roots["ti"], page_size, rows[:, 1:], rows[:, 0])
    return sqlite3.connect(path)


def _index_db(tmp_path, n, page_size, keys):
    """A table of one key column, filled and indexed through the page builders."""
    ids = np.arange(1, n + 1, dtype=np.int64)
    return _spliced_db(tmp_path / f"ix{n}_{page_size}.db", page_size, ["k"], np.column_stack([ids, keys]))


@pytest.mark.slow
@pytest.mark.parametrize("page_size", [512, 1024])
def test_index_pages_are_valid_for_every_size_around_page_breaks(tmp_path, page_size):
    """Leaf/interior breaks, the last-entry edge case and several interior levels."""
    rng = np.random.default_rng(page_size)
    sizes = sorted({*range(1, 80), *rng.integers(80, 40000, 12).tolist(), 25000})
    for n in sizes:
        keys = rng.integers(-3, 1 << 40, n, dtype=np.int64)
        keys[rng.random(n) < 0.3] = 7  # many duplicates: entries then ordered by rowid
        c = _index_db(tmp_path, n, page_size, keys)
        assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)], n
        assert c.execute("SELECT COUNT(*) FROM t INDEXED BY ti WHERE k = 7").fetchone()[0] == int((keys == 7).sum())
        got = [r[0] for r in c.execute("SELECT k FROM t INDEXED BY ti WHERE k > -100 ORDER BY k, id")]
        assert got == sorted(keys.tolist())
        c.close()


@pytest.mark.parametrize("fields", [(0, 1), (1, 0), (-1, 300), (1 << 40, 2), (-(1 << 63), (1 << 62)),
                                    (5, 0, -(1 << 63), 77), (1, 1, 1), tuple(range(-6, 7))])
def test_index_record_matches_the_kernel(fields):
    cell = np.zeros(2 + 9 * len(fields), dtype=np.uint8)
    end = _btree._index_record(cell, 0, np.array([fields], np.int64), 0)
    assert bytes(cell[:end]) == _btree.index_record(fields)


def _paths_db(tmp_path, n, page_size, rng):
    """A call_paths-like table and its (parent_id, symbol_id, ip) index, both from pages."""
    ids = np.arange(1, n + 1, dtype=np.int64)
    cols = np.column_stack([ids, rng.integers(0, 5, n), rng.integers(0, 4, n),
                            rng.choice([0, 1, -(1 << 63), (1 << 63) - 1, -5, 1 << 40], n)])
    c = _spliced_db(tmp_path / f"cp{n}_{page_size}.db", page_size, ["parent_id", "symbol_id", "ip"], cols)
    return c, cols


@pytest.mark.parametrize("n", [1, 2, 3, 40, 900, 7000])
def test_multi_column_index_pages_are_what_sqlite_keeps(tmp_path, n):
    """Entries ordered by every key column (signed, as SQLite compares integers), then the rowid:
    integrity_check reads the index against the table, and a range scan through it sees the order."""
    c, cols = _paths_db(tmp_path, n, 512, np.random.default_rng(n))
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    got = c.execute("SELECT parent_id, symbol_id, ip, id FROM t INDEXED BY ti WHERE parent_id >= 0").fetchall()
    assert got == sorted(map(tuple, cols[:, [1, 2, 3, 0]].tolist()))
    want = int(((cols[:, 1] == 2) & (cols[:, 2] == 1)).sum())
    assert c.execute("SELECT COUNT(*) FROM t INDEXED BY ti WHERE parent_id = 2 AND symbol_id = 1").fetchone() == (want,)
    c.close()


@pytest.mark.parametrize("page_size", [512, 4096])
def test_index_entries_beyond_memory_go_to_sorted_runs_and_merge(tmp_path, monkeypatch, page_size):
    """More index entries than INDEX_RUN_ROWS: sorted runs in a file, merged block by block into the
    index pages (duplicate keys across runs, e.g. parent_call_path_id 0, ordered by rowid)."""
    from ptexport.writers import sqlite as sqlite_writer
    monkeypatch.setattr(sqlite_writer, "INDEX_RUN_ROWS", 700)
    batches = [np.arange(1, 2000), np.arange(2000, 2001), np.arange(2001, 6000), np.arange(6000, 6500)]
    w = _write(tmp_path / "b.db", "btree", batches, page_size=page_size)
    assert not list(tmp_path.glob("*.runs"))  # run files removed
    _write(tmp_path / "s.db", "executemany", batches, page_size=page_size)
    _check(tmp_path / "b.db")  # integrity_check compares every index entry with its table
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")
    c = sqlite3.connect(tmp_path / "b.db")
    assert {"pcpid_idx", "pid_idx"} <= w._built_indexes
    got = c.execute("SELECT parent_id, id FROM calls INDEXED BY pid_idx WHERE parent_id >= 0").fetchall()
    assert got == sorted([(0, 0)] + [(i // 2, i) for i in range(1, 6500)])  # row 0: the unknown call
    c.close()


def test_calls_returning_after_their_callees_stay_on_the_page_path(tmp_path):
    """Call ids are given at call time and rows come at return time: parents arrive late."""
    rng = np.random.default_rng(5)
    ids = np.arange(1, 20001)
    # emit in "return order": blocks of children first, then a few parents from earlier blocks
    order = []
    pending = []
    for block in np.array_split(ids, 40):
        parents, children = block[:3], block[3:]
        order.extend(rng.permutation(children).tolist())
        order.extend(pending)
        pending = parents.tolist()
    order.extend(pending)
    batches = [np.array(b) for b in np.array_split(np.array(order), 25)]
    w = _write(tmp_path / "b.db", "btree", batches)
    assert "calls" not in w._late and w.mode == "executemany"  # finished: everything spliced
    _write(tmp_path / "s.db", "executemany", batches)
    _check(tmp_path / "b.db")
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")


def test_too_many_late_rows_fall_back_to_sql(tmp_path, monkeypatch):
    from ptexport.writers import sqlite as sqlite_writer
    monkeypatch.setattr(sqlite_writer, "LATE_MAX_ROWS", 50)
    batches = [np.arange(1000, 2000), np.arange(1, 400), np.arange(400, 1000), np.arange(2000, 2100)]
    _write(tmp_path / "b.db", "btree", batches)
    _write(tmp_path / "s.db", "executemany", batches)
    _check(tmp_path / "b.db")
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_leaf_reader_reads_back_what_the_leaf_builder_wrote(page_size):
    """_read_leaves (LeafSpool.merge reads spooled pages back with it) inverts _build_leaves: every
    integer storage class, negatives, and trailing columns left out because they equal their
    DEFAULT."""
    rng = np.random.default_rng(page_size)
    n = 5000
    vals = _columns(rng, np.arange(1, n + 1))
    mat = np.stack([np.arange(1, n + 1) * 3, vals["ip"], vals["to_ip"], vals["branch_type"],
                    np.where(rng.random(n) < 0.5, 0, vals["ip"]), np.where(rng.random(n) < 0.5, 7, vals["to_ip"])], axis=1)
    has_def = np.array([False, False, False, False, True, True])
    defs = np.array([0, 0, 0, 0, 0, 7], dtype=np.int64)
    out = np.zeros(n * mat.shape[1] * 10 + page_size * 4, dtype=np.uint8)
    maxrow = np.zeros(n + 2, dtype=np.int64)
    pages = _btree._build_leaves(mat, page_size, out, maxrow, has_def, defs)
    assert _btree._page_cells(out, pages, page_size) == n
    got = np.zeros_like(mat)
    assert _btree._read_leaves(out, pages, page_size, defs, got) == n
    assert (got == mat).all()


def _late_batches(rng, n, open_calls):
    """Call ids in the order the rows of a deep trace come: most return in order, ``open_calls``
    (ids spread over the whole range, as the parents still open at the end got theirs when their
    first callee returned) come last, as the flush at the end returns them."""
    ids = np.arange(1, n + 1)
    late = np.sort(rng.choice(ids[:-1], open_calls, replace=False))  # (the last id comes in order)
    early = np.setdiff1d(ids, late)
    return [*np.array_split(early, 7), rng.permutation(late)]


@pytest.mark.parametrize("page_size", [512, 4096])
def test_calls_open_at_the_end_are_merged_into_the_spooled_pages(tmp_path, monkeypatch, page_size):
    """Many late rows (the calls still open at the end, flushed last with ids from their start): the
    spooled pages from the first late id on are read back and built again with them (not SQLite's
    inserts after the splice), their index entries too; the same rows and indexes as SQL.  The biggest
    table's merge runs first, here; the others' on a thread while the tables without one are spliced."""
    import threading

    from ptexport.writers import sqlite as sqlite_writer
    merges, threads = [], []
    real = _btree.LeafSpool.merge

    def merge(self, late):
        merges.append(len(late))
        threads.append(threading.current_thread().name)
        return real(self, late)

    monkeypatch.setattr(_btree.LeafSpool, "merge", merge)
    monkeypatch.setattr(sqlite_writer, "INDEX_RUN_ROWS", 3000)  # the late entries join runs spilled to a file
    through_sql = []
    insert_late = sqlite_writer.SqliteWriter._insert_late
    monkeypatch.setattr(sqlite_writer.SqliteWriter, "_insert_late",
                        lambda self, t: through_sql.extend(self._late.get(t, ())) or insert_late(self, t))
    batches = _late_batches(np.random.default_rng(page_size), 20000, 1500)
    _write(tmp_path / "b.db", "btree", batches, page_size=page_size)
    assert merges == [1500, 1500] and not through_sql  # samples and calls: merged, none through SQL
    assert sorted(t.split("_")[0] for t in threads) == ["MainThread", "ptexport-merge"]  # (either may be first)
    _write(tmp_path / "s.db", "executemany", batches, page_size=page_size)
    _check(tmp_path / "b.db")  # integrity_check: the pages, and each index against the table
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")
    assert not [p for p in tmp_path.iterdir() if p.name not in ("b.db", "s.db")]  # no spool or merge file left


def test_a_merge_failing_on_its_thread_fails_the_export_and_leaves_no_file(tmp_path, monkeypatch):
    """The error of a merge run beside the splices (the disk full while its pages are built again) is
    the export's; the spools, merge files and the temporary database are removed."""
    real = _btree.LeafSpool.merge
    calls = []

    def merge(self, late):
        calls.append(len(late))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(self, late)

    monkeypatch.setattr(_btree.LeafSpool, "merge", merge)
    with pytest.raises(PtExportError) as e:
        _write(tmp_path / "b.db", "btree", _late_batches(np.random.default_rng(1), 20000, 1500))
    assert "full" in str(e.value) or "space" in str(e.value)
    assert len(calls) == 2 and not list(tmp_path.iterdir())


def test_a_few_late_rows_before_a_big_table_go_through_sqlite(tmp_path, monkeypatch):
    """Where SQLite's inserts cost less than building the pages again (a few late rows with ids near
    the start of the table: every page after them would be rebuilt), the late rows go through SQL."""
    called = []
    real = _btree.LeafSpool.merge
    monkeypatch.setattr(_btree.LeafSpool, "merge", lambda self, late: called.append(len(late)) or real(self, late))
    batches = [np.arange(10, 20000), np.array([3, 5])]
    _write(tmp_path / "b.db", "btree", batches)
    assert not called
    _write(tmp_path / "s.db", "executemany", batches)
    _check(tmp_path / "b.db")
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")


def test_spool_merge_puts_rows_past_every_page_and_refuses_a_spooled_id(tmp_path):
    """LeafSpool.merge: rows with ids past the last spooled page (reserved, none spooled after them)
    go at the end; a late id that is spooled already is refused with the spool unchanged (SQLite
    then reports the duplicate)."""
    def spool(name):
        sp = _btree.LeafSpool(tmp_path / name, 3, 512)
        sp.add(np.stack([np.arange(1, 2001, 2), np.arange(1000), np.zeros(1000, np.int64)], axis=1))
        sp.close()
        return sp

    def rows(sp):
        data = np.frombuffer(sp.path.read_bytes(), dtype=np.uint8)
        out = np.zeros((_btree._page_cells(data, sp.npages, 512), 3), dtype=np.int64)
        _btree._read_leaves(data, sp.npages, 512, sp.defs, out)
        return out

    sp = spool("a.spool")
    late = np.array([[2, -1, 5], [1998, -2, 6], [5000, -3, 1 << 40]], dtype=np.int64)
    assert sp.merge(late)
    got = rows(sp)
    assert got[:, 0].tolist() == sorted(list(range(1, 2001, 2)) + [2, 1998, 5000])
    assert got[got[:, 0] == 5000].tolist() == [[5000, -3, 1 << 40]]
    assert sp.rows == 1003 and sp.npages == len(np.concatenate(sp.maxrows))
    assert np.concatenate(sp.maxrows)[-1] == 5000
    sp.remove()
    sp = spool("b.spool")
    before, pages = sp.path.read_bytes(), sp.npages
    assert not sp.merge(np.array([[4, 0, 0], [7, 0, 0]], dtype=np.int64))  # 7 is spooled
    assert sp.path.read_bytes() == before and sp.npages == pages and sp.rows == 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.spool"]
    sp.remove()


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_table_interior_kernel_writes_the_python_pages(page_size):
    """The compiled interior-page builder lays down the same bytes as _interior_page, group by group."""
    rng = np.random.default_rng(page_size)
    fanout = (page_size - 12) // (2 + 4 + 9)
    for n in (2, fanout, fanout + 1, 3 * fanout + 1):
        keys = np.cumsum(rng.integers(1, 1 << 40, n)).astype(np.int64)
        keys[: n // 3] = np.arange(n // 3)  # one-byte varints too
        pgnos = rng.integers(2, 1 << 31, n).astype(np.int64)
        starts = _btree._group_starts(n, fanout)
        groups = _btree._groups(list(zip(pgnos.tolist(), keys.tolist())), fanout)
        assert [len(g) for g in groups] == np.diff(starts).tolist()
        out = np.zeros((len(starts) - 1) * page_size, dtype=np.uint8)
        _btree._build_table_interiors(pgnos, keys, starts, page_size, out)
        for g, items in enumerate(groups):
            assert bytes(out[g * page_size:(g + 1) * page_size]) == _btree._interior_page(page_size, items)


def test_splice_without_copy_file_range(tmp_path, monkeypatch):
    """Where the kernel cannot copy between the files, the leaves are copied through user space."""
    monkeypatch.delattr(_btree.os, "copy_file_range", raising=False)
    batches = [np.arange(1, 3000), np.arange(3000, 6000)]
    _write(tmp_path / "b.db", "btree", batches, page_size=512)
    _write(tmp_path / "s.db", "executemany", batches, page_size=512)
    _check(tmp_path / "b.db")
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")


def _insert_range_works_in(folder) -> bool:
    probe = folder / "probe"
    probe.write_bytes(bytes(2 * 65536))
    with open(probe, "r+b") as f:
        ok = _btree._insert_range(f.fileno(), 0, 65536)
    probe.unlink()
    return ok


@pytest.mark.parametrize("can_insert", [True, False])
def test_the_biggest_spool_becomes_the_file_instead_of_being_copied(tmp_path, monkeypatch, can_insert):
    """Where the file system opens a hole at a file's start (ext4, XFS), the database's pages are
    written in front of the biggest spool, which is renamed over the database; elsewhere the
    leaves are copied behind the database's pages. The same rows either way."""
    if can_insert and not _insert_range_works_in(tmp_path):
        pytest.skip(f"{tmp_path}: the file system has no FALLOC_FL_INSERT_RANGE")
    if not can_insert:
        monkeypatch.setattr(_btree, "_insert_range", lambda fd, offset, length: False)
    adopted = []
    real = _btree._adopt

    def spy(db_path, spool):
        pgnos = real(db_path, spool)
        adopted.append((spool.path.name.split(".")[-2], pgnos is not None))
        return pgnos

    monkeypatch.setattr(_btree, "_adopt", spy)
    batches = [np.arange(1, 20000), np.arange(20000, 30000)]
    _write(tmp_path / "b.db", "btree", batches)
    _write(tmp_path / "s.db", "executemany", batches)
    _check(tmp_path / "b.db")
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")
    # samples (the bigger spool) first: adopted where the file system can; calls then copied behind
    assert adopted == [("samples", can_insert), ("calls", False)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.db", "s.db"]


def test_adopted_spool_skips_the_pending_byte_page(tmp_path, monkeypatch):
    """The adopted spool's leaves cross the page: it becomes a hole of its own."""
    if not _insert_range_works_in(tmp_path):
        pytest.skip(f"{tmp_path}: the file system has no FALLOC_FL_INSERT_RANGE")
    _check_pending_page_skipped(tmp_path, monkeypatch, 100, 20000)


@pytest.mark.parametrize("run_rows", [700, 1 << 18])
def test_call_paths_index_from_runs_equals_sqlite_create_index(tmp_path, monkeypatch, run_rows):
    """call_paths (parent_id, symbol_id, ip) built as pages, from sorted runs merged field by field
    (equal parents and symbols across runs, addresses above 2**63) or in memory: the same database
    as SQLite's inserts and CREATE INDEX."""
    from ptexport.writers import sqlite as sqlite_writer
    monkeypatch.setattr(sqlite_writer, "INDEX_RUN_ROWS", run_rows)
    rng = np.random.default_rng(3)
    ids = np.arange(1, 6001)
    cols = {"id": ids, "parent_id": rng.integers(0, 6, ids.size), "symbol_id": rng.integers(0, 3, ids.size),
            "ip": rng.choice(np.array([0, 5, 0xFFFFFFFF81000000, 0x7F0000001000], np.uint64), ids.size)}
    for path, mode in ((tmp_path / "b.db", "btree"), (tmp_path / "s.db", "executemany")):
        with open_writer(str(path), mode=mode) as w:
            for part in np.array_split(np.arange(ids.size), 7):
                w.write_columns("call_paths", {k: v[part] for k, v in cols.items()})
        if mode == "btree":
            assert "call_paths_parent_idx" in w._built_indexes
    assert not list(tmp_path.glob("*.runs"))
    c = sqlite3.connect(tmp_path / "b.db")
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    got = c.execute("SELECT parent_id, symbol_id, ip, id FROM call_paths INDEXED BY call_paths_parent_idx"
                    " WHERE parent_id >= 0").fetchall()
    assert got == sorted(got) and len(got) == ids.size + 1  # with the unknown path, id 0
    c.close()
    assert sqlite_dump(tmp_path / "b.db") == sqlite_dump(tmp_path / "s.db")


@pytest.mark.parametrize("width", [1, 2, 3, 5])
@pytest.mark.parametrize("pieces", [1, 2, 7, 40])
@pytest.mark.parametrize("run_rows", [16, 4096])
def test_runs_merge_orders_as_sqlite_does(tmp_path, monkeypatch, width, pieces, run_rows):
    """The index runs' k-way merge (compiled, a heap of the runs, each read a buffer at a time):
    numpy's lexsort over every field (signed, the rowid last) is the oracle; equal keys across runs,
    empty and one-entry runs, the extremes of int64; buffers refilled many times over (a run of 300
    entries read 4 K at a time, or - INDEX_RUN_ROWS 16 - 16 at a time, with blocks of 16 handed on)."""
    from ptexport.writers import sqlite as sqlite_writer
    monkeypatch.setattr(sqlite_writer, "INDEX_RUN_ROWS", run_rows)
    monkeypatch.setattr(sqlite_writer, "RUN_BUFFER_MIN", 1)  # each run's buffer: run_rows // runs entries
    rng = np.random.default_rng(width * 100 + pieces)
    vals = np.array([-(1 << 63), -5, 0, 1, 2, 1 << 40, (1 << 63) - 1], np.int64)
    runs = sqlite_writer._IndexRuns(tmp_path / "x.runs")
    parts = []
    rowid = 0
    for p in range(pieces):
        n = int(rng.integers(0, 300)) if p % 3 else int(rng.integers(0, 2))
        keys = vals[rng.integers(0, vals.size, (n, width - 1))] if width > 1 else np.zeros((n, 0), np.int64)
        ent = np.column_stack([keys, rng.permutation(np.arange(rowid, rowid + n, dtype=np.int64))])
        rowid += n
        parts.append(ent)
        if n:
            runs.add(ent)
            runs._spill()  # one sorted run each
    everything = np.concatenate(parts)
    want = everything[np.lexsort(everything.T[::-1])]
    blocks = list(runs._merged()) if runs.runs else []
    assert all(len(b) <= run_rows for b in blocks)
    got = np.concatenate(blocks) if blocks else np.zeros((0, width), np.int64)
    assert np.array_equal(got, want)
    runs.remove()


def test_compiling_ahead_reaches_every_kernel_of_the_index_runs(tmp_path, monkeypatch):
    """precompile's warm-up of the runs (no shipped sample has an index that large) goes through the
    heap, the merge and the separators' records: a user's first large export compiles nothing."""
    from ptexport.writers import sqlite as sqlite_writer
    called = set()

    def spy(name, real):
        def call(*a):
            called.add(name)
            return real(*a)
        return call

    for name in ("_runs_heap", "_runs_merge", "index_records"):
        monkeypatch.setattr(_btree, name, spy(name, getattr(_btree, name)))
    sqlite_writer.warm_index_runs(tmp_path)
    assert called == {"_runs_heap", "_runs_merge", "index_records"}
    assert list(tmp_path.iterdir()) == []
