"""SQLite writer: one big transaction in a temporary file, renamed into place at the end.

The temporary file sits next to the target (``.NAME.ptexport-tmp-PID``) so the
final ``os.replace`` is an atomic rename on the same file system; it is
written with the journal off (a crash leaves only that temporary, never a
target that looks complete) and fsynced before the rename.

Integer column batches are bound by :mod:`ptexport.export._fastsqlite`
(numba, no per-row Python) and inserted in large chunks; batches with text
columns, or any batch when numba is missing, go through ``executemany``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from ptexport.errors import DatabaseExistsError, ExportError
from ptexport.export import _fastsqlite
from ptexport.export.writer import Writer, is_text_type

#: Rows per bound chunk (bounded memory: one int64 matrix of this many rows).
CHUNK_ROWS = 1 << 18


def _quote(name: str) -> str:
    return f'"{name}"'


class SqliteWriter(Writer):
    dialect = "sqlite"

    def __init__(self, target: str | os.PathLike[str], *, force: bool = False, fast: bool = True,
                 cache_mib: int = 256) -> None:
        self.path = Path(target)
        self.target = str(self.path)
        if self.path.exists() and not force:
            raise DatabaseExistsError(f"{self.path} already exists (use --force to replace it)")
        if self.path.is_dir():
            raise ExportError(f"{self.path} is a directory")
        super().__init__()
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if not parent.is_dir():
            raise ExportError(f"{self.path}: directory {parent} does not exist")
        self.tmp_path = parent / f".{self.path.name}.ptexport-tmp-{os.getpid()}"
        self._remove_tmp()
        try:
            self.conn = sqlite3.connect(self.tmp_path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise ExportError(f"{self.tmp_path}: cannot create the database: {e}") from e
        self._inserters: dict[str, Any] = {}
        self._handle = None
        try:
            c = self.conn
            c.execute("PRAGMA journal_mode = OFF")
            c.execute("PRAGMA synchronous = OFF")
            c.execute("PRAGMA locking_mode = EXCLUSIVE")
            c.execute("PRAGMA temp_store = MEMORY")
            c.execute(f"PRAGMA cache_size = {-1024 * cache_mib}")
            c.execute("BEGIN")
            for sql in self.schema.table_sql.values():
                c.execute(sql)
            for sql in self.schema.view_sql.values():
                c.execute(sql)
            if fast:
                self._handle = _fastsqlite.connection_handle(c, str(self.tmp_path.resolve()))
            self._write_unknown_rows()
        except sqlite3.Error as e:
            self.abort()
            raise ExportError(f"{self.tmp_path}: cannot create the schema: {e}") from e

    @property
    def fast(self) -> bool:
        return self._handle is not None

    # ------------------------------------------------------------ inserts
    def _insert_sql(self, table: str) -> str:
        cols = self.schema.columns(table)
        return (f"INSERT INTO {table} ({', '.join(map(_quote, cols))}) "
                f"VALUES ({', '.join('?' * len(cols))})")

    def _insert_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        try:
            self.conn.executemany(self._insert_sql(table), rows)
        except sqlite3.Error as e:
            raise ExportError(f"{self.target}: writing {table}: {e}") from e

    def _insert_columns(self, table: str, cols: dict[str, Any], n: int) -> None:
        cdefs = self.schema.tables[table]
        has_text = any(is_text_type(c.type) for c in cdefs)
        try:
            if self._handle is not None and not has_text:
                ins = self._inserters.get(table)
                if ins is None:
                    ins = self._inserters[table] = _fastsqlite.BulkInserter(self._handle, self._insert_sql(table))
                for start in range(0, n, CHUNK_ROWS):
                    stop = min(n, start + CHUNK_ROWS)
                    mat = np.empty((stop - start, len(cdefs)), dtype=np.int64)
                    for j, c in enumerate(cdefs):
                        v = cols[c.name]
                        mat[:, j] = v if np.isscalar(v) else np.asarray(v[start:stop]).astype(np.int64, copy=False)
                    ins.insert(mat)
                return
            lists = []
            for c in cdefs:
                v = cols[c.name]
                if np.isscalar(v):
                    lists.append([v] * n)
                elif isinstance(v, np.ndarray):
                    if v.dtype.kind == "u":
                        v = v.astype(np.int64)  # two's complement storage of addresses
                    lists.append(v.tolist())
                else:
                    lists.append(list(v))
            self.conn.executemany(self._insert_sql(table), zip(*lists))
        except sqlite3.Error as e:
            raise ExportError(f"{self.target}: writing {table}: {e}") from e

    # ------------------------------------------------------------ end
    def _finish_database(self) -> None:
        c = self.conn
        try:
            for ins in self._inserters.values():
                ins.close()
            self._inserters.clear()
            c.execute("UPDATE comms SET has_calls = 1 WHERE id IN (SELECT DISTINCT comm_id FROM calls)")
            for sql in self.schema.index_sql.values():
                c.execute(sql)
            c.execute("INSERT INTO schema_version VALUES (?, ?, ?)", self._version_row())
            c.executemany("INSERT INTO ptexport_migrations VALUES (?, ?)", self._migration_rows())
            c.execute("COMMIT")
            c.execute("PRAGMA analysis_limit = 1000")
            c.execute("ANALYZE")
            c.close()
        except sqlite3.Error as e:
            raise ExportError(f"{self.target}: finishing the database: {e}") from e
        fd = os.open(self.tmp_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.tmp_path, self.path)

    def abort(self) -> None:
        for ins in getattr(self, "_inserters", {}).values():
            ins.close()
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:  # pragma: no cover
                pass
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        for p in (self.tmp_path, Path(f"{self.tmp_path}-journal")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
