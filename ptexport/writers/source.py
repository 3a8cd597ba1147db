"""A database read back: SQLite, DuckDB or PostgreSQL, through DB-API cursors, in bounded chunks.

What reads an export (``ptexport convert``, ``ptexport perfetto``) opens it here: read-only
(SQLite ``mode=ro``, DuckDB ``read_only``; a PostgreSQL query runs in a server-side cursor and its
transaction is rolled back), every driver error wrapped as :class:`~ptexport.errors.ExportError`
naming the database.  See docs/architecture.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ptexport.errors import ExportError, UsageError
from ptexport.writers.targets import parse_target, target_kind, target_path

#: Rows fetched at a time by :meth:`DbSource.stream` (bounded memory).
CHUNK_ROWS = 1 << 17


class DbSource:
    """A database read with DB-API cursors: SQLite, DuckDB or PostgreSQL (a server-side cursor)."""

    def __init__(self, source: str, *, reader: str = "this command") -> None:
        self.name = source
        self.kind = target_kind(source)
        if self.kind == "parquet":
            raise UsageError(f"{source}: {reader} reads a database (SQLite, PostgreSQL or DuckDB), not Parquet files")
        self.conn: Any
        self._cursors = 0
        try:
            if self.kind == "postgresql":
                import psycopg  # ~0.6 s: only for a PostgreSQL source
                from psycopg.conninfo import make_conninfo

                self._errors: tuple[type[BaseException], ...] = (psycopg.Error,)
                self.conn = psycopg.connect(make_conninfo(**parse_target(source)))
            elif self.kind == "duckdb":
                import duckdb  # with the DuckDB writer: only for a DuckDB source or target

                self._errors = (duckdb.Error,)
                path = target_path(source)
                if not os.path.isfile(path):
                    raise ExportError(f"{source}: no such database")
                self.conn = duckdb.connect(path, read_only=True)
            else:
                import sqlite3

                self._errors = (sqlite3.Error,)
                if not os.path.isfile(source):
                    raise ExportError(f"{source}: no such database")
                self.conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(f"{source}: cannot open: {e}") from e

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "DbSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tables(self) -> set[str]:
        if self.kind == "sqlite":
            sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
        else:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        return {r[0] for r in self._query(sql)}

    def columns(self, table: str) -> list[str]:
        """The column names of ``table`` in order ([] when there is no such table)."""
        if self.kind == "sqlite":
            return [r[1] for r in self._query(f"PRAGMA table_info(\"{table}\")")]
        return [r[0] for r in self._query("SELECT column_name FROM information_schema.columns "
                                          f"WHERE table_name = '{table}' ORDER BY ordinal_position")]

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            rows = list(self.conn.execute(sql).fetchall())
            if self.kind == "postgresql":
                self.conn.rollback()  # nothing was changed: no transaction left open
            return rows
        except self._errors as e:
            raise ExportError(f"{self.name}: {e}") from e

    def query_rows(self, sql: str) -> list[tuple[Any, ...]]:
        """All rows of a query (a small result)."""
        return self._query(sql)

    def version(self) -> int | None:
        rows = self._query("SELECT MAX(version) FROM schema_version") if "schema_version" in self.tables() else []
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def stream(self, sql: str, what: str, chunk: int = CHUNK_ROWS) -> Iterator[list[tuple[Any, ...]]]:
        """The rows of ``sql`` in lists of at most ``chunk`` rows; ``what`` names them in an error."""
        try:
            if self.kind == "postgresql":
                self._cursors += 1
                cur = self.conn.cursor(name=f"ptexport_read_{self._cursors}")
            else:
                cur = self.conn.cursor()
            try:
                cur.execute(sql)
                while True:
                    rows = cur.fetchmany(chunk)
                    if not rows:
                        break
                    yield rows
            finally:
                cur.close()
            if self.kind == "postgresql":
                self.conn.rollback()  # the server-side cursor's transaction (nothing was changed)
        except self._errors as e:
            raise ExportError(f"{self.name}: reading {what}: {e}") from e

    def chunks(self, table: str, cols: list[str], skip_unknown: bool) -> Iterator[list[tuple[Any, ...]]]:
        """Every row of ``table`` (these columns) in id order; without the id-0 row with ``skip_unknown``."""
        # checked first: SQLite reads a double-quoted name it does not know as a string literal
        have = set(self.columns(table))
        missing = [c for c in [*cols, "id"] if c not in have]
        if missing:
            raise ExportError(f"{self.name}: table {table} has no column {', '.join(dict.fromkeys(missing))}: not "
                              "an export of the current schema (see ptexport upgrade)")
        sql = (f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM {table}"
               f"{' WHERE id <> 0' if skip_unknown else ''} ORDER BY id")
        return self.stream(sql, table)
