"""Binary COPY of integer columns into PostgreSQL: the encoding, and one batch's load from any process.

:class:`~ptexport.writers.postgres.PostgresWriter` encodes its integer batches here (one structured
numpy array per chunk of rows, big-endian fields, no Python loop per row).  With ``--scheduler`` the
large tables' batches (``samples``, ``calls``) are loaded by the cluster's workers instead
(:class:`ptexport.session.cluster.DaskCopies`): :func:`copy_batch` runs on a worker, opens its own
session on the export's temporary database, encodes the batch and COPYs it.

Each batch is loaded exactly once, however often a task runs (a worker that dies after the commit
and before the scheduler hears of it makes dask run the task again): the batch's key - its table and
first id - goes into :data:`MARKER_TABLE` in the COPY's own transaction.  A second run of the same
batch finds the key (waiting for the first run's transaction if it is still open) and loads nothing;
a run that dies before its commit leaves neither the key nor a row.  The writer counts the keys
against the batches it sent before it builds the tables' keys, and drops the marker table.
"""

from __future__ import annotations

import struct
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ptexport.errors import ExportError, StorageError

COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
COPY_TRAILER = struct.pack("!h", -1)
#: Rows per encoded chunk (one structured array each).
CHUNK_ROWS = 1 << 18
#: Rows encoded a column after another while they stay in the CPU's cache (2048 samples: 0.5 MB).
BLOCK_ROWS = 2048
#: Per session: no wait for the WAL flush at each COPY's commit (the database is renamed in
#: place only when complete), and room to sort keys.
SESSION_SETTINGS = ("SET client_min_messages TO WARNING", "SET synchronous_commit TO OFF",
                    "SET maintenance_work_mem TO '256MB'")
#: The keys of the batches loaded by workers: (table, first id), one row per batch.
MARKER_TABLE = "ptexport_copied"
MARKER_SQL = f"CREATE TABLE {MARKER_TABLE} (tbl text NOT NULL, first_id bigint NOT NULL, nrows bigint NOT NULL, " \
             "PRIMARY KEY (tbl, first_id))"
#: The ``application_name`` of the workers' sessions (the writer ends those left before its rename).
LOAD_APPLICATION = "ptexport-load"
BINARY_TYPES = {"bigint": (">i8", 8), "integer": (">i4", 4), "boolean": ("u1", 1)}

#: SQLSTATEs of the server's storage failing: disk_full, io_error.
_STORAGE_SQLSTATES = {"53100": "the server's disk is full", "58030": "I/O error on the server"}


def wrap_error(e: Exception, target: str, what: str) -> ExportError:
    """A psycopg error as the export's typed error: :class:`StorageError` for the server's full disk
    or I/O error, else :class:`ExportError` with the server's first line."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    cause = _STORAGE_SQLSTATES.get(getattr(e, "sqlstate", None) or "")
    if cause:
        return StorageError(f"{target}: {what}: {cause} ({msg})")
    return ExportError(f"{target}: {what}: {msg}")


def binary_values(v: Any, sql_type: str) -> np.ndarray:
    """A column's values as numpy assigns them into its big-endian binary COPY field: booleans as
    0/1, uint64 (addresses) as their two's complement, integers as they are."""
    a = np.asarray(v)
    if sql_type == "boolean":
        return a != 0
    if a.dtype.kind == "u" and a.dtype.itemsize == 8:
        return a.view(np.int64)
    if a.dtype.kind not in "iub":
        return a.astype(np.int64)
    return a


def binary_encodable(types: Sequence[str]) -> bool:
    """Every column has a fixed-size binary field (no text)."""
    return all(t in BINARY_TYPES for t in types)


def encode_binary(columns: Sequence[tuple[str, str]], cols: dict[str, Any], n: int) -> list[Any]:
    """``n`` rows of ``columns`` ((name, SQL type), the table's order) as binary COPY row data, in
    chunks of :data:`CHUNK_ROWS` rows (each a buffer over one structured array; no header or
    trailer).  A scalar in ``cols`` is that column's value in every row."""
    fields: list[tuple[str, str]] = [("n", ">i2")]
    for j, (_name, sql_type) in enumerate(columns):
        fields += [(f"l{j}", ">i4"), (f"v{j}", BINARY_TYPES[sql_type][0])]
    dt = np.dtype(fields)
    tpl = np.zeros(1, dtype=dt)  # one row: the field count, the lengths, the defaults
    tpl["n"] = len(columns)
    given = []
    for j, (name, sql_type) in enumerate(columns):
        tpl[f"l{j}"] = BINARY_TYPES[sql_type][1]
        v = cols[name]
        if np.isscalar(v):
            tpl[f"v{j}"] = v  # a column's default (an int), in every row
        else:
            given.append((f"v{j}", binary_values(v, sql_type)))
    chunks: list[Any] = []
    for start in range(0, n, CHUNK_ROWS):
        stop = min(n, start + CHUNK_ROWS)
        rec = np.repeat(tpl, stop - start)
        dests = [(rec[name], a) for name, a in given]
        # by blocks of rows that stay in the CPU's cache while each column is written in (a column
        # at a time over the whole chunk strides over every row's cache lines: 6x slower)
        for b in range(start, stop, BLOCK_ROWS):
            e = min(stop, b + BLOCK_ROWS)
            for dst, a in dests:
                dst[b - start:e - start] = a[b:e]
        chunks.append(rec.view(np.uint8).data)  # COPY sends the array's bytes (no copy)
    return chunks


