"""perf's x86 instruction lengths where capstone rejects the bytes (tools/arch/x86/lib/insn.c rules).

perf 6.1's intel_pt_get_insn decodes with the kernel's table decoder (insn_decode over the opcode
attribute tables generated from x86-opcode-map.txt). It computes a length from the tables and never
validates operands: ``ff e8`` (FF /5, far jmp, with a register operand), ``8d c0`` (LEA with
mod=11), ``0f b2 c0`` (LSS from a register), a group entry the map leaves empty (``fe d0``,
``ff f8``), an opcode the map does not define (``d6``, ``0f 04``) or one invalid in 64-bit code
(``06``, ``9a``) all have a length there.  Capstone rejects each of them; perf then classifies the
bytes by opcode (FF /3 is an indirect CALL, FF /5 an indirect JMP: intel_pt_insn_decoder) and its walk
goes on (the trace, not the decoder, then disagrees: "Trace doesn't match instruction").

:func:`perf_length` answers for the bytes capstone rejected, with insn.c's steps: prefixes (done by the
caller: ``codewalk._perf_prefixes``), opcode (escapes 0F, 0F 38, 0F 3A), ModRM if the opcode's attribute
has one (every group has one), SIB and displacement by mod/rm and the address size, immediates by the
attribute and the operand size; more than 15 bytes or past the buffer: no instruction.

Not covered (the fallback keeps capstone's rejection): VEX/EVEX-encoded bytes capstone rejects (perf
rejects many of them too, by its must-/accept-VEX attributes, and classifies the rest OTHER), and the
undefined entries of the 0F 38 / 0F 3A maps (here given a ModRM, which those perf entries lack).
"""

from __future__ import annotations

# Attribute bits of this table (not insn.c's encoding): ModRM, and the immediate kind.
M = 1  # has a ModRM byte
IB = 2  # imm8 (Ib, Jb)
IW = 4  # imm16 (Iw)
IZ = 8  # imm16/32 by operand size (Iz, Jz: 32 when the operand size is 8)
IV = 16  # imm16/32/64 by operand size (Iv: B8-BF)
AP = 32  # far pointer Ap (ptr16:16 / ptr16:32)
MOFFS = 64  # moffset, the address size (A0-A3)
IWB = 128  # Iw then Ib (ENTER)
F64 = 256  # operand size forced to 64 in 64-bit code (near branches: Jz stays 32)
GRP_IMM = 512  # immediate only for some ModRM.reg values (see _GROUP_IMM)


def _one_byte() -> list[int]:
    t = [0] * 256
    for base in range(0x00, 0x40, 8):
        for i in range(4):
            t[base + i] = M  # ALU Eb,Gb / Ev,Gv / Gb,Eb / Gv,Ev
        t[base + 4] = IB  # AL,Ib
        t[base + 5] = IZ  # eAX,Iz
    t[0x62] = t[0x63] = M  # BOUND (32-bit), MOVSXD / ARPL
    t[0x68] = IZ
    t[0x69] = M | IZ
    t[0x6A] = IB
    t[0x6B] = M | IB
    for op in range(0x70, 0x80):
        t[op] = IB | F64  # Jcc Jb
    t[0x80] = M | IB
    t[0x81] = M | IZ
    t[0x82] = M | IB
    t[0x83] = M | IB
    for op in range(0x84, 0x90):
        t[op] = M  # TEST, XCHG, MOV, LEA, MOV Sreg, POP Ev (group 1A)
    t[0x9A] = AP
    for op in range(0xA0, 0xA4):
        t[op] = MOFFS
    t[0xA8] = IB
    t[0xA9] = IZ
    for op in range(0xB0, 0xB8):
        t[op] = IB
    for op in range(0xB8, 0xC0):
        t[op] = IV
    t[0xC0] = t[0xC1] = M | IB
    t[0xC2] = IW
    t[0xC4] = t[0xC5] = M  # LES / LDS (32-bit code, ModRM not 11: VEX otherwise)
    t[0xC6] = M | IB  # group 11: the opcode's Ib holds for every reg
    t[0xC7] = M | IZ
    t[0xC8] = IWB
    t[0xCA] = IW
    t[0xCD] = IB
    for op in range(0xD0, 0xD4):
        t[op] = M
    t[0xD4] = t[0xD5] = IB
    for op in range(0xD8, 0xE0):
        t[op] = M  # x87
    for op in range(0xE0, 0xE4):
        t[op] = IB | F64  # LOOPcc, JrCXZ
    for op in range(0xE4, 0xE8):
        t[op] = IB  # IN, OUT
    t[0xE8] = t[0xE9] = IZ | F64
    t[0xEA] = AP
    t[0xEB] = IB | F64
    t[0xF6] = t[0xF7] = M | GRP_IMM  # group 3: TEST Eb,Ib / Ev,Iz at reg 0 and 1 only
    t[0xFE] = t[0xFF] = M
    return t


