"""Ctrl-C at the two moments of a PostgreSQL export that talk only to the server's admin connection.

Right after ``CREATE DATABASE`` of the temporary database (the statement completed on the server, the
interrupt arrives before the writer holds it) and in the finish, after the temporary database is closed
but before it is renamed: in both, no database of the export may be left behind.
"""

from __future__ import annotations

import uuid

import pytest

psycopg = pytest.importorskip("psycopg")

from ptexport.writers.postgres import PostgresWriter  # noqa: E402

BASE = "postgresql://postgres@127.0.0.1:5432"
pytestmark = pytest.mark.postgres


def _ours(pg_admin, name: str) -> list[str]:
    return [r[0] for r in pg_admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{name}%",))]


def _interrupt_at(monkeypatch, words: str, before: bool) -> list[int]:
    """KeyboardInterrupt once, before or after the first admin statement containing ``words``."""
    real = psycopg.Connection.execute
    hit: list[int] = []

    def execute(self, query, *args, **kwargs):
        text = query if isinstance(query, str) else query.as_string(self)
        fire = words in text and not hit
        if fire and before:
            hit.append(1)
            raise KeyboardInterrupt
        cur = real(self, query, *args, **kwargs)
        if fire:
            hit.append(1)
            raise KeyboardInterrupt
        return cur

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return hit


def test_interrupt_right_after_create_database_leaves_nothing(pg_admin, monkeypatch):
    name = f"ptx_int_create_{uuid.uuid4().hex[:8]}"
    hit = _interrupt_at(monkeypatch, "CREATE DATABASE", before=False)
    with pytest.raises(KeyboardInterrupt):
        PostgresWriter(f"{BASE}/{name}")
    monkeypatch.undo()
    assert hit
    assert _ours(pg_admin, name) == []


def test_interrupt_before_the_rename_leaves_nothing(pg_admin, monkeypatch):
    name = f"ptx_int_rename_{uuid.uuid4().hex[:8]}"
    w = PostgresWriter(f"{BASE}/{name}")
    assert _ours(pg_admin, name) == [w.tmp_name]
    hit = _interrupt_at(monkeypatch, "RENAME TO", before=True)
    with pytest.raises(KeyboardInterrupt):
        with w:
            pass
    monkeypatch.undo()
    assert hit
    assert _ours(pg_admin, name) == []
    # and a completed export is still renamed and kept
    w = PostgresWriter(f"{BASE}/{name}")
    with w:
        pass
    try:
        assert _ours(pg_admin, name) == [name]
    finally:
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
