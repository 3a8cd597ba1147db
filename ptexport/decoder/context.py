"""What a perf decoder backend needs from the session: one typed interface for both backends.

The session (:class:`ptexport.session.perfsession.PerfSession`) builds a
:class:`DecodeContext` and hands it to a backend
(:mod:`ptexport.decoder.reference.queue` or
:mod:`ptexport.decoder.compiled.decoder`, picked by
:mod:`ptexport.decoder.backend`); a backend reads the recording's options,
time conversion, sideband, code and filters through it and nothing else.

Also here, because both backends use them: :class:`MapLookup` (the code
walker's view of memory: the maps of a process at a perf time, kcore, guest
code) and :class:`CpuTimeline` (who is current on a CPU, keyed by TSC).
See docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ptexport.decoder.codewalk import CodeObjects

# The perf time at which a timeless session's maps are read: perf decodes timeless queues late (a
# per-thread queue at its thread's EXIT, the others at the end), when every map has been seen.
TIMELESS_MAP_TIME = 1 << 62

if TYPE_CHECKING:  # types only
    from ptexport.decoder.filters import QueueTimeFilter
    from ptexport.decoder.reference.decoder import Buffer, Params
    from ptexport.samples.itrace import ItraceOptions


@dataclass
class CpuTimeline:
    """Who is current on a CPU, keyed by TSC (perf compares in TSC)."""

    tsc: np.ndarray
    pid: np.ndarray
    tid: np.ndarray

    def at(self, tsc: int) -> tuple[int, int]:
        i = int(np.searchsorted(self.tsc, np.uint64(tsc), side="right")) - 1
        if i < 0:
            return -1, -1
        return int(self.pid[i]), int(self.tid[i])


class MapLookup:
    """The walker's view of memory: the maps of process ``pid`` at perf time ``time``.

    Kernel code comes from the recording's kcore copy when there is one (perf loads
    kcore in place of the kernel map).  ``guest(ip, kernel)`` reads non-root code:
    the guest machine of host process ``pid`` (see decoder/guest.py), whose user
    code is that of guest process ``guest_pid`` (-1: unknown, unreadable).
    ``guests`` (a ``GuestSpaces``) and ``vcpus`` (a ``VcpuAttribution``) are the
    guest views the compiled backend keys its guest block tables by.
    """

    __slots__ = ("machine", "objects", "build_ids", "pid", "tid", "time", "kcore", "guests", "vcpus")

    def __init__(self, machine: Any, objects: CodeObjects, build_ids: dict[str, bytes],
                 kcore: Any = None, guests: Any = None) -> None:
        self.machine = machine
        self.objects = objects
        self.build_ids = build_ids
        self.pid = -1
        self.time = 0
        self.kcore = kcore
        self.guests = guests
        self.tid = -1  # the host thread (a VCPU thread when guest code runs)
        self.vcpus: Any = None  # guest.VcpuAttribution with guest sideband: the guest thread on the VCPU

    def __call__(self, ip: int, kernel: bool):
        if self.pid < 0 and not kernel:
            return None
        if kernel and self.kcore is not None:
            return self.kcore.at(ip)
        e = self.machine.map_at(self.pid, ip, self.time, kernel=kernel)
        if e is None:
            return None
        return e.start, e.end, e.pgoff, self.objects.get(e.filename, e.build_id or self.build_ids.get(e.filename))

    def guest(self, ip: int, kernel: bool):
        g = self.guests
        if g is None:
            return None
        mpid = g.machine_pid(self.pid)
        if kernel:
            code = g.kcore(mpid)
            if code is not None:
                return code.at(ip)
        guest_pid = -1
        if not kernel:
            if self.vcpus is None or not self.vcpus.enabled:
                return None  # perf: guest user code needs the guest thread (guest sideband)
            guest_pid = self.vcpus.guest_pid_at_time(self.tid, self.time)
            if guest_pid < 0:
                return None
        m = g.sb.machine(mpid)
        if m is None:
            return None
        e = m.map_at(guest_pid, ip, self.time, kernel=kernel)
        if e is None:
            return None
        return e.start, e.end, e.pgoff, self.objects.get(e.filename, e.build_id or self.build_ids.get(e.filename))


def queue_tid(bufs: list[Any]) -> int:
    """perf's ``queue->tid`` of an AUX queue: its first AUXTRACE buffer's tid (-1: none, as ``perf record
    -a`` writes them; a CPU queue of a workload's recording has the workload's)."""
    tid = getattr(bufs[0], "tid", -1) if bufs else -1
    return tid if isinstance(tid, int) and tid >= 0 else -1


@dataclass(frozen=True)
class DecodeContext:
    """Everything a decoder backend reads of a session, built by ``PerfSession.decode_context()``.

    Values are fixed for the session; the callables are the session's (they
    share its object-id registry and its sideband indexes).
    """

    params: Params  # decoder parameters derived from AUXTRACE_INFO and the intel_pt attr
    itrace: ItraceOptions  # --itrace
    timeless: bool  # no TSC, or --itrace=Z: perf's timeless decoding
    est_tsc: bool  # perf's est_tsc (a branch into user space dated by the decoder's estimate)
    kernel_start: int  # perf's kernel_start: code at or above is the kernel's
    branches_filter: int  # perf's branches_filter (--itrace=c / r): sample flags a branch needs; 0: all
    event_trace: bool  # AUXTRACE_INFO cap_event_trace: RFLAGS.IF in every sample's flags
    evt_attr: bool  # the intel_pt attr has event_trace=1: 'evt' samples are made
    sb: Any  # the sideband model: thread(tid), machine(pid), guests(), host.cpus
    tc: Any  # TIME_CONV: tsc_to_perf_time(_array), perf_time_to_tsc
    buffers: Callable[[list[Any]], list[Buffer]]  # a queue's AUXTRACE records -> decoder buffers
    new_lookup: Callable[[], MapLookup]  # a fresh view of memory for one queue's walker
    cpu_timeline: Callable[[int], CpuTimeline]  # who is current on a CPU, by TSC
    obj_id: Callable[[str], int]  # the session's id of an object (by name) whose code read failed
    time_filter: Callable[[], QueueTimeFilter | None]  # a queue's --time filter (None: no ranges)
    perf_time: Callable[[int], int]  # TSC -> perf time (0 in timeless sessions)
    have_sched_switch: int = 0  # AUXTRACE_INFO's: the recording has context switches (1: sched_switch)

    def timeless_end(self, queue_tid: int) -> int | None:
        """The perf time a timeless queue is decoded at: its thread's EXIT (perf decodes the queues whose
        thread is ``queue_tid`` when that thread exits: intel_pt_process_timeless_queues), None for the
        end of the recording (no thread, or one that does not exit)."""
        if queue_tid < 0:
            return None
        t = self.sb.thread(queue_tid)
        end = getattr(t, "end", None) if t is not None else None
        return end if end is not None and end < TIMELESS_MAP_TIME else None

    def end_who(self, cpu: int, queue_tid: int = -1) -> tuple[int, int]:
        """(pid, tid) of a timeless CPU queue's samples ((-1, -1): none): perf decodes the queue once, at
        :meth:`timeless_end`, and follows no context switch (intel_pt_set_pid_tid_cpu).  A recording with
        context switches, or a queue of no thread (``queue_tid``: its first AUXTRACE buffer's tid, -1 for
        ``perf record -a``), has the thread current on ``cpu`` then; else the queue's thread."""
        if queue_tid < 0 or self.have_sched_switch:
            tl = self.sb.host.cpus.get(cpu)
            if tl is None or not len(tl):
                return -1, -1
            end = self.timeless_end(queue_tid)
            if end is None:
                return int(tl.pids[-1]), int(tl.tids[-1])
            who = tl.at(end)
            return (int(who[0]), int(who[1])) if who is not None else (-1, -1)
        t = self.sb.thread(queue_tid)
        return (t.pid if t is not None else -1), queue_tid
