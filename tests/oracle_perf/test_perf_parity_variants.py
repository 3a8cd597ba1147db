"""perf parity over every kind of trace ``ptexport synth`` makes, for each --itrace kind.

Each variant (timing, layout, encoding, faults, ptwrite, power events, pipe
mode, the kcore directory form) is generated once per module, small, and
decoded by perf 6.1 and by ``ptexport dump branches``; the outputs must be
equal line for line, byte for byte (runs of blanks collapsed only where perf
prints no time, Z, and ours is compared without it).  The itrace kinds tested per
variant are the ones that print something there: branches and errors (be),
calls/returns (cr), instructions every 100 (i100), PSB/CBR/power events (p),
ptwrite (w); q and qq (hop and leap modes); sN (skip the first N samples) with p, where perf holds CBR events back.
"""

from __future__ import annotations

import io
import subprocess

import pytest

from ptxtest import needs_perf, slow_after
from ptexport.cli import main

_FIELDS = ["-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"]
_BRANCHES = "4000"

# id -> (synth options, itrace kinds)
VARIANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "loops-tsc-only": (("--program", "loops", "--timing", "tsc"), ("be", "i100")),
    "calls-mtc": (("--program", "calls", "--timing", "mtc", "--mtc-period", "5"), ("be", "cr", "i100", "p", "beq", "iq",
                                                                                 "iqq")),
    "calls-cyc-cbr": (("--program", "calls", "--timing", "cyc", "--cbr", "18"), ("be", "i100", "p", "s7bep")),
    "calls-noretcomp-mixed-ip": (("--program", "calls", "--no-retcomp", "--ip-compression", "mixed", "--tnt", "long"),
                                 ("be", "cr")),
    "threads-2cpus-cyc": (("--program", "threads", "--cpus", "2", "--timing", "cyc"), ("be", "cr", "i100", "p", "s5bep")),
    "threads-per-thread": (("--program", "threads", "--per-thread"), ("be", "i100", "p")),
    "forkexec-2cpus": (("--program", "forkexec", "--cpus", "2"), ("be", "cr", "bq", "iq")),
    "calls-ovf": (("--program", "calls", "--ovf", "3"), ("be", "i100", "beq", "iq")),
    "threads-ovf-cyc": (("--program", "threads", "--cpus", "2", "--ovf", "4", "--timing", "cyc"), ("be",)),
    "calls-truncated": (("--program", "calls", "--truncate", "2", "--psb-period", "1024"), ("be", "i100")),
    "threads-per-thread-truncated": (("--program", "threads", "--per-thread", "--truncate", "2", "--psb-period", "1024"),
                                     ("be",)),
    "forkexec-corrupt": (("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--timing", "cyc",
                                          "--psb-period", "1024"), ("be",)),
    "events-ptwrite-fup": (("--program", "events", "--ptwrite", "fup"), ("be", "w", "i100")),
    "events-ptwrite-nofup": (("--program", "events", "--ptwrite", "nofup"), ("be", "w")),
    "events-ptwrite-ovf": (("--program", "events", "--ptwrite", "fup", "--ovf", "2"), ("be", "w")),
    "events-power": (("--program", "events", "--power"), ("be", "p", "i100", "ipwq", "s40bep", "s2pi100")),
    "events-power-cyc": (("--program", "events", "--power", "--timing", "cyc", "--cbr", "18"), ("be", "p", "s1000bep")),
    "threads-pipe": (("--program", "threads", "--cpus", "2", "--pipe"), ("be", "cr", "bi100")),
    "calls-pipe-faults": (("--program", "calls", "--pipe", "--ovf", "2", "--truncate", "1",
                                            "--psb-period", "1024"), ("be",)),
    "threads-kcore": (("--program", "threads", "--cpus", "2", "--kcore"), ("be", "cr")),
    # 45 K instructions of code (the others: a few hundred), new blocks all along
    "bigcode-cyc": (("--program", "bigcode", "--timing", "cyc"), ("be", "cr", "i100")),
    "bigcode-corrupt": (("--program", "bigcode", "--corrupt", "3", "--psb-period", "1024"), ("be", "i100")),
    # the same code on 4 CPUs, a queue each: one block cache for all (decoder/compiled/decoder.shared_blocks)
    "bigcode-4cpus": (("--program", "bigcode", "--cpus", "4", "--preempt", "300"), ("be", "i100", "cr")),
    # perf record -- PROGRAM: the CPU queues' buffers carry the workload's pid (a timeless decode takes each
    # at the workload's EXIT, the thread current on its CPU then), the CPUs idle after it
    "threads-workload": (("--program", "threads", "--cpus", "2", "--workload"), ("be", "cr")),
    "forkexec-workload": (("--program", "forkexec", "--cpus", "2", "--workload"), ("be",)),
}

