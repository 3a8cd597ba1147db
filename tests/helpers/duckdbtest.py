"""Compare a DuckDB database (or a Parquet directory read through DuckDB) with the SQLite export of
the same trace: every table and every view, row for row, columns by name and in order.

What differs by design (docs/export.md, "DuckDB and Parquet"):

* when each was written (``schema_version.created``, ``ptexport_migrations.applied``);
* ``cbr.mhz``/``percent``: SQLite holds export-to-sqlite.py's ``str()`` of a true division (2000.5),
  DuckDB export-to-postgresql.py's ``int()`` of it (2000), as PostgreSQL does;
* a view column whose SQLite CASE gives text or the integer (``calls_view.flags``,
  ``context_switches_view.flags``, ``pwrx_view``/``power_events_view.wake_reason``) is text in
  DuckDB, as in PostgreSQL (one type per column): ``'7'`` where SQLite gives 7, ``' 7'`` in
  power_events_view;
* booleans are BOOLEAN (True/False) where SQLite stores 1/0.
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from typing import Any

import numpy as np

_WRITTEN_AT = {("schema_version", "created"), ("ptexport_migrations", "applied")}
_CBR = {"cbr", "cbr_view", "power_events_view"}
_TEXT_OR_INT = {("calls_view", "flags"), ("context_switches_view", "flags"), ("pwrx_view", "wake_reason"),
                ("power_events_view", "wake_reason")}


def _norm(name: str, col: str, v: Any) -> Any:
    if (name, col) in _WRITTEN_AT:
        return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, Decimal):
        v = float(v)
    if col in ("mhz", "percent") and name in _CBR and isinstance(v, float):
        return int(v)
    if (name, col) in _TEXT_OR_INT and isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    if isinstance(v, float):
        return round(v, 9)
    return v


def _key(row: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def sqlite_names(con: sqlite3.Connection) -> tuple[list[str], list[str]]:
    tables = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                               "AND name NOT LIKE 'sqlite_%'"))
    views = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'view'"))
    return tables, views


def rows_of(conn: Any, name: str, cols: list[str]) -> list[tuple]:
    q = ", ".join(f'"{c}"' for c in cols)
    return sorted((tuple(_norm(name, c, v) for c, v in zip(cols, r))
                   for r in conn.execute(f"SELECT {q} FROM {name}").fetchall()), key=_key)


def compare_with_sqlite(lite_path, duck: Any, *, what: str = "DuckDB") -> dict[str, int]:
    """Every SQLite table and view equal in ``duck`` (a DuckDB connection); returns the row counts."""
    con = sqlite3.connect(lite_path)
    try:
        tables, views = sqlite_names(con)
        have = {r[0] for r in duck.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert set(tables) <= have, f"tables missing in {what}: {set(tables) - have}"
        assert set(views) <= have, f"views missing in {what}: {set(views) - have}"
        counts, bad = {}, []
        for name in tables + views:
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
            theirs = [d[0] for d in duck.execute(f"SELECT * FROM {name} LIMIT 0").description]
            assert theirs == cols, f"{name}: columns {theirs} in {what}, {cols} in SQLite"
            mine, other = rows_of(con, name, cols), rows_of(duck, name, cols)
            counts[name] = len(mine)
            if mine != other:
                i = next((i for i, (a, b) in enumerate(zip(mine, other)) if a != b), min(len(mine), len(other)))
                bad.append(f"{name}: {len(mine)} rows in SQLite, {len(other)} in {what}; first difference:\n"
                           f"    sqlite: {mine[i] if i < len(mine) else None}\n"
                           f"    {what}: {other[i] if i < len(other) else None}")
        assert not bad, "\n".join(bad)
        return counts
    finally:
        con.close()


def assert_id_order(duck: Any, tables: list[str]) -> None:
    """Rows come back in id order without ORDER BY (stored in perf's id order, as SQLite's rowid tables)."""
    for t in tables:
        ids = np.asarray([r[0] for r in duck.execute(f"SELECT id FROM {t}").fetchall()], dtype=np.int64)
        assert ids.size == 0 or bool(np.all(ids[1:] > ids[:-1])), f"{t}: rows not in id order"
