"""The compiled instruction walk (decoder/codewalk_compiled.py) against the reference's
(decoder/codewalk.py: capstone with perf's insn.c rules): the same (length, op, branch, rel) for
every instruction the kernel answers, and the same walks, block boundaries and side effects."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ptexport.decoder import codewalk, codewalk_compiled as cc
from ptexport.decoder.constants import BR_CONDITIONAL, BR_NO_BRANCH, OP_JCC, OP_OTHER

_LEGACY = (0x66, 0x67, 0xF0, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65)
_REF = codewalk.InsnDecoder()


def _ref(code: bytes, ip: int) -> tuple[int, int, int, int] | None:
    got = _REF.decode(code, ip, 64)
    return None if got is None else (got.length, got.op, got.branch, got.rel)


def _random_insn(rng: random.Random, opcode: tuple[int, ...]) -> bytes:
    pre: list[int] = []
    if rng.random() < 0.5:
        pre = [rng.choice(_LEGACY) for _ in range(rng.choice((1, 1, 1, 2, 3, 5)))]
    if rng.random() < 0.5:
        pre.append(rng.randrange(0x40, 0x50))
    tail = bytearray(rng.randrange(256) for _ in range(14))
    if rng.random() < 0.3:
        tail[0] |= 0xC0  # a register operand
    return (bytes(pre) + bytes(opcode) + bytes(tail))[:16]


@pytest.mark.parametrize("first", range(0, 256, 32))
def test_every_opcode_with_random_operands_is_the_references(first):
    """Each one-byte and 0F opcode (a slice per test) with random prefixes, ModRM, SIB,
    displacement and immediate: where the kernel answers, the reference's answer (for the bytes
    and a random ip: branch targets are relative); most of it answered."""
    rng = random.Random(first)
    answered = asked = 0
    for op in range(first, first + 32):
        for opcode in ((op,), (0x0F, op)):
            for _ in range(40):
                code = _random_insn(rng, opcode)
                got = cc.insn_at(code)
                asked += 1
                if got[0]:
                    answered += 1
                    ip = rng.randrange(1 << 64) if rng.random() < 0.3 else rng.randrange(1 << 47)
                    assert tuple(got) == _ref(code, ip), code.hex()
    assert answered > 0.8 * asked


@pytest.mark.parametrize("hexbytes", [
    "f0 80 cc 01", "f0 f0 80 cc 01", "66 f0 80 cc 01 00", "f0 48 01 c0", "f0 90", "42 48 8b 04 24", "40 40",
    "48 f0 90", "66 67 2e 3e 64 90", "f0 0f 85 10 00 00 00", "ff e8", "8d c0", "fe d0", "ff f8", "d6", "0f 04",
    "06", "9a 00 00 00 00 00 00", "f3 0f b8 c0", "f3 66 0f b8 c0", "0f b8 00 00 00 00", "f3 c3", "f2 ff e0",
    "3e 74 05", "e3 10", "67 e3 10", "0f 01 c2", "0f 01 c3", "0f 05", "0f 07", "cf", "cd 80", "e8 00 00 00 80",
    "eb fe", "48 b8 01 02 03 04 05 06 07 08", "66 b8 01 02", "c7 c0 01 02 03 04", "66 c7 c0 01 02",
    "f6 c0 01", "f7 c0 01 02 03 04", "f6 d0", "f7 d0", "0f 73 d0 01", "0f 71 e0 02", "0f 1f 44 00 00",
    "f3 0f 1e fa", "66 0f 1f 84 00 00 00 00 00", "ff", "8d 84", "66 e8 00 00", "66 0f 84 10 00",
    "66 67 2e 3e 48 c7 84 00 00 00 00 00 01 02 03 04", "c8 10 00 01", "a1 00 00 00 00 00 00 00 00",
])
def test_perf_rules_and_edges(hexbytes):
    """perf's prefix rules, the bytes capstone rejects, operand sizes, groups with immediates only for
    some ModRM.reg, instructions cut by the buffer, over 15 bytes: answered as the reference, or left to it."""
    code = bytes.fromhex(hexbytes)
    got = cc.insn_at(code)
    if got[0]:
        assert tuple(got) == _ref(code, 0x401000)


def test_what_is_left_to_the_reference():
    for hexbytes in ("c5 f8 77", "c4 e2 79 18 00", "62 f1 7c 48 28 c1", "0f 38 00 c1", "0f 3a 0f c1 08",
                     "0f 0f c1 b4", "66 e8 00 00", "66 0f 84 10 00", "0f 20 c0", "8f c0", "ff", "8d 84"):
        assert cc.insn_at(bytes.fromhex(hexbytes))[0] == 0, hexbytes
    assert cc.insn_at(bytes.fromhex("7f 10")) == (2, OP_JCC, BR_CONDITIONAL, 16)
    assert cc.insn_at(bytes.fromhex("48 89 e5")) == (3, OP_OTHER, BR_NO_BRANCH, 0)


def _system_binaries() -> list[Path]:
    found = []
    for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/perf",
              "/lib/x86_64-linux-gnu/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"):
        if Path(p).is_file() and p.rsplit("/", 1)[-1] not in {f.name for f in found}:
            found.append(Path(p))
    return found


def _text(path: Path) -> tuple[bytes, int]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        if elf.elfclass != 64:
            pytest.skip(f"{path} is not 64-bit")
        s = elf.get_section_by_name(".text")
        return s.data(), s["sh_addr"]


@pytest.mark.parametrize("path", _system_binaries(), ids=lambda p: p.name)
def test_a_system_binarys_instructions_are_the_references(path):
    """A linear sweep over 30 K instructions of a binary this machine has (compiler output: AVX and
    three-byte maps among them), from a few places in its .text."""
    data, base = _text(path)
    D = np.frombuffer(data, np.uint8)
    rng = random.Random(path.name)
    checked = answered = 0
    for start in sorted(rng.randrange(len(data)) for _ in range(6)):
        off = start
        for _ in range(5000):
            if off >= len(data):
                break
            want = _ref(data[off:off + 16], base + off)
            got = cc._insn_at(D, off, min(len(D), off + 16))
            checked += 1
            if got[0]:
                answered += 1
                assert tuple(got) == want, data[off:off + 16].hex()
            off += want[0] if want else 1
    assert answered > 0.9 * checked


class _Maps:
    """A lookup over mappings of one object: [(start, end, pgoff)]."""

    def __init__(self, obj: codewalk.CodeObject, maps: list[tuple[int, int, int]]) -> None:
        self.obj = obj
        self.maps = maps

    def __call__(self, ip: int, kernel: bool):
        for start, end, pgoff in self.maps:
            if start <= ip < end:
                return start, end, pgoff, self.obj
        return None


def _walkers(data: bytes, maps: list[tuple[int, int, int]], bits: int = 64):
    objs = [codewalk.CodeObject("x", memoryview(data), bits) for _ in range(2)]
    ref = codewalk.PerfCodeWalker(_Maps(objs[0], maps), 1 << 63)
    fast = cc.PerfCodeWalker(_Maps(objs[1], maps), 1 << 63)
    return ref, fast, objs


def _program(rng: random.Random, n: int) -> bytes:
    """Straight-line code with branches, AVX (left to the reference), bad bytes and prefixes mixed."""
    pieces = [bytes.fromhex(h) for h in (
        "48 89 e5", "55", "5d", "90", "0f 1f 44 00 00", "48 83 c4 08", "c5 f8 77", "c4 e2 79 18 00",
        "66 0f 6f c1", "f3 48 0f b8 c0", "48 8d 04 24", "e8 00 01 00 00", "74 10", "0f 85 00 02 00 00",
        "c3", "ff e0", "ff 15 00 00 00 00", "eb 05", "f0 48 0f b1 0a", "42 48 8b 04 24", "48 b8 01 02 03 04 05 06 07 08")]
    weights = [8, 3, 3, 3, 2, 4, 2, 2, 2, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    out = bytearray()
    while len(out) < n:
        out += rng.choices(pieces, weights)[0]
    return bytes(out[:n])


@pytest.mark.parametrize("seed", range(6))
def test_walks_and_blocks_are_the_references(seed):
    """Random walks (to an ip, a count of instructions, or the next branch) over two mappings of
    random code: the same (error, count, ip reached, last instruction), the same block cache and failed
    reads; blocks with the reference's boundaries."""
    rng = random.Random(seed)
    data = _program(rng, 20000) + (b"\x00" if seed % 2 else b"")
    maps = [(0x400000, 0x402000, 0), (0x402000, 0x404000 + rng.randrange(3000), 0x2000)]
    ref, fast, objs = _walkers(data, maps)
    blocks = 0
    for _ in range(400):
        ip = rng.randrange(0x400000 - 4, 0x405000)
        to_ip = ip + rng.randrange(1, 80) if rng.random() < 0.3 else 0
        mx = rng.randrange(1, 12) if rng.random() < 0.3 else 0
        want = ref.walk(ip, to_ip, mx, False)
        assert fast.walk(ip, to_ip, mx, False) == want, (hex(ip), to_ip, mx)
        assert fast.fail_obj == ref.fail_obj
        if not to_ip and not mx:
            got = fast.block(ip, False)
            assert got == ref.block(ip, False)
            assert got[:4] == want
            blocks += got[5]
    assert fast.cache == ref.cache
    assert objs[0].failed == objs[1].failed
    assert blocks > 50


