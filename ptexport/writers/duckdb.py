"""DuckDB writer: Arrow batches into a temporary DuckDB file next to the target, renamed at the end.

``ptexport TRACE --db trace.duckdb`` writes the tables and views of ``ptexport/schema.sql`` in
DuckDB's dialect (:func:`ptexport.writers.schema.load_schema` ``("duckdb")``): perf's names,
columns and ids, the same rows as the SQLite export (``tests/writers/test_export_duckdb.py``).

Each columnar batch becomes one Arrow table (numpy columns wrapped, not copied: no Python per
row) that DuckDB appends with one ``INSERT ... SELECT`` (in a background thread, so the next
batch is prepared meanwhile; DuckDB runs without the GIL), in transactions of a million rows
under a memory limit of its own (:data:`COMMIT_ROWS`, :data:`MEMORY_LIMIT`: memory stays bounded).  Rows are stored in id order, as in
SQLite: ``calls`` arrives out of id order (a call's row comes when it returns, after its
callees' rows, whose ids are larger), so it goes to a staging database beside the temporary
(``.NAME.ptexport-tmp-PID.stage``) and into the database sorted at the end; any other table
that arrives out of order is sorted the same way at the end.  DuckDB keeps no primary keys or
secondary indexes here: its row groups' min/max (zone maps) serve range scans, and an index
would cost more to build than it saves an analytic query.

The safety rules are the SQLite writer's (:mod:`ptexport.writers.sqlite`, docs/export.md):
``.NAME.ptexport-lock`` held from open to end, ``.NAME.ptexport-tmp-PID`` (and its ``.wal``,
``.stage`` and DuckDB's spill directory ``.tmp``) renamed into place only when complete, removed on an error, Ctrl-C, SIGTERM or
a full disk (:class:`~ptexport.errors.StorageError`), stale ones of dead exports removed when
the lock is taken.  duckdb and pyarrow are imported with this module, which
:func:`ptexport.writers.open_writer` imports only for a DuckDB or Parquet target.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ptexport.errors import DatabaseExistsError, ExportError, StorageError
from ptexport.writers.base import Writer, _mark_placed, is_text_type
from ptexport.writers.leftovers import (
    Leftover,
    TargetLock,
    os_error,
    remove_files,
    remove_temporary,
    sqlite_leftovers,
)
from ptexport.writers.targets import target_path

#: Tables whose rows arrive out of id order by design: staged, sorted into place at the end.
STAGED = ("calls",)
#: Batches queued for the background thread before write_* waits (bounded memory).
MAX_PENDING = 2
#: DuckDB's memory limit (its buffer pool keeps what it wrote cached up to the limit, 80 % of the
#: machine's memory by default: the export's RSS would grow with the trace); beyond it DuckDB evicts
#: written blocks and spills sorts to ``.NAME.ptexport-tmp-PID.tmp/``.
MEMORY_LIMIT = "256MB"
#: Rows after which a load transaction commits and the next begins: a transaction's row groups stay
#: pinned in memory until it commits (measured: 1.5 GB at 10 M samples in one transaction, 0.5 GB
#: committing every million rows with the limit above).
COMMIT_ROWS = 1_000_000

#: schema.sql's column types -> Arrow's (and numpy's, for the integer ones).
ARROW_TYPES: dict[str, Any] = {"bigint": pa.int64(), "integer": pa.int32(), "boolean": pa.bool_()}
_NUMPY_TYPES = {"bigint": np.int64, "integer": np.int32}

#: Messages of DuckDB's I/O errors that mean the storage failed (it keeps no errno).
_STORAGE_TEXT = {"no space left on device": "no space left on device (ENOSPC)",
                 "disk quota exceeded": "disk quota exceeded (EDQUOT)",
                 "input/output error": "input/output error (EIO)",
                 "file too large": "file too large for the file system (EFBIG)"}


#: Free bytes below which a failed write is taken for a full file system (DuckDB writes blocks of 256 KiB).
FULL_BELOW = 4 << 20


def duckdb_error(e: Exception, target: str, what: str, directory: Path | None = None) -> ExportError:
    """A DuckDB (or Arrow) error as the typed error: :class:`StorageError` for a full disk or an I/O error.

    A write that fails inside the load's transaction may only abort it (DuckDB writes row groups
    of a transaction as it goes, and its error reaches Python as "the transaction is aborted" at
    the next statement): then a ``directory`` whose file system is (nearly) full names the cause."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    low = str(e).lower()
    for needle, cause in _STORAGE_TEXT.items():
        if needle in low:
            return StorageError(f"{target}: {what}: {cause}")
    if directory is not None and "transaction is aborted" in low:
        try:
            st = os.statvfs(directory)
        except OSError:
            st = None
        if st is not None and st.f_bavail * st.f_frsize < FULL_BELOW:
            return StorageError(f"{target}: {what}: {_STORAGE_TEXT['no space left on device']}")
    return ExportError(f"{target}: {what}: {text}")


