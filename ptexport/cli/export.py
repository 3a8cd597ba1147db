"""``ptexport TRACE --db DB`` / ``--parquet DIR``: decode a recording and export it into SQLite,
PostgreSQL, DuckDB or a directory of Parquet files; ``--perfetto OUT.pftrace`` (beside ``--db`` or
instead of it) then writes that database as a Perfetto trace (without ``--db``: a temporary SQLite file
beside OUT, removed after)."""

from __future__ import annotations

import dataclasses
import os
import sys

NAME = "export"
HELP = ("decode TRACE and export it into a database (SQLite path, postgresql:// URL, NAME.duckdb) or Parquet files, "
        "or a Perfetto trace")


def add_arguments(parser) -> None:
    from ptexport.cli.dump_branches import add_filter_arguments, add_guest_data_argument, add_strict_argument
    from ptexport.cli.perfetto import add_trace_options

    parser.add_argument("trace", help="perf.data file, pipe-mode file, directory, or - for stdin")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="DB",
                       help="SQLite file, postgresql://user@host/dbname, or a DuckDB file (NAME.duckdb, NAME.ddb, "
                            "duckdb:PATH)")
    where.add_argument("--parquet", metavar="DIR",
                       help="a directory of Parquet files: one per table, samples partitioned by cpu, schema.json")
    parser.add_argument("--perfetto", metavar="OUT",
                        help="then write a Perfetto trace (OUT.pftrace: ui.perfetto.dev) from the database (--db, "
                             "or without it a temporary SQLite file beside OUT); --time/--pid/--tid apply to it too")
    add_trace_options(parser)
    parser.add_argument("--itrace", default=None, metavar="OPTS",
                        help="perf's --itrace letters (default: all branches, errors and power events)")
    parser.add_argument("--calls", dest="calls", action="store_true", default=True,
                        help="build calls and call_paths (default)")
    parser.add_argument("--no-calls", dest="calls", action="store_false", help="skip call trees")
    parser.add_argument("--no-aggregates", dest="aggregates", action="store_false", default=True,
                        help="leave call_path_stats, symbol_stats, sample_stats and cpu_time_stats empty (docs/export.md)")
    parser.add_argument("--cpu", metavar="LIST", help="only these CPUs (e.g. 0,2-3)")
    add_filter_arguments(parser, export=True)
    parser.add_argument("--symfs", metavar="DIR", help="look for binaries under DIR")
    parser.add_argument("--kallsyms", metavar="FILE",
                        help="kernel symbols from this kallsyms file (default: the recording's kcore_dir, "
                             "the build-id cache, or /proc/kallsyms when the running kernel's build-id matches)")
    parser.add_argument("--buildid-dir", metavar="DIR", help="build-id cache (default ~/.debug)")
    parser.add_argument("--guestkallsyms", metavar="FILE",
                        help="guest kernel symbols for guest code without guest sideband (perf's default guest); "
                             "its kcore beside it is the guest kernel's code")
    parser.add_argument("--guest-kcore", metavar="DIR", help="the default guest's kcore_dir (kallsyms, kcore)")
    parser.add_argument("--guestmount", metavar="DIR",
                        help="guests' root file systems as DIR/PID (machines.root_dir; guest programs read there)")
    parser.add_argument("--callchains", action="store_true",
                        help="samples.call_path_id from the call chain of each synthesized sample (perf's "
                             "export-to-sqlite.py 'callchains' with --itrace=...g: all but branch samples)")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="processes to use (default: the cores here): 1 decodes and exports in this one; "
                             "N >= 2 decodes in a child process (with N - 1 workers of its own when N > 2) "
                             "while this one exports; the same rows either way")
    parser.add_argument("--scheduler", metavar="ADDR",
                        help="decode on a dask cluster (pip install 'ptexport[cluster]'): tcp://HOST:PORT of a "
                             "`dask scheduler`, or local:N for N local worker processes; workers decode the PSB "
                             "segments, this process merges and writes; the same rows as --jobs 1 (docs/scaling.md)")
    parser.add_argument("--cluster-path", metavar="LOCAL=WORKER", action="append", default=[],
                        help="with --scheduler: files under directory LOCAL here (the recording, --symfs, "
                             "--buildid-dir...) are under WORKER on the workers (repeatable)")
    parser.add_argument("--no-worker-loads", dest="worker_loads", action="store_false",
                        help="with --scheduler into PostgreSQL: this process loads every table (by default the "
                             "workers load the samples and calls, each on its own session)")
    parser.add_argument("--cluster-trees", action="store_true",
                        help="with --scheduler: the workers build the call trees, threads cut into a shard per "
                             "worker thread and stitched here into the same rows (by default this process builds "
                             "them: shipping the branches costs more than the tree, docs/scaling.md)")
    add_guest_data_argument(parser)
    add_strict_argument(parser)
    parser.add_argument("-f", "--force", action="store_true", help="replace an existing database")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress or summary")


