"""Decode on a dask.distributed cluster: ``ptexport TRACE --db DB --scheduler tcp://HOST:8786`` or ``local:N``.

The work units of ``--jobs N`` (PSB segments of each queue, :func:`ptexport.session.parallel._segment_job`:
path, options, queue, start and stop positions) become Dask tasks; each worker opens the recording
itself, at the path it sees (``--cluster-path LOCAL=WORKER`` maps the coordinator's paths to the
workers'), decodes its segment with the compiled decoder and hands back the segment's columns.  This
process - the coordinator - joins the segments exactly (``_joined_segments``), merges the queues in
perf's order, builds the call trees and writes the database, as with ``--jobs N``: the rows are the
``--jobs 1`` rows.  :class:`DaskUnits` is the :class:`~ptexport.session.units.UnitExecutor` the
segment streams submit to, a bounded window ahead of the merge (the cluster's thread count), so the
coordinator's memory does not grow with the trace.

Into PostgreSQL the workers also load the two large tables: :class:`DaskCopies` takes the writer's
samples and calls batches (ids given here, in perf's order), gathers them into tasks of 64 K rows
or more (:class:`CopyBatches`) and has each worker COPY its tasks on its own session
(:func:`ptexport.writers.pg_copy.copy_batch`, once per batch whatever the retries).

Faults: a task is a pure function of its arguments.  A worker that dies while it runs one (or holds
its result) makes the scheduler run it again elsewhere (dask's ``distributed.scheduler.allowed-failures``
times, 3 by default; then ``KilledWorker``, raised here as :class:`~ptexport.errors.ClusterError`);
the coordinator takes each segment's result once, in order, so a retry neither loses nor repeats a
row.  Any error ends the export before the database is renamed into place (the writers' temporary
database rule).

dask is imported only here and only when a scheduler is asked for (:func:`open_cluster`): without
``--scheduler`` nothing of it loads.  What cannot be cut into segments (the reference decoder,
``--time`` ranges, instruction samples every N instructions (``iNi``), pipe input) is decoded by the
coordinator, as ``--jobs 1``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import tempfile
import threading
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import numpy as np

from ptexport.errors import ClusterError, PtExportError, UsageError
from ptexport.session.parallel import _warm_job, file_identity
from ptexport.writers.pg_copy import binary_values, close_sessions, copy_batch

#: Seconds to reach a scheduler, and to wait for its first worker.
CONNECT_TIMEOUT = 10.0
WORKER_TIMEOUT = 30.0
#: Batches the workers load at once at most (each a session on the database server, and each kept
#: here until it is loaded, to send again if its worker dies: at most ~180 MB of samples).
MAX_COPIES = 8
#: Rows a task loads: batches are cut to at most this, smaller ones gathered until they reach it (a
#: task: COPY_ROWS to 2 * COPY_ROWS - 1 rows; 64 K samples are ~11 MB of columns).
COPY_ROWS = 1 << 16
#: Times a batch is sent again after its worker died (then a ClusterError).
COPY_RETRIES = 3

_LOCAL = re.compile(r"local:(\d+)\Z")
_REMOTE = re.compile(r"(tcp|tls|ws|wss|inproc)://\S+\Z")


def check_scheduler(text: str) -> str:
    """``--scheduler``: ``tcp://HOST:PORT`` (any dask address) or ``local:N`` (N >= 1), else UsageError."""
    m = _LOCAL.match(text)
    if m:
        if int(m.group(1)) < 1:
            raise UsageError(f"--scheduler {text}: local:N needs N >= 1 worker processes")
        return text
    if _REMOTE.match(text):
        return text
    raise UsageError(f"--scheduler {text}: expected tcp://HOST:PORT (a dask scheduler) or local:N "
                     "(a local cluster of N worker processes)")


def parse_cluster_path(text: str) -> tuple[str, str]:
    """``--cluster-path LOCAL=WORKER``: files under LOCAL here are under WORKER on the workers."""
    local, sep, remote = text.partition("=")
    if not sep or not local or not remote:
        raise UsageError(f"--cluster-path {text}: expected LOCAL=WORKER (a directory here and where the "
                         "workers see it)")
    return os.path.abspath(local), remote.rstrip("/") or "/"


