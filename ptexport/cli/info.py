"""``ptexport info TRACE [--json] [--strict]``: header, events, record counts, AUX sizes and sideband of a
recording.

A recording cut anywhere (perf killed, disk full) is described as far as it goes, with a ``# CUT`` section
(``"cut"`` in JSON, None for a whole file) saying where the file ends and inside which part (a data record,
an AUXTRACE payload, the feature sections), and one warning line on stderr; exit 0. A file cut before any
event attr is known (inside the header, the attrs or their ids; a pipe cut inside its first HEADER_ATTR) is
a one-line error. ``--strict`` makes every cut an error.
"""

from __future__ import annotations

import json

from ptexport.cli.dump_branches import warn_cut
from ptexport.errors import TruncatedError
from ptexport.perfdata import open_perf_data
from ptexport.sideband.summary import AUXTRACE_INFO_FIELDS, info_report

NAME = "info"
HELP = "describe a perf.data recording: header, events, record counts, AUX data, threads and maps"

# text output lists at most this many processes per machine (JSON has all)
MAX_PROCESSES_TEXT = 40
MAX_BUILD_IDS_TEXT = 10


def add_arguments(parser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="perf.data file, --kcore directory, or - for a pipe-mode stream on stdin")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--strict", action="store_true",
                        help="stop with an error on a cut recording (perf killed, disk full) instead of describing "
                             "what is before the cut")


def run(args, out) -> int:
    with open_perf_data(args.trace, salvage=not args.strict) as pd:
        report = info_report(pd)
        cut = pd.cut
        if cut is not None and not pd.attrs:
            raise TruncatedError(f"the file is cut {cut.where}: no event attr before the cut, nothing to describe",
                                 source=cut.source, offset=cut.offset, what="cut")
        if not pd.attrs:  # a pipe-mode stream that ends at a record boundary before its first HEADER_ATTR
            raise TruncatedError("no HEADER_ATTR record before the end of the stream (cut?): nothing to describe",
                                 source=pd.path, offset=pd.header.get("data_offset", 16), what="records")
        report["cut"] = None if cut is None else cut.as_dict()
        warn_cut(args.trace, pd, "describing")
    if args.json:
        json.dump(report, out, indent=2, sort_keys=False)
        out.write("\n")
    else:
        for line in render_text(report):
            out.write(line + "\n")
    return 0


def _feature_text(name: str, value) -> str:
    if isinstance(value, list):
        if value and all(isinstance(v, (str, int)) for v in value):
            return " ".join(str(v) for v in value)
        return f"{len(value)} entries"
    if isinstance(value, dict):
        if value and all(isinstance(v, (str, int, float, bool)) or v is None for v in value.values()):
            return ", ".join(f"{k} = {v}" for k, v in value.items())
        return f"{len(value)} entries"
    return str(value)


def _terms_text(terms: dict) -> str:
    parts = []
    for k, v in terms.items():
        if k == "unknown":
            parts.append(f"unknown={v:#x}")
        elif k in ("mtc_period", "cyc_thresh", "psb_period"):
            parts.append(f"{k}={v}")
        else:
            parts.append(k)
    return ",".join(parts)