def _two_byte() -> list[int]:
    t = [M] * 256
    for op in (0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0E, 0x19, 0x1D,
               0x24, 0x25, 0x26, 0x27, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x39,
               0x3B, 0x3C, 0x3D, 0x3E, 0x3F, 0x77, 0x7A, 0x7B, 0xA0, 0xA1, 0xA2, 0xA8, 0xA9, 0xAA, 0xB8):
        t[op] = 0  # no ModRM: system and undefined entries (0F B8: JMPE; POPCNT after F3, below)
    t[0x0F] = M | IB  # 3DNow!: the last imm byte is the opcode extension
    for op in range(0xC8, 0xD0):
        t[op] = 0  # BSWAP
    t[0x70] = M | IB
    for op in (0x71, 0x72, 0x73):
        t[op] = M | GRP_IMM  # groups 12-14: Ib only in the defined entries
    for op in range(0x80, 0x90):
        t[op] = IZ | F64  # Jcc Jz
    for op in (0xA4, 0xAC, 0xBA, 0xC2, 0xC4, 0xC5, 0xC6):
        t[op] = M | IB
    return t


_ONE = _one_byte()
_TWO = _two_byte()
# (opcode bytes) -> ModRM.reg values whose group entry has an imm8 (or Iz for F7).
_GROUP_IMM = {(0xF6,): (0, 1), (0xF7,): (0, 1), (0x0F, 0x71): (2, 4, 6), (0x0F, 0x72): (2, 4, 6),
              (0x0F, 0x73): (2, 3, 6, 7)}
_IMM_F7 = IZ

MAX_INSN_SIZE = 15


def _last_legacy(code: bytes | bytearray, pre: int, bits: int) -> int:
    """The last legacy prefix byte (insn.c's prefixes.bytes[3]), REX aside; 0 if none."""
    i = pre - 1
    if bits == 64 and i >= 0 and 0x40 <= code[i] <= 0x4F:
        i -= 1
    return code[i] if i >= 0 else 0


def perf_length(code: bytes | bytearray, pre: int, bits: int) -> tuple[int, bytes, int, int] | None:
    """(length, opcode bytes, ModRM (0 if none), offset of the immediate) of the instruction whose
    opcode is at ``pre`` (``code[:pre]`` being its prefixes), by perf's insn.c; None where perf has
    none either (past the buffer or 15 bytes) or where this table does not follow perf (VEX/EVEX)."""
    end = min(len(code), MAX_INSN_SIZE)
    legacy = code[:pre]
    rex_w = bits == 64 and pre > 0 and 0x40 <= code[pre - 1] <= 0x4F and bool(code[pre - 1] & 8)
    opnd = 8 if rex_w else (2 if 0x66 in legacy else 4)
    if bits == 64:
        addr = 4 if 0x67 in legacy else 8
    else:
        addr = 2 if 0x67 in legacy else 4
    i = pre
    if i >= end:
        return None
    op = code[i]
    if op in (0xC4, 0xC5, 0x62) and (bits == 64 or (i + 1 < end and code[i + 1] >= 0xC0)):
        return None  # VEX / EVEX (perf: AVX, class OTHER, or rejected by its VEX attributes)
    i += 1
    if op == 0x0F:
        if i >= end:
            return None
        op2 = code[i]
        i += 1
        if op2 in (0x38, 0x3A):
            if i >= end:
                return None
            opcode = bytes((0x0F, op2, code[i]))
            i += 1
            attr = M | (IB if op2 == 0x3A else 0)
        else:
            opcode = bytes((0x0F, op2))
            attr = _TWO[op2]
            if op2 == 0xB8 and pre and _last_legacy(code, pre, bits) == 0xF3:
                attr = M  # POPCNT: insn.c picks the entry by the last prefix
    else:
        opcode = bytes((op,))
        attr = _ONE[op]
    if bits == 64 and attr & F64:
        opnd = 8
    modrm = 0
    if attr & M:
        if i >= end:
            return None
        modrm = code[i]
        i += 1
        mod, rm = modrm >> 6, modrm & 7
        if mod != 3:
            if addr == 2:
                i += {0: 2 if rm == 6 else 0, 1: 1, 2: 2}[mod]
            else:
                if rm == 4:
                    if i >= end:
                        return None
                    sib = code[i]
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
        if (modrm >> 3) & 7 in _GROUP_IMM[tuple(opcode)]:
            attr |= _IMM_F7 if opcode == b"\xf7" else IB
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
        return None
    return i, opcode, modrm, imm_at
