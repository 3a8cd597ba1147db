"""What each executed block ends with, from capstone: the branch kind and its targets.

Unicorn reports blocks as (start, size).  The generator needs, per block, the
addresses of its instructions and what the last one is: a conditional jump,
a direct or indirect jump or call, a return, a ``syscall`` or no branch at
all (unicorn also ends blocks at page boundaries and size limits).
"""

from __future__ import annotations

from dataclasses import dataclass

from ptexport.errors import SynthError

# capstone's ids of the conditional branches: Jcc, and LOOP/LOOPE/LOOPNE/JCXZ/JECXZ/JRCXZ,
# which the SDM counts among them (a TNT bit each; perf: INTEL_PT_OP_LOOP / INTEL_PT_OP_JCXZ,
# branch type conditional).  capstone puts LOOP* in no "jump" group, so the ids decide.
_COND_NAMES = ("JA", "JAE", "JB", "JBE", "JE", "JNE", "JG", "JGE", "JL", "JLE", "JO", "JNO",
               "JP", "JNP", "JS", "JNS", "JCXZ", "JECXZ", "JRCXZ", "LOOP", "LOOPE", "LOOPNE")

END_NONE, END_JCC, END_JMP, END_JMP_IND, END_CALL, END_CALL_IND, END_RET, END_SYSCALL = range(8)
END_NAMES = ("none", "jcc", "jmp", "jmp*", "call", "call*", "ret", "syscall")


@dataclass(frozen=True)
class BlockInfo:
    addr: int
    size: int
    insns: tuple[int, ...]   # instruction addresses
    end: int                 # END_* of the last instruction
    last_ip: int             # address of the last instruction
    fallthrough: int         # address after the block
    target: int | None       # direct target of a jcc/jmp/call
    zero_len_call: bool      # call to the next instruction (not pushed for return compression)
    waits: tuple[tuple[int, int], ...] = ()   # (insn index, ip) of TPAUSE/UMWAIT (power events)


_COND_IDS: frozenset[int] | None = None


def _cond_ids() -> frozenset[int]:
    global _COND_IDS
    if _COND_IDS is None:
        from capstone import x86_const as X

        _COND_IDS = frozenset(getattr(X, "X86_INS_" + name) for name in _COND_NAMES)
    return _COND_IDS


class BlockCache:
    """Decodes blocks of one program's memory (with its shared libraries) on demand and remembers them."""

    def __init__(self, program) -> None:
        import capstone

        self.program = program
        self._md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self._md.detail = True
        self._cache: dict[tuple[int, int], BlockInfo] = {}
        # the executable's segments and its shared libraries'
        self._segs = [(s.vaddr, s.vaddr + s.filesz, s.offset, image.data)
                      for image in program.images()
                      for s in image.segments]

    def _read(self, addr: int, size: int) -> bytes:
        for lo, hi, off, data in self._segs:
            if lo <= addr and addr + size <= hi:
                return data[off + addr - lo: off + addr - lo + size]
        raise SynthError(f"program {self.program.name}: block {addr:#x}+{size} is outside its "
                         "file-backed code")

    def get(self, addr: int, size: int) -> BlockInfo:
        key = (addr, size)
        info = self._cache.get(key)
        if info is None:
            info = self._cache[key] = self._decode(addr, size)
        return info

    def _decode(self, addr: int, size: int) -> BlockInfo:
        import capstone
        from capstone import x86_const as X

        code = self._read(addr, size)
        insns = list(self._md.disasm(code, addr))
        if not insns or insns[-1].address + insns[-1].size != addr + size:
            raise SynthError(f"program {self.program.name}: cannot decode block {addr:#x}+{size}")
        last = insns[-1]
        groups = set(last.groups)
        end = END_NONE
        target = None
        zero = False
        op0 = last.operands[0] if last.operands else None
        direct = op0 is not None and op0.type == X.X86_OP_IMM
        if last.id == X.X86_INS_SYSCALL:
            end = END_SYSCALL
        elif capstone.CS_GRP_RET in groups:
            end = END_RET
        elif capstone.CS_GRP_CALL in groups:
            end = END_CALL if direct else END_CALL_IND
            if direct:
                target = op0.imm
                zero = target == last.address + last.size
        elif last.id in _cond_ids():
            end = END_JCC
            target = op0.imm
        elif last.id == X.X86_INS_JMP:
            end = END_JMP if direct else END_JMP_IND
            if direct:
                target = op0.imm
        elif capstone.CS_GRP_JUMP in groups:
            raise SynthError(f"program {self.program.name}: {last.mnemonic} {last.op_str} at "
                             f"{last.address:#x} is not supported by the generator")
        elif capstone.CS_GRP_INT in groups or capstone.CS_GRP_IRET in groups:
            raise SynthError(f"program {self.program.name}: {last.mnemonic} at {last.address:#x} "
                             "is not supported by the generator")
        waits = tuple((k, i.address) for k, i in enumerate(insns)
                      if i.id in (X.X86_INS_TPAUSE, X.X86_INS_UMWAIT))
        return BlockInfo(addr, size, tuple(i.address for i in insns), end, last.address,
                         addr + size, target, zero, waits)
