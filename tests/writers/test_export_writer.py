"""The writers: rows, id conventions, fast and slow paths, SQLite == PostgreSQL, safety."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from dbdump import dump, sqlite_dump

from ptexport.errors import DatabaseExistsError, ExportError
from ptexport.jit import available as jit_available
from known_db import build_fixture_db
from ptexport.writers.model import ExportModel
from ptexport.writers.sqlite import SqliteWriter
from ptexport.writers import open_writer


def test_fixture_database_has_perfs_unknown_rows_and_our_extensions(fixture_sqlite):
    path, expected = fixture_sqlite
    c = sqlite3.connect(path)
    q = lambda s: c.execute(s).fetchall()  # noqa: E731
    assert q("SELECT * FROM machines ORDER BY id") == [(0, 0, "unknown"), (1, -1, ""), (2, 200, "/var/lib/guests/vm0")]
    assert q("SELECT * FROM threads WHERE id = 0") == [(0, 0, 0, -1, -1)]
    assert q("SELECT * FROM comms WHERE id = 0") == [(0, "unknown", 0, 0, 0, 1)]
    assert q("SELECT * FROM dsos WHERE id = 0") == [(0, 0, "unknown", "unknown", "")]
    assert q("SELECT * FROM symbols WHERE id = 0") == [(0, 0, 0, 0, 0, "unknown")]
    assert q("SELECT COUNT(*) FROM samples WHERE id > 0") == [(expected["samples"],)]
    # process_id is the main thread's id; a guest thread belongs to the guest machine
    assert q("SELECT tid, process_id, machine_id FROM threads WHERE pid = 100 ORDER BY tid") == [(100, 1, 1), (101, 1, 1)]
    assert q("SELECT host_or_guest FROM threads_view WHERE tid = 50") == [("guest",)]
    # kernel addresses are two's complement, hex views show them unsigned
    assert q("SELECT sym_start FROM symbols WHERE name = 'do_syscall_64'") == [(0xFFFFFFFF81000000 - (1 << 64),)]
    assert q("SELECT ip_hex FROM samples_view WHERE symbol = 'do_syscall_64'")[0][0].startswith("ffffffff81")
    # guest samples carry their VCPU and machine pid
    assert q("SELECT DISTINCT vcpu, machine_pid FROM samples WHERE machine_id = 2") == [(0, 200)]
    assert q("SELECT vcpu, host_tid, tsc_offset FROM vcpus_view WHERE id > 0") == [(0, 201, -123456789)]
    # every branch_type that occurs has a name, perf's 42 rows are always there
    assert q("SELECT COUNT(*) FROM samples WHERE branch_type NOT IN (SELECT id FROM branch_types)") == [(0,)]
    assert q("SELECT name FROM branch_types WHERE id = 4131") == [("vm exit (asynchronous)",)]
    assert q("SELECT COUNT(*) FROM branch_types") == [(43,)]
    # has_calls as perf sets it; schema version and migrations recorded
    assert q("SELECT comm FROM comms WHERE has_calls = 1 AND id > 0 ORDER BY id") == [("app",), ("gapp",)]
    assert q("SELECT version FROM schema_version") == [(1,)]
    assert len(q("SELECT name FROM ptexport_migrations")) >= 4
    assert q("PRAGMA integrity_check") == [("ok",)]
    # zone maps: one block here (ids < 1024), spanning the data
    assert q("SELECT * FROM samples_time_blocks") == q("SELECT 0, MIN(time), MAX(time) FROM samples WHERE id > 0")
    assert q("SELECT * FROM calls_time_blocks") == \
        q("SELECT 0, MIN(call_time), MAX(call_time), MAX(return_time) FROM calls WHERE id > 0")


def _write_small(target, **kw):
    m = ExportModel()
    with open_writer(str(target), **kw) as w:
        mid = m.machine(-1)
        t = m.thread(mid, 7, 7)
        m.comm("x", t, 0, True)
        m.flush(w)
        n = 1000
        w.write_samples({"id": np.arange(1, n + 1), "thread_id": np.full(n, t), "time": np.arange(n) * 3,
                         "ip": np.full(n, 0xFFFFFFFF81000010, dtype=np.uint64), "branch_type": np.full(n, 9),
                         "in_tx": np.zeros(n, dtype=bool)})
        w.write_columns("decode_errors", {"id": [1], "segment": [2], "offset": [0x40], "kind": ["bad_packet"],
                                          "message": ["bad"], "time": [5]})
        return w


def test_fast_and_executemany_paths_write_the_same_rows(tmp_path):
    w = _write_small(tmp_path / "fast.db")
    assert isinstance(w, SqliteWriter)
    _write_small(tmp_path / "slow.db", fast=False)
    assert sqlite_dump(tmp_path / "fast.db") == sqlite_dump(tmp_path / "slow.db")
    c = sqlite3.connect(tmp_path / "fast.db")
    assert c.execute("SELECT ip, vcpu, machine_pid, cpu FROM samples WHERE id = 5").fetchone() == \
        (0xFFFFFFFF81000010 - (1 << 64), -1, -1, -1)


def test_time_blocks_merge_across_batches_and_orders(tmp_path):
    target = tmp_path / "b.db"
    with open_writer(str(target)) as w:
        for ids in (np.arange(1, 1500), np.arange(2500, 3000), np.arange(1500, 2500)):  # last batch out of order
            w.write_samples({"id": ids, "time": ids * 10 + (ids % 7)})
            w.write_calls({"id": ids, "call_time": 5000 - ids, "return_time": 6000 + ids})
    c = sqlite3.connect(target)
    want = c.execute("SELECT id / 1024, MIN(time), MAX(time) FROM samples WHERE id > 0 GROUP BY 1").fetchall()
    assert c.execute("SELECT * FROM samples_time_blocks ORDER BY id").fetchall() == want
    want = c.execute("SELECT id / 1024, MIN(call_time), MAX(call_time), MAX(return_time) FROM calls"
                     " WHERE id > 0 GROUP BY 1").fetchall()
    assert c.execute("SELECT * FROM calls_time_blocks ORDER BY id").fetchall() == want
    assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_existing_database_is_never_overwritten_without_force(tmp_path):
    target = tmp_path / "t.db"
    target.write_bytes(b"precious")
    with pytest.raises(DatabaseExistsError, match="already exists"):
        open_writer(str(target))
    assert target.read_bytes() == b"precious"
    _write_small(target, force=True)
    assert sqlite3.connect(target).execute("SELECT COUNT(*) FROM samples").fetchone() == (1001,)


def test_error_inside_the_export_leaves_no_database(tmp_path):
    target = tmp_path / "t.db"
    with pytest.raises(RuntimeError):
        with open_writer(str(target)) as w:
            w.write_samples({"id": np.arange(1, 11)})
            raise RuntimeError("decoder blew up")
    assert list(tmp_path.iterdir()) == []
    # an existing database survives a failed --force export
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with open_writer(str(target), force=True) as w:
            raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.db"]


def test_bad_batches_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="no column"):
        with open_writer(str(tmp_path / "a.db")) as w:
            w.write_samples({"id": [1], "nonsense": [2]})
    with pytest.raises(ExportError, match="samples"):
        with open_writer(str(tmp_path / "b.db")) as w:
            w.write_samples({"id": [1, 1]})  # duplicate id
    ids = np.random.default_rng(3).permutation(np.arange(1, 100_001))
    ids[7] = 4321
    with pytest.raises(ExportError, match=r"writing calls: UNIQUE constraint failed: calls.id \(id 4321 twice\)"):
        with open_writer(str(tmp_path / "c.db")) as w:
            w.write_calls({"id": ids})  # out of order (the spool's thread sorts them), an id twice
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_postgres_has_the_same_rows_as_sqlite(fixture_sqlite, pg_url):
    import psycopg

    path, expected = fixture_sqlite
    url = pg_url()
    assert build_fixture_db(url) == expected
    with psycopg.connect(url) as c:
        pg = dump(c)
        keys = c.execute("SELECT COUNT(*) FROM information_schema.table_constraints "
                         "WHERE constraint_type = 'PRIMARY KEY' AND table_schema = 'public'").fetchone()[0]
        idx = {r[0] for r in c.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
        doc = c.execute("SELECT col_description('samples'::regclass, 22)").fetchone()[0]
    lite = sqlite_dump(path)
    assert sorted(pg) == sorted(lite)
    for t in lite:
        assert pg[t] == lite[t], t
    from ptexport.writers.schema import load_schema

    # every table with an id column (all but schema_version, ptexport_migrations)
    assert keys == len(load_schema("postgresql").primary_key_sql()) == len(lite) - 2
    assert {"pcpid_idx", "pid_idx"} <= idx
    assert "VCPU" in doc


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_existing_database_needs_force_and_failed_export_cleans_up(pg_url, pg_admin):
    url = pg_url()
    name = url.rsplit("/", 1)[1]
    _write_small(url)
    with pytest.raises(DatabaseExistsError):
        open_writer(url)
    with pytest.raises(RuntimeError):
        with open_writer(url, force=True) as w:
            w.write_samples({"id": np.arange(1, 5)})
            raise RuntimeError("boom")
    dbs = {r[0] for r in pg_admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (name[:30] + "%",))}
    assert dbs == {name}, "the temporary database is gone, the old one untouched"
    import psycopg

    with psycopg.connect(url) as c:
        assert c.execute("SELECT COUNT(*) FROM samples").fetchone() == (1001,)
    _write_small(url, force=True)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_undecodable_trace_still_gives_sideband_tables_and_its_decode_errors(tmp_path, backend, request):
    """No samples at all (nothing decoded): the database is complete, with sideband rows and the errors."""
    target = str(tmp_path / "s.db") if backend == "sqlite" else request.getfixturevalue("pg_url")()
    m = ExportModel()
    with open_writer(target) as w:
        mid = m.machine(-1)
        t = m.thread(mid, 5, 5)
        m.comm("app", t, 10, True)
        m.dso(mid, "/bin/app")
        m.flush(w)
        w.write_rows("context_switches", [(1, mid, 100, 0, t, 1, 0, 0, 1)])
        w.write_rows("decode_errors", [(1, 0, 0x10, "nosync", "no PSB in the AUX data", 100, 0, 0, 0, 0)])
        w.write_rows("stats", [(1, "decode_errors", -1, 1, "error", "rows in decode_errors")])
    if backend == "sqlite":
        c = sqlite3.connect(target)
    else:
        import psycopg

        c = psycopg.connect(target)
    assert c.execute("SELECT COUNT(*) FROM samples").fetchone() == (1,)  # the id-0 row only
    assert c.execute("SELECT tid FROM threads WHERE id > 0").fetchall() == [(5,)]
    assert c.execute("SELECT kind, message FROM decode_errors").fetchall() == [("nosync", "no PSB in the AUX data")]
    assert c.execute("SELECT COUNT(*) FROM schema_version").fetchone() == (1,)
    assert c.execute("SELECT COUNT(*) FROM samples_time_blocks").fetchone() == (0,)
    c.close()


def test_many_integer_rows_go_in_as_columns_with_the_same_values(tmp_path):
    """write_rows of many all-integer payload rows takes the column path: the same rows as one by one."""
    psb = [(i, (i * 7919) << 20) for i in range(1, 700)]
    pwre = [(i, i % 5, i % 3, bool(i & 1)) for i in range(1, 700)]
    ptwrite = [(i, (1 << 64) - i if i % 2 else i, True) for i in range(1, 700)]  # uint64: the row path
    dumps = []
    for name, step in (("cols", 1000), ("rows", 100)):
        db = tmp_path / f"{name}.sqlite"
        with open_writer(str(db)) as w:
            for table, rows in (("psb", psb), ("pwre", pwre), ("ptwrite", ptwrite)):
                for k in range(0, len(rows), step):
                    w.write_rows(table, rows[k:k + step])
        dumps.append(sqlite_dump(db))
    assert dumps[0] == dumps[1]
    c = sqlite3.connect(tmp_path / "cols.sqlite")
    assert c.execute("SELECT count(*), sum(hw), typeof(hw) FROM pwre WHERE id > 0").fetchone() == (699, 350, "integer")
    assert c.execute("SELECT payload FROM ptwrite WHERE id = 1").fetchone() == (-1,)
    c.close()


@pytest.mark.parametrize("n_psb", [700, 70_000])
def test_planner_statistics_equal_a_full_analyze(tmp_path, monkeypatch, n_psb):
    """sqlite_stat1 as ANALYZE (analysis_limit 1000) writes it, also where a large table without an
    index is counted by the writer rather than read again (psb: no index; the samples' id-0 row counts)."""
    import ptexport.writers.sqlite as sqlite_writer

    monkeypatch.setattr(sqlite_writer, "ANALYZE_COUNTED_ROWS", 5000)
    db = tmp_path / "a.sqlite"
    with open_writer(str(db)) as w:
        ids = np.arange(1, n_psb + 1, dtype=np.int64)
        w.write_columns("psb", {"id": ids, "offset": ids << 12})
        sids = np.arange(1, 6001, dtype=np.int64)
        w.write_columns("samples", {"id": sids, "time": sids * 10, "cpu": sids % 2})
    c = sqlite3.connect(db)
    written = sorted(c.execute("SELECT tbl, idx, stat FROM sqlite_stat1").fetchall(), key=repr)
    c.execute("DELETE FROM sqlite_stat1")
    c.commit()
    c.execute("PRAGMA analysis_limit = 1000")
    c.execute("ANALYZE")
    analyzed = sorted(c.execute("SELECT tbl, idx, stat FROM sqlite_stat1").fetchall(), key=repr)
    c.close()
    assert written == analyzed
    assert ("samples", None, "6001") in written and ("psb", None, str(n_psb)) in written


@pytest.mark.skipif(not jit_available(), reason="numba is not loaded")
def test_time_blocks_compiled_equal_numpy():
    """The compiled zone-map pass (``_blocks.block_extents``) gives the numpy form's blocks and values:
    ids ascending, shuffled (calls: in the order they return), with id-0 rows, one row, blocks far
    apart (the numpy form then), and the calls' three statistics."""
    from ptexport.writers import base

    rng = np.random.default_rng(7)
    shuffled = rng.permutation(np.arange(3000, 9000))
    cases = [np.arange(1, 5000), shuffled, np.concatenate(([0, 0], shuffled[:700])), np.array([5]),
             np.array([0, 0]), np.array([3, 1 << 40, 7])]
    for ids in cases:
        for table in ("samples", "calls"):
            n = len(ids)
            cols = {"id": ids.astype(np.int64), "time": rng.integers(0, 1 << 50, n),
                    "call_time": rng.integers(-5, 1 << 40, n), "return_time": rng.integers(0, 1 << 40, n)}
            got, want = base.Writer.__new__(base.Writer), base.Writer.__new__(base.Writer)
            for w in (got, want):
                w._time_blocks = {t: {} for t in base.TIME_BLOCK_COLUMNS}
            compiled = base.block_extents(cols["id"], cols["time"], cols["time"], base.TIME_BLOCK_SHIFT)
            assert (compiled is None) == (ids.max() > 1 << 30), ids[:5]  # the numpy form only for the far blocks
            got._note_time_blocks(table, cols, n)
            orig = base.block_extents
            base.block_extents = lambda *a: None  # the numpy form
            try:
                want._note_time_blocks(table, cols, n)
            finally:
                base.block_extents = orig
            assert got._time_blocks == want._time_blocks, (table, ids[:5])
            assert all(isinstance(v, int) for vals in got._time_blocks[table].values() for v in vals)
