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
from ptexport.decoder.constants import BR_CONDITIONAL, BR_INDIRECT, BR_NO_BRANCH, OP_CALL, OP_JCC, OP_JMP, OP_OTHER
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


# Bytes capstone rejects for their operands or opcode, which perf's insn.c decodes by its tables
# (length from the attribute: ModRM, SIB/displacement, immediates; no operand validity) and
# intel_pt_insn_decoder classifies by opcode.  (length, op, branch, rel) as perf 6.1 gives them.
_I, _J, _C = BR_INDIRECT, OP_JMP, OP_CALL
PERF_TABLE_CASES = [
    ("ff e8", 64, (2, _J, _I, 0)),                      # jmp far, register operand (FF /5 mod 11): forkexec Z
    ("ff d8", 64, (2, _C, _I, 0)),                      # call far, register operand (FF /3 mod 11)
    ("ff d8", 32, (2, _C, _I, 0)),
    ("ff 6c 24 08", 64, (4, _J, _I, 0)),                # jmp far [rsp+8] (valid: capstone agrees)
    ("41 ff e8", 64, (3, _J, _I, 0)),                   # REX counted in the length
    ("66 ff e8", 64, (3, _J, _I, 0)),
    ("ff f8", 64, (2, OP_OTHER, BR_NO_BRANCH, 0)),      # group 5's empty entry /7: ModRM only
    ("ff 38", 64, (2, OP_OTHER, BR_NO_BRANCH, 0)),
    ("fe d0", 64, (2, OP_OTHER, BR_NO_BRANCH, 0)),      # group 4 /2: empty
    ("8d c0", 64, (2, OP_OTHER, BR_NO_BRANCH, 0)),      # lea eax, eax (mod 11)
    ("8d c0", 32, (2, OP_OTHER, BR_NO_BRANCH, 0)),
    ("0f b2 c0", 64, (3, OP_OTHER, BR_NO_BRANCH, 0)),   # lss from a register
    ("0f c7 c8", 64, (3, OP_OTHER, BR_NO_BRANCH, 0)),   # cmpxchg8b with a register
    ("c6 c8 05", 64, (3, OP_OTHER, BR_NO_BRANCH, 0)),   # group 11 /1: the opcode's Ib still read
    ("c7 c8 01 02 03 04", 64, (6, OP_OTHER, BR_NO_BRANCH, 0)),
    ("0f 71 c0", 64, (3, OP_OTHER, BR_NO_BRANCH, 0)),   # group 12 /0: empty, no Ib
    ("0f b8 c0", 64, (2, OP_OTHER, BR_NO_BRANCH, 0)),   # JMPE (no F3: not POPCNT): no ModRM in perf's map
    ("d6", 64, (1, OP_OTHER, BR_NO_BRANCH, 0)),         # undefined one-byte opcode
    ("0f 04", 64, (2, OP_OTHER, BR_NO_BRANCH, 0)),      # undefined two-byte opcode
    ("06", 64, (1, OP_OTHER, BR_NO_BRANCH, 0)),         # push es: invalid in 64-bit code, no i64 check in insn.c
    ("d4 0a", 64, (2, OP_OTHER, BR_NO_BRANCH, 0)),      # aam
    ("9a 00 10 00 00 08 00", 64, (7, _C, _I, 0)),       # call far ptr16:32 in 64-bit code
    ("ea 00 10 00 00 08 00", 64, (7, _J, _I, 0)),       # jmp far ptr16:32
]


@pytest.mark.parametrize("hexbytes,bits,want", PERF_TABLE_CASES,
                         ids=[f"{h.replace(' ', '')}-{b}" for h, b, _ in PERF_TABLE_CASES])
def test_perf_table_lengths_where_capstone_rejects(hexbytes, bits, want):
    code = bytes.fromhex(hexbytes) + bytes(16)  # what follows never changes the length
    got = InsnDecoder().decode(code[:16], 0x1000, bits)
    assert got is not None and (got.length, got.op, got.branch, got.rel) == want


def test_perf_table_gives_nothing_past_the_buffer_or_15_bytes():
    dec = InsnDecoder()
    assert dec.decode(bytes.fromhex("ff"), 0x1000, 64) is None          # no ModRM in the buffer
    assert dec.decode(bytes.fromhex("8d 84"), 0x1000, 64) is None       # SIB/disp32 missing
    assert dec.decode(bytes.fromhex("66 67 2e 3e 48 8d 84 24 00 00 00 00 c7 80 00 00"), 0x1000, 64) is not None
    assert dec.decode(bytes.fromhex("66 67 2e 3e 48 c7 84 00 00 00 00 00 01 02 03 04"), 0x1000, 64) is None  # 16


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
    # Capstone alone (the decoder before perf's prefix rules) differs from perf on this trace: the
    # reference decoder's walk with it (the compiled decoder's walk decodes in a kernel of its own,
    # held to the reference's InsnDecoder by tests/decoder/test_codewalk_compiled.py)
    with monkeypatch.context() as m:
        m.setenv("PTEXPORT_REFERENCE", "1")
        m.setattr(perffast_order, "numba", None)
        m.setattr(InsnDecoder, "decode", InsnDecoder._capstone)
        assert _ours(path) != theirs