def map_path(path: str | None, mapping: tuple[tuple[str, str], ...]) -> str | None:
    """``path`` as the workers see it: the longest LOCAL prefix of ``mapping`` replaced by its WORKER."""
    if not path or not mapping:
        return path
    full = os.path.abspath(path)
    best = None
    for local, remote in mapping:
        loc = local.rstrip("/") or "/"
        if full == loc or full.startswith(loc if loc.endswith("/") else loc + "/"):
            if best is None or len(loc) > len(best[0]):
                best = (loc, remote)
    if best is None:
        return path
    rest = full[len(best[0]):].lstrip("/")
    return os.path.join(best[1], rest) if rest else best[1]


def worker_config(config: Any, mapping: tuple[tuple[str, str], ...]) -> Any:
    """The session's :class:`DecodeConfig` with every path in it (--symfs, --buildid-dir, guest
    kcore, search directories, --guest-data files) as the workers see it."""
    if not mapping:
        return config
    return dataclasses.replace(
        config,
        symfs=map_path(config.symfs, mapping), buildid_dir=map_path(config.buildid_dir, mapping),
        guest_kcore=map_path(config.guest_kcore, mapping),
        search_dirs=tuple(map_path(d, mapping) or d for d in config.search_dirs),
        guest_data=tuple(dataclasses.replace(g, path=map_path(g.path, mapping)) for g in config.guest_data))


class _Future:
    """A ``distributed.Future`` whose errors come out typed; its result is fetched once."""

    def __init__(self, fut: Any, where: str, what: str = "a decode task") -> None:
        self._fut = fut
        self._where = where
        self._what = what
        self._got: Any = None
        self._have = False

    def done(self) -> bool:
        return self._have or self._fut.done()

    @property
    def local(self) -> bool:
        """Its result is in this process (else it waits on a worker)."""
        return self._have

    def cancel(self) -> None:
        self._fut.cancel()

    def result(self) -> Any:
        if not self._have:
            try:
                self._got = _typed(self._fut.result, self._where, self._what)
            except ClusterError as e:
                if self._fut.status == "error" and isinstance(e.__cause__, OSError):
                    # the task's own OSError (a file the worker cannot read), not the cluster's connection
                    raise ClusterError(f"{self._where}: {self._what} failed on a worker: "
                                       f"{type(e.__cause__).__name__}: {e.__cause__}") from e.__cause__
                raise
            self._have = True
            self._fut.release()  # the worker may drop it now
        return self._got


def _typed(call: Callable[[], Any], where: str, what: str = "a decode task") -> Any:
    """``call()``, with what the cluster raises as a :class:`ClusterError` (a task's own typed
    error, e.g. a worker that cannot read the recording, stays what it is)."""
    from distributed import TimeoutError as DaskTimeout  # dask is loaded already: only with --scheduler
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    try:
        return call()
    except PtExportError:
        raise
    except KilledWorker as e:
        n = e.args[2] + 1 if len(e.args) > 2 and isinstance(e.args[2], int) else 0
        times = f"{n} time{'s' if n != 1 else ''}" if n else "too often"
        raise ClusterError(f"{where}: {what} lost its worker {times} (dask's "
                           "distributed.scheduler.allowed-failures): giving up") from e
    except (CommClosedError, FutureCancelledError, DaskTimeout, OSError) as e:
        raise ClusterError(f"{where}: lost the cluster: {type(e).__name__}: {e}") from e


#: How often a call tree step's wait looks whether the branches it was sent with are still there (s)
_LOST_POLL_S = 1.0


class DaskTrees:
    """The executor of :class:`~ptexport.calltree.sharded.ShardedCallTree` on a cluster: a shard's step
    (:func:`~ptexport.calltree.sharded.tree_step`, pure) is a task put ahead of the decode segments
    queued, its branches ``scatter``ed straight to the worker that runs it (not through the
    scheduler); a worker that dies in one (or with its branches) costs a retry elsewhere."""

    def __init__(self, units: DaskUnits) -> None:
        self.units = units
        self.shards = units.width  # one shard of threads per worker thread
        self._workers: list[str] = []
        self._turn = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> _TreeTask:
        return _TreeTask(self, fn, args)

    def _send(self, fn: Callable[..., Any], args: tuple, data_at: int) -> Any:
        client = self.units.client
        if not self._workers:
            self._workers = sorted(client.scheduler_info().get("workers", {}))
        where = [self._workers[self._turn % len(self._workers)]] if self._workers else None
        self._turn += 1
        data = None
        if args[data_at] is not None:
            [data] = client.scatter([args[data_at]], workers=where, direct=True, hash=False)
            args = (*args[:data_at], data, *args[data_at + 1:])
        return client.submit(fn, *args, workers=where, allow_other_workers=True, pure=False, priority=1), data


