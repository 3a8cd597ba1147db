"""The sideband model: what ran where, under which name, with which memory maps, over time.

Built once by :class:`ptexport.sideband.builder.SidebandBuilder` from the
records of a perf.data file, then read-only.  Every time-dependent question is
answered by bisection over sorted arrays, never by scanning records:

* ``Sideband.thread_on_cpu(cpu, time)`` - who ran on a CPU (perf's "current
  tid", from SWITCH / SWITCH_CPU_WIDE / ITRACE_START);
* ``Machine.map_at(pid, addr, time)`` - which mapping covers an address;
* ``Machine.thread(tid, time)`` - the thread (a tid can be reused after exit);
* ``Thread.comm_at(time)`` / ``Thread.exec_comm(time)`` - its name.

Times are perf times (ns, the records' sample time); records without a time
count as time 0, i.e. "from the start" (perf's synthesized records).  The
:class:`~ptexport.sideband.timeconv.TimeConversion` turns TSC values of the
trace into perf time.  Machines are keyed by pid: -1 is the host, a guest is
its hypervisor process's pid (0 when unknown: perf's default guest).
"""

from __future__ import annotations

import dataclasses
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ptexport.sideband.timeconv import TimeConversion

HOST_PID = -1
#: QEMU/KVM names the host thread that runs VCPU n "CPU n/KVM"
VCPU_COMM = re.compile(r"^CPU (\d+)/KVM$")
DEFAULT_GUEST_PID = 0
#: key of the kernel's maps in ``Machine.mmap_counts``
KERNEL_MAPS = "kernel"
#: "valid until the end of the trace"
END_OF_TIME = 1 << 64


@dataclass(frozen=True, slots=True, eq=False)
class Comm:
    """One name period of a thread: from ``start`` until the thread's next comm.

    Compared by identity, like perf's ``struct comm``: two threads named "sh"
    have two Comm objects (an exporter keys its comms table rows on them).
    """

    comm: str
    start: int
    exec: bool
    inherited: bool = False  # copied from the parent at FORK (perf does that too)


