"""VM exit reasons: from the guest instruction at the exit (capstone), from a kvm:kvm_exit tracepoint's
raw data, and the pairing of exits with the next VM entry of their VCPU thread."""

from __future__ import annotations

import struct

import pytest

from ptexport.dbexport.vm import (OTHER_REASON, UNKNOWN_REASON, VMENTRY, VMEXIT, VmExits,
                                        exit_reason_of_insn, kvm_exit_field_offset, kvm_exit_reason)

EXIT = 1 | 2 | 32 | VMEXIT  # perf's 4131
ENTRY = 1 | 2 | VMENTRY


@pytest.mark.parametrize("code,reason", [
    (b"\x0f\xa2", "CPUID"), (b"\xf4", "HLT"), (b"\x0f\x01\xc1", "VMCALL"), (b"\xe6\x80", "IO_INSTRUCTION"),
    (b"\xec", "IO_INSTRUCTION"), (b"\xee", "IO_INSTRUCTION"), (b"\xf3\x6c", "IO_INSTRUCTION"),
    (b"\x0f\x32", "MSR_READ"), (b"\x0f\x30", "MSR_WRITE"), (b"\x0f\x22\xd8", "CR_ACCESS"),
    (b"\x0f\x20\xc0", "CR_ACCESS"), (b"\x0f\x21\xc0", "DR_ACCESS"), (b"\x0f\x01\xd1", "XSETBV"),
    (b"\xf3\x90", "PAUSE_INSTRUCTION"), (b"\x0f\x09", "WBINVD"), (b"\x0f\x01\xc9", "MWAIT_INSTRUCTION"),
    (b"\x0f\x31", "RDTSC"), (b"\x0f\x01\x38", "INVLPG"),
    (b"\x90", OTHER_REASON), (b"\x48\x89\xc3", OTHER_REASON), (b"\xe8\x00\x00\x00\x00", OTHER_REASON),
    (b"", UNKNOWN_REASON), (b"\x0f", UNKNOWN_REASON),
])
def test_reason_of_the_guest_instruction(code, reason):
    assert exit_reason_of_insn(code, 0xFFFFFFFF81000000) == reason


def _kvm_exit_raw(reason: int, rip: int = 0xFFFFFFFF81000010) -> bytes:
    # common fields (type u16, flags u8, preempt u8, pid i32), exit_reason u32, pad, guest_rip u64 ...
    return struct.pack("<HBBiIIQIQQII I", 1234, 0, 0, 77, reason, 0, rip, 1, 0, 0, 0, 0, 1)


def test_reason_of_a_kvm_exit_tracepoint():
    assert kvm_exit_reason(_kvm_exit_raw(10)) == "CPUID"
    assert kvm_exit_reason(_kvm_exit_raw(30)) == "IO_INSTRUCTION"
    assert kvm_exit_reason(_kvm_exit_raw(48)) == "EPT_VIOLATION"
    assert kvm_exit_reason(_kvm_exit_raw(0x80000021)) == "INVALID_STATE (failed VM entry)"
    assert kvm_exit_reason(_kvm_exit_raw(99)) == "EXIT_REASON_99"
    assert kvm_exit_reason(b"\0" * 10) is None and kvm_exit_reason(None) is None
    fmt = (b"name: kvm_exit\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\n"
           b"\tfield:unsigned int exit_reason;\toffset:8;\tsize:4;\tsigned:0;\n\nprint fmt: \"reason %s\"\n")
    assert kvm_exit_field_offset(fmt) == 8
    assert kvm_exit_field_offset(fmt.replace(b"offset:8;", b"offset:12;")) == 12
    assert kvm_exit_field_offset(None) == 8


def _feed(ex: VmExits, rows):
    for sid, (flags, ip, addr, time, cpu, thread, mid, mp, vcpu) in enumerate(rows, 1):
        ex.sample(sid, flags, ip, addr, time, cpu, thread, mid, mp, vcpu)


def test_exits_pair_with_the_next_entry_of_their_vcpu_thread():
    """Two VCPU threads (10, 11) on two CPUs; thread 10 migrates between its exit and its next entry."""
    asked = []

    def reason_of(mp, vcpu, gthread, gip, time):
        asked.append((mp, vcpu, gthread, gip, time))
        return ("HLT", "instruction") if gip == 0x401000 else (OTHER_REASON, "instruction")

    ex = VmExits(reason_of)
    _feed(ex, [
        (EXIT, 0x401000, 0, 100, 0, 20, 2, 4000, 0),        # guest side of VCPU 0's exit (guest thread 20)
        (EXIT, 0, 0xFFFF0010, 100, 0, 10, 1, -1, -1),       # host side on thread 10
        (EXIT, 0x401050, 0, 105, 1, 21, 2, 4000, 1),        # VCPU 1 exits on CPU 1
        (EXIT, 0, 0xFFFF0010, 105, 1, 11, 1, -1, -1),
        (ENTRY, 0xFFFF0020, 0, 130, 1, 11, 1, -1, -1),      # VCPU 1 re-enters
        (ENTRY, 0, 0x401050, 130, 1, 21, 2, 4000, 1),
        (ENTRY, 0xFFFF0020, 0, 190, 1, 10, 1, -1, -1),      # VCPU 0 re-enters on CPU 1
        (EXIT, 0x401000, 0, 300, 1, 20, 2, 4000, 0),        # and exits again: no entry follows
        (EXIT, 0, 0xFFFF0010, 300, 1, 10, 1, -1, -1),
    ])
    ex.kvm_exit(11, 106, "EXTERNAL_INTERRUPT")  # a tracepoint after VCPU 1's exit overrides the derivation
    rows = ex.finish()
    assert rows == [
        (1, 2, 0, 10, 0, 2, 100, 0x401000, 7, 190, "HLT", "instruction"),
        (2, 2, 1, 11, 1, 4, 105, 0x401050, 5, 130, "EXTERNAL_INTERRUPT", "kvm_exit"),
        (3, 2, 0, 10, 1, 9, 300, 0x401000, 0, 0, "HLT", "instruction"),
    ]
    assert asked == [(4000, 0, 20, 0x401000, 100), (4000, 0, 20, 0x401000, 300)]