class _TreeTask:
    """A call tree step on the cluster; sent again (COPY_RETRIES times) if its worker dies."""

    WHAT = "a call tree task"

    def __init__(self, trees: DaskTrees, fn: Callable[..., Any], args: tuple) -> None:
        self.trees, self.fn, self.args = trees, fn, args
        self.tries = 0
        self._fut, self._data = self._sent()

    def _sent(self) -> tuple[Any, Any]:
        return _typed(lambda: self.trees._send(self.fn, self.args, 3), self.trees.units.where, self.WHAT)

    def done(self) -> bool:
        return self._fut.done()

    def _wait(self) -> Any:
        """The task's result; a ClusterError as soon as the branches it was sent with are gone (their
        worker died before the task read them): the scheduler forgets such a task, and the wait would
        otherwise rest on being told so."""
        from distributed import TimeoutError as DaskTimeout

        while True:
            try:
                return self._fut.result(timeout=_LOST_POLL_S)
            except (DaskTimeout, TimeoutError):
                data = self._data
                if data is not None and data.status in ("lost", "cancelled", "error"):
                    raise ClusterError(f"{self.trees.units.where}: {self.WHAT}: its branches were lost with "
                                       f"their worker ({data.status})") from None

    def result(self) -> Any:
        where = self.trees.units.where
        while True:
            try:
                try:
                    got = _typed(self._wait, where, self.WHAT)
                    self._data = None  # (the worker may drop the branches now)
                    return got
                except PtExportError:
                    raise
                except Exception as e:  # noqa: BLE001 - its branches lost with their worker (dask's own errors)
                    raise ClusterError(f"{where}: {self.WHAT}: {type(e).__name__}: {e}") from e
            except ClusterError:
                if self.tries >= COPY_RETRIES:
                    raise
                self.tries += 1
                self.trees._workers = []
                self._fut, self._data = self._sent()


class DaskUnits:
    """The :class:`~ptexport.session.units.UnitExecutor` of a dask client: ``width`` = the cluster's
    worker threads when it was opened; ``window`` and ``budget`` twice that (segments kept submitted,
    per queue and over all queues: one queued on each thread behind the one it runs, so no worker
    waits a network round trip for the coordinator's next submission; results wait on the workers
    until the merge takes them, at most ``budget`` + one per queue)."""

    def __init__(self, client: Any, where: str) -> None:
        self.client = client
        self.where = where
        info = client.scheduler_info()
        self.addresses = sorted(info.get("workers", {}))
        self.workers = len(self.addresses)
        self.width = max(1, sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values()))
        self.window = 2 * self.width
        self.budget = 2 * self.width  # units submitted and not yet taken, all queues together (units.py)
        self.in_flight = 0
        self.submitted = 0
        self._warm: list[Any] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Future:
        self.submitted += 1
        # pure=False: a fresh key each time (a recording rewritten in place is never a cached result)
        return _Future(_typed(lambda: self.client.submit(fn, *args, pure=False), self.where), self.where)

    def release(self) -> None:
        """Nothing: the client belongs to :func:`open_cluster`."""

    def trees(self) -> DaskTrees:
        """The executor of the call tree's shards on this cluster."""
        return DaskTrees(self)

    def warm(self, *args: Any) -> None:
        """One :func:`_warm_job` on each worker (not waited for): the recording opened there and the
        decoder's kernels loaded while the coordinator reads the sideband."""
        def pinned(addr: str) -> Callable[[], Any]:
            return lambda: self.client.submit(_warm_job, *args, workers=[addr], allow_other_workers=False, pure=False)

        self._warm = [_typed(pinned(a), self.where) for a in self.addresses]

    def check_workers(self, path: str, ident: tuple) -> None:
        """Every worker can read the recording at ``path`` and it is the coordinator's (``ident``):
        else a typed error before any database is opened."""
        try:
            got = _typed(lambda: self.client.run(_probe, path, ident), self.where)
        except ClusterError:
            raise
        except Exception as e:  # noqa: BLE001 - e.g. the workers cannot unpickle _probe: no ptexport there
            raise ClusterError(f"{self.where}: the workers cannot run ptexport's probe ({type(e).__name__}: {e}): "
                               "install ptexport on every worker (pip install 'ptexport[cluster]')") from e
        bad = {addr: why for addr, why in got.items() if why}
        if bad:
            addr, why = sorted(bad.items())[0]
            more = f" (and {len(bad) - 1} more workers)" if len(bad) > 1 else ""
            raise ClusterError(f"{self.where}: worker {addr}{more}: {why}")


