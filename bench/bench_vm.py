#!/usr/bin/env python3
"""Benchmark and acceptance check: VM traces (issue #6) decoded by the compiled decoder vs perf 6.1.

    python3 bench/bench_vm.py                       # 1 M branches, guest kernel + user (mixed), 2 VCPUs
    python3 bench/bench_vm.py --branches 5M --guest user --reference 0 --keep DIR --json report.json

Generates (in a temporary directory, or in ``--keep DIR``) a host recording with two VCPU threads running a guest
(``ptexport synth --vm``), runs perf's workflow on it (``perf inject --vm-time-correlation``,
``perf inject --guest-data``: vm_verify.perf_pipeline), then, on the injected file:

* acceptance: ``perf script --itrace=be -F machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr --ns``
  and ``ptexport dump branches --jobs 1`` (the same text), compared line for line: samples,
  errors, mismatches (must be 0);
* decode throughput: ``perf script --itrace=b > /dev/null`` vs ``ptexport dump branches --count
  --itrace=b --jobs N`` (each a separate process: start-up and numba's cache loading included);
* the reference decoder (pure Python, ``flow/perfmode.py``) on the first ``--reference`` branches'
  worth of trace (a smaller generated trace; 0: skip), against the compiled one on the same file.

Prints counts, wall times, branches/s and ratios; exit status 1 on any mismatch.  Output paths
(``--keep``, ``--json``) that exist are refused unless ``--force``; ``--tiny`` is a quick check
(2 k branches, the reference decoder on the same trace).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _common import add_options, measured, need_perf, one_line_errors, parse, parse_count, ratio, workdir, write_json

FIELDS = "machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr"
_INPROCESS = """
import io, sys, time
import os
if sys.argv[2] == "reference":
    os.environ["PTEXPORT_REFERENCE"] = "1"  # decoder/backend.py picks the reference decoder
from ptexport.cli import main
argv = ["dump", "branches", "--count", "--itrace=b", "--jobs", "1", sys.argv[1]]
if sys.argv[2] == "compiled":
    main(argv, io.StringIO())  # warm-up: numba's cache loaded, files mapped
t = time.perf_counter()
main(argv, sys.stdout)
print("wall", time.perf_counter() - t)
"""


def prepare(base: Path, branches: int, guest: str, seed: int) -> tuple[Path, dict]:
    """The injected recording (generated in ``base``) and the generator's metadata."""
    from ptexport.synth.vm import VmOptions, synthesize_vm
    from ptexport.synth.vm_verify import perf_pipeline

    inj = base / "w" / "inj.data"
    t = time.perf_counter()
    meta = synthesize_vm(base / "o", VmOptions(branches=branches, guest=guest, vcpus=2, cpus=2, seed=seed))
    t1 = time.perf_counter()
    perf_pipeline(base / "o", base / "w")
    print(f"generated {base} ({meta['branches']} branches) in {t1 - t:.1f} s, perf inject in "
          f"{time.perf_counter() - t1:.1f} s")
    return inj, meta


def timed(cmd: list[str], cwd: Path, stdout: int | object = subprocess.PIPE, env: dict | None = None
          ) -> tuple[float, subprocess.CompletedProcess]:
    cmd = measured(cmd)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=str(cwd), stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-500:]}")
    return wall, r


def sample_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "[00" in line or "instruction trace error type" in line]


def acceptance(inj: Path) -> dict:
    cwd = inj.parent
    pw, pr = timed(["perf", "script", "-i", str(inj), "--itrace=be", "--ns", "-F", FIELDS], cwd)
    ow, orr = timed(["ptexport", "dump", "branches", "--jobs", "1", str(inj)], cwd)
    want, got = sample_lines(pr.stdout), orr.stdout.splitlines()
    bad = sum(a != b for a, b in zip(got, want)) + abs(len(got) - len(want))
    n_err = sum("error type" in line for line in want)
    n_vm = sum(line.startswith("VM: ") for line in want)
    print(f"perf script -F {FIELDS}: {len(want) - n_err} samples ({n_vm} in the guest), {n_err} errors, "
          f"{pw:.2f} s")
    print(f"ptexport dump branches --jobs 1  : {len(got) - sum('error type' in x for x in got)} samples, "
          f"{sum('error type' in x for x in got)} errors, {ow:.2f} s")
    print(f"mismatching lines: {bad}")
    if bad:
        for i, (a, b) in enumerate(zip(got, want)):
            if a != b:
                print(f"  first at line {i}:\n    ours {a}\n    perf {b}")
                break
    return {"perf_samples": len(want) - n_err, "perf_guest_samples": n_vm, "perf_errors": n_err,
            "ptexport_samples": len(got) - sum("error type" in x for x in got),
            "ptexport_errors": sum("error type" in x for x in got), "mismatching_lines": bad,
            "perf_wall_s": pw, "ptexport_wall_s": ow}


