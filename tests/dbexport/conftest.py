"""Fixtures of the db-export tests: the PostgreSQL server (the VM recording ``mixed`` is in tests/conftest.py,
shared with tests/oracle_perf)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def pg_admin():
    from vmexporttest import PG_BASE

    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed")
    try:
        conn = psycopg.connect(f"{PG_BASE}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL server reachable at {PG_BASE}: {str(e).strip().splitlines()[0]}")
    yield conn
    conn.close()
