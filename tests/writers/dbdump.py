"""Table dumps that compare equal across SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from typing import Any

from ptexport.writers.schema import load_schema

VOLATILE = {"schema_version": "created", "ptexport_migrations": "applied"}


def _norm(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, Decimal):
        return float(v)
    return v


def dump(conn: Any, tables: list[str] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every schema table's rows in id order (all columns, volatile timestamps blanked)."""
    sch = load_schema("sqlite")
    out = {}
    for t in tables or list(sch.tables):
        cols = [c if c != VOLATILE.get(t) else "NULL" for c in sch.columns(t)]
        order = "id" if sch.columns(t)[0] == "id" else ", ".join(f'"{c}"' for c in sch.columns(t)[:1])
        sql = f"SELECT {', '.join(c if c == 'NULL' else chr(34) + c + chr(34) for c in cols)} FROM {t} ORDER BY {order}"
        rows = conn.execute(sql).fetchall()
        out[t] = [tuple(_norm(v) for v in r) for r in rows]
    return out


def sqlite_dump(path) -> dict[str, list[tuple[Any, ...]]]:
    c = sqlite3.connect(path)
    try:
        return dump(c)
    finally:
        c.close()
