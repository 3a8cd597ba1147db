"""PostgreSQL writer: COPY into a temporary database, keys and indexes after, rename at the end.

Like perf's export-to-postgresql.py it creates the database the URL names
(connecting to the ``postgres`` maintenance database to do so), loads with
``COPY ... FROM STDIN (FORMAT binary)`` into tables without keys, and adds
primary keys and indexes afterwards.  Unlike perf it loads into
``NAME__ptexport_tmp_PID`` and renames that to NAME only when complete (with
``--force``, trading names with the previous database in one transaction, then
dropping that); on an error, Ctrl-C, SIGTERM, a full disk on the server or the
server ending the export's session the temporary database is dropped.  The
export holds session advisory locks keyed by NAME (a second export to NAME is
refused at once) and by its temporary's name; temporary databases of exports
that died (SIGKILL) are dropped when the locks are taken
(:mod:`ptexport.writers.leftovers`).

Integer batches are encoded as binary COPY rows by numpy (one structured
array per batch, big-endian fields), with no Python loop per row.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ptexport.errors import DatabaseExistsError, ExportError, StorageError, TargetBusyError
from ptexport.writers.leftovers import (PG_NAME_KEEP, CleanReport, Leftover, export_ended, export_started,
                                       pg_drop_leftovers, pg_leftovers, pg_tmp_name, pg_try_lock)
from ptexport.writers.base import Writer, _mark_placed, is_text_type
from ptexport.writers.targets import parse_target

try:
    import psycopg
    from psycopg import sql as pgsql
    from psycopg.conninfo import make_conninfo
except ImportError:  # pragma: no cover - a dependency
    psycopg = None  # type: ignore[assignment]

COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
COPY_TRAILER = struct.pack("!h", -1)
CHUNK_ROWS = 1 << 18
#: COPY batches queued for the background thread before write_* waits (bounded memory).
MAX_PENDING = 2
_BINARY = {"bigint": (">i8", 8), "integer": (">i4", 4), "boolean": ("u1", 1)}


#: SQLSTATEs of the server's storage failing: disk_full, io_error.
_STORAGE_SQLSTATES = {"53100": "the server's disk is full", "58030": "I/O error on the server"}


def _wrap(e: Exception, target: str, what: str) -> ExportError:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    cause = _STORAGE_SQLSTATES.get(getattr(e, "sqlstate", None) or "")
    if cause:
        return StorageError(f"{target}: {what}: {cause} ({msg})")
    return ExportError(f"{target}: {what}: {msg}")


def _redacted(params: dict[str, Any]) -> str:
    p = {k: v for k, v in params.items() if k != "password"}
    return f"postgresql://{p.get('user', '')}@{p.get('host', '')}:{p.get('port', '')}/{p.get('dbname')}"


class PostgresWriter(Writer):
    dialect = "postgresql"

    def __init__(self, target: str, *, force: bool = False) -> None:
        super().__init__()
        self.params = parse_target(target)
        self.dbname = str(self.params["dbname"])
        self.target = _redacted(self.params)
        self.tmp_name = pg_tmp_name(self.dbname, os.getpid())
        self._exporting = False
        self.conn: psycopg.Connection | None = None  # the temporary database's session
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[Future[None]] = deque()
        #: temporary databases of exports to this target that died, dropped
        self.removed_leftovers: list[Leftover] = []
        self.admin = self._connect("postgres")
        try:
            exists = self._database_exists(self.dbname)
            if exists and not force:
                raise DatabaseExistsError(f"{self.target} already exists (use --force to replace it)")
            # held by this session until it closes (however the process ends)
            if not pg_try_lock(self.admin, "target", self.dbname):
                raise TargetBusyError(f"{self.target}: another export is writing it; "
                                      "try again when it has finished")
            pg_try_lock(self.admin, "tmp", self.tmp_name)
            self._exporting = True
            export_started()  # forked workers end with this process (they share the locking session's socket)
            self.removed_leftovers = pg_drop_leftovers(self.admin, pg_leftovers(self.admin, self.dbname))
            self.admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                pgsql.Identifier(self.tmp_name)))
            self.admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(self.tmp_name)))
        except psycopg.Error as e:
            self.admin.close()
            self._export_over()
            raise _wrap(e, self.target, "cannot create the database") from e
        except BaseException:
            # e.g. Ctrl-C while CREATE DATABASE ran: it may have completed on the server
            self._drop_tmp_and_close_admin()
            raise
        try:
            self.conn = self._connect(self.tmp_name)
            with self.conn.cursor() as cur:
                cur.execute("SET client_min_messages TO WARNING")
                # a load, not a transaction system: no WAL flush wait per COPY, room to sort keys
                cur.execute("SET synchronous_commit TO OFF")
                cur.execute("SET maintenance_work_mem TO '256MB'")
                for s in self.schema.table_sql.values():
                    cur.execute(s)
                for s in self.schema.view_sql.values():
                    cur.execute(s)
                for s in self.schema.comment_sql:
                    cur.execute(s)
            self._write_unknown_rows()
        except BaseException as e:
            self.abort()
            if isinstance(e, psycopg.Error):
                raise _wrap(e, self.target, "cannot create the schema") from e
            raise

    def _export_over(self) -> None:
        """The locking session is closed: forked children need not end with this process any more."""
        if self._exporting:
            self._exporting = False
            export_ended()

    def _conn(self) -> psycopg.Connection:
        assert self.conn is not None  # open from __init__ until the end (finish or abort)
        return self.conn

    def _connect(self, dbname: str, **options: Any) -> psycopg.Connection:
        params = dict(self.params, dbname=dbname)
        for k, v in options.items():
            params.setdefault(k, v)
        try:
            return psycopg.connect(make_conninfo(**params), autocommit=True)
        except psycopg.Error as e:
            raise _wrap(e, _redacted(params), "cannot connect") from e

    def _database_exists(self, name: str) -> bool:
        return self.admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None

    # ------------------------------------------------------------ inserts
    def _copy_sql(self, table: str, binary: bool) -> Any:
        cols = pgsql.SQL(", ").join(pgsql.Identifier(c) for c in self.schema.columns(table))
        fmt = pgsql.SQL(" (FORMAT binary)") if binary else pgsql.SQL("")
        return pgsql.SQL("COPY {} ({}) FROM STDIN").format(pgsql.Identifier(table), cols) + fmt

    def _submit(self, fn: Any, *args: Any) -> None:
        """Run a COPY in the one background thread (in order); the caller goes on with the next batch."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptexport-copy")
        while len(self._pending) >= MAX_PENDING:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args))

    def _drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def _insert_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        self._submit(self._copy_rows, table, rows)

    def _copy_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        try:
            with self._conn().cursor() as cur, cur.copy(self._copy_sql(table, False)) as cp:
                for r in rows:
                    cp.write_row(r)
        except psycopg.Error as e:
            raise _wrap(e, self.target, f"writing {table}") from e

    def _copy_binary(self, table: str, chunks: list[bytes]) -> None:
        try:
            with self._conn().cursor() as cur, cur.copy(self._copy_sql(table, True)) as cp:
                cp.write(COPY_HEADER)
                for chunk in chunks:
                    cp.write(chunk)
                cp.write(COPY_TRAILER)
        except psycopg.Error as e:
            raise _wrap(e, self.target, f"writing {table}") from e

    def _insert_columns(self, table: str, cols: dict[str, Any], n: int) -> None:
        cdefs = self.schema.tables[table]
        if any(is_text_type(c.type) for c in cdefs):
            lists = []
            for c in cdefs:
                v = cols[c.name]
                if np.isscalar(v):
                    lists.append([v] * n)
                else:
                    a = np.asarray(v)
                    if a.dtype.kind == "u":
                        a = a.astype(np.int64)
                    if c.type == "boolean":
                        a = a.astype(bool)
                    lists.append(a.tolist())
            self._insert_rows(table, list(zip(*lists)))
            return
        fields: list[tuple[str, str]] = [("n", ">i2")]
        for j, c in enumerate(cdefs):
            fields += [(f"l{j}", ">i4"), (f"v{j}", _BINARY[c.type][0])]
        dt = np.dtype(fields)
        chunks = []
        for start in range(0, n, CHUNK_ROWS):
            stop = min(n, start + CHUNK_ROWS)
            rec = np.empty(stop - start, dtype=dt)
            rec["n"] = len(cdefs)
            for j, c in enumerate(cdefs):
                rec[f"l{j}"] = _BINARY[c.type][1]
                v = cols[c.name]
                if np.isscalar(v):
                    rec[f"v{j}"] = v  # a column's default (an int), broadcast
                else:
                    a = np.asarray(v[start:stop])
                    rec[f"v{j}"] = (a != 0) if c.type == "boolean" else a.astype(np.int64, copy=False)
            chunks.append(rec.tobytes())
        self._submit(self._copy_binary, table, chunks)

    # ------------------------------------------------------------ end
    def _finish_database(self) -> None:
        self._drain()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        try:
            conn = self._conn()
            with conn.cursor() as cur:
                for s in self.schema.primary_key_sql():
                    cur.execute(s)
                cur.execute("UPDATE comms SET has_calls = TRUE WHERE id IN (SELECT DISTINCT comm_id FROM calls)")
                for s in self.schema.index_sql.values():
                    cur.execute(s)
                cur.execute("INSERT INTO schema_version VALUES (%s, %s, %s)", self._version_row())
                cur.executemany("INSERT INTO ptexport_migrations VALUES (%s, %s)", self._migration_rows())
                cur.execute("ANALYZE")
            conn.close()
            self.conn = None
            if self._database_exists(self.dbname):  # only with force (checked at open)
                self._swap_with_previous()
            else:
                _mark_placed()  # one statement: from here a signal stops nothing
                self.admin.execute(self._rename(self.tmp_name, self.dbname))
        except psycopg.Error as e:
            raise _wrap(e, self.target, "finishing the database") from e
        # in place: the temporary's name is now the previous database's, or no database's
        self._drop_tmp_and_close_admin()

    @staticmethod
    def _rename(old: str, new: str) -> Any:
        return pgsql.SQL("ALTER DATABASE {} RENAME TO {}").format(pgsql.Identifier(old), pgsql.Identifier(new))

    def _swap_with_previous(self) -> None:
        """The new database takes the target's name and the previous one the temporary's, in one
        transaction: whatever ends the export (a signal, the server ending this session), the
        target is the previous database or the new one, never neither; and the temporary's name
        is always the database to drop (the new one before the commit, the previous one after)."""
        # sessions on the previous database would keep it from being renamed: ended (as DROP ... WITH (FORCE) does)
        self.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = %s AND pid <> pg_backend_pid()", (self.dbname,))
        swap = f"{self.dbname[:PG_NAME_KEEP]}__ptexport_swap_{os.getpid()}"
        with self.admin.transaction():
            self.admin.execute(self._rename(self.dbname, swap))
            self.admin.execute(self._rename(self.tmp_name, self.dbname))
            self.admin.execute(self._rename(swap, self.tmp_name))
            _mark_placed()  # only the commit is left: from here a signal stops nothing

    def abort(self) -> None:
        for f in self._pending:
            f.cancel()
        try:
            self._drain()
        except BaseException:  # noqa: BLE001 - aborting anyway; the temporary database goes
            pass
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error:  # pragma: no cover
                pass
            self.conn = None
        self._drop_tmp_and_close_admin()

    def _drop_tmp_and_close_admin(self) -> None:
        """Drop the temporary database (best effort, also after an interrupted statement or with
        the maintenance session ended by the server: through a new one) and close."""
        for _ in range(2):  # a statement cut by Ctrl-C can leave the connection needing one more round
            try:
                if self.admin.closed:
                    self.admin = self._connect("postgres", connect_timeout=5)
                self.admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    pgsql.Identifier(self.tmp_name)))
                break
            except psycopg.Error:  # best effort: a new session for the next round
                self.admin.close()
            except ExportError:  # no server to drop it on: the next export or `ptexport clean` will
                break
        self.admin.close()
        self._export_over()


def clean_postgres(target: str, dry_run: bool = False) -> CleanReport:
    """``ptexport clean URL``: temporary databases of exports to the URL's database that died
    (dropped unless ``dry_run``); nothing while an export holds the target's lock."""
    params = parse_target(target)
    dbname = str(params["dbname"])
    shown = _redacted(params)
    report = CleanReport()
    try:
        admin = psycopg.connect(make_conninfo(**dict(params, dbname="postgres")), autocommit=True)
    except psycopg.Error as e:
        raise _wrap(e, shown, "cannot connect") from e
    try:
        if not pg_try_lock(admin, "target", dbname):
            report.busy.append(shown)
            return report
        found = pg_drop_leftovers(admin, pg_leftovers(admin, dbname), dry_run)
        for x in found:
            x.target = shown
        report.leftovers.extend(found)
    except psycopg.Error as e:
        raise _wrap(e, shown, "cleaning") from e
    finally:
        admin.close()  # releases the advisory locks
    return report
