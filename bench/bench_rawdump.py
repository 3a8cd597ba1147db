#!/usr/bin/env python3
"""Benchmark: instruction-flow decoding of a raw Intel PT dump of a couple of MB (issue #4, speed).

    python3 bench/bench_rawdump.py                    # generate (cached under /tmp) and measure
    python3 bench/bench_rawdump.py --branches 4M --repeat 3

libipt's ptxed is not packaged here; DESIGN.md section 6 records its figure (a real 2 MiB raw trace,
11 M blocks, 234 M instructions, in 0.3 s).  This script makes a comparable input: a generated
single-CPU trace of ``--branches`` branches whose AUX data is written out as one raw ``.pt`` file,
decoded by ``ptexport dump insns --raw FILE.pt --image ELF:0 --quiet --stat`` (ptxed's conventions)
and by ``--block-decoder``.  Each run is a separate process (imports included); wall time is the
best of ``--repeat``, CPU time user+sys of that run.  Prints MB, instructions, blocks, seconds,
MB/s and instructions/s next to ptxed's figure.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path("/tmp/ptexport-bench")
PTXED = {"mib": 2.0, "blocks": 11e6, "insns": 234e6, "seconds": 0.3}  # DESIGN.md section 6


def make_raw(branches: str, seed: int) -> tuple[Path, Path]:
    d = CACHE / f"raw-{branches}-{seed}"
    raw, elf = d / "raw.pt", d / "calls"
    if raw.exists() and elf.exists():
        return raw, elf
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", "from ptexport.cli import entry; entry()", "synth", "--out", str(d),
                    "--program", "calls", "--branches", branches, "--replay", "on", "--seed", str(seed)],
                   check=True, stdout=subprocess.DEVNULL)
    from ptexport.perfdata import open_perf_data
    from ptexport.perfdata.constants import RecordType as RT

    buf = bytearray()
    with open_perf_data(d / "perf.data") as pd:
        cpus = set()
        for r in pd.records(types=(RT.AUXTRACE,)):
            cpus.add(r.cpu)
            buf += pd.aux_data(r)
    assert len(cpus) == 1, f"expected one CPU's AUX stream, got {cpus}"
    raw.write_bytes(bytes(buf))
    return raw, elf


def timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall and CPU (user+sys of the child) seconds and the output of one run."""
    before = os.times()
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stderr}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, p.stdout + p.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", default="2M", help="branches of the generated trace (default 2M: about 2.1 MB)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    raw, elf = make_raw(args.branches, args.seed)
    mb = raw.stat().st_size / 1e6
    ptexport = [sys.executable, "-c", "from ptexport.cli import entry; entry()"]
    base = [*ptexport, "dump", "insns", "--raw", str(raw), "--image", f"{elf}:0", "--quiet"]
    print(f"raw dump: {raw} ({mb:.2f} MB)")
    for label, extra in (("insn decoder", ["--stat"]), ("block decoder", ["--block-decoder", "--stat", "--stat:insn", "--stat:blocks"])):
        best = None
        for _ in range(args.repeat):
            wall, cpu, text = timed(base + extra)
            if best is None or wall < best[0]:
                best = (wall, cpu, text)
        wall, cpu, text = best
        insns = re.search(r"insn:\s*(\d+)", text)
        blocks = re.search(r"blocks:\s*(\d+)", text)
        n = int(insns.group(1)) if insns else 0
        errors = sum(1 for line in text.splitlines() if line.startswith("[") and "error" in line)
        print(f"ptexport {label}: {wall:.2f} s wall, {cpu:.2f} s CPU; {n / 1e6:.2f} M insns"
              + (f", {int(blocks.group(1)) / 1e6:.2f} M blocks" if blocks else "")
              + f", {errors} error lines; {mb / wall:.2f} MB/s, {n / wall / 1e6:.2f} M insns/s")
    p = PTXED
    print(f"ptxed (DESIGN.md, real trace): {p['mib']:.0f} MiB, {p['blocks'] / 1e6:.0f} M blocks, "
          f"{p['insns'] / 1e6:.0f} M insns in {p['seconds']} s = {p['mib'] * 1.048576 / p['seconds']:.1f} MB/s, "
          f"{p['insns'] / p['seconds'] / 1e6:.0f} M insns/s")


if __name__ == "__main__":
    main()
