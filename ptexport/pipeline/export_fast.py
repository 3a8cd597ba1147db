"""The export loop over whole sample batches (numpy), in perf's order and with perf's ids.

:func:`run_fast` gives the same database as the per-sample loop of
:mod:`ptexport.pipeline.export_ref` (its oracle, compared table by table in
``tests/export_fast/``), with Python work per *change* instead of per sample:

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
* samples, call-tree input and payload rows are built as columns by masks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from ptexport.perfdata.constants import RecordType
from ptexport.pipeline.perfsession import (
    EV_BRANCH,
    EV_CBR,
    EV_ERROR,
    EV_EXSTOP,
    EV_MWAIT,
    EV_PSB,
    EV_PTWRITE,
    EV_PWRE,
    EV_PWRX,
    SampleColumns,
)
from ptexport.samples.flags import PERF_BRANCH_MASK, IpFlag

if TYPE_CHECKING:  # pragma: no cover
    from ptexport.pipeline.export import _Exporter

try:
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is in the 'fast' extra
    numba = None
    HAVE_NUMBA = False

_IN_TX = int(IpFlag.IN_TX)
_SAMPLE = int(RecordType.SAMPLE)
_MAX_SLOTS = 1 << 22  # the address cache starts over beyond this many entries (bounded memory)


# ----------------------------------------------------------------------------- address cache

def _lookup_py(tab_g, tab_a, tab_v, slot_g, slot_a, nslots, g, a, out):  # pragma: no cover - numba's twin
    mask = len(tab_v) - 1
    nmiss = 0
    miss = np.empty(len(a), np.int64)
    for i in range(len(a)):
        ai = a[i]
        gi = g[i]
        h = ((ai * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(gi) * np.uint64(0xC2B2AE3D27D4EB4F))) >> np.uint64(17)
        h = int(h) & mask
        while True:
            v = tab_v[h]
            if v < 0:
                tab_g[h] = gi
                tab_a[h] = ai
                tab_v[h] = nslots
                slot_g[nslots] = gi
                slot_a[nslots] = ai
                out[i] = nslots
                miss[nmiss] = i
                nmiss += 1
                nslots += 1
                break
            if tab_a[h] == ai and tab_g[h] == gi:
                out[i] = v
                break
            h = (h + 1) & mask
    return nslots, miss[:nmiss]


if HAVE_NUMBA:
    _lookup = numba.njit(cache=True, nogil=True)(_lookup_py)
else:  # pragma: no cover
    _lookup = None


class AddressCache:
    """(group, address) -> slot of a resolved (dso, symbol, offset, start); new keys in first-seen order."""

    def __init__(self) -> None:
        self._groups: dict[tuple, int] = {}
        self._reset(1 << 12)

    def _reset(self, cap: int) -> None:
        self.nslots = 0
        self._alloc(cap)
        self.dso = np.zeros(cap // 2, np.int64)
        self.sym = np.zeros(cap // 2, np.int64)
        self.off = np.zeros(cap // 2, np.int64)
        self.start = np.zeros(cap // 2, np.uint64)
        self._py: dict[tuple[int, int], int] = {}

    def _alloc(self, cap: int) -> None:
        self.tab_g = np.zeros(cap, np.int64)
        self.tab_a = np.zeros(cap, np.uint64)
        self.tab_v = np.full(cap, -1, np.int64)
        self.slot_g = np.zeros(cap // 2, np.int64)
        self.slot_a = np.zeros(cap // 2, np.uint64)

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
        return ids[inv]

    def _grow(self, need: int) -> None:
        cap = len(self.tab_v)
        if (self.nslots + need) * 2 <= cap:
            return
        if self.nslots + need > _MAX_SLOTS:
            self._reset(1 << max(12, (2 * need - 1).bit_length()))
            return
        while (self.nslots + need) * 2 > cap:
            cap *= 2
        n = self.nslots
        old = (self.slot_g[:n].copy(), self.slot_a[:n].copy())
        self._alloc(cap)
        for name in ("dso", "sym", "off", "start"):
            a = getattr(self, name)
            b = np.zeros(cap // 2, a.dtype)
            b[:n] = a[:n]
            setattr(self, name, b)
        self.nslots = 0
        out = np.empty(n, np.int64)
        self.nslots, _ = _lookup(self.tab_g, self.tab_a, self.tab_v, self.slot_g, self.slot_a, 0,
                                 old[0], old[1], out)

    def lookup(self, g: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slot of each key, positions of the keys seen for the first time, in order)."""
        n = len(a)
        out = np.empty(n, np.int64)
        if _lookup is not None:
            self._grow(n)
            self.nslots, miss = _lookup(self.tab_g, self.tab_a, self.tab_v, self.slot_g, self.slot_a,
                                        self.nslots, g, a, out)
            return out, miss
        return self._lookup_numpy(g, a, out)  # pragma: no cover - without numba

    def _lookup_numpy(self, g: np.ndarray, a: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.nslots + len(a) > _MAX_SLOTS:
            self._reset(1 << 12)
        key = np.empty(len(a), dtype=[("g", np.int64), ("a", np.uint64)])
        key["g"], key["a"] = g, a
        u, first, inv = np.unique(key, return_index=True, return_inverse=True)
        slots = np.empty(len(u), np.int64)
        miss = []
        for j in np.argsort(first, kind="stable").tolist():
            k = (int(u["g"][j]), int(u["a"][j]))
            s = self._py.get(k)
            if s is None:
                s = self._py[k] = self.nslots
                self.nslots += 1
                miss.append(int(first[j]))
            slots[j] = s
        need = self.nslots
        if need > len(self.dso):
            cap = 1 << need.bit_length()
            for name in ("dso", "sym", "off", "start"):
                a0 = getattr(self, name)
                b = np.zeros(cap, a0.dtype)
                b[:len(a0)] = a0
                setattr(self, name, b)
        out[:] = slots[inv.reshape(-1)]
        return out, np.asarray(miss, np.int64)


# ----------------------------------------------------------------------------- the loop

def _first_seen(values: np.ndarray) -> list[int]:
    """Distinct values in order of first appearance."""
    u, first = np.unique(values, return_index=True)
    return u[np.argsort(first, kind="stable")].tolist()


class _Batch:
    """One batch of samples on its way to rows."""

    def __init__(self, ex: "_Exporter", cols: SampleColumns) -> None:
        self.ex = ex
        self.cols = cols
        n = self.n = len(cols)
        self.err = cols.kind == EV_ERROR
        self.mi = ex.machine_index(cols)
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
        """Walk the runs in order: sideband records where due, errors, one thread lookup per run."""
        ex, cols = self.ex, self.cols
        starts = self.run_starts(cuts)
        ends = np.append(starts[1:], self.n).tolist()
        pid_l = cols.pid[starts].tolist()
        tid_l = cols.tid[starts].tolist()
        err_l = self.err[starts].tolist()
        mi_l = self.mi[starts].tolist() if self.mi is not None else [0] * len(pid_l)
        cut_l = cuts.tolist()
        nev = len(cut_l)
        ev_i = 0
        sym_from = 0
        machines = ex.machines
        thread_id, comm_id, sid = self.thread_id, self.comm_id, self.sid
        for a, b, p, t, e, m in zip(starts.tolist(), ends, pid_l, tid_l, err_l, mi_l):
            while ev_i < nev and cut_l[ev_i] == a:
                rec = ev_recs[ev_i]
                if rec.type == _SAMPLE and sym_from < a:
                    self.resolve_range(sym_from, a)  # symbol ids before the record's
                    sym_from = a
                ex.event(rec)
                ev_i += 1
            st = machines[m]
            if e:
                th = st.pt.find(p, t)
                ex.error_row(st, a, cols, th.db_id if th is not None else 0)
                continue
            th_id, c_id = st.threads(p, t)
            if b - a == 1:
                thread_id[a] = th_id
                comm_id[a] = c_id
                ex.n_samples += 1
                sid[a] = ex.n_samples
            else:
                thread_id[a:b] = th_id
                comm_id[a:b] = c_id
                sid[a:b] = np.arange(ex.n_samples + 1, ex.n_samples + 1 + b - a)
                ex.n_samples += b - a
        while ev_i < nev:  # pragma: no cover - every cut is below n
            ex.event(ev_recs[ev_i])
            ev_i += 1
        self.resolve_range(sym_from, self.n)

    def resolve_range(self, lo: int, hi: int) -> None:
        """Event and symbol ids of the samples in [lo, hi), first references first."""
        ex, cols = self.ex, self.cols
        idx = np.flatnonzero(~self.err[lo:hi])
        if not len(idx):
            return
        idx += lo
        kind = cols.kind[idx]
        kinds = _first_seen(kind)
        if len(kinds) == 1:
            self.evsel[idx] = ex.evsel(kinds[0])
        else:
            table = np.zeros(max(kinds) + 1, np.int64)
            for k in kinds:
                table[k] = ex.evsel(k)
            self.evsel[idx] = table[kind]
        ip = cols.ip[idx]
        addr = cols.addr[idx]
        is_br = kind == EV_BRANCH
        m = len(idx)
        # interleaved ip0, addr0, ip1, addr1 ... (addr of branches only; 0 resolves to nothing)
        keys_a = np.empty(2 * m, np.uint64)
        keys_a[0::2] = ip
        keys_a[1::2] = np.where(is_br, addr, 0)
        live = keys_a != 0
        pos = np.flatnonzero(live)
        if not len(pos):
            return
        keys_a = keys_a[pos]
        sample = idx[pos >> 1]
        groups = self._groups(idx, sample, keys_a)
        cache = ex.addr_cache
        slots, miss = cache.lookup(groups, keys_a)
        first_only = []
        if len(miss):
            first_only = self._resolve_misses(cache, slots, miss, keys_a, sample)
        dso = cache.dso[slots]
        sym = cache.sym[slots]
        off = cache.off[slots]
        for p, r in first_only:  # perf fixed the kernel map up after resolving this address once
            dso[p], sym[p], off[p] = r[0], r[1], r[2]
        is_ip = (pos & 1) == 0
        at = sample[is_ip]
        self.dso[at] = dso[is_ip]
        self.sym[at] = sym[is_ip]
        self.off[at] = off[is_ip]
        is_to = ~is_ip
        if is_to.any():
            start = cache.start[slots]
            for p, r in first_only:
                start[p] = r[3]
            at = sample[is_to]
            self.to_dso[at] = dso[is_to]
            self.to_sym[at] = sym[is_to]
            self.to_off[at] = off[is_to]
            self.to_start[at] = start[is_to]

    def _groups(self, idx: np.ndarray, sample: np.ndarray, keys_a: np.ndarray) -> np.ndarray:
        """Cache group of each key: (machine, the process or the kernel, map epoch)."""
        ex, cols = self.ex, self.cols
        cache = ex.addr_cache
        out = np.empty(len(keys_a), np.int64)
        mi = self.mi[sample] if self.mi is not None else None
        machines = [0] if mi is None else _first_seen(mi)
        for m in machines:
            st = ex.machines[m]
            sel = np.flatnonzero(mi == m) if mi is not None else None
            s = sample if sel is None else sample[sel]
            a = keys_a if sel is None else keys_a[sel]
            t = cols.time[s]
            kern = a >= np.uint64(st.kernel_start)
            g = np.empty(len(s), np.int64)
            if kern.any():
                g[kern] = cache.groups(m, None, st.kernel_epochs(t[kern]))
            user = ~kern
            if user.any():
                pu = cols.pid[s[user]]
                tu = t[user]
                gu = np.empty(len(pu), np.int64)
                p0 = int(pu[0])
                if (pu == p0).all():
                    gu[:] = cache.groups(m, p0, st.user_epochs(p0, tu))
                else:
                    for q in _first_seen(pu):
                        w = pu == q
                        gu[w] = cache.groups(m, q, st.user_epochs(q, tu[w]))
                g[user] = gu
            if sel is None:
                out[:] = g
            else:
                out[sel] = g
        return out

    def _resolve_misses(self, cache: AddressCache, slots: np.ndarray, miss: np.ndarray, keys_a: np.ndarray,
                        sample: np.ndarray) -> list[tuple[int, tuple]]:
        ex, cols = self.ex, self.cols
        first_only = []
        samp = sample[miss]
        pids = cols.pid[samp].tolist()
        times = cols.time[samp].tolist()
        mis = self.mi[samp].tolist() if self.mi is not None else [0] * len(pids)
        for p, addr, pid, time, m, slot in zip(miss.tolist(), keys_a[miss].tolist(), pids, times, mis,
                                                slots[miss].tolist()):
            st = ex.machines[m]
            before = st.kmap_range
            r = st.resolve(pid, addr, time)
            after = st.kmap_range
            if before is None and after is not None and not after[0] <= addr < after[1]:
                first_only.append((p, r))  # later lookups of this address find nothing
                r = (0, 0, 0, 0)
            cache.dso[slot], cache.sym[slot], cache.off[slot], cache.start[slot] = r
        return first_only

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

    def tree_columns(self) -> dict[str, np.ndarray]:
        cols = self.cols
        br = np.flatnonzero(cols.kind == EV_BRANCH)
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

    def payload_rows(self) -> dict[str, list[tuple]]:
        """Rows of the payload tables (psb, ptwrite, cbr, mwait, pwre, pwrx, exstop)."""
        cols = self.cols
        kind = cols.kind
        out: dict[str, list[tuple]] = {}
        present = set(np.unique(kind).tolist()) if len(kind) else set()
        for k in (EV_PSB, EV_PTWRITE, EV_CBR, EV_MWAIT, EV_PWRE, EV_PWRX, EV_EXSTOP):
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
        return out


def run_fast(ex: "_Exporter", batches: Iterable[SampleColumns],
             progress: Callable[[int, int], None] | None, total: int) -> None:
    """Export ``batches`` (perf's order) through ``ex``; sideband records from ``ex.feed``."""
    feed = ex.feed
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
        b = _Batch(ex, cols)
        b.threads_and_events(ev_recs, cuts)
        ex.write_batch(b.sample_columns(), b.tree_columns() if ex.calltree is not None else None,
                       b.payload_rows())
        done += n
        if progress:
            progress(done, total)
    for rec in feed.rest():
        ex.event(rec)
