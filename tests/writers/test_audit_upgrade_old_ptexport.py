"""Issue #5 item 7: ``ptexport upgrade DB`` on a database written by an *older ptexport*.

tests/writers/test_export_perf_compat.py upgrades perf's own databases; here an older ptexport
(commit fa9fe8d: migrations 0001-0005, before the VM tables of 0006) exports a generated trace, and
after ``ptexport upgrade`` the database has exactly the schema of a current export (tables, columns
in order, views, indexes), the same rows in every table both versions fill, and its new views run.
Done on SQLite and PostgreSQL.  The old tree is extracted with ``git archive`` into a cache under
/tmp (numba's compiled functions are cached beside it: the first run compiles, ~1 min).
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ptxtest import REPO
from ptexport.cli import main

OLD = "fa9fe8d"
CACHE = Path("/tmp/ptexport-audit-old") / OLD
PG = "postgresql://postgres@127.0.0.1:5432"
# written by both versions, with the same meaning (the old version predates context_switches.vcpu)
SAME_ROWS = ["machines", "threads", "comms", "comm_threads", "dsos", "symbols", "selected_events", "samples",
             "calls", "call_paths", "branch_types", "decode_errors", "vcpus", "stats"]


def _old_tree() -> Path:
    if not (CACHE / "ptexport").exists():
        if shutil.which("git") is None or not (REPO / ".git").exists():
            pytest.skip("needs the git history of the repository")
        tmp = CACHE.with_name(f"{OLD}.tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", OLD, "ptexport", "migrations"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        os.replace(tmp, CACHE)
    return CACHE


def _old_export(trace: Path, db: str) -> None:
    old = _old_tree()
    env = dict(os.environ, PYTHONPATH=str(old), PTEXPORT_MIGRATIONS=str(old / "migrations"))
    r = subprocess.run([sys.executable, "-c", "from ptexport.cli import entry; entry()", str(trace), "--db", db, "-q"],
                       capture_output=True, text=True, timeout=900, env=env, cwd=str(old))
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--branches", "20000",
                 "--seed", "2"], out=io.StringIO()) == 0
    return d / "perf.data"


def _sqlite_schema(path) -> tuple[set, dict]:
    c = sqlite3.connect(path)
    objs = {(t, n) for t, n in c.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
    cols = {n: [r[1] for r in c.execute(f"PRAGMA table_info({n})")] for t, n in objs if t in ("table", "view")}
    return objs, cols


def _rows(c, table: str, cols: list[str]) -> list[tuple]:
    return list(c.execute(f"SELECT {','.join(chr(34) + x + chr(34) for x in cols)} FROM {table} ORDER BY 1"))


@pytest.mark.slow
def test_upgrade_of_an_older_ptexport_sqlite_database(trace, tmp_path):
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    _old_export(trace, str(old))
    assert main([str(trace), "--db", str(new), "-q"], out=io.StringIO()) == 0
    before, _ = _sqlite_schema(old)
    assert ("table", "vm_exits") not in before  # really an older schema
    out = io.StringIO()
    assert main(["upgrade", str(old)], out=out) == 0
    assert "0006_vm_tables" in out.getvalue()
    (o_objs, o_cols), (n_objs, n_cols) = _sqlite_schema(old), _sqlite_schema(new)
    assert o_objs == n_objs
    assert o_cols == n_cols
    co, cn = sqlite3.connect(old), sqlite3.connect(new)
    for t in SAME_ROWS:
        assert _rows(co, t, o_cols[t]) == _rows(cn, t, n_cols[t]), t
    for (v,) in co.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        co.execute(f"SELECT * FROM {v} LIMIT 5").fetchall()  # every view runs on the upgraded database
    # and is defined as today's (older versions gave e.g. calls_view flags as text)
    views = "SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name"
    assert co.execute(views).fetchall() == cn.execute(views).fetchall()
    for v in ("calls_view", "context_switches_view"):
        assert co.execute(f"SELECT * FROM {v} ORDER BY id").fetchall() == cn.execute(f"SELECT * FROM {v} ORDER BY id").fetchall()
    assert co.execute("SELECT COUNT(*) FROM timeline_view").fetchone()[0] > 0
    assert [r[0] for r in co.execute("SELECT name FROM ptexport_migrations ORDER BY name")] == \
           [r[0] for r in cn.execute("SELECT name FROM ptexport_migrations ORDER BY name")]
    # a second upgrade has nothing to do
    out = io.StringIO()
    assert main(["upgrade", str(old)], out=out) == 0 and "up to date" in out.getvalue()


@pytest.mark.slow
@pytest.mark.postgres
def test_upgrade_of_an_older_ptexport_postgres_database(trace):
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(f"{PG}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL server: {e}")
    old, new = f"ptx_audit_old_{uuid.uuid4().hex[:8]}", f"ptx_audit_new_{uuid.uuid4().hex[:8]}"

    def schema(name):
        with psycopg.connect(f"{PG}/{name}") as c:
            cols = c.execute("SELECT table_name, column_name FROM information_schema.columns "
                             "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position").fetchall()
            idx = c.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1").fetchall()
            views = c.execute("SELECT viewname, definition FROM pg_views WHERE schemaname = 'public' "
                              "ORDER BY 1").fetchall()
            return cols, idx, views

    try:
        _old_export(trace, f"{PG}/{old}")
        assert main([str(trace), "--db", f"{PG}/{new}", "-q"], out=io.StringIO()) == 0
        assert "vm_exits_view" not in dict(schema(old)[2])
        assert main(["upgrade", f"{PG}/{old}"], out=io.StringIO()) == 0
        assert schema(old) == schema(new)
        with psycopg.connect(f"{PG}/{old}") as co, psycopg.connect(f"{PG}/{new}") as cn:
            for t in ("samples", "calls", "call_paths", "threads", "symbols"):
                q = f"SELECT * FROM {t} ORDER BY 1"
                assert co.execute(q).fetchall() == cn.execute(q).fetchall(), t
            assert co.execute("SELECT COUNT(*) FROM timeline_view").fetchone()[0] > 0
    finally:
        for name in (old, new):
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
