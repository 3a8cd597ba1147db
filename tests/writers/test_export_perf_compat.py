"""Compatibility with perf 6.1's export-to-sqlite.py, and `ptexport upgrade` of its databases."""

from __future__ import annotations

import io
import re
import shutil
import sqlite3

import pytest

from ptexport.cli import main
from ptexport.writers.branch_types import PERF_BRANCH_TYPES
from ptexport.writers.migrate import load_migrations
from ptexport.writers.schema import load_schema

from cookbook import cookbook_sql


def _objects(c: sqlite3.Connection, kind: str) -> set[str]:
    return {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


def _cols(c: sqlite3.Connection, name: str) -> list[str]:
    return [r[1] for r in c.execute(f"PRAGMA table_info({name})")]


@pytest.mark.perf  # perf's export-to-sqlite.py makes the database
def test_every_perf_table_and_view_has_the_same_columns_in_the_same_order(perf_db, fixture_sqlite):
    perf = sqlite3.connect(perf_db)
    ours = sqlite3.connect(fixture_sqlite[0])
    perf_tables = _objects(perf, "table")
    assert {"samples", "calls", "call_paths", "comms", "threads", "context_switches"} <= perf_tables
    for t in perf_tables:
        assert _cols(ours, t)[: len(_cols(perf, t))] == _cols(perf, t), t
    # perf drops views of empty tables; ours keeps every one of perf's views
    for v in _objects(perf, "view"):
        assert _cols(ours, v) == _cols(perf, v), v
    assert {"ptwrite_view", "power_events_view", "mwait_view", "pwre_view", "exstop_view", "pwrx_view"} <= \
        _objects(ours, "view")
    assert {"pcpid_idx", "pid_idx"} <= _objects(ours, "index")
    assert dict(perf.execute("SELECT id, name FROM branch_types")) == PERF_BRANCH_TYPES


@pytest.mark.perf  # perf's export-to-sqlite.py makes the database
def test_upgrade_of_a_perf_database_keeps_data_and_adds_the_extensions(perf_db, tmp_path):
    db = tmp_path / "perf.db"
    shutil.copy(perf_db, db)
    before = sqlite3.connect(db)
    perf_tables = sorted(_objects(before, "table"))
    old = {t: before.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in perf_tables}
    before.close()

    out = io.StringIO()
    assert main(["upgrade", str(db)], out) == 0
    assert re.findall(r"applied: (\S+)", out.getvalue())[:4] == [
        "0001_perf_tables", "0002_ptexport_tables", "0003_branch_type_names", "0004_indexes"]

    c = sqlite3.connect(db)
    for t in perf_tables:  # perf's columns keep their data, new ones trail
        n = len(old[t][0]) if old[t] else 0
        now = c.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
        assert [r[:n] for r in now] == old[t], t
    sch = load_schema("sqlite")
    for t in sch.tables:  # same layout as a database ptexport writes
        assert _cols(c, t) == sch.columns(t), t
    assert set(sch.view_sql) <= _objects(c, "view")
    assert set(sch.index_sql) <= _objects(c, "index")
    assert c.execute("SELECT DISTINCT vcpu, machine_pid FROM samples WHERE id > 0").fetchall() == [(-1, -1)]
    assert c.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
    # the zone maps agree with the data
    n_blocks, lo, hi = c.execute("SELECT COUNT(*), MIN(min_time), MAX(max_time) FROM samples_time_blocks").fetchone()
    assert (lo, hi) == c.execute("SELECT MIN(time), MAX(time) FROM samples WHERE id > 0").fetchone()
    assert n_blocks == c.execute("SELECT COUNT(DISTINCT id / 1024) FROM samples WHERE id > 0").fetchone()[0]
    assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    for v in _objects(c, "view"):
        c.execute(f"SELECT * FROM {v} LIMIT 5").fetchall()
    for sql in cookbook_sql():
        c.execute(sql).fetchall()
    c.close()

    out = io.StringIO()
    assert main(["upgrade", str(db)], out) == 0
    assert "already up to date" in out.getvalue()


@pytest.mark.perf  # perf's export-to-sqlite.py makes the database
def test_upgrade_adds_names_for_branch_types_perf_left_out(perf_db, tmp_path):
    db = tmp_path / "perf.db"
    shutil.copy(perf_db, db)
    c = sqlite3.connect(db)
    c.execute("UPDATE samples SET branch_type = 4131 WHERE id = 1")
    c.commit()
    c.close()
    assert main(["upgrade", str(db)], io.StringIO()) == 0
    c = sqlite3.connect(db)
    assert c.execute("SELECT branch_type_name FROM samples_view WHERE id = 1").fetchone() == ("vm exit (asynchronous)",)


def test_upgrade_refuses_what_is_not_an_export_database(tmp_path, capsys):
    bad = tmp_path / "x.db"
    bad.write_bytes(b"not sqlite at all, just text")
    assert main(["upgrade", str(bad)], io.StringIO()) != 0
    assert "not a SQLite database" in capsys.readouterr().err
    other = tmp_path / "o.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)")
    assert main(["upgrade", str(other)], io.StringIO()) != 0
    assert "not a perf or ptexport export database" in capsys.readouterr().err
    assert main(["upgrade", str(tmp_path / "missing.db")], io.StringIO()) == 2