def copy_sql(table: str, names: Sequence[str], binary: bool = True) -> Any:
    """``COPY table (names) FROM STDIN [(FORMAT binary)]`` as a psycopg statement."""
    from psycopg import sql as pgsql

    cols = pgsql.SQL(", ").join(pgsql.Identifier(c) for c in names)
    fmt = pgsql.SQL(" (FORMAT binary)") if binary else pgsql.SQL("")
    return pgsql.SQL("COPY {} ({}) FROM STDIN").format(pgsql.Identifier(table), cols) + fmt


def copy_chunks(cur: Any, statement: Any, chunks: list[Any]) -> None:
    """Send ``chunks`` (binary row data) through one COPY on the cursor ``cur``."""
    with cur.copy(statement) as cp:
        cp.write(COPY_HEADER)
        for chunk in chunks:
            cp.write(chunk)
        cp.write(COPY_TRAILER)


def connect_loading(params: dict[str, Any]) -> Any:
    """A session (autocommit) on the database ``params`` name, set for loading, named
    :data:`LOAD_APPLICATION` (unless ``params`` name it)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    return set_for_loading(psycopg.connect(make_conninfo(**{"application_name": LOAD_APPLICATION, **params}),
                                           autocommit=True))


def set_for_loading(conn: Any) -> Any:
    """``conn`` with :data:`SESSION_SETTINGS` applied (closed if they fail)."""
    try:
        with conn.cursor() as cur:
            for s in SESSION_SETTINGS:
                cur.execute(s)
    except BaseException:
        conn.close()
        raise
    return conn


#: A worker's sessions, one per thread running loads: thread id -> (export key, connection).  A
#: session serves every batch of one export (a new one costs ~10 ms, client and server); the export
#: closes them before it renames its database (:func:`close_sessions`, run on each worker).
_SESSIONS: dict[int, tuple[str, Any]] = {}
_SESSIONS_LOCK = threading.Lock()


def _session(params: dict[str, Any], key: str) -> Any:
    """This thread's session for the export ``key`` (opened, or the one of the batch before)."""
    me = threading.get_ident()
    with _SESSIONS_LOCK:
        old = _SESSIONS.get(me)
    if old is not None:
        if old[0] == key and not old[1].closed and not old[1].broken:
            return old[1]
        old[1].close()  # another export's, or ended
    conn = connect_loading(params)
    with _SESSIONS_LOCK:
        _SESSIONS[me] = (key, conn)
    return conn


def _drop_session(conn: Any) -> None:
    """After an error: ``conn`` is closed and no batch uses it again."""
    with _SESSIONS_LOCK:
        for tid, (_key, c) in list(_SESSIONS.items()):
            if c is conn:
                del _SESSIONS[tid]
    conn.close()


def close_sessions(key: str | None = None) -> int:
    """On a worker: close the sessions of the export ``key`` (None: every one); how many."""
    with _SESSIONS_LOCK:
        gone = [(tid, c) for tid, (k, c) in _SESSIONS.items() if key is None or k == key]
        for tid, _c in gone:
            del _SESSIONS[tid]
    for _tid, c in gone:
        c.close()
    return len(gone)


def copy_batch(params: dict[str, Any], shown: str, table: str, columns: Sequence[tuple[str, str]],
               cols: dict[str, Any], n: int, key: str = "", *, hook: Callable[[str], None] | None = None) -> int:
    """On a worker: load one batch (``n`` rows of ``columns`` of ``table``, named by its first id
    ``cols['id'][0]``: ids are unique, in any order) into the database ``params`` names, once.
    Returns the rows loaded: ``n``, or 0 when an earlier run of the same batch has (its key is in
    :data:`MARKER_TABLE`).  ``shown``: the target as errors name it; ``key``: the export's (its
    batches share a session per thread; without one the session is this batch's own).
    ``hook(stage)`` (tests: a worker dying at a stage) is called with "copied" before the commit
    and "committed" after."""
    import psycopg

    first_id = int(np.asarray(cols["id"])[0])
    what = f"writing {table} (ids from {first_id}, on a cluster worker)"
    try:
        conn = _session(params, key) if key else connect_loading(params)
    except psycopg.Error as e:
        raise wrap_error(e, shown, f"{what}: cannot connect") from e
    ok = False
    try:
        chunks = encode_binary(columns, cols, n)
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(f"INSERT INTO {MARKER_TABLE} VALUES (%s, %s, %s)", (table, first_id, n))
                copy_chunks(cur, copy_sql(table, [c for c, _t in columns]), chunks)
                if hook is not None:
                    hook("copied")
        except psycopg.errors.UniqueViolation:
            ok = True
            return 0  # loaded by an earlier run of this task
        if hook is not None:
            hook("committed")
        ok = True
        return n
    except psycopg.Error as e:
        raise wrap_error(e, shown, what) from e
    finally:
        if not key or not ok:
            _drop_session(conn)
