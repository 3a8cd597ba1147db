"""One pass over perf.data records -> :class:`~ptexport.sideband.model.Sideband`.

``SidebandBuilder.add(record)`` takes records in file order (file or pipe
mode) and keeps only small tuples; ``finish()`` replays the time-dependent ones
in perf time order (stable: file order within one timestamp, records without a
time first), which is what perf's ordered-events queue does, then freezes the
indexes.  Records need only perf's attribute names (see perfdata's Record
classes); nothing here reads the file.

Semantics follow perf (tools/perf/util/machine.c, thread.c, intel-pt.c):

* FORK replaces any earlier thread with that tid, copies the parent's comm and,
  when the child is another process, the parent's maps (not with
  PERF_RECORD_MISC_FORK_EXEC);
* COMM sets a new name period; with the exec flag it starts a new program;
  ``exec_clears_maps`` (default True) then drops the process's maps, which is
  what the kernel does.  perf keeps them until later mmaps overlap them; pass
  False to get perf's behaviour exactly;
* MMAP/MMAP2 shadow whatever they overlap (maps__fixup_overlappings); kernel-mode
  ones (and pid -1) go to the machine's kernel maps; maps whose record has no
  build-id take it from the BUILD_ID feature (by machine and file name);
* every machine starts with its idle thread 0/0 "swapper"; a thread seen with
  pid != tid brings its process's main thread (perf's findnew);
* per-CPU current thread: CPU-wide switch-out -> next_prev pid/tid,
  switch-in -> the record's pid/tid, per-thread switch-in -> the record's,
  per-thread switch-out ignored, ITRACE_START -> its pid/tid (intel_pt's rules);
* guest records (ID_INDEX machine_pid != 0, or guest cpumode) go to the guest
  machine; guest switches are keyed by VCPU.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from typing import Any, Iterable

from ptexport.perfdata.constants import (
    GUEST_CPUMODES,
    PERF_RECORD_MISC_COMM_EXEC,
    PERF_RECORD_MISC_FORK_EXEC,
    PERF_RECORD_MISC_GUEST_KERNEL,
    PERF_RECORD_MISC_KERNEL,
    PERF_RECORD_MISC_MMAP_BUILD_ID,
    PERF_RECORD_MISC_MMAP_DATA,
    PERF_RECORD_MISC_SWITCH_OUT,
    PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    RecordType as RT,
)
from ptexport.sideband.model import (
    DEFAULT_GUEST_PID,
    END_OF_TIME,
    HOST_PID,
    KERNEL_MAPS,
    VCPU_COMM,
    AuxEvent,
    AuxtraceBuffer,
    Comm,
    CpuTimeline,
    LostEvent,
    Machine,
    MapEntry,
    MapIndex,
    Sideband,
    Thread,
    paint,
)
from ptexport.sideband.timeconv import TimeConversion, perf_time_mult

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
_U32 = 0xFFFFFFFF

_T_MMAP, _T_MMAP2, _T_COMM, _T_FORK, _T_EXIT = int(RT.MMAP), int(RT.MMAP2), int(RT.COMM), int(RT.FORK), int(RT.EXIT)
_T_SWITCH, _T_SWITCH_CW, _T_ITRACE = int(RT.SWITCH), int(RT.SWITCH_CPU_WIDE), int(RT.ITRACE_START)
_T_SAMPLE = int(RT.SAMPLE)
_NO_TIME = 0xFFFFFFFFFFFFFFFF

# ordered-replay kinds
_COMM, _FORK, _EXIT, _MMAP, _SWITCH, _ITRACE, _SEEN, _KSYM = range(8)


def _s32(v: int | None) -> int | None:
    """perf writes pid/tid/cpu as u32; -1 may arrive as 0xffffffff."""
    if v is None or v <= 0x7FFFFFFF:
        return v
    return v - (1 << 32) if v <= _U32 else v


class _Space:
    """An address space being built: every mapping in creation order, plus the live (cut-up) set
    that a fork copies."""

    __slots__ = ("starts", "live", "entries", "removed", "clears")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.live: list[MapEntry] = []
        self.entries: list[MapEntry] = []
        self.removed: set[int] = set()
        self.clears: list[int] = []

    def insert(self, new: MapEntry) -> None:
        paint(self.starts, self.live, new)
        self.entries.append(new)

    def remove_range(self, start: int, end: int, time: int) -> None:
        """Unmap [start, end) from ``time`` on (unregistered ksymbols)."""
        tomb = MapEntry(start, end, 0, "", None, 0, 0, -1, time, mapped_at=time)
        paint(self.starts, self.live, tomb, keep=False)
        self.removed.add(len(self.entries))
        self.entries.append(tomb)

    def clear(self, time: int) -> None:
        self.starts, self.live = [], []
        if self.entries:
            self.clears.append(time)

    def copy_from(self, other: "_Space", pid: int, time: int) -> None:
        self.clear(time)
        copies = [_replace(e, pid=pid, valid_from=time, valid_to=END_OF_TIME) for e in other.live]
        self.live = list(copies)
        self.starts = [c.start for c in copies]
        self.entries.extend(copies)

    def index(self) -> MapIndex:
        clears = self.clears
        entries = self.entries
        if clears:
            entries = []
            for e in self.entries:
                k = bisect_right(clears, e.valid_from)
                entries.append(_replace(e, valid_to=clears[k]) if k < len(clears) else e)
        return MapIndex(entries, removed=frozenset(self.removed), clears=clears)


_MAP_FIELDS = tuple(f.name for f in dataclasses.fields(MapEntry))


def _replace(e: MapEntry, **kw: Any) -> MapEntry:
    return MapEntry(*[kw[n] if n in kw else getattr(e, n) for n in _MAP_FIELDS])


class _MachineBuild:
    __slots__ = ("pid", "threads", "spaces", "kernel", "cpu_points", "mmap_counts")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.threads: dict[int, list[Thread]] = {}
        self.spaces: dict[int, _Space] = {}
        self.kernel = _Space()
        self.cpu_points: dict[int, list[tuple[int, int, int, int]]] = {}
        self.mmap_counts: dict[int | str, int] = {}

    def space(self, pid: int) -> _Space:
        sp = self.spaces.get(pid)
        if sp is None:
            sp = self.spaces[pid] = _Space()
        return sp


class SidebandBuilder:
    """Collect records with :meth:`add`, then :meth:`finish` once to get the :class:`Sideband`."""

    def __init__(self, *, exec_clears_maps: bool = True, id_index: dict[int, tuple[int, int]] | None = None) -> None:
        self.exec_clears_maps = exec_clears_maps
        self.id_index: dict[int, tuple[int, int]] = dict(id_index or {})
        self._guest_ids = any(mp for mp, _v in self.id_index.values())
        self._events: list[tuple[int, int, int, tuple]] = []
        self._seq = 0
        self._aux: dict[int, list[AuxEvent]] = {}
        self._auxtrace: list[AuxtraceBuffer] = []
        self._lost: list[LostEvent] = []
        self._time_conv: TimeConversion | None = None
        self._pt_time_conv: TimeConversion | None = None
        self.per_cpu_mmaps: bool | None = None
        self._first: int | None = None
        self._last: int | None = None
        self._finished = False
        self.build_ids: dict[tuple[int, str], bytes] = {}  # (machine pid, filename) -> build-id
        self._seen: set[tuple[int, int | None, int]] = set()

    def set_build_ids(self, entries: Iterable[Any] | None) -> None:
        """Build-ids from the BUILD_ID feature (or HEADER_BUILD_ID records): fill maps whose MMAP had none.

        perf keys them by machine (pid -1 = host) and file name; applied in :meth:`finish`.
        """
        for e in entries or ():
            bid = getattr(e, "build_id", None)
            if bid:
                pid = _s32(getattr(e, "pid", -1))
                self.build_ids[(HOST_PID if pid is None else pid, str(e.filename))] = bytes(bid)

    # -- clock sources given out of band (perfdata's pd.time_conv / pd.auxtrace_info) ----------

    def set_time_conv(self, tc: Any) -> None:
        if tc is not None and perf_time_mult(tc):
            self._time_conv = TimeConversion.from_time_conv(tc)

    def set_auxtrace_info(self, info: Any) -> None:
        if info is None:
            return
        if perf_time_mult(info):
            self._pt_time_conv = TimeConversion.from_auxtrace_info(info)
        pcm = getattr(info, "per_cpu_mmaps", None)
        if pcm is not None:
            self.per_cpu_mmaps = bool(pcm)

    # -- records ------------------------------------------------------------------------------

    def _push(self, time: int, kind: int, payload: tuple) -> None:
        self._events.append((time, self._seq, kind, payload))
        self._seq += 1

    def _machine_of(self, rec: Any, pid: int | None, misc: int | None = None) -> tuple[int, int | None]:
        """(machine pid, vcpu or None) of a record."""
        if misc is not None and not self._guest_ids and (misc & 7) < 4:
            return HOST_PID, None  # fast path: no guest ids, host cpumode
        sid = getattr(rec, "sample_id", None)
        sid_id = getattr(sid, "id", None) if sid is not None else None
        if sid_id is not None:
            hit = self.id_index.get(int(sid_id))
            if hit is not None and hit[0]:
                return hit[0], hit[1]
        cpumode = getattr(rec, "cpumode", None)
        if cpumode is None:
            cpumode = int(getattr(rec, "misc", 0)) & 7
        if cpumode in GUEST_CPUMODES:
            sp = _s32(getattr(sid, "pid", None)) if sid is not None else None
            mp = sp if sp is not None else pid
            return (mp if mp is not None and mp > 0 else DEFAULT_GUEST_PID), None
        return HOST_PID, None

    def add(self, rec: Any) -> None:
        if self._finished:
            raise RuntimeError("SidebandBuilder.add after finish")
        t = rec.type
        # perf orders and stamps by the sample time (sample_id), not FORK/EXIT's own time field
        sid = getattr(rec, "sample_id", None)
        if t == _T_SWITCH_CW and sid is not None and not self._guest_ids:
            # the fast path of a `perf record -a` recording's bulk (tens of thousands of context switches
            # a second): the general path below, with its checks made once
            misc = rec.misc
            if misc & 7 < 4:  # a host record (a guest's cpumode goes the general way)
                time = sid.time
                if time is not None and time != _NO_TIME and time:
                    if self._first is None or time < self._first:
                        self._first = time
                    if self._last is None or time > self._last:
                        self._last = time
                else:
                    time = 0
                cpu = sid.cpu
                if cpu is None:
                    cpu = -1
                elif cpu > 0x7FFFFFFF:
                    cpu = _s32(cpu)
                if misc & PERF_RECORD_MISC_SWITCH_OUT:
                    kind = CpuTimeline.OUT_PREEMPT if misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT else CpuTimeline.OUT
                    pid, tid = rec.next_prev_pid, rec.next_prev_tid
                else:
                    kind = CpuTimeline.IN
                    pid, tid = sid.pid, sid.tid
                if pid is not None and pid > 0x7FFFFFFF:
                    pid = _s32(pid)
                if tid is not None and tid > 0x7FFFFFFF:
                    tid = _s32(tid)
                self._events.append((time, self._seq, _SWITCH, (HOST_PID, cpu, pid, tid, kind)))
                self._seq += 1
                return
        time = sid.time if sid is not None else None
        if time is None:
            time = getattr(rec, "time", None)
        time = time if time is not None and time != _NO_TIME else 0
        if time:
            if self._first is None or time < self._first:
                self._first = time
            if self._last is None or time > self._last:
                self._last = time
        misc = rec.misc
        if t == _T_SWITCH_CW or t == _T_SWITCH:
            pid, tid, cpu = _s32(rec.pid), _s32(rec.tid), _s32(rec.cpu)
            mach, vcpu = self._machine_of(rec, pid, misc)
            if mach != HOST_PID and vcpu is not None:
                cpu = vcpu
            if misc & PERF_RECORD_MISC_SWITCH_OUT:
                if t != _T_SWITCH_CW:
                    return  # intel_pt ignores per-thread switch-out: the thread stays current
                kind = CpuTimeline.OUT_PREEMPT if misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT else CpuTimeline.OUT
                pid, tid = _s32(rec.next_prev_pid), _s32(rec.next_prev_tid)
            else:
                kind = CpuTimeline.IN
            self._events.append((time, self._seq, _SWITCH, (mach, -1 if cpu is None else cpu, pid, tid, kind)))
            self._seq += 1
        elif t == _T_MMAP or t == _T_MMAP2:
            pid, tid = _s32(rec.pid), _s32(rec.tid)
            mach, _ = self._machine_of(rec, pid)
            cpumode = misc & 7
            is_data = bool(misc & PERF_RECORD_MISC_MMAP_DATA)
            if t == RT.MMAP2:
                prot = int(getattr(rec, "prot", 0))
                flags = int(getattr(rec, "flags", 0))
                bid = getattr(rec, "build_id", None) if misc & PERF_RECORD_MISC_MMAP_BUILD_ID else None
                dev = (int(getattr(rec, "maj", 0) or 0), int(getattr(rec, "min", 0) or 0),
                       int(getattr(rec, "ino", 0) or 0), int(getattr(rec, "ino_generation", 0) or 0))
            else:
                prot = PROT_READ if is_data else PROT_READ | PROT_EXEC
                flags, bid, dev = 0, None, (0, 0, 0, 0)
            start = int(rec.start)
            end = min(start + int(rec.len), 1 << 64)
            entry = MapEntry(
                start=start, end=end, pgoff=int(rec.pgoff), filename=str(rec.filename),
                build_id=bytes(bid) if bid else None, prot=prot, flags=flags, pid=pid if pid is not None else -1,
                valid_from=time, mapped_at=time, maj=dev[0], min=dev[1], ino=dev[2], ino_generation=dev[3],
                cpumode=cpumode,
            )
            kernel = cpumode in (PERF_RECORD_MISC_KERNEL, PERF_RECORD_MISC_GUEST_KERNEL) or pid == -1
            self._push(time, _MMAP, (mach, pid, tid, kernel, entry))
        elif t == RT.COMM:
            pid, tid = _s32(rec.pid), _s32(rec.tid)
            mach, _ = self._machine_of(rec, pid)
            exec_ = bool(getattr(rec, "exec", misc & PERF_RECORD_MISC_COMM_EXEC))
            self._push(time, _COMM, (mach, pid, tid, str(rec.comm), exec_))
        elif t == RT.FORK:
            pid, tid = _s32(rec.pid), _s32(rec.tid)
            mach, _ = self._machine_of(rec, pid)
            no_clone = bool(misc & PERF_RECORD_MISC_FORK_EXEC)
            self._push(time, _FORK, (mach, pid, tid, _s32(rec.ppid), _s32(rec.ptid), no_clone))
        elif t == RT.EXIT:
            pid, tid = _s32(rec.pid), _s32(rec.tid)
            mach, _ = self._machine_of(rec, pid)
            self._push(time, _EXIT, (mach, pid, tid))
        elif t == RT.ITRACE_START:
            pid, tid, cpu = _s32(rec.pid), _s32(rec.tid), _s32(getattr(rec, "cpu", None))
            mach, vcpu = self._machine_of(rec, pid)
            if mach != HOST_PID and vcpu is not None:
                cpu = vcpu
            self._push(time, _ITRACE, (mach, -1 if cpu is None else cpu, pid, tid))
        elif t == RT.SAMPLE:
            pid, tid = _s32(getattr(rec, "pid", None)), _s32(getattr(rec, "tid", None))
            if tid is not None and tid >= 0:
                mach, _ = self._machine_of(rec, pid, misc)
                key = (mach, pid, tid)
                if key not in self._seen:  # samples only reveal threads: keep one per thread, not per sample
                    self._seen.add(key)
                    self._push(time, _SEEN, key)
        elif t == RT.AUX:
            cpu = _s32(getattr(rec, "cpu", None))
            cpu = -1 if cpu is None else cpu
            tid = _s32(getattr(rec, "tid", None))
            ev = AuxEvent(time=time, cpu=cpu, tid=-1 if tid is None else tid,
                          aux_offset=int(rec.aux_offset), aux_size=int(rec.aux_size), flags=int(rec.flags))
            self._aux.setdefault(cpu, []).append(ev)
        elif t == RT.AUXTRACE:
            cpu = _s32(rec.cpu)
            self._auxtrace.append(AuxtraceBuffer(
                record_offset=int(getattr(rec, "offset", 0) or 0),
                data_offset=getattr(rec, "data_offset", None),
                size=int(rec.size), aux_offset=int(rec.aux_offset), reference=int(rec.reference),
                idx=int(rec.idx), tid=_s32(rec.tid) if rec.tid is not None else -1,
                cpu=-1 if cpu is None else cpu,
            ))
        elif t in (RT.LOST, RT.LOST_SAMPLES):
            cpu = _s32(getattr(rec, "cpu", None))
            self._lost.append(LostEvent(time=time, cpu=-1 if cpu is None else cpu,
                                        kind="LOST" if t == RT.LOST else "LOST_SAMPLES",
                                        count=int(getattr(rec, "lost", 0) or 0)))
        elif t == RT.KSYMBOL:
            pid = None
            mach, _ = self._machine_of(rec, pid)
            unregister = bool(int(getattr(rec, "flags", 0)) & 1)
            entry = MapEntry(start=int(rec.addr), end=int(rec.addr) + int(rec.len), pgoff=0,
                             filename=str(getattr(rec, "ksym_name", None) or getattr(rec, "name_", None) or ""), build_id=None,
                             prot=PROT_READ | PROT_EXEC, flags=0, pid=-1, valid_from=time, mapped_at=time,
                             cpumode=PERF_RECORD_MISC_KERNEL)
            self._push(time, _KSYM, (mach, unregister, entry))
        elif t == RT.ID_INDEX:
            for ent in getattr(rec, "entries", ()):
                mp = getattr(ent, "machine_pid", 0) or 0
                self.id_index[int(ent.id)] = (int(mp), int(getattr(ent, "vcpu", 0) or 0))
                if mp:
                    self._guest_ids = True
        elif t == RT.HEADER_BUILD_ID:
            self.set_build_ids([rec])
        elif t == RT.TIME_CONV:
            self.set_time_conv(rec)
        elif t == RT.AUXTRACE_INFO:
            info = getattr(rec, "info", None) or getattr(rec, "priv", None) or rec
            if hasattr(info, "time_mult"):
                self.set_auxtrace_info(info)

    def _with_build_id(self, mpid: int, entry: MapEntry) -> MapEntry:
        name = entry.filename
        bid = self.build_ids.get((mpid, name))
        if bid is None and name.startswith(("[kernel.kallsyms]", "[guest.kernel.kallsyms]")):
            bid = self.build_ids.get((mpid, name.split("]", 1)[0] + "]"))
        return entry if bid is None else _replace(entry, build_id=bid)

    def add_all(self, records: Iterable[Any]) -> "SidebandBuilder":
        for r in records:
            self.add(r)
        return self

    # -- replay in time order ---------------------------------------------------------------

    def finish(self) -> Sideband:
        if self._finished:
            raise RuntimeError("SidebandBuilder.finish called twice")
        self._finished = True
        self._events.sort(key=lambda e: (e[0], e[1]))
        machines: dict[int, _MachineBuild] = {HOST_PID: _MachineBuild(HOST_PID)}
        uid = [0]

        def mach(pid: int) -> _MachineBuild:
            m = machines.get(pid)
            if m is None:
                m = machines[pid] = _MachineBuild(pid)
                register_idle(m)
            return m

        def new_thread(m: _MachineBuild, pid: int, tid: int, time: int, known: bool) -> Thread:
            th = Thread(uid[0], m.pid, pid, tid, time, known)
            uid[0] += 1
            m.threads.setdefault(tid, []).append(th)
            return th

        def findnew(m: _MachineBuild, pid: int | None, tid: int | None, time: int) -> Thread | None:
            if tid is None or tid < 0:
                return None
            lst = m.threads.get(tid)
            if lst:
                th = lst[-1]
                if (pid is not None and pid >= 0 and th.pid < 0):
                    th.pid = pid
                return th
            if pid is not None and pid >= 0 and pid != tid and not m.threads.get(pid):
                new_thread(m, pid, pid, time, False)  # perf creates the process's main thread with it
            return new_thread(m, pid if pid is not None and pid >= 0 else -1, tid, time, False)

        def register_idle(m: _MachineBuild) -> None:
            # perf registers each machine's idle thread before its records: 0/0 "swapper"
            idle = new_thread(m, 0, 0, 0, False)
            idle.comms.append(Comm("swapper", 0, False))  # type: ignore[union-attr]

        register_idle(machines[HOST_PID])

        for time, _seq, kind, p in self._events:
            if kind == _MMAP:
                mpid, pid, tid, kernel, entry = p
                m = mach(mpid)
                if entry.build_id is None and self.build_ids:
                    entry = self._with_build_id(mpid, entry)
                key = KERNEL_MAPS if kernel else pid
                m.mmap_counts[key] = m.mmap_counts.get(key, 0) + 1
                if kernel:
                    m.kernel.insert(entry)
                else:
                    findnew(m, pid, tid, time)
                    m.space(pid).insert(entry)
            elif kind == _COMM:
                mpid, pid, tid, comm, exec_ = p
                m = mach(mpid)
                th = findnew(m, pid, tid, time)
                if th is None:
                    continue
                th.comms.append(Comm(comm, time, exec_))  # type: ignore[union-attr]
                if exec_ and self.exec_clears_maps and pid is not None and pid in m.spaces:
                    m.spaces[pid].clear(time)
            elif kind == _FORK:
                mpid, pid, tid, ppid, ptid, no_clone = p
                m = mach(mpid)
                parent = findnew(m, ppid, ptid, time)
                child = new_thread(m, pid, tid, time, True)
                child.ppid, child.ptid = ppid, ptid
                if parent is not None and parent.comms:
                    child.comms.append(Comm(parent.comm_name(time), time, False, True))  # type: ignore[union-attr]
                if pid != ppid and not no_clone and ppid is not None and ppid in m.spaces:
                    m.space(pid).copy_from(m.spaces[ppid], pid, time)
            elif kind == _EXIT:
                mpid, pid, tid = p
                th = findnew(mach(mpid), pid, tid, time)
                if th is not None:
                    th.end = time
            elif kind == _SWITCH:
                mpid, cpu, pid, tid, k = p
                m = mach(mpid)
                findnew(m, pid, tid, time)
                m.cpu_points.setdefault(cpu, []).append((time, -1 if pid is None else pid, -1 if tid is None else tid, k))
            elif kind == _ITRACE:
                mpid, cpu, pid, tid = p
                m = mach(mpid)
                findnew(m, pid, tid, time)
                m.cpu_points.setdefault(cpu, []).append((time, pid, tid, CpuTimeline.ITRACE_START))
            elif kind == _SEEN:
                mpid, pid, tid = p
                findnew(mach(mpid), pid, tid, time)
            elif kind == _KSYM:
                mpid, unregister, entry = p
                m = mach(mpid)
                if unregister:
                    m.kernel.remove_range(entry.start, entry.end, time)
                else:
                    m.mmap_counts[KERNEL_MAPS] = m.mmap_counts.get(KERNEL_MAPS, 0) + 1
                    m.kernel.insert(entry)

        out: dict[int, Machine] = {}
        for pid, mb in machines.items():
            mm = Machine(pid)
            for tid, lst in mb.threads.items():
                for th in lst:
                    th.comms = tuple(th.comms)
                mm._threads[tid] = lst
                mm._thread_starts[tid] = [th.start for th in lst]
            mm._maps = {p: sp.index() for p, sp in mb.spaces.items()}
            mm.kernel_maps = mb.kernel.index()
            mm.mmap_counts = dict(mb.mmap_counts)
            mm.cpus = {cpu: CpuTimeline(cpu, pts) for cpu, pts in mb.cpu_points.items()}
            out[pid] = mm
        # VCPU n of guest P runs in the host thread "CPU n/KVM" of process P (QEMU/KVM's naming)
        host = out[HOST_PID]
        for pid, mm in out.items():
            if pid == HOST_PID:
                continue
            for th in host.threads():
                if th.pid != pid:
                    continue
                for c in th.comms:
                    hit = VCPU_COMM.match(c.comm)
                    if hit:
                        mm.vcpu_threads.setdefault(int(hit.group(1)), th.tid)
        self._events = []
        return Sideband(
            machines=out,
            time_conv=self._pt_time_conv or self._time_conv,
            aux_events=self._aux,
            auxtrace=self._auxtrace,
            lost=self._lost,
            per_cpu_mmaps=self.per_cpu_mmaps,
            id_index=self.id_index,
            first_time=self._first,
            last_time=self._last,
        )


def build_sideband(
    records: Iterable[Any],
    *,
    time_conv: Any = None,
    auxtrace_info: Any = None,
    id_index: dict[int, tuple[int, int]] | None = None,
    exec_clears_maps: bool = True,
) -> Sideband:
    """Build the sideband model from records in file order."""
    b = SidebandBuilder(exec_clears_maps=exec_clears_maps, id_index=id_index)
    b.set_time_conv(time_conv)
    b.set_auxtrace_info(auxtrace_info)
    b.add_all(records)
    return b.finish()


def sideband_from_perf_data(pd: Any, *, exec_clears_maps: bool = True) -> Sideband:
    """Build from an open :func:`ptexport.perfdata.open_perf_data` object (one pass over its records)."""
    b = SidebandBuilder(exec_clears_maps=exec_clears_maps)
    b.set_time_conv(getattr(pd, "time_conv", None))
    b.set_auxtrace_info(getattr(pd, "auxtrace_info", None))
    b.add_all(pd.records())
    finish_from_perf_data(b, pd)
    return b.finish()


def finish_from_perf_data(b: SidebandBuilder, pd: Any) -> None:
    """What a builder needs from ``pd`` once its records are read (pipe mode learns features late)."""
    if b._time_conv is None:
        b.set_time_conv(getattr(pd, "time_conv", None))
    if b._pt_time_conv is None:
        b.set_auxtrace_info(getattr(pd, "auxtrace_info", None))
    features = getattr(pd, "features", None) or {}
    b.set_build_ids(features.get("build_id"))