def run(args, out) -> int:
    from ptexport.errors import UsageError

    if args.db is None and args.parquet is None and args.perfetto is None:
        raise UsageError("give --db DB, --parquet DIR or --perfetto OUT.pftrace")
    if args.perfetto is not None and args.parquet is not None:
        raise UsageError("--perfetto reads a database: give --db DB (or neither) with it, not --parquet")
    perfetto_opts = None
    if args.perfetto is not None:
        from ptexport.cli.perfetto import options as perfetto_options
        from ptexport.writers.perfetto import check_target

        perfetto_opts = perfetto_options(args, args.force)  # bad values fail before decoding
        check_target(args.perfetto, args.force)
    elif args.max_depth is not None or args.min_duration is not None:
        raise UsageError("--max-depth and --min-duration are options of the Perfetto trace: give --perfetto OUT")
    if args.parquet is not None:
        args.db = f"parquet:{args.parquet}"
    if args.db is None:  # --perfetto alone: a temporary database beside its file, removed after
        return _perfetto_only(args, out, perfetto_opts)
    _export(args, out)
    if perfetto_opts is not None:
        _write_perfetto(args, out, args.db, perfetto_opts)
    return 0


def _export(args, out, summary_line: bool = True) -> None:
    """The export itself, its warnings and (with ``summary_line``) its summary line."""
    from ptexport.cli.dump_branches import filter_config, parse_cpu_list
    from ptexport.errors import UsageError
    from ptexport.dbexport.exporter import ExportConfig
    from ptexport.session.export import export_trace
    from ptexport.session.guestdata import parse_guest_data_list
    from ptexport.samples.itrace import DEFAULT_CALLCHAIN_SZ, export_default, parse_itrace

    from ptexport.session import default_jobs

    if args.jobs is None:
        args.jobs = default_jobs()
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: expected 1 or more")
    cluster_paths: tuple[tuple[str, str], ...] = ()
    if args.scheduler is not None:
        from ptexport.session.cluster import check_scheduler, parse_cluster_path  # (imports no dask)

        check_scheduler(args.scheduler)
        cluster_paths = tuple(parse_cluster_path(p) for p in args.cluster_path)
    elif args.cluster_path:
        raise UsageError("--cluster-path: only with --scheduler")
    elif not args.worker_loads:
        raise UsageError("--no-worker-loads: only with --scheduler")
    elif args.cluster_trees:
        raise UsageError("--cluster-trees: only with --scheduler")
    itrace = parse_itrace(args.itrace) if args.itrace else export_default()
    if args.callchains:
        from ptexport.dbexport.callchains import check_config

        problem = check_config(args.calls, False)
        if problem:
            raise UsageError(problem)
        if not itrace.callchain:  # perf needs --itrace=...g for call chains: implied
            itrace = dataclasses.replace(itrace, callchain=True, callchain_sz=DEFAULT_CALLCHAIN_SZ)
    for opt, path, want_dir in (("--guestkallsyms", args.guestkallsyms, False), ("--guest-kcore", args.guest_kcore, True),
                                ("--guestmount", args.guestmount, True)):
        if path and not (os.path.isdir(path) if want_dir else os.path.isfile(path)):
            raise UsageError(f"{opt} {path}: no such {'directory' if want_dir else 'file'}")
    cfg = ExportConfig(itrace=itrace, calls=args.calls, force=args.force, symfs=args.symfs, kallsyms=args.kallsyms,
                       buildid_dir=args.buildid_dir, cpus=parse_cpu_list(args.cpu), guestkallsyms=args.guestkallsyms,
                       guest_kcore=args.guest_kcore, guestmount=args.guestmount, jobs=args.jobs,
                       callchains=args.callchains, salvage=not args.strict, aggregates=args.aggregates,
                       guest_data=parse_guest_data_list(args.guest_data), scheduler=args.scheduler,
                       cluster_paths=cluster_paths, cluster_copy=args.worker_loads,
                       cluster_trees=args.cluster_trees, **filter_config(args))
    _warn_space(args.trace, args.db, args.parquet)
    progress = None
    bar = None
    if not args.quiet and sys.stderr.isatty():
        from tqdm import tqdm

        # bytes of trace decoded (with the ETA) on the bar, the samples written and their rate after it
        bar = tqdm(total=0, unit="B", unit_scale=True, mininterval=0.1, file=sys.stderr,
                   bar_format="{l_bar}{bar}| {n_fmt}B/{total_fmt}B [{elapsed}<{remaining}{postfix}]")

        def progress(samples: int, done: int, total: int) -> None:
            if total and bar.total != total:
                bar.total = total
            elif not total and bar.bar_format.startswith("{l_bar}"):  # bytes unknown (no AUX records, timeless)
                bar.bar_format = "[{elapsed}{postfix}]"
            bar.n = done
            elapsed = bar.format_dict["elapsed"]
            rate = tqdm.format_sizeof(samples / elapsed) if elapsed > 0 else "?"
            bar.set_postfix_str(f"{tqdm.format_sizeof(samples)} samples [{rate} samples/s]", refresh=False)
            bar.refresh()

    try:
        summary = export_trace(args.trace, args.db, cfg, progress)
    finally:
        if bar is not None:
            bar.close()
    if summary.cut is not None:
        from ptexport.cli.dump_branches import warn_cut

        warn_cut(args.trace, summary)
    for line in summary.warnings:
        print(f"ptexport: warning: {line}", file=sys.stderr)
    if summary.leftovers and not args.quiet:
        print(f"ptexport: removed {format_leftovers(summary.leftovers)} of exports to {args.db} that died",
              file=sys.stderr)
    if not args.quiet and summary_line:
        out.write(format_summary(summary) + "\n")


