"""Fixtures of the fault tests: generated traces, PostgreSQL (helpers in faultstest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultstest import PG_BASE, synth


@pytest.fixture(scope="session")
def big_trace(tmp_path_factory) -> Path:
    """A 2 M-branch trace: its export runs about 3 s on an idle machine here (1 s to the writer, 2 s of
    pages, 0.2 s of splice and indexes; a 140 MB database)."""
    return synth(tmp_path_factory.mktemp("big"), "2M")


@pytest.fixture(scope="session")
def small_trace(tmp_path_factory) -> Path:
    """A 200 K-branch trace (a 14 MB database)."""
    return synth(tmp_path_factory.mktemp("small"), "200k")


@pytest.fixture(scope="session")
def pg_admin():
    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(f"{PG_BASE}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL server reachable at {PG_BASE}: {str(e).strip().splitlines()[0]}")
    yield conn
    conn.close()


@pytest.fixture
def pg_name(pg_admin):
    """A unique database name; it and its temporaries are dropped afterwards."""
    import uuid

    name = f"ptx_faults_{uuid.uuid4().hex[:10]}"
    yield name
    for (db,) in pg_admin.execute("SELECT datname FROM pg_database WHERE datname = %s OR left(datname, %s) = %s",
                                  (name, len(name) + 15, f"{name}__ptexport_tmp_")).fetchall():
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


