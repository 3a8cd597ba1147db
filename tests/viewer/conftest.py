"""Viewer test fixtures: the fixture database (SQLite, plain perf schema, PostgreSQL copy)
and a database written by perf's own export-to-sqlite.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixture_db  # noqa: E402

PERF_EXPORT = Path("/usr/lib/perf-core/scripts/python/export-to-sqlite.py")
PG_ADMIN = fixture_db.PG_ADMIN


@pytest.fixture(scope="session")
def fixture_path(tmp_path_factory) -> Path:
    return fixture_db.build(tmp_path_factory.mktemp("viewerdb") / "fixture.db")


@pytest.fixture(scope="session")
def plain_fixture_path(tmp_path_factory) -> Path:
    """The same rows in perf's plain schema: no ptexport additions, no has_calls column."""
    return fixture_db.build(tmp_path_factory.mktemp("viewerdb_plain") / "plain.db", extensions=False,
                            has_calls_column=False)


@pytest.fixture
def fixture_database(fixture_path):
    from ptexport_viewer.db import Database

    db = Database(fixture_path)
    yield db
    db.close()


@pytest.fixture(scope="session")
def perf_export_path(tmp_path_factory, quipper) -> Path:
    """A database written by perf 6.1's own export-to-sqlite.py from the quipper recording."""
    if shutil.which("perf") is None:
        pytest.skip("perf (Debian linux-perf) is not installed")
    if not PERF_EXPORT.exists():
        pytest.skip(f"{PERF_EXPORT} not found (Debian linux-perf)")
    out = tmp_path_factory.mktemp("perfexport") / "perf.db"
    # perf embeds the system Python and derives its prefix from the first python3 on PATH:
    # keep a virtualenv's or pyenv's interpreter out of its way so it finds Debian's PySide2.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(["/usr/bin", "/bin"] + [p for p in env.get("PATH", "").split(os.pathsep)
                                                          if "pyenv" not in p and "venv" not in p])
    env.pop("PYTHONHOME", None)
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(["perf", "script", "-i", str(quipper), "--itrace=bep", "-s", str(PERF_EXPORT),
                        str(out), "branches", "calls"], capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0 and "PySide2" in r.stderr:
        pytest.skip("perf's export-to-sqlite.py needs python3-pyside2.qtsql, which is not installed")
    if r.returncode != 0 or not out.exists():
        pytest.fail(f"perf export failed ({r.returncode}): {r.stderr[-2000:]}")
    return out


@pytest.fixture(scope="session")
def duckdb_path(tmp_path_factory) -> Path:
    """The fixture's rows in a DuckDB file (what ``ptexport TRACE --db X.duckdb`` writes)."""
    pytest.importorskip("duckdb_engine", reason="the viewer opens DuckDB through duckdb_engine (SQLAlchemy)")
    return fixture_db.copy_to_duckdb(tmp_path_factory.mktemp("viewerdb_duck") / "fixture.duckdb")


@pytest.fixture(scope="session")
def pg_url():
    """A uniquely named PostgreSQL database holding the fixture rows; dropped afterwards."""
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed")
    name = f"ptv_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3)
    except Exception as e:  # no server: skip with the reason
        pytest.skip(f"no PostgreSQL server at {PG_ADMIN}: {e}")
    admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0]
    url = f"{base}/{name}"
    try:
        fixture_db.copy_to_postgres(url)
        yield url
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
