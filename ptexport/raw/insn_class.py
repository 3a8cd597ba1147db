"""Instruction classification: capstone for lengths, a table for what matters to PT.

The flow needs, per instruction, only its size and how it changes control
flow, the way libipt's ``pt_ild`` classifies it:

* ``iclass`` - OTHER, CALL, RETURN, JUMP, COND_JUMP, FAR_CALL, FAR_RETURN,
  FAR_JUMP, PTWRITE (``ptic_*``);
* ``special`` - the few exact instructions the decoder must recognise (MOV to
  CR3, VMLAUNCH/VMRESUME/VMPTRLD, INT*, IRET, SYSCALL/SYSRET, SYSENTER/SYSEXIT,
  ERETS/ERETU, UIRET, VMCALL) (``PTI_INST_*``);
* ``disp`` - the branch displacement of a direct branch, else None.

:func:`decode` returns the plain tuple ``(size, iclass, special, disp)`` (or
None for bytes that are no instruction), and :class:`InsnCache` memoises it
per (address-space key, mode, ip), so each instruction is decoded once.
"""

from __future__ import annotations

import capstone

# ptic_* instruction classes.
OTHER = 0
CALL = 1
RETURN = 2
JUMP = 3
COND_JUMP = 4
FAR_CALL = 5
FAR_RETURN = 6
FAR_JUMP = 7
PTWRITE = 8

ICLASS_NAMES = ("other", "call", "return", "jump", "cond_jump", "far_call", "far_return",
                "far_jump", "ptwrite")

# PTI_INST_* special instructions.
NONE = 0
MOV_CR3 = 1
VMPTRLD = 2
VMLAUNCH = 3
VMRESUME = 4
VMCALL = 5
INT = 6
INT3 = 7
INT1 = 8
INTO = 9
IRET = 10
SYSCALL = 11
SYSENTER = 12
SYSEXIT = 13
SYSRET = 14
ERETS = 15
ERETU = 16
UIRET = 17
JMPABS = 18

# Execution modes (pt_exec_mode).
MODE_UNKNOWN = 0
MODE_16 = 16
MODE_32 = 32
MODE_64 = 64

MAX_INSN_SIZE = 15

_MODES = {MODE_16: capstone.CS_MODE_16, MODE_32: capstone.CS_MODE_32, MODE_64: capstone.CS_MODE_64}
_cs: dict[int, capstone.Cs] = {}


def _disassembler(mode: int) -> capstone.Cs:
    md = _cs.get(mode)
    if md is None:
        md = capstone.Cs(capstone.CS_ARCH_X86, _MODES.get(mode, capstone.CS_MODE_64))
        md.detail = True
        _cs[mode] = md
    return md


# One-byte opcodes (map 0) -> (iclass, special); None in the map means "look at ModRM".
_MAP0 = {
    0xE8: (CALL, NONE), 0xE9: (JUMP, NONE), 0xEB: (JUMP, NONE),
    0x9A: (FAR_CALL, NONE), 0xEA: (FAR_JUMP, NONE),
    0xC2: (RETURN, NONE), 0xC3: (RETURN, NONE),
    0xCA: (FAR_RETURN, NONE), 0xCB: (FAR_RETURN, NONE), 0xCF: (FAR_RETURN, IRET),
    0xCC: (FAR_CALL, INT3), 0xCD: (FAR_CALL, INT), 0xCE: (FAR_CALL, INTO), 0xF1: (FAR_CALL, INT1),
    0xE0: (COND_JUMP, NONE), 0xE1: (COND_JUMP, NONE), 0xE2: (COND_JUMP, NONE),
    0xE3: (COND_JUMP, NONE),
}
for _op in range(0x70, 0x80):
    _MAP0[_op] = (COND_JUMP, NONE)
_FF_REG = {2: (CALL, NONE), 3: (FAR_CALL, NONE), 4: (JUMP, NONE), 5: (FAR_JUMP, NONE)}

# Two-byte opcodes (0F xx, map 1).
_MAP1 = {
    0x05: (FAR_CALL, SYSCALL), 0x34: (FAR_CALL, SYSENTER),
    0x35: (FAR_RETURN, SYSEXIT), 0x07: (FAR_RETURN, SYSRET),
}
for _op in range(0x80, 0x90):
    _MAP1[_op] = (COND_JUMP, NONE)
_0F01_MODRM = {0xC1: (FAR_CALL, VMCALL), 0xC2: (FAR_RETURN, VMLAUNCH),
               0xC3: (FAR_RETURN, VMRESUME), 0xEC: (FAR_RETURN, UIRET)}

_DIRECT = (CALL, JUMP, COND_JUMP)


