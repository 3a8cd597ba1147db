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


@pytest.mark.postgres
@pytest.mark.parametrize("unlogged", [False, True], ids=["logged", "unlogged-load"])
def test_parallel_streams_every_row_keys_logged(monkeypatch, unlogged):
    """The samples go through SAMPLE_STREAMS sessions in turn and the calls through one more; every row
    arrives, keys, indexes and statistics are built, has_calls is perf's rule, and every table is logged
    (also after an unlogged load, PTEXPORT_PG_UNLOGGED=1)."""
    import numpy as np
    import psycopg

    import ptexport.writers.postgres as pgw
    from ptexport.writers import open_writer
    from ptexport.writers.schema import load_schema

    admin = _pg()
    monkeypatch.setenv("PTEXPORT_PG_UNLOGGED", "1" if unlogged else "0")
    sessions: dict[str, set[int]] = {}
    real = pgw.PostgresWriter._copy_binary

    def spy(self, conn, table, chunks):
        sessions.setdefault(table, set()).add(conn.info.backend_pid)
        return real(self, conn, table, chunks)

    monkeypatch.setattr(pgw.PostgresWriter, "_copy_binary", spy)
    name = f"ptx_test_{uuid.uuid4().hex[:10]}"
    batches, per = 7, 1000
    try:
        with open_writer(f"{PG}/{name}") as w:
            w.write_rows("comms", [(1, "a", 1, 0, True, None), (2, "b", 2, 0, True, None)])
            for k in range(batches):
                ids = np.arange(k * per + 1, (k + 1) * per + 1, dtype=np.int64)
                w.write_samples({"id": ids, "time": ids * 10, "comm_id": np.full(per, 1)})
                w.write_calls({"id": np.arange(k * 10 + 1, k * 10 + 11), "comm_id": np.full(10, 2), "call_time": ids[:10]})
        assert len(sessions["samples"]) == pgw.SAMPLE_STREAMS >= 2
        assert len(sessions["calls"]) == 1 and not sessions["calls"] & sessions["samples"]
        with psycopg.connect(f"{PG}/{name}") as pg:
            n, total, lo, hi = pg.execute("SELECT count(*), sum(id), min(id), max(id) FROM samples").fetchone()
            m = batches * per
            assert (n, total, lo, hi) == (m + 1, m * (m + 1) // 2, 0, m)  # the id-0 row and every batch, once
            assert pg.execute("SELECT count(*) FROM calls").fetchone()[0] == batches * 10 + 1
            # comms.has_calls = perf's UPDATE ... WHERE id IN (SELECT DISTINCT comm_id FROM calls)
            assert pg.execute("SELECT id FROM comms WHERE has_calls ORDER BY id").fetchall() == \
                pg.execute("SELECT DISTINCT comm_id FROM calls ORDER BY 1").fetchall() == [(0,), (2,)]
            unlogged_tables = pg.execute("SELECT relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
                                         "WHERE s.nspname = 'public' AND c.relpersistence <> 'p'").fetchall()
            assert unlogged_tables == []
            sch = load_schema("postgresql")
            keys = {r[0] for r in pg.execute("SELECT c.conrelid::regclass::text FROM pg_constraint c JOIN pg_namespace s "
                                             "ON s.oid = c.connamespace WHERE s.nspname = 'public' AND c.contype = 'p'")}
            assert keys == {t for t in sch.tables if sch.primary_key_of(t)}
            indexes = {r[0] for r in pg.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
            assert set(sch.index_sql) <= indexes
            assert pg.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'samples'").fetchone()[0] > 0  # ANALYZE
            assert pg.execute("SELECT count(*) FROM samples_view").fetchone()[0] == m + 1  # the views are there
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
