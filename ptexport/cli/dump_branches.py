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

from ptexport.errors import UsageError
from ptexport.samples import text
from ptexport.samples.text import FIELDS

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
                        help="processes to use (default: the cores here): --count decodes in N workers; "
                             "text and CSV decode in a child process (with N - 1 workers of its own when N > 2) "
                             "while this one formats (1, and 2 for the text: decoding here, formatting on a "
                             "thread); output streams in bounded memory either way")


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
    from ptexport.samples.filters import parse_id_list

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


#: Batches formatted ahead of the one being written (the memory of the text output: a few batches).
FORMAT_AHEAD = 2


def _write_formatted(raw, batches, fmt) -> None:
    """``fmt(batch)`` of each batch written to ``raw`` in order, formatted by a thread of its own while
    this one decodes the next batches: the compiled formatter runs without the GIL, so with ``--jobs 1``
    on a machine of two cores or more the lines cost little more than decoding them (10 M branches:
    the formatting was 1.3 s of 5.2 s).  (With ``--jobs`` >= 2 the decoding is a child process's and this
    thread overlaps it with writing.)"""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="ptexport-text") as pool:
        ahead: deque = deque()
        try:
            for cols in batches:
                ahead.append(pool.submit(fmt, cols))
                while len(ahead) > FORMAT_AHEAD or (ahead and ahead[0].done()):
                    raw.write(ahead.popleft().result())
            while ahead:
                raw.write(ahead.popleft().result())
        finally:
            for f in ahead:  # an error or a closed pipe: what is queued is not formatted
                f.cancel()


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
        # Text and CSV stream batches in perf's order: memory stays bounded.  --jobs 1 decodes and
        # formats in this process (the text on a thread of its own); N >= 2 decodes in a child (with
        # N - 1 workers of its own when N > 2), except the text with N = 2, decoded as with --jobs 1.
        from ptexport.session import default_jobs
        from ptexport.session.decode_proc import maybe_process

        jobs = default_jobs() if args.jobs is None else args.jobs
        # The text by the compiled formatter where numba loads: the reference's lines at the decoder's
        # speed, as bytes to a binary stdout.  Imported here, not at the top: it loads numba, which
        # `info` and `export` (importing this module's shared options) do not need.
        from ptexport.samples import text_compiled

        raw = getattr(out, "buffer", None) if not args.csv and text_compiled.numba is not None else None
        if raw is not None and jobs == 2:
            # two cores: decoding here and formatting on the text thread (_write_formatted) use both, as
            # a decoding child and this process formatting would, without handing the batches over
            jobs = 1
        proc = maybe_process(session, jobs)
        batches = proc if proc is not None else session.iter_batches(jobs)
        try:
            if args.csv:
                w = csv.writer(out, lineterminator="\n")
                from ptexport.decoder.guest import VcpuAttribution

                vm = VcpuAttribution(session).enabled  # guest sideband: machine_pid,vcpu columns too
                w.writerow(text.csv_header(vm))
                for cols in batches:
                    w.writerows(text.csv_rows(session.vcpu_columns(cols) if vm else cols, vm))
            else:
                fields = text.DEFAULT_FIELDS if fields is None else fields
                if raw is not None:
                    out.flush()
                    _write_formatted(raw, (session.vcpu_columns(cols) for cols in batches),
                                     lambda cols: text_compiled.sample_bytes(cols, fields))
                    raw.flush()
                else:
                    fmt = text_compiled if text_compiled.numba is not None else text
                    for cols in batches:
                        out.write(fmt.sample_lines(session.vcpu_columns(cols), fields))
        finally:
            if proc is not None:
                proc.close()
    return 0
