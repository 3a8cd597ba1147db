"""``ptexport perfetto DB OUT.pftrace``: an export written as a Perfetto trace (docs/perfetto.md); its
options are shared with ``ptexport TRACE --perfetto OUT.pftrace`` (:func:`add_trace_options`)."""

from __future__ import annotations

import sys

NAME = "perfetto"
HELP = "write an export (SQLite, PostgreSQL or DuckDB) as a Perfetto trace for ui.perfetto.dev"


def add_arguments(parser) -> None:
    parser.add_argument("source", metavar="DB", help="the export to read: SQLite file, postgresql://user@host/dbname "
                                                     "or NAME.duckdb (with calls: exported without --no-calls)")
    parser.add_argument("out", metavar="OUT", help="the Perfetto trace to write (NAME.pftrace)")
    # perf script's filters, in its words (parsed as for the export: dump_branches.filter_config), on the database
    parser.add_argument("--time", metavar="RANGES",
                        help="only the calls that overlap these perf time ranges, and the events in them: START,STOP "
                             "in seconds (either side may be empty; several ranges separated by blanks), or percent "
                             "slices of the export's first..last time such as 10%%/2 or 0%%-10%%,30%%-40%%")
    parser.add_argument("--pid", metavar="LIST", help="only the calls (and PTWRITE, power events) of these process ids")
    parser.add_argument("--tid", metavar="LIST", help="only the calls (and PTWRITE, power events) of these thread ids")
    add_trace_options(parser)
    parser.add_argument("-f", "--force", action="store_true", help="replace an existing trace file")
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary")


def add_trace_options(parser) -> None:
    """The options of the Perfetto trace itself (also on ``ptexport TRACE --perfetto OUT``)."""
    parser.add_argument("--max-depth", type=int, metavar="N",
                        help="Perfetto trace: keep N levels of calls per thread (deeper calls are dropped)")
    parser.add_argument("--min-duration", metavar="TIME",
                        help="Perfetto trace: drop calls shorter than TIME (ns, or with a unit: 500ns, 2us, 1ms, 1s)")


def options(args, force: bool):
    """The :class:`~ptexport.writers.perfetto.PerfettoOptions` of the command line."""
    from ptexport.cli.dump_branches import filter_config
    from ptexport.writers.perfetto import PerfettoOptions, parse_duration

    f = filter_config(args)
    return PerfettoOptions(time=f["time"], pids=f["pids"], tids=f["tids"], max_depth=args.max_depth,
                           min_duration=parse_duration(args.min_duration) if args.min_duration else 0, force=force)


def format_summary(s) -> str:
    """One line: the file's size, the slices written and dropped, the other events, wall time."""
    dropped = []
    if s.dropped_depth:
        dropped.append(f"{s.dropped_depth} by --max-depth")
    if s.dropped_duration:
        dropped.append(f"{s.dropped_duration} by --min-duration")
    if s.outside_time:
        dropped.append(f"{s.outside_time} outside --time")
    extra = f", {s.clamped} cut at their caller's end" if s.clamped else ""
    return (f"{s.target}: {s.size / (1 << 20):.1f} MiB, {s.slices} call slices "
            f"({s.closed} never returned, closed and marked{extra}); "
            f"slices dropped: {s.dropped}{' (' + ', '.join(dropped) + ')' if dropped else ''}; "
            f"{s.cpu_slices} CPU/VCPU slices, {s.counters} counter values, {s.instants} instants, "
            f"{s.tracks} tracks; {s.seconds:.2f} s")


def write(db: str, target: str, opts, quiet: bool, out) -> None:
    """The trace from ``db``, with a progress bar on a terminal (calls read, throttled by tqdm) and the
    summary line."""
    from ptexport.writers.perfetto import write_perfetto

    bar = None
    progress = None
    if not quiet and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=0, unit=" calls", unit_scale=True, mininterval=0.1, file=sys.stderr, desc=target)

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

    try:
        summary = write_perfetto(db, target, opts, progress)
    finally:
        if bar is not None:
            bar.close()
    if not quiet:
        out.write(format_summary(summary) + "\n")


def run(args, out) -> int:
    opts = options(args, args.force)  # bad values fail before anything is read
    write(args.source, args.out, opts, args.quiet, out)
    return 0
