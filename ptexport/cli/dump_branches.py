"""``ptexport dump branches TRACE``: perf's synthesized samples, one per line.

The default lines read like ``perf script -F pid,tid,cpu,time,ip,addr,flags
--ns``; ``-F LIST`` prints perf script's ``-F LIST --ns`` lines for a subset of
machine_pid,vcpu,pid,tid,cpu,time,ip,addr,flags,ipc (ipc: a blank, a tab and
``IPC: 1.14 (16/14)`` on samples with instruction and cycle counts); ``--csv``
writes ``time,cpu,pid,tid,ip,addr,flags`` (perf time in ns, flags as perf's bit
values) for scripts; ``--count`` decodes and prints only the number of samples
(for benchmarks).
"""

from __future__ import annotations

import csv

import numpy as np

from ptexport.errors import UsageError

NAME = "branches"
HELP = "decode a perf.data trace into perf's branch samples (like perf script --itrace)"


def add_arguments(parser) -> None:
    parser.add_argument("trace", help="perf.data file, pipe-mode file, directory, or - for stdin")
    parser.add_argument("--itrace", default="be", metavar="OPTS",
                        help="perf's --itrace letters (default: be = branches and errors)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="CSV: time,cpu,pid,tid,ip,addr,flags")
    out.add_argument("--count", action="store_true", help="print only the number of samples and errors")
    out.add_argument("-F", "--fields", metavar="LIST",
                     help="perf script's -F for the text lines: a comma-separated subset of "
                          f"{','.join(FIELDS)} (printed in perf's order; default: "
                          "pid,tid,cpu,time,ip,addr,flags); ipc prints ' \\t IPC: x.yy (insns/cycles) ' "
                          "on samples that have a cycle count")
    parser.add_argument("--cpu", metavar="LIST", help="only these CPUs (e.g. 0,2-3)")
    add_filter_arguments(parser)
    parser.add_argument("--symfs", metavar="DIR", help="look for binaries under DIR")
    parser.add_argument("--buildid-dir", metavar="DIR", help="build-id cache (default ~/.debug)")
    parser.add_argument("--guestkallsyms", metavar="FILE",
                        help="the default guest's kallsyms; its kcore is read beside it (perf's option)")
    parser.add_argument("--guest-kcore", metavar="DIR", help="the default guest's kcore_dir (kallsyms, kcore)")
    add_guest_data_argument(parser)
    add_strict_argument(parser)
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="decode in N worker processes (default: all cores for --count, else 1: in this "
                             "process); output streams in bounded memory either way")


# perf script -F names this command prints (perf prints them in its own order, not the list's)
FIELDS = ("machine_pid", "vcpu", "pid", "tid", "cpu", "time", "ip", "addr", "flags", "ipc")


def parse_fields(text: str) -> frozenset[str]:
    """``-F LIST`` as a set of field names; a name outside :data:`FIELDS` is a usage error."""
    names = [f.strip() for f in text.split(",")]
    bad = [f for f in names if f not in FIELDS]
    if bad or not text.strip():
        raise UsageError(f"-F {text!r}: unknown field {(bad or [''])[0]!r} (known: {','.join(FIELDS)})")
    return frozenset(names)


def add_strict_argument(parser) -> None:
    """``--strict``: a cut recording is an error (shared with the export command)."""
    parser.add_argument("--strict", action="store_true",
                        help="stop with an error on a cut recording (perf killed, disk full) instead of reading "
                             "the records and AUX data before the cut")


def warn_cut(trace: str, pd, verb: str = "exporting") -> None:
    """The one line saying where a salvaged recording was cut (nothing if it was whole)."""
    import sys

    cut = getattr(pd, "cut", None)
    if cut is not None:
        where = f"; cut {cut.where}" if getattr(cut, "where", "") else ""
        print(f"ptexport: {trace} cut at offset {cut.offset}: {verb} the {cut.records} records and "
              f"{cut.aux_bytes} AUX bytes before it{where}", file=sys.stderr)