def sql_string(value: Any) -> str:
    """A path (or any text) as a SQL string literal: quoted, its quotes doubled."""
    return "'" + str(value).replace("'", "''") + "'"


def arrow_type(sql_type: str) -> Any:
    return pa.string() if is_text_type(sql_type) else ARROW_TYPES[sql_type]


def arrow_column(v: Any, sql_type: str, n: int) -> Any:
    """One column of a batch as an Arrow array: a numpy array (wrapped; uint64 addresses as two's
    complement int64), a list (the small tables' rows, text) or a scalar default (broadcast)."""
    typ = arrow_type(sql_type)
    if isinstance(v, np.ndarray):
        if sql_type == "boolean":
            return pa.array(v if v.dtype == np.bool_ else v != 0, type=typ)
        if is_text_type(sql_type):
            return pa.array(v.tolist(), type=typ)
        if v.dtype.kind == "u" and v.dtype.itemsize == 8:
            v = v.view(np.int64)
        elif v.dtype.kind == "f":  # a float in an integer column (cbr of a perf-made SQLite database): int()
            v = v.astype(np.int64)
        if sql_type == "bigint":
            return pa.array(v.astype(np.int64, copy=False), type=typ)
        return pa.array(v, type=typ)  # Arrow's safe cast: a value out of range is an error, not wrapped
    if isinstance(v, (list, tuple)):
        if sql_type == "boolean":
            return pa.array([None if x is None else bool(x) for x in v], type=typ)
        if not is_text_type(sql_type) and any(isinstance(x, float) for x in v):
            v = [None if x is None else int(x) for x in v]
        return pa.array(v, type=typ)
    if is_text_type(sql_type):
        return pa.array([v] * n, type=typ)
    if sql_type == "boolean":
        return pa.array(np.full(n, bool(v)), type=typ)
    return pa.array(np.full(n, v, dtype=_NUMPY_TYPES[sql_type]), type=typ)


