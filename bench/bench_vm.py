#!/usr/bin/env python3
"""Benchmark and acceptance check: VM traces (issue #6) decoded by the compiled decoder vs perf 6.1.

    python3 bench/bench_vm.py                       # 1 M branches, guest kernel + user (mixed), 2 VCPUs
    python3 bench/bench_vm.py --branches 5M --guest user --reference 0

Generates (cached under /tmp) a host recording with two VCPU threads running a guest
(``ptexport synth --vm``), runs perf's workflow on it (``perf inject --vm-time-correlation``,
``perf inject --guest-data``: vm_verify.perf_pipeline), then, on the injected file:

* acceptance: ``perf script --itrace=be -F machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr --ns``
  and ``ptexport dump branches --jobs 1`` (the same text), compared line for line: samples,
  errors, mismatches (must be 0);
* decode throughput: ``perf script --itrace=b > /dev/null`` vs ``ptexport dump branches --count
  --itrace=b --jobs N`` (each a separate process: start-up and numba's cache loading included);
* the reference decoder (pure Python, ``flow/perfmode.py``) on the first ``--reference`` branches'
  worth of trace (a smaller generated trace; 0: skip), against the compiled one on the same file.

Prints counts, wall times, branches/s and ratios; exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path("/tmp/ptexport-bench")
FIELDS = "machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr"
_INPROCESS = """
import io, sys, time
from ptexport.flow import perffast
if sys.argv[2] == "reference":
    perffast.numba = None  # perffast.supported() is False: the reference decoder
from ptexport.cli import main
argv = ["dump", "branches", "--count", "--itrace=b", "--jobs", "1", sys.argv[1]]
if sys.argv[2] == "compiled":
    main(argv, io.StringIO())  # warm-up: numba's cache loaded, files mapped
t = time.perf_counter()
main(argv, sys.stdout)
print("wall", time.perf_counter() - t)
"""


def _parse_count(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1000, "m": 1000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def prepare(branches: int, guest: str, seed: int) -> tuple[Path, dict]:
    """The injected recording (cached) and the generator's metadata."""
    from ptexport.synth.vm import VmOptions, synthesize_vm
    from ptexport.synth.vm_verify import perf_pipeline

    base = CACHE / f"vm-{guest}-{branches}-s{seed}"
    inj = base / "w" / "inj.data"
    meta_path = base / "meta.json"
    if inj.exists() and meta_path.exists():
        return inj, json.loads(meta_path.read_text())
    t = time.perf_counter()
    meta = synthesize_vm(base / "o", VmOptions(branches=branches, guest=guest, vcpus=2, cpus=2, seed=seed))
    t1 = time.perf_counter()
    perf_pipeline(base / "o", base / "w")
    print(f"generated {base} ({meta['branches']} branches) in {t1 - t:.1f} s, perf inject in "
          f"{time.perf_counter() - t1:.1f} s")
    meta_path.write_text(json.dumps({"branches": meta["branches"], "machine_pid": meta["machine_pid"]}))
    return inj, meta


def timed(cmd: list[str], cwd: Path, stdout: int | object = subprocess.PIPE, env: dict | None = None
          ) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=str(cwd), stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-500:]}")
    return wall, r


def sample_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "[00" in line or "instruction trace error type" in line]


def acceptance(inj: Path) -> int:
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
    return bad


def throughput(inj: Path, jobs: int) -> None:
    cwd = inj.parent
    pw, _ = timed(["perf", "script", "-i", str(inj), "--itrace=b"], cwd, stdout=subprocess.DEVNULL)
    ow, r = timed(["ptexport", "dump", "branches", "--count", "--itrace=b", "--jobs", str(jobs), str(inj)], cwd)
    n = int(r.stdout.split()[0])
    print(f"decode only, {n} branches: perf script --itrace=b > /dev/null {pw:.2f} s ({n / pw / 1e6:.3f} M/s), "
          f"ptexport --count --jobs {jobs} {ow:.2f} s ({n / ow / 1e6:.3f} M/s), ratio ours/perf {pw / ow:.2f}")


def in_process(inj: Path, mode: str) -> tuple[int, float]:
    """(branches, seconds) of ``dump branches --count`` inside one process, after start-up."""
    _, r = timed([sys.executable, "-c", _INPROCESS, str(inj), mode], inj.parent)
    out = r.stdout.split()
    return int(out[0]), float(out[-1])


def reference(inj: Path) -> None:
    n, rw = in_process(inj, "reference")
    _, fw = in_process(inj, "compiled")
    print(f"in-process decode, {n} branches: reference decoder {rw:.2f} s ({n / rw / 1e3:.1f} K/s), "
          f"compiled {fw:.2f} s ({n / fw / 1e6:.3f} M/s): {rw / fw:.0f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", default="1M", help="branches of the generated trace (default 1M)")
    ap.add_argument("--guest", default="mixed", choices=("kernel", "user", "mixed"),
                    help="what the guest runs (default mixed: guest kernel and user code)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--jobs", type=int, default=2, help="ptexport --jobs for the throughput run (default 2)")
    ap.add_argument("--reference", default="100K",
                    help="branches of the trace the reference decoder runs on (default 100K; 0: skip)")
    args = ap.parse_args()
    if args.guest == "kernel":
        raise SystemExit("--guest kernel has no guest sideband to inject; use user or mixed")
    inj, meta = prepare(_parse_count(args.branches), args.guest, args.seed)
    print(f"trace: {inj} ({sum(f.stat().st_size for f in inj.rglob('*') if f.is_file()) / 1e6:.1f} MB), "
          f"guest {args.guest}, 2 VCPUs on 2 CPUs")
    bad = acceptance(inj)
    throughput(inj, args.jobs)
    n, fw = in_process(inj, "compiled")
    print(f"in-process decode (start-up and numba's cache loading excluded), --jobs 1: {fw:.2f} s "
          f"({n / fw / 1e6:.3f} M/s)")
    nref = _parse_count(args.reference)
    if nref:
        rinj, _ = prepare(nref, args.guest, args.seed)
        reference(rinj)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
