#!/usr/bin/env python3
"""End-to-end export: ``ptexport TRACE --db DB`` against perf's export-to-sqlite.py, in one run.

    python3 bench/bench_export.py [--branches 1000000] [--program calls] [--postgres URL] [--keep DIR]
    python3 bench/bench_export.py --file DIR/perf.data --skip-perf [--json report.json]

Generates one trace with ``ptexport synth`` (in a temporary directory, or in
``--keep DIR`` to be reused with ``--file``), then times, on that same file:

* perf 6.1: ``perf script --itrace=bep -s export-to-sqlite.py OUT branches calls``;
* ptexport: ``ptexport TRACE --db OUT`` (all branches, errors and power events, calls);
* optionally ptexport into PostgreSQL.

Prints samples/s, wall seconds, peak RSS of each run (``wait4``'s ru_maxrss:
the process and the children it waited for) and database bytes per sample, and
the ratios ptexport/perf.  ``--branches 10000000`` is the issue's size (perf
takes minutes there); ``--skip-perf`` times ptexport alone (e.g. to compare
peak RSS across sizes) and, when an earlier run on the same trace left perf's
figures in ``perf.json`` beside it, prints the ratios against those (marked as
from that earlier run).  Nothing here is a test: it measures.  Output paths
(``--keep``, ``--json``) that exist are refused unless ``--force``; ``--tiny``
is a quick check (2000 branches).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from _common import (PERF_EXPORTER, add_options, measured, need_file, need_perf, one_line_errors, parse, perf_env,
                     ratio, workdir, write_json)

#: A first export of a trace this small keeps numba's compile (or cache load) out of the timed run.
WARMUP_BRANCHES = 2000
WARMUP_BYTES = 64 << 10  # a --file this small is timed without a warm-up (2000 branches: about 6 KB)

#: Runs one command and prints its wall seconds, peak RSS and CPU seconds.  A process started from
#: this one would carry this one's peak RSS over fork and exec into its own ru_maxrss (Linux folds the
#: forked address space's high-water mark in at exec), and a benchmark that made its inputs in-process
#: (bench_vm.prepare: ~370 MB) would measure itself; this small interpreter starts the command instead.
_MEASURE = r"""
import json, os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps([time.perf_counter() - t0, os.waitstatus_to_exitcode(status), usage.ru_maxrss,
                  usage.ru_utime + usage.ru_stime]))
"""


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of one child process (and the
    children it waited for), started by a small interpreter of its own (``_MEASURE``)."""
    cmd = measured(cmd)
    proc = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(cmd)], env=env, cwd=cwd,
                          capture_output=True, text=True)
    try:
        wall, code, rss, cpu = json.loads(proc.stdout)
    except ValueError:
        sys.exit(f"{' '.join(cmd)}: could not be measured:\n{proc.stderr[-2000:]}")
    if code:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return wall, rss, cpu


def count_samples(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM samples").fetchone()[0] - 1  # id 0 is perf's "unknown" row
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--branches", type=int, default=1_000_000, help="branches of the generated trace")
    ap.add_argument("--program", default="calls")
    ap.add_argument("--file", help="an existing perf.data to export (default: generate one); with --skip-perf, "
                                   "perf's figures are taken from a perf.json beside it")
    ap.add_argument("--postgres", help="also export into this PostgreSQL server URL (e.g. postgresql://postgres@127.0.0.1)")
    ap.add_argument("--skip-perf", action="store_true", help="time ptexport only")
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"branches": WARMUP_BRANCHES})
    if args.file and args.keep:
        ap.error("--file and --keep exclude each other (--keep keeps a generated trace)")
    need_file(ap, args.file)
    if not args.skip_perf:
        need_perf(ap, exporter=True)
    with one_line_errors(ap), workdir(args.keep, "bench_export.") as work:
        return run(args, work)


