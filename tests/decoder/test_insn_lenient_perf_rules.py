"""perf's x86 instruction decoder on bytes capstone rejects or reads differently (issue #4, damaged traces).

When AUX damage sends perf's walk into the middle of an instruction, perf 6.1's intel_pt_get_insn
(tools/arch/x86/lib/insn.c: insn_get_prefixes, insn_get_opcode) decides the length, not capstone:

* ``f0 80 cc 01``: insn.c never validates LOCK; it decodes ``80 /1 ib`` with the prefix: length 4, OTHER
  (capstone rejects LOCK on a register operand);
* ``42 48 8b 04 24``: insn_get_prefixes takes one REX (0x42) after the legacy prefixes; the next byte (0x48)
  is the opcode, whose attribute (a REX prefix) has no ModRM and no immediate: length 2, OTHER (capstone
  reads a 5-byte mov).

The values are perf's: the damaged traces below go through those bytes, and perf script's lines (times
included) are the ones ``dump branches`` prints only with perf's rules (with capstone alone they differ).
"""

from __future__ import annotations

import random

import pytest

from ptxtest import perf_branch_lines as _perf, our_branch_lines as _ours, first_difference as _diff, kernel_traced as _kernel_traced, damage_aux as _damage, needs_perf
from ptexport.decoder.constants import BR_CONDITIONAL, BR_NO_BRANCH, OP_JCC, OP_OTHER
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import RecordType as RT
from ptexport.decoder.codewalk import InsnDecoder


@pytest.mark.parametrize("hexbytes,bits,length", [
    ("f0 80 cc 01", 64, 4),               # LOCK on or ah,1: perf ignores LOCK validity
    ("f0 f0 80 cc 01", 64, 5),            # a repeated prefix counts once among the four, every byte in the length
    ("66 f0 80 cc 01 00", 64, 5),         # 80 /1 takes ib whatever the operand size
    ("f0 48 01 c0", 64, 4),               # lock add rax,rax
    ("f0 90", 64, 2),
    ("42 48 8b 04 24", 64, 2),            # second REX: it is the opcode
    ("40 40", 64, 2),
    ("48 f0 90", 64, 2),                  # a legacy prefix after REX: the opcode, no ModRM
    ("66 67 2e 3e 64 90", 64, 5),         # a fifth distinct legacy prefix ends the prefixes: the opcode
    ("42 48 8b 04 24", 32, 1),            # no REX in 32-bit code: inc edx
    ("f0 48 01 c0", 32, 2),               # lock dec eax
])
def test_perf_prefix_rules(hexbytes, bits, length):
    got = InsnDecoder().decode(bytes.fromhex(hexbytes), 0x1000, bits)
    assert got is not None and (got.length, got.op, got.branch, got.rel) == (length, OP_OTHER, BR_NO_BRANCH, 0)


def test_lock_on_a_branch_keeps_its_target():
    got = InsnDecoder().decode(bytes.fromhex("f0 0f 85 10 00 00 00"), 0x1000, 64)
    assert (got.length, got.op, got.branch, got.rel) == (7, OP_JCC, BR_CONDITIONAL, 0x10)


@pytest.mark.parametrize("hexbytes,length", [("48 8b 04 24", 4), ("66 90", 2), ("f0 48 0f b1 0a", 5),
                                             ("c4 e2 79 18 00", 5), ("e8 00 00 00 00", 5)])
def test_bytes_capstone_accepts_unchanged(hexbytes, length):
    dec = InsnDecoder()
    code = bytes.fromhex(hexbytes)
    assert dec.decode(code, 0x1000, 64) == dec._capstone(code, 0x1000, 64)
    assert dec.decode(code, 0x1000, 64).length == length


# The damage of tests/oracle_perf/test_est_tsc_perf_times.py (same generator, same seeds give the same files).
_VARIANTS = {
    "kernel-mtc-preempt-corrupt": (("--program", "calls", "--timing", "mtc", "--preempt", "700", "--corrupt", "2",
                                    "--psb-period", "1024", "--seed", "6"), True),
    "user-mtc": (("--program", "threads", "--timing", "mtc", "--psb-period", "2048", "--seed", "17"), False),
}


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("name,seed,rounds", [("kernel-mtc-preempt-corrupt", 18, 1), ("user-mtc", 4, 3)])
def test_damaged_trace_equals_perf(tmp_path, monkeypatch, synth_trace, name, seed, rounds):
    opts, kernel = _VARIANTS[name]
    base = synth_trace("--branches", "15000", *opts) / "perf.data"  # shared with tests/oracle_perf/test_est_tsc_*
    data = base.read_bytes()
    if kernel:
        data = _kernel_traced(data)
    with open_perf_data(base) as pd:
        spans = [(r.data_offset, r.size) for r in pd.records(types=(RT.AUXTRACE,))]
    rng = random.Random(seed)
    for _ in range(rounds):
        data = _damage(data, spans, rng)
    path = tmp_path / "d.data"
    path.write_bytes(data)
    theirs = _perf(path)
    assert any("instruction trace error" in line for line in theirs)
    mine = _ours(path)
    assert mine == theirs, "compiled decoder: " + _diff(mine, theirs)
    from ptexport.session import queues_compiled as perffast_order
    with monkeypatch.context() as m:
        m.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)
        m.setattr(perffast_order, "numba", None)
        mine = _ours(path)
    assert mine == theirs, "reference decoder: " + _diff(mine, theirs)
    # Capstone alone (the decoder before perf's prefix rules) differs from perf on this trace.
    with monkeypatch.context() as m:
        m.setattr(InsnDecoder, "decode", InsnDecoder._capstone)
        assert _ours(path) != theirs
