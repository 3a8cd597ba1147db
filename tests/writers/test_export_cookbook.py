"""docs/cookbook.md: every query runs on SQLite, PostgreSQL, DuckDB and Parquet (through DuckDB) and gives the
fixture's known answers."""

from __future__ import annotations

import re
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from known_db import build_fixture_db

COOKBOOK = Path(__file__).resolve().parents[2] / "docs" / "cookbook.md"


def cookbook_queries() -> dict[str, str]:
    text = COOKBOOK.read_text(encoding="utf-8")
    queries = dict(re.findall(r"<!-- query: (\w+) -->\s*```sql\n(.*?)```", text, re.S))
    blocks = re.findall(r"```sql\n", text)
    assert len(queries) == len(blocks), "every SQL block in the cookbook is named and tested"
    return queries


def _norm(rows):
    return [tuple(float(v) if isinstance(v, Decimal) else v for v in r) for r in rows]


def check(name: str, rows: list[tuple], expected: dict) -> None:
    if name == "self_time":
        assert [(r[0], r[1]) for r in rows] == expected["self_time"]
    elif name == "total_time":
        assert [(r[0], r[1]) for r in rows] == expected["total_time"]
        assert dict((r[0], r[2]) for r in rows)["bar"] == 4
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


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_cookbook_on_sqlite(name, fixture_sqlite):
    path, expected = fixture_sqlite
    with sqlite3.connect(path) as c:
        check(name, _norm(c.execute(QUERIES[name]).fetchall()), expected)


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
