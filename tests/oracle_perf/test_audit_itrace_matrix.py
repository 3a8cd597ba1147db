"""Issue #4 acceptance, perf parity: every generator variant x every --itrace kind the issue names.

The issue asks for ``dump branches`` == ``perf script --itrace=K -F time,cpu,pid,tid,ip,addr,flags``
for K in be, cr, i1i, p, w "on every generator variant and on the perf-quipper recording".
tests/oracle_perf/test_perf_parity_variants.py checks each variant only for the kinds that print
something there, and i100 instead of i1i; this module runs the full matrix: where perf prints
nothing for a kind, ours must print nothing too.  The generator variants are those of
test_perf_parity_variants.py plus the encodings and layouts it leaves out (preemption, event trace,
no migration, the fixed IP compressions).
"""

from __future__ import annotations

import io
import subprocess

import pytest

from ptxtest import QUIPPER, needs_perf
from ptexport.cli import main

KINDS = ("be", "cr", "i1i", "p", "w")
_FIELDS = ["-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"]
_BRANCHES = "3000"

VARIANTS: dict[str, tuple[str, ...]] = {
    "loops-tsc-only": ("--program", "loops", "--timing", "tsc"),
    "calls-mtc": ("--program", "calls", "--timing", "mtc", "--mtc-period", "5"),
    "calls-cyc-cbr": ("--program", "calls", "--timing", "cyc", "--cbr", "18"),
    "calls-noretcomp-mixed-ip": ("--program", "calls", "--no-retcomp", "--ip-compression", "mixed", "--tnt", "long"),
    "calls-ip-full": ("--program", "calls", "--ip-compression", "full"),
    "calls-ip-sext48": ("--program", "calls", "--ip-compression", "sext48"),
    "calls-ip-upd48": ("--program", "calls", "--ip-compression", "upd48"),
    "threads-2cpus-cyc": ("--program", "threads", "--cpus", "2", "--timing", "cyc"),
    "threads-no-migrate": ("--program", "threads", "--cpus", "2", "--no-migrate"),
    "threads-per-thread": ("--program", "threads", "--per-thread"),
    "threads-preempt": ("--program", "threads", "--cpus", "2", "--preempt", "700"),
    "threads-event-trace": ("--program", "threads", "--cpus", "2", "--preempt", "700", "--event-trace"),
    "forkexec-2cpus": ("--program", "forkexec", "--cpus", "2"),
    "calls-ovf": ("--program", "calls", "--ovf", "3"),
    "threads-ovf-cyc": ("--program", "threads", "--cpus", "2", "--ovf", "4", "--timing", "cyc"),
    "calls-truncated": ("--program", "calls", "--truncate", "2", "--psb-period", "1024"),
    "threads-per-thread-truncated": ("--program", "threads", "--per-thread", "--truncate", "2", "--psb-period", "1024"),
    "forkexec-corrupt": ("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--timing", "cyc",
                         "--psb-period", "1024"),
    "events-ptwrite-fup": ("--program", "events", "--ptwrite", "fup"),
    "events-ptwrite-nofup": ("--program", "events", "--ptwrite", "nofup"),
    "events-ptwrite-ovf": ("--program", "events", "--ptwrite", "fup", "--ovf", "2"),
    "events-power": ("--program", "events", "--power"),
    "events-power-cyc": ("--program", "events", "--power", "--timing", "cyc", "--cbr", "18"),
    "threads-pipe": ("--program", "threads", "--cpus", "2", "--pipe"),
    "calls-pipe-faults": ("--program", "calls", "--pipe", "--ovf", "2", "--truncate", "1", "--psb-period", "1024"),
    "threads-kcore": ("--program", "threads", "--cpus", "2", "--kcore"),
}


