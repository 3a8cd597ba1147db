#!/usr/bin/env python3
"""Benchmark: instruction-flow decoding of a raw Intel PT dump of a couple of MB (issue #4, speed).

    python3 bench/bench_rawdump.py                    # generate (in a temporary directory) and measure
    python3 bench/bench_rawdump.py --branches 4M --repeat 3 --keep DIR --json report.json

libipt's ptxed is not packaged here; DESIGN.md section 6 records its figure (a real 2 MiB raw trace,
11 M blocks, 234 M instructions, in 0.3 s).  This script makes a comparable input: a generated
single-CPU trace of ``--branches`` branches whose AUX data is written out as one raw ``.pt`` file,
decoded by ``ptexport dump insns --raw FILE.pt --image ELF:0 --quiet --stat`` (ptxed's conventions)
and by ``--block-decoder``.  Each run is a separate process (imports included); wall time is the
best of ``--repeat``, CPU time user+sys of that run.  Prints MB, instructions, blocks, seconds,
MB/s and instructions/s next to ptxed's figure.  ``--keep DIR`` keeps the trace, ``raw.pt`` and
the ELF; output paths (``--keep``, ``--json``) that exist are refused unless ``--force``; ``--tiny``
is a quick check (2 k branches).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from _common import add_options, measured, one_line_errors, parse, parse_count, workdir, write_json

PTXED = {"mib": 2.0, "blocks": 11e6, "insns": 234e6, "seconds": 0.3}  # DESIGN.md section 6


def make_raw(d: Path, branches: int, seed: int, program: str = "calls",
             extra: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A generated single-CPU trace in ``d`` and its AUX data as ``d/raw.pt``; (raw.pt, the ELF).

    ``program`` ``hotloop`` with ``extra`` ``("--tnt", "long", "--timing", "tsc")`` is the loop-heavy
    shape of real compute code (about 180 instructions per byte of trace, as ptxed's 2 MiB Alder
    Lake reference has ~117); ``calls`` is branch-heavy (~5 instructions per branch)."""
    raw, elf = d / "raw.pt", d / program
    subprocess.run([sys.executable, "-c", "from ptexport.cli import entry; entry()", "synth", "--out", str(d),
                    "--program", program, "--branches", str(branches), "--replay", "on", "--seed", str(seed),
                    *extra], check=True, stdout=subprocess.DEVNULL)
    from ptexport.perfdata import open_perf_data
    from ptexport.perfdata.constants import RecordType as RT

    buf = bytearray()
    with open_perf_data(d / "perf.data") as pd:
        cpus = set()
        for r in pd.records(types=(RT.AUXTRACE,)):
            cpus.add(r.cpu)
            buf += pd.aux_data(r)
    if len(cpus) != 1:
        raise SystemExit(f"expected one CPU's AUX stream, got {sorted(cpus)}")
    raw.write_bytes(bytes(buf))
    return raw, elf


def timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall and CPU (user+sys of the child) seconds and the output of one run."""
    argv = measured(argv)
    before = os.times()
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stderr}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, p.stdout + p.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", type=parse_count, default=2_000_000,
                    help="branches of the generated trace (default 2M: about 2.1 MB)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"branches": 2000, "repeat": 1})
    with one_line_errors(ap), workdir(args.keep, "bench_rawdump.") as work:
        return run(args, *make_raw(work, args.branches, args.seed))


def run(args: argparse.Namespace, raw: Path, elf: Path) -> int:
    mb = raw.stat().st_size / 1e6
    ptexport = [sys.executable, "-c", "from ptexport.cli import entry; entry()"]
    base = [*ptexport, "dump", "insns", "--raw", str(raw), "--image", f"{elf}:0", "--quiet"]
    print(f"raw dump: {raw} ({mb:.2f} MB)")
    report: dict = {"raw_bytes": raw.stat().st_size, "repeat": max(1, args.repeat), "decoders": {},
                    "ptxed": {"mib": PTXED["mib"], "blocks": PTXED["blocks"], "insns": PTXED["insns"],
                              "seconds": PTXED["seconds"]}}
    for label, extra in (("insn decoder", ["--stat"]), ("block decoder", ["--block-decoder", "--stat", "--stat:insn", "--stat:blocks"])):
        best = None
        for _ in range(max(1, args.repeat)):
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
        report["decoders"][label.replace(" ", "_")] = {
            "wall_s": wall, "cpu_s": cpu, "insns": n, "blocks": int(blocks.group(1)) if blocks else None,
            "error_lines": errors, "mb_per_s": mb / wall, "insns_per_s": n / wall,
            "insns_per_s_ratio_to_ptxed": n / wall / (PTXED["insns"] / PTXED["seconds"])}
    p = PTXED
    print(f"ptxed (DESIGN.md, real trace): {p['mib']:.0f} MiB, {p['blocks'] / 1e6:.0f} M blocks, "
          f"{p['insns'] / 1e6:.0f} M insns in {p['seconds']} s = {p['mib'] * 1.048576 / p['seconds']:.1f} MB/s, "
          f"{p['insns'] / p['seconds'] / 1e6:.0f} M insns/s")
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
