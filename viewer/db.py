"""Read-only database access for the viewer: SQLite files, DuckDB files and PostgreSQL URLs.

Everything the viewer reads goes through :class:`Database`.  It opens the
database read-only (SQLite ``file:...?mode=ro`` URI plus ``PRAGMA query_only``;
DuckDB ``read_only`` through SQLAlchemy's DuckDB dialect, the ``duckdb_engine``
package; PostgreSQL ``default_transaction_read_only``), hands out SQLAlchemy
connections wrapped in a :class:`Session` that can be cancelled from another
thread (SQLite progress handler / ``interrupt()``, DuckDB ``interrupt()``,
PostgreSQL cancel request) and that enforces a statement timeout (DuckDB has
none of its own: a timer interrupts the statement), and describes the schema it found
(:class:`Capabilities`) so that queries work on perf's plain schema and use
ptexport's additions when they are present.

No Qt here: the Qt layer (workers, models) sits on top.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from ptexport.errors import PtExportError

from .branchnames import branch_type_name

# Indexes that make the viewer's keyset paging and tree expansion fast.  perf
# creates only the two on calls; ptexport's exporter creates these and more.
# They are added only to an in-memory copy (the file itself is never written).
UPGRADE_INDEXES = (
    ("ptv_calls_parent", "calls", "parent_id"),
    ("ptv_calls_pcp", "calls", "parent_call_path_id, comm_id, thread_id"),
    ("ptv_calls_thread", "calls", "thread_id, parent_id, call_time"),
    ("ptv_samples_time", "samples", "time"),
    ("ptv_samples_cpu", "samples", "cpu, id"),
    ("ptv_cs_cpu", "context_switches", "machine_id, cpu, time"),
    ("ptv_comms_thread", "comms", "c_thread_id"),
)

_memory_ids = itertools.count(1)

#: The first bytes of a DuckDB database file: an 8-byte checksum, then the magic.
DUCKDB_MAGIC = b"DUCK"
DUCKDB_SUFFIXES = (".duckdb", ".ddb")


def target_kind(target: str) -> str:
    """``sqlite``, ``duckdb`` or ``postgresql``: from the URL scheme, ``duckdb:PATH``, the suffix, or the
    file's first bytes (a DuckDB file under any name)."""
    if target.startswith(("postgresql:", "postgres:", "postgresql+")):
        return "postgresql"
    if target.startswith("duckdb:") or target.lower().endswith(DUCKDB_SUFFIXES):
        return "duckdb"
    try:
        with open(target, "rb") as f:
            head = f.read(12)
    except OSError:
        return "sqlite"  # the SQLite path reports what is wrong with it
    return "duckdb" if head[8:12] == DUCKDB_MAGIC else "sqlite"


class ViewerError(PtExportError):
    """A database the viewer cannot open or read."""


class QueryError(ViewerError):
    """A statement the database refused; the message is the database's own."""

    def __init__(self, message: str, sql: str | None = None) -> None:
        self.sql = sql
        super().__init__(message)


class QueryCancelled(ViewerError):
    """The statement was cancelled by the user or ran past its timeout."""


@dataclass
class Capabilities:
    """What the schema holds: perf's base tables, optional parts, ptexport additions."""

    tables: dict[str, list[str]] = field(default_factory=dict)  # table -> columns
    views: dict[str, list[str]] = field(default_factory=dict)
    branch_events: list[tuple[int, str]] = field(default_factory=list)   # selected_events named *branches*
    server_version: str = ""

    def has(self, name: str) -> bool:
        return name in self.tables or name in self.views

    def columns(self, name: str) -> list[str]:
        return self.tables.get(name) or self.views.get(name) or []

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns(table)

    @property
    def has_calls(self) -> bool:
        return "calls" in self.tables and "call_paths" in self.tables

    @property
    def calls_ipc(self) -> bool:
        return self.has_column("calls", "insn_count") and self.has_column("calls", "cyc_count")

    @property
    def samples_ipc(self) -> bool:
        return self.has_column("samples", "insn_count") and self.has_column("samples", "cyc_count")

    @property
    def has_vcpus(self) -> bool:
        return "vcpus" in self.tables

    @property
    def samples_vcpu(self) -> bool:
        return self.has_column("samples", "vcpu")

    @property
    def has_context_switches(self) -> bool:
        return "context_switches" in self.tables

    @property
    def ptexport(self) -> bool:
        """True for a database with ptexport's additions (else a plain perf export)."""
        return self.has_vcpus or self.samples_vcpu or "decode_errors" in self.tables


