"""Queue decoding for :meth:`PerfSession.decode`: compiled when possible, in worker processes on request.

:func:`decode_queues` returns one rows object per queue (the session's
``Rows`` of :mod:`ptexport.decoder.reference.queue` or :class:`ptexport.decoder.compiled.decoder.FastRows`), in queue order;
:func:`count_samples` is ``dump branches --count``: it decodes everything
and keeps only errors (what perf's failure budget needs) and counts.

With ``jobs`` > 1 (and at least 2 MB of trace) work goes to a process
pool; each worker opens the perf.data itself (a job is a small picklable
tuple: path, options, queue number, start/stop positions).  With the
compiled decoder every queue is cut at PSBs into ``jobs`` segments decoded
at the same time and joined exactly (see "PSB segments" below); with the
reference decoder whole queues go to workers.  Output always equals serial
decoding.

:meth:`PerfSession.iter_batches` streams instead (see "streaming" below):
:func:`_queue_chunks` gives per queue an iterator of bounded chunks, decoded
here or by workers a few segments (compiled decoder) or chunks (reference
decoder, a process per queue) ahead of the merge, so memory does not grow
with the trace with any number of jobs.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any, Callable

import numpy as np

from ptexport.decoder import backend
from ptexport.decoder.compiled import kernel as K
from ptexport.decoder.compiled.decoder import FastRows, QueueDecoder
from ptexport.decoder.reference import queue as reference_queue
from ptexport.pt.perfpkt import PSB_BYTES
from ptexport.samples.columns import EV_ERROR
from ptexport.errors import InputError
from ptexport.session import default_jobs
from ptexport.session import queues_compiled as QC
from ptexport.session.units import UnitExecutor, ordered


#: Signals a terminal, ``kill -TERM -PGID`` or systemd send to the whole process group.  A worker
#: ignores them: killed while it sends a result, it would leave half a message in the pool's
#: result pipe, on which the pool's manager thread (and so the parent's clean-up) would wait
#: forever.  The parent alone handles them and stops its workers (``shutdown``, ``kill``).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def ignore_stop_signals() -> None:
    """In a worker process, first thing: leave the stop signals to the parent (and end with it)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    die_with_parent()


def die_with_parent() -> None:
    """In a worker process: SIGKILL when the process that forked it ends, however it ends (Linux's
    PR_SET_PDEATHSIG), so a killed parent - the decoding child of ``--jobs N``, killed by its own
    parent - leaves no workers waiting for jobs forever.  Elsewhere nothing (the pools' pipes end them)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _pool(jobs: int, session: Any | None = None) -> Any:
    """A process pool whose workers are forked from this process.

    With the compiled decoder, its kernels are loaded here first (one step of a
    throwaway decoder), so every worker inherits their machine code instead of
    loading it from numba's cache itself (~1-2 s of CPU a process, more than a
    small segment's decoding)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    if session is not None:
        warm_kernels(session)
        _inherit(session)
    return ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork"), initializer=ignore_stop_signals)


def _inherit(session: Any) -> None:
    """``session`` made the session a forked worker opens for its recording (:func:`_worker_session`,
    keyed as the jobs this process submits): the worker has it as it was at the fork, instead of reading
    the recording's records and sideband again (40 M branches: 0.04-0.14 s before its first segment)."""
    path = getattr(getattr(session, "pd", None), "path", None)
    cfg = getattr(session, "cfg", None)
    if path is None or cfg is None:
        return
    _keep_session((str(path), repr(cfg), None), session)


def _keep_session(key: tuple, session: Any) -> None:
    """``session`` cached for :func:`_worker_session` under ``key``, the most recent of a few."""
    cache = _WORKER.__dict__.setdefault("sessions", OrderedDict())
    cache[key] = session
    cache.move_to_end(key)
    while len(cache) > _WORKER_SESSIONS:
        cache.popitem(last=False)


def warm_kernels(session: Any) -> None:
    """The compiled decoder's kernels loaded in this process (one step of a throwaway decoder)."""
    queues = session.queues()
    ctx = session.decode_context()
    if queues and backend.compiled_for(ctx):
        key, bufs = queues[0]
        qd = QueueDecoder(ctx, 0, key, bufs)
        qd.setup()
        qd.drive(single=True)
        qd.position()


def _warm_job(cls: Any, path: str, config: Any, ident: tuple | None = None) -> None:
    """On a cluster's worker, before its first segment: the recording opened (kept for the segments
    that follow in the same thread) and the kernels loaded, while the coordinator reads the sideband."""
    warm_kernels(_worker_session(cls, path, config, ident))


def _decode_one(session: Any, qnum: int, key: tuple[str, int], bufs: list[Any], count_only: bool = False) -> Any:
    return backend.decode_queue(session.decode_context(), qnum, key, bufs, count_only=count_only)


def _worker_job(cls: Any, path: str, config: Any, qnum: int, count_only: bool) -> Any:
    """In a worker: decode queue ``qnum`` whole (the reference decoder or the compiled one)."""
    session = _worker_session(cls, path, config)
    qkey, bufs = session.queues()[qnum]
    rows = _decode_one(session, qnum, qkey, bufs, count_only)
    if not isinstance(rows.items_err, np.ndarray):
        rows.items_err = np.asarray(rows.items_err, dtype=bool)
        rows.items_ts = np.asarray(rows.items_ts, dtype=np.int64)
    return rows.cols, rows.setup_failures, rows.items_err, rows.items_ts, getattr(rows, "branch_count", 0), \
        _obj_names(session)


def _obj_names(session: Any) -> list[str]:
    return session.obj_names()


def _decode_all(session: Any, jobs: int | None, count_only: bool, min_segment_bytes: int | None = None) -> list[Any]:
    min_segment_bytes = MIN_SEGMENT_BYTES if min_segment_bytes is None else min_segment_bytes
    queues = session.queues()
    jobs = default_jobs() if jobs is None else max(1, jobs)
    path = getattr(session.pd, "path", None)
    ctx = session.decode_context()
    if jobs == 1 or not path or not os.path.exists(str(path)):
        if count_only and backend.compiled_for(ctx):
            return [_count_queue(session, q, key, bufs) for q, (key, bufs) in enumerate(queues)]
        return [_decode_one(session, q, key, bufs, count_only) for q, (key, bufs) in enumerate(queues)]

    if backend.segmentable(ctx) and not session.time_ranges:
        # PSB segments of every queue big enough, all in one pool; small queues whole (--time: a
        # queue's time filter state runs from its start, so whole queues go to workers).
        plans = []
        total = 0
        for q, (key, bufs) in enumerate(queues):
            qd = QueueDecoder(ctx, q, key, bufs, count_only)
            total += int(qd.tokens.bi[:, K.BI_DLEN].sum()) if len(qd.tokens.bi) else 0
            plans.append((qd, _segment_starts(qd.tokens, jobs, min_segment_bytes)))
        if sum(len(starts) + 1 for _, starts in plans) < 2 or total < 2 * min_segment_bytes:
            return [qd.run() for qd, _ in plans]  # not worth worker processes
        # first segments first here (each queue's first starts in the true state: it needs no join),
        # the workers from the other end
        units = sorted(((q, k) for q, (_, starts) in enumerate(plans) for k in range(len(starts) + 1)),
                       key=lambda u: (u[1] != 0, u))
        path_s = str(path)
        width = min(jobs - 1, len(units) - 1)  # (this process always has a unit)
        out = []
        with _pool(width, session) as pool:
            got = share_units(
                units, width,
                lambda u: pool.submit(_segment_job, type(session), path_s, session.cfg, u[0],
                                      _cut(plans[u[0]][1], u[1] - 1), _cut(plans[u[0]][1], u[1]), count_only),
                lambda u: _decode_segment(session, u[0], _cut(plans[u[0]][1], u[1] - 1), _cut(plans[u[0]][1], u[1]),
                                          count_only))
            segs = [[got[(q, k)] for k in range(len(starts) + 1)] for q, (_, starts) in enumerate(plans)]
            for f, (qd, starts) in zip(segs, plans):
                qd.setup()
                qd.S[K.P_RAW_INSN] = 1
                out.append(_stitch_segments(f, starts, qd, count_only, session.decode_stats))
        return out
    if len(queues) < 2:
        return [_decode_one(session, q, key, bufs, count_only) for q, (key, bufs) in enumerate(queues)]
    # whole queues, the biggest first here and the smallest first in the workers
    sizes = [(q, sum(len(b.data) for b in ctx.buffers(bufs))) for q, (_, bufs) in enumerate(queues)]
    order = [q for q, _ in sorted(sizes, key=lambda x: (-x[1], x[0]))]
    out = []
    width = min(jobs - 1, len(queues) - 1)
    with _pool(width, session) as pool:
        got = share_units(order, width,
                          lambda q: pool.submit(_worker_job, type(session), str(path), session.cfg, q, count_only),
                          lambda q: _decode_one(session, q, *queues[q], count_only))
        for q in range(len(queues)):
            fut = got[q]
            if not isinstance(fut, Future):
                out.append(fut)
                continue
            cols, setup, ierr, its, nbr, names = fut.result()
            # Object ids are per process: map them to this session's.
            remap = np.array([session._obj_id(n) for n in names] + [-1], dtype=np.int64)
            cols["obj"] = np.where(np.asarray(cols["obj"]) >= 0, remap[np.asarray(cols["obj"], dtype=np.int64)], -1)
            out.append(FastRows(cols, [int(remap[i]) for i in setup], ierr, its, nbr))
    return out


