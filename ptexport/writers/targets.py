"""What a database target names: a SQLite file, a PostgreSQL URL, a DuckDB file or a Parquet directory.

The bottom of the writers package: the factory (:func:`ptexport.writers.open_writer`),
``ptexport clean``, ``ptexport upgrade`` and the PostgreSQL writer all tell the kinds
apart here and read a URL's connection parameters here.  See docs/architecture.md.

* ``postgresql://user@host/dbname`` (also ``postgres://``, ``pg:``): PostgreSQL;
* ``NAME.duckdb`` / ``NAME.ddb``, or ``duckdb:PATH`` for any other name: DuckDB;
* ``parquet:DIR`` (what ``--parquet DIR`` passes): a directory of Parquet files;
* anything else: a SQLite file.
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


DUCKDB_SUFFIXES = (".duckdb", ".ddb")


def is_duckdb_target(target: str) -> bool:
    return target.startswith("duckdb:") or target.lower().endswith(DUCKDB_SUFFIXES)


def is_parquet_target(target: str) -> bool:
    return target.startswith("parquet:")


def target_kind(target: str) -> str:
    """``postgresql``, ``duckdb``, ``parquet`` or ``sqlite``."""
    if is_postgres_target(target):
        return "postgresql"
    if is_parquet_target(target):
        return "parquet"
    if is_duckdb_target(target):
        return "duckdb"
    return "sqlite"


def target_path(target: str) -> str:
    """The file or directory a file-system target names (its ``duckdb:``/``parquet:`` prefix removed);
    a PostgreSQL URL unchanged."""
    for prefix in ("duckdb:", "parquet:"):
        if target.startswith(prefix):
            return target[len(prefix):]
    return target
