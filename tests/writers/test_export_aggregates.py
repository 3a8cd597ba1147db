"""The aggregates an export writes (call_path_stats, symbol_stats, sample_stats, cpu_time_stats: docs/export.md)
equal the GROUP BYs over perf's tables (ptexport/writers/aggregates.py) that `ptexport upgrade` and `convert`
run, on SQLite, PostgreSQL and DuckDB; an upgrade fills them for a database without them; --no-aggregates
leaves them empty."""

from __future__ import annotations

import io
import shutil
import sqlite3
import uuid

import pytest

from ptexport.cli import main
from ptexport.writers.aggregates import AGGREGATE_TABLES, aggregate_sql
from ptexport.writers.migrate import upgrade

TABLES = AGGREGATE_TABLES
#: generated traces: threads on two CPUs with preemption (CYC: cycle counts); fork+exec with corrupted trace
TRACES = {
    "threads": ("--program", "threads", "--cpus", "2", "--timing", "cyc", "--preempt", "200"),
    "forkexec-corrupt": ("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--timing", "cyc",
                         "--psb-period", "1024"),
}


RAW = {t: aggregate_sql(t) for t in TABLES}


def _export(trace, target, *extra):
    out = io.StringIO()
    assert main([trace, "--db", str(target), "-q", "--jobs", "1", *extra], out=out) == 0, out.getvalue()


def _rows(execute, table):
    return [tuple(int(v) for v in r) for r in execute(f"SELECT * FROM {table} ORDER BY id")]


@pytest.fixture(scope="module", params=sorted(TRACES))
def exported(request, synth_trace, tmp_path_factory):
    trace = str(synth_trace("--branches", "20000", "--seed", "11", *TRACES[request.param]) / "perf.data")
    db = tmp_path_factory.mktemp("agg") / "t.sqlite"
    _export(trace, db)
    return trace, db


def test_export_aggregates_equal_the_group_by_over_calls_and_samples(exported):
    _, db = exported
    with sqlite3.connect(db) as c:
        ex = lambda sql: c.execute(sql).fetchall()
        for table in TABLES:
            got = _rows(ex, table)
            assert got == [tuple(int(v) for v in r) for r in ex(RAW[table])], table
            assert got, table
        # the sums add up to the raw tables' totals
        assert ex("SELECT SUM(calls) FROM call_path_stats") == ex("SELECT COUNT(*) FROM calls WHERE id > 0")
        assert ex("SELECT SUM(samples) FROM cpu_time_stats") == ex("SELECT COUNT(*) FROM samples WHERE id > 0")
        assert ex("SELECT SUM(samples) FROM sample_stats") == ex("SELECT COUNT(*) FROM samples WHERE id > 0")
        # self time never exceeds total time, and somewhere a callee makes it smaller
        assert ex("SELECT COUNT(*) FROM call_path_stats WHERE self_ns > total_ns") == [(0,)]
        assert ex("SELECT COUNT(*) FROM call_path_stats WHERE self_ns < total_ns")[0][0] > 0


def test_no_aggregates_leaves_the_tables_empty(exported, tmp_path):
    trace, _ = exported
    db = tmp_path / "none.sqlite"
    _export(trace, db, "--no-aggregates")
    with sqlite3.connect(db) as c:
        for table in TABLES:
            assert c.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (0,), table
        assert c.execute("SELECT COUNT(*) FROM calls").fetchone()[0] > 1


def test_upgrade_fills_the_aggregates_of_an_older_sqlite_database(exported, tmp_path):
    _, db = exported
    old = tmp_path / "old.sqlite"
    shutil.copy(db, old)
    with sqlite3.connect(old) as c:
        want = {t: _rows(lambda sql: c.execute(sql).fetchall(), t) for t in TABLES}
        for t in TABLES:
            c.execute(f"DROP TABLE {t}")
        c.execute("DELETE FROM ptexport_migrations WHERE name = '0009_aggregates'")
    assert upgrade(str(old)) == ["0009_aggregates"]
    with sqlite3.connect(old) as c:
        for t in TABLES:
            assert _rows(lambda sql: c.execute(sql).fetchall(), t) == want[t], t
    assert upgrade(str(old)) == []  # re-runnable