# ------------------------------------------------------------ PSB segments
#
# A queue is cut at PSBs into segments decoded at the same time.  Segment k
# is decoded from its PSB as if the trace started there (speculatively) and
# records its full decoder state at every step of a first window.  Then,
# in order, the true state the previous segment ended in is run forward
# step by step until it equals one of those recorded states (same packet,
# same decoder, timing, stack and session state; instruction counts may
# differ by a constant and are corrected): from there on the speculative
# rows are the serial decoder's.  If no recorded state matches, the parent
# decodes the segment itself, so the output always equals serial decoding.

MIN_SEGMENT_BYTES = 1 << 20
_RECORD_ALL = 32  # states recorded at every step after a segment's PSB; then sparse:
_SPARSE_FIRST, _SPARSE_LAST = 1 << 8, 1 << 22  # byte distances from the PSB, doubling


def _sparse_targets(at: tuple[int, int], after: tuple[int, int]) -> list[tuple[int, int]]:
    """Where a segment records its state after the first steps: (buffer, byte) at doubling distances
    from its PSB, past ``after``.  A join runs the true state to each in one kernel call, so once the
    speculative and true decodings agree it finds that out within twice the distance it took."""
    out = []
    d = _SPARSE_FIRST
    while d <= _SPARSE_LAST:
        t = (at[0], at[1] + d)
        if t > after:
            out.append(t)
        d *= 2
    return out


def _cmp_mask() -> np.ndarray:
    mask = np.zeros(K.S_SIZE, bool)
    mask[:K.NSTATE] = True
    for name in ("IDX", "STUCK_IP", "STUCK_IP_PRD", "STUCK_IP_CNT", "RET_ADDR", "TNT_COUNT", "TNT_PAYLOAD",
                 "FUP_TX_FLAGS", "FUP_PTW_PAYLOAD", "FUP_MWAIT_PAYLOAD", "FUP_PWRE_PAYLOAD",
                 "PERIOD_INSN_CNT", "TOT_INSN_CNT", "ST_TOT_INSN", "LAST_BR_INSN",
                 "LAST_INSN_CNT", "LAST_IN_INSN", "LAST_IN_CYC",
                 "TOT_CYC_CNT", "SAMPLE_TOT_CYC_CNT", "ST_TOT_CYC", "LAST_BR_CYC", "BASE_CYC_CNT",
                 "CYC_CNT_TIMESTAMP", "CYCLE_CNT",
                 "ST_PTW_PAYLOAD", "ST_POS", "INS_OP", "INS_BR", "INS_LEN", "INS_REL", "LASTFAIL", "MTC_INSN", "INJ_IP", "INJ_TO",
                 "INJ_MAX", "INJ_NR", "INJ_ERR", "INJ_CNT", "INJ_NEWIP", "INJ_OP", "INJ_BR", "INJ_LEN", "INJ_REL",
                 "INJ_FAIL"):
        mask[getattr(K, name)] = False
    # Event Trace: RFLAGS.IF, what waits for the next FUP, the state's RFLAGS.IF after it (later samples'
    # flags) and the parameters; a CFE's type and vector only while it waits (_same_state); the state's
    # CFE and EVDs were sampled already, and its IF before is read only in a state that sets it.
    mask[K.ET_FIRST:K.S_SIZE] = True
    for name in ("FUP_CFE_TYPE", "FUP_CFE_VECTOR", "ST_CFE_TYPE", "ST_CFE_VECTOR", "ST_EVD_N", "ST_FROM_IFLAG"):
        mask[getattr(K, name)] = False
    return mask


def _same_state(a: tuple, b: tuple, mask: np.ndarray) -> bool:
    """Decoder states a and b (S, F, stack, failed object, waiting EVDs) lead to the same output from
    here on."""
    Sa, Fa, stka, faila, eva = a
    Sb, Fb, stkb, failb, evb = b
    if faila != failb or not np.array_equal(Sa[mask], Sb[mask]) or not np.array_equal(Fa, Fb):
        return False
    if not np.array_equal(eva, evb):  # (as many: EVD_N is compared)
        return False
    if ((Sa[K.SET_FUP_CFE] or Sa[K.SET_FUP_CFE_IP])
            and not np.array_equal(Sa[K.FUP_CFE_TYPE:K.FUP_CFE_VECTOR + 1], Sb[K.FUP_CFE_TYPE:K.FUP_CFE_VECTOR + 1])):
        return False
    if not np.array_equal(stka, stkb):
        return False
    # Cycle counts: equal, or (once both count CYC packets, integer sums only) equal up to one offset.
    # (BASE_CYC_CNT and CYC_CNT_TIMESTAMP only matter before the first CYC packet.)
    both_cyc = bool(Sa[K.HAVE_CYC] and Sb[K.HAVE_CYC])
    # The IPC marks of branch and instruction samples only matter where those samples are made (their
    # instruction counts are raw totals: P_RAW_INSN).
    cyc = [K.TOT_CYC_CNT, K.SAMPLE_TOT_CYC_CNT, K.ST_TOT_CYC]
    if Sa[K.P_BRANCHES]:
        cyc.append(K.LAST_BR_CYC)
    if Sa[K.P_INSNS]:
        cyc.append(K.LAST_IN_CYC)
    if not both_cyc:
        cyc += [K.BASE_CYC_CNT, K.CYC_CNT_TIMESTAMP]
    d = Sa[cyc] - Sb[cyc]
    if d.any() and not (both_cyc and (d == d[0]).all()):
        return False
    # CYCLE_CNT counts cycles since the CYC reference time; without one it is never read.
    if (Sa[K.CYC_REF_TIMESTAMP] or Sb[K.CYC_REF_TIMESTAMP]) and Sa[K.CYCLE_CNT] != Sb[K.CYCLE_CNT]:
        return False
    if Sa[K.NO_PROGRESS] >= 2 and not np.array_equal(Sa[K.STUCK_IP:K.STUCK_IP_CNT + 1], Sb[K.STUCK_IP:K.STUCK_IP_CNT + 1]):
        return False
    if Sa[K.PKT_STATE] in (K.TNT_ST, K.TNT_CONT) and (Sa[K.TNT_COUNT] != Sb[K.TNT_COUNT]
                                                        or Sa[K.TNT_PAYLOAD] != Sb[K.TNT_PAYLOAD]):
        return False
    if (Sa[K.SET_FUP_TX:K.SET_FUP_BEP + 1].any()
            and not np.array_equal(Sa[K.FUP_TX_FLAGS:K.FUP_PWRE_PAYLOAD + 1], Sb[K.FUP_TX_FLAGS:K.FUP_PWRE_PAYLOAD + 1])):
        return False
    return True


def _snapshot(qd: Any) -> tuple:
    S = qd.S
    depth = min(int(S[K.STACK_DEPTH]), len(qd.stk))
    return S.copy(), qd.F.copy(), qd.stk[:depth].copy(), qd.lastfail_name(), qd.ev[:, :int(S[K.EVD_N])].copy()