def _probe(path: str, ident: tuple) -> str | None:
    """On a worker: None when it reads the coordinator's recording at ``path``, else why not."""
    try:
        mine = file_identity(path)
    except OSError as e:
        return f"cannot read the recording at {path}: {e.strerror or e} (map it with --cluster-path LOCAL=WORKER)"
    if tuple(mine) != tuple(ident):
        return (f"{path} is not the coordinator's recording ({mine[0]} bytes against {ident[0]}, or other "
                "contents): map the path with --cluster-path LOCAL=WORKER")
    try:
        from ptexport import jit

        if not jit.available():
            return f"numba is not available there: {jit.unavailable_reason()}"
    except ImportError as e:  # pragma: no cover - an odd install
        return f"cannot import ptexport's decoder: {e}"
    return None


def _part(v: Any, sql_type: str, start: int, stop: int, one_value: bool = True) -> Any:
    """Rows ``start:stop`` of a column, as a task takes them: a scalar (the column's value in every row)
    stays one, and so does a column whose rows all have one value (an event, a machine, a CPU, a
    thread for a whole batch: half the samples' columns, not sent); else a copy of the rows."""
    if np.isscalar(v):
        return v
    rows = v[start:stop]
    if one_value and len(rows) and rows[0] == rows[-1] and bool((rows == rows[0]).all()):
        return binary_values(rows[:1], sql_type)[0].item()  # (a uint64 address as its two's complement)
    return np.array(rows, copy=True)


class CopyBatches:
    """A table's batches as the workers load them: cut to at most :data:`COPY_ROWS` rows, smaller
    ones gathered until they reach it (a load task has COPY_ROWS to 2 * COPY_ROWS - 1 rows: the calls
    come in batches of a few thousand, and each task costs a round trip, a transaction, a key).  Each
    row is copied once as it is added (the caller may reuse its arrays), a column of one value kept
    as that value."""

    def __init__(self) -> None:
        self._buffers: dict[str, list[Any]] = {}  # table -> [columns, parts, rows]: gathered, not out yet

    def add(self, table: str, columns: list[tuple[str, str]], cols: dict[str, Any],
            n: int) -> list[tuple[str, list[tuple[str, str]], dict[str, Any], int]]:
        """Take ``n`` rows of ``table``; the batches ready to load: (table, columns, cols, rows)."""
        out = []
        for start in range(0, n, COPY_ROWS):
            stop = min(n, start + COPY_ROWS)
            buf = self._buffers.setdefault(table, [columns, [], 0])
            # (the ids stay an array: the task's key is its first)
            buf[1].append(({name: _part(cols[name], sql_type, start, stop, name != "id")
                            for name, sql_type in columns}, stop - start))
            buf[2] += stop - start
            if buf[2] >= COPY_ROWS:
                out.append(self._take(table))
        return out

    def flush(self) -> list[tuple[str, list[tuple[str, str]], dict[str, Any], int]]:
        """The rows gathered and not out yet, each table's as one batch."""
        return [self._take(table) for table in list(self._buffers)]

    def _take(self, table: str) -> tuple[str, list[tuple[str, str]], dict[str, Any], int]:
        columns, parts, n = self._buffers.pop(table)
        if len(parts) == 1:
            return table, columns, parts[0][0], n
        cols = {}
        for name, sql_type in columns:
            vals = [p[name] for p, _rows in parts]
            if all(np.isscalar(v) for v in vals) and len(set(vals)) == 1:
                cols[name] = vals[0]
            else:
                # each part as its COPY field takes it (uint64 as int64, booleans as bools): numpy's
                # promotion of uint64 with int64 would give floats
                cols[name] = np.concatenate([binary_values(np.full(rows, v) if np.isscalar(v) else v, sql_type)
                                             for (_p, rows), v in zip(parts, vals)])
        return table, columns, cols, n