@pytest.mark.parametrize("dry_run", [True, False])
def test_upgrade_of_a_damaged_file_is_one_error_line(fixture_sqlite, tmp_path, capsys, dry_run):
    db = tmp_path / "f.db"
    raw = bytearray(fixture_sqlite[0].read_bytes())
    raw[100:4096] = bytes(4096 - 100)  # the schema's page, past the header
    db.write_bytes(bytes(raw))
    assert main(["upgrade", *(["--dry-run"] if dry_run else []), str(db)], io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ptexport: error: {db}: ") and "malformed" in err and "Traceback" not in err
    assert db.read_bytes() == bytes(raw) and sorted(p.name for p in tmp_path.iterdir()) == ["f.db"]


def test_upgrade_of_a_current_database_changes_nothing(fixture_sqlite, tmp_path):
    db = tmp_path / "f.db"
    shutil.copy(fixture_sqlite[0], db)
    out = io.StringIO()
    assert main(["upgrade", "--dry-run", str(db)], out) == 0
    assert "already up to date" in out.getvalue()


@pytest.mark.perf  # perf's export-to-sqlite.py makes the database
@pytest.mark.postgres
def test_upgrade_of_a_perf_style_postgres_database(pg_url, perf_db):
    """A PostgreSQL database with perf's layout (no extensions) upgrades in one transaction."""
    import psycopg

    url = pg_url()
    name = url.rsplit("/", 1)[1]
    src = sqlite3.connect(perf_db)
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(url) as c:
        for t in ("selected_events", "machines", "threads", "comms", "samples", "branch_types"):
            cols = _cols(src, t)
            if t == "comms":
                cols = cols[:-1]  # perf's has_calls comes with calls
            types = ["text" if col in ("name", "root_dir", "comm") else "bigint" for col in cols]
            types = ["boolean" if col in ("exec_flag", "in_tx") else ty for col, ty in zip(cols, types)]
            c.execute(f"CREATE TABLE {t} ({', '.join(f'{a} {b}' for a, b in zip(cols, types))})")
            rows = src.execute(f"SELECT {', '.join(cols)} FROM {t}").fetchall()
            rows = [tuple(bool(v) if col in ("exec_flag", "in_tx") else v for col, v in zip(cols, r)) for r in rows]
            with c.cursor() as cur:
                cur.executemany(f"INSERT INTO {t} VALUES ({', '.join(['%s'] * len(cols))})", rows)
    assert main(["upgrade", url], io.StringIO()) == 0
    with psycopg.connect(url) as c:
        assert c.execute("SELECT COUNT(*) FROM samples").fetchone() == src.execute("SELECT COUNT(*) FROM samples").fetchone()
        assert c.execute("SELECT COUNT(*) FROM calls_view").fetchone() == (1,)
        assert c.execute("SELECT COUNT(*) FROM ptexport_migrations").fetchone() == (len(load_migrations()),)
        assert c.execute("SELECT DISTINCT vcpu FROM samples").fetchall() == [(-1,)]


@pytest.mark.perf  # perf's export-to-sqlite.py makes the database
def test_upgrade_of_a_perf_database_with_all_columns_and_no_calls(tmp_path, quipper):
    """perf's other layout: samples with period/weight/transaction_/data_src, no calls tables."""
    from exporttest import make_perf_db

    db = make_perf_db(tmp_path / "all.db", quipper, "all")
    c = sqlite3.connect(db)
    perf_cols = _cols(c, "samples")
    assert "period" in perf_cols and "calls" not in _objects(c, "table")
    n = c.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    c.close()
    assert main(["upgrade", str(db)], io.StringIO()) == 0
    c = sqlite3.connect(db)
    assert _cols(c, "samples") == perf_cols + ["vcpu", "machine_pid"]
    assert c.execute("SELECT COUNT(*) FROM samples").fetchone() == (n,)
    assert c.execute("SELECT COUNT(*) FROM calls").fetchone() == (1,)  # created, with its id-0 row
    assert {"calls_view", "call_paths_view", "samples_view"} <= _objects(c, "view")
    assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    for sql in cookbook_sql():
        c.execute(sql).fetchall()
