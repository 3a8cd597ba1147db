"""Compiled twin of the code walk (:mod:`ptexport.decoder.codewalk`): the compiled decoder's walks
decode x86-64 instructions in a kernel, a mapping's run of them per call.

The reference decodes one instruction at a time through capstone in Python (perf's
``intel_pt_get_insn``: :class:`~ptexport.decoder.codewalk.InsnDecoder`), ~30 us each.  The
compiled decoder caches blocks, so a trace pays that once per instruction of the code it runs:
nothing for the sample programs (a few hundred instructions), seconds for a real recording, whose
kernel, libc and program run tens or hundreds of thousands of distinct instructions (a generated
program of 45 K instructions: 1 M branches counted in 5.5 s, 4.9 of them in capstone).

:func:`insn_at` is perf's table decoder (``insnlen.perf_length``: insn.c's prefixes, opcode maps,
ModRM, SIB, displacement and immediates) with perf's classification
(``codewalk.classify``, intel_pt_insn_decoder), in 64-bit code.  It answers only where its answer
is the reference's: where capstone accepts the bytes, the reference takes capstone's length and
opcode, and where capstone rejects them, the same table.  So the kernel leaves to the reference
(length 0) what the two could disagree on or what the table does not follow:

- 32-bit code (another walk altogether: address sizes, wrapping targets), VEX and EVEX (C4, C5,
  62), the three-byte maps (0F 38, 0F 3A) and 3DNow! (0F 0F);
- the opcodes of :data:`UNTRUSTED` (XOP's 8F, moves of control registers, UD0/UD1, ...) and
  branches with an operand-size prefix, where a differential test over random and real
  instructions found capstone's length or target apart from the table's;
- bytes past the buffer or over 15 bytes.

``tests/decoder/test_codewalk_compiled.py`` holds the kernel to the reference on every trusted
opcode with random prefixes, ModRM, SIB, displacements and immediates, and on the instructions of
the system's own binaries.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ptexport.decoder import codewalk
from ptexport.decoder.codewalk import _EINVAL, _INSN_BUF, Insn
from ptexport.decoder.constants import (
    BR_CONDITIONAL,
    BR_INDIRECT,
    BR_NO_BRANCH,
    BR_UNCONDITIONAL,
    OP_CALL,
    OP_INT,
    OP_IRET,
    OP_JCC,
    OP_JMP,
    OP_LOOP,
    OP_OTHER,
    OP_RET,
    OP_SYSCALL,
    OP_SYSRET,
    OP_VMENTRY,
)
from ptexport.decoder.insnlen import _ONE, _TWO, AP, F64, GRP_IMM, IB, IV, IW, IWB, IZ, MOFFS, M
from ptexport.jit import numba

#: (opcode bytes) the kernel leaves to the reference, and why (the differential test's findings)
UNTRUSTED: dict[tuple[int, ...], str] = {
    (0x0F, 0x0F): "3DNow!: the last byte is the opcode",
    (0x0F, 0x38): "three-byte map",
    (0x0F, 0x3A): "three-byte map",
    (0xC4,): "VEX",
    (0xC5,): "VEX",
    (0x62,): "EVEX",
    (0x8F,): "XOP (8F with ModRM.reg not 0) in capstone",
    (0x0F, 0x19): "reserved NOP: capstone's ModRM length",
    (0x0F, 0x1D): "reserved NOP: capstone's ModRM length",
    (0x0F, 0x20): "MOV from CR: capstone takes any ModRM as registers",
    (0x0F, 0x21): "MOV from DR: capstone takes any ModRM as registers",
    (0x0F, 0x22): "MOV to CR: capstone takes any ModRM as registers",
    (0x0F, 0x23): "MOV to DR: capstone takes any ModRM as registers",
    (0x0F, 0x78): "EXTRQ (66): an immediate the table lacks",
    (0x0F, 0x79): "INSERTQ (F2): immediates the table lacks",
    (0x0F, 0xB9): "UD1: capstone's ModRM length",
    (0x0F, 0xFF): "UD0: capstone's ModRM length",
}


def _trust_tables() -> tuple[np.ndarray, np.ndarray]:
    one = np.ones(256, np.int64)
    two = np.ones(256, np.int64)
    for opc in UNTRUSTED:
        if len(opc) == 1:
            one[opc[0]] = 0
        else:
            two[opc[1]] = 0
    return one, two


ONE = np.array(_ONE, np.int64)
TWO = np.array(_TWO, np.int64)
OK1, OK2 = _trust_tables()

# Why a walk kernel call stopped (:func:`walk_run`).
ST_UNKNOWN, ST_BRANCH, ST_MAX, ST_TO, ST_END, ST_FULL = range(6)


def _legacy(b: int) -> bool:
    return b in (0x66, 0x67, 0xF0, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65)


def _signed(D: np.ndarray, i: int, n: int) -> int:
    v = 0
    for k in range(n - 1, -1, -1):
        v = (v << 8) | int(D[i + k])
    if v >= 1 << (8 * n - 1):
        v -= 1 << (8 * n)
    return v


def _classify(first: int, second: int, modrm: int) -> tuple[int, int]:
    """(op, branch) by opcode: ``codewalk.classify``."""
    if first == 0x0F:
        if second == 0x01 and (modrm == 0xC2 or modrm == 0xC3):
            return OP_VMENTRY, BR_INDIRECT
        if second == 0x05 or second == 0x34:
            return OP_SYSCALL, BR_INDIRECT
        if second == 0x07 or second == 0x35:
            return OP_SYSRET, BR_INDIRECT
        if 0x80 <= second <= 0x8F:
            return OP_JCC, BR_CONDITIONAL
        return OP_OTHER, BR_NO_BRANCH
    if 0x70 <= first <= 0x7F:
        return OP_JCC, BR_CONDITIONAL
    if first == 0xC2 or first == 0xC3 or first == 0xCA or first == 0xCB:
        return OP_RET, BR_INDIRECT
    if first == 0xCF:
        return OP_IRET, BR_INDIRECT
    if 0xCC <= first <= 0xCE:
        return OP_INT, BR_INDIRECT
    if first == 0xE8:
        return OP_CALL, BR_UNCONDITIONAL
    if first == 0x9A:
        return OP_CALL, BR_INDIRECT
    if 0xE0 <= first <= 0xE2:
        return OP_LOOP, BR_CONDITIONAL
    if first == 0xE3:
        return OP_JCC, BR_CONDITIONAL
    if first == 0xE9 or first == 0xEB:
        return OP_JMP, BR_UNCONDITIONAL
    if first == 0xEA:
        return OP_JMP, BR_INDIRECT
    if first == 0xFF:
        ext = (modrm >> 3) & 7
        if ext == 2 or ext == 3:
            return OP_CALL, BR_INDIRECT
        if ext == 4 or ext == 5:
            return OP_JMP, BR_INDIRECT
    return OP_OTHER, BR_NO_BRANCH


def _insn_at(D, pos, lim):
    """(length, op, branch, rel) of the 64-bit instruction at ``D[pos]`` whose bytes end before
    ``lim`` (the reference reads 16); length 0: left to the reference."""
    # perf's prefixes (codewalk._perf_prefixes): legacy ones (repeats free, four distinct), one REX
    i = pos
    s0 = s1 = s2 = s3 = -1
    ns = 0
    opsz = False
    adsz = False
    rep = False
    last = 0
    while i < lim:
        b = int(D[i])
        if not _legacy(b):
            break
        if b != s0 and b != s1 and b != s2 and b != s3:
            if ns == 4:
                break
            if ns == 0:
                s0 = b
            elif ns == 1:
                s1 = b
            elif ns == 2:
                s2 = b
            else:
                s3 = b
            ns += 1
        if b == 0x66:
            opsz = True
        elif b == 0x67:
            adsz = True
        elif b == 0xF3:
            rep = True
        last = b
        i += 1
    rexw = False
    if i < lim and 0x40 <= int(D[i]) <= 0x4F:
        rexw = (int(D[i]) & 8) != 0
        i += 1
    if i < lim and (_legacy(int(D[i])) or 0x40 <= int(D[i]) <= 0x4F):
        return i - pos + 1, OP_OTHER, BR_NO_BRANCH, 0  # a prefix in the opcode's place
    # insn.c's tables (insnlen.perf_length, 64-bit)
    end = min(lim, pos + 15)
    if i >= end:
        return 0, 0, 0, 0
    op = int(D[i])
    i += 1
    opnd = 8 if rexw else (2 if opsz else 4)
    addr = 4 if adsz else 8
    second = 0
    if op == 0x0F:
        if i >= end:
            return 0, 0, 0, 0
        second = int(D[i])
        i += 1
        if not OK2[second]:
            return 0, 0, 0, 0
        attr = TWO[second]
        if second == 0xB8 and rep:
            if last != 0xF3:
                return 0, 0, 0, 0  # capstone's POPCNT, perf's JMPE (it picks by the last prefix)
            attr = M  # POPCNT
    else:
        if not OK1[op]:
            return 0, 0, 0, 0
        attr = ONE[op]
    if attr & F64:
        opnd = 8
    modrm = 0
    if attr & M:
        if i >= end:
            return 0, 0, 0, 0
        modrm = int(D[i])
        i += 1
        mod = modrm >> 6
        rm = modrm & 7
        if mod != 3:
            if rm == 4:
                if i >= end:
                    return 0, 0, 0, 0
                sib = int(D[i])
                i += 1
                if mod == 0 and (sib & 7) == 5:
                    i += 4
            if mod == 0 and rm == 5:
                i += 4
            elif mod == 1:
                i += 1
            elif mod == 2:
                i += 4
    imm_at = i
    if attr & GRP_IMM:
        reg = (modrm >> 3) & 7
        if op == 0xF6 or op == 0xF7:
            if reg <= 1:
                attr |= IZ if op == 0xF7 else IB
        elif second == 0x73:
            if reg == 2 or reg == 3 or reg == 6 or reg == 7:
                attr |= IB
        elif reg == 2 or reg == 4 or reg == 6:  # 0F 71, 0F 72
            attr |= IB
    if attr & IB:
        i += 1
    if attr & IW:
        i += 2
    if attr & IZ:
        i += 2 if opnd == 2 else 4
    if attr & IV:
        i += opnd
    if attr & AP:
        i += 4 if opnd == 2 else 6
    if attr & MOFFS:
        i += addr
    if attr & IWB:
        i += 3
    if i > end:
        return 0, 0, 0, 0
    kind, br = _classify(op, second, modrm)
    if opsz and br != BR_NO_BRANCH:
        return 0, 0, 0, 0  # capstone's 16-bit targets and immediates of operand-size prefixed branches
    rel = 0
    if br == BR_CONDITIONAL or br == BR_UNCONDITIONAL:
        n = i - imm_at
        if n != 1 and n != 4:
            return 0, 0, 0, 0
        rel = _signed(D, imm_at, n)
    return i - pos, kind, br, rel


def _walk_run(D, off, room, to_dist, max_cnt, cnt, BND):
    """The reference walk's inner loop (``PerfCodeWalker.walk``) over one mapping's bytes ``D`` from
    file offset ``off``: instructions until a branch, ``max_cnt`` instructions in all (0: no limit),
    the distance ``to_dist`` (-1: none) or ``room`` bytes (the mapping's end).  The distance of each
    instruction after the first goes to ``BND``.  Returns (why, instructions counted, distance
    reached, then the length, op, branch and rel of the last instruction decoded, BND entries)."""
    n = len(D)
    dist = 0
    nb = 0
    cap = len(BND)
    length = op = br = rel = 0
    while True:
        if nb >= cap:
            return ST_FULL, cnt, dist, length, op, br, rel, nb
        p = off + dist
        if p < 0 or p >= n:
            return ST_UNKNOWN, cnt, dist, length, op, br, rel, nb
        got, o, b, r = _insn_at(D, p, min(n, p + 16))
        if got == 0:
            return ST_UNKNOWN, cnt, dist, length, op, br, rel, nb
        length, op, br, rel = got, o, b, r
        cnt += 1
        if br != BR_NO_BRANCH:
            return ST_BRANCH, cnt, dist, length, op, br, rel, nb
        if max_cnt and cnt >= max_cnt:
            return ST_MAX, cnt, dist, length, op, br, rel, nb
        dist += length
        BND[nb] = dist
        nb += 1
        if dist == to_dist:
            return ST_TO, cnt, dist, length, op, br, rel, nb
        if dist >= room:
            return ST_END, cnt, dist, length, op, br, rel, nb


if numba is not None:
    _inline = numba.njit(cache=True, inline="always")
    _legacy = _inline(_legacy)
    _signed = _inline(_signed)
    _classify = _inline(_classify)
    _insn_at = numba.njit(cache=True, nogil=True)(_insn_at)
    _walk_run = numba.njit(cache=True, nogil=True)(_walk_run)


def insn_at(code: bytes | np.ndarray, pos: int = 0) -> tuple[int, int, int, int]:
    """(length, op, branch, rel) of the 64-bit instruction at ``code[pos]`` (of at most 16 bytes
    from there, as the reference reads); length 0 where the kernel leaves it to the reference."""
    D = np.frombuffer(code, np.uint8) if not isinstance(code, np.ndarray) else code
    return _insn_at(D, pos, min(len(D), pos + _INSN_BUF))


class InsnDecoder(codewalk.InsnDecoder):
    """:class:`codewalk.InsnDecoder` with the kernel first (64-bit code)."""

    def decode(self, code: bytes, ip: int, bits: int = 64) -> Insn | None:
        if bits == 64 and code:
            length, op, br, rel = insn_at(code)
            if length:
                return Insn(op, br, length, rel)
        return super().decode(code, ip, bits)


_ROOM_MAX = 1 << 62
_NO_BOUNDS = np.zeros(0, np.int64)
_NO_BOUNDS.flags.writeable = False


class PerfCodeWalker(codewalk.PerfCodeWalker):
    """:class:`codewalk.PerfCodeWalker` whose walks run in the kernel where the code is 64-bit and
    the kernel knows the instructions (the others one at a time the reference's way, in the same
    walk); same results, same side effects (its block cache, an object's failed read)."""

    def __init__(self, lookup: codewalk.MapLookup, kernel_start: int, decoder: Any = None) -> None:
        super().__init__(lookup, kernel_start, decoder)
        self._bnd = np.zeros(4096, np.int64)
        # id(CodeObject.data) -> (the data, its bytes as an array): the data held, so its id stays its own
        self._arrays: dict[int, tuple[Any, np.ndarray]] = {}

    def _array(self, obj: codewalk.CodeObject) -> np.ndarray | None:
        data = obj.data
        if data is None or obj.bits != 64 or numba is None:
            return None
        got = self._arrays.get(id(data))
        if got is None:
            got = self._arrays[id(data)] = (data, np.frombuffer(data, np.uint8))
        return got[1]

    def walk(self, ip: int, to_ip: int, max_insn_cnt: int, nr: bool) -> tuple[int, int, int, Insn]:
        return self._walk(ip, to_ip, max_insn_cnt, nr, None)[:4]

    def block(self, ip: int, nr: bool, hit: Any = None) -> tuple[int, int, int, Insn, list[int], bool]:
        """The reference's ``block``: one walk (decoded, not taken from the block cache) that keeps
        its instructions' boundaries."""
        err, cnt, new_ip, insn, bounds, one_map = self.block_array(ip, nr, hit)
        return err, cnt, new_ip, insn, bounds.tolist(), one_map

    def block_array(self, ip: int, nr: bool, hit: Any = None) -> tuple[int, int, int, Insn, np.ndarray, bool]:
        """:meth:`block` with the boundaries as an array (the compiled decoder's block cache takes them so)."""
        parts: list[np.ndarray] = []
        err, cnt, new_ip, insn, one_map = self._walk(ip, 0, 0, nr, parts, hit)
        if err or insn.branch == BR_NO_BRANCH or not one_map:
            return err, cnt, new_ip, insn, _NO_BOUNDS, False
        return err, cnt, new_ip, insn, (parts[0] if len(parts) == 1 else np.concatenate(parts) if parts
                                        else _NO_BOUNDS), True

    def _walk(self, ip: int, to_ip: int, max_insn_cnt: int, nr: bool, bounds: list[np.ndarray] | None,
              first: Any = None) -> tuple[int, int, int, Insn, bool]:
        """The walk; ``bounds`` (not None): gets the instructions' boundaries (byte distances from ``ip``
        after each instruction but the last), in pieces (arrays)."""
        insn = Insn()
        self.fail_obj = None
        if to_ip and ip == to_ip:
            return 0, 0, ip, insn, True
        if nr:
            lookup = self.guest_lookup
            if lookup is None:
                return _EINVAL, 0, ip, insn, True
            kernel = bool(ip >> 63)
        else:
            lookup = self.lookup
            kernel = ip >= self.kernel_start
            if not self.have_thread and not kernel:
                return _EINVAL, 0, ip, insn, True
        ip0 = ip
        insn_cnt = 0
        one_map = True
        while True:
            hit = lookup(ip, kernel) if first is None or not one_map else first
            if hit is None:
                return _EINVAL, 0, ip, insn, one_map
            start, end, pgoff, obj = hit
            offset = ip - start + pgoff
            if not to_ip and one_map and bounds is None:
                e = self.cache.get((obj.key, offset))
                if e is not None and (not max_insn_cnt or e[0] <= max_insn_cnt):
                    return 0, e[0], ip + e[1], e[2], True
            start_offset, start_ip = offset, ip
            arr = self._array(obj)
            while True:
                if arr is not None and 0 <= offset < len(arr):  # (a corrupt pgoff: no int64 offset)
                    to_dist = to_ip - ip if to_ip and ip < to_ip <= ip + _ROOM_MAX + 16 else -1
                    before = insn_cnt
                    why, insn_cnt, dist, length, op, br, rel, nb = _walk_run(
                        arr, offset, min(end - ip, _ROOM_MAX), to_dist, max_insn_cnt, insn_cnt, self._bnd)
                    if insn_cnt != before:
                        insn = Insn(op, br, length, rel)  # the last one decoded (what a failure returns)
                    if bounds is not None and nb:
                        bounds.append(self._bnd[:nb] + (ip - ip0))  # (a new array: _bnd is scratch)
                    if why == ST_FULL:
                        ip += dist
                        offset += dist
                        continue
                    if why == ST_UNKNOWN:
                        ip += dist
                        offset += dist  # this one instruction the reference's way, below
                    else:
                        if why == ST_BRANCH:
                            ip += dist
                            if one_map and not (to_ip and self.cache.get((obj.key, start_offset))):
                                self.cache[(obj.key, start_offset)] = (insn_cnt, ip - start_ip, insn)
                            return 0, insn_cnt, ip, insn, one_map
                        if why == ST_MAX:
                            return 0, insn_cnt, ip + dist, insn, one_map
                        ip += dist
                        offset += dist
                        if why == ST_TO:
                            return 0, insn_cnt, ip, Insn(op, br, 0, rel), one_map
                        break  # ST_END: the mapping's end
                code = obj.read(offset, _INSN_BUF)
                got = self.dec.decode(code, ip, obj.bits) if code else None
                if got is None:
                    obj.failed = True
                    self.fail_obj = obj.name
                    return _EINVAL, 0, ip, insn, one_map
                insn = got
                insn_cnt += 1
                if insn.branch != BR_NO_BRANCH:
                    if one_map and not (to_ip and self.cache.get((obj.key, start_offset))):
                        self.cache[(obj.key, start_offset)] = (insn_cnt, ip - start_ip, insn)
                    return 0, insn_cnt, ip, insn, one_map
                if max_insn_cnt and insn_cnt >= max_insn_cnt:
                    return 0, insn_cnt, ip, insn, one_map
                ip += insn.length
                if bounds is not None:
                    bounds.append(np.array([ip - ip0], np.int64))
                if to_ip and ip == to_ip:
                    return 0, insn_cnt, ip, Insn(insn.op, insn.branch, 0, insn.rel), one_map
                if ip >= end:
                    break
                offset += insn.length
            one_map = False


def warm() -> None:
    """The kernels compiled (precompile's warm-up): a short walk over a few instructions."""
    code = np.frombuffer(bytes.fromhex("554889e5b8010000000f05e8000000004883c408c3"), np.uint8)
    _walk_run(code, 0, len(code), -1, 0, 0, np.zeros(16, np.int64))
    insn_at(code, 0)