class DaskCopies:
    """The cluster's workers load the samples and calls into PostgreSQL
    (:meth:`~ptexport.writers.postgres.PostgresWriter.offload`): each batch - ids in perf's order,
    given by this process's db-export and call trees - goes to a worker (``scatter``, straight to
    it) with a task that encodes it and COPYs it on the worker's own session
    (:func:`ptexport.writers.pg_copy.copy_batch`, once per batch whatever the retries).  The
    workers take turns; at most ``window`` batches are out at once (the writer waits for the
    oldest), each kept here until it is loaded: a batch whose worker dies is sent to another
    (:data:`COPY_RETRIES` times).  Sending runs on a thread of its own: the export goes on meanwhile."""

    def __init__(self, units: DaskUnits, params: dict[str, Any], shown: str) -> None:
        self.client = units.client
        self.where = units.where
        self.params = params
        self.shown = shown
        self.window = max(1, min(MAX_COPIES, 2 * units.width))
        self._workers = list(units.addresses)
        self._turn = 0
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptexport-copies")
        self._pending: deque[list[Any]] = deque()  # [sent future, table, columns, cols, n, tries]
        self._gathered = CopyBatches()
        self.key = uuid.uuid4().hex  # this export's: the workers' sessions serve its batches, then close
        self.batches = 0  # sent
        self.rows = 0
        self.retries = 0

    def probe(self) -> str | None:
        """None when every worker reaches the database, else why one does not."""
        try:
            got = _typed(lambda: self.client.run(_probe_database, self.params, self.shown), self.where)
        except ClusterError as e:
            return str(e)
        bad = sorted((addr, why) for addr, why in got.items() if why)
        return f"worker {bad[0][0]}: {bad[0][1]}" if bad else None

    def _send(self, table: str, columns: list[tuple[str, str]], cols: dict[str, Any], n: int) -> Any:
        """On the sending thread: the batch onto the next worker, and its task (a dask future)."""
        client = self.client
        with self._lock:
            if not self._workers:
                self._workers = sorted(client.scheduler_info().get("workers", {}))
            addr = self._workers[self._turn % len(self._workers)] if self._workers else None
            self._turn += 1
        where = [addr] if addr else None
        # (a list: a scattered dict's keys would name its values on the cluster, the same in every batch)
        [data] = client.scatter([cols], workers=where, direct=True, hash=False)
        # (the export's key by position: submit's own key= names the task)
        return client.submit(copy_batch, self.params, self.shown, table, columns, data, n, self.key,
                             workers=where, allow_other_workers=True, pure=False)

    def submit(self, table: str, columns: list[tuple[str, str]], cols: dict[str, Any], n: int) -> None:
        """Load ``n`` rows of ``table`` (``columns``: (name, SQL type) in the table's order; ``cols``
        by name, a scalar for a column's value in every row) on the workers, in tasks of
        :class:`CopyBatches`' size."""
        for batch in self._gathered.add(table, columns, cols, n):
            self._send_batch(*batch)

    def _send_batch(self, table: str, columns: list[tuple[str, str]], cols: dict[str, Any], n: int) -> None:
        while len(self._pending) >= self.window:
            self._wait_oldest()
        assert self._pool is not None, "submit after drain or cancel"
        self._pending.append([self._pool.submit(self._send, table, columns, cols, n), table, columns, cols, n, 0])
        self.batches += 1
        self.rows += n

    def _wait_oldest(self) -> None:
        entry = self._pending[0]
        while True:
            sent, table, columns, cols, n, tries = entry
            try:
                try:
                    _typed(lambda: sent.result().result(), self.where)
                except PtExportError:
                    raise
                except Exception as e:  # noqa: BLE001 - e.g. the batch lost with its worker (dask's own errors)
                    raise ClusterError(f"{self.where}: loading {table}: {type(e).__name__}: {e}") from e
                break
            except PtExportError as e:
                if isinstance(e, ClusterError) and tries < COPY_RETRIES:
                    # its worker died (with the batch): to another; a load that got in is not repeated
                    with self._lock:
                        self._workers = []
                    self.retries += 1
                    assert self._pool is not None
                    entry[0] = self._pool.submit(self._send, table, columns, cols, n)
                    entry[5] = tries + 1
                    continue
                raise
        self._pending.popleft()

    def drain(self) -> tuple[int, int]:
        """Wait until every batch is loaded, and the workers' sessions are closed: (batches, rows) sent."""
        for batch in self._gathered.flush():
            self._send_batch(*batch)
        while self._pending:
            self._wait_oldest()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.close_sessions()
        return self.batches, self.rows

    def close_sessions(self) -> None:
        """The workers close their sessions of this export (best effort: the writer ends any left)."""
        with contextlib.suppress(Exception):
            self.client.run(close_sessions, self.key)

    def cancel(self) -> None:
        """Drop what is not loaded yet (the tasks running end with their sessions when the temporary
        database is dropped)."""
        pool, self._pool = self._pool, None
        self._gathered.flush()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for entry in self._pending:
            sent = entry[0]
            if sent.done() and not sent.cancelled() and sent.exception() is None:
                with contextlib.suppress(Exception):
                    sent.result().cancel()
        self._pending.clear()  # (the workers' sessions end with the temporary database: DROP ... WITH (FORCE))


