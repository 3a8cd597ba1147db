"""SQLite writer: one temporary file next to the target, renamed into place at the end.

The temporary file (``.NAME.ptexport-tmp-PID``) sits in the target's
directory so the final ``os.replace`` is an atomic rename on the same file
system; it is written with the journal off (a crash leaves only that
temporary, never a target that looks complete) and fsynced before the rename.
``.NAME.ptexport-lock`` beside the target is held (``flock``) from open to the
end: a second export to the same target is refused at once.  Temporaries of
exports that died (SIGKILL) are removed when the lock is taken
(:mod:`ptexport.writers.leftovers`).  A full disk, an exceeded quota or an I/O
error anywhere (SQLite, spooled pages, index runs, the splice) is a
:class:`~ptexport.errors.StorageError` naming the target and the cause; the
temporaries go, a database being replaced (``--force``) is untouched.
With ``verify`` (or ``$PTEXPORT_VERIFY_DB``, set by the test suite) the
finished temporary must pass ``PRAGMA integrity_check`` and the header check
of :mod:`ptexport.writers.verify` before it is renamed into place.

Three ways in, fastest first, each falling back to the next:

* ``btree`` - the big integer tables (samples, calls, call_paths,
  context_switches, payload tables) are laid down as B-tree pages directly
  (:mod:`ptexport.writers._btree`, background threads, one per table) and
  spliced into the file at the end, with their single-column indexes
  (perf's ``pcpid_idx``/``pid_idx``) built the same way; needs numba and rows
  in increasing id order (a batch out of order splices what was spooled and
  continues through SQL);
* ``bind`` - int64 matrices bound by a numba loop on the connection's own
  handle (:mod:`ptexport.writers._fastsqlite`);
* ``executemany`` - plain ``sqlite3``, used for text columns and without numba.

In the ``btree`` way a batch's rows become a matrix, pages and index keys on
their table's thread; the caller's thread only checks their ids.  At the end
the planner's statistics are ANALYZE's (``analysis_limit`` 1000), except that a
large table without an index (the samples) is counted by the writer rather
than read again (:meth:`SqliteWriter._analyze`).
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from collections import deque
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ptexport.errors import DatabaseExistsError, ExportError, StorageError
from ptexport.writers import _btree
from ptexport.writers import _fastsqlite
from ptexport.writers.leftovers import Leftover, TargetLock, os_error, remove_files, remove_temporary, sqlite_leftovers
from ptexport.writers.verify import require_sound, verify_requested
from ptexport.writers.base import UNKNOWN_ROWS, Writer, _mark_placed, distinct, is_text_type

#: Rows per bound chunk (bounded memory: one int64 matrix of this many rows).
CHUNK_ROWS = 1 << 18
MODES = ("btree", "bind", "executemany")
#: Index entries kept in memory per index; beyond, they go to sorted runs in a file that are
#: merged when the index is laid down (bounded memory however many rows).
INDEX_RUN_ROWS = 1 << 18
#: Entries of a run buffered at least while the runs are merged.
RUN_BUFFER_MIN = 1 << 12
_INDEX = re.compile(r"^CREATE INDEX (\w+) ON \w+ \((\w+(?:, *\w+)*)\)$")
#: Rows kept aside (ids below already spooled ones) before a table is spliced early.
LATE_MAX_ROWS = 2_000_000
#: What a late row costs SQLite (inserted into the spliced table: a page split each, measured ~4 us)
#: and what a spooled row costs LeafSpool.merge (read back and built again, ~0.2 us), for _merge_late's choice.
LATE_ROW_S = 4e-6
MERGE_ROW_S = 2e-7
#: A table without an index holding at least this many rows gets its ``sqlite_stat1`` row (its row
#: count) from the writer's count: ANALYZE counts such a table by reading it whole (``analysis_limit``
#: bounds only the index samples), 0.9-1.3 s of a 10 M-sample export's finish.
ANALYZE_COUNTED_ROWS = 1 << 16
#: Rows queued for the background page builders before write_* waits (bounded memory); tiny
#: batches (the "unknown" rows at open) do not wait for the builders' first, slow, start.
MAX_PENDING_ROWS = CHUNK_ROWS
MAX_PENDING = 64


def _quote(name: str) -> str:
    return f'"{name}"'


#: SQLite's primary result codes of a full disk and of an I/O error (sqlite3.h).
_SQLITE_FULL, _SQLITE_IOERR = 13, 10


def sqlite_error(e: sqlite3.Error, target: str, what: str) -> ExportError:
    """A SQLite error as the typed error: :class:`StorageError` for SQLITE_FULL and SQLITE_IOERR."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (_SQLITE_FULL, _SQLITE_IOERR):
        cause = "no space left on device (SQLITE_FULL)" if code & 0xFF == _SQLITE_FULL else f"I/O error ({e})"
        return StorageError(f"{target}: {what}: {cause}")
    return ExportError(f"{target}: {what}: {e}")