def _collapse(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _drop_addr(line: str) -> str:
    """A sample line without its addr field: ``ip => addr`` for branches, ``addr ip`` for other samples."""
    if line.startswith("instruction trace error"):
        return line
    if " => " in line:
        return line.split(" => ")[0]
    parts = line.split(" ")
    return " ".join(parts[:-2] + parts[-1:])


def _no_addr(pipe: bool, kind: str) -> bool:
    """perf 6.1 on a pipe-mode file cannot print addr for its instructions/power/ptwrite events
    ("Samples for 'instructions:u' event do not have ADDR attribute set"): compare without it."""
    return pipe and kind in ("i1i", "p", "w")


def _perf(path: str, pipe: bool, itrace: str) -> list[str]:
    fields = ["-F", "pid,tid,cpu,time,ip,flags", "--ns"] if _no_addr(pipe, itrace) else _FIELDS
    cmd = ["perf", "script", "-i", "-" if pipe else path, f"--itrace={itrace}", *fields]
    if pipe:  # perf 6.1 reads pipe-mode Intel PT correctly only from a real pipe
        with open(path, "rb") as f:
            cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
            proc = subprocess.run(cmd, stdin=cat.stdout, capture_output=True, text=True, check=True)
            cat.stdout.close()
            cat.wait()
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return _collapse(proc.stdout)


def _ours(path: str, itrace: str) -> list[str]:
    out = io.StringIO()
    assert main(["dump", "branches", path, f"--itrace={itrace}"], out=out) == 0
    return _collapse(out.getvalue())


def _compare(path: str, pipe: bool, drop=lambda line: False) -> dict[str, int]:
    """Lines per kind; fails listing every kind whose output differs from perf's."""
    counts, bad = {}, []
    for kind in KINDS:
        theirs = [line for line in _perf(path, pipe, kind) if not drop(line)]
        mine = _ours(path, kind)
        if _no_addr(pipe, kind):
            mine = [_drop_addr(line) for line in mine]
        counts[kind] = len(theirs)
        if mine != theirs:
            i = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            bad.append(f"--itrace={kind}: {len(mine)} lines vs perf's {len(theirs)}, first difference at line {i}:\n"
                       f"    ours: {mine[i] if i < len(mine) else None}\n"
                       f"    perf: {theirs[i] if i < len(theirs) else None}")
    assert not bad, "\n".join(bad)
    return counts


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_itrace_kind_equals_perf(synth_trace, variant):
    opts = VARIANTS[variant]
    d = synth_trace("--branches", _BRANCHES, "--seed", "11", *opts)  # some shared with tests/dbexport/test_export_fast_vs_ref.py
    path = str(d) if "--kcore" in opts else str(d / "perf.data")
    counts = _compare(path, "--pipe" in opts)
    assert counts["be"] > 1000 and counts["i1i"] > counts["be"] / 2  # the trace is decoded, not empty on both sides
    if "--ptwrite" in opts:
        assert counts["w"] > 0
    if "--power" in opts or "--cbr" in opts:
        assert counts["p"] > 0


@needs_perf
def test_quipper_every_itrace_kind_equals_perf():
    if not QUIPPER.exists():
        pytest.skip("perf-quipper recording not found")
    # perf also prints the recording's 'cycles' samples ([-01]): not Intel PT samples
    counts = _compare(str(QUIPPER), False, drop=lambda line: "[-01]" in line)
    # perf 6.1 here: 619 branch samples and "114 instruction trace errors" (DESIGN.md section 5 says 115)
    assert counts["be"] == 619 + 114


@needs_perf
@pytest.mark.parametrize("itrace", ["bZe", "bepZ", "crZ"])
def test_quipper_timeless_equals_perf(itrace):
    """--itrace=Z on the perf-quipper recording (perf record -- echo, binaries not here): its two CPU
    queues carry the workload's pid and perf decodes both when echo exits, as echo.  perf script fetches
    the instruction at each sample it prints that carries none, an asynchronous 'hw int' in
    libselinux.so.1 too: the object is marked unreadable before its first PT read, which is then
    reported alone (the second is silent), where libpcre.so.1.2.8, never fetched, reports two.
    --count agrees."""
    import re

    if not QUIPPER.exists():
        pytest.skip("perf-quipper recording not found")
    proc = subprocess.run(["perf", "script", "-i", str(QUIPPER), f"--itrace={itrace}", "-F", "pid,tid,cpu,ip,addr,flags"],
                          capture_output=True, text=True, check=True)
    theirs = [line if "instruction trace error" in line else re.sub(r"\] ", "]: ", line, count=1)
              for line in proc.stdout.splitlines() if "[-01]" not in line]
    out = io.StringIO()
    assert main(["dump", "branches", str(QUIPPER), f"--itrace={itrace}"], out=out) == 0
    mine = [re.sub(r"\s+0\.000000000:", ":", line) for line in out.getvalue().splitlines()]
    assert _collapse("\n".join(mine)) == _collapse("\n".join(theirs))
    errors = sum("instruction trace error" in line for line in theirs)
    assert sum("0x7fb36d28fbe0" in line for line in theirs) == 0  # (libselinux's second read: silent)
    assert errors > 100 if "e" in itrace else errors == 0
    out = io.StringIO()
    assert main(["dump", "branches", "--count", str(QUIPPER), f"--itrace={itrace}"], out=out) == 0
    assert out.getvalue().strip() == f"{len(_collapse(chr(10).join(theirs))) - errors} samples, {errors} errors"