def run(args: argparse.Namespace, work: Path) -> int:
    """Generate (unless --file) and export into ``work``: the trace, perf.db, ours.sqlite, perf.json."""
    if args.file:
        trace = Path(args.file).resolve()
        perf_json = trace.parent / "perf.json"
    else:
        trace = work / "perf.data"
        perf_json = work / "perf.json"
        # --elf-path .: the ELF is named by its bare name; perf runs in the trace's folder
        subprocess.run(["ptexport", "synth", "--out", str(work), "--program", args.program,
                        "--branches", str(args.branches), "--elf-path", "."], check=True, stdout=subprocess.DEVNULL)
    if (trace.stat().st_size > WARMUP_BYTES) if args.file else args.branches > WARMUP_BRANCHES:
        # numba compiles the kernels once per source version and caches them: a first export of a
        # tiny trace keeps a compile out of the timed runs (a trace about that small is its own warm-up)
        warm = work / "warmup"
        subprocess.run(["ptexport", "synth", "--out", str(warm), "--program", args.program,
                        "--branches", str(WARMUP_BRANCHES)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ptexport", str(warm / "perf.data"), "--db", str(warm / "warm.sqlite"), "-q", "--force"],
                       check=True, stdout=subprocess.DEVNULL)
    perf_db, ours_db = work / "perf.db", work / "ours.sqlite"
    for db in (perf_db, ours_db):
        db.unlink(missing_ok=True)  # in the work folder: ours (--keep DIR was checked or --force given)

    rows = []
    cached = ""
    perf_wall = perf_rss = perf_cpu = None
    if not args.skip_perf:
        perf_wall, perf_rss, perf_cpu = timed(["perf", "script", "-i", str(trace), "--itrace=bep", "-s", PERF_EXPORTER,
                                               str(perf_db), "branches", "calls"], env=perf_env(), cwd=trace.parent)
        n_perf = count_samples(perf_db)
        rows.append(("perf", perf_wall, n_perf, perf_rss, perf_db.stat().st_size, perf_cpu))
        if not args.file:
            perf_json.write_text(json.dumps({"wall": perf_wall, "samples": n_perf, "rss_kib": perf_rss,
                                             "cpu": perf_cpu, "db_bytes": perf_db.stat().st_size,
                                             "when": time.time()}))
    elif perf_json.exists():
        p = json.loads(perf_json.read_text())
        perf_wall, perf_rss, perf_cpu = p["wall"], p["rss_kib"], p.get("cpu")
        rows.append(("perf (earlier run)", perf_wall, p["samples"], perf_rss, p["db_bytes"], perf_cpu))
        cached = time.strftime(" (perf figures from its run at %Y-%m-%d %H:%M UTC)", time.gmtime(p["when"]))
    ours_wall, ours_rss, ours_cpu = timed(["ptexport", str(trace), "--db", str(ours_db), "-q"], cwd=trace.parent)
    n_ours = count_samples(ours_db)
    rows.append(("ptexport", ours_wall, n_ours, ours_rss, ours_db.stat().st_size, ours_cpu))
    pg_wall = None
    if args.postgres:
        name = f"ptexport_bench_{os.getpid()}"
        url = f"{args.postgres.rstrip('/')}/{name}"
        try:
            pg_wall, pg_rss, pg_cpu = timed(["ptexport", str(trace), "--db", url, "-q"], cwd=trace.parent)
        finally:
            subprocess.run(["psql", args.postgres.rstrip("/") + "/postgres", "-c", f"DROP DATABASE IF EXISTS {name}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows.append(("postgresql", pg_wall, n_ours, pg_rss, None, pg_cpu))

    print(f"trace: {trace} ({'' if args.file else f'{args.branches} branches asked, '}{n_ours} samples exported)")
    load = os.getloadavg()[0]
    print(f"{'':18} {'wall s':>8} {'samples/s':>12} {'CPU s':>8} {'peak RSS MiB':>13} {'DB bytes/sample':>16}")
    for name, wall, n, rss, size, cpu in rows:
        per = f"{size / n:16.1f}" if size is not None else f"{'':>16}"
        cpu_s = f"{cpu:8.2f}" if cpu is not None else f"{'?':>8}"
        print(f"{name:18} {wall:8.2f} {n / wall:12.0f} {cpu_s} {rss / 1024:13.0f} {per}")
    print(f"load average at the end: {load:.1f} on {os.cpu_count()} CPUs (wall times stretch with the load; "
          f"CPU seconds much less)")
    ratios: dict[str, float | None] = {}
    if rows[0][0].startswith("perf"):
        ratios = {"speed": ratio(perf_wall, ours_wall), "db_size": ratio(rows[1][4], rows[0][4]),
                  "peak_rss": ratio(ours_rss, perf_rss)}
        print(f"speed ratio ptexport/perf: {perf_wall / ours_wall:.2f}x (goal >= 10x); "
              f"DB size ratio: {rows[1][4] / rows[0][4]:.2f} (goal <= 1); "
              f"peak RSS ratio: {ours_rss / perf_rss:.2f}{cached}")
        if perf_cpu is not None:
            ratios["cpu"] = ratio(perf_cpu, ours_cpu)
            print(f"CPU-time ratio perf/ptexport: {perf_cpu / ours_cpu:.2f}x")
        if pg_wall is not None:
            ratios["postgresql_speed"] = ratio(perf_wall, pg_wall)
            print(f"PostgreSQL: {perf_wall / pg_wall:.2f}x perf's SQLite export")
    write_json(args.json, {
        "trace": str(trace), "branches_asked": None if args.file else args.branches, "samples": n_ours,
        "load_average": load, "cores": os.cpu_count(), "perf_from_earlier_run": bool(cached),
        "runs": {name: {"wall_s": wall, "samples": n, "samples_per_s": n / wall, "cpu_s": cpu,
                        "peak_rss_kib": rss, "db_bytes": size, "db_bytes_per_sample": size / n if size else None}
                 for name, wall, n, rss, size, cpu in rows},
        "ratios": ratios,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