def render_text(r: dict):
    mode = "pipe mode" if r["pipe_mode"] else "file mode"
    yield f"# {r['file']} ({mode})"
    if r.get("kcore_dir"):
        yield f"# kcore directory: {r['kcore_dir']}"
    cut = r.get("cut")
    if cut:
        yield "# CUT: the file is cut (perf record killed, or the disk full): what follows is what is before the cut"
        yield f"  ends at offset   : {cut['offset']} ({cut['offset']:#x})"
        yield f"  cut              : {cut['where']}"
        yield f"  read before it   : {cut['records_before']} records, {cut['aux_bytes']} AUX bytes"
        yield f"  strict reader    : {cut['cause']}"
    yield "# header"
    for name, value in r["features"].items():
        if name == "build_id" and isinstance(value, list):
            yield f"  {name:<14}: {len(value)} build-ids"
            for e in value[:MAX_BUILD_IDS_TEXT]:
                if isinstance(e, dict):
                    yield f"    {e.get('build_id', '')}  pid {e.get('pid', '')}  {e.get('filename', '')}"
            if len(value) > MAX_BUILD_IDS_TEXT:
                yield f"    ... {len(value) - MAX_BUILD_IDS_TEXT} more (see --json)"
            continue
        yield f"  {name:<14}: {_feature_text(name, value)}"
    if r.get("unknown_features"):
        yield f"  unknown features: {r['unknown_features']}"
    yield "# events"
    for ev in r["events"]:
        line = (f"  {ev['name'] or '?'}: type {ev['type']}" + (f" ({ev['pmu']})" if ev.get("pmu") else "")
                + f", config {ev['config']:#x}")
        if "intel_pt" in ev:
            line += f" [{_terms_text(ev['intel_pt'])}]"
        line += f", sample_type {ev['sample_type']}, ids {ev['ids']}"
        yield line
        if ev["flags"]:
            yield f"      flags: {' '.join(ev['flags'])}"
    if r["auxtrace_info"]:
        yield "# AUXTRACE_INFO"
        info = r["auxtrace_info"]
        shown = set()
        for key, label in AUXTRACE_INFO_FIELDS:
            if key in info:
                v = info[key]
                if isinstance(v, bool):
                    v = int(v)  # perf prints flags as numbers
                elif key.endswith("_bit") or key == "mtc_freq_bits":
                    v = f"{v:#x}" if isinstance(v, int) else v
                yield f"  {label:<20}{v}"
                shown.add(key)
        for key, v in info.items():
            if key not in shown and not isinstance(v, (list, dict)):
                yield f"  {key:<20}{v}"
    if r["time_conv"]:
        tc = r["time_conv"]
        yield "# TIME_CONV"
        for k, v in tc.items():
            if v is not None:
                yield f"  {k:<20}{v}"
    yield "# records (perf report --stats)"
    for name, n in r["records"].items():
        yield f"  {name:>16} events: {n:>10}"
    if r["aux_bytes"]:
        yield f"# AUX data: {r['aux_buffers']} AUXTRACE buffers, {sum(r['aux_bytes'].values())} bytes"
        for key, n in r["aux_bytes"].items():
            yield f"  {key:<12}{n:>12} bytes"
    sb = r["sideband"]
    yield "# sideband"
    t0, t1 = sb["time_range"]
    if t0 is not None:
        yield f"  time range: {t0} .. {t1} ({(t1 - t0) / 1e9:.6f} s)"
    if sb.get("tsc_range"):
        yield f"  TSC range:  {sb['tsc_range'][0]:#x} .. {sb['tsc_range'][1]:#x}"
    for pid, vcpus in sb.get("hypervisors", {}).items():
        yield f"  KVM hypervisor pid {pid}: " + ", ".join(f"VCPU {v} = tid {t}" for v, t in vcpus.items())
    for m in sb["machines"]:
        yield (f"  machine {m['pid']} ({m['kind']}): {m['processes']} processes, {m['threads']} threads, "
               f"{m['comms']} comms, {m['mmaps']} mmaps, {m['kernel_mmaps']} kernel mmaps")
        procs = m["process_list"]
        for p in procs[:MAX_PROCESSES_TEXT]:
            names = ",".join(c for c in p["comms"] if c != p["comm"])
            yield (f"    pid {p['pid']:>7} {p['comm']:<16} threads {p['threads']:>4} mmaps {p['mmaps']:>5}"
                   + (f"  (also {names})" if names else ""))
        if len(procs) > MAX_PROCESSES_TEXT:
            yield f"    ... {len(procs) - MAX_PROCESSES_TEXT} more processes (see --json)"
        for cpu, c in m["cpus"].items():
            yield (f"    cpu {cpu}: {c['switch_in']} switch-in, {c['switch_out']} switch-out "
                   f"({c['preempted']} preempted), {c['itrace_start']} itrace-start, {c['threads']} threads")
    for cpu, a in sb["aux_records"].items():
        yield f"  AUX records cpu {cpu}: {a['records']}, {a['bytes']} bytes, {a['truncated']} truncated"
    for lost in sb["lost"]:
        yield f"  {lost['kind']} cpu {lost['cpu']} at {lost['time']}: {lost['count']}"