def add_guest_data_argument(parser) -> None:
    """``--guest-data FILE,PID[,OFFSET[,SCALE]]`` (shared with the export command)."""
    parser.add_argument("--guest-data", action="append", metavar="FILE,PID[,OFFSET[,SCALE]]",
                        help="merge a guest's own perf.data (its threads, comms, maps, context switches) as "
                             "perf inject --guest-data does: PID is the hypervisor process, whose 'CPU n/KVM' "
                             "threads run the VCPUs; host TSC = (guest TSC - OFFSET) / SCALE; a FILE directory's "
                             "kcore_dir is the guest kernel; repeat for more guests")


def add_filter_arguments(parser, export: bool = False) -> None:
    """perf script's sample filters, in perf's words (shared with the export command)."""
    kept = "errors, threads, comms and context switches are kept, as perf's exporter keeps them" if export \
        else "errors are kept"
    parser.add_argument("--time", metavar="RANGES",
                        help="only samples in these perf time ranges: START,STOP in seconds (either side may be "
                             "empty; several ranges separated by blanks), or percent slices of the recording "
                             "such as 10%%/2 or 0%%-10%%,30%%-40%% (these need the header's first/last sample "
                             "time); perf script --time: the trace is decoded from the last PSB before each "
                             f"start to the last end; {kept}")
    parser.add_argument("--pid", metavar="LIST",
                        help=f"only samples of these process ids (comma-separated; {kept})")
    parser.add_argument("--tid", metavar="LIST",
                        help=f"only samples of these thread ids (comma-separated; {kept})")


def filter_config(args) -> dict:
    """DecodeConfig/ExportConfig keywords for :func:`add_filter_arguments`' options."""
    from ptexport.decoder.filters import parse_id_list

    return {"time": args.time or None,
            "pids": parse_id_list(args.pid, "pid") if args.pid else None,
            "tids": parse_id_list(args.tid, "tid") if args.tid else None}


def parse_cpu_list(text: str | None) -> frozenset[int] | None:
    if not text:
        return None
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                cpus.update(range(int(lo), int(hi) + 1))
            else:
                cpus.add(int(part))
    except ValueError:
        raise UsageError(f"bad CPU list {text!r}: expected e.g. 0,2-3") from None
    return frozenset(cpus)


def _time(ns: int) -> str:
    return f"{ns // 1_000_000_000:>5}.{ns % 1_000_000_000:09d}"


def run(args, out) -> int:
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session
    from ptexport.samples.itrace import parse_itrace

    itrace = parse_itrace(args.itrace)
    import os

    guest_kcore = args.guest_kcore or (os.path.dirname(os.path.abspath(args.guestkallsyms))
                                       if args.guestkallsyms else None)
    from ptexport.session.guestdata import parse_guest_data_list

    cfg = DecodeConfig(itrace=itrace, symfs=args.symfs, buildid_dir=args.buildid_dir,
                       cpus=parse_cpu_list(args.cpu), guest_kcore=guest_kcore,
                       guest_data=parse_guest_data_list(args.guest_data), **filter_config(args))
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: expected 1 or more")
    fields = parse_fields(args.fields) if args.fields is not None else None
    if fields is not None and (itrace.instructions or itrace.transactions or itrace.ptwrites
                               or itrace.pwr_events or itrace.other_events or itrace.intr_events):
        raise UsageError(f"-F {args.fields}: only for branch samples and errors (--itrace with b, c, r, e)")
    with open_perf_data(args.trace, salvage=not args.strict) as pd:
        session = open_session(pd, cfg)  # with --guest-data: the guests merged in (also in workers)
        warn_cut(args.trace, pd, "decoding")
        if args.count:
            from ptexport.session.parallel import _count_streamed, count_samples

            if session.filters_samples:  # --time/--pid/--tid: count what the streamed samples keep
                n_samples, n_err = _count_streamed(session, 1 if args.jobs is None else args.jobs)
            else:
                n_samples, n_err = count_samples(session, args.jobs)
            out.write(f"{n_samples} samples, {n_err} errors\n")
            return 0
        # Text and CSV stream batches in perf's order: memory stays bounded (one process by
        # default; with --jobs N > 1 workers decode a few PSB segments or chunks ahead).
        jobs = 1 if args.jobs is None else args.jobs
        if args.csv:
            w = csv.writer(out, lineterminator="\n")
            from ptexport.decoder.guest import VcpuAttribution

            vm = VcpuAttribution(session).enabled  # guest sideband: machine_pid,vcpu columns too
            w.writerow(["time", "cpu", "pid", "tid", "ip", "addr", "flags", "event", "error"]
                       + (["machine_pid", "vcpu"] if vm else []))
            for cols in session.iter_batches(jobs):
                _write_csv(w, session.vcpu_columns(cols) if vm else cols, vm)
        else:
            for cols in session.iter_batches(jobs):
                if fields is None:
                    _write_text(out, session.vcpu_columns(cols))
                else:
                    _write_fields(out, session.vcpu_columns(cols), fields)
    return 0


