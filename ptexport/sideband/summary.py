"""What ``ptexport info`` reports about a recording, as a plain (JSON-able) dict.

:func:`info_report` reads the records once: it counts them by type under the
names ``perf report --stats`` prints, sums the AUX bytes per CPU (or thread,
in per-thread mode), and builds the sideband model on the way for the
threads/comms/maps summary.  Rendering (text or JSON) is the CLI's job.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from ptexport.perfdata.attr import perf_config_terms, perf_event_name
from ptexport.perfdata.constants import RECORD_NAMES, SampleType
from ptexport.sideband.builder import SidebandBuilder, finish_from_perf_data
from ptexport.sideband.model import END_OF_TIME, HOST_PID, KERNEL_MAPS, CpuTimeline, Sideband

#: perf's own display names for user record types where they differ from the enum names
_PERF_NAME_OVERRIDES = {"HEADER_ATTR": "ATTR", "HEADER_EVENT_TYPE": "EVENT_TYPE",
                        "HEADER_TRACING_DATA": "TRACING_DATA", "HEADER_BUILD_ID": "BUILD_ID",
                        "HEADER_FEATURE": "FEATURE"}

#: sample_type bits in perf's order and spelling (perf report --header-only -I)
_SAMPLE_TYPE_NAMES = [(int(b), b.name) for b in SampleType]

#: AUXTRACE_INFO fields in the order (and with the labels) perf script -D prints them
AUXTRACE_INFO_FIELDS = (
    ("pmu_type", "PMU Type"),
    ("time_shift", "Time Shift"),
    ("time_mult", "Time Muliplier"),
    ("time_zero", "Time Zero"),
    ("cap_user_time_zero", "Cap Time Zero"),
    ("tsc_bit", "TSC bit"),
    ("noretcomp_bit", "NoRETComp bit"),
    ("have_sched_switch", "Have sched_switch"),
    ("snapshot_mode", "Snapshot mode"),
    ("per_cpu_mmaps", "Per-cpu maps"),
    ("mtc_bit", "MTC bit"),
    ("mtc_freq_bits", "MTC freq bits"),
    ("tsc_ctc_ratio_n", "TSC:CTC numerator"),
    ("tsc_ctc_ratio_d", "TSC:CTC denominator"),
    ("cyc_bit", "CYC bit"),
    ("max_non_turbo_ratio", "Max non-turbo ratio"),
    ("filter_str_len", "Filter string len."),
    ("filter", "Filter string"),
)


def record_type_name(rtype: int) -> str:
    """The name perf prints for a record type (``perf report --stats``)."""
    name = RECORD_NAMES.get(int(rtype))
    if name is None:
        return f"UNKNOWN_{int(rtype)}"
    return _PERF_NAME_OVERRIDES.get(name, name)


def sample_type_names(sample_type: int) -> str:
    return "|".join(n for bit, n in _SAMPLE_TYPE_NAMES if sample_type & bit)


def jsonable(v: Any) -> Any:
    """Plain JSON values from the reader's objects (dataclasses, slotted classes, bytes, enums)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return int(v) if isinstance(v, enum.Enum) and not isinstance(v, bool) else v
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        if hasattr(v, "_asdict"):
            return {k: jsonable(x) for k, x in v._asdict().items()}
        return [jsonable(x) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
    slots = [s for c in type(v).__mro__ for s in getattr(c, "__slots__", ())]
    if slots:
        return {s: jsonable(getattr(v, s)) for s in slots if not s.startswith("_") and hasattr(v, s)}
    if hasattr(v, "__dict__"):
        return {k: jsonable(x) for k, x in vars(v).items() if not k.startswith("_")}
    return str(v)


def _auxtrace_info_dict(info: Any) -> dict[str, Any] | None:
    if info is None:
        return None
    out: dict[str, Any] = {}
    for key, _label in AUXTRACE_INFO_FIELDS:
        if hasattr(info, key):
            out[key] = jsonable(getattr(info, key))
    extra = jsonable(info)
    if isinstance(extra, dict):
        for k, v in extra.items():
            out.setdefault(k, v)
    return out


def _events(pd: Any) -> list[dict[str, Any]]:
    pmus = {}
    try:
        pmus = {int(k): str(v) for k, v in (pd.features.get("pmu_mappings") or {}).items()}
    except (AttributeError, TypeError, ValueError):
        pmus = {}
    pt_type = getattr(getattr(pd, "auxtrace_info", None), "pmu_type", None)
    out = []
    for attr in pd.attrs:
        pmu = pmus.get(int(attr.type))
        if pmu is None and pt_type is not None and int(attr.type) == int(pt_type):
            pmu = "intel_pt"
        ev: dict[str, Any] = {
            "name": attr.name or perf_event_name(attr),  # perf's name for a nameless attr (pipe mode)
            "type": int(attr.type),
            "pmu": pmu,
            "config": int(attr.config),
            "sample_period": int(attr.sample_period),
            "sample_type": sample_type_names(int(attr.sample_type)),
            "read_format": int(attr.read_format),
            "flags": attr.flag_names() if hasattr(attr, "flag_names") else [],
            "ids": [int(i) for i in attr.ids],
        }
        if pmu == "intel_pt":
            ev["intel_pt"] = perf_config_terms(attr, "intel_pt")
        out.append(ev)
    return out


def _sideband_summary(sb: Sideband, *, max_processes: int | None) -> dict[str, Any]:
    machines = []
    for mpid in sorted(sb.machines):
        m = sb.machines[mpid]
        threads = list(m.threads())
        procs = []
        for p in m.processes():
            members = [t for t in threads if t.pid == p.pid]
            ec = p.exec_comm()
            procs.append({
                "pid": p.pid,
                "comm": ec.comm if ec else p.comm_name(),
                "comms": sorted({c.comm for t in members for c in t.comms if not c.inherited}),
                "threads": len(members),
                "mmaps": m.mmap_counts.get(p.pid, 0),
                "maps_at_end": len(m.maps(p.pid).live_at(END_OF_TIME - 1)),
                "start": p.start if p.start_known else None,
                "end": p.end,
            })
        cpus = {}
        for cpu, tl in sorted(m.cpus.items()):
            kinds = tl.kinds.tolist()
            cpus[str(cpu)] = {
                "points": len(tl),
                "switch_in": kinds.count(CpuTimeline.IN),
                "switch_out": kinds.count(CpuTimeline.OUT) + kinds.count(CpuTimeline.OUT_PREEMPT),
                "preempted": kinds.count(CpuTimeline.OUT_PREEMPT),
                "itrace_start": kinds.count(CpuTimeline.ITRACE_START),
                "threads": len(set(tl.tids.tolist())),
            }
        machines.append({
            "pid": mpid,
            "kind": "host" if mpid == HOST_PID else "guest",
            "threads": len(threads),
            "processes": len(procs),
            "comms": sum(len(t.comms) for t in threads),
            "mmaps": sum(n for p, n in m.mmap_counts.items() if p != KERNEL_MAPS),
            "kernel_mmaps": m.mmap_counts.get(KERNEL_MAPS, 0),
            "process_list": procs if max_processes is None else procs[:max_processes],
            "cpus": cpus,
        })
    aux_events = {str(cpu): {"records": len(evs), "bytes": sum(e.aux_size for e in evs),
                             "truncated": sum(1 for e in evs if e.truncated)}
                  for cpu, evs in sorted(sb.aux_events.items())}
    tsc_range = None
    if sb.time_conv is not None and sb.first_time is not None:
        tsc_range = [sb.time_conv.perf_time_to_tsc(sb.first_time), sb.time_conv.perf_time_to_tsc(sb.last_time)]
    return {
        "machines": machines,
        "hypervisors": {str(pid): {str(v): t for v, t in sorted(vc.items())} for pid, vc in sorted(sb.hypervisors().items())},
        "time_range": [sb.first_time, sb.last_time],
        "tsc_range": tsc_range,
        "aux_records": aux_events,
        "lost": [{"time": e.time, "cpu": e.cpu, "kind": e.kind, "count": e.count} for e in sb.lost],
        "time_conv": sb.time_conv.as_dict() if sb.time_conv else None,
    }


def info_report(pd: Any, *, max_processes: int | None = None) -> dict[str, Any]:
    """Everything ``ptexport info`` shows, from an open perf.data (one pass over its records)."""
    counts: dict[int, int] = {}
    aux_bytes: dict[str, int] = {}
    aux_buffers = 0
    builder = SidebandBuilder()
    builder.set_time_conv(getattr(pd, "time_conv", None))
    builder.set_auxtrace_info(getattr(pd, "auxtrace_info", None))
    for rec in pd.records():
        t = int(rec.type)
        counts[t] = counts.get(t, 0) + 1
        if t == 71:  # AUXTRACE
            cpu = int(rec.cpu)
            key = f"cpu {cpu}" if cpu not in (-1, 0xFFFFFFFF) else f"thread {int(rec.tid)}"
            aux_bytes[key] = aux_bytes.get(key, 0) + int(rec.size)
            aux_buffers += 1
        builder.add(rec)
    finish_from_perf_data(builder, pd)
    sb = builder.finish()
    # the reader's tally also counts COMPRESSED records themselves (perf does), which records() expands
    stats = getattr(pd, "stats", None)
    if stats is not None and hasattr(stats, "by_type"):
        counts = {int(t): int(n) for t, n in stats.by_type().items()}
    records = {record_type_name(t): n for t, n in sorted(counts.items())}
    features = {}
    for k, v in (getattr(pd, "features", None) or {}).items():
        features[str(k)] = jsonable(v)
    return {
        "file": str(getattr(pd, "path", "")),
        "pipe_mode": bool(getattr(pd, "is_pipe", False)),
        "kcore_dir": jsonable(getattr(pd, "kcore_dir", None)),
        "features": features,
        "unknown_features": jsonable(getattr(pd, "unknown_features", None)) or [],
        "events": _events(pd),
        "auxtrace_info": _auxtrace_info_dict(getattr(pd, "auxtrace_info", None)),
        "time_conv": jsonable(getattr(pd, "time_conv", None)),
        "records": {"TOTAL": sum(counts.values()), **records},
        "aux_bytes": aux_bytes,
        "aux_buffers": aux_buffers,
        "sideband": _sideband_summary(sb, max_processes=max_processes),
    }
