#!/usr/bin/env python3
"""Benchmark: decode-only branch throughput, ours vs perf 6.1, on a generated 10 M-branch trace.

    python3 bench/bench_decode.py                   # generate (in a temporary directory) and measure
    python3 bench/bench_decode.py --keep DIR        # ... and keep the trace in DIR
    python3 bench/bench_decode.py --file DIR/perf.data   # measure an existing perf.data
    python3 bench/bench_decode.py --branches 2M --jobs 1 --repeat 3 --json report.json

Runs, in one go and on the same file:

* ``perf script --itrace=b -i FILE > /dev/null`` (perf synthesizes and prints every branch sample);
* ``ptexport dump branches --count --itrace=b --jobs N FILE`` (decodes every branch sample, discards it).

Each is a separate process (start-up, imports and numba's cache loading included); wall time is the best
of ``--repeat``, CPU time is user+sys of that process, peak RSS is its ``ru_maxrss``.  The branch count is
ours (``--verify`` also counts perf's lines and checks they agree).  Prints branches/s for both, the
ratio ours/perf (>= 1.0: at least as fast as perf) and peak RSS.  Output paths (``--keep``,
``--json``) that exist are refused unless ``--force``; ``--tiny`` is a quick check (2 k branches).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from _common import (add_options, measured, need_file, need_perf, one_line_errors, parse, parse_count, ratio,
                     workdir, write_json)


def generate(out: Path, branches: int, program: str, extra: tuple[str, ...] = ()) -> Path:
    """A generated recording of ``program`` (``extra``: more ``synth`` options, e.g. ``--cpus 4``)."""
    data = out / "perf.data"
    t0 = time.perf_counter()
    # --elf-path .: the MMAP2 names the ELF by its bare file name, so perf (run in the
    # trace's folder) finds it wherever the folder is.
    subprocess.run(["ptexport", "synth", "--out", str(out), "--program", program, "--branches", str(branches),
                    "--elf-path", ".", *extra], check=True, stdout=subprocess.DEVNULL)
    print(f"generated {data} ({data.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return data


def measure(cmd: list[str], stdout, cwd: Path | None = None) -> tuple[float, float, int, bytes]:
    """(wall s, cpu s, peak RSS bytes, stdout) of one run of ``cmd``."""
    cmd = measured(cmd)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd)
    out = b""
    if stdout is subprocess.PIPE:
        out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", help="an existing perf.data (default: generate one)")
    ap.add_argument("--branches", type=parse_count, default=10_000_000,
                    help="branches of the generated trace (default 10M; k/M suffixes)")
    ap.add_argument("--program", default="calls", help="generated program (default calls)")
    ap.add_argument("--jobs", type=int, default=2, help="ptexport --jobs (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; best wall time counts (default 1)")
    ap.add_argument("--verify", action="store_true", help="(always on) count perf's branch lines and compare")
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"branches": 2000, "repeat": 1, "jobs": 1})
    if args.file and args.keep:
        ap.error("--file and --keep exclude each other (--keep keeps a generated trace)")
    need_file(ap, args.file)
    need_perf(ap)
    with one_line_errors(ap), workdir(None if args.file else args.keep, "bench_decode.") as work:
        return run(args, (Path(args.file) if args.file else generate(work, args.branches, args.program)).resolve())


def run(args: argparse.Namespace, path: Path) -> int:
    where = path.parent  # both run in the trace's folder, where bare ELF names resolve
    perf_cmd = ["perf", "script", "--itrace=b", "-i", str(path)]
    ours_cmd = ["ptexport", "dump", "branches", "--count", "--itrace=b", "--jobs", str(args.jobs), str(path)]

    perf_runs, ours_runs = [], []
    count = None
    for _ in range(max(1, args.repeat)):
        with open(os.devnull, "wb") as null:
            perf_runs.append(measure(perf_cmd, null, where)[:3])
        wall, cpu, rss, out = measure(ours_cmd, subprocess.PIPE, where)
        ours_runs.append((wall, cpu, rss))
        m = re.match(rb"(\d+) samples, (\d+) errors", out)
        if not m:
            raise SystemExit(f"unexpected ptexport output: {out[:200]!r}")
        count = int(m[1])
    # perf that cannot read the code stops early and looks fast: always check the counts.
    _, _, _, text = measure(perf_cmd, subprocess.PIPE, where)
    perf_count = text.count(b"\n")
    print(f"check: perf printed {perf_count} branch lines, ptexport counted {count}"
          f" -> {'same' if perf_count == count else 'DIFFERENT'}")
    if perf_count != count:
        raise SystemExit("the two decoders disagree on the branch count: no ratio printed")

    def best(runs):
        return min(runs, key=lambda r: r[0])

    pw, pc, prss = best(perf_runs)
    ow, oc, orss = best(ours_runs)
    print(f"trace: {path} ({path.stat().st_size / 1e6:.1f} MB), {count} branch samples, cores: {os.cpu_count()}")
    print(f"perf script --itrace=b > /dev/null : {pw:7.2f} s wall {pc:7.2f} s cpu  {count / pw / 1e6:6.3f} M branches/s"
          f"  peak RSS {prss / 2**20:7.1f} MiB")
    print(f"ptexport --count --jobs {args.jobs:<2}        : {ow:7.2f} s wall {oc:7.2f} s cpu  {count / ow / 1e6:6.3f} M branches/s"
          f"  peak RSS {orss / 2**20:7.1f} MiB")
    print(f"ratio ours/perf (throughput, wall): {pw / ow:.2f}   (cpu: {pc / oc:.2f})")
    write_json(args.json, {
        "trace": str(path), "trace_bytes": path.stat().st_size, "branches": count, "cores": os.cpu_count(),
        "jobs": args.jobs, "repeat": max(1, args.repeat),
        "perf": {"wall_s": pw, "cpu_s": pc, "peak_rss_bytes": prss, "branches_per_s": count / pw},
        "ptexport": {"wall_s": ow, "cpu_s": oc, "peak_rss_bytes": orss, "branches_per_s": count / ow},
        "ratio_wall": ratio(pw, ow), "ratio_cpu": ratio(pc, oc),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
