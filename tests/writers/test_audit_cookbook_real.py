"""Issue #5 item 6: the README cookbook's SQL (docs/cookbook.md) on a real export, SQLite and PostgreSQL.

tests/writers/test_export_cookbook.py checks every query's answer on the hand-made fixture database; here
the same queries run on an export of a generated two-CPU trace with timing (CYC, for IPC) and overflows,
written into both backends: every query runs, gives the same rows on both, and the analysts' core queries
answer something (hottest functions, call paths, branch mix, IPC, decode errors).
"""

from __future__ import annotations

import io
import sqlite3
import uuid
from decimal import Decimal

import pytest

from ptexport.cli import main

from cookbook import cookbook_queries

PG = "postgresql://postgres@127.0.0.1:5432"
NON_EMPTY = {"self_time", "total_time", "call_paths", "branch_mix", "ipc", "decode_errors"}


def queries() -> dict[str, str]:
    return cookbook_queries()


def _norm(rows) -> list[tuple]:
    out = []
    for r in rows:
        t = []
        for v in r:
            if isinstance(v, Decimal):
                v = float(v)
            if isinstance(v, float):
                v = round(v, 6)
            t.append(v)
        out.append(tuple(t))
    return out


@pytest.mark.slow
@pytest.mark.postgres
def test_cookbook_on_a_real_export_same_on_both_backends(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(f"{PG}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL server: {e}")
    d = tmp_path / "t"
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--timing", "cyc", "--ovf", "2",
                 "--branches", "40000", "--seed", "6"], out=io.StringIO()) == 0
    lite, name = tmp_path / "x.db", f"ptx_audit_cook_{uuid.uuid4().hex[:10]}"
    assert main([str(d / "perf.data"), "--db", str(lite), "-q"], out=io.StringIO()) == 0
    try:
        assert main([str(d / "perf.data"), "--db", f"{PG}/{name}", "-q"], out=io.StringIO()) == 0
        qs = queries()
        assert NON_EMPTY <= set(qs)
        with sqlite3.connect(lite) as c, psycopg.connect(f"{PG}/{name}") as pg:
            for q, sql in sorted(qs.items()):
                mine = _norm(c.execute(sql).fetchall())
                theirs = _norm(pg.execute(sql).fetchall())
                assert mine == theirs, q
                if q in NON_EMPTY:
                    assert mine, f"{q} answers nothing on a real export"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