class DuckdbWriter(Writer):
    """``--db NAME.duckdb`` (or ``duckdb:PATH``)."""

    dialect = "duckdb"
    #: what the target is called in messages ("database", "directory")
    kind = "database"

    def __init__(self, target: str | os.PathLike[str], *, force: bool = False, threads: int | None = None,
                 memory_limit: str | None = MEMORY_LIMIT) -> None:
        self.path = Path(target_path(os.fspath(target)))
        self.target = str(self.path)
        self.force = force
        self._check_target()
        super().__init__()
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if not parent.is_dir():
            raise ExportError(f"{self.path}: directory {parent} does not exist")
        #: the temporary: the database itself (a file), or, for the Parquet writer, a directory
        self.tmp_path = parent / f".{self.path.name}.ptexport-tmp-{os.getpid()}"
        self.db_path = self._database_path()
        self.stage_path = self.db_path.with_name(f"{self.db_path.name}.stage")
        self.conn: Any = None
        self._stage_conn: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[Future[None]] = deque()
        self._last_id: dict[str, int] = {}
        self._unsorted: set[str] = set()
        self._batch = 0
        self._uncommitted: dict[str, int] = {"main": 0, "stage": 0}  # rows of each session's transaction
        #: temporaries of exports to this target that died (and of an earlier process of this PID), removed
        self.removed_leftovers: list[Leftover] = []
        self._lock: TargetLock | None = TargetLock.acquire(self.path)
        try:
            self.removed_leftovers = sqlite_leftovers(parent, self.path.name, own=True)
            remove_files(self.removed_leftovers)
            self._make_temporary()
            self.conn = duckdb.connect(str(self.db_path))
            c = self.conn
            c.execute("SET enable_progress_bar = false")  # DuckDB would draw on the terminal
            if threads:
                c.execute(f"SET threads = {int(threads)}")
            if memory_limit:
                c.execute(f"SET memory_limit = {sql_string(memory_limit)}")
            c.execute("SET preserve_insertion_order = true")
            for sql in self.schema.table_sql.values():
                c.execute(sql)
            for sql in self.schema.comment_sql:
                c.execute(sql)
            c.execute(f"ATTACH {sql_string(self.stage_path)} AS stage")
            for t in STAGED:
                c.execute(self.schema.table_sql[t].replace(f"CREATE TABLE {t} (", f"CREATE TABLE stage.{t} (", 1))
            # The load in transactions of COMMIT_ROWS rows: DuckDB writes their row groups straight to
            # the file (no WAL; twice as fast as a transaction per batch), and a transaction writes one
            # database only: the staging database has its own session (a cursor: a second connection
            # to the same instance) and transactions.
            self._stage_conn = c.cursor()
            self._stage_conn.execute("BEGIN")
            c.execute("BEGIN")
            self._write_unknown_rows()
            self._drain()
        except duckdb.Error as e:
            self.abort()
            raise duckdb_error(e, self.target, f"cannot create the {self.kind}", self.db_path.parent) from e
        except OSError as e:
            self.abort()
            raise os_error(e, self.target, f"cannot create the {self.kind}") from e
        except BaseException:
            self.abort()
            raise

    # ------------------------------------------------------------ the target (the Parquet writer overrides)
    def _check_target(self) -> None:
        if self.path.exists() and not self.force:
            raise DatabaseExistsError(f"{self.path} already exists (use --force to replace it)")
        if self.path.is_dir():
            raise ExportError(f"{self.path} is a directory")

    def _database_path(self) -> Path:
        return self.tmp_path

    def _make_temporary(self) -> None:
        pass

    # ------------------------------------------------------------ inserts
    def _submit(self, fn: Any, *args: Any) -> None:
        """Run an insert in the one background thread (in order); the caller goes on with the next batch."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptexport-duckdb")
        while len(self._pending) >= MAX_PENDING:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args))

    def _drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def _insert_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        cols = list(zip(*rows))
        names = self.schema.columns(table)
        self._insert_columns(table, {c: list(v) for c, v in zip(names, cols)}, len(rows))

    def _insert_columns(self, table: str, cols: dict[str, Any], n: int) -> None:
        cdefs = self.schema.tables[table]
        try:
            batch = pa.Table.from_arrays([arrow_column(cols[c.name], c.type, n) for c in cdefs],
                                         names=[c.name for c in cdefs])
        except (pa.ArrowException, OverflowError, ValueError, TypeError) as e:
            raise ExportError(f"{self.target}: writing {table}: {e}") from e
        if cdefs[0].name == "id" and table not in STAGED:
            self._note_order(table, batch.column(0).to_numpy())
        self._submit(self._append, table, batch)

    def _note_order(self, table: str, ids: np.ndarray) -> None:
        """Tables whose rows do not come in increasing id order are sorted at the end."""
        if not ids.size or table in self._unsorted:
            return
        last = self._last_id.get(table)
        if (last is not None and int(ids[0]) <= last) or (ids.size > 1 and not np.all(ids[1:] > ids[:-1])):
            self._unsorted.add(table)
        self._last_id[table] = int(ids[-1])

    def _append(self, table: str, batch: Any) -> None:
        name = f"_ptexport_batch_{self._batch}"
        self._batch += 1
        staged = table in STAGED
        into = f"stage.{table}" if staged else table
        c = self._stage_conn if staged else self.conn
        session = "stage" if staged else "main"
        try:
            c.register(name, batch)
            try:
                c.execute(f"INSERT INTO {into} SELECT * FROM {name}")
            finally:
                c.unregister(name)
            self._uncommitted[session] += batch.num_rows
            if self._uncommitted[session] >= COMMIT_ROWS:  # bounded memory: see COMMIT_ROWS
                c.execute("COMMIT")
                c.execute("BEGIN")
                self._uncommitted[session] = 0
        except duckdb.Error as e:
            raise duckdb_error(e, self.target, f"writing {table}", self.db_path.parent) from e

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # ------------------------------------------------------------ end
    def _finish_database(self) -> None:
        self._drain()
        self._stop_pool()
        try:
            self._complete()
        except duckdb.Error as e:
            raise duckdb_error(e, self.target, f"finishing the {self.kind}", self.db_path.parent) from e
        except OSError as e:
            raise os_error(e, self.target, f"finishing the {self.kind}") from e
        self._place()
        if self._lock is not None:  # in place: the target is free
            self._lock.release()

    def _complete(self) -> None:
        """The tables complete, the views; checkpointed and closed."""
        self._complete_tables()
        for sql in self.schema.view_sql.values():
            self.conn.execute(sql)
        self.conn.execute("CHECKPOINT")
        self._close()

    def _complete_tables(self) -> None:
        """Staged and unsorted tables in id order, has_calls, the version rows."""
        c = self.conn
        self._stage_conn.execute("COMMIT")
        self._stage_conn.close()
        self._stage_conn = None
        for t in STAGED:
            c.execute(f"INSERT INTO {t} SELECT * FROM stage.{t} ORDER BY id")
        c.execute("UPDATE comms SET has_calls = TRUE WHERE id IN (SELECT DISTINCT comm_id FROM calls)")
        c.executemany("INSERT INTO schema_version VALUES (?, ?, ?)", [self._version_row()])
        rows = self._migration_rows()
        if rows:
            c.executemany("INSERT INTO ptexport_migrations VALUES (?, ?)", rows)
        c.execute("COMMIT")
        for t in sorted(self._unsorted):  # rare: a table that came out of order (not by design)
            c.execute(f"CREATE TABLE stage._ptexport_sorted AS SELECT * FROM {t} ORDER BY id")
            c.execute(f"DELETE FROM {t}")
            c.execute(f"INSERT INTO {t} SELECT * FROM stage._ptexport_sorted")
            c.execute("DROP TABLE stage._ptexport_sorted")
        c.execute("DETACH stage")
        _unlink(self.stage_path)
        _unlink(self.stage_path.with_name(self.stage_path.name + ".wal"))

    def _close(self) -> None:
        if self._stage_conn is not None:
            self._stage_conn.close()
            self._stage_conn = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _place(self) -> None:
        """fsync the finished file and rename it to the target (atomic on one file system)."""
        fsync_path(self.tmp_path)
        _unlink(self.tmp_path.with_name(self.tmp_path.name + ".wal"))  # empty after the checkpoint
        spill = self.tmp_path.with_name(self.tmp_path.name + ".tmp")  # DuckDB's, removed when it closes
        if spill.is_dir():
            shutil.rmtree(spill, ignore_errors=True)
        _mark_placed()  # the rename is atomic: from here a signal stops nothing
        os.replace(self.tmp_path, self.path)

    def abort(self) -> None:
        for f in self._pending:
            f.cancel()
        try:
            self._drain()
        except BaseException:  # noqa: BLE001 - aborting anyway; the temporary goes
            pass
        self._pending.clear()
        self._stop_pool()
        try:
            self._close()
        except (duckdb.Error, OSError):  # pragma: no cover
            self.conn = None
        self._remove_tmp()
        if self._lock is not None:
            self._lock.release()

    def _remove_tmp(self) -> None:
        """This export's temporary and every file named after it (.wal, .stage, .stage.wal)."""
        remove_temporary(self.tmp_path, self.target)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory and every file in it."""
    paths = [path] if not path.is_dir() else [*(p for p in path.rglob("*")), path]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as e:  # a directory of a file system that cannot fsync one: harmless
            if e.errno not in (errno.EINVAL, errno.EBADF) or not p.is_dir():
                raise
        finally:
            os.close(fd)
