"""What a database target names: a SQLite file path or a PostgreSQL URL.

The bottom of the writers package: the factory (:func:`ptexport.writers.open_writer`),
``ptexport clean``, ``ptexport upgrade`` and the PostgreSQL writer all tell the two
kinds apart here and read a URL's connection parameters here.  See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from ptexport.errors import ExportError, UsageError


def is_postgres_target(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://", "postgresql:", "pg:"))


def parse_target(target: str) -> dict[str, Any]:
    """Connection parameters of a ``postgresql://user@host:port/dbname`` URL (dbname required)."""
    try:  # psycopg takes ~0.6 s to import: only for a PostgreSQL target
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # pragma: no cover - a dependency
        raise ExportError("PostgreSQL output needs psycopg (pip install 'psycopg[binary]')") from None
    url = "postgresql:" + target[3:] if target.startswith("pg:") else target
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        raise UsageError(f"{target}: not a PostgreSQL URL: {e}") from e
    if not params.get("dbname"):
        raise UsageError(f"{target}: the URL names no database (postgresql://user@host/DBNAME)")
    return params