def _by_id(mat: np.ndarray) -> tuple[np.ndarray, int | None]:
    """The rows of ``mat`` in the order of their ids (column 0), and an id found twice (else None)."""
    mat = mat[np.argsort(mat[:, 0], kind="stable")]
    same = np.flatnonzero(mat[1:, 0] == mat[:-1, 0])
    return mat, (int(mat[same[0], 0]) if same.size else None)


class SqliteWriter(Writer):
    dialect = "sqlite"

    def __init__(self, target: str | os.PathLike[str], *, force: bool = False, fast: bool = True,
                 mode: str | None = None, cache_mib: int = 64, page_size: int | None = None,
                 verify: bool | None = None) -> None:
        self.path = Path(target)
        self.target = str(self.path)
        if self.path.exists() and not force:
            raise DatabaseExistsError(f"{self.path} already exists (use --force to replace it)")
        if self.path.is_dir():
            raise ExportError(f"{self.path} is a directory")
        super().__init__()
        mode = mode or ("btree" if fast else "executemany")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if not parent.is_dir():
            raise ExportError(f"{self.path}: directory {parent} does not exist")
        self.tmp_path = parent / f".{self.path.name}.ptexport-tmp-{os.getpid()}"
        self.cache_mib = cache_mib
        #: check the finished file before the rename (None: as $PTEXPORT_VERIFY_DB says)
        self.verify = verify_requested(verify)
        self._inserters: dict[str, Any] = {}
        self._spools: dict[str, _btree.LeafSpool] = {}
        self._page_size = 0
        self._index_plan: dict[str, list[tuple[str, list[int]]]] = {}  # table -> [(index, its column numbers)]
        self._index_runs: dict[str, _IndexRuns] = {}
        self._call_comms: set[int] = set()  # comm ids of the calls rows: comms.has_calls without a scan
        self._built_indexes: set[str] = set()
        self._dropped_indexes: set[str] = set()
        self._late: dict[str, list[np.ndarray]] = {}  # rows below the spooled ids, inserted after the splice
        # page building runs in background threads, one per table (numba releases the
        # GIL): samples and calls pages are built side by side while the caller
        # prepares its next batch; at most MAX_PENDING_ROWS rows wait (bounded memory)
        self._pools: dict[str, ThreadPoolExecutor] = {}  # one thread per table: in order within a table
        self._pending: deque[tuple[Future[None], int]] = deque()
        self._pending_rows = 0
        self._handle: int | None = None  # the sqlite3* for the bind loop (_fastsqlite)
        self._want_bind = mode in ("btree", "bind")
        self.conn: sqlite3.Connection | None = None
        #: temporaries of exports to this target that died (and of an earlier process of this PID), removed
        self.removed_leftovers: list[Leftover] = []
        self._lock: TargetLock | None = TargetLock.acquire(self.path)
        try:
            self.removed_leftovers = sqlite_leftovers(parent, self.path.name, own=True)
            remove_files(self.removed_leftovers)
            self._open()
            c = self._conn()
            if page_size:
                c.execute(f"PRAGMA page_size = {int(page_size)}")
            c.execute("BEGIN")
            for sql in self.schema.table_sql.values():
                c.execute(sql)
            for sql in self.schema.view_sql.values():
                c.execute(sql)
            c.execute("COMMIT")
            page_size = _btree.check_file(self.tmp_path) if mode == "btree" and _btree.available() else None
            if page_size:
                for table, cols in self.schema.tables.items():
                    if (cols[0].name == "id" and not any(is_text_type(x.type) for x in cols)
                            and _btree.fits_in_leaf(len(cols), page_size)):
                        self._spools[table] = _btree.LeafSpool(self._spool_path(table), len(cols), page_size,
                                                               [x.default for x in cols])
                self._page_size = page_size
                self._plan_index_splices()
            c.execute("BEGIN")
            self._write_unknown_rows()
        except sqlite3.Error as e:
            self.abort()
            raise sqlite_error(e, self.target, "cannot create the schema") from e
        except OSError as e:
            self.abort()
            raise os_error(e, self.target, "cannot create the database") from e
        except BaseException:
            self.abort()
            raise

    # ------------------------------------------------------------ connection
    @contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """Errors of the file system (ENOSPC, EIO, EDQUOT...) and of SQLite as typed errors."""
        try:
            yield
        except OSError as e:
            raise os_error(e, self.target, what) from e
        except sqlite3.Error as e:
            raise sqlite_error(e, self.target, what) from e

    def _conn(self) -> sqlite3.Connection:
        assert self.conn is not None
        return self.conn

    def _open(self) -> None:
        try:
            self.conn = sqlite3.connect(self.tmp_path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise ExportError(f"{self.tmp_path}: cannot create the database: {e}") from e
        c = self.conn
        c.execute("PRAGMA journal_mode = OFF")
        c.execute("PRAGMA synchronous = OFF")
        c.execute("PRAGMA locking_mode = EXCLUSIVE")
        c.execute("PRAGMA temp_store = MEMORY")
        c.execute(f"PRAGMA cache_size = {-1024 * self.cache_mib}")
        c.execute("PRAGMA threads = 2")  # sorter threads for CREATE INDEX
        self._handle = _fastsqlite.connection_handle(c, str(self.tmp_path.resolve())) if self._want_bind else None

    def _close(self) -> None:
        for ins in self._inserters.values():
            ins.close()
        self._inserters.clear()
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self._handle = None

    def _spool_path(self, table: str) -> Path:
        return self.tmp_path.with_name(f"{self.tmp_path.name}.{table}.pages")

    def _spool_add(self, table: str, mat: np.ndarray) -> None:
        spool = self._spools[table]

        def job() -> None:  # the index keys too: a table's index runs are its thread's alone until the splice
            self._collect_index_keys(table, mat)
            spool.add(mat)

        self._spool_submit(table, job, mat.shape[0], int(mat[-1, 0]))

    def _spool_submit(self, table: str, job: Any, rows: int, last: int) -> None:
        """``job`` (spooling ``rows`` rows, ``last`` the largest id) on the table's thread, after the
        jobs before it; bounded: waits while MAX_PENDING jobs or MAX_PENDING_ROWS rows are queued."""
        pool = self._pools.get(table)
        if pool is None:
            pool = self._pools[table] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ptexport-{table}")
        while self._pending and (len(self._pending) >= MAX_PENDING
                                 or self._pending_rows + rows > MAX_PENDING_ROWS):
            self._wait_one()
        self._spools[table].reserve(last)
        self._pending.append((pool.submit(job), rows))
        self._pending_rows += rows

    def _spool_columns(self, table: str, cols: dict[str, Any], start: int, stop: int) -> bool:
        """Spool rows ``start:stop`` of ``cols`` with all the work done by the spool's thread: the
        matrix, its order by id (calls come in the order they return) and the index keys.  Here only
        the ids are looked at: every one past what was spooled (no late rows, which are kept aside
        here), in order or not.  (The samples' copies into the matrix were 0.7 s of the thread
        reading the batches at 10 M samples, the calls' matrix, sort and keys 0.6 s.)  The columns
        are read after this returns: the caller does not write to them again (the exporter makes
        each batch's arrays anew).  False: the caller spools a matrix."""
        ids = cols["id"]
        if not isinstance(ids, np.ndarray) or ids.dtype.kind not in "iu":
            return False
        ids = ids[start:stop].astype(np.int64, copy=False)
        spool = self._spools[table]
        if not ids.size:
            return False
        ordered = ids.size == 1 or bool(np.all(ids[1:] > ids[:-1]))
        first, last = (int(ids[0]), int(ids[-1])) if ordered else (int(ids.min()), int(ids.max()))
        if first <= spool.last_rowid:
            return False

        def job() -> None:
            mat = self._matrix(table, cols, start, stop)
            if not ordered:
                mat, twice = _by_id(mat)
                if twice is not None:  # as SQLite would say it
                    raise ExportError(f"{self.target}: writing {table}: UNIQUE constraint failed: {table}.id "
                                      f"(id {twice} twice)")
            self._collect_index_keys(table, mat)
            spool.add(mat)

        self._spool_submit(table, job, int(ids.size), last)
        return True

    def _wait_one(self) -> None:
        fut, rows = self._pending.popleft()
        self._pending_rows -= rows
        fut.result()

    def _shutdown_pools(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True)
        self._pools.clear()

    def _drain(self) -> None:
        """Wait for the background page building; re-raises its error."""
        while self._pending:
            self._wait_one()

    def _plan_index_splices(self) -> None:
        """The indexes of bulk tables (integer columns, as every spooled table's) are built as pages
        too (created empty now): SQLite's CREATE INDEX at the end would read the table back and sort
        it (0.13 s for the 200 K call paths of a VM export's guest stacks)."""
        c = self._conn()
        for name, sql in self.schema.index_sql.items():
            m = _INDEX.search(sql)
            table = self.schema.index_table[name]
            if not m or table not in self._spools:
                continue
            cols = [x.strip() for x in m.group(2).split(",")]
            if len(cols) > _btree.MAX_INDEX_COLUMNS:
                continue
            c.execute(sql)
            self._index_plan.setdefault(table, []).append((name, [self.schema.columns(table).index(x) for x in cols]))
            self._index_runs[name] = _IndexRuns(self.tmp_path.with_name(f"{self.tmp_path.name}.{name}.runs"))

    def _collect_index_keys(self, table: str, mat: np.ndarray) -> None:
        for name, cols in self._index_plan.get(table, ()):
            self._index_runs[name].add(mat[:, cols + [0]])

    def _splice(self, tables: list[str]) -> None:
        """Close the connection, splice the spooled pages of ``tables`` (and their indexes), reopen."""
        self._drain()
        c = self._conn()
        roots = dict(c.execute("SELECT name, rootpage FROM sqlite_master WHERE type IN ('table', 'index')"
                               " AND rootpage > 0").fetchall())
        drop = [n for n in self._dropped_indexes if n in roots and self.schema.index_table[n] in tables]
        c.execute("COMMIT")
        self._close()
        # the biggest first: where it can, the splice makes that spool the file (_btree._adopt)
        order = sorted(tables, key=lambda t: -self._spools[t].npages)
        merges = self._merges_beside(order[1:])
        if merges:  # the tables whose merge runs on the thread last, while the others are spliced here
            order = order[:1] + [t for t in order[1:] if t not in merges] + [t for t in order[1:] if t in merges]
        try:
            for t in order:
                spool = self._spools.pop(t)
                try:
                    if t in merges:
                        merges.pop(t).result()
                    else:
                        self._merge_late(t, spool)
                    _btree.splice(self.tmp_path, roots[t], spool)
                finally:
                    spool.remove()
                for name, _ in self._index_plan.pop(t, []):
                    runs = self._index_runs.pop(name)
                    try:
                        runs.splice(self.tmp_path, roots[name], self._page_size)
                    finally:
                        runs.remove()
                    self._built_indexes.add(name)
        finally:
            for fut in merges.values():  # (an error here first: the merges left are waited for, not read)
                fut.exception()
        self._open()
        c = self._conn()
        c.execute("BEGIN")
        for name in drop:  # emptied while the table filled: rebuilt by SQLite at the end
            c.execute(f"DROP INDEX {name}")
        for t in tables:
            self._insert_late(t)

    @property
    def fast(self) -> bool:
        return self._handle is not None

    @property
    def mode(self) -> str:
        return "btree" if self._spools else "bind" if self._handle is not None else "executemany"

    # ------------------------------------------------------------ inserts
    def _insert_sql(self, table: str) -> str:
        cols = self.schema.columns(table)
        return (f"INSERT INTO {table} ({', '.join(map(_quote, cols))}) "
                f"VALUES ({', '.join('?' * len(cols))})")

    def _insert_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        with self._io(f"writing {table}"):
            self._do_insert_rows(table, rows)

    def _insert_columns(self, table: str, cols: dict[str, Any], n: int) -> None:
        with self._io(f"writing {table}"):
            self._do_insert_columns(table, cols, n)

    def _do_insert_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        if table == "calls":
            j = self.schema.columns("calls").index("comm_id")
            self._call_comms.update(int(r[j]) for r in rows)
        if table in self._spools and all(v is not None and not isinstance(v, str) for r in rows for v in r):
            if self._spool_matrix(table, np.array(rows, dtype=np.int64).reshape(len(rows), -1)):
                return
        if table in self._spools:
            self._splice([table])
        try:
            self._conn().executemany(self._insert_sql(table), rows)
        except sqlite3.Error as e:
            raise sqlite_error(e, self.target, f"writing {table}") from e

    def _spool_matrix(self, table: str, mat: np.ndarray) -> bool:
        """Spool a batch; False if the table must go on through SQL instead.

        Rows are sorted by id first.  Rows whose id is below what was already
        spooled (a call returning after its callees, whose ids are larger) are
        kept aside and inserted by SQLite into the spliced B-tree at the end;
        if too many pile up the table is spliced now and continues through SQL.
        """
        if mat.shape[0] > 1 and not np.all(mat[1:, 0] > mat[:-1, 0]):
            mat, twice = _by_id(mat)
            if twice is not None:
                return False  # duplicate ids: let SQLite report them
        ids = mat[:, 0]
        spool = self._spools[table]
        k = int(np.searchsorted(ids, spool.last_rowid, side="right"))
        if k:
            late = self._late.setdefault(table, [])
            late.append(np.array(mat[:k]))
            if sum(x.shape[0] for x in late) > LATE_MAX_ROWS:
                late.pop()  # this batch goes through SQL whole, after the splice
                return False
        if k < ids.size:
            self._spool_add(table, mat[k:])
        return True

    def _merges_beside(self, tables: list[str]) -> dict[str, Future]:
        """:meth:`_merge_late` of those of ``tables`` with late rows, started on a thread of their own:
        a merge reads its table's pages back and builds them again (a VM export's 30 K calls still open
        at the end, among 438 K: 0.11 s), and the splices of the other tables need none of it.  At the
        end of an export the decoder and the call tree are done, and that core is free."""
        late = [t for t in tables if self._late.get(t)]
        if not late:
            return {}
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptexport-merge")
        try:
            return {t: pool.submit(self._merge_late, t, self._spools[t]) for t in late}
        finally:
            pool.shutdown(wait=False)  # (its thread ends with the last merge)

    def _merge_late(self, table: str, spool: _btree.LeafSpool) -> None:
        """The rows kept aside (ids below the spooled ones) put among the spooled pages, where that
        costs less than SQLite's inserts after the splice: the pages from the first late id on are
        read back and built again (:meth:`_btree.LeafSpool.merge`, ~MERGE_ROW_S a row), while each
        row SQLite inserts into the middle of a full table splits a page (~LATE_ROW_S).  The calls
        still open at the end of a deep trace come in last with ids from their start: a VM export's
        30 K open calls among 438 K took 0.12 s through SQLite."""
        late = self._late.get(table)
        if not late:
            return
        n = sum(x.shape[0] for x in late)
        if spool.rows_from(min(int(x[:, 0].min()) for x in late)) * MERGE_ROW_S > n * LATE_ROW_S:
            return
        mat = _by_id_order(late)
        if spool.merge(mat):
            self._collect_index_keys(table, mat)
            del self._late[table]

    def _insert_late(self, table: str) -> None:
        """Rows kept aside (ids below the spooled ones), now that the table is spliced."""
        late = self._late.pop(table, None)
        if not late:
            return
        # in id order: each row goes into the page after the last one's (SQLite's B-tree insert), not all
        # over the table - 30 K late calls of 438 K rows took 0.31 s shuffled, 0.23 s in a few sorted runs
        # (the batches they came in), 0.14 s sorted
        mat = _by_id_order(late)
        if mat.shape[0] < 100_000:  # a few stragglers: not worth compiling the bind loop
            try:
                self._conn().executemany(self._insert_sql(table), mat.tolist())
            except sqlite3.Error as e:
                raise sqlite_error(e, self.target, f"writing {table}") from e
            return
        cols = {c: mat[:, j] for j, c in enumerate(self.schema.columns(table))}
        self._insert_columns(table, cols, mat.shape[0])

    def _matrix(self, table: str, cols: dict[str, Any], start: int, stop: int) -> np.ndarray:
        """Rows x columns int64, column-major (each column one contiguous copy)."""
        cdefs = self.schema.tables[table]
        mat = np.empty((len(cdefs), stop - start), dtype=np.int64)
        for j, c in enumerate(cdefs):
            v = cols[c.name]
            if isinstance(v, np.ndarray):
                mat[j] = v[start:stop]  # uint64 wraps to two's complement, as astype
            elif np.isscalar(v):
                mat[j] = v
            else:
                mat[j] = np.asarray(v[start:stop]).astype(np.int64, copy=False)
        return mat.T

    def _do_insert_columns(self, table: str, cols: dict[str, Any], n: int) -> None:
        cdefs = self.schema.tables[table]
        if table == "calls":
            v = cols["comm_id"]
            # the column, or its default (a scalar, broadcast by the writer) as one value
            self._call_comms.update(distinct(np.asarray(v, dtype=np.int64).reshape(-1)).tolist())
        has_text = any(is_text_type(c.type) for c in cdefs)
        try:
            if table in self._spools:
                for start in range(0, n, CHUNK_ROWS):
                    if self._spool_columns(table, cols, start, min(n, start + CHUNK_ROWS)):
                        continue
                    mat = self._matrix(table, cols, start, min(n, start + CHUNK_ROWS))
                    if not self._spool_matrix(table, mat):
                        self._splice([table])  # SQL from here on
                        self._insert_columns(table, {k: (v if np.isscalar(v) else v[start:]) for k, v in cols.items()},
                                             n - start)
                        return
                return
            if self._handle is not None and not has_text:
                ins = self._inserters.get(table)
                if ins is None:
                    ins = self._inserters[table] = _fastsqlite.BulkInserter(self._handle, self._insert_sql(table))
                for start in range(0, n, CHUNK_ROWS):
                    ins.insert(self._matrix(table, cols, start, min(n, start + CHUNK_ROWS)))
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
            self._conn().executemany(self._insert_sql(table), zip(*lists))
        except sqlite3.Error as e:
            raise sqlite_error(e, self.target, f"writing {table}") from e

    # ------------------------------------------------------------ end
    def _finish_database(self) -> None:
        with self._io("finishing the database"):
            self._do_finish_database()
        if self._lock is not None:  # renamed into place: the target is free
            self._lock.release()

    def _do_finish_database(self) -> None:
        try:
            self._splice(list(self._spools))
            self._shutdown_pools()
            c = self._conn()
            # = UPDATE ... WHERE id IN (SELECT DISTINCT comm_id FROM calls), without reading calls back
            c.executemany("UPDATE comms SET has_calls = 1 WHERE id = ?", [(i,) for i in sorted(self._call_comms)])
            for name, sql in self.schema.index_sql.items():
                if name not in self._built_indexes:
                    c.execute(sql)
            c.execute("INSERT INTO schema_version VALUES (?, ?, ?)", self._version_row())
            c.executemany("INSERT INTO ptexport_migrations VALUES (?, ?)", self._migration_rows())
            c.execute("COMMIT")
            self._analyze(c)
            self._close()
        except sqlite3.Error as e:
            raise sqlite_error(e, self.target, "finishing the database") from e
        if self.verify:
            require_sound(self.tmp_path, self.target)
        fd = os.open(self.tmp_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _mark_placed()  # the rename is atomic: from here a signal stops nothing
        os.replace(self.tmp_path, self.path)

    def _analyze(self, c: sqlite3.Connection) -> None:
        """The planner's statistics (``sqlite_stat1``) as ANALYZE writes them, its indexes sampled
        (``analysis_limit``), a large table without an index counted by the writer, not read again."""
        c.execute("PRAGMA analysis_limit = 1000")
        indexed = {r[0] for r in c.execute("SELECT DISTINCT tbl_name FROM sqlite_master WHERE type = 'index'")}
        counted = {t: n for t in self.schema.tables
                   if t not in indexed
                   and (n := self.row_counts.get(t, 0) + (t in UNKNOWN_ROWS)) >= ANALYZE_COUNTED_ROWS}
        if not counted:
            c.execute("ANALYZE")
            return
        c.execute("BEGIN")
        for t in self.schema.tables:
            if t not in counted:
                c.execute(f"ANALYZE {_quote(t)}")
        if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone() is None:
            c.execute("ANALYZE sqlite_schema")  # makes the table (no table was analyzed; CREATE is refused)
        c.executemany("DELETE FROM sqlite_stat1 WHERE tbl = ?", [(t,) for t in counted])
        c.executemany("INSERT INTO sqlite_stat1 VALUES (?, NULL, ?)", [(t, str(n)) for t, n in counted.items()])
        c.execute("COMMIT")

    def abort(self) -> None:
        for f, _ in self._pending:
            f.cancel()
        try:
            self._drain()
        except BaseException:  # noqa: BLE001 - aborting anyway; the temporary goes
            pass
        self._shutdown_pools()
        try:
            self._close()
        except (sqlite3.Error, OSError):  # pragma: no cover
            pass
        for spool in self._spools.values():
            spool.remove()
        self._spools.clear()
        for runs in self._index_runs.values():
            runs.remove()
        self._index_runs.clear()
        self._remove_tmp()
        if self._lock is not None:
            self._lock.release()

    def _remove_tmp(self) -> None:
        """This export's temporary database and every file named after it (pages, index runs, journal)."""
        remove_temporary(self.tmp_path, self.target)


def _by_id_order(late: list[np.ndarray]) -> np.ndarray:
    """The rows kept aside (matrices, the id first), as one matrix in id order."""
    mat = np.concatenate(late)
    return mat[np.argsort(mat[:, 0], kind="stable")]


def warm_index_runs(scratch: Path) -> None:
    """The index runs' kernels (the heap, the merge, separator records) compiled, for compiling ahead:
    no shipped sample has an index of more than :data:`INDEX_RUN_ROWS` entries."""
    db = scratch / "warm-index-runs.sqlite"
    c = sqlite3.connect(db)
    try:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER)")
        c.execute("CREATE INDEX t_k ON t (k)")
        root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 't_k'").fetchone()[0]
        page_size = c.execute("PRAGMA page_size").fetchone()[0]
    finally:
        c.close()
    runs = _IndexRuns(scratch / "warm-index-runs.runs")
    try:
        # runs longer than the merge's buffers (INDEX_RUN_ROWS / runs): each buffer refilled, and more
        # entries than a block handed on
        ids = np.arange(1, 3 * (INDEX_RUN_ROWS // 2) + 1, dtype=np.int64)
        for part in np.array_split(ids, 3):
            runs.add(_btree.index_entries(part % 7, part))
            runs._spill()
        runs.splice(db, root, page_size)
    finally:
        runs.remove()
        db.unlink()


class _IndexRuns:
    """The entries (key columns, then the rowid) of one index as rows are spooled, for
    :func:`_btree.splice_index`.

    Up to :data:`INDEX_RUN_ROWS` entries stay in memory; beyond, each such batch is
    sorted and appended to a file as a run of entries, and laying the index
    down merges the runs (:meth:`_merged`: memory bounded by a buffer of each however many rows).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ents: list[np.ndarray] = []
        self._n = 0
        self._width = 0  # int64 fields an entry
        self.runs: list[tuple[int, int]] = []  # (first entry, entries) in the file

    def add(self, ent: np.ndarray) -> None:
        """Entries: rows of key columns, then the rowid (a copy is kept)."""
        self._ents.append(np.array(ent, dtype=np.int64))
        self._width = ent.shape[1]
        self._n += len(ent)
        if self._n >= INDEX_RUN_ROWS:
            self._spill()

    def _spill(self) -> None:
        if not self._n:
            return
        ent = _btree.sort_entries(np.concatenate(self._ents))
        start = self.runs[-1][0] + self.runs[-1][1] if self.runs else 0
        # f.write, not ent.tofile(f): numpy's fwrite drops errno (a full disk would be "N requested and 0 written")
        with open(self.path, "ab") as f:
            f.write(np.ascontiguousarray(ent).data)
        self.runs.append((start, self._n))
        self._ents, self._n = [], 0

    def splice(self, db_path: Path, root_page: int, page_size: int) -> None:
        if not self.runs:
            if self._n:
                ent = np.concatenate(self._ents)
                _btree.splice_index(db_path, root_page, page_size, ent[:, :-1], ent[:, -1])
            return
        self._spill()
        _btree.splice_index_blocks(db_path, root_page, page_size, self._merged())

    def _merged(self):
        """Every entry in order, as blocks of INDEX_RUN_ROWS: a k-way merge of the runs, compiled
        (:func:`_btree._runs_merge`), each run read a buffer at a time (about INDEX_RUN_ROWS entries
        buffered over all runs, at least 4 K a run: bounded however many runs).  The merge returns
        only for a buffer to refill or a block to hand on: a 100 M-branch export's 120 runs of
        31 M calls were merged in 7.5 K rounds of Python that each cut every run at a common bound
        (3.7 s an index; the reading alone 1.4 s)."""
        k = len(self.runs)
        w = self._width
        block = max(RUN_BUFFER_MIN, INDEX_RUN_ROWS // k)
        buf = np.empty((k, block, w), dtype=np.int64)
        lens = np.zeros(k, dtype=np.int64)
        pos = np.zeros(k, dtype=np.int64)
        more = np.zeros(k, dtype=np.bool_)
        nxt = [first for first, _ in self.runs]
        end = [first + n for first, n in self.runs]
        heap = np.zeros(k, dtype=np.int64)
        heads = np.zeros((k, w), dtype=np.int64)
        st = np.zeros(2, dtype=np.int64)
        with open(self.path, "rb") as f:
            def fill(r: int) -> None:
                n = min(block, end[r] - nxt[r])
                f.seek(8 * w * nxt[r])
                view = memoryview(buf[r, :n]).cast("B")
                if f.readinto(view) != len(view):
                    raise OSError(errno.EIO, f"{self.path}: short read of an index run")
                lens[r], pos[r] = n, 0
                nxt[r] += n
                more[r] = nxt[r] < end[r]

            for r in range(k):
                fill(r)
            _btree._runs_heap(buf, lens, pos, heap, heads, st)
            out = np.empty((INDEX_RUN_ROWS, w), dtype=np.int64)
            o = 0
            while True:
                n, need = _btree._runs_merge(buf, lens, pos, more, heap, heads, st, out[o:])
                o += n
                if need >= 0:
                    fill(need)
                    st[1] = 1
                if o == len(out) or (need < 0 and st[0] == 0):
                    if o:
                        yield out[:o].copy()  # (the consumer may keep a view of a block past the next)
                    o = 0
                    if need < 0 and st[0] == 0:
                        return

    def remove(self) -> None:
        self._ents, self._n = [], 0
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

