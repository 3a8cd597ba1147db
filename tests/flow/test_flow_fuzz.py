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

import pytest

from ptexport.flow.insn import InsnDecoder
from ptexport.flow.ptxed import PtxedOptions, ptxed_lines
from ptexport.flow.query import DecoderConfig
from ptexport.images.image import Image

ERROR_RE = re.compile(r"^\[([0-9a-f]+), ([0-9a-f]+): (?:sync |resync )?error: (.+)\]$")
MAX_LINES = 200_000


def _corpus(libipt_dir, name):
    d = libipt_dir / "ptt"
    return (d / f"{name}.pt").read_bytes(), (d / f"{name}.bin").read_bytes()


def _decode(trace: bytes, code: bytes, org: int, **opts) -> list[str]:
    image = Image()
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


def test_error_lines_carry_offsets_and_decoding_goes_on(libipt_dir):
    # Three PSBs; break the first one's code by mapping nothing at its FUP IP.
    trace, code = _corpus(libipt_dir, "ptxed-resync-nomap-psb")
    lines = _decode(trace, code, 0x100000)
    errors = [ERROR_RE.match(x) for x in lines if "error" in x]
    assert errors and all(errors)
    assert all(int(m.group(1), 16) <= len(trace) for m in errors)
    # Decoding went on after the error at the last PSB: its instruction and the disable.
    assert lines[-2:] == ["0000000000100005", "[disabled]"]


def test_bad_packet_reports_offset_and_resumes_at_next_psb(libipt_dir):
    trace, code = _corpus(libipt_dir, "loop-tnt")
    bad = bytearray(trace)
    bad[0x1B] = 0x39          # the TNT packet becomes an unknown opcode
    lines = _decode(bytes(bad) + trace, code, 0x100000)
    good = _decode(trace, code, 0x100000)
    # The error with its offset (found while reading ahead right after the
    # PSB+, so before the first instruction, as libipt reports it), then the
    # second copy decoded in full from its PSB.
    err = [m for m in map(ERROR_RE.match, lines) if m]
    assert len(err) == 1
    assert int(err[0].group(1), 16) == 0x1B and err[0].group(3) == "unknown opcode"
    assert lines[-len(good):] == good


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_mutated_traces(libipt_dir, seed):
    rng = random.Random(seed)
    names = ["loop-tnt", "call_direct-ret_compressed", "ptxed-resync-nomap-psb",
             "psb-tsx_abort-tip-fup-tip_pgd", "ovf-fup", "ptet-int-iret", "tip_pge-ptw-fup-tip_pgd",
             "mwait-pwre-exstop_ip-pwre-pwrx", "pip-vmcs-tip_pgd", "bdm70-psb_fup-tip_pge"]
    orgs = {}
    for line in (libipt_dir / "manifest.tsv").read_text().splitlines()[1:]:
        cols = line.split("\t")
        orgs[cols[1]] = int(cols[2], 0)
    with _deadline(60):
        for i in range(40):
            name = rng.choice(names)
            trace, code = _corpus(libipt_dir, name)
            buf = bytearray(trace)
            for _ in range(rng.randint(1, 8)):
                kind = rng.random()
                pos = rng.randrange(len(buf))
                if kind < 0.5:
                    buf[pos] = rng.randrange(256)
                elif kind < 0.7:
                    del buf[pos:pos + rng.randint(1, 8)]
                elif kind < 0.9:
                    buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
                else:
                    buf[pos:pos] = trace[: rng.randint(16, len(trace))]   # spliced PSB+
                if not buf:
                    buf = bytearray(trace)
            for resync in (False, True):
                lines = _decode(bytes(buf), code, orgs[name], resync_on_error=resync,
                                event_ip=True, stat=True)
                assert lines[-1].startswith("insn: ")
                for line in lines:
                    if "error" in line:
                        assert ERROR_RE.match(line), line


@pytest.mark.parametrize("seed", range(3))
def test_fuzz_random_bytes(libipt_dir, seed):
    rng = random.Random(1000 + seed)
    _, code = _corpus(libipt_dir, "loop-tnt")
    psb = bytes.fromhex("0282") * 8 + bytes.fromhex("0223")
    with _deadline(60):
        for _ in range(20):
            n = rng.randint(0, 400)
            buf = bytearray(rng.randrange(256) for _ in range(n))
            for _ in range(rng.randint(0, 3)):
                pos = rng.randrange(len(buf) + 1)
                buf[pos:pos] = psb
            lines = _decode(bytes(buf), code, 0x100000, resync_on_error=bool(seed & 1),
                            stat=True)
            assert lines[-1].startswith("insn: ")