def _segment_starts(tokens: Any, n: int, min_bytes: int) -> list[tuple[int, int]]:
    """Up to n-1 PSBs cutting the queue into about equal byte ranges: (buffer, byte in buffer)."""

    bi = tokens.bi
    total = int(bi[:, K.BI_DLEN].sum()) if len(bi) else 0
    n = min(n, total // max(min_bytes, 1))
    if n < 2:
        return []
    starts = np.cumsum(np.concatenate([[0], bi[:, K.BI_DLEN]]))[:-1]
    out: list[tuple[int, int]] = []
    for j in range(1, n):
        target = total * j // n
        b = int(np.searchsorted(starts, target, side="right")) - 1
        byte = target - int(starts[b])
        found = None
        while b < len(bi) and found is None:
            data = tokens.meta[b].data
            while byte < len(data):
                chunk = bytes(data[byte:byte + (1 << 16) + 15])
                at = chunk.find(PSB_BYTES)
                if at >= 0:
                    found = (b, byte + at)
                    break
                byte += 1 << 16
            b, byte = b + 1, 0
        if found is not None and found != (0, 0) and (not out or found > out[-1]):
            out.append(found)
    return out


def _segment_job(cls: Any, path: str, config: Any, qnum: int, at: tuple[int, int] | None,
                 stop: tuple[int, int] | None, count_only: bool, window: int | None = None,
                 ident: tuple | None = None) -> dict:
    """In a worker: decode one segment (:func:`_decode_segment`) of the recording at ``path``.  A work
    unit of :mod:`ptexport.session.units`: it depends on its arguments only, so running it again (a
    cluster's worker died) gives the same result."""
    return _decode_segment(_worker_session(cls, path, config, ident), qnum, at, stop, count_only, window)


def _decode_segment(session: Any, qnum: int, at: tuple[int, int] | None, stop: tuple[int, int] | None,
                    count_only: bool, window: int | None = None) -> dict:
    """Decode one segment of queue ``qnum``, from its PSB ``at`` (speculatively, unless it is the first:
    None) to the next one, ``stop`` (None: the end).

    The decoder state is recorded at the first steps of the segment and then at byte distances
    doubling from its PSB (the joins compare states there).
    """
    qkey, bufs = session.queues()[qnum]
    qd = QueueDecoder(session.decode_context(), qnum, qkey, bufs, count_only, window=window)
    qd.setup(at)
    qd.S[K.P_RAW_INSN] = 1
    records: list[tuple] = []
    r = None

    def record(target: tuple[int, int] | None) -> None:
        records.append((qd.position(), int(qd.S[K.STEP]), _snapshot(qd), qd.counts(), int(qd.S[K.NBRANCH]),
                        target))

    if at is not None:
        n_steps = 0
        while n_steps < _RECORD_ALL:  # the first steps one by one: states mostly agree within a few packets
            pos = qd.position()
            if stop is not None and pos >= stop:
                break
            if qd.S[K.PHASE] == K.PH_RUN:
                record(None)
                n_steps += 1
            r = qd.drive(single=True, stop=stop)
            if r != K.R_STEP:
                break
        if r == K.R_STEP:  # then at byte distances doubling from the PSB, each reached in one kernel call
            for target in _sparse_targets(at, qd.position()):
                if stop is not None and target >= stop:
                    break
                if qd.position() >= target:  # past it already (the PSB's buffer ended before it)
                    continue
                r = qd.drive(stop=target)
                if r != K.R_STOP:
                    break
                if qd.S[K.PHASE] == K.PH_RUN:
                    record(target)
    if r is None or r in (K.R_STEP, K.R_STOP):
        r = qd.drive(stop=stop)
    o, it = qd.take()
    return dict(o=o, it=it, records=records, final=_snapshot(qd), final_pos=qd.position(),
                fail_names=list(qd.fail_names),
                done=r == K.R_DONE, nbranch=int(qd.S[K.NBRANCH]))


def _worker_session(cls: Any, path: str, config: Any, ident: tuple | None = None) -> Any:
    """The recording opened again in a worker (``cls``: the parent session's class, whose ``reopen``
    opens it), once per process and thread: a few recent ones are kept (a Dask worker lives on from
    export to export; a pool's worker is forked for one).  ``ident``: :func:`file_identity` of the
    coordinator's file, checked when the file is opened here (a worker of a cluster may see another
    file at that path)."""
    cache = _WORKER.__dict__.setdefault("sessions", OrderedDict())
    key = (path, repr(config), ident)
    got = cache.get(key)
    if got is None:
        if ident is not None:
            try:
                mine = file_identity(path)
            except OSError as e:
                raise InputError(f"cannot read the recording here: {e.strerror or e}", source=path,
                                 what=f"worker on {_host()}") from e
            if mine != ident:
                raise InputError(f"not the coordinator's recording ({mine[0]} bytes against {ident[0]}, or other "
                                 "contents): map the path with --cluster-path", source=path,
                                 what=f"worker on {_host()}")
        got = cls.reopen(path, config)
    _keep_session(key, got)
    return got


_WORKER = threading.local()  # .sessions: (path, config, identity) -> session, most recent last
_WORKER_SESSIONS = 2


def _host() -> str:
    import socket

    return socket.gethostname()


def file_identity(path: str) -> tuple[int, str]:
    """(size, digest of the first and last 64 KiB) of a recording, or of each file of a perf.data
    directory: what tells a worker's copy from another file at the same path, without reading it all."""
    h = hashlib.sha1()
    if os.path.isdir(path):
        size = 0
        for name in sorted(os.listdir(path)):
            sub = os.path.join(path, name)
            if os.path.isfile(sub):
                n, d = file_identity(sub)
                size += n
                h.update(f"{name}:{n}:{d}".encode())
        return size, h.hexdigest()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h.update(f.read(1 << 16))
        if size > 1 << 17:
            f.seek(size - (1 << 16))
        h.update(f.read(1 << 16))
    return size, h.hexdigest()


def _load_state(qd: Any, snap: tuple, pos: tuple[int, int]) -> None:
    """Make the parent's decoder continue from ``snap`` (taken in another process at cursor ``pos``)."""
    S, F, stk, fail, ev = snap
    qd.ev[:, :ev.shape[1]] = ev
    nbranch = int(qd.S[K.NBRANCH])
    qd.S[:] = S
    qd.S[K.NBRANCH] = nbranch
    qd.S[K.NOUT] = 0
    qd.S[K.NITEM] = 0
    qd.S[K.CTX_LO] = 0
    qd.S[K.CTX_HI] = 0
    qd.S[K.INJ_VALID] = 0
    qd.F[:] = F
    qd.stk[:len(stk)] = stk
    qd.S[K.LASTFAIL] = _fail_id(qd, fail)
    # The worker's packet index -> ours (they differ only if a PSB inside a packet re-tokenized).
    b, byte = pos
    tok = qd.tokens
    if 0 <= b < len(tok.bi):
        tok.load(b)
        for _ in range(2):
            hi = int(tok.bi[b, K.BI_PEND])
            j = tok.index_at(b, byte)
            if byte >= int(tok.bi[b, K.BI_DLEN]):
                j = hi
                break
            if tok.pk[3, j] == byte:
                break
            tok.retokenize(b, byte)
        qd.S[K.IDX] = j


def _fail_id(qd: Any, name: str | None) -> int:
    if name is None:
        return -1
    i = qd.fail_ids.get(name)
    if i is None:
        i = qd.fail_ids[name] = len(qd.fail_names)
        qd.fail_names.append(name)
    return i


def _remap_fails(qd: Any, o: np.ndarray, names: list[str]) -> None:
    if not names:
        return
    remap = np.array([_fail_id(qd, n) for n in names] + [-1], dtype=np.int64)
    obj = o[K.O_OBJ]
    o[K.O_OBJ] = np.where(obj >= 0, remap[obj], -1)


def _cut(starts: list[tuple[int, int]], k: int) -> tuple[int, int] | None:
    """Where segment k + 1 starts (segment k ends): None before the first and after the last."""
    return starts[k] if 0 <= k < len(starts) else None


def share_units(units: list[Any], width: int, submit: Callable[[Any], Future],
                run_here: Callable[[Any], Any]) -> dict[Any, Any]:
    """Work units decoded by this process and a pool of ``width`` workers at once, each unit by
    whichever is free first: this process takes them from the front of ``units``, the pool from the back,
    and the pool is given a unit only when one of its workers is free (none waits in its queue, where
    it could no longer be taken back).  So neither side idles while the other has several units left,
    whatever each unit costs and however fast each process runs (two decoders on one machine's cores
    rarely run at the same speed, and this process also reads the sideband and joins the segments).

    ``submit(unit)``: a future of the pool; ``run_here(unit)``: the unit's result here (the first unit
    is always this process's).  Returns unit -> its result (decoded here) or its future.  A pool that
    fails to take a unit (broken) leaves the rest to this process; a unit's own error is its future's."""
    lock = threading.RLock()  # (a unit done before its callback is added calls it at once, lock held)
    futs: dict[Any, Future] = {}
    state = {"left": 0, "right": len(units), "busy": 0, "broken": False}

    def feed() -> None:  # (the lock held) hand the pool units while it has free workers
        while state["busy"] < width and state["left"] < state["right"] and not state["broken"]:
            unit = units[state["right"] - 1]
            try:
                fut = submit(unit)
            except Exception:  # noqa: BLE001 - e.g. BrokenProcessPool: the units left are done here
                state["broken"] = True
                return
            state["right"] -= 1
            state["busy"] += 1
            futs[unit] = fut
            fut.add_done_callback(done)

    def done(_fut: Future) -> None:  # (on the pool's thread) a worker is free: its next unit
        with lock:
            state["busy"] -= 1
            feed()

    out: dict[Any, Any] = {}
    if not units:
        return out
    with lock:
        state["left"] = 1  # the first unit is this process's whatever the pool does meanwhile
        feed()
    unit = units[0]
    try:
        while True:
            out[unit] = run_here(unit)
            with lock:
                if state["left"] >= state["right"]:
                    break
                unit = units[state["left"]]
                state["left"] += 1
    except BaseException:
        with lock:
            state["broken"] = True  # (no more units to the pool: the error ends the decode)
        raise
    with lock:
        out.update(futs)
    return out


def _stitch_segments(futs: list[Any], starts: list[tuple[int, int]], qd: Any, count_only: bool, stats: Any) -> Any:
    """Rows of one queue from its segments, equal to serial decoding (see above)."""
    os_, its = [], []
    nbranch = 0
    for o, it, nb in _joined_segments((f if isinstance(f, dict) else f.result() for f in futs), starts, qd, stats):
        os_.append(o)
        its.append(it)
        nbranch += nb
    o = np.concatenate(os_, axis=1)
    it = np.concatenate(its, axis=1)
    if not count_only:
        _insn_diffs(o, (0, 0, 0), qd)
    rows = qd._rows(o, it)
    rows.branch_count = nbranch
    return rows


def _raw_insn_rows(o: np.ndarray) -> np.ndarray:
    """The rows whose instruction count is a raw total (``P_RAW_INSN``): samples with IPC."""
    return o[K.O_CYC] != 0


def _raw_period_rows(o: np.ndarray, qd: Any) -> np.ndarray:
    """The rows whose period is a raw instruction total (``P_RAW_INSN``): instruction samples, but in
    hop and leap modes (their period is 1)."""
    if qd.S[K.P_QUICK]:
        return np.zeros(o.shape[1], bool)
    return o[K.O_KIND] == K.EV_INSTRUCTION


def _insn_diffs(o: np.ndarray, prev: tuple[int, int, int], qd: Any) -> tuple[int, int, int]:
    """Raw instruction totals -> perf's per-sample differences, each series apart as perf counts them
    (``prev``: the queue's last totals so far: branch IPC, instruction IPC, instruction period)."""
    ipc = _raw_insn_rows(o)
    insn = o[K.O_KIND] == K.EV_INSTRUCTION
    out = []
    for (row, sel), p in zip(((K.O_INSN, ipc & ~insn), (K.O_INSN, ipc & insn), (K.O_PERIOD, _raw_period_rows(o, qd))),
                             prev):
        at = np.flatnonzero(sel)
        if len(at):
            vals = o[row][at]
            o[row][at] = np.diff(vals, prepend=p)
            p = int(vals[-1])
        out.append(p)
    return out[0], out[1], out[2]


def _joined_segments(results: Any, starts: list[tuple[int, int]], qd: Any, stats: Any):
    """(rows, items, branches) of each segment in order, joined exactly (``results``: the workers'
    :func:`_segment_job` dicts in segment order; ``qd`` set up at the queue's start)."""
    cuts = list(starts)
    mask = _cmp_mask()
    res = next(results)
    _remap_fails(qd, res["o"], res["fail_names"])
    yield res["o"], res["it"], res["nbranch"]
    done = res["done"]
    pending = (res["final"], res["final_pos"])  # the true state at the next cut, from a worker
    for k in range(1, len(cuts) + 1):
        if done:
            break
        res = next(results)
        os_, its = [], []
        nbranch = 0
        if pending is not None:
            _load_state(qd, *pending)
            pending = None
        base_nb = int(qd.S[K.NBRANCH])
        stop = cuts[k] if k < len(cuts) else None
        recs: dict[tuple, list] = {}
        dense = [rec for rec in res["records"] if rec[5] is None]
        for rec in dense:
            recs.setdefault((rec[0], rec[1]), []).append(rec)
        dense_end = dense[-1][0] if dense else (-1, 0)

        def agreed():
            cands = recs.get((qd.position(), int(qd.S[K.STEP])))
            if cands:
                mine = _snapshot(qd)
                for rec in cands:
                    if _same_state(mine, rec[2], mask):
                        return rec
            return None

        matched = None
        while True:  # step by step through the positions the segment recorded at every step
            matched = agreed()
            pos = qd.position()
            if matched is not None or pos > dense_end or (stop is not None and pos >= stop):
                break
            r = qd.drive(single=True, stop=stop)
            if r == K.R_DONE:
                done = True
                break
            if r == K.R_STOP:
                break
        if matched is None and not done:  # then to each sparse record in one kernel call
            for rec in res["records"]:
                target = rec[5]
                if target is None or qd.position() >= target:
                    continue
                r = qd.drive(stop=target)
                if r == K.R_DONE:
                    done = True
                    break
                if r != K.R_STOP:
                    break
                if (qd.position(), int(qd.S[K.STEP])) == (rec[0], rec[1]) and _same_state(_snapshot(qd), rec[2],
                                                                                         mask):
                    matched = rec
                    break
        if matched is not None:  # segment joins that agreed / segments decoded again serially
            stats.matched += 1
        else:
            stats.redone += 1
        if matched is not None:
            o, it = qd.take()
            os_.append(o)
            its.append(it)
            nbranch += int(qd.S[K.NBRANCH]) - base_nb
            qd.S[K.NBRANCH] = base_nb
            Sb, (rows_at, items_at) = matched[2][0], matched[3]
            d_insn = int(qd.S[K.TOT_INSN_CNT]) - int(Sb[K.TOT_INSN_CNT])
            d_step = int(qd.S[K.STEP_NR]) - int(Sb[K.STEP_NR])
            o = res["o"][:, rows_at:]  # adjusted in place: a result is the join's alone (unpickled here)
            it = res["it"][:, items_at:]
            _remap_fails(qd, o, res["fail_names"])
            o[K.O_STEP] += d_step
            o[K.O_INSN][_raw_insn_rows(o)] += d_insn
            o[K.O_PERIOD][_raw_period_rows(o, qd)] += d_insn
            os_.append(o)
            its.append(it)
            nbranch += res["nbranch"] - matched[4]
            S, F, stk, fail, ev = res["final"]
            S = S.copy()
            insns = S[K.P_INSNS]
            for name in ("TOT_INSN_CNT", "ST_TOT_INSN", "LAST_BR_INSN", "PERIOD_INSN_CNT") + (
                    ("LAST_INSN_CNT", "LAST_IN_INSN") if insns else ()):
                S[getattr(K, name)] += d_insn
            d_cyc = int(qd.S[K.TOT_CYC_CNT]) - int(Sb[K.TOT_CYC_CNT])
            for name in ("TOT_CYC_CNT", "SAMPLE_TOT_CYC_CNT", "ST_TOT_CYC", "LAST_BR_CYC", "BASE_CYC_CNT") + (
                    ("LAST_IN_CYC",) if insns else ()):
                S[getattr(K, name)] += d_cyc
            S[K.STEP_NR] += d_step
            pending = ((S, F, stk, fail, ev), res["final_pos"])
            done = res["done"]
        else:
            # No agreement in the window: decode this segment here.
            if not done:
                r = qd.drive(stop=stop)
                done = r == K.R_DONE
            o, it = qd.take()
            os_.append(o)
            its.append(it)
            nbranch += int(qd.S[K.NBRANCH]) - base_nb
            qd.S[K.NBRANCH] = base_nb
        yield (np.concatenate(os_, axis=1) if len(os_) > 1 else os_[0],
               np.concatenate(its, axis=1) if len(its) > 1 else its[0], nbranch)


def decode_queues(session: Any, jobs: int | None = 1, min_segment_bytes: int | None = None) -> list[Any]:
    """Every queue of ``session`` decoded, in queue order."""
    return _decode_all(session, jobs, False, min_segment_bytes)


def _count_streamed(session: Any, jobs: int | None) -> tuple[int, int]:
    """(samples, errors) of the session's batches (its filters, its initial skip applied).  With 2 jobs or
    fewer the batches are decoded here: PSB segments streamed by 2 workers cost twice the CPU of one
    decoder (10 M branches: 7.4 s against 3.5 s), and counting them beside costs nothing."""
    jobs = default_jobs() if jobs is None else jobs
    n = n_err = 0
    for cols in session.iter_batches(jobs if jobs > 2 else 1):
        n += len(cols)
        n_err += int((cols.kind == EV_ERROR).sum())
    return n - n_err, n_err


def count_samples(session: Any, jobs: int | None = 1, min_segment_bytes: int | None = None) -> tuple[int, int]:
    """(samples, errors) that ``session.decode(jobs)`` would return, without keeping the samples."""
    skip = session.cfg.itrace.initial_skip
    if not backend.compiled_for(session.decode_context()) or (skip and session.cfg.itrace.pwr_events):
        # --itrace=sN with power events: which held-back CBRs are dropped is decided in perf's order
        return _count_streamed(session, jobs)
    parts = _decode_all(session, jobs, True, min_segment_bytes)
    kinds = [np.asarray(p.cols["kind"]) for p in parts]
    if any((k == K.K_BUDGET).any() for k in kinds) or session.data_error_marks() or (
            session.cfg.insn_fetch_marks and any((np.asarray(p.cols["obj"]) >= 0).any() for p in parts)):
        # Silent failures share perf's per-object budget with reported ones, and so do perf script's
        # instruction fetches at the samples it prints (PerfSession._fetch_marks): order matters.
        return _count_streamed(session, 1)
    # perf reports an object's first two failures (setup failures included): order-free here.
    budget: dict[int, int] = {}
    for p in parts:
        for obj in p.setup_failures:
            budget[obj] = budget.get(obj, 0) + 1
    n_err = len(session.lost_data_rows()) + len(session.cut_error_rows(0, 0))
    for p, k in zip(parts, kinds):
        objs = np.asarray(p.cols["obj"])[k == EV_ERROR]
        n_err += int((objs < 0).sum())
        for obj in objs[objs >= 0].tolist():
            n = budget.get(obj, 0) + 1
            budget[obj] = n
            if n <= 2:
                n_err += 1
    n = sum(p.branch_count for p in parts)
    # --itrace=sN without power events: the first N samples in perf's order are dropped, whichever they are
    return n - min(skip, n), n_err


# ------------------------------------------------------------ streaming
#
# ``PerfSession.iter_batches``: the same rows as decoding everything and
# ordering it with ``PerfSession._perf_order``, but each queue is decoded
# on demand (the compiled decoder a chunk of rows at a time) and perf's
# queue heap is simulated as the items arrive, so rows leave as soon as
# their place is known.  Memory holds each queue's undelivered chunk, the
# output batch and the sideband, not the trace's samples.

#: AUX buffers a count-only decode runs between two releases of the recording's pages (100 M branches,
#: --jobs 1: peak RSS 279 -> 179 MB; 1 M: 165 MB)
RELEASE_BUFFERS = 64
STREAM_CHUNK = 1 << 16  # rows (and items) per compiled-decoder chunk (= iter_batches' default batch)
_I64_MAX = (1 << 63) - 1
MERGE_TURNS = 1 << 12  # queue turns the merge's kernel runs before their rows are taken (a VM trace's
# two CPU queues take turns every ~75 rows: 13 K turns a million samples, each a few Python calls before)


def _drive_chunk(qd: Any) -> int:
    """``QueueDecoder.drive`` that hands back control when its output arrays are full."""
    S = qd.S
    S[K.P_SINGLE] = 0
    S[K.P_STOP_BUF], S[K.P_STOP_BYTE] = -1, 0
    tok = qd.tokens
    while True:
        r = qd.kernel_run()
        if r == K.R_DONE or r == K.R_OUTFULL:
            return r
        if r == K.R_NEED:
            qd._need(S)
        elif r == K.R_CTX:
            qd._context(int(S[K.CTX_TSC]), S)
        elif r == K.R_RETOK:
            tok.retokenize(int(S[K.RETOK_BUF]), int(S[K.RETOK_POS]))
        elif r == K.R_MORE:
            qd.slide(int(S[K.MORE_BUF]))
        elif r == K.R_TF:
            qd.time_filter()
        if S[K.STACK_DEPTH] > 1 << 16:
            raise OverflowError("return stack deeper than the fast decoder's")


def _fast_chunks(session: Any, qnum: int, key: tuple[str, int], bufs: list[Any], chunk: int):
    qd = QueueDecoder(session.decode_context(), qnum, key, bufs)
    qd.setup()
    qd.out = np.zeros((K.O_SIZE, max(chunk, 128)), np.int64)  # (room for the rows of one state)
    qd.items = np.zeros((2, max(chunk, 64)), np.int64)
    while True:
        r = _drive_chunk(qd)
        yield qd._rows(*qd.take())
        if r == K.R_DONE:
            return


def _release_stops(qd: Any) -> list[tuple[int, int]]:
    """Where a count-only decode (one kernel call otherwise) stops so that the trace read so far can
    leave the resident set (``PerfData.release_pages``): every RELEASE_BUFFERS AUX buffers.  (A
    segment worker touches only its segment's pages: with its stops too, the 100 M-branch count's
    peak RSS stayed 181 MB.)"""
    cur = max(int(qd.S[K.BUF]), 0)
    return [(b, 0) for b in range(cur + RELEASE_BUFFERS, len(qd.tokens.bi), RELEASE_BUFFERS)]


def _count_queue(session: Any, qnum: int, key: tuple[str, int], bufs: list[Any]) -> Any:
    """Count-only decoding of one queue in bounded memory: per-step items are dropped as they come."""
    qd = QueueDecoder(session.decode_context(), qnum, key, bufs, count_only=True)
    qd.setup()
    kept = []
    release = getattr(session.pd, "release_pages", None)
    stops = iter(_release_stops(qd)) if release is not None else iter(())
    while True:
        at = next(stops, None)
        r = qd.drive(stop=at) if at is not None else _drive_chunk(qd)
        o, _ = qd.take()
        if o.shape[1]:
            kept.append(o)
        if r == K.R_DONE:
            break
        if at is not None:
            release()
    o = np.concatenate(kept, axis=1) if kept else np.zeros((K.O_SIZE, 0), np.int64)
    rows = qd._rows(o, np.zeros((2, 0), np.int64))
    rows.branch_count = int(qd.S[K.NBRANCH])
    return rows


def _queue_chunks(session: Any, jobs: int | None, chunk: int, units: UnitExecutor | None = None) -> list[Any]:
    """Per queue, an iterator of rows objects (``Rows``/``FastRows``) in decoding order, each of
    about ``chunk`` rows: decoded here (``jobs`` == 1) or by worker processes ahead of use.
    ``units``: a cluster's executor (``--scheduler``): the compiled decoder's PSB segments run there;
    what cannot be cut into segments (the reference decoder, --time, instruction samples every N
    instructions) is decoded here, as ``--jobs 1`` would."""
    queues = session.queues()
    jobs = default_jobs() if jobs is None else max(1, jobs)
    path = getattr(session.pd, "path", None)
    ctx = session.decode_context()
    fast = backend.compiled_for(ctx)
    if units is not None:
        if fast and queues and path and os.path.exists(str(path)):
            streams = _segment_streams(session, jobs, chunk, units)
            if streams is not None:
                return streams
    elif jobs > 1 and path and os.path.exists(str(path)) and queues:
        if fast:
            streams = _segment_streams(session, jobs, chunk)
            if streams is not None:
                return streams
        else:
            return _reference_streams(session, jobs, chunk)
    if fast:
        return [_fast_chunks(session, q, key, bufs, chunk) for q, (key, bufs) in enumerate(queues)]
    return [reference_queue.iter_queue(ctx, q, key, bufs, chunk) for q, (key, bufs) in enumerate(queues)]


# Worker processes for streaming.  The compiled decoder's queues are cut at PSBs
# into segments of about STREAM_SEGMENT_BYTES, decoded by a process pool at most
# a few segments ahead of the merge (each segment's rows are what the parent holds
# per queue); the reference decoder runs whole queues in processes of their own
# that hand back chunks through a bounded queue.  Either way what the parent holds
# does not grow with the trace, and rows equal serial decoding.

STREAM_SEGMENT_BYTES = 1 << 16  # trace bytes per streamed segment (~64 K rows of a branchy trace)
STREAM_QUEUE_CHUNKS = 2  # chunks a reference worker may hand back ahead of the merge


class ProcessUnits:
    """A :class:`~ptexport.session.units.UnitExecutor` of this machine: a forked process pool
    (:func:`_pool`) shared by the segment streams of one session, shut down with the last one."""

    def __init__(self, jobs: int, users: int, session: Any) -> None:
        self.pool = _pool(jobs, session)
        self.width = self.window = jobs
        self.budget: int | None = None  # each queue's stream has its window
        self.in_flight = 0
        self.users = users

    def submit(self, fn: Any, *args: Any) -> Any:
        return self.pool.submit(fn, *args)

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _segment_streams(session: Any, jobs: int, chunk: int, units: UnitExecutor | None = None) -> list[Any] | None:
    """Streams of segment rows for every queue, or None when the trace is too small for workers
    (or has --time ranges: a queue's time filter state runs from its start, segments cannot).
    ``units``: where the segments run (a cluster's, owned by the caller); None: a process pool of
    ``jobs`` processes made here."""
    ctx = session.decode_context()
    if session.time_ranges or not backend.segmentable(ctx):
        return None

    plans = []
    total = 0
    width = units.width if units is not None else jobs
    for q, (key, bufs) in enumerate(session.queues()):
        qd = QueueDecoder(ctx, q, key, bufs)
        size = int(qd.tokens.bi[:, K.BI_DLEN].sum()) if len(qd.tokens.bi) else 0
        total += size
        n = max(width, size // STREAM_SEGMENT_BYTES)
        plans.append((q, key, bufs, qd, _segment_starts(qd.tokens, n, STREAM_SEGMENT_BYTES)))
    if total < 2 * MIN_SEGMENT_BYTES or not any(starts for *_, starts in plans):
        return None  # not worth worker processes
    nseg = sum(len(starts) + 1 for *_, starts in plans if starts)
    session.decode_stats.units += nseg
    if units is None:
        units = ProcessUnits(jobs, sum(1 for *_, starts in plans if starts), session)
    lookahead = units.window
    out = []
    for q, key, bufs, qd, starts in plans:
        if starts:
            out.append(_segment_stream(session, q, qd, starts, units, lookahead))
        else:
            out.append(_fast_chunks(session, q, key, bufs, chunk))
    return out


def _segment_stream(session: Any, qnum: int, qd: Any, starts: list[tuple[int, int]], units: UnitExecutor,
                    lookahead: int):
    """One queue's rows, a segment at a time, with at most ``lookahead`` segments submitted ahead."""
    path = session_worker_path(session)
    ident = getattr(session, "worker_ident", None)
    stats = session.decode_stats
    window = max(2 * STREAM_SEGMENT_BYTES, 1 << 16)
    cuts = [None] + list(starts) + [None]
    calls = ((_segment_job, (type(session), path, getattr(session, "worker_config", None) or session.cfg, qnum, cuts[k],
                             cuts[k + 1], False, window, ident))
             for k in range(len(starts) + 1))

    def held(res: dict, pending: Any) -> None:
        # (results still on a cluster's workers are not held here: not fetched to be counted)
        n = int(res["o"].shape[1]) + sum(int(f.result()["o"].shape[1]) for f in pending
                                         if f.done() and getattr(f, "local", True))
        stats.max_held_rows = max(stats.max_held_rows, n)

    results = ordered(units, calls, lookahead, held)
    try:
        qd.setup()
        qd.S[K.P_RAW_INSN] = 1
        prev = (0, 0, 0)
        for o, it, nbranch in _joined_segments(results, starts, qd, stats):
            prev = _insn_diffs(o, prev, qd)
            rows = qd._rows(o, it)
            rows.branch_count = nbranch
            yield rows
    finally:
        results.close()  # cancels the segments still pending
        units.release()


def session_worker_path(session: Any) -> str:
    """Where workers open the recording: the path a cluster's workers see (``--cluster-path``) or
    this process's."""
    return getattr(session, "worker_path", None) or str(session.pd.path)


def _reference_streams(session: Any, jobs: int, chunk: int) -> list[Any]:
    """The reference decoder: the ``jobs`` biggest queues in worker processes of their own (each
    hands back chunks through a queue of STREAM_QUEUE_CHUNKS), the others here."""
    queues = session.queues()
    sizes = [sum(int(getattr(b, "size", 0) or 0) for b in bufs) for _, bufs in queues]
    chosen = set(sorted(range(len(queues)), key=lambda q: (-sizes[q], q))[:jobs])
    ctx = session.decode_context()
    return [_reference_stream(session, q, chunk) if q in chosen else reference_queue.iter_queue(ctx, q, key, bufs, chunk)
            for q, (key, bufs) in enumerate(queues)]


def _reference_worker(cls: Any, path: str, config: Any, qnum: int, chunk: int, out: Any) -> None:
    """In a worker process: decode queue ``qnum`` with the reference decoder, a chunk at a time."""
    ignore_stop_signals()
    try:
        session = _worker_session(cls, path, config)
        key, bufs = session.queues()[qnum]
        for rows in reference_queue.iter_queue(session.decode_context(), qnum, key, bufs, chunk):
            cols = _as_cols(rows, tuple(rows.cols))
            out.put((cols, rows.setup_failures, np.asarray(rows.items_err, dtype=bool),
                     np.asarray(rows.items_ts, dtype=np.int64), _obj_names(session)))
        out.put(None)
    except BaseException as e:  # handed to the parent, which raises it
        out.put(("error", e))


def _reference_stream(session: Any, qnum: int, chunk: int):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue(maxsize=STREAM_QUEUE_CHUNKS)
    proc = ctx.Process(target=_reference_worker, args=(type(session), str(session.pd.path), session.cfg, qnum, chunk, q),
                       daemon=True)
    started = False
    try:
        proc.start()
        started = True
        while True:
            msg = q.get()
            if msg is None:
                break
            if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "error":
                raise msg[1]
            cols, setup, ierr, its, names = msg
            # Object ids are per process: map them to this session's.
            remap = np.array([session._obj_id(n) for n in names] + [-1], dtype=np.int64)
            obj = cols["obj"]
            cols["obj"] = np.where(obj >= 0, remap[obj], -1)
            yield FastRows(cols, [int(remap[i]) for i in setup], ierr, its)
        proc.join()
    finally:
        if started and proc.is_alive():
            proc.kill()  # it ignores the stop signals (ignore_stop_signals)
            proc.join()


def _rebatch(chunks: Any, batch_rows: int):
    """Column chunks regrouped into batches of ``batch_rows`` rows (the last one smaller)."""
    pending: list[dict[str, np.ndarray]] = []
    n = 0
    for c in chunks:
        m = len(c["kind"])
        if not m:
            continue
        pending.append(c)
        n += m
        while n >= batch_rows:
            cols = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
            yield {k: v[:batch_rows] for k, v in cols.items()}
            rest = {k: v[batch_rows:] for k, v in cols.items()}
            n -= batch_rows
            pending = [rest] if n else []
    if n:
        yield {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}


_U64 = ("tsc", "ip", "addr", "payload")


def _as_cols(rows: Any, columns: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {c: np.asarray(rows.cols[c], dtype=np.uint64 if c in _U64 else np.int64) for c in columns}


class _Source:
    """One queue's items (for the heap) and undelivered rows, decoded on demand."""

    def __init__(self, chunks: Any, columns: tuple[str, ...], stats: Any) -> None:
        self.chunks = chunks
        self.stats = stats  # the session's DecodeStats (max_source_rows)
        self.columns = columns
        self.err = np.zeros(0, bool)
        self.ts = np.zeros(0, np.int64)
        self.base = 0  # item index of err[0]
        self.rows: list[dict[str, np.ndarray]] = []  # undelivered row chunks, queue order
        self.off = 0  # rows[0]'s rows before this one are delivered
        self.done = False
        self.setup_failures: list[int] = []

    @property
    def end(self) -> int:
        return self.base + len(self.ts)

    def more(self) -> bool:
        if self.done:
            return False
        part = next(self.chunks, None)
        if part is None:
            self.done = True
            return False
        self.setup_failures += list(part.setup_failures)
        if len(part):
            self.rows.append(_as_cols(part, self.columns))
            held = sum(len(c["kind"]) for c in self.rows)
            if held > self.stats.max_source_rows:
                self.stats.max_source_rows = held
        err = np.asarray(part.items_err, dtype=bool)
        ts = np.asarray(part.items_ts, dtype=np.int64)
        if len(ts):
            self.err = np.concatenate([self.err, err])
            self.ts = np.concatenate([self.ts, ts])
        return True

    def ensure(self, i: int) -> bool:
        """Item ``i`` decoded (False when the queue has fewer items)."""
        while i >= self.end:
            if not self.more():
                return False
        return True

    def clear_items(self) -> None:
        """Forget the decoded items (timeless order needs none)."""
        self.base = self.end
        self.err = np.zeros(0, bool)
        self.ts = np.zeros(0, np.int64)

    def drop_items(self, upto: int) -> None:
        k = upto - self.base
        if k > 4096 and k * 2 > len(self.ts):
            self.err = self.err[k:].copy()
            self.ts = self.ts[k:].copy()
            self.base = upto

    def take_pieces(self, hi: int | None) -> list[tuple[dict[str, np.ndarray], int, int]]:
        """Undelivered rows of steps before ``hi`` (all when None) as (chunk, lo, hi) pieces, not copied."""
        out = []
        while self.rows:
            c = self.rows[0]
            m = len(c["kind"])
            n = m if hi is None else int(np.searchsorted(c["step"], hi, side="left"))
            if n >= m:
                if m > self.off:
                    out.append((c, self.off, m))
                self.rows.pop(0)
                self.off = 0
                continue
            if n > self.off:
                out.append((c, self.off, n))
                self.off = n
            break
        return out

    def take_turn_pieces(self, his: np.ndarray, turns: Any) -> list[tuple[int, tuple[dict[str, np.ndarray], int, int]]]:
        """:meth:`take_pieces` for several ascending ``his`` at once, each piece paired with its turn
        (``turns[j]`` for ``his[j]``; an int: the turns are turns + j): (turn, (chunk, lo, hi)), no
        empty pieces."""
        out: list = []
        j, nh = 0, len(his)
        while j < nh and self.rows:
            c = self.rows[0]
            m = len(c["kind"])
            cut = np.searchsorted(c["step"], his[j:], side="left")
            inside = int(np.searchsorted(cut, m, side="left"))  # the turns that end within this chunk
            t = (np.arange(j, j + inside) + turns) if isinstance(turns, int) else turns[j:j + inside]
            off = self.off
            for turn, n in zip(t.tolist(), cut[:inside].tolist()):
                if n > off:
                    out.append((turn, (c, off, n)))
                    off = n
            j += inside
            if j < nh:  # the next turn takes this chunk's rest and goes on into the next chunk
                if m > off:
                    out.append((j + turns if isinstance(turns, int) else int(turns[j]), (c, off, m)))
                self.rows.pop(0)
                self.off = 0
            else:
                self.off = off
        return out

    def take_rows(self, hi: int | None) -> list[dict[str, np.ndarray]]:
        """Undelivered rows of steps before ``hi`` (all when None)."""
        return [c if not lo and b == len(c["kind"]) else {k: v[lo:b] for k, v in c.items()}
                for c, lo, b in self.take_pieces(hi)]


def _turn_key(entry: tuple[int, Any]) -> int:
    return entry[0]


def _gather(pieces: list[tuple[dict[str, np.ndarray], int, int]], n: int) -> dict[str, np.ndarray]:
    """The ``n`` rows of ``pieces`` in order (a VM trace's queues take turns every few dozen rows: a
    batch is a thousand pieces of a few chunks): per column and source chunk, one kernel call copies
    that chunk's runs (a fancy index gathered and scattered every row: 10-14 ms a 64 K-row batch)."""
    cs, los, his = zip(*pieces)
    pos: dict[int, int] = {}
    chunks: list[dict[str, np.ndarray]] = []
    for c in cs:
        if id(c) not in pos:
            pos[id(c)] = len(chunks)
            chunks.append(c)
    lo = np.array(los, np.int64)
    ln = np.array(his, np.int64) - lo
    at = np.cumsum(ln) - ln
    ci = np.array([pos[id(c)] for c in cs], np.int64) if len(chunks) > 1 else None
    runs = [(lo, ln, at)] if ci is None else [(lo[w], ln[w], at[w]) for w in (ci == j for j in range(len(chunks)))]
    kinds = [(k, v.dtype) for k, v in chunks[0].items()]
    if all(d.itemsize == 8 for _, d in kinds):  # the columns rows of one block: new memory faults in
        block = np.empty((len(kinds), n), np.int64)  # once (numpy asks for huge pages from 4 MB on)
        out = {k: block[i].view(d) for i, (k, d) in enumerate(kinds)}  # (21 columns apart: 5.3 -> 1.5 ms)
    else:
        out = {k: np.empty(n, d) for k, d in kinds}
    for c, (clo, cln, cat) in zip(chunks, runs):
        for k, v in c.items():
            o = out[k]
            if QC.numba is not None and v.dtype.itemsize == 8 and v.flags.c_contiguous and o.dtype == v.dtype:
                QC.copy_runs(o.view(np.int64), v.view(np.int64), clo, cln, cat)
            else:  # (another width, or without numba: the runs' rows by a fancy index)
                dpos = np.concatenate([np.arange(a, a + m) for a, m in zip(cat.tolist(), cln.tolist())])
                o[dpos] = v[dpos + np.repeat(clo - cat, cln)]
    return out


class _Items:
    """Every queue's decoded items (is-error, timestamp) in one pair of arrays, for the merge's kernel:
    queue q's items ``base[q]``... are ``ts[start[q]:start[q] + size[q]]``.  Each queue has a region of
    its own; a queue's new items go at the end of its region, which first sheds the items the merge is
    done with and, still too small, moves to the end of the arrays at twice the size (the arrays packed
    anew when that end is reached).  So a queue's items cost the same whatever the number of queues:
    a 64-CPU recording's merge copies what each queue decodes, not every queue's items at each step."""

    def __init__(self, nq: int) -> None:
        self.start = np.zeros(nq, np.int64)
        self.size = np.zeros(nq, np.int64)
        self.room = np.zeros(nq, np.int64)  # each region's length
        self.base = np.zeros(nq, np.int64)  # the absolute item number of each region's first item
        self.err = np.zeros(0, np.bool_)
        self.ts = np.zeros(0, np.int64)
        self.end = 0  # the regions end here

    def update(self, q: int, s: _Source, keep: int) -> None:
        """Bring queue q's region up to its source's items (``keep``: the first item the merge still reads)."""
        have = int(self.base[q] + self.size[q])
        if s.end <= have:
            return
        new_ts = s.ts[have - s.base:]
        new_err = s.err[have - s.base:]
        n = len(new_ts)
        drop = min(max(0, keep - int(self.base[q])), int(self.size[q]))
        a = int(self.start[q])
        if drop:  # shed what the merge has read
            k = int(self.size[q]) - drop
            self.ts[a:a + k] = self.ts[a + drop:a + drop + k]
            self.err[a:a + k] = self.err[a + drop:a + drop + k]
            self.base[q] += drop
            self.size[q] = k
        k = int(self.size[q])
        if k + n > self.room[q]:  # to the end, twice as big
            room = max(2 * (k + n), 1024)
            if self.end + room > len(self.ts):
                self._pack(q, room)
            else:
                b = self.end
                self.ts[b:b + k] = self.ts[a:a + k]
                self.err[b:b + k] = self.err[a:a + k]
                self.start[q], self.room[q] = b, room
                self.end += room
            a = int(self.start[q])
        self.ts[a + k:a + k + n] = new_ts
        self.err[a + k:a + k + n] = new_err
        self.size[q] = k + n

    def _pack(self, q: int, room: int) -> None:
        """New arrays: every region packed, each with as much room again as it holds, q's ``room``."""
        rooms = np.maximum(2 * self.size, 1024)
        rooms[q] = room
        total = int(rooms.sum())
        ts = np.empty(2 * total, np.int64)
        err = np.empty(2 * total, np.bool_)
        at = 0
        for j in range(len(rooms)):
            a, k = int(self.start[j]), int(self.size[j])
            ts[at:at + k] = self.ts[a:a + k]
            err[at:at + k] = self.err[a:a + k]
            self.start[j], self.room[j] = at, rooms[j]
            at += int(rooms[j])
        self.ts, self.err, self.end = ts, err, at


class StreamMerge:
    """perf's queue-heap order (``PerfSession._perf_order``), run incrementally over :class:`_Source` s."""

    def __init__(self, sources: list[_Source], event_tscs: list[tuple[int, bool]], lost: dict[str, np.ndarray],
                 batch_rows: int) -> None:
        self.src = sources
        # (a TSC past int64, a damaged record's, is no limit: the heap runs to the end there)
        self.ev_tsc = np.array([min(int(t), _I64_MAX) for t, _ in event_tscs], np.int64)
        self.ev_lost = np.array([bool(x) for _, x in event_tscs], np.bool_)
        self.lost = lost
        self.n_lost = len(lost["kind"])
        self.batch_rows = max(1, batch_rows)
        self.pending: list[tuple[dict[str, np.ndarray], int, int]] = []  # (chunk, lo, hi) pieces
        self.npending = 0
        # perf's queue heap over arrays (queues_compiled: the kernel runs it over the decoded items)
        nq = len(sources)
        self.hord = np.zeros(nq + 1, np.int64)  # the heap: ordinals (timestamps) and queues
        self.hq = np.zeros(nq + 1, np.int64)
        self.nxt = np.zeros(nq, np.int64)  # each queue's pending item
        self.done = np.zeros(nq, np.bool_)  # each queue decoded to its end
        self.st = np.zeros(QC.ST_SIZE, np.int64)
        self.st[QC.ST_Q] = -1
        self.turns = np.empty((2, MERGE_TURNS), np.int64)
        self.items = _Items(nq)

    def _emit(self, pieces: list) -> None:
        """Queue rows for the batches: (chunk, lo, hi) pieces or whole column dicts."""
        for p in pieces:
            if isinstance(p, dict):
                p = (p, 0, len(p["kind"]))
            if p[2] > p[1]:
                self.pending.append(p)
                self.npending += p[2] - p[1]

    def _flush(self, final: bool = False):
        """Batches of about ``batch_rows`` rows (at most a sixteenth more).  A pending piece of at least
        a sixteenth of a batch is a batch of its own (no copy: the decoder's chunks are a batch long,
        and the pieces they are cut into at perf's events - a context switch, an AUX record - mostly
        are that big), whole if it is at most a sixteenth longer than a batch; smaller ones are
        gathered together, as far as a batch needs them or up to the next big piece (a VM trace's
        queues take turns every few dozen rows).  Gathering the tail of one chunk with the head of the next copied every batch
        of a single-queue trace: 0.9 s of 5.8 s decoding 10 M branches, and so did a tail of a few
        thousand rows gathered with the head of the next chunk, leaving a tail again (1.3-2.2 s of
        7-13 s)."""
        while self.npending >= self.batch_rows or (final and self.npending):
            n = min(self.batch_rows, self.npending)
            c, lo, hi = self.pending[0]
            m = hi - lo
            if 16 * m >= self.batch_rows or m >= n:
                if m - n <= self.batch_rows >> 4:  # (a few rows over a batch: all of them)
                    self.pending.pop(0)
                else:
                    self.pending[0] = (c, lo + n, hi)
                    m = n
                self.npending -= m
                yield {k: v[lo:lo + m] for k, v in c.items()}
                continue
            used, m = 0, 0
            while m < n:
                size = self.pending[used][2] - self.pending[used][1]
                if 16 * size >= self.batch_rows:  # a big piece goes on its own next (no copy)
                    break
                m += size
                used += 1
            n = min(n, m)
            pieces = self.pending[:used]
            rest = []
            if m > n:  # the last piece is split
                c, lo, hi = pieces[-1]
                pieces[-1] = (c, lo, hi - (m - n))
                rest = [(c, hi - (m - n), hi)]
            self.pending = rest + self.pending[used:]
            self.npending -= n
            yield _gather(pieces, n)

    def _process(self):
        """perf's heap run to the end, up to each sideband event in turn (:func:`queues_compiled.merge_turns`):
        each queue taken in turn emits its rows up to its next item at or past the next queue's
        timestamp (+1); an event that reports lost data puts its row where it is reached."""
        st, tq, ti, items = self.st, self.turns[0], self.turns[1], self.items
        lost_i = 0
        while True:
            nt = QC.merge_turns(items.start, items.size, items.err, items.ts, items.base, self.done, self.nxt,
                                 self.hord, self.hq, st, self.ev_tsc, self.ev_lost, tq, ti)
            if nt:
                self._take_turns(tq[:nt], ti[:nt])
            yield from self._flush()
            status = st[QC.ST_STATUS]
            if status == QC.MERGE_DONE:
                return lost_i
            if status == QC.MERGE_LOST:
                if lost_i < self.n_lost:
                    self._emit([self._lost_row(lost_i)])
                    lost_i += 1
            elif status == QC.MERGE_NEED:
                q = int(st[QC.ST_Q])
                if self.src[q].more():
                    items.update(q, self.src[q], int(st[QC.ST_I]))
                else:
                    self.done[q] = True

    def _take_turns(self, tq: np.ndarray, ti: np.ndarray) -> None:
        """The rows of the turns (queue tq's rows before its item ti, in turn) queued for the batches:
        each queue's turns cut its rows with one search (a 4-CPU recording's turns are a few dozen
        rows each: a search apiece cost 2 us of 4 a turn)."""
        qs = tq.tolist()
        first = qs[0]
        mid = int(self.st[QC.ST_Q])
        if qs.count(first) == len(qs):  # (one queue: a single-queue trace's turns, or a run of one)
            for _, piece in self.src[first].take_turn_pieces(ti, 0):
                self._emit1(piece)
        else:
            cut: list = []
            for q in np.unique(tq).tolist():
                at = np.flatnonzero(tq == q)
                cut += self.src[q].take_turn_pieces(ti[at], at)
            cut.sort(key=_turn_key)
            for _, piece in cut:
                self._emit1(piece)
        for q in set(qs):  # their items before the pending ones are done with
            self.src[q].drop_items(int(self.st[QC.ST_I]) if q == mid else int(self.nxt[q]))

    def _emit1(self, piece: tuple[dict[str, np.ndarray], int, int]) -> None:
        self.pending.append(piece)
        self.npending += piece[2] - piece[1]

    def _lost_row(self, i: int) -> dict[str, np.ndarray]:
        return {k: v[i:i + 1] for k, v in self.lost.items()}

    def start(self) -> None:
        """Decode every queue up to its first timestamped state (all setup failures are known then)."""
        n = 0
        for q, s in enumerate(self.src):
            if s.ensure(0):
                n = QC.heap_push(self.hord, self.hq, n, q, int(s.ts[0]))
                self.items.update(q, s, 0)
            else:
                self.done[q] = True
        self.st[QC.ST_HEAP] = n

    def batches(self):
        """Row chunks (column dicts with obj and step) in perf's order, about ``batch_rows`` each."""
        lost_i = yield from self._process()
        if lost_i < self.n_lost:
            self._emit([{k: v[lost_i:] for k, v in self.lost.items()}])
        # Rows no emitted item claims go last, in queue order (as in _perf_order).
        for s in self.src:
            while True:
                self._emit(s.take_pieces(None))
                yield from self._flush()
                if not s.more():
                    break
            self._emit(s.take_pieces(None))
        yield from self._flush(final=True)