def _lists(cols) -> tuple[list, ...]:
    """The columns every line format prints, as Python lists (one conversion per batch)."""
    return (cols.kind.tolist(), cols.time.tolist(), cols.cpu.tolist(), cols.pid.tolist(),
            cols.tid.tolist(), cols.ip.tolist(), cols.addr.tolist(), cols.flags.tolist(),
            cols.code.tolist())


def _write_csv(w, cols, vm: bool = False) -> None:
    from ptexport.samples.columns import EV_ERROR, EVENT_NAMES

    kinds, times, cpus, pids, tids, ips, addrs, flags, codes = _lists(cols)
    extra = list(zip(cols.machine_pid.tolist(), cols.vcpu.tolist())) if vm else None
    for i, k in enumerate(kinds):
        err = cols.error_message(codes[i]) if k == EV_ERROR else ""
        row = [times[i], cpus[i], pids[i], tids[i], ips[i], addrs[i], flags[i], EVENT_NAMES[k], err]
        w.writerow(row + list(extra[i]) if vm else row)


def _error_line(ip: int, time: int, mp: int, vcpu: int, cpu: int, pid: int, tid: int, code: int,
                msg: str) -> str:
    """perf's line for a decoder error (whatever -F says)."""
    # perf prints the ip with %#lx, which gives a bare "0" for zero.
    ip_s = f"{ip:#x}" if ip else "0"
    when = _time(time).lstrip() if time else "0"  # perf: "time 0" without a time
    vm = f"machine_pid {mp} vcpu {vcpu} " if mp else ""
    return (f" instruction trace error type 1 time {when} {vm}cpu {cpu} pid {pid} "
            f"tid {tid} ip {ip_s} code {code}: {msg}\n")


def _write_text(out, cols) -> None:
    """perf script's lines of a batch, written by the compiled writer (errors formatted here)."""
    from ptexport.samples.columns import EV_BRANCH, EV_ERROR
    from ptexport.samples import text_compiled as textfast
    from ptexport.samples.flags import format_flags_field

    if textfast.numba is None:
        _write_text_reference(out, cols)
        return
    n = len(cols.kind)
    kind = np.asarray(cols.kind)
    err = kind == EV_ERROR
    mps = cols.machine_pid if cols.machine_pid is not None else np.zeros(n, np.int64)
    vcpus = cols.vcpu if cols.vcpu is not None else np.full(n, -1, np.int64)
    uniq, inv = np.unique(np.asarray(cols.flags), return_inverse=True)
    texts = [format_flags_field(int(v)) for v in uniq]
    errors = [_error_line(int(cols.ip[e]), int(cols.time[e]), int(mps[e]), int(vcpus[e]), int(cols.cpu[e]),
                          int(cols.pid[e]), int(cols.tid[e]), int(cols.code[e]), cols.error_message(int(cols.code[e])))
              for e in np.flatnonzero(err).tolist()]
    out.write(textfast.sample_lines(
        kind == EV_BRANCH, np.asarray(mps, np.int64), np.asarray(vcpus, np.int64), np.asarray(cols.pid, np.int64),
        np.asarray(cols.tid, np.int64), np.asarray(cols.cpu, np.int64), np.asarray(cols.time, np.int64),
        np.asarray(cols.ip).astype(np.uint64, copy=False), np.asarray(cols.addr).astype(np.uint64, copy=False),
        inv.ravel().astype(np.int64), texts, err, errors))


