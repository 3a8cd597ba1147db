"""Shared fixtures of the export tests: PostgreSQL databases, the fixture database."""

from __future__ import annotations

import uuid

import pytest

from exporttest import (  # noqa: F401
    PERF_SCRIPTS,
    PG_BASE,
    SYSTEM_PYTHON,
    have_system_pyside2,
    make_perf_db,
    system_python_env,
)


@pytest.fixture
def pg_url(pg_admin):
    """A factory of unique database URLs; every database (and temp leftovers) is dropped afterwards."""
    names: list[str] = []

    def make(prefix: str = "ptx_test") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        names.append(name)
        return f"{PG_BASE}/{name}"

    yield make
    for name in names:
        rows = pg_admin.execute("SELECT datname FROM pg_database WHERE datname = %s OR datname LIKE %s",
                                (name, f"{name[:30]}__ptexport_tmp_%")).fetchall()
        for (db,) in rows:
            pg_admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@pytest.fixture(scope="session")
def fixture_sqlite(tmp_path_factory):
    from known_db import build_fixture_db

    path = tmp_path_factory.mktemp("fixture") / "fixture.db"
    expected = build_fixture_db(str(path))
    return path, expected


@pytest.fixture(scope="session")
def perf_db(tmp_path_factory, quipper):
    """A database made by perf 6.1's own export-to-sqlite.py ("branches calls") on the quipper trace."""
    return make_perf_db(tmp_path_factory.mktemp("perfdb") / "perf.db", quipper, "branches", "calls")