@pytest.mark.postgres
def test_postgresql_export_and_upgrade(exported, pg_admin):
    import psycopg
    from exporttest import PG_BASE

    trace, db = exported
    name = f"ptx_agg_{uuid.uuid4().hex[:10]}"
    url = f"{PG_BASE}/{name}"
    try:
        _export(trace, url)
        with sqlite3.connect(db) as lite:
            want = {t: _rows(lambda sql: lite.execute(sql).fetchall(), t) for t in TABLES}
        with psycopg.connect(url, autocommit=True) as c:
            ex = lambda sql: c.execute(sql).fetchall()
            for t in TABLES:
                assert _rows(ex, t) == want[t], t
                assert [tuple(int(v) for v in r) for r in ex(RAW[t])] == want[t], t
            for t in TABLES:
                c.execute(f"DROP TABLE {t}")
            c.execute("DELETE FROM ptexport_migrations WHERE name = '0009_aggregates'")
        assert upgrade(url) == ["0009_aggregates"]
        with psycopg.connect(url) as c:
            for t in TABLES:
                assert _rows(lambda sql: c.execute(sql).fetchall(), t) == want[t], t
    finally:
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_duckdb_export_has_the_same_aggregates(exported, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    trace, db = exported
    duck = tmp_path / "t.duckdb"
    _export(trace, duck)
    with sqlite3.connect(db) as lite, duckdb.connect(str(duck), read_only=True) as c:
        for t in TABLES:
            assert _rows(lambda sql: c.execute(sql).fetchall(), t) == \
                _rows(lambda sql: lite.execute(sql).fetchall(), t), t


def test_convert_copies_the_aggregates(exported, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    _, db = exported
    duck = tmp_path / "c.duckdb"
    assert main(["convert", str(db), str(duck)], out=io.StringIO()) == 0
    with sqlite3.connect(db) as lite, duckdb.connect(str(duck), read_only=True) as c:
        for t in TABLES:
            assert _rows(lambda sql: c.execute(sql).fetchall(), t) == \
                _rows(lambda sql: lite.execute(sql).fetchall(), t), t


def test_reference_call_tree_gives_the_same_aggregates(exported, tmp_path, monkeypatch):
    """The export with the reference call tree (what runs without numba) writes the same aggregates."""
    from ptexport.calltree import threadstack, threadstack_compiled

    trace, db = exported
    monkeypatch.setattr(threadstack_compiled, "numba", None)  # make_call_tree falls back to the reference
    used = []
    take = threadstack.CallTree.take_stats
    monkeypatch.setattr(threadstack.CallTree, "take_stats", lambda self: used.append(self) or take(self))
    ref = tmp_path / "ref.sqlite"
    _export(trace, ref)
    assert len(used) == 1
    with sqlite3.connect(db) as fast, sqlite3.connect(ref) as slow:
        for t in TABLES:
            assert _rows(lambda sql: slow.execute(sql).fetchall(), t) == \
                _rows(lambda sql: fast.execute(sql).fetchall(), t), t


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_convert_computes_the_aggregates_a_source_lacks(exported, tmp_path, kind):
    """A database exported before the aggregates (a DuckDB one cannot be upgraded): convert computes them."""
    duckdb = pytest.importorskip("duckdb")
    _, db = exported
    with sqlite3.connect(db) as lite:
        want = {t: _rows(lambda sql: lite.execute(sql).fetchall(), t) for t in TABLES}
    old = tmp_path / f"old.{kind}"
    if kind == "sqlite":
        shutil.copy(db, old)
        conn = sqlite3.connect(old)
    else:
        assert main(["convert", str(db), str(old)], out=io.StringIO()) == 0
        conn = duckdb.connect(str(old))
    for t in TABLES:
        conn.execute(f"DROP TABLE {t}")
    conn.commit()
    conn.close()
    out = tmp_path / "new.sqlite"
    assert main(["convert", str(old), str(out)], out=io.StringIO()) == 0
    with sqlite3.connect(out) as c:
        for t in TABLES:
            assert _rows(lambda sql: c.execute(sql).fetchall(), t) == want[t], t
