"""Guest (virtual machine) code for the perf-mode walker, perf's way.

perf decodes non-root (guest) code from a guest machine (intel-pt.c
intel_pt_walk_next_insn's ``nr`` branch, intel_pt_get_guest):

* the machine is the one keyed by the pid of the host thread running the VCPU
  (the hypervisor process, e.g. QEMU); when there is none, perf's default guest
  (DEFAULT_GUEST_KERNEL_ID, pid 0 here) set up by --guestkallsyms/--guestmodules;
* an ip with bit 63 set is guest kernel code, else guest user code
  (intel_pt_nr_cpumode, which assumes 64-bit guests);
* guest kernel code comes from the guest's kcore copy: ``kcore_dir__PID`` next to
  the data of a recording made by ``perf inject --guest-data`` (perf inject copies
  the guest's kcore_dir there), else the kcore beside --guestkallsyms;
* guest user code needs the guest thread current on the VCPU, known only with
  guest sideband; without it guest user code cannot be read (-EINVAL).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptexport.decoder.codewalk import KcoreCode
from ptexport.jit import numba
from ptexport.samples.columns import few_distinct

if numba is not None:

    @numba.njit(cache=True, nogil=True)
    def _vm_split(guest, tid, tsc, hosts, h_mp, h_vc, h_lo, h_hi, t_tsc, t_pid, t_tid, mp, vc, pid,
                  out_tid):  # pragma: no cover - compiled
        """:meth:`VcpuAttribution.apply` in one pass: each guest row of a VCPU thread (``hosts[k]``, ascending)
        takes its machine and VCPU and the guest thread current at its TSC on that VCPU (the last
        switch at or before it in ``t_*[h_lo[k]:h_hi[k]]``; -1 before the first, or without a
        timeline: ``h_lo[k]`` < 0)."""
        for i in range(guest.shape[0]):
            if not guest[i]:
                continue
            h = tid[i]
            a = 0
            b = hosts.shape[0]
            while a < b:  # hosts ascending
                m = (a + b) >> 1
                if hosts[m] < h:
                    a = m + 1
                else:
                    b = m
            if a == hosts.shape[0] or hosts[a] != h:
                continue
            k = a
            mp[i] = h_mp[k]
            vc[i] = h_vc[k]
            lo = h_lo[k]
            if lo < 0:
                pid[i] = -1
                out_tid[i] = -1
                continue
            a = lo
            b = h_hi[k]
            t = tsc[i]
            while a < b:
                m = (a + b) >> 1
                if t_tsc[m] <= t:
                    a = m + 1
                else:
                    b = m
            if a == lo:
                pid[i] = -1
                out_tid[i] = -1
            else:
                pid[i] = t_pid[a - 1]
                out_tid[i] = t_tid[a - 1]

DEFAULT_GUEST_PID = 0  # perf's DEFAULT_GUEST_KERNEL_ID machine


class GuestSpaces:
    """Guest machines' kernel code (kcore copies), found once per machine pid."""

    def __init__(self, pd: Any, sideband: Any, guest_kcore_dir: str | None = None) -> None:
        self.sb = sideband
        self.guest_kcore_dir = guest_kcore_dir
        kd = getattr(pd, "kcore_dir", None)
        if kd is not None:
            self.base = Path(kd).parent
        else:
            p = Path(str(getattr(pd, "path", ".")))
            self.base = p if p.is_dir() else p.parent
        self._kcore: dict[int, KcoreCode | None] = {}
        # --guest-data FILE,PID: FILE's kcore_dir (perf inject would copy it to kcore_dir__PID)
        self.guest_kcore_dirs: dict[int, str] = dict(getattr(pd, "guest_kcore_dirs", None) or {})

    @property
    def have_guest_sideband(self) -> bool:
        """True when guest records were merged (perf's have_guest_sideband: ID_INDEX machine_pid)."""
        return any(mp for mp, _v in (self.sb.id_index or {}).values())

    def machine_pid(self, host_pid: int) -> int:
        """The guest machine run by host process ``host_pid`` (perf's machines__find_guest)."""
        if host_pid > 0 and self.sb.machine(host_pid) is not None:
            return host_pid
        return DEFAULT_GUEST_PID

    def kcore(self, machine_pid: int) -> KcoreCode | None:
        if machine_pid in self._kcore:
            return self._kcore[machine_pid]
        cands = []
        if machine_pid in self.guest_kcore_dirs:
            cands.append(Path(self.guest_kcore_dirs[machine_pid]) / "kcore")
        if machine_pid != DEFAULT_GUEST_PID:
            cands.append(self.base / f"kcore_dir__{machine_pid}" / "kcore")
        if self.guest_kcore_dir:
            cands.append(Path(self.guest_kcore_dir) / "kcore")
        code = None
        for c in cands:
            if c.is_file():
                code = KcoreCode(str(c), f"[guest.kcore.{machine_pid}]")
                break
        self._kcore[machine_pid] = code
        return code


