#!/usr/bin/env python3
"""End-to-end export: ``ptexport TRACE --db DB`` against perf's export-to-sqlite.py, in one run.

    python3 bench/bench_export.py [--branches 1000000] [--program calls] [--postgres URL] [--keep DIR]

Generates one trace with ``ptexport synth`` (cached per size under the temp
directory), then times, on that same file:

* perf 6.1: ``perf script --itrace=bep -s export-to-sqlite.py OUT branches calls``;
* ptexport: ``ptexport TRACE --db OUT`` (all branches, errors and power events, calls);
* optionally ptexport into PostgreSQL.

Prints samples/s, wall seconds, peak RSS of each run (``wait4``'s ru_maxrss:
the process and the children it waited for) and database bytes per sample, and
the ratios ptexport/perf.  ``--branches 10000000`` is the issue's size (perf
takes minutes there); ``--skip-perf`` times ptexport alone (e.g. to compare
peak RSS across sizes) and, when an earlier run on the same trace left perf's
figures in ``perf.json`` beside it, prints the ratios against those (marked as
from that earlier run).  Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"


def perf_env() -> dict[str, str]:
    # perf's embedded Python must find Debian's python3 (with PySide2) first on PATH.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    return env


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of one child process (and the
    children it waited for)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def count_samples(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM samples").fetchone()[0] - 1  # id 0 is perf's "unknown" row
    finally:
        con.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--branches", type=int, default=1_000_000)
    ap.add_argument("--program", default="calls")
    ap.add_argument("--postgres", help="also export into this PostgreSQL server URL (e.g. postgresql://postgres@127.0.0.1)")
    ap.add_argument("--keep", help="directory for the trace and databases (default: a cache under the temp dir)")
    ap.add_argument("--skip-perf", action="store_true", help="time ptexport only")
    args = ap.parse_args()

    if not args.skip_perf and (not shutil.which("perf") or not os.path.exists(EXPORTER)):
        sys.exit("perf 6.1 and its export-to-sqlite.py are needed (Debian: linux-perf python3-pyside2.qtsql)")
    work = Path(args.keep or tempfile.gettempdir()) / f"ptexport-bench-{args.program}-{args.branches}"
    work.mkdir(parents=True, exist_ok=True)
    trace = work / "perf.data"
    if not trace.exists():
        subprocess.run(["ptexport", "synth", "--out", str(work), "--program", args.program,
                        "--branches", str(args.branches)], check=True, stdout=subprocess.DEVNULL)
    # numba compiles the kernels once per source version and caches them: a first export of a
    # tiny trace keeps a compile out of the timed runs
    warm = work.parent / "ptexport-bench-warmup"
    if not (warm / "perf.data").exists():
        subprocess.run(["ptexport", "synth", "--out", str(warm), "--program", args.program, "--branches", "2000"],
                       check=True, stdout=subprocess.DEVNULL)
    (warm / "warm.sqlite").unlink(missing_ok=True)
    subprocess.run(["ptexport", str(warm / "perf.data"), "--db", str(warm / "warm.sqlite"), "-q"], check=True,
                   stdout=subprocess.DEVNULL)
    perf_db, ours_db, perf_json = work / "perf.db", work / "ours.sqlite", work / "perf.json"
    ours_db.unlink(missing_ok=True)

    rows = []
    cached = ""
    if not args.skip_perf:
        perf_db.unlink(missing_ok=True)
        perf_wall, perf_rss, perf_cpu = timed(["perf", "script", "-i", str(trace), "--itrace=bep", "-s", EXPORTER, str(perf_db),
                                     "branches", "calls"], env=perf_env())
        n_perf = count_samples(perf_db)
        rows.append(("perf", perf_wall, n_perf, perf_rss, perf_db.stat().st_size, perf_cpu))
        perf_json.write_text(json.dumps({"wall": perf_wall, "samples": n_perf, "rss_kib": perf_rss, "cpu": perf_cpu,
                                         "db_bytes": perf_db.stat().st_size, "when": time.time()}))
    elif perf_json.exists():
        p = json.loads(perf_json.read_text())
        perf_wall, perf_rss, perf_cpu = p["wall"], p["rss_kib"], p.get("cpu")
        rows.append(("perf (earlier run)", perf_wall, p["samples"], perf_rss, p["db_bytes"], perf_cpu))
        cached = time.strftime(" (perf figures from its run at %Y-%m-%d %H:%M UTC)", time.gmtime(p["when"]))
    ours_wall, ours_rss, ours_cpu = timed(["ptexport", str(trace), "--db", str(ours_db), "-q"])
    n_ours = count_samples(ours_db)
    rows.append(("ptexport", ours_wall, n_ours, ours_rss, ours_db.stat().st_size, ours_cpu))
    if args.postgres:
        name = f"ptexport_bench_{os.getpid()}"
        url = f"{args.postgres.rstrip('/')}/{name}"
        pg_wall, pg_rss, pg_cpu = timed(["ptexport", str(trace), "--db", url, "-q"])
        rows.append(("postgresql", pg_wall, n_ours, pg_rss, None, pg_cpu))
        subprocess.run(["psql", args.postgres.rstrip("/") + "/postgres", "-c", f"DROP DATABASE IF EXISTS {name}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    print(f"trace: {trace} ({args.branches} branches asked, {n_ours} samples exported)")
    load = os.getloadavg()[0]
    print(f"{'':18} {'wall s':>8} {'samples/s':>12} {'CPU s':>8} {'peak RSS MiB':>13} {'DB bytes/sample':>16}")
    for name, wall, n, rss, size, cpu in rows:
        per = f"{size / n:16.1f}" if size is not None else f"{'':>16}"
        cpu_s = f"{cpu:8.2f}" if cpu is not None else f"{'?':>8}"
        print(f"{name:18} {wall:8.2f} {n / wall:12.0f} {cpu_s} {rss / 1024:13.0f} {per}")
    print(f"load average at the end: {load:.1f} on {os.cpu_count()} CPUs (wall times stretch with the load; "
          f"CPU seconds much less)")
    if rows[0][0].startswith("perf"):
        print(f"speed ratio ptexport/perf: {perf_wall / ours_wall:.2f}x (goal >= 10x); "
              f"DB size ratio: {rows[1][4] / rows[0][4]:.2f} (goal <= 1); "
              f"peak RSS ratio: {ours_rss / perf_rss:.2f}{cached}")
        if perf_cpu is not None:
            print(f"CPU-time ratio perf/ptexport: {perf_cpu / ours_cpu:.2f}x")
        if args.postgres:
            print(f"PostgreSQL: {perf_wall / pg_wall:.2f}x perf's SQLite export")
    return 0


if __name__ == "__main__":
    sys.exit(main())
