"""The call tree compiled with numba: same rules and output as :mod:`.threadstack`.

:class:`CallTree` has :class:`ptexport.calltree.threadstack.CallTree`'s name
and interface (the twins convention, docs/architecture.md; tests/test_twins.py)
and produces identical rows (checked by randomised differential tests in
tests/calltree/test_calltree_fast.py); the per-sample loop runs in one compiled
function over flat state arrays:

* stack entries live in one pool (rows of ``E``), each linked to the entry
  below it, with a free list, so thousands of thread stacks share memory;
* ``S`` holds one row of counters per stack (thread, or thread and CPU for the
  idle task); ``P`` the call path nodes, found through a typed dict keyed by
  (parent, symbol, ip);
* when a pool or an output buffer might overflow, the compiled loop stops
  before the sample and Python grows the arrays and resumes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ptexport.calltree.stats import CallStats, symbol_stats
from ptexport.calltree.threadstack import (
    CALL_RETURN_NO_CALL,
    CALL_RETURN_NO_RETURN,
    CALL_RETURN_NON_CALL,
    CALLS_COLUMNS,
    SAMPLE_COLUMNS,
)
from ptexport.jit import numba
from ptexport.samples.flags import IpFlag


__all__ = [
    "CallTree",
    "CALL_RETURN_NO_CALL",
    "CALL_RETURN_NO_RETURN",
    "CALL_RETURN_NON_CALL",
    "CALLS_COLUMNS",
    "SAMPLE_COLUMNS",
]

# entry pool columns
E_RET, E_TIME, E_REF, E_BC, E_INSN, E_CYC, E_DBID, E_CP, E_FL, E_PREV, E_CHILD = range(11)
E_COLS = 11  # E_CHILD: summed durations of the entry's returned callees (its self time)
# output columns: CALLS_COLUMNS, then the call's self time, then for a sharded tree (.sharded) the key
# of the event that popped the call and which of its ids (own, parent's) were given there
O_SELF = len(CALLS_COLUMNS)
O_KEY = O_SELF + 1
O_FRESH = O_SELF + 2
O_COLS = O_SELF + 3
FRESH_OWN, FRESH_PARENT = 1, 2
# call path output columns: id, parent id, symbol, ip, and the key of the event that exported it
PO_COLS = 5
# entry flag bits
NO_CALL, TRACE_END_FL, NON_CALL = 1, 2, 4
# stack columns
S_TOP, S_CNT, S_THREAD, S_COMM, S_TRACENR, S_BC, S_INSN, S_CYC, S_LAST, S_RSTATE, S_INIT = range(11)
S_COLS = 11
# call path columns
P_PARENT, P_SYM, P_IP, P_INK, P_DBID = range(5)
P_COLS = 5
# globals
G_CALL_ID, G_CP_ID, G_NCP, G_FREE, G_NE, G_NOUT, G_NPO, G_KS, G_RSTATE0, G_KEY = range(10)
G_COLS = 10

F_BRANCH = int(IpFlag.BRANCH)
F_CALL = int(IpFlag.CALL)
F_RETURN = int(IpFlag.RETURN)
F_TRACE_BEGIN = int(IpFlag.TRACE_BEGIN)
F_TRACE_END = int(IpFlag.TRACE_END)
F_FROM_KERNEL = int(IpFlag.SYSCALLRET | IpFlag.INTERRUPT)

ST_DONE, ST_GROW_E, ST_GROW_P, ST_GROW_O = 0, 1, 2, 3

if numba is not None:
    @numba.njit(cache=True, nogil=True)
    def _ge_u(a, b):
        return np.uint64(a) >= np.uint64(b)

    @numba.njit(cache=True, nogil=True)
    def _cp_slot(P, H, parent, k1, k2):
        """Slot of H (an open-addressing index of P's nodes, node + 1, 0 empty) for the key."""
        mask = np.uint64(len(H) - 1)
        h = ((np.uint64(parent) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(k1) * np.uint64(0xC2B2AE3D27D4EB4F))
             ^ (np.uint64(k2) * np.uint64(0x165667B19E3779F9))) >> np.uint64(16)
        h &= mask
        while True:
            v = H[h]
            if v == 0:
                return h
            node = v - 1
            if P[node, P_PARENT] == parent and P[node, P_SYM] == k1 and P[node, P_IP] == k2:
                return h
            h = (h + np.uint64(1)) & mask

    @numba.njit(cache=True, nogil=True)
    def _rebuild_index(P, G, H):
        for node in range(1, G[G_NCP]):
            H[_cp_slot(P, H, P[node, P_PARENT], P[node, P_SYM], P[node, P_IP])] = node + 1

    @numba.njit(cache=True, nogil=True)
    def _findnew(P, G, H, parent, sym, ip):
        if sym != 0:
            k1, k2 = sym, np.int64(0)
        else:
            k1, k2 = np.int64(0), ip
        h = _cp_slot(P, H, parent, k1, k2)
        if H[h] != 0:
            return H[h] - 1
        node = G[G_NCP]
        G[G_NCP] += 1
        P[node, P_PARENT] = parent
        P[node, P_SYM] = k1
        P[node, P_IP] = k2
        P[node, P_INK] = 1 if _ge_u(ip, G[G_KS]) else 0
        P[node, P_DBID] = 0
        H[h] = node + 1
        return node

    @numba.njit(cache=True, nogil=True)
    def _export_cp(P, PO, G, node):
        if P[node, P_DBID] != 0:
            return P[node, P_DBID]
        # collect unexported ancestors, then number them root first
        n = 0
        x = node
        while x >= 0 and P[x, P_DBID] == 0:
            n += 1
            x = P[x, P_PARENT]
        chain = np.empty(n, np.int64)
        x = node
        for i in range(n):
            chain[i] = x
            x = P[x, P_PARENT]
        for i in range(n - 1, -1, -1):
            c = chain[i]
            G[G_CP_ID] += 1
            P[c, P_DBID] = G[G_CP_ID]
            p = P[c, P_PARENT]
            k = G[G_NPO]
            G[G_NPO] += 1
            PO[k, 0] = G[G_CP_ID]
            PO[k, 1] = P[p, P_DBID] if p >= 0 else 0
            PO[k, 2] = P[c, P_SYM]
            PO[k, 3] = P[c, P_IP]
            PO[k, 4] = G[G_KEY]
        return P[node, P_DBID]

    @numba.njit(cache=True, nogil=True)
    def _push(E, S, G, slot, ret_addr, tm, ref, cp, flags):
        e = G[G_FREE]
        if e >= 0:
            G[G_FREE] = E[e, E_PREV]
        else:
            e = G[G_NE]
            G[G_NE] += 1
        E[e, E_RET] = ret_addr
        E[e, E_TIME] = tm
        E[e, E_REF] = ref
        E[e, E_BC] = S[slot, S_BC]
        E[e, E_INSN] = S[slot, S_INSN]
        E[e, E_CYC] = S[slot, S_CYC]
        E[e, E_DBID] = 0
        E[e, E_CP] = cp
        E[e, E_FL] = flags
        E[e, E_PREV] = S[slot, S_TOP]
        E[e, E_CHILD] = 0
        S[slot, S_TOP] = e
        S[slot, S_CNT] += 1
        return e

    @numba.njit(cache=True, nogil=True)
    def _drop(E, S, G, slot):
        """Remove the top entry without a calls row (perf's ts->cnt -= 1)."""
        e = S[slot, S_TOP]
        S[slot, S_TOP] = E[e, E_PREV]
        S[slot, S_CNT] -= 1
        E[e, E_PREV] = G[G_FREE]
        G[G_FREE] = e

    @numba.njit(cache=True, nogil=True)
    def _pop_return(E, S, P, PO, O, G, slot, tm, ref, no_return):
        e = S[slot, S_TOP]
        cp_id = _export_cp(P, PO, G, E[e, E_CP])
        fl = 0
        if E[e, E_FL] & NO_CALL:
            fl |= CALL_RETURN_NO_CALL
        if no_return:
            fl |= CALL_RETURN_NO_RETURN
        if E[e, E_FL] & NON_CALL:
            fl |= CALL_RETURN_NON_CALL
        db_id = E[e, E_DBID]
        fresh = 0
        if db_id == 0:
            G[G_CALL_ID] += 1
            db_id = G[G_CALL_ID]
            fresh = FRESH_OWN
        below = E[e, E_PREV]
        parent_id = 0
        duration = tm - E[e, E_TIME]
        if below >= 0:
            if E[below, E_DBID] == 0:
                G[G_CALL_ID] += 1
                E[below, E_DBID] = G[G_CALL_ID]
                fresh |= FRESH_PARENT
            parent_id = E[below, E_DBID]
            E[below, E_CHILD] += duration
        pcp = P[E[e, E_CP], P_PARENT]
        k = G[G_NOUT]
        G[G_NOUT] += 1
        O[k, 0] = db_id
        O[k, 1] = S[slot, S_THREAD]
        O[k, 2] = S[slot, S_COMM]
        O[k, 3] = cp_id
        O[k, 4] = E[e, E_TIME]
        O[k, 5] = tm
        O[k, 6] = S[slot, S_BC] - E[e, E_BC]
        O[k, 7] = E[e, E_REF]
        O[k, 8] = ref
        O[k, 9] = P[pcp, P_DBID] if pcp >= 0 else 0
        O[k, 10] = fl
        O[k, 11] = parent_id
        O[k, 12] = S[slot, S_INSN] - E[e, E_INSN]
        O[k, 13] = S[slot, S_CYC] - E[e, E_CYC]
        O[k, O_SELF] = duration - E[e, E_CHILD]
        O[k, O_KEY] = G[G_KEY]
        O[k, O_FRESH] = fresh
        _drop(E, S, G, slot)

    @numba.njit(cache=True, nogil=True)
    def _flush(E, S, P, PO, O, G, slot):
        while S[slot, S_CNT] > 0:
            _pop_return(E, S, P, PO, O, G, slot, S[slot, S_LAST], 0, True)

    @numba.njit(cache=True, nogil=True)
    def _in_kernel(E, S, P, slot):
        if S[slot, S_CNT] == 0:
            return False
        return P[E[S[slot, S_TOP], E_CP], P_INK] != 0

    @numba.njit(cache=True, nogil=True)
    def _pop_ks(E, S, P, PO, O, G, slot, tm, ref):
        while _in_kernel(E, S, P, slot):
            _pop_return(E, S, P, PO, O, G, slot, tm, ref, True)

    @numba.njit(cache=True, nogil=True)
    def _is_retpoline(retsyms, sym):
        if sym == 0 or len(retsyms) == 0:
            return False
        i = np.searchsorted(retsyms, sym)
        return i < len(retsyms) and retsyms[i] == sym

    @numba.njit(cache=True, nogil=True)
    def _run(start, n, rows_a, slot_a, time_a, ip_a, addr_a, flags_a, ref_a, thread_a, comm_a, main_a, insn_len_a,
             insn_cnt_a, cyc_cnt_a, from_sym_a, to_sym_a, to_start_a, trace_nr_a, key_a,
             E, S, P, PO, O, G, cpd, retsyms):
        ks = G[G_KS]
        every = len(rows_a) == 0  # the columns are the branches' (else rows_a[i]: branch i's row in them)
        for i in range(start, n):
            r = i if every else rows_a[i]
            slot = slot_a[i]
            # room for the worst case of one sample: a whole-stack flush plus a few pushes and rows
            if G[G_NE] + 4 > E.shape[0]:  # conservative: ignores the free list
                return i, ST_GROW_E
            if G[G_NCP] + 4 > P.shape[0]:
                return i, ST_GROW_P
            if G[G_NOUT] + 2 * S[slot, S_CNT] + 8 > O.shape[0]:
                return i, ST_GROW_O

            tm = time_a[r]
            ip = ip_a[r]
            addr = addr_a[r]
            flags = flags_a[r]
            ref = ref_a[r]
            comm = comm_a[r]
            from_sym = from_sym_a[r]
            to_sym = to_sym_a[r]
            to_start = to_start_a[r]
            trace_nr = trace_nr_a[r]
            G[G_KEY] = key_a[r]

            if S[slot, S_INIT] == 0:
                S[slot, S_INIT] = 1
                S[slot, S_TOP] = -1
                S[slot, S_CNT] = 0
                S[slot, S_THREAD] = thread_a[r]
                S[slot, S_COMM] = comm
                S[slot, S_TRACENR] = 0
                S[slot, S_BC] = 0
                S[slot, S_INSN] = 0
                S[slot, S_CYC] = 0
                S[slot, S_LAST] = 0
                S[slot, S_RSTATE] = G[G_RSTATE0]
            elif trace_nr != S[slot, S_TRACENR]:
                if S[slot, S_TRACENR] != 0:
                    _flush(E, S, P, PO, O, G, slot)
                S[slot, S_TRACENR] = trace_nr

            rstate = S[slot, S_RSTATE]
            if rstate == 2:
                S[slot, S_RSTATE] = 1

            if S[slot, S_COMM] != comm and main_a[r]:
                _flush(E, S, P, PO, O, G, slot)
                S[slot, S_COMM] = comm

            if S[slot, S_CNT] == 0:
                if ip != 0:
                    cp = _findnew(P, G, cpd, 0, from_sym, ip)
                    _push(E, S, G, slot, ip, tm, ref, cp, NO_CALL)
                elif addr != 0:
                    cp = _findnew(P, G, cpd, 0, to_sym, addr)
                    _push(E, S, G, slot, addr, tm, ref, cp, NO_CALL)

            S[slot, S_BC] += 1
            S[slot, S_INSN] += insn_cnt_a[r]
            S[slot, S_CYC] += cyc_cnt_a[r]
            S[slot, S_LAST] = tm

            if flags & F_CALL:
                if ip == 0 or addr == 0:
                    continue
                ret_addr = ip + insn_len_a[r]
                if ret_addr == addr:
                    continue
                cp = _findnew(P, G, cpd, E[S[slot, S_TOP], E_CP], to_sym, addr)
                _push(E, S, G, slot, ret_addr, tm, ref, cp, TRACE_END_FL if flags & F_TRACE_END else 0)
                if rstate == 1 and to_sym != 0 and from_sym == to_sym and addr != to_start:
                    S[slot, S_RSTATE] = 2
            elif flags & F_RETURN:
                if addr == 0:
                    if flags & F_FROM_KERNEL:
                        _pop_ks(E, S, P, PO, O, G, slot, tm, ref)
                    continue
                if ip == 0:
                    continue
                top = S[slot, S_TOP]
                if rstate == 2 and S[slot, S_CNT] > 2 and E[top, E_RET] != addr:
                    # x86 retpoline
                    sym = P[E[top, E_CP], P_SYM]
                    if sym != 0 and _is_retpoline(retsyms, sym):
                        _drop(E, S, G, slot)
                        top = S[slot, S_TOP]
                        sym = P[E[E[top, E_PREV], E_CP], P_SYM]
                        if sym != 0 and sym == to_sym and addr != to_start:
                            _drop(E, S, G, slot)
                            continue
                    elif sym != 0 and sym == to_sym:
                        _drop(E, S, G, slot)
                        continue
                    top = S[slot, S_TOP]
                    E[top, E_CP] = _findnew(P, G, cpd, E[E[top, E_PREV], E_CP], to_sym, addr)
                    continue
                # pop to the matching entry
                matched = False
                cnt = S[slot, S_CNT]
                if cnt > 0:
                    if cnt == 1 and P[E[top, E_CP], P_SYM] == from_sym:
                        _pop_return(E, S, P, PO, O, G, slot, tm, ref, False)
                        matched = True
                    elif E[top, E_RET] == addr and not (E[top, E_FL] & NON_CALL):
                        _pop_return(E, S, P, PO, O, G, slot, tm, ref, False)
                        matched = True
                    else:
                        x = E[top, E_PREV]
                        while x >= 0:
                            if E[x, E_RET] == addr and not (E[x, E_FL] & NON_CALL):
                                break
                            x = E[x, E_PREV]
                        if x >= 0:
                            while S[slot, S_TOP] != x:
                                _pop_return(E, S, P, PO, O, G, slot, tm, ref, True)
                            _pop_return(E, S, P, PO, O, G, slot, tm, ref, False)
                            matched = True
                if matched:
                    continue
                # a return with no matching call
                if _ge_u(ip, ks) and not _ge_u(addr, ks):
                    _pop_ks(E, S, P, PO, O, G, slot, tm, ref)
                    if S[slot, S_CNT] == 0:
                        cp = _findnew(P, G, cpd, 0, to_sym, addr)
                        _push(E, S, G, slot, 0, tm, ref, cp, NO_CALL)
                        continue
                elif _in_kernel(E, S, P, slot) and not _ge_u(ip, ks):
                    _pop_ks(E, S, P, PO, O, G, slot, tm, ref)
                parent = E[S[slot, S_TOP], E_CP] if S[slot, S_CNT] > 0 else 0
                if P[parent, P_SYM] == from_sym:
                    if S[slot, S_CNT] == 1:
                        _pop_return(E, S, P, PO, O, G, slot, tm, ref, False)
                    if S[slot, S_CNT] == 0:
                        cp = _findnew(P, G, cpd, 0, to_sym, addr)
                        _push(E, S, G, slot, addr, tm, ref, cp, NO_CALL)
                        continue
                    cp = _findnew(P, G, cpd, parent, to_sym, addr)
                    _push(E, S, G, slot, 0, tm, ref, cp, NO_CALL | NON_CALL)
                    continue
                cp = _findnew(P, G, cpd, parent, to_sym, addr)
                _push(E, S, G, slot, addr, tm, ref, cp, NO_CALL)
                cp = _findnew(P, G, cpd, cp, from_sym, ip)
                _push(E, S, G, slot, ip, tm, ref, cp, NO_CALL)
                _pop_return(E, S, P, PO, O, G, slot, tm, ref, False)
            elif flags & F_TRACE_BEGIN:
                if S[slot, S_CNT] > 0 and E[S[slot, S_TOP], E_FL] & TRACE_END_FL:
                    _pop_return(E, S, P, PO, O, G, slot, tm, ref, False)
            elif flags & F_TRACE_END:
                cnt = S[slot, S_CNT]
                if cnt == 0 or (cnt == 1 and E[S[slot, S_TOP], E_REF] == ref):
                    continue
                cp = _findnew(P, G, cpd, E[S[slot, S_TOP], E_CP], 0, 0)
                _push(E, S, G, slot, ip + insn_len_a[r], tm, ref, cp, TRACE_END_FL)
            elif flags & F_BRANCH and from_sym != to_sym and to_sym != 0 and addr == to_start:
                cp = _findnew(P, G, cpd, E[S[slot, S_TOP], E_CP], to_sym, addr)
                _push(E, S, G, slot, 0, tm, ref, cp, NON_CALL)
        return n, ST_DONE

    @numba.njit(cache=True, nogil=True)
    def _live(E, S, P, nslots, ncp):
        """The entries on the stacks of slots 0..nslots-1 (each slot's bottom first, slot after slot) and
        the call path nodes they use with all their ancestors (ascending: a parent before its children)."""
        total = 0
        for s in range(nslots):
            if S[s, S_INIT]:
                total += S[s, S_CNT]
        ent = np.empty(total, np.int64)
        pos = 0
        for s in range(nslots):
            if S[s, S_INIT]:
                c = S[s, S_CNT]
                e = S[s, S_TOP]
                for j in range(c):
                    ent[pos + c - 1 - j] = e
                    e = E[e, E_PREV]
                pos += c
        mark = np.zeros(ncp, np.uint8)
        mark[0] = 1
        for j in range(total):
            x = E[ent[j], E_CP]
            while x >= 0 and mark[x] == 0:
                mark[x] = 1
                x = P[x, P_PARENT]
        return ent, np.flatnonzero(mark)

    @numba.njit(cache=True, nogil=True)
    def _flush_slots(slots, keys, E, S, P, PO, O, G):
        for j in range(len(slots)):
            slot = slots[j]
            G[G_KEY] = keys[j]
            if S[slot, S_INIT]:
                _flush(E, S, P, PO, O, G, slot)


def warm() -> None:
    """Compile :func:`_rebuild_index` ahead (``ptexport.cli.precompile``): the shipped samples' call
    trees stay within the first call path table, so no warm-up command grows it; a recording with
    more call paths than that (a VM's guest, any big program) would compile it at its first export.
    A tree of 8 entries takes 40 nested calls to distinct symbols and their returns."""
    tree = CallTree(capacity=8)
    tree.process_batch(warm_batch())


def warm_batch() -> dict[str, np.ndarray]:
    """40 nested calls to distinct symbols and their returns, of thread 1 (the warm-ups' branches)."""
    from ptexport.samples.flags import IpFlag

    n = 40
    call, ret = int(IpFlag.BRANCH | IpFlag.CALL), int(IpFlag.BRANCH | IpFlag.RETURN)
    ip = np.concatenate([0x1000 + 0x10 * np.arange(n), 0x1000 + 0x10 * np.arange(n, 0, -1) + 8])
    addr = np.concatenate([0x1010 + 0x10 * np.arange(n), 0x1000 + 0x10 * np.arange(n - 1, -1, -1) + 5])
    sym = np.concatenate([np.arange(1, n + 1), np.arange(n + 1, 1, -1)])
    return {"time": np.arange(2 * n) + 1, "ip": ip, "addr": addr,
            "flags": np.array([call] * n + [ret] * n), "ref": np.arange(2 * n) + 1,
            "thread_id": np.ones(2 * n, np.int64), "from_sym": sym, "to_sym": np.roll(sym, -1),
            "to_sym_start": addr}


def calls_columns(rows: np.ndarray, call_stats: CallStats | None) -> dict[str, np.ndarray]:
    """``calls`` rows of the output matrix as columns (folded into ``call_stats`` if any).  Column by
    column (the rows transposed as they are copied out): each column contiguous for whoever reads it,
    not a stride through rows of every column (the writer's checks and zone maps read a column of
    millions of calls: a cache line per value)."""
    cols = rows[:, :O_SELF + 1].T.copy()
    out = {name: cols[i] for i, name in enumerate(CALLS_COLUMNS)}
    out["flags"] = out["flags"].astype(np.int32)
    if call_stats is not None:
        call_stats.add(out, cols[O_SELF])
    return out


def call_path_columns(rows: np.ndarray) -> dict[str, np.ndarray]:
    """``call_paths`` rows (id, parent id, symbol, ip...) as columns, as :func:`calls_columns`."""
    cols = rows[:, :4].T.copy()
    return {"id": cols[0], "parent_id": cols[1], "symbol_id": cols[2], "ip": cols[3].view(np.uint64)}


_EVERY_ROW = np.zeros(0, np.int64)  # _run's rows_a when the columns are the branches'


def _grow(a: np.ndarray, need: int, fill: int = 0) -> np.ndarray:
    cap = max(need, 2 * a.shape[0], 64)
    b = np.full((cap,) + a.shape[1:], fill, dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


def _index_size(rows: int) -> int:
    """Power of two at least twice ``rows`` (the call path index stays at most half full)."""
    return 1 << max(4, (2 * rows - 1).bit_length())


class CallTree:
    """:class:`~ptexport.calltree.threadstack.CallTree` compiled with numba (same API, same rows)."""

    #: Whether :meth:`process_batch` lets other threads run meanwhile: its loop is a nogil kernel.
    releases_gil = True

    def __init__(
        self,
        *,
        kernel_start: int = 1 << 63,
        x86: bool = True,
        retpoline_syms: Iterable[int] = (),
        first_call_id: int = 0,
        first_call_path_id: int = 0,
        root_call_path_id: int = 0,
        capacity: int = 1024,
        stats: bool = False,
    ) -> None:
        if numba is None:  # pragma: no cover
            raise ImportError("the compiled CallTree needs numba (a dependency of ptexport: reinstall it)")
        capacity = max(int(capacity), 8)
        self.E = np.zeros((capacity, E_COLS), dtype=np.int64)
        self.S = np.zeros((16, S_COLS), dtype=np.int64)
        self.P = np.zeros((capacity, P_COLS), dtype=np.int64)
        self.PO = np.zeros((capacity, PO_COLS), dtype=np.int64)
        self.O = np.zeros((4 * capacity, O_COLS), dtype=np.int64)
        self.G = np.zeros(G_COLS, dtype=np.int64)
        self.G[G_CALL_ID] = first_call_id
        self.G[G_CP_ID] = max(first_call_path_id, root_call_path_id)
        self.G[G_NCP] = 1  # node 0: the root
        self.P[0, P_PARENT] = -1
        self.P[0, P_DBID] = root_call_path_id  # nonzero: its row is written by the caller
        self.G[G_FREE] = -1
        self.G[G_KS] = np.uint64(kernel_start).view(np.int64)
        self.G[G_RSTATE0] = 1 if x86 else 0
        self.retsyms = np.unique(np.array([int(s) for s in retpoline_syms if s], dtype=np.int64))
        # call path index: (parent, symbol, ip) -> node, open addressing over P (a numba typed dict
        # would cost a compilation in every process)
        self.cpd = np.zeros(_index_size(self.P.shape[0]), dtype=np.int64)
        self.slots: dict[tuple[int, int], int] = {}
        self.call_stats = CallStats() if stats else None

    @property
    def last_call_id(self) -> int:
        return int(self.G[G_CALL_ID])

    def _slot_keys(self, thread_id, cpu, pid, tid, rows=None) -> np.ndarray:
        """The stack slot of each branch: the columns' rows, or their rows ``rows`` (a batch's columns
        with its other samples' rows among them: one column gathered, not four)."""
        n = len(thread_id) if rows is None else len(rows)
        idle = (pid == 0) & (tid == 0)
        if n and not idle.any() and (thread_id == thread_id[0]).all():
            return np.full(n, self._slot((int(thread_id[0]), -1)), dtype=np.int64)  # one thread
        cpu_key = np.where(idle, np.maximum(cpu, 0), -1)
        # one int64 per (thread, cpu key): thread ids stay far below 2**43, CPUs below 2**20
        packed = (thread_id << 20) | (cpu_key + 1)
        if rows is not None:
            packed = packed[rows]
        # a thread runs for a while before the next: the keys of each run's first branch, not of every branch
        starts = np.flatnonzero(np.concatenate(([True], packed[1:] != packed[:-1])))
        uniq, inv = np.unique(packed[starts], return_inverse=True)
        slot_of = np.empty(len(uniq), dtype=np.int64)
        for j, key in enumerate(uniq.tolist()):
            slot_of[j] = self._slot((key >> 20, (key & 0xFFFFF) - 1))
        return np.repeat(slot_of[inv.ravel()], np.diff(np.append(starts, len(packed))))

    def _slot(self, key: tuple[int, int]) -> int:
        """The stack slot of (thread id, CPU key), made on first use."""
        s = self.slots.get(key)
        if s is None:
            s = self.slots[key] = len(self.slots)
            if len(self.slots) > self.S.shape[0]:
                self.S = _grow(self.S, len(self.slots))
        return s

    def process_batch(self, batch: Mapping[str, np.ndarray]) -> None:
        """The branches of ``batch`` (columns of :data:`SAMPLE_COLUMNS`, and ``key``: the order of their
        calls rows).  A batch with a ``raw()`` (the export's :class:`TreeColumns`) hands over a whole
        batch's columns and the rows of its branches, read where they are: gathering 17 columns by the
        branches' index cost as much as the loop (0.8 s of 10 M branches)."""
        raw = getattr(batch, "raw", None)
        rows = None
        if raw is not None:
            batch, rows = raw()
        m = None
        cols: dict[str, np.ndarray] = {}
        for name, default in SAMPLE_COLUMNS.items():
            if name in batch:
                col = np.asarray(batch[name])
                if m is None:
                    m = len(col)
                elif len(col) != m:
                    raise ValueError(f"column {name!r} has {len(col)} rows, expected {m}")
                cols[name] = col
            elif default is None:
                raise ValueError(f"branch batch lacks column {name!r}")
        n = m if rows is None else len(rows)
        if not n:
            return

        def i64(name):  # a column the loop takes (a missing one: its default, made here)
            c = cols.get(name)
            if c is None:
                return np.full(m, SAMPLE_COLUMNS[name], dtype=np.int64)
            if c.dtype == np.uint64:
                return np.ascontiguousarray(c).view(np.int64)
            return np.ascontiguousarray(c, dtype=np.int64)

        pid, tid, thread = i64("pid"), i64("tid"), i64("thread_id")
        if rows is None:
            slot = self._slot_keys(thread, i64("cpu"), pid, tid)
            rows_a = _EVERY_ROW
        else:
            rows_a = np.ascontiguousarray(rows, dtype=np.int64)
            slot = self._slot_keys(thread, i64("cpu"), pid, tid, rows_a)
        args = (rows_a, slot, i64("time"), i64("ip"), i64("addr"), i64("flags"), i64("ref"), thread,
                i64("comm_id"), pid == tid, i64("insn_len"), i64("insn_cnt"), i64("cyc_cnt"),
                i64("from_sym"), i64("to_sym"), i64("to_sym_start"), i64("trace_nr"),
                np.ascontiguousarray(batch["key"], dtype=np.int64) if "key" in batch else i64("ref"))
        start = 0
        while True:
            start, status = _run(start, n, *args, self.E, self.S, self.P, self.PO, self.O, self.G,
                                 self.cpd, self.retsyms)
            if status == ST_DONE:
                return
            self._grow_for(status, int(self.S[slot[start], S_CNT]))

    def _grow_for(self, status: int, depth: int) -> None:
        if status == ST_GROW_E:
            self.E = _grow(self.E, self.E.shape[0] + 8)
        elif status == ST_GROW_P:
            self.P = _grow(self.P, self.P.shape[0] + 8)
            self.PO = _grow(self.PO, self.P.shape[0])
            self.cpd = np.zeros(_index_size(self.P.shape[0]), dtype=np.int64)
            _rebuild_index(self.P, self.G, self.cpd)
        elif status == ST_GROW_O:
            self.O = _grow(self.O, int(self.G[G_NOUT]) + 2 * depth + 16)

    def _ensure_flush_room(self, slots: list[int]) -> None:
        need = int(self.G[G_NOUT]) + sum(int(self.S[s, S_CNT]) for s in slots) + 8
        if need > self.O.shape[0]:
            self.O = _grow(self.O, need)

    def process(self, **sample: int) -> None:
        self.process_batch({k: np.array([v]) for k, v in sample.items()})

    def set_trace_nr(self, thread_id: int, trace_nr: int, *, cpu: int = -1, pid: int = -1, tid: int = -1) -> None:
        key = (thread_id, max(cpu, 0) if pid == 0 and tid == 0 else -1)
        s = self.slots.get(key)
        if s is None or not self.S[s, S_INIT] or trace_nr == self.S[s, S_TRACENR]:
            return
        if self.S[s, S_TRACENR]:
            self._flush([s])
        self.S[s, S_TRACENR] = trace_nr

    def _flush(self, slots: list[int], keys: list[int] | None = None) -> None:
        self._ensure_flush_room(slots)
        _flush_slots(np.array(slots, dtype=np.int64), np.array(keys if keys is not None else [0] * len(slots),
                                                               dtype=np.int64),
                     self.E, self.S, self.P, self.PO, self.O, self.G)

    def flush_thread(self, thread_id: int) -> None:
        self._flush([s for k, s in sorted(self.slots.items()) if k[0] == thread_id])

    def flush_all(self, order: Iterable[int] | None = None) -> None:
        slots: list[int] = []
        if order is not None:
            for t in order:
                slots.extend(s for k, s in sorted(self.slots.items()) if k[0] == t)
        seen = set(slots)
        slots.extend(s for s in self.slots.values() if s not in seen)
        self._flush(slots)

    def take_calls(self) -> dict[str, np.ndarray]:
        out = calls_columns(self.O[:int(self.G[G_NOUT])], self.call_stats)
        self.G[G_NOUT] = 0
        return out

    def take_stats(self) -> dict[str, dict[str, np.ndarray]]:
        """The aggregates of every ``calls`` row taken so far (``stats=True``; else none), as the
        ``call_path_stats`` and ``symbol_stats`` tables' columns; given away (asked once, at the end)."""
        if self.call_stats is None:
            return {}
        cps = self.call_stats.rows()
        n = int(self.G[G_NCP])
        db_id = self.P[:n, P_DBID]
        cp_symbol = np.zeros(int(self.G[G_CP_ID]) + 1, dtype=np.int64)
        done = db_id > 0
        cp_symbol[db_id[done]] = self.P[:n, P_SYM][done]
        return {"call_path_stats": cps, "symbol_stats": symbol_stats(cps, cp_symbol)}

    def take_call_paths(self) -> dict[str, np.ndarray]:
        out = call_path_columns(self.PO[:int(self.G[G_NPO])])
        self.G[G_NPO] = 0
        return out

    def depth(self, thread_id: int, cpu: int = -1, pid: int = -1, tid: int = -1) -> int:
        s = self.slots.get((thread_id, max(cpu, 0) if pid == 0 and tid == 0 else -1))
        return int(self.S[s, S_CNT]) if s is not None and self.S[s, S_INIT] else 0

    def stack_return_addresses(self, thread_id: int, cpu: int = -1, pid: int = -1, tid: int = -1) -> list[int]:
        """The return addresses on the thread's stack, top first (what perf's thread_stack__sample reads)."""
        s = self.slots.get((thread_id, max(cpu, 0) if pid == 0 and tid == 0 else -1))
        if s is None or not self.S[s, S_INIT]:
            return []
        out = []
        e = int(self.S[s, S_TOP])
        for _ in range(int(self.S[s, S_CNT])):
            out.append(int(self.E[e, E_RET]) & 0xFFFFFFFFFFFFFFFF)
            e = int(self.E[e, E_PREV])
        return out

    def call_path_id(self, nodes: Iterable[tuple[int, int]]) -> int:
        """The export id of the call path root -> ``nodes`` ((symbol id, ip), caller first), created and
        exported (parents first) if need be: perf's call_path__findnew walk and db_export__call_path."""
        nodes = list(nodes)
        while int(self.G[G_NCP]) + len(nodes) + 1 > self.P.shape[0]:
            self._grow_for(ST_GROW_P, 0)
        node = 0
        for sym, ip in nodes:
            node = int(_findnew(self.P, self.G, self.cpd, node, np.int64(sym), np.uint64(ip).view(np.int64)))
        return int(_export_cp(self.P, self.PO, self.G, node))