class Session:
    """One checked-out connection that another thread may cancel.

    ``execute`` runs a statement and returns all rows (or ``fetch`` of them);
    a database error becomes :class:`QueryError` carrying the database's
    message, a cancel or timeout becomes :class:`QueryCancelled`.
    """

    def __init__(self, db: "Database", conn: Connection, timeout: float | None) -> None:
        self.db = db
        self.conn = conn
        self.timeout = timeout
        self._cancelled = threading.Event()
        self._deadline: float | None = None
        self._raw = conn.connection.dbapi_connection
        self._timer: threading.Timer | None = None
        if db.is_sqlite:
            self._raw.set_progress_handler(self._sqlite_progress, 2000)

    # -- cancellation ------------------------------------------------------
    def cancel(self) -> None:
        """Ask the running statement to stop (safe from any thread)."""
        self._cancelled.set()
        try:
            if self.db.is_postgres:
                self._raw.cancel()
            else:
                self._raw.interrupt()
        except Exception:  # the connection may already be closed: nothing to cancel
            pass

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def _sqlite_progress(self) -> int:
        if self._cancelled.is_set():
            return 1
        if self._deadline is not None and time.monotonic() > self._deadline:
            return 1
        return 0

    # -- statements --------------------------------------------------------
    def execute_user(self, sql: str, fetch: int | None = None) -> tuple[list[str], list[tuple]]:
        """Run a statement the user typed: exactly one statement, and on PostgreSQL inside a
        READ ONLY transaction that is always rolled back (so even ``SET`` does not outlive it)."""
        if has_two_statements(sql):
            raise QueryError("one statement at a time (remove the ';' between statements)", sql)
        if not self.db.is_postgres:  # the connection itself is read-only
            return self.execute(sql, None, fetch)
        try:
            self._rollback()
            self._apply_timeout()
            self.conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            return self.execute(sql, None, fetch)
        finally:
            self._rollback()

    def execute(self, sql: str, params: dict[str, Any] | None = None, fetch: int | None = None
                ) -> tuple[list[str], list[tuple]]:
        """Run ``sql`` with bound ``params``; return (column names, rows)."""
        if self.cancelled:
            raise QueryCancelled("cancelled")
        self._deadline = time.monotonic() + self.timeout if self.timeout else None
        timed_out = False
        if self.db.is_duckdb and self.timeout:
            def expire() -> None:
                nonlocal timed_out
                timed_out = True
                with contextlib.suppress(Exception):
                    self._raw.interrupt()

            self._timer = threading.Timer(self.timeout, expire)
            self._timer.daemon = True
            self._timer.start()
        try:
            self._apply_timeout()
            result = self.conn.execute(sa.text(sql), params or {})
            if not result.returns_rows:
                return [], []
            cols = list(result.keys())
            rows = result.fetchmany(fetch) if fetch is not None else result.fetchall()
            result.close()
            return cols, [tuple(r) for r in rows]
        except sa.exc.DBAPIError as e:
            self._rollback()
            msg = str(e.orig) if e.orig is not None else str(e)
            msg = msg.strip().splitlines()[0] if msg.strip() else type(e.orig).__name__
            if self.cancelled:
                raise QueryCancelled("cancelled") from e
            if timed_out or self._timed_out(e):
                raise QueryCancelled(f"statement timeout ({self.timeout:g} s): {msg}") from e
            raise QueryError(msg, sql) from e
        except sa.exc.SQLAlchemyError as e:
            self._rollback()
            raise QueryError(str(e).splitlines()[0], sql) from e
        finally:
            self._deadline = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        return self.execute(sql, params)[1]

    def scalar(self, sql: str, params: dict[str, Any] | None = None, default: Any = None) -> Any:
        rows = self.execute(sql, params, fetch=1)[1]
        return rows[0][0] if rows and rows[0][0] is not None else default

    def _apply_timeout(self) -> None:
        """PostgreSQL: pooled connections keep their setting; set it whenever it differs."""
        if not self.db.is_postgres:
            return
        want = int(self.timeout * 1000) if self.timeout else 0
        info = self.conn.connection.info
        if info.get("ptv_statement_timeout", 0) != want:
            self.conn.exec_driver_sql(f"SET statement_timeout = {want}")
            self.conn.commit()
            info["ptv_statement_timeout"] = want

    def _timed_out(self, e: sa.exc.DBAPIError) -> bool:
        text = str(e.orig).lower()
        if not self.db.is_postgres:
            return "interrupted" in text and not self.cancelled
        return "statement timeout" in text

    def _rollback(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.rollback()


class Database:
    """A read-only handle on one exported database (SQLite or DuckDB path, or postgresql:// URL).

    ``in_memory=True`` (SQLite only) copies the file into a shared in-memory
    database and adds the indexes of :data:`UPGRADE_INDEXES`: this is how a
    database written by perf's export-to-sqlite.py (which has only two
    indexes) is upgraded for fast browsing without ever writing the file.
    """

    def __init__(self, target: str | os.PathLike[str], *, in_memory: bool = False,
                 user_timeout: float = 30.0) -> None:
        self.target = str(target)
        self.user_timeout = user_timeout
        self.kind = target_kind(self.target)
        self.is_sqlite = self.kind == "sqlite"
        self.is_duckdb = self.kind == "duckdb"
        self.is_postgres = self.kind == "postgresql"
        self.in_memory = in_memory and self.is_sqlite
        self._keeper: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._sessions: set[Session] = set()
        if self.is_sqlite:
            self.engine = self._sqlite_engine()
        elif self.is_duckdb:
            self.engine = self._duckdb_engine()
        else:
            self.engine = self._pg_engine()
        with self.session() as s:
            self.caps = self._introspect(s)
        if not self.caps.has("samples") and not self.caps.has("calls") and not self.caps.has("comms"):
            self.close()
            raise ViewerError(f"{self.display_name}: not a perf/ptexport export (no samples, calls or comms table)")

    # -- engines -----------------------------------------------------------
    def _sqlite_engine(self) -> Engine:
        path = Path(self.target)
        if not path.is_file():
            raise ViewerError(f"{self.target}: no such database file")
        try:
            with path.open("rb") as f:
                magic = f.read(16)
        except OSError as e:
            raise ViewerError(f"{self.target}: {e.strerror}") from e
        if magic != b"SQLite format 3\x00":
            raise ViewerError(f"{self.target}: not an SQLite database")
        if self.in_memory:
            name = f"ptexport_viewer_{os.getpid()}_{next(_memory_ids)}"
            uri = f"file:{name}?mode=memory&cache=shared"
            src = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
            self._keeper = sqlite3.connect(uri, uri=True, check_same_thread=False)
            src.backup(self._keeper)
            src.close()
            tables = {r[0] for r in self._keeper.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for idx, table, cols in UPGRADE_INDEXES:
                if table in tables:
                    have = {r[1] for r in self._keeper.execute(f"PRAGMA table_info({table})")}
                    if all(c.strip() in have for c in cols.split(",")):
                        self._keeper.execute(f"CREATE INDEX IF NOT EXISTS {idx} ON {table} ({cols})")
            self._upgrade_copy(self._keeper, tables)
            self._keeper.commit()
            creator_uri = uri
        else:
            creator_uri = f"file:{path.resolve().as_posix()}?mode=ro"

        def creator() -> sqlite3.Connection:
            c = sqlite3.connect(creator_uri, uri=True, check_same_thread=False)
            c.execute("PRAGMA query_only = ON")
            return c

        return sa.create_engine("sqlite+pysqlite://", creator=creator, poolclass=NullPool)

    @staticmethod
    def _upgrade_copy(con: sqlite3.Connection, tables: set[str]) -> None:
        """What perf's exporter leaves out, added to the in-memory copy only: ``comms.has_calls``
        (when perf was not asked for calls it is missing) and a ``branch_types`` name for every
        flag value the samples use (perf has none for e.g. 4131, an asynchronous VM exit)."""
        if "comms" in tables and "calls" in tables:
            have = {r[1] for r in con.execute("PRAGMA table_info(comms)")}
            if "has_calls" not in have:
                con.execute("ALTER TABLE comms ADD has_calls boolean")
                con.execute("UPDATE comms SET has_calls = 1 WHERE id IN (SELECT DISTINCT comm_id FROM calls)")
        if "branch_types" in tables and "samples" in tables:
            missing = [r[0] for r in con.execute(
                "SELECT DISTINCT branch_type FROM samples WHERE branch_type NOT IN (SELECT id FROM branch_types)")]
            con.executemany("INSERT INTO branch_types (id, name) VALUES (?, ?)",
                            [(int(b), branch_type_name(int(b))) for b in missing if b is not None])

    def _duckdb_engine(self) -> Engine:
        """DuckDB through SQLAlchemy's DuckDB dialect (``duckdb_engine``), opened read-only: other
        processes may read the file meanwhile, none may write it."""
        path = Path(self.target.removeprefix("duckdb:"))
        if not path.is_file():
            raise ViewerError(f"{self.target}: no such database file")
        try:
            with path.open("rb") as f:
                head = f.read(12)
        except OSError as e:
            raise ViewerError(f"{self.target}: {e.strerror}") from e
        if head[8:12] != DUCKDB_MAGIC:
            raise ViewerError(f"{self.target}: not a DuckDB database")
        try:
            import duckdb_engine  # noqa: F401  (lazy: registers the dialect; only for DuckDB files)
        except ImportError as e:
            raise ViewerError(f"{self.target}: opening a DuckDB database needs the duckdb_engine package "
                              "(pip install duckdb_engine)") from e
        return sa.create_engine(f"duckdb:///{path.resolve().as_posix()}",
                                connect_args={"read_only": True}, poolclass=NullPool)

    def _pg_engine(self) -> Engine:
        url = self.target
        for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
            if url.startswith(prefix):
                url = "postgresql+psycopg://" + url[len(prefix):]
                break
        opts = "-c default_transaction_read_only=on -c statement_timeout=0"
        try:
            engine = sa.create_engine(url, connect_args={"options": opts}, pool_pre_ping=False)
        except sa.exc.ArgumentError as e:
            raise ViewerError(f"{self.target}: {e}") from e
        return engine

    @property
    def display_name(self) -> str:
        if self.is_sqlite:
            return Path(self.target).name
        if self.is_duckdb:
            return Path(self.target.removeprefix("duckdb:")).name
        return sa.engine.make_url(self.target).render_as_string(hide_password=True)

    # -- sessions ----------------------------------------------------------
    @contextlib.contextmanager
    def session(self, timeout: float | None = None) -> Iterator[Session]:
        """A cancellable read-only connection for the duration of a ``with`` block."""
        try:
            conn = self.engine.connect()
        except sa.exc.DBAPIError as e:
            raise ViewerError(f"{self.display_name}: cannot connect: {str(e.orig).strip().splitlines()[0]}") from e
        s = Session(self, conn, timeout)
        with self._lock:
            self._sessions.add(s)
        try:
            yield s
        finally:
            with self._lock:
                self._sessions.discard(s)
            with contextlib.suppress(Exception):
                conn.rollback()
            conn.close()

    def cancel_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions)
        for s in sessions:
            s.cancel()

    def close(self) -> None:
        self.cancel_all()
        self.engine.dispose()
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None

    # -- schema ------------------------------------------------------------
    def _introspect(self, s: Session) -> Capabilities:
        caps = Capabilities()
        if self.is_sqlite:
            for name, kind in s.rows("SELECT name, type FROM sqlite_master WHERE type IN ('table','view') "
                                     "AND name NOT LIKE 'sqlite_%' ORDER BY name"):
                cols = [r[1] for r in s.rows(f'PRAGMA table_info("{name}")')]
                (caps.tables if kind == "table" else caps.views)[name] = cols
        else:
            for name, kind in s.rows("SELECT table_name, table_type FROM information_schema.tables "
                                     "WHERE table_schema = current_schema() ORDER BY table_name"):
                cols = [r[0] for r in s.rows(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                    "AND table_name = :t ORDER BY ordinal_position", {"t": name})]
                (caps.views if kind == "VIEW" else caps.tables)[name] = cols
        # read once at opening, so the window itself never queries in the GUI thread
        if "selected_events" in caps.tables:
            caps.branch_events = [(int(i), n) for i, n in s.rows(
                "SELECT id, name FROM selected_events WHERE id > 0 AND name LIKE '%branches%' ORDER BY id")]
        version = s.scalar("SELECT sqlite_version()" if self.is_sqlite else "SELECT version()", default="")
        caps.server_version = ("SQLite " if self.is_sqlite else "DuckDB " if self.is_duckdb else "") + str(version)
        return caps

    def table_names(self) -> list[str]:
        return sorted(list(self.caps.tables) + list(self.caps.views))


def has_two_statements(sql: str) -> bool:
    """True when ``sql`` holds a ';' followed by more SQL, outside strings, quoted names and comments."""
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            j = sql.find(c, i + 1)
            while j != -1 and j + 1 < n and sql[j + 1] == c:      # doubled quote inside
                j = sql.find(c, j + 2)
            if j == -1:
                return False
            i = j + 1
            continue
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j == -1 else j + 1
            continue
        if sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j == -1 else j + 2
            continue
        if c == "$":
            end = sql.find("$", i + 1)
            tag = sql[i:end + 1] if end != -1 else ""
            if tag and (tag == "$$" or tag[1:-1].isidentifier()):
                j = sql.find(tag, end + 1)
                if j == -1:
                    return False
                i = j + len(tag)
                continue
        if c == ";":
            rest = sql[i + 1:]
            return bool(rest.strip()) and not all(
                ln.strip().startswith("--") or not ln.strip() for ln in rest.splitlines())
        i += 1
    return False


def quote_ident(name: str) -> str:
    """Quote an identifier for both SQLite and PostgreSQL."""
    return '"' + name.replace('"', '""') + '"'


def csv_lines(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as CSV text (RFC 4180 quoting), header first."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if columns:
        w.writerow(columns)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
    return buf.getvalue()
