"""Bad input: error records with offsets, recovery like libipt, and a seeded fuzz run.

A corrupted or random trace must never end in a traceback or a hang: every
problem becomes a ``[offset, ip: error: ...]`` line and decoding goes on at the
next PSB (or, with --resync-on-error, at the next IP the trace gives).
"""

from __future__ import annotations

import random
import re
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from ptexport.raw.insn import InsnDecoder
from ptexport.raw.ptxed import PtxedOptions, ptxed_lines
from ptexport.raw.query import DecoderConfig
from ptexport.images.image import Image
from ptxtest import corpus_build, corpus_segments, mutate_trace

ERROR_RE = re.compile(r"^\[([0-9a-f]+), ([0-9a-f]+): (?:sync |resync )?error: (.+)\]$")
MAX_LINES = 200_000
CASES_DIR = Path(__file__).resolve().parents[1] / "oracle_libipt" / "corpus" / "cases"


# The project's own corpus cases (tests/oracle_libipt/corpus/cases), built once per session.
_CASES = {}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    def get(name):
        if name not in _CASES:
            _CASES[name] = corpus_build(name, tmp_path_factory.mktemp(name))
        b = _CASES[name]
        return b.pt_path.read_bytes(), corpus_segments(b), b
    return get


def _decode(trace: bytes, segments, **opts) -> list[str]:
    image = Image()
    for code, org in segments:
        image.add_bytes(code, org)
    dec = InsnDecoder(trace, image, DecoderConfig())
    out = []
    for line in ptxed_lines(dec, PtxedOptions(**opts)):
        out.append(line)
        assert len(out) < MAX_LINES, "runaway output"
    return out


@contextmanager
def _deadline(seconds: int):
    def fire(*_):
        raise TimeoutError(f"decoding took more than {seconds}s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_error_lines_carry_offsets_and_decoding_goes_on(corpus):
    # Code missing from the image at the target of an indirect jump: "no memory mapped"; without
    # --resync-on-error nothing until the next PSB, then the flow goes on (the emulator's lines).
    trace, segs, b = corpus("nomap-tip-psb")
    lines = _decode(trace, segs)
    errors = [ERROR_RE.match(x) for x in lines if "error" in x]
    assert errors and all(errors)
    assert all(int(m.group(1), 16) <= len(trace) for m in errors)
    assert lines == b.expected
    # With --resync-on-error the decoder goes on at the next TIP instead.
    trace, segs, b = corpus("nomap-tip-resync")
    assert _decode(trace, segs, resync_on_error=True) == b.expected


def test_bad_packet_reports_offset_and_resumes_at_next_psb(corpus):
    trace, segs, _ = corpus("loop-tnt-short")
    first = trace.index(b"\x02\x23") + 2     # the first packet after the PSB+: a short TNT
    assert trace[first] & 1 == 0 and trace[first] > 2
    bad = bytearray(trace)
    bad[first] = 0x39          # the TNT packet becomes an unknown opcode
    lines = _decode(bytes(bad) + trace, segs)
    good = _decode(trace, segs)
    # The error with its offset (found while reading ahead right after the
    # PSB+, so before the first instruction, as libipt reports it), then the
    # second copy decoded in full from its PSB.
    err = [m for m in map(ERROR_RE.match, lines) if m]
    assert len(err) == 1
    assert int(err[0].group(1), 16) == first and err[0].group(3) == "unknown opcode"
    assert lines[-len(good):] == good


FUZZ_CASES = ["loop-tnt-short", "pip-far-syscall", "nomap-tip-resync", "nomap-psb-fup",
              "nomap-interrupt", "nomap-mode-tsx", "nomap-ptw-fup", "bad-query-tnt-for-tip",
              "call-ret-compressed", "far-int-iret", "ovf-fup", "tsx-abort", "ptw-fup", "pip-vmcs",
              "interrupt-async"]


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_mutated_traces(corpus, seed):
    rng = random.Random(seed)
    names = [n for n in FUZZ_CASES if (CASES_DIR / f"{n}.s").exists()]
    assert len(names) >= 8
    for name in names:
        corpus(name)
    with _deadline(60):
        for i in range(40):
            name = rng.choice(names)
            trace, segs, _ = corpus(name)
            buf = mutate_trace(trace, rng, 8)
            for resync in (False, True):
                lines = _decode(bytes(buf), segs, resync_on_error=resync,
                                event_ip=True, stat=True)
                assert lines[-1].startswith("insn: ")
                for line in lines:
                    if "error" in line:
                        assert ERROR_RE.match(line), line


@pytest.mark.parametrize("seed", range(3))
def test_fuzz_random_bytes(corpus, seed):
    rng = random.Random(1000 + seed)
    _, segs, _ = corpus("loop-tnt-short")
    psb = bytes.fromhex("0282") * 8 + bytes.fromhex("0223")
    with _deadline(60):
        for _ in range(20):
            n = rng.randint(0, 400)
            buf = bytearray(rng.randrange(256) for _ in range(n))
            for _ in range(rng.randint(0, 3)):
                pos = rng.randrange(len(buf) + 1)
                buf[pos:pos] = psb
            lines = _decode(bytes(buf), segs, resync_on_error=bool(seed & 1),
                            stat=True)
            assert lines[-1].startswith("insn: ")