def throughput(inj: Path, jobs: int) -> dict:
    cwd = inj.parent
    pw, _ = timed(["perf", "script", "-i", str(inj), "--itrace=b"], cwd, stdout=subprocess.DEVNULL)
    ow, r = timed(["ptexport", "dump", "branches", "--count", "--itrace=b", "--jobs", str(jobs), str(inj)], cwd)
    n = int(r.stdout.split()[0])
    print(f"decode only, {n} branches: perf script --itrace=b > /dev/null {pw:.2f} s ({n / pw / 1e6:.3f} M/s), "
          f"ptexport --count --jobs {jobs} {ow:.2f} s ({n / ow / 1e6:.3f} M/s), ratio ours/perf {pw / ow:.2f}")
    return {"branches": n, "jobs": jobs, "perf_wall_s": pw, "ptexport_wall_s": ow, "ratio": ratio(pw, ow)}


def in_process(inj: Path, mode: str) -> tuple[int, float]:
    """(branches, seconds) of ``dump branches --count`` inside one process, after start-up."""
    _, r = timed([sys.executable, "-c", _INPROCESS, str(inj), mode], inj.parent)
    out = r.stdout.split()
    return int(out[0]), float(out[-1])


def reference(inj: Path, compiled: tuple[int, float] | None = None) -> dict:
    """The reference decoder against the compiled one on ``inj`` (``compiled``: its figures, when known)."""
    n, rw = in_process(inj, "reference")
    n2, fw = compiled or in_process(inj, "compiled")
    if n2 != n:
        raise SystemExit(f"the reference decoder counted {n} branches, the compiled one {n2}")
    print(f"in-process decode, {n} branches: reference decoder {rw:.2f} s ({n / rw / 1e3:.1f} K/s), "
          f"compiled {fw:.2f} s ({n / fw / 1e6:.3f} M/s): {rw / fw:.0f}x")
    return {"branches": n, "reference_s": rw, "compiled_s": fw, "ratio": ratio(rw, fw)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", type=parse_count, default=1_000_000,
                    help="branches of the generated trace (default 1M; k/M suffixes)")
    ap.add_argument("--guest", default="mixed", choices=("user", "mixed"),
                    help="what the guest runs (default mixed: guest kernel and user code; a guest kernel alone "
                         "has no guest sideband to inject)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--jobs", type=int, default=2, help="ptexport --jobs for the throughput run (default 2)")
    ap.add_argument("--reference", type=parse_count, default=100_000,
                    help="branches of the trace the reference decoder runs on (default 100K; 0: skip; "
                         "at least --branches: the same trace)")
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"branches": 2000, "reference": 2000, "jobs": 1})
    need_perf(ap)
    with one_line_errors(ap), workdir(args.keep, "bench_vm.") as work:
        return run(args, work)


def run(args: argparse.Namespace, work: Path) -> int:
    inj, meta = prepare(work / "main", args.branches, args.guest, args.seed)
    print(f"trace: {inj} ({sum(f.stat().st_size for f in inj.parent.rglob('*') if f.is_file()) / 1e6:.1f} MB), "
          f"guest {args.guest}, 2 VCPUs on 2 CPUs")
    report: dict = {"generated_branches": meta["branches"], "guest": args.guest, "machine_pid": meta["machine_pid"]}
    report["acceptance"] = acc = acceptance(inj)
    report["throughput"] = throughput(inj, args.jobs)
    n, fw = in_process(inj, "compiled")
    print(f"in-process decode (start-up and numba's cache loading excluded), --jobs 1: {fw:.2f} s "
          f"({n / fw / 1e6:.3f} M/s)")
    report["in_process"] = {"branches": n, "compiled_s": fw}
    if args.reference >= args.branches:  # no smaller trace to make: the reference decoder runs on this one
        report["reference"] = reference(inj, (n, fw))
    elif args.reference:
        rinj, _ = prepare(work / "reference", args.reference, args.guest, args.seed)
        report["reference"] = reference(rinj)
    write_json(args.json, report)
    return 1 if acc["mismatching_lines"] else 0


if __name__ == "__main__":
    sys.exit(main())
