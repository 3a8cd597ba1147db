"""The same export into PostgreSQL gives the same rows as into SQLite."""

from __future__ import annotations

import io
import os
import sqlite3
import uuid

import pytest

from ptexport.cli import main

PG = os.environ.get("PTEXPORT_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
TABLES = ["machines", "threads", "comms", "comm_threads", "dsos", "symbols", "selected_events", "samples",
          "calls", "call_paths", "context_switches", "branch_types", "decode_errors"]


def _pg():
    psycopg = pytest.importorskip("psycopg")
    try:
        return psycopg.connect(f"{PG}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL server at {PG}: {e}")


def _norm(v):
    if isinstance(v, bool):
        return int(v)
    if v == "":
        return None
    return v


def test_postgres_rows_equal_sqlite_rows(tmp_path):
    admin = _pg()
    name = f"ptx_test_{uuid.uuid4().hex[:10]}"
    trace = tmp_path / "t"
    assert main(["synth", "--out", str(trace), "--program", "calls", "--branches", "5000"], out=io.StringIO()) == 0
    lite = tmp_path / "x.db"
    assert main([str(trace / "perf.data"), "--db", str(lite), "-q"], out=io.StringIO()) == 0
    try:
        assert main([str(trace / "perf.data"), "--db", f"{PG}/{name}", "-q"], out=io.StringIO()) == 0
        import psycopg

        with psycopg.connect(f"{PG}/{name}") as pg:
            con = sqlite3.connect(lite)
            for table in TABLES:
                cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
                quoted = ",".join(f'"{c}"' for c in cols)  # "offset" is a keyword in PostgreSQL
                q = f"SELECT {quoted} FROM {table} ORDER BY id"
                mine = [tuple(_norm(v) for v in r) for r in con.execute(q)]
                theirs = [tuple(_norm(v) for v in r) for r in pg.execute(q)]
                assert theirs == mine, table
            n = pg.execute("SELECT count(*) FROM samples").fetchone()[0]
            assert n > 5000
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