class Thread:
    """One thread's life: tid, its process (pid), parent, start/end and names over time.

    ``uid`` is unique in the trace (a tid reused after exit is another Thread).
    """

    __slots__ = ("uid", "machine_pid", "pid", "tid", "ppid", "ptid", "start", "end", "start_known", "comms",
                 "_comm_starts")

    def __init__(self, uid: int, machine_pid: int, pid: int, tid: int, start: int, start_known: bool) -> None:
        self.uid = uid
        self.machine_pid = machine_pid
        self.pid = pid
        self.tid = tid
        self.ppid: int | None = None
        self.ptid: int | None = None
        self.start = start
        self.end: int | None = None  # EXIT time
        self.start_known = start_known  # True when a FORK record gave the start
        self.comms: tuple[Comm, ...] | list[Comm] = []
        self._comm_starts: list[int] | None = None  # set when the model is frozen

    def _starts(self) -> list[int]:
        st = self._comm_starts
        if st is None or len(st) != len(self.comms):
            st = self._comm_starts = [c.start for c in self.comms]
        return st

    def _visible(self, time: int) -> int:
        """How many comms were set at or before ``time``."""
        return bisect_right(self._starts(), time)

    @property
    def is_main(self) -> bool:
        return self.pid == self.tid

    def comm_at(self, time: int) -> Comm | None:
        """perf's thread__comm_by_time: the latest comm started at or before ``time``, else the first."""
        comms = self.comms
        if not comms:
            return None
        i = self._visible(time) - 1
        return comms[max(i, 0)]

    def comm_name(self, time: int | None = None) -> str:
        """The name perf shows at ``time`` (latest when None); ``:tid`` before the first comm."""
        if not self.comms or (time is not None and time < self.comms[0].start):
            return f":{self.tid}"  # perf's default comm until the first one is set
        c = self.comms[-1] if time is None else self.comm_at(time)
        assert c is not None
        return c.comm

    def exec_comm(self, time: int | None = None) -> Comm | None:
        """perf's thread__exec_comm as seen at ``time`` (comms set later are not there yet).

        None when no comm was set by then: perf then shows the default ``:tid``.

        The latest exec comm; without one, the first comm - except that a first
        comm with no time (copied from the parent by a synthesized FORK) gives way
        to the next one for a main thread, as perf 6.1 does.
        """
        comms = self.comms if time is None else self.comms[: self._visible(time)]
        for c in reversed(comms):
            if c.exec:
                return c
        if not comms:
            return None
        if len(comms) > 1 and comms[0].start == 0 and self.pid == self.tid:
            return comms[1]
        return comms[0]

    def alive_at(self, time: int) -> bool:
        return self.start <= time and (self.end is None or time <= self.end)

    def as_dict(self) -> dict:
        return {
            "uid": self.uid,
            "machine_pid": self.machine_pid,
            "pid": self.pid,
            "tid": self.tid,
            "ppid": self.ppid,
            "ptid": self.ptid,
            "start": self.start if self.start_known else None,
            "end": self.end,
            "comms": [{"comm": c.comm, "start": c.start, "exec": c.exec, "inherited": c.inherited} for c in self.comms],
        }

    def __repr__(self) -> str:
        return f"Thread(uid={self.uid}, machine={self.machine_pid}, pid={self.pid}, tid={self.tid}, comm={self.comm_name()!r})"


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One mapping of a file (or anon/special region) into an address space, as an MMAP record made it.

    ``[start, end)`` are addresses, ``pgoff`` the file offset of ``start``.  It is
    valid from ``valid_from`` (its record's time; a fork's time for maps a child
    inherited) until ``valid_to`` (the exec that dropped it, else the end of the
    trace); a later mmap over part of its range shadows that part only, which is
    perf's maps__fixup_overlappings: look addresses up one by one, or take
    :meth:`MapIndex.live_at` for the cut-up address space at one time.
    ``mapped_at`` is the time of the MMAP record it came from.
    """

    start: int
    end: int
    pgoff: int
    filename: str
    build_id: bytes | None
    prot: int
    flags: int
    pid: int
    valid_from: int
    valid_to: int = END_OF_TIME
    mapped_at: int = 0
    maj: int = 0
    min: int = 0
    ino: int = 0
    ino_generation: int = 0
    cpumode: int = 0

    @property
    def size(self) -> int:
        return self.end - self.start

    def contains(self, addr: int) -> bool:
        return self.start <= addr < self.end

    def file_offset(self, addr: int) -> int:
        """Offset in ``filename`` of the byte at ``addr`` (perf's map__map_ip for file maps)."""
        return addr - self.start + self.pgoff

    def as_dict(self) -> dict:
        return {
            "start": self.start,
            "end": self.end,
            "pgoff": self.pgoff,
            "filename": self.filename,
            "build_id": self.build_id.hex() if self.build_id else None,
            "prot": self.prot,
            "flags": self.flags,
            "valid_from": self.valid_from,
            "valid_to": None if self.valid_to == END_OF_TIME else self.valid_to,
        }


class MapIndex:
    """All mappings one address space ever had, indexed for (address, time) lookups.

    At ``(addr, time)`` the answer is the latest mapping made at or before
    ``time`` that covers ``addr`` - later mmaps shadow earlier ones where they
    overlap - unless the space was cleared (exec) or the range unmapped
    (unregistered ksymbol) after it.  Mappings sit in a segment tree over the
    address boundaries (each in O(log n) nodes, in time order), so a lookup is
    a walk from one leaf to the root with a bisection per node, and the index
    stays O(n log n) however the mappings overlap.
    """

    __slots__ = ("entries", "_all", "_clears", "_bounds", "_size", "_nodes", "_cells")

    def __init__(self, entries: list[MapEntry], *, removed: frozenset[int] = frozenset(),
                 clears: list[int] | None = None, layout: str = "auto") -> None:
        """``entries`` in the order they were made; indexes in ``removed`` unmap their range instead.

        ``layout``: "cells" (per-interval lists, fastest, for few overlaps), "tree" (segment tree,
        for heavy overlap) or "auto" (cells unless they would hold > 4 entries per map).
        """
        keep = [(i, e) for i, e in enumerate(entries) if e.start < e.end]
        self._clears = sorted(clears or ())
        self.entries: tuple[MapEntry, ...] = tuple(e for i, e in keep if i not in removed)
        self._all = [(e, i not in removed) for i, e in keep]  # creation order, unmaps included
        bounds = sorted({e.start for _, e in keep} | {e.end for _, e in keep})
        self._bounds = bounds
        size = 1
        while size < len(bounds) - 1:
            size <<= 1
        self._size = size
        pos = {b: i for i, b in enumerate(bounds)}
        order = sorted(range(len(keep)), key=lambda k: (keep[k][1].valid_from, k))
        self._cells = None
        self._nodes = []
        span = sum(pos[e.end] - pos[e.start] for _, e in keep)
        if layout == "cells" or (layout == "auto" and span <= 4 * len(keep) + 64):
            # the usual case (few overlaps): each elementary interval lists its maps in time order;
            # a lookup is two bisections
            cells: list[tuple[list[int], list[MapEntry | None]]] = [([], []) for _ in range(max(len(bounds) - 1, 0))]
            for k in order:
                i, e = keep[k]
                val = None if i in removed else e
                for c in range(pos[e.start], pos[e.end]):
                    cells[c][0].append(e.valid_from)
                    cells[c][1].append(val)
            self._cells = cells
            return
        # node -> (valid_from list, rank list, entry-or-None list), appended in rank (= creation) order
        nodes: dict[int, tuple[list[int], list[int], list[MapEntry | None]]] = {}
        for rank, k in enumerate(order):
            i, e = keep[k]
            val = None if i in removed else e
            lo, hi = pos[e.start] + size, pos[e.end] + size
            while lo < hi:
                if lo & 1:
                    _node_add(nodes, lo, e.valid_from, rank, val)
                    lo += 1
                if hi & 1:
                    hi -= 1
                    _node_add(nodes, hi, e.valid_from, rank, val)
                lo >>= 1
                hi >>= 1
        table: list = [None] * (2 * size)
        for node, hit in nodes.items():
            table[node] = hit
        self._nodes = table

    def __len__(self) -> int:
        return len(self.entries)

    def at(self, addr: int, time: int) -> MapEntry | None:
        i = bisect_right(self._bounds, addr) - 1
        if i < 0 or i >= len(self._bounds) - 1:
            return None
        if self._cells is not None:
            times, vals = self._cells[i]
            j = bisect_right(times, time) - 1
            best = vals[j] if j >= 0 else None
            if best is None:
                return None
            if self._clears:
                c = bisect_right(self._clears, time) - 1
                if c >= 0 and best.valid_from < self._clears[c]:
                    return None
            return best
        node = i + self._size
        best_rank, best = -1, None
        nodes = self._nodes
        while node:
            hit = nodes[node]
            if hit is not None:
                times = hit[0]
                if times[0] <= time:
                    j = bisect_right(times, time) - 1 if times[-1] > time else len(times) - 1
                    if hit[1][j] > best_rank:
                        best_rank, best = hit[1][j], hit[2][j]
                        if best is None:
                            best = _REMOVED
            node >>= 1
        if best is None or best is _REMOVED:
            return None
        if self._clears:
            c = bisect_right(self._clears, time) - 1
            if c >= 0 and best.valid_from < self._clears[c]:
                return None  # dropped by an exec after it was mapped
        return best

    def live_at(self, time: int) -> list[MapEntry]:
        """The address space at ``time``, sorted by address, with shadowed parts cut away."""
        c = bisect_right(self._clears, time) - 1
        since = self._clears[c] if c >= 0 else None
        starts: list[int] = []
        live: list[MapEntry] = []
        for e, mapped in sorted(self._all, key=lambda x: x[0].valid_from):  # stable: creation order
            if e.valid_from > time:
                break
            if since is not None and e.valid_from < since:
                continue
            paint(starts, live, e, keep=mapped)
        return live


_REMOVED = MapEntry(0, 0, 0, "", None, 0, 0, -1, 0)


def _node_add(nodes: dict, node: int, t: int, rank: int, val: MapEntry | None) -> None:
    hit = nodes.get(node)
    if hit is None:
        nodes[node] = ([t], [rank], [val])
    else:
        hit[0].append(t)
        hit[1].append(rank)
        hit[2].append(val)


def paint(starts: list[int], live: list[MapEntry], new: MapEntry, *, keep: bool = True) -> None:
    """Put ``new`` into a sorted, non-overlapping map list, cutting what it overlaps (maps__fixup_overlappings).

    The surviving pieces of cut maps keep their file offsets; ``keep=False`` only unmaps the range.
    """
    s, e = new.start, new.end
    i = bisect_left(starts, s)
    if i > 0 and live[i - 1].end > s:
        i -= 1
    pieces: list[MapEntry] = []
    while i < len(live) and live[i].start < e:
        old = live.pop(i)
        starts.pop(i)
        if old.start < s:
            pieces.append(dataclasses.replace(old, end=s))
        if old.end > e:
            pieces.append(dataclasses.replace(old, start=e, pgoff=old.pgoff + (e - old.start)))
    if keep:
        pieces.append(new)
    for p in pieces:
        j = bisect_left(starts, p.start)
        starts.insert(j, p.start)
        live.insert(j, p)


class CpuTimeline:
    """Who runs on one CPU (or guest VCPU) over time: sorted switch points.

    ``kinds`` per point: ``IN``, ``OUT``, ``OUT_PREEMPT`` (a CPU-wide switch-out,
    whose pid/tid is the *next* thread) or ``ITRACE_START``.  The current thread
    after a point is its (pid, tid), following perf's intel_pt rules.
    """

    IN, OUT, OUT_PREEMPT, ITRACE_START = 0, 1, 2, 3
    KIND_NAMES = ("in", "out", "out_preempt", "itrace_start")

    __slots__ = ("cpu", "times", "pids", "tids", "kinds", "_times", "_pids", "_tids")

    def __init__(self, cpu: int, points: list[tuple[int, int, int, int]]) -> None:
        self.cpu = cpu
        pts = sorted(points, key=lambda p: p[0])  # stable: file order within one time
        self.times = np.array([p[0] for p in pts], dtype=np.uint64)
        self.pids = np.array([p[1] for p in pts], dtype=np.int64)
        self.tids = np.array([p[2] for p in pts], dtype=np.int64)
        self.kinds = np.array([p[3] for p in pts], dtype=np.uint8)
        # plain lists for scalar lookups (bisect beats numpy's per-call overhead)
        self._times = [p[0] for p in pts]
        self._pids = [p[1] for p in pts]
        self._tids = [p[2] for p in pts]

    def __len__(self) -> int:
        return len(self.times)

    def index_at(self, time: int) -> int:
        """Index of the last point at or before ``time`` (-1 if none)."""
        return bisect_right(self._times, time) - 1

    def at(self, time: int) -> tuple[int, int] | None:
        i = bisect_right(self._times, time) - 1
        if i < 0:
            return None
        return self._pids[i], self._tids[i]

    def at_array(self, times: np.ndarray) -> np.ndarray:
        """Vectorised: the tid running at each time (-1 before the first point)."""
        idx = np.searchsorted(self.times, np.asarray(times, dtype=np.uint64), side="right") - 1
        out = np.full(idx.shape, -1, dtype=np.int64)
        ok = idx >= 0
        out[ok] = self.tids[idx[ok]]
        return out

    def intervals(self) -> Iterator[tuple[int, int | None, int, int]]:
        """(start, end or None, pid, tid) runs, merging points that do not change the thread."""
        n = len(self.times)
        i = 0
        while i < n:
            j = i + 1
            while j < n and self.tids[j] == self.tids[i] and self.pids[j] == self.pids[i]:
                j += 1
            yield int(self.times[i]), (int(self.times[j]) if j < n else None), int(self.pids[i]), int(self.tids[i])
            i = j


@dataclass(frozen=True, slots=True)
class AuxEvent:
    """A PERF_RECORD_AUX: the kernel wrote ``[aux_offset, aux_offset+aux_size)`` of a CPU's/thread's AUX area."""

    time: int
    cpu: int
    tid: int
    aux_offset: int
    aux_size: int
    flags: int

    @property
    def truncated(self) -> bool:
        """PERF_AUX_FLAG_TRUNCATED: the buffer was full; perf's intel_pt reports "Lost trace data" here."""
        return bool(self.flags & 0x01)

    @property
    def lost_data(self) -> bool:
        """perf 6.1 intel_pt synthesizes "Lost trace data" for TRUNCATED only (not PARTIAL/COLLISION)."""
        return bool(self.flags & 0x01)

    @property
    def partial(self) -> bool:
        return bool(self.flags & 0x04)

    @property
    def collision(self) -> bool:
        return bool(self.flags & 0x08)


@dataclass(frozen=True, slots=True)
class AuxtraceBuffer:
    """A PERF_RECORD_AUXTRACE: one chunk of trace data in the file, for a CPU or (per-thread mode) a thread."""

    record_offset: int
    data_offset: int | None
    size: int
    aux_offset: int
    reference: int
    idx: int
    tid: int
    cpu: int  # -1 in per-thread mode

    @property
    def stream(self) -> tuple[str, int]:
        return ("cpu", self.cpu) if self.cpu >= 0 else ("thread", self.tid)


class Machine:
    """One machine: the host (pid -1) or a guest (its hypervisor's pid), with its threads and maps."""

    __slots__ = ("pid", "_threads", "_thread_starts", "_maps", "kernel_maps", "cpus", "vcpu_threads", "mmap_counts")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._threads: dict[int, list[Thread]] = {}
        self._thread_starts: dict[int, list[int]] = {}
        self._maps: dict[int, MapIndex] = {}
        self.kernel_maps = MapIndex([])
        self.cpus: dict[int, CpuTimeline] = {}  # host: CPU number; guest: VCPU number
        self.vcpu_threads: dict[int, int] = {}  # guest VCPU -> host tid, when known
        self.mmap_counts: dict[int | str, int] = {}  # MMAP/MMAP2/KSYMBOL records by pid ("kernel": kernel maps)

    @property
    def is_host(self) -> bool:
        return self.pid == HOST_PID

    # -- threads ----------------------------------------------------------------------

    def threads(self) -> Iterator[Thread]:
        for tid in sorted(self._threads):
            yield from self._threads[tid]

    def thread(self, tid: int, time: int | None = None) -> Thread | None:
        """The thread with ``tid`` at ``time`` (tids are reused); the latest one when time is None."""
        lst = self._threads.get(tid)
        if not lst:
            return None
        if time is None:
            return lst[-1]
        i = bisect_right(self._thread_starts[tid], time) - 1
        return lst[max(i, 0)]

    def process(self, pid: int, time: int | None = None) -> Thread | None:
        """The main thread of process ``pid`` (perf's 'process' = its thread with tid == pid)."""
        return self.thread(pid, time)

    def process_of(self, thread: Thread, time: int | None = None) -> Thread | None:
        """The main thread of ``thread``'s process (perf's threads.process_id)."""
        if thread.pid < 0:
            return None
        return thread if thread.is_main else self.thread(thread.pid, time)

    def processes(self) -> Iterator[Thread]:
        return (t for t in self.threads() if t.is_main)

    def num_threads(self) -> int:
        return sum(len(v) for v in self._threads.values())

    # -- maps -------------------------------------------------------------------------

    def maps(self, pid: int) -> MapIndex:
        return self._maps.get(pid) or MapIndex([])

    def map_pids(self) -> list[int]:
        return sorted(self._maps)

    def map_at(self, pid: int, addr: int, time: int, *, kernel: bool | None = None) -> MapEntry | None:
        """The mapping covering ``addr`` in process ``pid`` at ``time``.

        ``kernel=None`` looks in the process's maps, then the machine's kernel
        maps; True/False restricts to one (perf chooses by the sample cpumode).
        """
        if kernel is not True:
            idx = self._maps.get(pid)
            if idx is not None:
                e = idx.at(addr, time)
                if e is not None:
                    return e
            if kernel is False:
                return None
        return self.kernel_maps.at(addr, time)

    def thread_on_cpu(self, cpu: int, time: int) -> Thread | None:
        tl = self.cpus.get(cpu)
        hit = tl.at(time) if tl is not None else None
        if hit is None or hit[1] < 0:
            return None
        return self.thread(hit[1], time)

    def __repr__(self) -> str:
        return f"Machine(pid={self.pid}, threads={self.num_threads()}, processes_with_maps={len(self._maps)})"


@dataclass(frozen=True, slots=True)
class LostEvent:
    time: int
    cpu: int
    kind: str  # "LOST" (sideband records) or "LOST_SAMPLES"
    count: int


@dataclass(frozen=True)
class Sideband:
    """Everything the records say besides samples and trace data; read-only after build."""

    machines: dict[int, Machine]
    time_conv: TimeConversion | None = None
    aux_events: dict[int, list[AuxEvent]] = field(default_factory=dict)  # by cpu (-1: per-thread)
    auxtrace: list[AuxtraceBuffer] = field(default_factory=list)  # file order
    lost: list[LostEvent] = field(default_factory=list)
    per_cpu_mmaps: bool | None = None
    id_index: dict[int, tuple[int, int]] = field(default_factory=dict)  # sample id -> (machine_pid, vcpu)
    first_time: int | None = None
    last_time: int | None = None

    @property
    def host(self) -> Machine:
        return self.machines[HOST_PID]

    def machine(self, pid: int = HOST_PID) -> Machine | None:
        return self.machines.get(pid)

    def guests(self) -> list[Machine]:
        return [m for pid, m in sorted(self.machines.items()) if pid != HOST_PID]

    # -- shortcuts on the host (or a given machine) -------------------------------------

    def thread(self, tid: int, time: int | None = None, machine: int = HOST_PID) -> Thread | None:
        m = self.machines.get(machine)
        return m.thread(tid, time) if m else None

    def map_at(self, pid: int, addr: int, time: int, machine: int = HOST_PID, *, kernel: bool | None = None) -> MapEntry | None:
        m = self.machines.get(machine)
        return m.map_at(pid, addr, time, kernel=kernel) if m else None

    def tid_on_cpu(self, cpu: int, time: int, machine: int = HOST_PID) -> tuple[int, int] | None:
        """(pid, tid) perf considers current on ``cpu`` at perf time ``time``, or None."""
        m = self.machines.get(machine)
        tl = m.cpus.get(cpu) if m else None
        return tl.at(time) if tl is not None else None

    def thread_on_cpu(self, cpu: int, time: int, machine: int = HOST_PID) -> Thread | None:
        m = self.machines.get(machine)
        return m.thread_on_cpu(cpu, time) if m else None

    def thread_on_cpu_tsc(self, cpu: int, tsc: int, machine: int = HOST_PID) -> Thread | None:
        """Like :meth:`thread_on_cpu` for a TSC value of the trace."""
        if self.time_conv is None:
            raise ValueError("no TIME_CONV/AUXTRACE_INFO clock in this recording: TSC cannot be converted")
        return self.thread_on_cpu(cpu, self.time_conv.tsc_to_perf_time(tsc), machine)

    def vcpu_of_host_thread(self, tid: int, time: int | None = None) -> tuple[int, int] | None:
        """(hypervisor pid, VCPU number) when host thread ``tid`` is a KVM VCPU thread ("CPU n/KVM"),
        whether or not the guest's own sideband was merged; else None."""
        th = self.host.thread(tid, time)
        if th is None or th.pid < 0:
            return None
        for c in reversed(th.comms if time is None else th.comms[: th._visible(time)]):
            hit = VCPU_COMM.match(c.comm)
            if hit:
                return th.pid, int(hit.group(1))
        return None

    def has_vms(self) -> bool:
        """A host running VCPU threads, or guest sideband merged in (ID_INDEX entries of a guest machine):
        the export splits samples between machines (perf's VM split)."""
        return bool(self.hypervisors() or any(mp for mp, _v in (self.id_index or {}).values()))

    def hypervisors(self) -> dict[int, dict[int, int]]:
        """Every host process with KVM VCPU threads: {pid: {vcpu: host tid}}."""
        out: dict[int, dict[int, int]] = {}
        for th in self.host.threads():
            for c in th.comms:
                hit = VCPU_COMM.match(c.comm)
                if hit and th.pid >= 0:
                    out.setdefault(th.pid, {}).setdefault(int(hit.group(1)), th.tid)
        return out

    def vcpu_thread(self, machine_pid: int, vcpu: int, time: int | None = None) -> Thread | None:
        """The host thread that runs VCPU ``vcpu`` of guest ``machine_pid`` ("CPU n/KVM" of that process)."""
        g = self.machines.get(machine_pid)
        tid = g.vcpu_threads.get(vcpu) if g is not None else None
        return None if tid is None else self.host.thread(tid, time)

    def thread_for_stream(self, stream: tuple[str, int], time: int) -> Thread | None:
        """Who the trace of an AUX stream belongs to at ``time``: the thread itself in per-thread
        mode (("thread", tid)), else whoever ran on the CPU (("cpu", n))."""
        kind, key = stream
        if kind == "thread":
            return self.host.thread(key, time)
        return self.thread_on_cpu(key, time)

    def cpus(self) -> list[int]:
        return sorted(self.host.cpus)

    def aux_streams(self) -> dict[tuple[str, int], list[AuxtraceBuffer]]:
        """AUXTRACE buffers grouped by stream (("cpu", n) or ("thread", tid)), in file order."""
        out: dict[tuple[str, int], list[AuxtraceBuffer]] = {}
        for b in self.auxtrace:
            out.setdefault(b.stream, []).append(b)
        return out