def _write_text_reference(out, cols) -> None:
    """The same lines by f-strings (without numba; the compiled writer's oracle)."""
    from ptexport.samples.columns import EV_BRANCH, EV_ERROR
    from ptexport.samples.flags import format_flags_field

    kinds, times, cpus, pids, tids, ips, addrs, flags, codes = _lists(cols)
    # perf script -F machine_pid,vcpu,...: "VM:%5d VCPU:%03d " before guest samples (machine_pid != 0)
    mps = cols.machine_pid.tolist() if cols.machine_pid is not None else [0] * len(kinds)
    vcpus = cols.vcpu.tolist() if cols.vcpu is not None else [-1] * len(kinds)
    lines = []
    for i, k in enumerate(kinds):
        if k == EV_ERROR:
            lines.append(_error_line(ips[i], times[i], mps[i], vcpus[i], cpus[i], pids[i], tids[i], codes[i],
                                     cols.error_message(codes[i])))
            continue
        # perf script: branch events print "ip => addr", other events "addr ip".
        if k == EV_BRANCH:
            tail = f"{ips[i]:>16x} => {addrs[i]:>16x}"
        else:
            tail = f"{addrs[i]:>16x} {ips[i]:>16x}"
        vm = f"VM:{mps[i]:5d} VCPU:{vcpus[i]:03d} " if mps[i] else ""
        lines.append(f"{vm}{pids[i]:>5}/{tids[i]:<5} [{cpus[i]:03d}] {_time(times[i])}: "
                     f"{format_flags_field(flags[i])} {tail}\n")
    out.write("".join(lines))


def _ipc(insn: int, cyc: int) -> str:
    """perf script's ipc field: whole hundredths (cut, not rounded), then the counts."""
    if not insn or not cyc:
        return ""
    ipc = (insn * 100 // cyc) & 0xFFFFFFFF  # perf keeps it in an unsigned int
    return f" \t IPC: {ipc // 100}.{ipc % 100:02d} ({insn}/{cyc}) "


def _write_fields(out, cols, fields: frozenset[str]) -> None:
    """Branch samples as ``perf script -F FIELDS --ns`` prints them (errors as by default)."""
    from ptexport.samples.columns import EV_ERROR
    from ptexport.samples.flags import format_flags_field

    F = fields.__contains__
    no_samples = fields == {"flags"}  # perf 6.1 prints no sample line for -F flags alone
    kinds, times, cpus, pids, tids, ips, addrs, flags, codes = _lists(cols)
    n = len(kinds)
    none = [0] * n
    insns = cols.insn_cnt.tolist() if F("ipc") else none
    cycs = cols.cyc_cnt.tolist() if F("ipc") else none
    mps = cols.machine_pid.tolist() if cols.machine_pid is not None else none
    vcpus = cols.vcpu.tolist() if cols.vcpu is not None else [-1] * n
    pid, tid = F("pid"), F("tid")
    lines = []
    for i, k in enumerate(kinds):
        if k == EV_ERROR:
            lines.append(_error_line(ips[i], times[i], mps[i], vcpus[i], cpus[i], pids[i], tids[i],
                                     codes[i], cols.error_message(codes[i])))
            continue
        if no_samples:
            continue
        parts = []
        if mps[i]:
            if F("machine_pid"):
                parts.append(f"VM:{mps[i]:5d} ")
            if F("vcpu"):
                parts.append(f"VCPU:{vcpus[i]:03d} ")
        if pid and tid:
            parts.append(f"{pids[i]:5d}/{tids[i]:<5d} ")
        elif pid or tid:
            parts.append(f"{(pids if pid else tids)[i]:5d} ")
        if F("cpu"):
            parts.append(f"[{cpus[i]:03d}] ")
        if F("time"):
            parts.append(f"{_time(times[i])}: ")
        if F("flags"):
            parts.append(format_flags_field(flags[i]))
        if F("ip"):
            parts.append(f" {ips[i]:16x}")
        if F("addr"):
            parts.append(f" => {addrs[i]:16x}")
        if insns[i] and cycs[i]:
            parts.append(_ipc(insns[i], cycs[i]))
        parts.append("\n")
        lines.append("".join(parts))
    out.write("".join(lines))
