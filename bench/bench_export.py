#!/usr/bin/env python3
"""End-to-end export: ``ptexport TRACE --db DB`` against perf's export-to-sqlite.py, in one run.

    python3 bench/bench_export.py [--branches 1000000] [--program calls] [--postgres URL] [--keep DIR]

Generates one trace with ``ptexport synth`` (cached per size under the temp
directory), then times, on that same file:

* perf 6.1: ``perf script --itrace=bep -s export-to-sqlite.py OUT branches calls``;
* ptexport: ``ptexport TRACE --db OUT`` (all branches, errors and power events, calls);
* optionally ptexport into PostgreSQL.

Prints samples/s, wall seconds, peak RSS (of the process tree, from
``getrusage(RUSAGE_CHILDREN)`` per run) and database bytes per sample, and the
ratios ptexport/perf.  Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before)


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
    args = ap.parse_args()

    if not shutil.which("perf") or not os.path.exists(EXPORTER):
        sys.exit("perf 6.1 and its export-to-sqlite.py are needed (Debian: linux-perf python3-pyside2.qtsql)")
    work = Path(args.keep or tempfile.gettempdir()) / f"ptexport-bench-{args.program}-{args.branches}"
    work.mkdir(parents=True, exist_ok=True)
    trace = work / "perf.data"
    if not trace.exists():
        subprocess.run(["ptexport", "synth", "--out", str(work), "--program", args.program,
                        "--branches", str(args.branches)], check=True, stdout=subprocess.DEVNULL)
    perf_db, ours_db = work / "perf.db", work / "ours.sqlite"
    for p in (perf_db, ours_db):
        p.unlink(missing_ok=True)

    perf_wall, _ = timed(["perf", "script", "-i", str(trace), "--itrace=bep", "-s", EXPORTER, str(perf_db),
                          "branches", "calls"], env=perf_env())
    perf_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ours_wall, _ = timed(["ptexport", str(trace), "--db", str(ours_db), "-q"])
    ours_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    n_perf, n_ours = count_samples(perf_db), count_samples(ours_db)
    size_perf, size_ours = perf_db.stat().st_size, ours_db.stat().st_size

    print(f"trace: {trace} ({args.branches} branches asked, {n_ours} samples exported)")
    print(f"{'':12} {'wall s':>8} {'samples/s':>12} {'peak RSS MiB':>13} {'DB bytes/sample':>16}")
    print(f"{'perf':12} {perf_wall:8.2f} {n_perf / perf_wall:12.0f} {perf_rss / 1024:13.0f} {size_perf / n_perf:16.1f}")
    print(f"{'ptexport':12} {ours_wall:8.2f} {n_ours / ours_wall:12.0f} {ours_rss / 1024:13.0f} {size_ours / n_ours:16.1f}")
    print(f"speed ratio ptexport/perf: {perf_wall / ours_wall:.2f}x (goal >= 10x); "
          f"DB size ratio: {size_ours / size_perf:.2f} (goal <= 1)")
    print("note: peak RSS is the running maximum over child processes (perf ran first)")
    if args.postgres:
        name = f"ptexport_bench_{os.getpid()}"
        url = f"{args.postgres.rstrip('/')}/{name}"
        pg_wall, _ = timed(["ptexport", str(trace), "--db", url, "-q"])
        print(f"{'postgresql':12} {pg_wall:8.2f} {n_ours / pg_wall:12.0f}")
        subprocess.run(["psql", args.postgres.rstrip("/") + "/postgres", "-c", f"DROP DATABASE IF EXISTS {name}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
