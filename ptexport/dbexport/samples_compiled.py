"""The export loop over whole sample batches (numpy), in perf's order and with perf's ids.

:func:`export_samples` gives the same database as the per-sample loop of
:mod:`ptexport.dbexport.samples` (its oracle, compared table by table in
``tests/dbexport/``), with Python work per *change* instead of per sample:

* a batch is cut where a sideband record is due (the first sample whose TSC
  reaches the record's, as perf's queues deliver it: ``np.searchsorted`` over
  the running maximum of the batch's TSCs), at each decode error and where the
  (machine, pid, tid) of consecutive samples changes.  Between two cuts the
  thread table does not change, and asking it twice in a row for the same
  thread gives the same answer without side effects, so each run of samples
  costs one :meth:`MachineState.threads` call;
* symbols: an address's DSO and symbol depend only on the machine, the address
  space (the process, or the kernel) and which maps exist at the sample's time
  (:meth:`MachineState.user_epochs`).  A hash table (compiled with numba when
  installed) maps (group, address) to a result slot; addresses it has not seen
  are resolved in first-reference order, ``ip`` before ``addr`` of each
  sample, which is the order perf hands out DSO and symbol ids in.  A SAMPLE
  record of the recording (resolved in the middle of the samples) cuts the
  batch for this too;
* perf's per-DSO last-lookup cache, which can answer an address with an
  "unknown" symbol below it, is followed from the few lookups that start it
  (:class:`DsoLastFind`);
* samples, call-tree input and payload rows are built as columns by masks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Callable, Iterable

import numpy as np

from ptexport.jit import numba
from ptexport.perfdata.constants import RecordType
from ptexport.samples.columns import (
    EV_BRANCH,
    EV_CBR,
    EV_ERROR,
    EV_EVT,
    EV_EXSTOP,
    EV_IFLAG,
    EV_MWAIT,
    EV_PSB,
    EV_PTWRITE,
    EV_PWRE,
    EV_PWRX,
    EV_TRANSACTION,
    SampleColumns,
    few_distinct,
)
from ptexport.dbexport.exporter import DbExporter
from ptexport.dbexport.payloads import evt_row, iflag_row
from ptexport.dbexport.vm import ThreadMemo
from ptexport.samples.flags import PERF_BRANCH_MASK, IpFlag

_IN_TX = int(IpFlag.IN_TX)
_SAMPLE = int(RecordType.SAMPLE)
_SWITCHES = (int(RecordType.SWITCH), int(RecordType.SWITCH_CPU_WIDE))
_MAX_SLOTS = 1 << 22  # the address cache starts over beyond this many entries (bounded memory)


# ----------------------------------------------------------------------------- address cache

def _slot_of(tab_g, tab_a, tab_v, slot_g, slot_a, nslots, g, a):
    """(slot, nslots): the slot of key (g, a), appended as slot ``nslots`` when new."""
    mask = np.uint64(len(tab_v) - 1)
    h = ((a * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(g) * np.uint64(0xC2B2AE3D27D4EB4F))) >> np.uint64(17)
    h &= mask
    while True:
        v = tab_v[h]
        if v < 0:
            tab_g[h] = g
            tab_a[h] = a
            tab_v[h] = nslots
            slot_g[nslots] = g
            slot_a[nslots] = a
            return nslots, nslots + 1
        if tab_a[h] == a and tab_g[h] == g:
            return v, nslots
        h = (h + np.uint64(1)) & mask


def _sample_slots_py(tab_g, tab_a, tab_v, slot_g, slot_a, nslots, ip, addr, mode, gu, gk, kstart,
                     out_ip, out_to, miss):
    """Slots of each sample's ip (mode >= 1) and addr (mode 2); slot 0 (nothing) for mode 0 or address 0.

    A key is (group, address), the group being ``gk`` for kernel addresses (>= ``kstart``) and
    ``gu`` for user ones.  New keys get the next slots in order, ip before addr of a sample, and
    their positions (2 * sample + 0 for ip, + 1 for addr) go to ``miss``; returns (nslots, misses).
    """
    nmiss = 0
    for i in range(len(ip)):
        out_ip[i] = 0
        out_to[i] = 0
        m = mode[i]
        if m == 0:
            continue
        a = ip[i]
        if a != 0:
            before = nslots
            out_ip[i], nslots = _slot_of(tab_g, tab_a, tab_v, slot_g, slot_a, nslots,
                                         gk[i] if a >= kstart[i] else gu[i], a)
            if nslots != before:
                miss[nmiss] = 2 * i
                nmiss += 1
        a = addr[i]
        if m == 2 and a != 0:
            before = nslots
            out_to[i], nslots = _slot_of(tab_g, tab_a, tab_v, slot_g, slot_a, nslots,
                                         gk[i] if a >= kstart[i] else gu[i], a)
            if nslots != before:
                miss[nmiss] = 2 * i + 1
                nmiss += 1
    return nslots, nmiss


def _rehash_py(tab_g, tab_a, tab_v, slot_g, slot_a, n):
    for s in range(1, n):
        _slot_of(tab_g, tab_a, tab_v, slot_g, slot_a, s, slot_g[s], slot_a[s])


def _slot_values_py(out_ip, out_to, with_to, cdso, csym, coff, cstart, dso, sym, off, to_dso, to_sym, to_off,
                    to_start, lo):
    """The ids of each sample's slots from ``lo`` on: dso/sym/off of its ip slot and, ``with_to``, the
    to_* of its addr slot (one pass instead of a gather per column)."""
    for i in range(len(out_ip)):
        s = out_ip[i]
        dso[lo + i] = cdso[s]
        sym[lo + i] = csym[s]
        off[lo + i] = coff[s]
        if with_to:
            s = out_to[i]
            to_dso[lo + i] = cdso[s]
            to_sym[lo + i] = csym[s]
            to_off[lo + i] = coff[s]
            to_start[lo + i] = cstart[s]


if numba is not None:
    _slot_values = numba.njit(cache=True, nogil=True)(_slot_values_py)
    _slot_of = numba.njit(cache=True, nogil=True)(_slot_of)
    _sample_slots = numba.njit(cache=True, nogil=True)(_sample_slots_py)
    _rehash = numba.njit(cache=True, nogil=True)(_rehash_py)
else:  # pragma: no cover - the same loops, interpreted (slow; numba is in the 'fast' extra)
    def _sample_slots(*args):
        with np.errstate(over="ignore"):
            return _sample_slots_py(*args)

    def _rehash(*args):
        with np.errstate(over="ignore"):
            return _rehash_py(*args)


class AddressCache:
    """(group, address) -> slot of a resolved (dso, symbol, offset, start); slot 0 is "nothing".

    A group is (machine index, the process's pid or None for the kernel, map epoch): within
    one, an address always resolves alike.  Beyond ``_MAX_SLOTS`` entries the cache starts
    over (bounded memory; later lookups resolve again and find the same ids).
    """

    def __init__(self) -> None:
        self._groups: dict[tuple, int] = {}
        self.last_find = DsoLastFind()
        self._reset(1 << 12)

    def _reset(self, cap: int) -> None:
        self.nslots = 1
        self.tab_g = np.zeros(cap, np.int64)
        self.tab_a = np.zeros(cap, np.uint64)
        self.tab_v = np.full(cap, -1, np.int64)
        half = cap // 2
        self.slot_g = np.zeros(half, np.int64)
        self.slot_a = np.zeros(half, np.uint64)
        self.dso = np.zeros(half, np.int64)
        self.sym = np.zeros(half, np.int64)
        self.off = np.zeros(half, np.int64)
        self.start = np.zeros(half, np.uint64)
        self.xoff = np.zeros(half, np.uint64)  # the address in its DSO (map_ip), where xok
        self.xok = np.zeros(half, bool)

    def group(self, key: tuple) -> int:
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = len(self._groups)
        return g

    def groups(self, machine: int, space: int | None, epochs: np.ndarray) -> np.ndarray | int:
        """Group ids of (machine, address space, epoch) for each epoch (an int when all are equal)."""
        if not len(epochs):
            return 0
        lo, hi = int(epochs.min()), int(epochs.max())
        if lo == hi:
            return self.group((machine, space, lo))
        u, inv = np.unique(epochs, return_inverse=True)
        ids = np.array([self.group((machine, space, int(e))) for e in u.tolist()], np.int64)
        return ids[inv.reshape(-1)]

    def _make_room(self, need: int) -> None:
        cap = len(self.tab_v)
        if (self.nslots + need) * 2 <= cap:
            return
        if self.nslots + need > _MAX_SLOTS:
            self._reset(1 << max(12, (2 * need + 2).bit_length()))
            return
        while (self.nslots + need) * 2 > cap:
            cap *= 2
        n, half = self.nslots, cap // 2
        for name in ("slot_g", "slot_a", "dso", "sym", "off", "start", "xoff", "xok"):
            old = getattr(self, name)
            new = np.zeros(half, old.dtype)
            new[:n] = old[:n]
            setattr(self, name, new)
        self.tab_g = np.zeros(cap, np.int64)
        self.tab_a = np.zeros(cap, np.uint64)
        self.tab_v = np.full(cap, -1, np.int64)
        _rehash(self.tab_g, self.tab_a, self.tab_v, self.slot_g, self.slot_a, n)

    def lookup(self, ip: np.ndarray, addr: np.ndarray, mode: np.ndarray, gu: np.ndarray, gk: np.ndarray,
               kstart: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ip slots, addr slots, positions of the keys seen for the first time); see _sample_slots_py."""
        n = len(ip)
        self._make_room(2 * n)
        out_ip = np.empty(n, np.int64)
        out_to = np.empty(n, np.int64)
        miss = np.empty(2 * n, np.int64)
        self.nslots, nmiss = _sample_slots(self.tab_g, self.tab_a, self.tab_v, self.slot_g, self.slot_a,
                                           self.nslots, ip, addr, mode, gu, gk, kstart, out_ip, out_to, miss)
        return out_ip, out_to, miss[:nmiss]


def _next_in(seq: np.ndarray, dso: int, p: int) -> int:
    """The first position >= ``p`` of ``seq`` holding ``dso`` (-1 if none), looking at growing windows."""
    step = 64
    n = len(seq)
    while p < n:
        w = np.flatnonzero(seq[p:p + step] == dso)
        if len(w):
            return p + int(w[0])
        p += step
        step *= 4
    return -1


class DsoLastFind:
    """perf's per-DSO last-lookup cache (dso__find_symbol's ``last_find_result``) over whole batches.

    The address cache answers each lookup as the DSO's symbol tree does.  perf's
    answer differs only after db-export inserted an "unknown" at S into a DSO
    whose last lookup X is above it: dso__insert_symbol makes the "unknown" the
    cached answer for X, so the lookups of X in that DSO that come next, before
    any lookup of another address in it, get the "unknown" at S with offset
    X - S.  In perf's order per sample (lookup ip, lookup addr, ids of ip, ids of
    addr) that starts at a branch whose ip gets a new "unknown" and whose addr is
    in the same DSO above it, with a symbol (an addr without one gets its own
    "unknown", which the cache then holds; :meth:`MachineState.find` is the
    one-lookup-at-a-time form).  Such starts are as rare as new "unknown"
    symbols; each is followed through the lookups after it, and one that reaches
    the end of a batch is ``pending`` for the next.
    """

    def __init__(self) -> None:
        self.pending: dict[int, tuple[int, int, int]] = {}  # dso id -> (X, "unknown" id, S)

    def apply(self, cache: "AddressCache", out_ip: np.ndarray, out_to: np.ndarray, new_ip: list[int],
              new_to: "set[int] | tuple", fix: Callable[[int, int, int], None]) -> None:
        """Calls ``fix(p, symbol id, offset)`` for each lookup ``p`` (2 * sample, + 1 for addr, from the
        range's start) of a range whose slots are ``out_ip``/``out_to`` that perf answers from the cache."""
        dso, xoff, xok = cache.dso, cache.xoff, cache.xok
        starts = []
        for j in new_ip:
            si, sa = int(out_ip[j]), int(out_to[j])
            if not sa or j in new_to:
                continue
            d = int(dso[si])
            if int(dso[sa]) != d or not (xok[si] and xok[sa]):
                continue
            x, start = int(xoff[sa]), int(xoff[si])
            if x > start:
                starts.append((2 * j + 2, d, x, int(cache.sym[si]), start))
        if not starts and not self.pending:
            return
        slots = np.empty(2 * len(out_ip), np.int64)
        slots[0::2] = out_ip
        slots[1::2] = out_to
        seq = dso[slots]
        states = [(0, d, *v) for d, v in self.pending.items()] + starts
        self.pending = {}
        for p, d, x, sid, start in states:  # each ends at the DSO's next lookup of another address
            while True:
                p = _next_in(seq, d, p)
                if p < 0:
                    self.pending[d] = (x, sid, start)
                    break
                slot = slots[p]
                if not xok[slot] or int(xoff[slot]) != x:
                    break
                fix(p, sid, x - start)
                p += 1


# ----------------------------------------------------------------------------- the loop

def _first_seen_small(values: np.ndarray) -> list[int]:
    """Distinct small non-negative ints (sample kinds) in order of first appearance."""
    present = np.flatnonzero(np.bincount(values)).tolist()
    if len(present) == 1:
        return present
    return [k for _, k in sorted((int(np.argmax(values == k)), k) for k in present)]


def _same_epoch(changes: np.ndarray, tmin: int, tmax: int) -> int | None:
    """The map epoch of every time in [tmin, tmax] when it is one, else None."""
    if not len(changes):
        return 0
    e = int(np.searchsorted(changes, tmin, side="right"))
    return e if e == int(np.searchsorted(changes, tmax, side="right")) else None


def _key_ids(*cols: np.ndarray) -> np.ndarray:
    """Per row, the number of its distinct tuple of ``cols`` (0, 1, ... in tuple order): what
    ``np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)`` gives, without its sort of
    the rows as byte strings."""
    order = np.lexsort(cols[::-1])
    new = np.zeros(len(order), bool)
    for c in cols:
        sc = np.asarray(c)[order]
        new[1:] |= sc[1:] != sc[:-1]
    ids = np.empty(len(order), np.int64)
    ids[order] = np.cumsum(new)
    return ids


class _VmRuns:
    """The runs of a VM trace's batch, for walking the runs between two records a thread at a time.

    A VM trace's runs alternate between a few threads (host and guest, at every VM exit and entry:
    tens of thousands of runs a million samples) and :class:`ThreadMemo` answers each ask after the
    first from its memo.  :meth:`walk` asks once per thread instead, in the order the runs first ask:
    a run that repeats a thread is a memo hit (no call, nothing changed, the same answer) as long as
    every thread asked so far still is, which is checked after each ask; where that fails (an ask
    created a thread or a row, or a thread's pid is unknown) the walk stops after that run and the
    runs go on one by one.  The asks, their order and the answers are those of the run-by-run walk.
    """

    def __init__(self, memo: ThreadMemo, starts: np.ndarray, mi: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                 err: np.ndarray, cuts: np.ndarray) -> None:
        self.memo = memo
        n = len(starts)
        stop = err.copy()  # a segment ends before an error run or a record's run
        at = np.searchsorted(starts, cuts)
        stop[at[at < n]] = True
        idx = np.append(np.flatnonzero(stop), n)
        self.next_stop = idx[np.searchsorted(idx, np.arange(n), side="right")].tolist()
        self.key = _key_ids(mi, pid, tid)
        self.nkeys = int(self.key.max()) + 1 if n else 0
        self.mi, self.pid, self.tid = mi.tolist(), pid.tolist(), tid.tolist()

    def walk(self, machines: list[Any], k0: int, run_th: np.ndarray, run_comm: np.ndarray) -> int:
        """Fill ``run_th``/``run_comm`` from run ``k0`` (no error) up to the next record or error run, or
        the run after which a repeat would not be a memo hit; returns the run after the last one filled."""
        memo = self.memo
        k1 = self.next_stop[k0]
        seg = self.key[k0:k1]
        # each thread's first run, in order (a segment is a few dozen runs: a dict, not np.unique's sort)
        first: dict[int, int] = {}
        for j, key in enumerate(seg.tolist()):
            first.setdefault(key, j)
        firsts = list(first.values())
        th = np.zeros(self.nkeys, np.int64)
        comm = np.zeros(self.nkeys, np.int64)
        asked: list[int] = []
        done = k1
        for j in firsts:
            k = k0 + j
            th[seg[j]], comm[seg[j]] = memo.threads(machines[self.mi[k]], self.mi[k], self.pid[k], self.tid[k])
            asked.append(k)
            if not all(memo.hit(machines[self.mi[i]], self.mi[i], self.pid[i], self.tid[i]) for i in asked):
                done = k + 1
                break
        run_th[k0:done] = th[seg[:done - k0]]
        run_comm[k0:done] = comm[seg[:done - k0]]
        return done


class _Batch:
    """One batch of samples on its way to rows."""

    def __init__(self, ex: DbExporter, cache: AddressCache, cols: SampleColumns) -> None:
        self.ex = ex
        self.cache = cache
        self.cols = cols
        n = self.n = len(cols)
        self.err = cols.kind == EV_ERROR
        self.mi = ex.machine_index(cols)
        self.lt = ex.lookup_times(cols)  # when its addresses are resolved
        self.thread_id = np.zeros(n, np.int64)
        self.comm_id = np.zeros(n, np.int64)
        self.sid = np.zeros(n, np.int64)
        self.evsel = np.zeros(n, np.int64)
        self.dso = np.zeros(n, np.int64)
        self.sym = np.zeros(n, np.int64)
        self.off = np.zeros(n, np.int64)
        self.to_dso = np.zeros(n, np.int64)
        self.to_sym = np.zeros(n, np.int64)
        self.to_off = np.zeros(n, np.int64)
        self.to_start = np.zeros(n, np.uint64)

    def run_starts(self, cuts: np.ndarray) -> np.ndarray:
        cols, n, err = self.cols, self.n, self.err
        brk = np.empty(n, bool)
        brk[0] = True
        pid, tid = cols.pid, cols.tid
        np.not_equal(pid[1:], pid[:-1], out=brk[1:])
        brk[1:] |= tid[1:] != tid[:-1]
        if self.mi is not None:
            brk[1:] |= self.mi[1:] != self.mi[:-1]
        brk |= err
        brk[1:] |= err[:-1]
        if len(cuts):
            brk[cuts] = True
        return np.flatnonzero(brk)

    def threads_and_events(self, ev_recs: list[Any], cuts: np.ndarray) -> None:
        """Walk the runs in order: sideband records where due, errors, one thread lookup per run
        (in a VM trace, one per thread between records: :class:`_VmRuns`)."""
        ex, cols = self.ex, self.cols
        starts = self.run_starts(cuts)
        starts_l = starts.tolist()
        nruns = len(starts_l)
        ends = starts_l[1:] + [self.n]
        pid_l = cols.pid[starts].tolist()
        tid_l = cols.tid[starts].tolist()
        err_l = self.err[starts].tolist()
        mi_l = self.mi[starts].tolist() if self.mi is not None else [0] * nruns
        cut_l = cuts.tolist()
        nev = len(cut_l)
        ev_i = 0
        sym_from = 0
        machines = ex.machines
        run_th, run_comm, run_sid = (np.zeros(nruns, np.int64) for _ in range(3))
        # The runs alternate between a few threads: a VM's (every VM exit and entry), and any recording
        # of several CPUs (the merge takes each CPU's samples in turn, every few dozen), so each thread is
        # looked up once while nothing its answer depends on changes
        memo = ThreadMemo(ex.m)
        vm = None
        if self.mi is not None:
            vm = _VmRuns(memo, starts, self.mi[starts], cols.pid[starts], cols.tid[starts], self.err[starts], cuts)
        if vm is None:  # (one machine: the host's)
            ev_i, sym_from = self._host_runs(memo, ev_recs, cut_l, starts_l, ends, pid_l, tid_l, err_l, run_th,
                                             run_comm, run_sid)
            k = nruns
        else:
            k = 0
        while k < nruns:  # (a VM trace's runs: _host_runs walks the others')
            assert vm is not None
            a = starts_l[k]
            if ev_i < nev and cut_l[ev_i] == a:
                ev_i, sym_from = self._records_at(a, ev_recs, cut_l, ev_i, sym_from, memo, False)
            p, t, m = pid_l[k], tid_l[k], mi_l[k]
            st = machines[m]
            if err_l[k]:
                th = st.pt.find(p, t)
                ex.error_row(st, a, cols, th.db_id if th is not None else 0)
                k += 1
                continue
            if vm.next_stop[k] - k > 1:
                done = vm.walk(machines, k, run_th, run_comm)
                run_sid[k:done] = ex.n_samples + 1 - a
                ex.n_samples += ends[done - 1] - a
                k = done
                continue
            th_id, c_id = memo.threads(st, m, p, t)
            run_th[k], run_comm[k], run_sid[k] = th_id, c_id, ex.n_samples + 1 - a
            ex.n_samples += ends[k] - a
            k += 1
        while ev_i < nev:  # pragma: no cover - every cut is below n
            ex.event(ev_recs[ev_i])
            ev_i += 1
        # each run's values over its rows (error rows keep 0s); sample ids count on from each run's first
        lens = np.diff(np.append(starts, self.n))
        self.thread_id[:] = np.repeat(run_th, lens)
        self.comm_id[:] = np.repeat(run_comm, lens)
        self.sid[:] = np.where(self.err, 0, np.repeat(run_sid, lens) + np.arange(self.n))
        self.resolve_range(sym_from, self.n)

    def _host_runs(self, memo: ThreadMemo, ev_recs: list[Any], cut_l: list[int], starts_l: list[int],
                   ends: list[int], pid_l: list[int], tid_l: list[int], err_l: list[bool], run_th: np.ndarray,
                   run_comm: np.ndarray, run_sid: np.ndarray) -> tuple[int, int]:
        """:meth:`threads_and_events`' walk of a recording without VMs: each run's thread from the memo
        (its generation read once between changes, not at every run; a 4-CPU recording's merge gives
        a run every ~65 samples), the values kept in lists and stored at the end.  Returns the records
        handed on (all of them) and the first sample whose symbols are not resolved yet."""
        ex, cols = self.ex, self.cols
        st = ex.machines[0]
        memo_d = memo.memo
        nruns, nev = len(starts_l), len(cut_l)
        th_l, comm_l, sid_l = [0] * nruns, [0] * nruns, [0] * nruns
        n_samples = ex.n_samples
        gen = None  # the memo's generation while nothing changes (None: read it again)
        ev_i = 0
        sym_from = 0
        for k in range(nruns):
            a = starts_l[k]
            if ev_i < nev and cut_l[ev_i] == a:
                ex.n_samples = n_samples
                ev_i, sym_from = self._records_at(a, ev_recs, cut_l, ev_i, sym_from, memo, True)
                n_samples = ex.n_samples
                gen = None
            p, t = pid_l[k], tid_l[k]
            if err_l[k]:
                ex.n_samples = n_samples
                th = st.pt.find(p, t)
                ex.error_row(st, a, cols, th.db_id if th is not None else 0)
                gen = None  # (a find can learn a thread's pid)
                continue
            hit = memo_d.get((0, p, t))
            if gen is None:
                gen = memo._generation(st)
            if hit is not None and hit[0] == gen:
                th_l[k], comm_l[k] = hit[1], hit[2]
            else:
                th_l[k], comm_l[k] = memo.threads(st, 0, p, t)
                gen = None
            sid_l[k] = n_samples + 1 - a
            n_samples += ends[k] - a
        ex.n_samples = n_samples
        run_th[:] = th_l
        run_comm[:] = comm_l
        run_sid[:] = sid_l
        return ev_i, sym_from

    def _records_at(self, a: int, ev_recs: list[Any], cut_l: list[int], ev_i: int, sym_from: int,
                    memo: ThreadMemo, host: bool) -> tuple[int, int]:
        """Hand on the sideband records due before sample ``a`` (from record ``ev_i``; the symbol ids of
        the samples before a SAMPLE record's resolved first).  The memo is forgotten at each, but at a
        host's context switch (``host``: a recording without VMs), which only creates threads, exports
        their rows or learns a thread's pid: what the memo's generation sees.  Returns the next record
        and the first sample whose symbols are not resolved."""
        ex, nev = self.ex, len(cut_l)
        while ev_i < nev and cut_l[ev_i] == a:
            rec = ev_recs[ev_i]
            if rec.type == _SAMPLE and sym_from < a:
                self.resolve_range(sym_from, a)
                sym_from = a
            ex.event(rec)
            ev_i += 1
            if not host or rec.type not in _SWITCHES:
                memo.clear()
        return ev_i, sym_from

    def resolve_range(self, lo: int, hi: int) -> None:
        """Event and symbol ids of the samples in [lo, hi), first references first."""
        ex, cols = self.ex, self.cols
        if hi <= lo:
            return
        kind = cols.kind[lo:hi]
        err = self.err[lo:hi]
        kinds = [k for k in _first_seen_small(kind) if k != EV_ERROR]
        if not kinds:
            return
        if len(kinds) == 1 and not err.any():
            self.evsel[lo:hi] = ex.evsel(kinds[0])
        else:
            table = np.zeros(int(kind.max()) + 1, np.int64)
            for k in kinds:
                table[k] = ex.evsel(k)
            self.evsel[lo:hi] = table[kind]
        is_br = kind == EV_BRANCH
        mode = (~err).view(np.int8) + is_br.view(np.int8)  # 0: error, 1: ip, 2: ip and addr
        gu, gk, ks = self._groups(lo, hi)
        cache = self.cache
        out_ip, out_to, miss = cache.lookup(cols.ip[lo:hi], cols.addr[lo:hi], mode, gu, gk, ks)
        first_only: Any = ()
        new_ip: list[int] = []
        new_to: Any = ()
        if len(miss):
            first_only, new_ip, new_to = self._resolve_misses(cache, lo, out_ip, out_to, miss)
        with_to = bool(is_br.any())
        if numba is not None:
            _slot_values(out_ip, out_to, with_to, cache.dso, cache.sym, cache.off, cache.start, self.dso, self.sym,
                         self.off, self.to_dso, self.to_sym, self.to_off, self.to_start, lo)
        else:  # pragma: no cover - the same values, a gather per column
            self.dso[lo:hi] = cache.dso[out_ip]
            self.sym[lo:hi] = cache.sym[out_ip]
            self.off[lo:hi] = cache.off[out_ip]
            if with_to:
                self.to_dso[lo:hi] = cache.dso[out_to]
                self.to_sym[lo:hi] = cache.sym[out_to]
                self.to_off[lo:hi] = cache.off[out_to]
                self.to_start[lo:hi] = cache.start[out_to]
        for i, to, r in first_only:  # perf fixed the kernel map up after resolving this address once
            if to:
                self.to_dso[i], self.to_sym[i], self.to_off[i], self.to_start[i] = r
            else:
                self.dso[i], self.sym[i], self.off[i] = r[:3]
        cache.last_find.apply(cache, out_ip, out_to, new_ip, new_to,
                              lambda p, sid, off: self._cached_answer(lo, p, sid, off))

    def _cached_answer(self, lo: int, p: int, sid: int, off: int) -> None:
        """Lookup ``p`` (2 * sample + 1 for addr) of the range from ``lo`` got perf's cached "unknown"."""
        i = lo + (p >> 1)
        if p & 1:
            self.to_sym[i], self.to_off[i] = sid, off
            self.to_start[i] = int(self.cols.addr[i]) - off
        else:
            self.sym[i], self.off[i] = sid, off

    def _groups(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per sample in [lo, hi): cache group of a user address, of a kernel address, and kernel_start."""
        ex, cols = self.ex, self.cols
        cache = self.cache
        n = hi - lo
        t = self.lt[lo:hi]
        pid = cols.pid[lo:hi]
        mi = self.mi[lo:hi] if self.mi is not None else None
        gu = np.empty(n, np.int64)
        gk = np.empty(n, np.int64)
        ks = np.empty(n, np.uint64)
        machines = [0] if mi is None else np.flatnonzero(np.bincount(mi)).tolist()
        for m in machines:
            st = ex.machines[m]
            sel: Any = slice(None) if len(machines) == 1 else np.flatnonzero(mi == m)
            tm = t[sel]
            pm = pid[sel]
            ks[sel] = st.kernel_start
            tmin, tmax = int(tm.min()), int(tm.max())
            e = _same_epoch(st._change_times(None), tmin, tmax)
            gk[sel] = cache.group((m, None, e)) if e is not None else cache.groups(m, None, st.kernel_epochs(tm))
            pmin, pmax = int(pm.min()), int(pm.max())
            if pmin == pmax:
                e = _same_epoch(st._change_times(pmin), tmin, tmax)
                gu[sel] = (cache.group((m, pmin, e)) if e is not None
                           else cache.groups(m, pmin, st.user_epochs(pmin, tm)))
                continue
            g = np.empty(len(pm), np.int64)
            for q in few_distinct(pm).tolist():  # a few processes a batch (a VM's guest and host ones)
                w = np.flatnonzero(pm == q)
                g[w] = cache.groups(m, q, st.user_epochs(q, tm[w]))
            gu[sel] = g
        return gu, gk, ks

    def _resolve_misses(self, cache: AddressCache, lo: int, out_ip: np.ndarray, out_to: np.ndarray,
                        miss: np.ndarray) -> tuple[list[tuple[int, int, tuple]], list[int], set[int]]:
        """Resolve the new keys in order (perf's first references) into their cache slots.

        Returns the kernel addresses resolved once only (see resolve_range) and the samples (from
        ``lo``) whose ip, and whose addr, got a new "unknown" symbol (for :class:`DsoLastFind`).
        """
        ex, cols = self.ex, self.cols
        first_only = []
        new_ip: list[int] = []
        new_to: set[int] = set()
        smp = (miss >> 1) + lo
        tos = (miss & 1).tolist()
        pids = cols.pid[smp].tolist()
        times = self.lt[smp].tolist()
        ips = cols.ip[smp].tolist()
        addrs = cols.addr[smp].tolist()
        mis = self.mi[smp].tolist() if self.mi is not None else None
        slot_ip = out_ip[miss >> 1].tolist()
        slot_to = out_to[miss >> 1].tolist()
        for k, i in enumerate(smp.tolist()):
            st = ex.machines[mis[k] if mis is not None else 0]
            to = tos[k]
            a = addrs[k] if to else ips[k]
            slot = slot_to[k] if to else slot_ip[k]
            before = st.kmap_range
            made = st.new_unknowns
            r = st.resolve(pids[k], a, times[k])
            after = st.kmap_range
            if before is None and after is not None and not after[0] <= a < after[1]:
                first_only.append((i, to, r))  # later lookups of this address find nothing
                r = (0, 0, 0, 0)
            cache.dso[slot], cache.sym[slot], cache.off[slot], cache.start[slot] = r
            start = st.sym_starts.get(r[1]) if r[1] else None
            cache.xok[slot] = start is not None
            if start is not None:
                cache.xoff[slot] = (start + r[2]) & 0xFFFF_FFFF_FFFF_FFFF  # perf's u64 map_ip wraps
            if st.new_unknowns != made:
                if to:
                    new_to.add(i - lo)
                else:
                    new_ip.append(i - lo)
        return first_only, new_ip, new_to

    # ------------------------------------------------------------------ rows

    def sample_columns(self) -> dict[str, np.ndarray]:
        cols = self.cols
        ok = ~self.err
        allok = bool(ok.all())

        def pick(a: np.ndarray) -> np.ndarray:
            return a if allok else a[ok]

        flags = pick(cols.flags).astype(np.int64, copy=False)
        n = len(flags)
        machine = self.ex.machine_ids(pick(self.mi) if self.mi is not None else None, n)
        return {"id": pick(self.sid), "evsel_id": pick(self.evsel), "machine_id": machine,
                "thread_id": pick(self.thread_id), "comm_id": pick(self.comm_id), "dso_id": pick(self.dso),
                "symbol_id": pick(self.sym), "sym_offset": pick(self.off),
                "ip": pick(cols.ip).astype(np.uint64, copy=False), "time": pick(cols.time).astype(np.int64, copy=False),
                "cpu": pick(cols.cpu).astype(np.int64, copy=False), "to_dso_id": pick(self.to_dso),
                "to_symbol_id": pick(self.to_sym), "to_sym_offset": pick(self.to_off),
                "to_ip": pick(cols.addr).astype(np.uint64, copy=False), "branch_type": flags & PERF_BRANCH_MASK,
                "in_tx": ((flags & _IN_TX) != 0).astype(np.int64), "call_path_id": np.zeros(n, np.int64),
                "insn_count": pick(cols.insn_cnt).astype(np.int64, copy=False),
                "cyc_count": pick(cols.cyc_cnt).astype(np.int64, copy=False), "flags": flags,
                **self.vm_columns(pick)}

    def vm_columns(self, pick: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
        """samples.machine_pid / vcpu when the batch went through the VM split (else their defaults, -1)."""
        cols = self.cols
        if self.mi is None or cols.machine_pid is None or cols.vcpu is None:
            return {}
        return {"machine_pid": pick(np.asarray(cols.machine_pid, np.int64)),
                "vcpu": pick(np.asarray(cols.vcpu, np.int64))}

    def tree_columns(self) -> "TreeColumns":
        """The call tree's input: the branches' columns, gathered when first read (by the tree's thread)."""
        is_br = self.cols.kind == EV_BRANCH
        rows = int(np.count_nonzero(is_br))
        return TreeColumns(lambda: self._tree_columns(is_br, rows), rows, lambda: self._tree_raw(is_br, rows))

    def _tree_raw(self, is_br: np.ndarray, rows: int) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        """The call tree's input as the batch has it: every row's columns, and the rows of the branches
        (None: every row is one)."""
        cols = self.cols
        full = {"time": cols.time, "ip": cols.ip, "addr": cols.addr, "flags": cols.flags, "ref": self.sid,
                "thread_id": self.thread_id, "cpu": cols.cpu, "pid": cols.pid, "tid": cols.tid,
                "comm_id": self.comm_id, "insn_len": cols.insn_len, "insn_cnt": cols.insn_cnt,
                "cyc_cnt": cols.cyc_cnt, "from_sym": self.sym, "to_sym": self.to_sym, "to_sym_start": self.to_start,
                "trace_nr": cols.trace_nr}
        return full, None if rows == len(is_br) else np.flatnonzero(is_br)

    def _tree_columns(self, is_br: np.ndarray, rows: int) -> dict[str, np.ndarray]:
        cols = self.cols
        br: Any = slice(None) if rows == len(is_br) else np.flatnonzero(is_br)
        i64 = np.int64
        return {"time": cols.time[br].astype(i64, copy=False), "ip": cols.ip[br].astype(np.uint64, copy=False),
                "addr": cols.addr[br].astype(np.uint64, copy=False), "flags": cols.flags[br].astype(i64, copy=False),
                "ref": self.sid[br], "thread_id": self.thread_id[br], "cpu": cols.cpu[br].astype(i64, copy=False),
                "pid": cols.pid[br].astype(i64, copy=False), "tid": cols.tid[br].astype(i64, copy=False),
                "comm_id": self.comm_id[br], "insn_len": cols.insn_len[br].astype(i64, copy=False),
                "insn_cnt": cols.insn_cnt[br].astype(i64, copy=False),
                "cyc_cnt": cols.cyc_cnt[br].astype(i64, copy=False), "from_sym": self.sym[br],
                "to_sym": self.to_sym[br], "to_sym_start": self.to_start[br],
                "trace_nr": cols.trace_nr[br].astype(i64, copy=False)}

    def chain_columns(self) -> dict[str, np.ndarray]:
        """The synthesized samples perf gives an --itrace=g call chain (all but branches, transactions and
        errors: intel_pt_prep_sample), for ``samples.call_path_id`` (dbexport/callchains.py)."""
        cols = self.cols
        w = np.flatnonzero((cols.kind != EV_BRANCH) & (cols.kind != EV_ERROR) & (cols.kind != EV_TRANSACTION))
        return {"sid": self.sid[w], "thread_id": self.thread_id[w], "cpu": cols.cpu[w], "pid": cols.pid[w],
                "tid": cols.tid[w], "ip": cols.ip[w], "time": cols.time[w], "trace_nr": cols.trace_nr[w],
                "mi": self.mi[w] if self.mi is not None else np.zeros(len(w), np.int64)}

    def payload_rows(self) -> dict[str, list[tuple]]:
        """Rows of the payload tables (psb, ptwrite, cbr, mwait, pwre, pwrx, exstop, evt, iflag)."""
        cols = self.cols
        kind = cols.kind
        out: dict[str, list[tuple]] = {}
        present = set(np.flatnonzero(np.bincount(kind)).tolist()) if len(kind) else set()
        for k in (EV_PSB, EV_PTWRITE, EV_CBR, EV_MWAIT, EV_PWRE, EV_PWRX, EV_EXSTOP, EV_EVT, EV_IFLAG):
            if k not in present:
                continue
            w = np.flatnonzero(kind == k)
            sid = self.sid[w].tolist()
            pl = cols.payload[w].astype(np.uint64)
            if k == EV_PSB:
                out["psb"] = list(zip(sid, pl.tolist()))
            elif k == EV_PTWRITE:
                out["ptwrite"] = list(zip(sid, pl.tolist(), (cols.code[w] != 0).tolist()))
            elif k == EV_CBR:
                out["cbr"] = [self.ex.cbr_row(s, p) for s, p in zip(sid, pl.tolist())]
            elif k == EV_MWAIT:
                out["mwait"] = list(zip(sid, (pl & np.uint64(0xFF)).tolist(), ((pl >> np.uint64(32)) & np.uint64(3)).tolist()))
            elif k == EV_PWRE:
                out["pwre"] = list(zip(sid, ((pl >> np.uint64(12)) & np.uint64(0xF)).tolist(),
                                       ((pl >> np.uint64(8)) & np.uint64(0xF)).tolist(),
                                       ((pl >> np.uint64(7)) & np.uint64(1)).tolist()))
            elif k == EV_PWRX:
                out["pwrx"] = list(zip(sid, (pl & np.uint64(0xF)).tolist(), ((pl >> np.uint64(4)) & np.uint64(0xF)).tolist(),
                                       ((pl >> np.uint64(8)) & np.uint64(0xF)).tolist()))
            elif k == EV_EXSTOP:
                out["exstop"] = list(zip(sid, (pl != 0).tolist()))
            elif k == EV_EVT:
                out["evt"] = [evt_row(s, p) for s, p in zip(sid, pl.tolist())]
                evd_row, evd_type, evd_payload = cols.evd_row, cols.evd_type, cols.evd_payload
                if evd_row is not None and len(evd_row):  # their EVD packets, in order
                    assert evd_type is not None and evd_payload is not None  # set with evd_row
                    n0 = self.ex.n_evd
                    out["evd"] = [(n0 + j + 1, s, t, p) for j, (s, t, p) in enumerate(zip(
                        self.sid[evd_row].tolist(), evd_type.tolist(), evd_payload.tolist()))]
                    self.ex.n_evd += len(out["evd"])
            elif k == EV_IFLAG:
                out["iflag"] = [iflag_row(s, p) for s, p in zip(sid, pl.tolist())]
        return out


class TreeColumns(Mapping):
    """A batch's call-tree input (``rows`` branches), its columns gathered when first read: in the call
    tree's thread, not the exporting one (17 columns gathered by the branches' index: 0.4 s of the
    exporting thread at 10 M branches, where each batch has a PSB or two among them)."""

    def __init__(self, build: Callable[[], dict[str, np.ndarray]], rows: int,
                 raw: Callable[[], tuple[dict[str, np.ndarray], np.ndarray | None]] | None = None) -> None:
        self._build: Callable[[], dict[str, np.ndarray]] | None = build
        self._cols: dict[str, np.ndarray] = {}
        self.rows = rows
        if raw is not None:
            self.raw = raw  # (every row's columns, the branches' rows or None): the compiled tree reads them so

    def _columns(self) -> dict[str, np.ndarray]:
        if self._build is not None:
            self._cols, self._build = self._build(), None
        return self._cols

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns())

    def __len__(self) -> int:
        return len(self._columns())


def export_samples(ex: DbExporter, batches: Iterable[SampleColumns],
                   progress: Callable[[int, int], None] | None, total: int) -> None:
    """Export ``batches`` (perf's order) through ``ex``; sideband records from ``ex.feed``."""
    feed = ex.feed
    assert feed is not None  # DbExporter.run sets it before it runs the loop
    cache = AddressCache()  # (group, address) -> DSO and symbol ids, for the whole run
    done = 0
    for cols in batches:
        n = len(cols)
        if not n:
            continue
        cm = np.maximum.accumulate(cols.tsc)
        ev_tscs, ev_recs = feed.take_upto(int(cm[-1]))
        if ev_recs:
            cuts = np.maximum.accumulate(np.searchsorted(cm, np.asarray(ev_tscs, np.uint64), side="left"))
        else:
            cuts = np.zeros(0, np.int64)
        b = _Batch(ex, cache, cols)
        b.threads_and_events(ev_recs, cuts)
        ex.write_batch(b.sample_columns(), b.tree_columns() if ex.calltree is not None else None,
                       b.payload_rows(), b.chain_columns() if ex.callchains else None)
        done += n
        if progress:
            progress(done, total)
    for rec in feed.rest():
        ex.event(rec)