def classify(opcode: bytes | list, modrm: int, prefix0: int, has_osz: bool) -> tuple[int, int]:
    """(iclass, special) of an instruction from its opcode bytes, ModRM and F2/F3 prefix."""
    b0 = opcode[0]
    if b0 != 0x0F:
        if b0 == 0xFF:
            return _FF_REG.get((modrm >> 3) & 7, (OTHER, NONE))
        return _MAP0.get(b0, (OTHER, NONE))
    b1 = opcode[1]
    hit = _MAP1.get(b1)
    if hit is not None:
        return hit
    reg = (modrm >> 3) & 7
    if b1 == 0x01:
        hit = _0F01_MODRM.get(modrm)
        if hit is not None:
            return hit
        if modrm == 0xCA:
            if prefix0 == 0xF2:
                return (FAR_RETURN, ERETS)
            if prefix0 == 0xF3:
                return (FAR_RETURN, ERETU)
        return (OTHER, NONE)
    if b1 == 0x22 and reg == 3:
        return (OTHER, MOV_CR3)
    if b1 == 0xC7 and (modrm >> 6) != 3 and reg == 6:
        return (OTHER, VMPTRLD)
    if b1 == 0xAE and prefix0 == 0xF3 and not has_osz and reg == 4:
        return (PTWRITE, NONE)
    return (OTHER, NONE)


def decode(code: bytes, ip: int, mode: int) -> tuple[int, int, int, int | None] | None:
    """Decode the instruction at the start of ``code``: (size, iclass, special, disp) or None."""
    md = _disassembler(mode)
    for insn in md.disasm(code, ip, 1):
        opcode = insn.opcode
        f2f3, osz = _legacy_prefixes(code, mode)
        iclass, special = classify(opcode, insn.modrm, f2f3, osz)
        disp = None
        if iclass in _DIRECT and insn.imm_size and not (opcode[0] == 0xFF):
            raw = insn.bytes[insn.imm_offset: insn.imm_offset + insn.imm_size]
            disp = int.from_bytes(raw, "little", signed=True)
        return (insn.size, iclass, special, disp)
    # Capstone does not know a few newer PT-relevant encodings.
    return _decode_fallback(code)


_LEGACY = frozenset((0xF0, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65, 0x66, 0x67))


def _legacy_prefixes(code: bytes, mode: int) -> tuple[int, bool]:
    """(last F2/F3 prefix or 0, operand-size prefix seen) from the raw bytes.

    Capstone folds some prefixes into the mnemonic and drops them from its
    prefix list (F3 0F 01 CA decodes as "clac"), so look at the bytes.
    """
    last = 0
    osz = False
    for b in code:
        if b in _LEGACY:
            if b == 0xF2 or b == 0xF3:
                last = b
            elif b == 0x66:
                osz = True
            continue
        break
    return last, osz


def _decode_fallback(code: bytes):
    # JMPABS (REX2 D5 with M0=0, W=0, opcode A1, 64-bit absolute target): a
    # direct jump that the trace treats like an indirect one (it gets a TIP).
    if len(code) >= 11 and code[0] == 0xD5 and not (code[1] & 0x88) and code[2] == 0xA1:
        return (11, JUMP, JMPABS, None)
    # UIRET (F3 0F 01 EC), ERETS (F2 0F 01 CA), ERETU (F3 0F 01 CA).
    if code[:4] == b"\xf3\x0f\x01\xec":
        return (4, FAR_RETURN, UIRET, None)
    if code[:4] == b"\xf2\x0f\x01\xca":
        return (4, FAR_RETURN, ERETS, None)
    if code[:4] == b"\xf3\x0f\x01\xca":
        return (4, FAR_RETURN, ERETU, None)
    return None


def is_branch(iclass: int) -> bool:
    return iclass != OTHER and iclass != PTWRITE


def is_far_branch(iclass: int) -> bool:
    return iclass in (FAR_CALL, FAR_RETURN, FAR_JUMP)


def changes_cpl(special: int) -> bool:
    return special in (INT, INT3, INT1, INTO, IRET, SYSCALL, SYSENTER, SYSEXIT, SYSRET)


def changes_cr3(special: int) -> bool:
    return special == MOV_CR3


def binds_to_pip(iclass: int, special: int) -> bool:
    return special in (MOV_CR3, VMLAUNCH, VMRESUME) or is_far_branch(iclass)


def binds_to_vmcs(iclass: int, special: int) -> bool:
    return special in (VMPTRLD, VMLAUNCH, VMRESUME) or is_far_branch(iclass)


def is_iret(special: int) -> bool:
    return special in (IRET, SYSRET, SYSEXIT, ERETS, ERETU)