def _write_perfetto(args, out, db: str, opts) -> None:
    from ptexport.cli import run_goes_on
    from ptexport.cli.perfetto import write

    run_goes_on()  # the database is in place, the run is not over: a signal still stops it
    write(db, args.perfetto, opts, args.quiet, out)


def _perfetto_only(args, out, opts) -> int:
    """``--perfetto OUT`` without ``--db``: the export into ``.OUT.ptexport-tmp-PID.db`` (a name
    ``ptexport clean`` knows, should the process be killed), the trace from it, the database removed."""
    import shutil
    import tempfile

    parent = os.path.dirname(os.path.abspath(args.perfetto))
    tmpdir = tempfile.mkdtemp(prefix=f".{os.path.basename(args.perfetto)}.ptexport-tmp-{os.getpid()}.",
                              dir=parent)
    try:
        args.db = os.path.join(tmpdir, "export.db")
        args.aggregates = False  # nothing reads them
        _export(args, out, summary_line=False)  # the database is removed: its summary is not news
        _write_perfetto(args, out, args.db, opts)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return 0


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _warn_space(trace: str, target: str, shown: str | None = None) -> None:
    """A warning when the target's file system has less room than the export is estimated to need."""
    from ptexport.writers.space import estimate

    est = estimate(trace, target)
    if est is not None and est.short:
        print(f"ptexport: warning: {shown or target}: {_mib(est.free)} free in {est.directory}, the export may need "
              f"about {_mib(est.peak)} while writing (a database of about {_mib(est.database)} from "
              f"{_mib(est.trace_bytes)} of trace); a full disk stops it and removes what it wrote", file=sys.stderr)


def format_leftovers(items) -> str:
    """``3 temporary files (1.2 MiB)`` / ``1 temporary database``."""
    dbs = sum(1 for x in items if x.kind == "database")
    files = len(items) - dbs
    parts = []
    if files:
        parts.append(f"{files} temporary file{'s' if files != 1 else ''}")
    if dbs:
        parts.append(f"{dbs} temporary database{'s' if dbs != 1 else ''}")
    return " and ".join(parts) + f" ({_mib(sum(x.size for x in items))})"


def format_summary(summary) -> str:
    """One line: rows per non-empty table, decode errors, what was lost, wall time."""
    rows = ", ".join(f"{k} {v}" for k, v in summary.rows.items())
    lost = ", ".join(f"{n} {k}" for k, n in summary.losses.items()) if summary.losses else "nothing"
    cluster = (f"; {summary.cluster_units} segments decoded on {summary.cluster_workers} cluster workers"
               if summary.cluster_workers else "")
    if getattr(summary, "cluster_tree_steps", 0):
        cluster += f", {summary.cluster_tree_steps} call tree steps built by them"
    if getattr(summary, "cluster_copies", 0):
        cluster += f", {summary.cluster_copies} batches loaded by them"
    return (f"{summary.target}: {rows}; {summary.errors} decode errors; lost: {lost}; "
            f"{summary.seconds:.2f} s (decode {summary.decode_seconds:.2f} s){cluster}")
