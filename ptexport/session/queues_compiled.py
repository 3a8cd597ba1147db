"""perf's sample order across queues (``PerfSession._perf_order``) over arrays, compiled.

Same algorithm as the session's reference: perf's auxtrace heap of queues,
each run up to the next queue's timestamp (+1) or the next sideband event's
TSC; a state that crosses the limit stays pending until its queue runs
again.  Inputs are flat arrays: per-queue items (is-error, queue timestamp
after it) concatenated with ``item_off`` giving each queue's start, the
event TSCs and lost-data flags, and the rows' queue and step columns.  The
result is the row permutation.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ptexport.jit import numba

_INF = np.int64((1 << 63) - 1)


def _push(hord, hq, n, q, ordinal):
    pos = n
    while pos:
        parent = (pos - 1) >> 1
        if ordinal >= hord[parent]:
            break
        hord[pos] = hord[parent]
        hq[pos] = hq[parent]
        pos = parent
    hord[pos] = ordinal
    hq[pos] = q
    return n + 1


def _pop(hord, hq, n):
    cnt = n
    pos = 0
    while True:
        left = 2 * pos + 1
        if left >= cnt:
            break
        right = left + 1
        if right >= cnt:  # a lone left child (the last item) fills the hole
            hord[pos] = hord[left]
            hq[pos] = hq[left]
            return n - 1
        if hord[left] < hord[right]:
            hord[pos] = hord[left]
            hq[pos] = hq[left]
            pos = left
        else:  # ties go right, also when the right child is the last item
            hord[pos] = hord[right]
            hq[pos] = hq[right]
            pos = right
    last_o = hord[n - 1]
    last_q = hq[n - 1]
    n -= 1
    if pos < n:
        while pos:
            parent = (pos - 1) >> 1
            if last_o >= hord[parent]:
                break
            hord[pos] = hord[parent]
            hq[pos] = hq[parent]
            pos = parent
        hord[pos] = last_o
        hq[pos] = last_q
    return n


def _order(item_off, item_err, item_ts, ev_tsc, ev_lost, n_lost, rank_item, rank_lost):
    """Fill rank_item (per item) and rank_lost (per lost row) with emission ranks; returns count."""
    nq = len(item_off) - 1
    hord = np.zeros(nq + 1, np.int64)
    hq = np.zeros(nq + 1, np.int64)
    nxt = np.zeros(nq, np.int64)
    n = 0
    for q in range(nq):
        if item_off[q + 1] > item_off[q]:
            n = _push(hord, hq, n, q, item_ts[item_off[q]])
    emitted = 0
    lost_i = 0
    e = 0
    ne = len(ev_tsc)
    while True:
        if e < ne:
            limit = ev_tsc[e]
            do = limit != 0
        else:
            limit = _INF
            do = True
        if do:
            while n and hord[0] < limit:
                q = hq[0]
                n = _pop(hord, hq, n)
                ts_lim = limit
                if n and hord[0] + 1 < limit:
                    ts_lim = hord[0] + 1
                # run(q, ts_lim)
                base = item_off[q]
                end = item_off[q + 1]
                cur = nxt[q]
                rank_item[base + cur] = emitted
                emitted += 1
                i = cur + 1
                pend = -1
                while base + i < end:
                    if item_err[base + i]:
                        rank_item[base + i] = emitted
                        emitted += 1
                        i += 1
                        continue
                    if item_ts[base + i] >= ts_lim:
                        pend = i
                        break
                    rank_item[base + i] = emitted
                    emitted += 1
                    i += 1
                if pend >= 0:
                    nxt[q] = pend
                    n = _push(hord, hq, n, q, item_ts[base + pend])
                else:
                    nxt[q] = i
        if e >= ne:
            break
        if ev_lost[e] and lost_i < n_lost:
            rank_lost[lost_i] = emitted
            emitted += 1
            lost_i += 1
        e += 1
    while lost_i < n_lost:
        rank_lost[lost_i] = emitted
        emitted += 1
        lost_i += 1
    return emitted


def _row_ranks(queue, step, item_off, rank_item, rank_lost, lost_base, default, out):
    nq = len(item_off) - 1
    for i in range(len(queue)):
        q = queue[i]
        if q >= 0:
            s = step[i]
            if q < nq and 0 <= s < item_off[q + 1] - item_off[q]:
                out[i] = rank_item[item_off[q] + s]
            else:
                out[i] = default
        else:
            j = i - lost_base
            out[i] = rank_lost[j] if 0 <= j < len(rank_lost) else default


# The streamed order (``parallel.StreamMerge``): the same heap run over the items decoded so far,
# resumable.  ``st`` holds what carries over between calls (the ST_* slots).
ST_HEAP = 0  # queues in the heap
ST_Q = 1  # the queue whose run stopped for want of items (-1: none)
ST_LIM = 2  # its run's limit
ST_UNB = 3  # 1: that limit is above every timestamp
ST_I = 4  # the item its run goes on from
ST_STATUS = 5  # how the last call ended: MERGE_DONE, MERGE_NEED (queue ST_Q needs items), MERGE_FULL, MERGE_LOST
ST_EV = 6  # the next sideband event (its TSC the heap's limit until reached; past the last: no limit)
ST_SIZE = 7
MERGE_DONE, MERGE_NEED, MERGE_FULL, MERGE_LOST = 0, 1, 2, 3


def merge_turns(start, size, err, ts, base, done, nxt, hord, hq, st, ev_tsc, ev_lost, tq, ti):
    """Run the heap over the items at hand, up to each sideband event's TSC ``ev_tsc`` in turn (perf runs
    its queues up to each event it delivers: ``intel_pt_process_queues``; a TSC of 0 runs nothing), then
    to the end: queue q's items are ``err``/``ts``[start[q]:start[q] + size[q]], its item ``base[q]``
    first; ``done[q]``: no more will come.  Each run is a turn (tq, ti): queue tq's rows before item ti
    go next.  Returns the turns written; ``st[ST_STATUS]`` says why it stopped: the turns full, a queue
    needing items, an event reporting lost data reached (``ev_lost``: its row goes next; ``st[ST_EV]``
    is past it), or the end.  One call runs past any number of other events (a ``perf record -a``
    recording has one per context switch: a call each cost 9 us of Python)."""
    n = st[ST_HEAP]
    q = st[ST_Q]
    lim = st[ST_LIM]
    unb = st[ST_UNB]
    i = st[ST_I]
    ev = st[ST_EV]
    nev = len(ev_tsc)
    nt = 0
    cap = len(tq)
    while True:
        if q < 0:
            final = ev >= nev
            limit = 0 if final else ev_tsc[ev]
            unbounded = final or limit >= _INF  # (an event's TSC past int64: no limit, as the end)
            if n == 0 or (not unbounded and (limit == 0 or hord[0] >= limit)):
                if final:
                    st[ST_STATUS] = MERGE_DONE
                    break
                ev += 1  # the event's turn: the heap runs on to the next one's TSC
                if ev_lost[ev - 1]:
                    st[ST_STATUS] = MERGE_LOST
                    break
                continue
            if nt >= cap:
                st[ST_STATUS] = MERGE_FULL
                break
            q = hq[0]
            n = _pop(hord, hq, n)
            lim = limit
            unb = unbounded
            if n and (unbounded or hord[0] + 1 < limit) and hord[0] < _INF:
                lim = hord[0] + 1
                unb = False
            i = nxt[q] + 1
        k = start[q] + i - base[q]
        stop = start[q] + size[q]
        while k < stop and (err[k] or unb or ts[k] < lim):
            k += 1
        i = base[q] + k - start[q]
        tq[nt] = q
        ti[nt] = i
        nt += 1
        if k < stop:  # the pending item: the queue goes back in the heap at its timestamp
            nxt[q] = i
            n = _push(hord, hq, n, q, ts[k])
            q = -1
        elif done[q]:  # the queue ended within the run
            nxt[q] = i
            q = -1
        else:
            st[ST_STATUS] = MERGE_NEED
            break
    st[ST_HEAP] = n
    st[ST_Q] = q
    st[ST_LIM] = lim
    st[ST_UNB] = unb
    st[ST_I] = i
    st[ST_EV] = ev
    return nt


def copy_runs(dst, src, lo, ln, at):
    """``dst[at[j]:at[j] + ln[j]] = src[lo[j]:lo[j] + ln[j]]`` for every run j (a merged batch's pieces of
    one source chunk, one column: parallel._gather)."""
    for j in range(len(lo)):
        a = lo[j]
        d = at[j]
        for i in range(ln[j]):
            dst[d + i] = src[a + i]


if numba is not None:
    copy_runs = numba.njit(cache=True, nogil=True)(copy_runs)  # the decoding thread's: the export runs meanwhile
    merge_turns = numba.njit(cache=True, nogil=True)(merge_turns)
    _push = numba.njit(cache=True)(_push)
    _pop = numba.njit(cache=True)(_pop)
    _order = numba.njit(cache=True)(_order)
    _row_ranks = numba.njit(cache=True)(_row_ranks)

heap_push = _push  # (the merge's queues enter the heap from Python: parallel.StreamMerge.start)


def perf_order(items: Sequence[tuple[Sequence[bool] | np.ndarray, Sequence[int] | np.ndarray]],
               event_tscs: list[tuple[int, bool]], n_lost: int,
               queue: np.ndarray, step: np.ndarray, lost_base: int) -> np.ndarray:
    """Row permutation in perf's output order (see ``PerfSession._perf_order``)."""
    sizes = [len(ts) for _, ts in items]
    item_off = np.zeros(len(items) + 1, np.int64)
    item_off[1:] = np.cumsum(sizes)
    item_err = np.concatenate([np.asarray(e, dtype=np.int64) for e, _ in items]) if items else np.zeros(0, np.int64)
    item_ts = np.concatenate([np.asarray(t, dtype=np.int64) for _, t in items]) if items else np.zeros(0, np.int64)
    ev_tsc = np.array([min(int(t), int(_INF)) for t, _ in event_tscs], dtype=np.int64)
    ev_lost = np.array([bool(lost) for _, lost in event_tscs], dtype=np.int64)
    total = int(item_off[-1]) + n_lost
    rank_item = np.full(int(item_off[-1]), total, np.int64)
    rank_lost = np.full(n_lost, total, np.int64)
    emitted = _order(item_off, item_err, item_ts, ev_tsc, ev_lost, n_lost, rank_item, rank_lost)
    rank_item[rank_item == total] = emitted
    rank_lost[rank_lost == total] = emitted
    ranks = np.empty(len(queue), np.int64)
    _row_ranks(np.asarray(queue, np.int64), np.asarray(step, np.int64), item_off, rank_item, rank_lost,
               lost_base, emitted, ranks)
    return np.argsort(ranks, kind="stable")


def warm() -> None:
    """Compile :func:`perf_order`'s kernels ahead (``ptexport.cli.precompile``): the commands stream
    (``merge_turns``); ``PerfSession.decode`` orders whole queues with these; a VM trace's batches are
    gathered from small pieces with :func:`copy_runs`."""
    one = np.zeros(1, np.int64)
    copy_runs(np.zeros(2, np.int64), one, np.zeros(1, np.int64), one, one)
    frozen = np.zeros(2, np.int64)  # a chunk that came read-only (a cluster worker's unpickled columns)
    frozen.flags.writeable = False
    copy_runs(np.zeros(2, np.int64), frozen, np.zeros(1, np.int64), one, one)
    perf_order([(np.zeros(1, bool), one), (np.zeros(1, bool), one + 1)], [(5, False)], 0, np.array([0, 1]),
               np.zeros(2, np.int64), 2)