def _split(guest: np.ndarray, tid_all: np.ndarray, cols: Any, hosts: tuple[np.ndarray, ...], mp: np.ndarray,
           vc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_vm_split` over a batch's columns (``hosts``: :meth:`VcpuAttribution._hosts`): its new pid and
    tid columns (``mp``, ``vc`` filled in place)."""
    pid = np.array(cols.pid, dtype=np.int64, copy=True)
    tid = tid_all.copy()
    _vm_split(guest, tid_all, np.asarray(cols.tsc).astype(np.uint64, copy=False), *hosts, mp, vc, pid, tid)
    return pid, tid


def warm() -> None:
    """Compile :func:`_vm_split` ahead (``ptexport.cli.precompile``: no shipped sample is a VM's), through
    the call :meth:`VcpuAttribution.apply` makes: a batch of one guest row on a VCPU thread without a
    timeline."""
    if numba is None:
        return
    from types import SimpleNamespace

    one = np.ones(1, np.int64)
    cols = SimpleNamespace(pid=one, tsc=one.astype(np.uint64))
    hosts = (*(np.ascontiguousarray(one * v) for v in (1, 2, 0, -1, -1)), np.zeros(0, np.uint64),
             np.zeros(0, np.int64), np.zeros(0, np.int64))
    mp, vc = np.zeros(1, np.int64), np.full(1, -1, np.int64)
    _split(np.ones(1, bool), one, cols, hosts, mp, vc)


def host_kcore(pd: Any) -> KcoreCode | None:
    """The host kernel's kcore copy of a ``perf record --kcore`` directory, if any."""
    kd = getattr(pd, "kcore_dir", None)
    if kd is None:
        return None
    path = os.path.join(str(kd), "kcore")
    return KcoreCode(path, "[kernel.kcore]") if os.path.isfile(path) else None


class VcpuAttribution:
    """perf's VM split of samples (intel_pt_sample with guest sideband).

    A sample taken in guest code (``nr``) of a trace with guest sideband (ID_INDEX
    entries with a machine_pid, merged by ``perf inject --guest-data``) carries the
    guest machine's pid, the VCPU (from the host thread's comm "CPU n/KVM") and the
    guest thread current on that VCPU (the guest's switch records, keyed by VCPU,
    compared in TSC).  Every other sample has machine_pid 0 and vcpu -1, which perf
    script prints as nothing.
    """

    def __init__(self, session: Any) -> None:
        self.s = session
        self.guests = GuestSpaces(session.pd, session.sb)
        self.enabled = self.guests.have_guest_sideband
        self._vcpu: dict[int, tuple[int, int] | None] = {}
        self._tl: dict[tuple[int, int], tuple[Any, Any, Any] | None] = {}
        self._split_tables: dict[tuple[int, ...], tuple[np.ndarray, ...]] = {}

    def vcpu_of(self, host_tid: int) -> tuple[int, int] | None:
        """(guest machine pid, VCPU) run by host thread ``host_tid``, or None."""
        if host_tid not in self._vcpu:
            hit = self.s.sb.vcpu_of_host_thread(host_tid) if host_tid >= 0 else None
            if hit is not None and self.s.sb.machine(hit[0]) is None:
                hit = None
            self._vcpu[host_tid] = hit
        return self._vcpu[host_tid]

    def _timeline(self, mpid: int, vcpu: int):
        key = (mpid, vcpu)
        if key not in self._tl:
            m = self.s.sb.machine(mpid)
            tl = m.cpus.get(vcpu) if m is not None else None
            if tl is None or not len(tl):
                self._tl[key] = None
            else:
                tc = self.s.tc
                tscs = tc.perf_time_to_tsc_array(tl.times.astype(np.uint64)) if tc is not None else tl.times
                self._tl[key] = (np.asarray(tscs, dtype=np.uint64), tl.pids, tl.tids)
        return self._tl[key]

    def guest_thread(self, host_tid: int, tsc: int) -> tuple[int, int]:
        """(pid, tid) of the guest thread current on ``host_tid``'s VCPU at ``tsc`` ((-1, -1): unknown)."""
        hit = self.vcpu_of(host_tid)
        if hit is None:
            return -1, -1
        tl = self._timeline(*hit)
        if tl is None:
            return -1, -1
        i = int(np.searchsorted(tl[0], np.uint64(tsc), side="right")) - 1
        if i < 0:
            return -1, -1
        return int(tl[1][i]), int(tl[2][i])

    def guest_pid_at_time(self, host_tid: int, time: int) -> int:
        """The pid of the guest thread current on ``host_tid``'s VCPU at perf time ``time`` (-1: unknown)."""
        hit = self.vcpu_of(host_tid)
        if hit is None:
            return -1
        m = self.s.sb.machine(hit[0])
        tl = m.cpus.get(hit[1]) if m is not None else None
        got = tl.at(time) if tl is not None else None
        return got[0] if got is not None else -1

    def _hosts(self, tids: list[int]) -> tuple[np.ndarray, ...]:
        """The VCPU threads among host threads ``tids`` (ascending) and their timelines, for :func:`_vm_split`:
        (hosts, machine pids, VCPUs, timeline starts (-1: none), ends, TSCs, pids, tids)."""
        rows, parts = [], []
        at = 0
        for h in tids:
            hit = self.vcpu_of(h)
            if hit is None:
                continue
            tl = self._timeline(*hit)
            if tl is None:
                rows.append((h, hit[0], hit[1], -1, -1))
                continue
            rows.append((h, hit[0], hit[1], at, at + len(tl[0])))
            parts.append(tl)
            at += len(tl[0])
        table = np.array(rows, dtype=np.int64).reshape(-1, 5)
        cat = [np.concatenate([np.asarray(p[j], dt) for p in parts]) if parts else np.zeros(0, dt)
               for j, dt in enumerate((np.uint64, np.int64, np.int64))]
        return (*(np.ascontiguousarray(table[:, j]) for j in range(5)), *cat)

    def apply(self, cols: Any) -> Any:
        """Fill ``cols.machine_pid`` / ``cols.vcpu`` and give guest samples their guest pid/tid.  Columns
        split already (``machine_pid`` set: by the decoding process, which splits its batches before it
        hands them over) are returned as they are: a second split would look the guest tids up as host
        threads."""
        if cols.machine_pid is not None:
            return cols
        n = len(cols.kind)
        mp = np.zeros(n, np.int64)
        vc = np.full(n, -1, np.int64)
        if self.enabled and n and numba is not None:
            guest = np.asarray(cols.nr) != 0
            tid_all = np.asarray(cols.tid, dtype=np.int64)
            hosts = few_distinct(tid_all[guest]).tolist()
            key = tuple(hosts)
            got = self._split_tables.get(key)
            if got is None:
                got = self._split_tables[key] = self._hosts(hosts)
            cols.pid, cols.tid = _split(guest, tid_all, cols, got, mp, vc)
        elif self.enabled and n:  # without numba: the same values, numpy a VCPU thread at a time
            rows = np.nonzero(np.asarray(cols.nr) != 0)[0]
            pid = np.array(cols.pid, copy=True)
            tid = np.array(cols.tid, copy=True)
            if len(rows):
                htid = np.asarray(cols.tid)[rows]
                tsc = np.asarray(cols.tsc)[rows].astype(np.uint64, copy=False)
                # one look-up per host thread (a batch has a few VCPU threads), then its rows at once
                for h in few_distinct(htid).tolist():
                    hit = self.vcpu_of(int(h))
                    if hit is None:
                        continue
                    sel = rows[htid == h]
                    mp[sel], vc[sel] = hit
                    tl = self._timeline(*hit)
                    if tl is None:
                        pid[sel], tid[sel] = -1, -1
                        continue
                    i = np.searchsorted(tl[0], tsc[htid == h], side="right") - 1
                    known = i >= 0
                    j = np.where(known, i, 0)
                    pid[sel] = np.where(known, np.asarray(tl[1])[j], -1)
                    tid[sel] = np.where(known, np.asarray(tl[2])[j], -1)
            cols.pid, cols.tid = pid, tid
        cols.machine_pid, cols.vcpu = mp, vc
        return cols
