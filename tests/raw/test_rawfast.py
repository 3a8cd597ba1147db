"""The compiled raw walker (ptexport.raw.insn_compiled) against the reference decoder (issue #13).

``dump insns --raw`` walks plain stretches of the trace in a compiled kernel and hands everything
else to the reference InsnDecoder; its output must be the reference's line for line.  Checked on
every case of the project's corpus (several ptxed option sets, each case's CPUs), on generated
traces of the synth encoder (return compression off, mixed IP compression, long TNT, PTWRITE,
power events, overflows, corrupted bytes, CYC timing), on real raw traces decoded over a
pseudo-random code image (error and recovery paths everywhere), and the CLI's default path.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ptxtest import TESTDATA, slow_after
from ptexport.cli import dump_insns as D
from ptexport.cli import main
from ptexport.raw import ptxed
from ptexport.raw import insn_compiled as rawfast
from ptexport.raw.backend import compiled_walker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracle_libipt" / "corpus"))
import corpuslib as C  # noqa: E402

needs_numba = pytest.mark.skipif(rawfast._run_kernel is None, reason="numba not available")
pytestmark = needs_numba

OPTION_SETS = [
    [],
    ["--block-decoder", "--block:end-on-call", "--event:ip", "--resync-on-error", "--stat"],
]
MORE_OPTION_SETS = [
    ["--quiet", "--stat"],
    ["--event:ip", "--event:time", "--resync-on-error", "--stat"],
    ["--block-decoder", "--stat"],
    ["--block-decoder", "--block:end-on-jump", "--stat", "--event:ip"],
]


def _args(argv):
    ap = argparse.ArgumentParser()
    D.add_arguments(ap)
    return ap.parse_args(argv)


def decode_both(argv):
    """(reference lines, compiled lines, the Walker) of ``dump insns`` ``argv`` (raw mode)."""
    args = _args(argv)
    dec, opts, _ = D.build(args)
    ref = list(ptxed.ptxed_lines(dec, opts))
    dec, opts, _ = D.build(args)
    fast = compiled_walker(dec, opts, dec.query.evdec.buf, eager=True)
    got = [ln for chunk in ptxed.ptxed_lines(dec, opts, fast=fast) for ln in chunk.split("\n")]
    return ref, got, fast


def assert_same(ref, got, what):
    if ref != got:
        i = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
        pytest.fail(f"{what}: compiled walker differs from the reference at line {i}:\n"
                    f"  reference: {ref[max(0, i - 2):i + 3]}\n  compiled:  {got[max(0, i - 2):i + 3]}\n"
                    f"  ({len(ref)} vs {len(got)} lines)")


# ------------------------------------------------------------------ the corpus

# Cases whose flow is mostly plain TNT/TIP stretches: the compiled walker must carry part of it.
ENGAGED = {"call-ret-compressed", "call-ret-uncompressed", "loop-tnt-short", "ip-mixed", "ip-full",
           "ip-sext48", "ip-upd48", "psb-mid", "mode32"}


def _corpus(case, tmp_path, option_sets):
    b = C.build(case, tmp_path)
    used = 0
    for cpu in case.cpus or [None]:
        base = C.dump_argv(b, cpu=cpu)[2:]
        for extra in option_sets:
            ref, got, fast = decode_both(base + extra)
            assert_same(ref, got, f"{case.name} cpu={cpu} {' '.join(extra)}")
            used += fast.ninsn if fast is not None else 0
    if case.name in ENGAGED:
        assert used > 0, "the compiled walker never ran"


needs_binutils = pytest.mark.skipif(shutil.which("as") is None or shutil.which("ld") is None,
                                    reason="binutils missing")


@needs_binutils
@pytest.mark.parametrize("case", slow_after(C.all_cases(), keep=4), ids=lambda c: c.name)
def test_corpus_compiled_equals_reference(case, tmp_path):
    _corpus(case, tmp_path, OPTION_SETS)


@pytest.mark.slow
@needs_binutils
@pytest.mark.parametrize("case", C.all_cases(), ids=lambda c: c.name)
def test_corpus_compiled_equals_reference_more_options(case, tmp_path):
    _corpus(case, tmp_path, MORE_OPTION_SETS)


# ------------------------------------------------------------------ generated traces

SYNTH = [
    ("calls", ["--branches", "2000"]),
    ("calls", ["--branches", "2000", "--no-retcomp", "--ip-compression", "mixed", "--tnt", "long"]),
    ("loops", ["--branches", "2000", "--timing", "cyc", "--ptwrite", "fup", "--cbr", "20"]),
    ("events", ["--branches", "2000", "--power", "--ovf", "3"]),
    ("calls", ["--branches", "2000", "--corrupt", "4", "--psb-period", "512"]),
]
SYNTH_IDS = ["calls", "calls-noretcomp-mixedip-longtnt", "loops-cyc-ptwrite-cbr", "events-power-ovf",
             "calls-corrupt-psb512"]


def _synth_raw(tmp: Path, program: str, extra: list[str], seed: int) -> tuple[Path, Path]:
    subprocess.run([sys.executable, "-c", "from ptexport.cli import entry; entry()", "synth", "--out",
                    str(tmp), "--program", program, "--cpus", "1", "--seed", str(seed), *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from ptexport.perfdata import open_perf_data
    from ptexport.perfdata.constants import RecordType as RT

    buf = bytearray()
    with open_perf_data(tmp / "perf.data") as pd:
        for r in pd.records(types=(RT.AUXTRACE,)):
            buf += pd.aux_data(r)
    raw = tmp / "raw.pt"
    raw.write_bytes(bytes(buf))
    return raw, tmp / program


@pytest.mark.slow
@pytest.mark.parametrize("i", [pytest.param(i, marks=[pytest.mark.slow] if i in (0, 2) else [])
                               for i in range(len(SYNTH))], ids=SYNTH_IDS)
def test_synth_compiled_equals_reference(i, tmp_path):
    program, extra = SYNTH[i]
    raw, elf = _synth_raw(tmp_path, program, extra, seed=11 + i)
    total = fast_total = 0
    for opts in OPTION_SETS + [["--quiet", "--stat"]]:
        ref, got, fast = decode_both(["--raw", str(raw), "--image", f"{elf}:0", *opts])
        assert_same(ref, got, f"synth {program} {' '.join(extra)} {' '.join(opts)}")
        total += sum(1 for ln in ref if ln[:1] in "0123456789abcdef?") if not opts else 0
        fast_total += fast.ninsn if not opts else 0
    assert total > 1000
    if "--corrupt" not in extra:
        # the compiled walker carried most of the flow
        assert fast_total > total // 2, (fast_total, total)


QUIET_OPTION_SETS = [
    ["--quiet", "--stat"],
    ["--quiet", "--stat", "--resync-on-error"],
    ["--quiet", "--block-decoder", "--stat"],
    ["--quiet", "--block-decoder", "--block:end-on-call", "--block:end-on-jump", "--stat"],
]


def test_quiet_walk_across_disabled_gaps(tmp_path):
    """A quiet walk crosses tracing-disabled gaps (TIP.PGD, PSB+, TIP.PGE around each syscall of the
    generated program) in the kernel: same counts and errors as the reference, on the trace and
    on mutations of it (gaps cut short, bad packets inside, PSBs spliced in)."""
    import random

    from ptxtest import mutate_trace

    raw, elf = _synth_raw(tmp_path, "calls", ["--branches", "3000", "--replay", "on"], seed=3)
    for opts in QUIET_OPTION_SETS + [["--stat"], ["--event:time", "--quiet", "--stat"]]:
        ref, got, fast = decode_both(["--raw", str(raw), "--image", f"{elf}:0", *opts])
        assert_same(ref, got, " ".join(opts))
        if "--quiet" in opts and "--event:time" not in opts:
            assert fast.gaps > 5, fast.gaps
        else:
            assert fast.gaps == 0   # events printed (or their time): the reference's business
    rng = random.Random(7)
    trace = raw.read_bytes()
    part = tmp_path / "mutated.pt"
    # every other gap without its PSB+ (the last IP is not reset there: the PGE's IP is compressed
    # against the one before the gap), as user-space traces have most of them
    nopsb = _drop_psbs(trace, every=2)
    gaps = 0
    for i, buf in enumerate([nopsb] + [mutate_trace(trace if i % 2 else nopsb, rng, 8)
                                       for i in range(12)]):
        part.write_bytes(buf)
        for opts in QUIET_OPTION_SETS:
            ref, got, fast = decode_both(["--raw", str(part), "--image", f"{elf}:0", *opts])
            assert_same(ref, got, f"mutation {i} {' '.join(opts)}")
            gaps += fast.gaps
            if i == 0:
                assert fast.gaps > 5, fast.gaps
    assert gaps > 0


def _drop_psbs(trace: bytes, every: int) -> bytes:
    """``trace`` without every ``every``-th PSB+ (PSB .. PSBEND) after the first."""
    from ptexport.pt import packets_compiled
    from ptexport.pt.packets import PacketKind as K

    cols, _ = packets_compiled.decode_columns(trace, None)
    kind, off, size = cols["kind"], cols["offset"], cols["size"]
    out, pos = bytearray(), 0
    for i in np.nonzero(kind == K.PSB)[0][1::every]:
        e = i
        while kind[e] != K.PSBEND:
            e += 1
        out += trace[pos:int(off[i])]
        pos = int(off[e]) + int(size[e])
    return bytes(out + trace[pos:])


# ------------------------------------------------------------------ real traces, random code

REAL = TESTDATA / "real"


def _random_code(path: Path, size: int, seed: int) -> None:
    """Pseudo-random bytes with many branch opcodes (jcc, call, ret, jmp, indirect)."""
    rng = np.random.default_rng(seed)
    code = rng.integers(0, 256, size, dtype=np.uint8)
    pick = rng.random(size)
    code[pick < 0.04] = 0x74            # jz rel8
    code[(pick >= 0.04) & (pick < 0.05)] = 0xC3   # ret
    code[(pick >= 0.05) & (pick < 0.06)] = 0xE8   # call rel32
    code[(pick >= 0.06) & (pick < 0.30)] = 0x90   # nop
    path.write_bytes(code.tobytes())


def _prefix(src: Path, dst: Path, n: int) -> Path:
    dst.write_bytes(src.read_bytes()[:n])
    return dst


@pytest.mark.slow
def test_simplept_adl_random_code(tmp_path):
    raw = REAL / "simplept-adl" / "ptout.0"
    if not raw.exists():
        pytest.skip("simplept-adl not in shared/")
    part = _prefix(raw, tmp_path / "part.pt", 96 * 1024)
    code = tmp_path / "code.bin"
    _random_code(code, 4096, 5)
    for opts in (["--quiet", "--stat"], ["--resync-on-error", "--stat"], ["--block-decoder", "--stat"]):
        ref, got, fast = decode_both(["--raw", str(part), "--cpu", "6/151/2", "--image",
                                      f"{code}:0x56124be91000", *opts])
        assert_same(ref, got, f"simplept-adl over random code {' '.join(opts)}")
        assert any("error" in ln for ln in ref)


@pytest.mark.parametrize("name", ["libxdc-foo", "libxdc-icelake-tip"])
def test_libxdc_compiled_equals_reference(name, tmp_path):
    d = REAL / name
    if not d.exists():
        pytest.skip(f"{name} not in shared/")
    trace = next(p for p in sorted(d.iterdir()) if p.name not in ("SOURCE.txt", "ptdump.counts", "ptdump.txt.gz"))
    part = _prefix(trace, tmp_path / "part.pt", 64 * 1024)
    ref, got, _ = decode_both(["--raw", str(part), "--quiet", "--stat"])
    assert_same(ref, got, name)


# ------------------------------------------------------------------ the CLI

@pytest.fixture(scope="module")
def small_synth(tmp_path_factory):
    return _synth_raw(tmp_path_factory.mktemp("cli"), "calls", ["--branches", "2000"], seed=3)


def _spy(monkeypatch):
    seen = {"insns": 0, "calls": 0}
    real = rawfast.Walker.step

    def step(self, dec):
        got = real(self, dec)
        seen["calls"] += 1
        if got is not None and got[0] is not None:
            seen["insns"] += got[0][1]
        return got

    monkeypatch.setattr(rawfast.Walker, "step", step)
    return seen


def test_cli_uses_compiled_walker_by_default(small_synth, monkeypatch):
    from ptexport.raw import backend as rawfast_switch
    raw, elf = small_synth
    argv = ["dump", "insns", "--raw", str(raw), "--image", f"{elf}:0", "--quiet", "--stat"]
    monkeypatch.delenv("PTEXPORT_RAW_REFERENCE", raising=False)
    monkeypatch.delenv("PTEXPORT_RAW_COMPILED", raising=False)
    seen = _spy(monkeypatch)
    # default: the lazy walker; a small trace stays on the reference (loading numba costs more)
    out = io.StringIO()
    assert main(argv, out) == 0
    n = int(out.getvalue().split("insn: ")[1].split(".")[0])
    assert n > 5000 and seen["calls"] == 0
    # ... and it switches as soon as the reference's estimated rest is above the price
    monkeypatch.setattr(rawfast_switch, "SWITCH_AFTER_S", 0.0)
    monkeypatch.setattr(rawfast_switch, "_MIN_ELAPSED_S", 0.0)
    monkeypatch.setattr(rawfast_switch, "_CHECK_EVERY", 1)
    lazy = io.StringIO()
    assert main(argv, lazy) == 0
    assert seen["insns"] > n // 2 and lazy.getvalue() == out.getvalue()
    monkeypatch.undo()
    seen = _spy(monkeypatch)
    # PTEXPORT_RAW_COMPILED=1: compiled from the first instruction
    monkeypatch.setenv("PTEXPORT_RAW_COMPILED", "1")
    eager = io.StringIO()
    assert main(argv, eager) == 0
    assert seen["insns"] > n // 2 and eager.getvalue() == out.getvalue()
    # --reference and PTEXPORT_RAW_REFERENCE=1 win: the reference alone
    for how in ("flag", "env"):
        seen.update(insns=0, calls=0)
        ref = io.StringIO()
        if how == "env":
            monkeypatch.setenv("PTEXPORT_RAW_REFERENCE", "1")
            assert main(argv, ref) == 0
            monkeypatch.delenv("PTEXPORT_RAW_REFERENCE")
        else:
            assert main(argv + ["--reference"], ref) == 0
        assert seen["calls"] == 0
        assert ref.getvalue() == out.getvalue()


def test_cli_printing_equal(small_synth, monkeypatch):
    raw, elf = small_synth
    monkeypatch.setenv("PTEXPORT_RAW_COMPILED", "1")
    argv = ["dump", "insns", "--raw", str(raw), "--image", f"{elf}:0", "--event:ip"]
    a, b = io.StringIO(), io.StringIO()
    assert main(argv, a) == 0
    assert main(argv + ["--reference"], b) == 0
    assert a.getvalue() == b.getvalue()
    assert a.getvalue().count("\n") > 5000


def test_format_ips():
    ips = np.array([0, 0x401000, 0xFFFFFFFF81000000, (1 << 64) - 1], np.uint64)
    assert rawfast.Walker.format_ips(ips, False) == "".join(f"{int(v):016x}\n" for v in ips)
    assert rawfast.Walker.format_ips(ips, True) == "".join(f"? {int(v):016x}\n" for v in ips)


# ------------------------------------------------------------------ mutated traces

FUZZ_CASES = ["loop-tnt-short", "call-ret-compressed", "call-ret-uncompressed", "ip-mixed", "psb-mid",
              "nomap-tip-resync", "interrupt-async", "far-int-iret", "ovf-fup", "tsx-abort",
              "fup-tip_pgd-resume", "mode32"]


def _decode_mem(trace: bytes, segs, opts: ptxed.PtxedOptions, compiled: bool) -> list[str]:
    from ptexport.raw.insn import InsnDecoder
    from ptexport.raw.query import DecoderConfig
    from ptexport.images.image import Image

    image = Image()
    for code, org in segs:
        image.add_bytes(code, org)
    dec = InsnDecoder(trace, image, DecoderConfig())
    fast = compiled_walker(dec, opts, trace, eager=True) if compiled else None
    return [ln for chunk in ptxed.ptxed_lines(dec, opts, fast=fast) for ln in chunk.split("\n")]


@pytest.mark.parametrize("seed", range(2))
def test_fuzz_mutated_traces_equal(seed, tmp_path_factory):
    import random

    from ptxtest import corpus_build, corpus_segments, mutate_trace

    rng = random.Random(500 + seed)
    built = {}
    for name in FUZZ_CASES:
        b = corpus_build(name, tmp_path_factory.mktemp(name))
        built[name] = (b.pt_path.read_bytes(), corpus_segments(b))
    for i in range(30):
        name = rng.choice(FUZZ_CASES)
        trace, segs = built[name]
        buf = mutate_trace(trace, rng, 6)
        for opts in (ptxed.PtxedOptions(stat=True, event_ip=True),
                     ptxed.PtxedOptions(stat=True, resync_on_error=True, block_decoder=True)):
            ref = _decode_mem(bytes(buf), segs, opts, False)
            got = _decode_mem(bytes(buf), segs, opts, True)
            assert_same(ref, got, f"seed {seed} #{i} {name}")