CASES = [(v, k) for v, (_, kinds) in VARIANTS.items() for k in kinds]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _collapse(text: str) -> list[str]:
    """Runs of blanks collapsed: only where perf prints no time (Z) and ours is compared without it."""
    return [" ".join(line.split()) for line in _lines(text)]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    made: dict[str, tuple[str, bool]] = {}

    def get(variant: str) -> tuple[str, bool]:
        if variant not in made:
            opts = VARIANTS[variant][0]
            d = tmp_path_factory.mktemp(variant)
            assert main(["synth", "--out", str(d), "--branches", _BRANCHES, "--seed", "7", *opts],
                        out=io.StringIO()) == 0
            path = str(d) if "--kcore" in opts else str(d / "perf.data")
            made[variant] = (path, "--pipe" in opts)
        return made[variant]

    return get


def _perf(path: str, pipe: bool, itrace: str, fields: list[str] = _FIELDS, exact: bool = True) -> list[str]:
    cmd = ["perf", "script", "-i", "-" if pipe else path, f"--itrace={itrace}", *fields]
    if pipe:  # perf reads pipe-mode Intel PT correctly only from a real pipe
        with open(path, "rb") as f:
            cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
            proc = subprocess.run(cmd, stdin=cat.stdout, capture_output=True, text=True, check=True)
            cat.stdout.close()
            cat.wait()
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return _lines(proc.stdout) if exact else _collapse(proc.stdout)


@needs_perf
@pytest.mark.parametrize("variant,itrace", slow_after(CASES, keep=5, unpack=True), ids=[f"{v}-{k}" for v, k in CASES])
def test_variant_equals_perf(trace, variant, itrace):
    path, pipe = trace(variant)
    theirs = _perf(path, pipe, itrace)
    out = io.StringIO()
    assert main(["dump", "branches", path, f"--itrace={itrace}"], out=out) == 0
    mine = _lines(out.getvalue())
    assert theirs, "perf printed nothing: the variant does not exercise this kind"
    if mine != theirs:
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        pytest.fail(f"{len(mine)} lines vs perf's {len(theirs)}; first difference at line {first}:\n"
                    f"  ours: {mine[first] if first < len(mine) else None}\n"
                    f"  perf: {theirs[first] if first < len(theirs) else None}")
    assert mine == theirs


@needs_perf
@pytest.mark.parametrize("variant", slow_after(["forkexec-2cpus", "calls-ovf", "threads-2cpus-cyc", "forkexec-corrupt",
                                                "events-power", "threads-per-thread-truncated", "calls-pipe-faults",
                                                "threads-kcore"]))
@pytest.mark.parametrize("itrace", ["bq", "beq", "bipqq"])
def test_hop_leap_compiled_equals_reference_and_perf(trace, variant, itrace, monkeypatch):
    """Hop and leap modes (q, qq) decode on the compiled path; its text equals the reference's and perf's.
    (Leap mode gives no branch samples between PSBs: its PSB and instruction samples are compared.)"""
    path, pipe = trace(variant)
    if pipe:  # perf script cannot synthesize power events from a pipe ("failed to synthesize 'cbr'")
        itrace = itrace.replace("p", "")
    theirs = _compiled_equals_reference_and_perf(path, pipe, itrace, monkeypatch)
    assert theirs or itrace == "bipqq"  # (no FUP in any PSB+ of a short trace: nothing to leap to)


def _compiled_equals_reference_and_perf(path: str, pipe: bool, itrace: str, monkeypatch) -> list[str]:
    """``dump branches --itrace=ITRACE`` takes the compiled path, and its text equals the reference's
    and perf's, byte for byte; perf's lines."""
    from ptexport import jit
    from ptexport.decoder import backend
    from ptexport.perfdata import open_perf_data
    from ptexport.samples.itrace import parse_itrace
    from ptexport.session.perfsession import DecodeConfig, open_session

    if not pipe:
        with open_perf_data(path) as pd:
            ctx = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace))).decode_context()
            assert backend.choose(ctx).compiled or not jit.available()
    out = io.StringIO()
    assert main(["dump", "branches", path, f"--itrace={itrace}"], out=out) == 0
    compiled = out.getvalue()
    with monkeypatch.context() as m:
        m.setenv("PTEXPORT_REFERENCE", "1")
        out = io.StringIO()
        assert main(["dump", "branches", path, f"--itrace={itrace}"], out=out) == 0
    assert compiled == out.getvalue()
    theirs = _perf(path, pipe, itrace)
    assert _lines(compiled) == theirs
    return theirs


@needs_perf
@pytest.mark.parametrize("variant,itrace", slow_after([
    ("calls-cyc-cbr", "s7bep"), ("threads-2cpus-cyc", "s5bep"), ("threads-2cpus-cyc", "s200bei100"),
    ("events-power", "s40bep"), ("threads-per-thread", "s10bep"), ("calls-ovf", "s3be"), ("forkexec-2cpus", "s20bepq"),
], keep=2, unpack=True))
def test_initial_skip_compiled_equals_reference_and_perf(trace, variant, itrace, monkeypatch):
    """sN (perf drops its first N samples, holding CBR events back meanwhile) decodes on the compiled
    path; its text equals the reference's and perf's."""
    path, pipe = trace(variant)
    assert _compiled_equals_reference_and_perf(path, pipe, itrace, monkeypatch)


