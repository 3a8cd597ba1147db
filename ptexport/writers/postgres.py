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

Loading runs at the server's pace: integer batches are encoded as binary COPY
rows by numpy (one structured array per batch, big-endian fields, no Python
loop per row) and sent by several COPY streams at once, each its own
connection and thread (:class:`_Stream`): the samples through
``SAMPLE_STREAMS`` of them taking batches in turn, the calls through one, every
other table through the first connection.  The tables have no keys or indexes
while they load, and every session sets ``synchronous_commit`` off.  At the
end each table's key, indexes and ``ANALYZE`` run in order (one transaction)
on one of ``FINISH_STREAMS`` connections, the tables side by side, the largest
first; a large index build also takes the server's parallel maintenance
workers (``max_parallel_maintenance_workers``).

With a dask cluster (``--scheduler``) the samples and calls batches go to the cluster's workers
instead (:meth:`PostgresWriter.offload`): each worker encodes and COPYs its batches on its own
session (:mod:`ptexport.writers.pg_copy`, once per batch however often a task runs), and the
writer checks what they loaded against what it was given before it builds the keys.

The tables are logged from the start: an unlogged load set ``LOGGED`` at the
end writes every table twice more (``SET LOGGED`` rewrites it and, unless the
server's ``wal_level`` is ``minimal``, copies it into the WAL), which costs
more than the COPYs' WAL it saves: 39.2 s against 21.7 s for 10 M samples in
bench/bench_postgres.py, which measures both (``PTEXPORT_PG_UNLOGGED=1``
loads that way).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ptexport.errors import DatabaseExistsError, ExportError, TargetBusyError
from ptexport.writers.leftovers import (PG_NAME_KEEP, CleanReport, Leftover, export_ended, export_started,
                                       pg_drop_leftovers, pg_leftovers, pg_tmp_name, pg_try_lock)
from ptexport.writers.base import Writer, _mark_placed, distinct
from ptexport.writers.pg_copy import (LOAD_APPLICATION, MARKER_SQL, MARKER_TABLE, binary_encodable,
                                      copy_chunks, copy_sql, encode_binary, set_for_loading, wrap_error)
from ptexport.writers.targets import parse_target

try:
    import psycopg
    from psycopg import sql as pgsql
    from psycopg.conninfo import make_conninfo
except ImportError:  # pragma: no cover - a dependency
    psycopg = None  # type: ignore[assignment]

#: COPY batches queued for each stream's thread before write_* waits (bounded memory).
MAX_PENDING = 2
#: Connections loading the samples, taking batches in turn.
SAMPLE_STREAMS = 2
#: Connections building keys and indexes at the end (the tables side by side).
FINISH_STREAMS = 3
#: The tables that have a COPY stream of their own (others go through the first connection); with
#: a cluster (:meth:`PostgresWriter.offload`) the workers load these.
_OWN_STREAM = ("samples", "calls")


def _wrap(e: Exception, target: str, what: str) -> ExportError:
    return wrap_error(e, target, what)


def _redacted(params: dict[str, Any]) -> str:
    p = {k: v for k, v in params.items() if k != "password"}
    return f"postgresql://{p.get('user', '')}@{p.get('host', '')}:{p.get('port', '')}/{p.get('dbname')}"


def unlogged_load() -> bool:
    """``PTEXPORT_PG_UNLOGGED=1``: load into unlogged tables, set LOGGED at the end (for the bench)."""
    return os.environ.get("PTEXPORT_PG_UNLOGGED", "") not in ("", "0")


class _Stream:
    """One connection to the temporary database and one thread running its statements in order.

    ``submit`` returns at once while fewer than ``MAX_PENDING`` statements wait (the caller
    encodes the next batch meanwhile); an error of a statement is raised by a later ``submit``
    or by ``drain``.
    """

    def __init__(self, conn: psycopg.Connection, name: str) -> None:
        self.conn = conn
        self.name = name
        self._pool: ThreadPoolExecutor | None = None  # started by the first submit after a stop
        self._pending: deque[Future[None]] = deque()

    def submit(self, fn: Any, *args: Any) -> None:
        """Run ``fn(conn, *args)`` in the stream's thread, after what was submitted before."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ptexport-{self.name}")
        while len(self._pending) >= MAX_PENDING:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, self.conn, *args))

    def drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def stop(self) -> None:
        """No more statements: the thread ends (after ``drain``, or ``cancel``)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def cancel(self) -> None:
        """Drop what has not started, ask the server to cancel what runs, wait for it (errors ignored)."""
        for f in self._pending:
            f.cancel()
        if any(f.running() for f in self._pending):
            try:
                if hasattr(self.conn, "cancel_safe"):  # psycopg >= 3.2
                    self.conn.cancel_safe(timeout=5)
                else:  # pragma: no cover - psycopg 3.1
                    self.conn.cancel()
            except (psycopg.Error, OSError):  # best effort: the temporary database goes anyway
                pass
        for f in self._pending:
            try:
                if not f.cancelled():
                    f.result()
            except BaseException:  # noqa: BLE001 - aborting anyway
                pass
        self._pending.clear()
        self.stop()

    def close(self) -> None:
        try:
            self.conn.close()
        except psycopg.Error:  # pragma: no cover
            pass


class PostgresWriter(Writer):
    dialect = "postgresql"

    def __init__(self, target: str, *, force: bool = False) -> None:
        super().__init__()
        self.params = parse_target(target)
        self.dbname = str(self.params["dbname"])
        self.target = _redacted(self.params)
        self.tmp_name = pg_tmp_name(self.dbname, os.getpid())
        self.unlogged = unlogged_load()
        self._exporting = False
        self.conn: psycopg.Connection | None = None  # the temporary database's first session
        #: COPY streams by name ("main": the first session; "samples0", "samples1", ..., "calls")
        self._streams: dict[str, _Stream] = {}
        self._next_sample_stream = 0
        self._stopping = threading.Event()  # set by abort: the finish's sessions start no further statement
        self._call_comms: set[int] = set()  # comm ids of the calls rows: comms.has_calls without a scan
        self._copier: Any = None  # with a cluster: the workers load the samples and calls (offload)
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
            self.conn = self._data_session()
            self._streams["main"] = _Stream(self.conn, "main")
            tables = list(self.schema.table_sql.values())
            if self.unlogged:
                tables = [s.replace("CREATE TABLE ", "CREATE UNLOGGED TABLE ", 1) for s in tables]
            # one round trip, one transaction (statement by statement: 0.2-0.7 s of commits)
            self.conn.execute(";\n".join([*tables, *self.schema.view_sql.values(), *self.schema.comment_sql]))
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

    def _connect(self, dbname: str, **options: Any) -> psycopg.Connection:
        params = dict(self.params, dbname=dbname)
        for k, v in options.items():
            params.setdefault(k, v)
        try:
            return psycopg.connect(make_conninfo(**params), autocommit=True)
        except psycopg.Error as e:
            raise _wrap(e, _redacted(params), "cannot connect") from e

    def _data_session(self) -> psycopg.Connection:
        """A new session on the temporary database, set for loading."""
        return set_for_loading(self._connect(self.tmp_name))

    def _database_exists(self, name: str) -> bool:
        return self.admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None

    # ------------------------------------------------------------ inserts
    def _stream(self, table: str) -> _Stream:
        """The COPY stream of ``table`` (opened on first use): the samples' in turn, the calls', or the first."""
        if table not in _OWN_STREAM:
            return self._streams["main"]
        if table == "samples":
            name = f"samples{self._next_sample_stream}"
            self._next_sample_stream = (self._next_sample_stream + 1) % SAMPLE_STREAMS
        else:
            name = table
        stream = self._streams.get(name)
        if stream is None:
            try:
                conn = self._data_session()
            except psycopg.Error as e:
                raise _wrap(e, self.target, f"cannot open a session for {table}") from e
            stream = self._streams[name] = _Stream(conn, name)
        return stream

    def _copy_sql(self, table: str, binary: bool) -> Any:
        return copy_sql(table, self.schema.columns(table), binary)

    def _insert_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        if table == "calls":
            j = self.schema.columns("calls").index("comm_id")
            self._call_comms.update(int(r[j]) for r in rows)
        self._stream(table).submit(self._copy_rows, table, rows)

    def _copy_rows(self, conn: psycopg.Connection, table: str, rows: list[tuple[Any, ...]]) -> None:
        try:
            with conn.cursor() as cur, cur.copy(self._copy_sql(table, False)) as cp:
                for r in rows:
                    cp.write_row(r)
        except psycopg.Error as e:
            raise _wrap(e, self.target, f"writing {table}") from e

    def _copy_binary(self, conn: psycopg.Connection, table: str, chunks: list[Any]) -> None:
        try:
            with conn.cursor() as cur:
                copy_chunks(cur, self._copy_sql(table, True), chunks)
        except psycopg.Error as e:
            raise _wrap(e, self.target, f"writing {table}") from e

    def _insert_columns(self, table: str, cols: dict[str, Any], n: int) -> None:
        cdefs = self.schema.tables[table]
        if table == "calls":
            # the column, or its default (a scalar, broadcast by the writer) as one value
            self._call_comms.update(distinct(np.asarray(cols["comm_id"], dtype=np.int64).reshape(-1)).tolist())
        columns = [(c.name, c.type) for c in cdefs]
        if not binary_encodable([t for _c, t in columns]):
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
        if self._copier is not None and table in _OWN_STREAM:
            self._copier.submit(table, columns, cols, n)  # encoded and loaded by a worker
            return
        self._stream(table).submit(self._copy_binary, table, encode_binary(columns, cols, n))

    # ------------------------------------------------------------ the cluster's workers
    def worker_params(self) -> dict[str, Any]:
        """Connection parameters of the temporary database (what a worker's session needs)."""
        return dict(self.params, dbname=self.tmp_name)

    def offload(self, copier: Any) -> None:
        """From now on the workers behind ``copier`` load the samples and calls batches
        (:class:`ptexport.session.cluster.DaskCopies`: ``submit(table, columns, cols, n)``,
        ``drain() -> batches loaded``, ``cancel()``); each batch once (:mod:`ptexport.writers.pg_copy`)."""
        try:
            self._conn().execute(MARKER_SQL)
        except psycopg.Error as e:
            raise _wrap(e, self.target, "cannot create the workers' batch table") from e
        self._copier = copier

    def _finish_copies(self) -> None:
        """Every batch the workers were sent is loaded, once: the keys they left say so; then dropped."""
        copier, self._copier = self._copier, None
        if copier is None:
            return
        sent = copier.drain()
        with self._conn().cursor() as cur:
            row = cur.execute(f"SELECT count(*), coalesce(sum(nrows), 0) FROM {MARKER_TABLE}").fetchone()
            got = (int(row[0]), int(row[1])) if row is not None else (0, 0)
            if got != (sent[0], sent[1]):
                raise ExportError(f"{self.target}: the cluster's workers loaded {got[0]} batches ({got[1]} rows), "
                                  f"{sent[0]} ({sent[1]} rows) were sent")
            # and those are every row given to this writer, table by table
            loaded: dict[str, Any] = dict(cur.execute(f"SELECT tbl, sum(nrows) FROM {MARKER_TABLE} GROUP BY tbl")
                                          .fetchall())
            for table in _OWN_STREAM:
                if int(loaded.get(table) or 0) != self.row_counts.get(table, 0):
                    raise ExportError(f"{self.target}: the cluster's workers loaded {int(loaded.get(table) or 0)} rows "
                                      f"of {table}, the export made {self.row_counts.get(table, 0)}")
            cur.execute(f"DROP TABLE {MARKER_TABLE}")
        # a worker's session left open (its worker gone from the cluster) would keep the database from
        # being renamed
        self.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                           "AND application_name = %s", (self.tmp_name, LOAD_APPLICATION))

    # ------------------------------------------------------------ end
    def _finish_jobs(self) -> list[list[Any]]:
        """Each table's statements in their order (SET LOGGED, key, indexes, ANALYZE), the largest
        table's first.  A table's statements lock it (ADD PRIMARY KEY exclusively), so they run
        one after the other on one session; different tables' run side by side."""
        indexes: dict[str, list[str]] = {}
        for name, sql in self.schema.index_sql.items():
            indexes.setdefault(self.schema.index_table[name], []).append(sql)
        jobs = []
        for table in self.schema.tables:
            stmts: list[Any] = []
            if table == "comms" and self._call_comms:
                # = UPDATE ... WHERE id IN (SELECT DISTINCT comm_id FROM calls), without reading calls back
                stmts.append(("UPDATE comms SET has_calls = TRUE WHERE id = ANY(%s)", (sorted(self._call_comms),)))
            plain = [f"ALTER TABLE {table} SET LOGGED"] if self.unlogged else []
            key = self.schema.primary_key_of(table)
            if key is not None:
                plain.append(key)
            plain += indexes.get(table, [])
            plain.append(f"ANALYZE {table}")
            stmts.append(";\n".join(plain))  # one round trip (and transaction)
            rows = self.row_counts.get(table, 0)
            jobs.append((rows * (1 + len(indexes.get(table, []))), stmts))
        jobs.sort(key=lambda j: -j[0])
        return [stmts for _, stmts in jobs]

    def _run_jobs(self, jobs: list[list[Any]]) -> None:
        """Run ``jobs`` (lists of statements) on ``FINISH_STREAMS`` sessions, each job on one."""
        streams = list(self._streams.values())[:FINISH_STREAMS]
        while len(streams) < min(FINISH_STREAMS, len(jobs)):
            stream = _Stream(self._data_session(), f"finish{len(streams)}")
            self._streams[stream.name] = stream
            streams.append(stream)
        todo = deque(jobs)
        lock = threading.Lock()

        def worker(conn: psycopg.Connection) -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    stmts = todo.popleft()
                try:
                    with conn.cursor() as cur:
                        for s in stmts:
                            if self._stopping.is_set():
                                return
                            if isinstance(s, tuple):
                                cur.execute(*s)
                            else:
                                cur.execute(s)
                except BaseException:
                    self._stopping.set()  # the other sessions stop too: the export fails
                    raise

        for st in streams:
            st.submit(worker)
        for st in streams:
            st.drain()
        for st in streams:
            st.stop()

    def _finish_database(self) -> None:
        try:
            for st in self._streams.values():
                st.drain()
            for st in self._streams.values():
                st.stop()
            self._finish_copies()
            self._run_jobs(self._finish_jobs())
            with self._conn().cursor() as cur:
                cur.execute("INSERT INTO schema_version VALUES (%s, %s, %s)", self._version_row())
                cur.executemany("INSERT INTO ptexport_migrations VALUES (%s, %s)", self._migration_rows())
            self._close_streams()
            if self._database_exists(self.dbname):  # only with force (checked at open)
                self._swap_with_previous()
            else:
                _mark_placed()  # one statement: from here a signal stops nothing
                self.admin.execute(self._rename(self.tmp_name, self.dbname))
        except psycopg.Error as e:
            raise _wrap(e, self.target, "finishing the database") from e
        # in place: the temporary's name is now the previous database's, or no database's
        self._drop_tmp_and_close_admin()

    def _conn(self) -> psycopg.Connection:
        assert self.conn is not None  # open from __init__ until the end (finish or abort)
        return self.conn

    def _close_streams(self) -> None:
        for st in self._streams.values():
            st.close()
        self._streams.clear()
        self.conn = None

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
        self._stopping.set()
        copier, self._copier = self._copier, None
        if copier is not None:
            copier.cancel()  # the tasks not started are dropped; the temporary's drop ends the others' sessions
        for st in self._streams.values():
            st.cancel()
        self._close_streams()
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