def test_a_long_block_fills_the_boundaries_buffer_and_goes_on():
    data = bytes.fromhex("90") * 10000 + bytes.fromhex("c3")
    ref, fast, _ = _walkers(data, [(0x1000, 0x1000 + len(data), 0)])
    assert fast.walk(0x1000, 0, 0, False) == ref.walk(0x1000, 0, 0, False)
    err, cnt, new_ip, insn, bounds, one_map = fast.block(0x1000, False)
    assert (err, cnt, new_ip, one_map) == (0, 10001, 0x1000 + 10000, True) and bounds == list(range(1, 10001))
    assert fast.block(0x1000, False) == ref.block(0x1000, False)


@pytest.mark.parametrize("pgoff", [(1 << 64) - 0x1000, 1 << 63, 1 << 40])
def test_a_corrupt_page_offset_is_a_failed_read_as_in_the_reference(pgoff):
    # a damaged MMAP's pgoff puts the code past any file (and past an int64): a failed read, no overflow
    data = bytes.fromhex("90 90 c3")
    ref, fast, objs = _walkers(data, [(0x1000, 0x2000, pgoff)])
    for to_ip, mx in ((0, 0), (0x1002, 0), (0, 1), ((1 << 64) - 8, 0)):
        assert fast.walk(0x1000, to_ip, mx, False) == ref.walk(0x1000, to_ip, mx, False)
    assert fast.block(0x1000, False) == ref.block(0x1000, False)
    assert objs[0].failed == objs[1].failed
    # and a far destination from a good mapping walks as before
    ref, fast, _ = _walkers(data, [(0x1000, 0x2000, 0)])
    assert fast.walk(0x1000, (1 << 64) - 8, 0, False) == ref.walk(0x1000, (1 << 64) - 8, 0, False)


def test_32_bit_code_walks_the_references_way():
    data = bytes.fromhex("42 48 8b 04 24 f0 48 01 c0 c3")
    ref, fast, _ = _walkers(data, [(0x1000, 0x2000, 0)], bits=32)
    assert fast.walk(0x1000, 0, 0, False) == ref.walk(0x1000, 0, 0, False)
    assert fast.block(0x1000, False) == ref.block(0x1000, False)


def test_the_decoder_twin_answers_as_the_reference():
    dec = cc.InsnDecoder()
    for hexbytes in ("48 89 e5", "c5 f8 77", "f0 90", "e8 00 00 00 00", "ff"):
        code = bytes.fromhex(hexbytes)
        for bits in (64, 32):
            assert dec.decode(code, 0x1000, bits) == _REF.decode(code, 0x1000, bits)
