"""docs/cookbook.md: every query runs on SQLite, PostgreSQL, DuckDB and Parquet (through DuckDB) and gives the
fixture's known answers."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from decimal import Decimal

import pytest

from cookbook import cookbook_queries
from known_db import build_fixture_db


def _norm(rows):
    return [tuple(float(v) if isinstance(v, Decimal) else v for v in r) for r in rows]


def check(name: str, rows: list[tuple], expected: dict) -> None:
    name = name.removesuffix("_raw")  # the raw form of a query over the aggregates: the same answer
    if name == "self_time":
        assert [(r[0], r[1]) for r in rows] == expected["self_time"]
    elif name == "total_time":
        assert [(r[0], r[1]) for r in rows] == expected["total_time"]
        assert dict((r[0], r[2]) for r in rows)["bar"] == 4
    elif name == "latency":
        assert [tuple(r) for r in rows] == expected["latency"]
    elif name == "cpu_timeline":
        assert [tuple(r[:5]) for r in rows] == expected["cpu_timeline"]
        for r in rows:
            assert r[5] == pytest.approx(r[3] / r[4], abs=0.0051)
    elif name == "call_paths":
        assert [(r[0], r[1]) for r in rows] == expected["call_paths"]
    elif name == "slow_calls":
        assert [(r[0], r[1]) for r in rows] == expected["slow_calls"]
        assert {r[4] for r in rows} == {100, 101}
    elif name == "samples_in_range":
        assert [tuple(r) for r in rows] == expected["samples_in_range"]
        assert sum(r[1] for r in rows) > 10
    elif name == "branch_mix":
        assert [tuple(r) for r in rows] == expected["branch_mix"]
    elif name == "ipc":
        got = {r[0]: r[1] for r in rows}
        want = dict(expected["ipc"])
        assert set(got) == set(want)
        for k in want:
            assert got[k] == pytest.approx(want[k], abs=0.0051), k
    elif name == "data_loss":
        assert [(r[0], r[3]) for r in rows] == [("lost_data", "data_loss"), ("overflows", "data_loss"),
                                                ("decode_errors", "error")]
    elif name == "decode_errors":
        assert [tuple(r) for r in rows] == [("bad_packet", 1, 2500), ("nosync", 1, 5900)]
    elif name == "vm_vcpu_on_cpu":  # VCPU 0 of guest 200 (thread 201) switched in last on cpu 0, not in the guest
        assert [tuple(r) for r in rows] == [(200, 0, 200, 201, "host")]
    elif name == "vm_guest_call_graph":  # the guest's calls only (its gmain -> gwork)
        assert [tuple(r) for r in rows] == [(200, "gmain", 1, 800), (200, "gmain/gwork", 1, 600)]
    elif name in ("vm_exit_host_time", "vm_timeline"):  # no VM exits, no events at those times: see tests/dbexport/test_vm_export_queries.py
        assert rows == []
    else:  # pragma: no cover
        raise AssertionError(f"no expected answer for cookbook query {name!r}: add one here")


QUERIES = cookbook_queries()
#: the queries over the aggregates (call_path_stats, symbol_stats, cpu_time_stats) that have a raw form
PAIRS = sorted(n.removesuffix("_raw") for n in QUERIES if n.endswith("_raw"))


def test_every_aggregate_query_has_its_raw_form():
    uses = {n for n, sql in QUERIES.items() if re.search(r"\b(call_path|symbol|sample|cpu_time)_stats\b", sql)}
    assert uses == set(PAIRS) and len(PAIRS) >= 8
    for n in PAIRS:
        assert not re.search(r"_stats\b", QUERIES[f"{n}_raw"])


def same_as_raw(execute, name: str) -> None:
    """The query over the aggregates gives exactly the rows of its raw form over calls / samples."""
    got, raw = _norm(execute(QUERIES[name])), _norm(execute(QUERIES[f"{name}_raw"]))
    assert got == raw and got, name


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_cookbook_on_sqlite(name, fixture_sqlite):
    path, expected = fixture_sqlite
    with sqlite3.connect(path) as c:
        check(name, _norm(c.execute(QUERIES[name]).fetchall()), expected)


#: sqlite_stat1 of the 48 M-sample benchmark export (bench/bench_cookbook.py --branches 48M --program calls):
#: the planner's view of a big database, where an index built on the fly over all samples looks cheap to it
BIG_STATS = [
    ("context_switches", "context_switches_cpu_time_idx", "2 2 1"), ("calls_time_blocks", None, "14571"),
    ("symbols", None, "22"), ("dsos", None, "2"), ("branch_types", None, "42"), ("threads", None, "3"),
    ("machines", None, "2"), ("selected_events", None, "4"), ("samples", None, "48098410"),
    ("call_paths", "call_paths_parent_idx", "51 2 1 1"), ("cbr", None, "1"), ("comms", None, "3"),
    ("calls", "pid_idx", "25071378 501"), ("calls", "pcpid_idx", "16179696 201"), ("vcpus", None, "1"),
    ("psb", None, "98161"), ("samples_time_blocks", None, "46972"), ("comm_threads", "comm_threads_comm_idx", "2 1 1")]
#: the queries that read a time window of samples or calls through their time blocks
WINDOWED = {"samples_in_range": "samples", "vm_timeline": "samples", "slow_calls": "calls"}


@pytest.mark.parametrize("name", sorted(WINDOWED))
def test_windowed_queries_keep_to_the_blocks_on_a_big_sqlite_database(name, fixture_sqlite, tmp_path):
    """On the benchmark's statistics SQLite still reads the window's blocks and then their ids (a
    rowid range), never all rows: the first vm_timeline took 88 s at 48 M samples that way (an
    automatic index over samples.cpu; 1.5 ms at 5 M samples without statistics), and the joins
    written plainly had SQLite index all samples / calls by thread for the query."""
    db = tmp_path / "big.sqlite"
    db.write_bytes(Path(fixture_sqlite[0]).read_bytes())
    with sqlite3.connect(db) as c:
        c.execute("ANALYZE")
        c.execute("DELETE FROM sqlite_stat1")
        c.executemany("INSERT INTO sqlite_stat1 VALUES (?, ?, ?)", BIG_STATS)
    with sqlite3.connect(db) as c:
        plan = [r[3] for r in c.execute("EXPLAIN QUERY PLAN " + QUERIES[name])]
    assert not [p for p in plan if "AUTOMATIC" in p], plan
    table = WINDOWED[name]
    reads = [p for p in plan if p.split()[1:2] and p.split()[1] in (table, {"samples": "sm", "calls": "c"}[table])]
    assert reads and all("INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in p for p in reads), plan


@pytest.mark.parametrize("name", PAIRS)
def test_aggregates_equal_raw_on_sqlite(name, fixture_sqlite):
    with sqlite3.connect(fixture_sqlite[0]) as c:
        same_as_raw(lambda sql: c.execute(sql).fetchall(), name)


@pytest.fixture(scope="module")
def fixture_pg(pg_admin):
    import uuid

    from exporttest import PG_BASE

    name = f"ptx_cookbook_{uuid.uuid4().hex[:10]}"
    url = f"{PG_BASE}/{name}"
    expected = build_fixture_db(url)
    yield url, expected
    pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_cookbook_on_postgresql(name, fixture_pg):
    import psycopg

    url, expected = fixture_pg
    with psycopg.connect(url) as c:
        check(name, _norm(c.execute(QUERIES[name]).fetchall()), expected)


@pytest.mark.postgres
@pytest.mark.parametrize("name", PAIRS)
def test_aggregates_equal_raw_on_postgresql(name, fixture_pg):
    import psycopg

    with psycopg.connect(fixture_pg[0]) as c:
        same_as_raw(lambda sql: c.execute(sql).fetchall(), name)


@pytest.fixture(scope="module")
def fixture_duckdb(tmp_path_factory):
    pytest.importorskip("duckdb")
    path = tmp_path_factory.mktemp("fixture_duckdb") / "fixture.duckdb"
    expected = build_fixture_db(str(path))
    return path, expected


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_cookbook_on_duckdb(name, fixture_duckdb):
    import duckdb

    path, expected = fixture_duckdb
    with duckdb.connect(str(path), read_only=True) as c:
        check(name, _norm(c.execute(QUERIES[name]).fetchall()), expected)


@pytest.mark.parametrize("name", PAIRS)
def test_aggregates_equal_raw_on_duckdb(name, fixture_duckdb):
    import duckdb

    with duckdb.connect(str(fixture_duckdb[0]), read_only=True) as c:
        same_as_raw(lambda sql: c.execute(sql).fetchall(), name)


@pytest.fixture(scope="module")
def fixture_parquet(tmp_path_factory):
    pytest.importorskip("duckdb")
    path = tmp_path_factory.mktemp("fixture_parquet") / "fixture"
    expected = build_fixture_db(f"parquet:{path}")
    return path, expected


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_cookbook_on_parquet(name, fixture_parquet):
    """The Parquet directory read through DuckDB (ptexport.writers.parquet.open_parquet: a view per table)."""
    from ptexport.writers.parquet import open_parquet

    path, expected = fixture_parquet
    c = open_parquet(path)
    try:
        check(name, _norm(c.execute(QUERIES[name]).fetchall()), expected)
    finally:
        c.close()


@pytest.mark.parametrize("name", PAIRS)
def test_aggregates_equal_raw_on_parquet(name, fixture_parquet):
    from ptexport.writers.parquet import open_parquet

    c = open_parquet(fixture_parquet[0])
    try:
        same_as_raw(lambda sql: c.execute(sql).fetchall(), name)
    finally:
        c.close()