def is_vmentry(special: int) -> bool:
    return special in (VMLAUNCH, VMRESUME)


_RUN_BYTES = 96
_MAX_RUN = 512


def _classify_raw(code: bytes, size: int, mode: int) -> tuple[int, int, int | None]:
    """(iclass, special, disp) from an instruction's raw bytes (length known)."""
    i = 0
    last_f2f3 = 0
    osz = False
    n = size
    while i < n:
        b = code[i]
        if b in _LEGACY:
            if b == 0xF2 or b == 0xF3:
                last_f2f3 = b
            elif b == 0x66:
                osz = True
            i += 1
            continue
        break
    if mode == MODE_64 and i < n and 0x40 <= code[i] <= 0x4F:
        i += 1
    if i >= n:
        return OTHER, NONE, None
    b0 = code[i]
    if b0 == 0x0F:
        if i + 1 >= n:
            return OTHER, NONE, None
        b1 = code[i + 1]
        modrm = code[i + 2] if i + 2 < n else 0
        iclass, special = classify((0x0F, b1), modrm, last_f2f3, osz)
        if iclass == COND_JUMP:
            return iclass, special, int.from_bytes(code[i + 2:size], "little", signed=True)
        return iclass, special, None
    modrm = code[i + 1] if i + 1 < n else 0
    iclass, special = classify((b0,), modrm, last_f2f3, osz)
    if iclass in _DIRECT and b0 != 0xFF:
        return iclass, special, int.from_bytes(code[i + 1:size], "little", signed=True)
    return iclass, special, None


class InsnCache:
    """Decoded instructions keyed by (address-space key, mode, ip), and runs.

    ``read(ip, n)`` is the address space's memory reader; entries are
    ``(size, iclass, special, disp)`` tuples, or negative ints for "no
    memory mapped" (-1) and "undecodable bytes" (-2).  A miss decodes the
    straight-line code from there with one capstone call and caches every
    instruction of it, so each instruction's bytes are decoded once.

    :meth:`run` gives the basic-block view: the IPs of the consecutive
    non-branch instructions starting at an IP (the block cache the flow's
    fast path uses).
    """

    NOMAP = -1
    BAD_INSN = -2

    __slots__ = ("_entries", "_runs")

    def __init__(self) -> None:
        self._entries: dict[tuple, object] = {}
        self._runs: dict[tuple, tuple] = {}

    def lookup(self, key, mode: int, ip: int, read):
        k = (key, mode, ip)
        hit = self._entries.get(k)
        if hit is not None:
            return hit
        self._fill(key, mode, ip, read)
        return self._entries[k]

    def _fill(self, key, mode: int, ip: int, read) -> None:
        entries = self._entries
        code = read(ip, _RUN_BYTES)
        if not code:
            entries[(key, mode, ip)] = self.NOMAP
            return
        cmode = mode if mode else MODE_64
        md = _disassembler(cmode)
        off = 0
        first = True
        for addr, size, _mn, _ops in md.disasm_lite(code, ip):
            raw = code[off:off + size]
            if raw[0] == 0xD5 and cmode == MODE_64:
                break          # REX2: let the careful path handle it
            iclass, special, disp = _classify_raw(raw, size, cmode)
            if first and not (iclass == OTHER and special == NONE):
                # Branches and special instructions go through the careful path.
                break
            entries[(key, mode, addr)] = (size, iclass, special, disp)
            first = False
            off += size
            if iclass != OTHER or special != NONE or off + MAX_INSN_SIZE > len(code):
                break
        if (key, mode, ip) in entries:
            return
        # Careful path: capstone with details for the one instruction at ip,
        # re-reading across section boundaries (truncated instructions).
        code = read(ip, MAX_INSN_SIZE)
        hit = decode(code, ip, cmode)
        entries[(key, mode, ip)] = self.BAD_INSN if hit is None else hit

    def run(self, key, mode: int, ip: int, read) -> tuple:
        """(ips, end_ip): consecutive plain instructions from ``ip`` (maybe empty)."""
        k = (key, mode, ip)
        hit = self._runs.get(k)
        if hit is not None:
            return hit
        ips = []
        cur = ip
        lookup = self.lookup
        while len(ips) < _MAX_RUN:
            e = lookup(key, mode, cur, read)
            if e.__class__ is int or e[1] != OTHER or e[2] != NONE:
                break
            ips.append(cur)
            cur = (cur + e[0]) & 0xFFFFFFFFFFFFFFFF
        hit = (tuple(ips), cur)
        self._runs[k] = hit
        return hit

    def clear(self) -> None:
        self._entries.clear()
        self._runs.clear()

    def __len__(self) -> int:
        return len(self._entries)