def _probe_database(params: dict[str, Any], shown: str) -> str | None:
    """On a worker: None when it opens a session on the database ``params`` names, else why not."""
    try:
        from ptexport.writers.pg_copy import connect_loading

        conn = connect_loading(params)
    except ImportError as e:  # pragma: no cover - an odd install
        return f"cannot import psycopg: {e}"
    except Exception as e:  # noqa: BLE001 - psycopg's errors, whatever the server or network says
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"cannot reach {shown}: {first}"
    conn.close()
    return None


@contextlib.contextmanager
def open_cluster(scheduler: str, timeout: float | None = None) -> Iterator[DaskUnits]:
    """A :class:`DaskUnits` on the scheduler at ``scheduler`` (``tcp://HOST:PORT``), or on a
    LocalCluster of N worker processes of one thread each (``local:N``), closed on leaving."""
    check_scheduler(scheduler)
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    try:  # imported here: dask loads only with --scheduler (start-up time, and it is an extra)
        import dask
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise UsageError(f"--scheduler needs dask.distributed ({e}): pip install 'ptexport[cluster]'") from e

    cluster = None
    client = None
    scratch = None
    # dask's own log lines (a lost scheduler, a restarted worker) stay quiet: what matters comes out
    # as one ClusterError (the CLI is the only place that prints)
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        m = _LOCAL.match(scheduler)
        try:
            if m:
                # the cluster's scratch space (dask's default leaves dask-scratch-space in /tmp): removed at the end
                scratch = tempfile.TemporaryDirectory(prefix="ptexport-dask-")
                with dask.config.set({"temporary-directory": scratch.name}):
                    cluster = LocalCluster(n_workers=int(m.group(1)), threads_per_worker=1, processes=True,
                                           host="127.0.0.1", dashboard_address=":0", silence_logs=logging.CRITICAL,
                                           local_directory=scratch.name)
                client = Client(cluster, timeout=timeout)
            else:
                client = Client(scheduler, timeout=timeout)
        except PtExportError:
            raise
        except Exception as e:  # noqa: BLE001 - dask raises OSError, TimeoutError, ValueError (a bad address)...
            raise ClusterError(f"cannot reach scheduler {scheduler}: {type(e).__name__}: {e}") from e
        try:
            client.wait_for_workers(1, timeout=WORKER_TIMEOUT)
        except Exception as e:  # noqa: BLE001 - dask's TimeoutError, or the scheduler gone
            raise ClusterError(f"scheduler {scheduler} has no workers ({type(e).__name__}: {e}): start some with "
                               f"`dask worker {scheduler}`") from e
        yield DaskUnits(client, f"scheduler {scheduler}")
    finally:
        if client is not None:
            with contextlib.suppress(Exception):  # closing a client whose scheduler is gone
                client.close()
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close()
        if scratch is not None:
            scratch.cleanup()
        quiet.setLevel(level)


@dataclasses.dataclass(frozen=True)
class WorkerView:
    """The recording as the workers see it: path, decode options (paths mapped) and what tells them it
    is the coordinator's file."""

    path: str
    config: Any
    ident: tuple

    def bind(self, session: Any) -> None:
        """Point ``session``'s segment streams at the cluster."""
        session.worker_path = self.path
        session.worker_config = self.config
        session.worker_ident = self.ident


def prepare_workers(units: DaskUnits, cls: Any, path: str, config: Any,
                    mapping: tuple[tuple[str, str], ...]) -> WorkerView | None:
    """Check every worker can read the recording at ``path`` (mapped) and that it is this one, then let
    each open it and load its kernels (not waited for: meanwhile this process reads the sideband).
    None for pipe input (decoded here)."""
    path = os.path.abspath(str(path))
    if not os.path.exists(path):
        return None
    view = WorkerView(map_path(path, mapping) or path, worker_config(config, mapping), file_identity(path))
    units.check_workers(view.path, view.ident)
    units.warm(cls, view.path, view.config, view.ident)
    return view