@needs_perf
@pytest.mark.parametrize("variant", ["calls-ovf", "calls-truncated", "forkexec-corrupt", "events-ptwrite-ovf",
                                     "calls-pipe-faults"])
def test_fault_variants_report_errors(trace, variant):
    """The fault variants really make perf report decoder errors (and we report the same ones)."""
    path, pipe = trace(variant)
    theirs = [line for line in _perf(path, pipe, "e") if "instruction trace error" in line]
    out = io.StringIO()
    assert main(["dump", "branches", path, "--itrace=e"], out=out) == 0
    assert theirs
    assert _lines(out.getvalue()) == theirs


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("itrace", ["bep", "cr", "s3be", "beq", "iq", "s50bep", "s300bepi100"])
def test_quipper_kinds_equal_perf(quipper, itrace):
    """The real Skylake recording (binaries missing: errors, out-of-decoder failure marks)."""
    theirs = [line for line in _perf(str(quipper), False, itrace) if "[-01]" not in line]  # its 'cycles' samples
    out = io.StringIO()
    assert main(["dump", "branches", str(quipper), f"--itrace={itrace}"], out=out) == 0
    assert theirs
    assert _lines(out.getvalue()) == theirs


def _drop_time(line: str) -> str:
    """A sample line without its time field (perf cannot print time with --itrace=Z)."""
    if line.startswith("instruction trace error"):
        return line
    parts = line.split(" ")
    return " ".join(parts[:2] + parts[3:])


# forkexec with Z walks, in the exec'd child decoded with the maps of the end, bytes capstone rejects
# (ff e8: FF /5 with a register operand) that perf's insn.c decodes as an indirect jmp: "Trace doesn't
# match instruction", and perf goes on.  (perf 6.1 rejects "i100Z": after a period, Z follows its unit.)
TIMELESS_CASES = [("calls-ovf", "beZ"), ("threads-2cpus-cyc", "beZ"), ("threads-per-thread", "beZ"),
                  ("calls-truncated", "beZ"), ("threads-2cpus-cyc", "crZ"), ("threads-2cpus-cyc", "pZ"),
                  ("threads-per-thread", "i100iZ"), ("threads-2cpus-cyc", "bi100iZ"), ("events-ptwrite-ovf", "bewZ"),
                  ("events-power", "bepZ"), ("threads-pipe", "beZ"), ("threads-kcore", "beZ"),
                  ("forkexec-2cpus", "beZ"), ("forkexec-2cpus", "crZ"), ("threads-workload", "beZ"),
                  ("threads-workload", "crZ"), ("threads-workload", "i100iZ"), ("forkexec-workload", "beZ")]


@needs_perf
@pytest.mark.parametrize("variant,itrace", slow_after(TIMELESS_CASES, keep=4, unpack=True),
                         ids=[f"{v}-{k}" for v, k in TIMELESS_CASES])
def test_timeless_decoding_equals_perf(trace, variant, itrace):
    """--itrace=Z: queues decoded whole (per-thread ones, and a workload's CPU queues, at the thread's EXIT),
    the thread current then (a CPU queue's), the maps of the end."""
    path, pipe = trace(variant)
    theirs = _perf(path, pipe, itrace, ["-F", "pid,tid,cpu,ip,addr,flags"], exact=False)
    out = io.StringIO()
    assert main(["dump", "branches", path, f"--itrace={itrace}"], out=out) == 0
    assert theirs
    assert [_drop_time(line) for line in _collapse(out.getvalue())] == theirs


@needs_perf
@pytest.mark.parametrize("opts", [("--program", "threads", "--cpus", "2", "--ovf", "2", "--truncate", "1"),
                                  ("--program", "threads", "--per-thread")], ids=["cpus", "per-thread"])
def test_recording_without_tsc_equals_perf(tmp_path, opts):
    """A recording whose intel_pt event has no TSC (config without the TSC bit) is decoded timeless
    without Z.  ``ptexport synth`` makes no such recording (its traces always carry TSC): its pt_config
    is patched, so only the recording says "no TSC" (the trace keeps its TSC packets)."""
    from ptexport.perfdata.constants import IntelPTConfig
    from ptexport.synth import sideband

    orig = sideband.pt_config
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sideband, "pt_config", lambda o: orig(o) & ~(1 << IntelPTConfig.TSC))
        assert main(["synth", "--out", str(tmp_path), "--branches", _BRANCHES, "--seed", "7", *opts],
                    out=io.StringIO()) == 0
    path = str(tmp_path / "perf.data")
    theirs = _perf(path, False, "be", ["-F", "pid,tid,cpu,ip,addr,flags"], exact=False)
    out = io.StringIO()
    assert main(["dump", "branches", path, "--itrace=be"], out=out) == 0
    assert len(theirs) > 3000
    assert [_drop_time(line) for line in _collapse(out.getvalue())] == theirs