def test_reasons_remembered_per_instruction_equal_capstone_every_time():
    """InsnReasons answers from an instruction seen before whatever bytes follow it, and decodes
    anew where the first instruction differs (also a longer one starting with a shorter one's bytes)."""
    import random

    from ptexport.dbexport.vm import InsnReasons

    rng = random.Random(3)
    insns = [b"\x0f\xa2", b"\xf4", b"\x0f\x01\xc1", b"\xec", b"\xee", b"\xf3\x6c", b"\x0f\x32", b"\x0f\x22\xd8",
             b"\x0f\x20\xc0", b"\x0f\x21\xc0", b"\x90", b"\x48\x89\xc3", b"\xe8\x00\x00\x00\x00", b"\x0f",
             b"\x66\x90", b"\xf3\x90", b"\x0f\x01\xd1", b"\x0f\x31", b""]
    memo = InsnReasons()
    for _ in range(2000):
        code = (rng.choice(insns) + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 14))))[:16]
        assert memo(code, 0xFFFFFFFF81000000) == exit_reason_of_insn(code, 0xFFFFFFFF81000000), code.hex()


def _oracle_pairs(rows):
    """The pairing rule, one sample at a time, with dicts (what VmExits computed before its compiled walk)."""
    guest, open_, out = {}, {}, []
    for sid, (flags, ip, addr, time, cpu, thread, mid, mp, vcpu) in enumerate(rows, 1):
        if flags & VMEXIT:
            if addr == 0:
                guest[cpu] = (mid, mp, vcpu, thread, ip)
                continue
            gmid, gmp, gvc, gth, gip = guest.pop(cpu, (0, -1, -1, 0, 0))
            row = [len(out) + 1, gmid, gvc, thread, cpu, sid, time, gip, 0, 0, gmp, gth]
            out.append(row)
            open_[thread] = row
        elif flags & VMENTRY and ip != 0:
            row = open_.pop(thread, None)
            if row is not None:
                row[8], row[9] = sid, time
    return out


@pytest.mark.parametrize("seed", range(6))
def test_exits_paired_in_batches_as_one_sample_at_a_time(seed):
    """Random entry and exit streams (CPUs -1..3, guest kernel ips above 2**63), cut into batches at
    random: the rows of one pass with dicts, and the reason asked once per exit with its guest's values."""
    import random

    import numpy as np

    rng = random.Random(seed)
    rows = []
    for t in range(rng.randrange(1, 400)):
        kind = rng.randrange(5)
        ip = rng.choice([0x401000, 0xFFFFFFFF81000000 + rng.randrange(1 << 12), 0xFFFF0010])
        flags, addr = {0: (EXIT, 0), 1: (EXIT, 0xFFFF0010), 2: (ENTRY, 0), 3: (ENTRY, 0), 4: (0, 0x400000)}[kind]
        if kind == 1 or kind == 3:
            ip = 0 if kind == 1 else 0xFFFF0020
        rows.append((flags, ip, addr, 100 + t, rng.randrange(-1, 4), rng.randrange(6), rng.randrange(3),
                     rng.choice([-1, 4000, 4001]), rng.randrange(-1, 2)))
    asked = []
    ex = VmExits(lambda mp, vc, gth, gip, time: asked.append((mp, vc, gth, gip, time)) or ("HLT", "instruction"))
    cols = [np.array([r[k] for r in rows], np.uint64).view(np.int64) if k in (1, 2)
            else np.array([r[k] for r in rows], np.int64) for k in range(9)]
    sids = np.arange(1, len(rows) + 1, dtype=np.int64)
    cuts = sorted({0, len(rows), *(rng.randrange(len(rows) + 1) for _ in range(rng.randrange(4)))})
    for a, b in zip(cuts, cuts[1:]):
        flags, ip, addr, time, cpu, thread, mid, mp, vcpu = (c[a:b] for c in cols)
        ex.samples(flags, ip, addr, sids[a:b], time, cpu, thread, mid, mp, vcpu)
    want = _oracle_pairs(rows)
    assert ex.finish() == [tuple(r[:10]) + ("HLT", "instruction") for r in want]
    assert asked == [(r[10], r[2], r[11], r[7], r[6]) for r in want]
