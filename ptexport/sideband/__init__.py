"""Sideband model: machines, threads, comms, memory maps and per-CPU timelines over time.

    from ptexport.sideband import build_sideband, sideband_from_perf_data
    sb = sideband_from_perf_data(pd)            # or build_sideband(records, time_conv=..., auxtrace_info=...)
    sb.thread_on_cpu(3, time)                   # perf's current thread on CPU 3 at perf time
    sb.thread_on_cpu_tsc(3, tsc)                # same for a TSC value of the trace
    sb.map_at(pid, addr, time)                  # MapEntry covering addr in process pid
    sb.host.thread(tid, time).comm_at(time)     # names over time; exec_comm() as perf's export uses
    sb.time_conv.tsc_to_perf_time(tsc)          # exact perf arithmetic
    sb.aux_streams()                            # AUXTRACE buffers per ("cpu", n) / ("thread", tid)
    sb.thread_for_stream(stream, time)          # whose trace a stream carries at a time
    sb.aux_events[cpu]                          # PERF_RECORD_AUX (truncated -> "Lost trace data")
    sb.machines / sb.guests()                   # host pid -1, guests by hypervisor pid
    sb.hypervisors(), sb.vcpu_of_host_thread()  # KVM "CPU n/KVM" threads -> (pid, vcpu)

The model is built in one pass and read-only afterwards; queries bisect.
"""

from ptexport.sideband.builder import SidebandBuilder, build_sideband, sideband_from_perf_data
from ptexport.sideband.model import (
    DEFAULT_GUEST_PID,
    END_OF_TIME,
    HOST_PID,
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
)
from ptexport.sideband.timeconv import TimeConversion

__all__ = [
    "DEFAULT_GUEST_PID",
    "END_OF_TIME",
    "HOST_PID",
    "VCPU_COMM",
    "AuxEvent",
    "AuxtraceBuffer",
    "Comm",
    "CpuTimeline",
    "LostEvent",
    "Machine",
    "MapEntry",
    "MapIndex",
    "Sideband",
    "SidebandBuilder",
    "Thread",
    "TimeConversion",
    "build_sideband",
    "sideband_from_perf_data",
]
