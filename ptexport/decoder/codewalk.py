"""Code reading for the perf-mode decoder: maps -> files -> instructions, perf's way.

The walker answers the decoder's ``walk(ip, to_ip, max_insn_cnt, nr)`` for one
queue.  It finds the mapping that covers ``ip`` in the current thread's
address space (or the kernel's), reads code from the mapped file, classifies
instructions like perf's intel-pt-insn-decoder, and caches each basic block
by (file, offset) so a block is decoded once however often it runs.

perf's bookkeeping of unreadable objects is reproduced because it decides
which failures are reported: the first two failed reads of an object report
"Failed to get instruction", later ones recover silently (perf's
DSO_DATA_STATUS_ERROR plus its ITRACE "seen" flag).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ptexport.decoder.insnlen import perf_length
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


@dataclass(slots=True)
class Insn:
    """One decoded instruction as the walker reports it."""

    op: int = OP_OTHER
    branch: int = BR_NO_BRANCH
    length: int = 0
    rel: int = 0


_EINVAL = -22
_INSN_BUF = 16



def _direct_ids() -> tuple[frozenset[int], int]:
    """capstone's ids of the direct branches whose target gives ``rel`` (conditional jumps, loops,
    JMP, CALL), and its immediate operand type."""
    from capstone import x86_const as X

    return frozenset((
        X.X86_INS_JAE, X.X86_INS_JA, X.X86_INS_JBE, X.X86_INS_JB, X.X86_INS_JE, X.X86_INS_JGE, X.X86_INS_JG,
        X.X86_INS_JLE, X.X86_INS_JL, X.X86_INS_JNE, X.X86_INS_JNO, X.X86_INS_JNP, X.X86_INS_JNS, X.X86_INS_JO,
        X.X86_INS_JP, X.X86_INS_JS, X.X86_INS_JCXZ, X.X86_INS_JECXZ, X.X86_INS_JRCXZ,
        X.X86_INS_LOOP, X.X86_INS_LOOPE, X.X86_INS_LOOPNE, X.X86_INS_JMP, X.X86_INS_CALL)), X.X86_OP_IMM


def classify(first: int, second: int, modrm: int, length: int, rel: int) -> Insn:
    """perf's opcode-based classification (intel_pt_insn_decoder)."""
    op, br = OP_OTHER, BR_NO_BRANCH
    if first == 0x0F:
        if second == 0x01 and modrm in (0xC2, 0xC3):
            op, br = OP_VMENTRY, BR_INDIRECT
        elif second in (0x05, 0x34):
            op, br = OP_SYSCALL, BR_INDIRECT
        elif second in (0x07, 0x35):
            op, br = OP_SYSRET, BR_INDIRECT
        elif 0x80 <= second <= 0x8F:
            op, br = OP_JCC, BR_CONDITIONAL
    elif 0x70 <= first <= 0x7F:
        op, br = OP_JCC, BR_CONDITIONAL
    elif first in (0xC2, 0xC3, 0xCA, 0xCB):
        op, br = OP_RET, BR_INDIRECT
    elif first == 0xCF:
        op, br = OP_IRET, BR_INDIRECT
    elif 0xCC <= first <= 0xCE:
        op, br = OP_INT, BR_INDIRECT
    elif first == 0xE8:
        op, br = OP_CALL, BR_UNCONDITIONAL
    elif first == 0x9A:
        op, br = OP_CALL, BR_INDIRECT
    elif 0xE0 <= first <= 0xE2:
        op, br = OP_LOOP, BR_CONDITIONAL
    elif first == 0xE3:
        op, br = OP_JCC, BR_CONDITIONAL
    elif first in (0xE9, 0xEB):
        op, br = OP_JMP, BR_UNCONDITIONAL
    elif first == 0xEA:
        op, br = OP_JMP, BR_INDIRECT
    elif first == 0xFF:
        ext = (modrm >> 3) & 7
        if ext in (2, 3):
            op, br = OP_CALL, BR_INDIRECT
        elif ext in (4, 5):
            op, br = OP_JMP, BR_INDIRECT
    if br not in (BR_CONDITIONAL, BR_UNCONDITIONAL):
        rel = 0
    return Insn(op, br, length, rel)


class InsnDecoder:
    """Capstone in detail mode, reduced to what the decoder needs (capstone loaded at the first
    instruction that needs it: the compiled decoder's walk decodes most code without it)."""

    def __init__(self) -> None:
        self._cs: dict[int, Any] = {}
        self._direct: frozenset[int] = frozenset()
        self._imm = 0

    def _disassembler(self, bits: int) -> Any:
        cs = self._cs.get(bits)
        if cs is None:
            import capstone

            self._direct, self._imm = _direct_ids()
            cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if bits == 64 else capstone.CS_MODE_32)
            cs.detail = True
            self._cs[bits] = cs
        return cs

    def decode(self, code: bytes, ip: int, bits: int = 64) -> Insn | None:
        """perf's intel_pt_get_insn: capstone, with perf's insn.c prefix rules where they differ.

        perf's decoder (tools/arch/x86/lib/insn.c) takes legacy prefixes (repeats
        free, at most four distinct ones), then one REX byte in 64-bit mode, then
        the opcode; a prefix byte met in the opcode's place (a second REX, a
        legacy prefix after REX, a fifth distinct prefix) is the opcode itself,
        whose table attribute has no ModRM and no immediate: an instruction
        ending there, class OTHER.  LOCK is never validated: bytes capstone
        rejects only for their LOCK prefix are decoded without it, the prefix
        still counted in the length.
        """
        pre, locks = _perf_prefixes(code, bits)
        if pre < len(code) and (code[pre] in _LEGACY_PREFIXES or (bits == 64 and 0x40 <= code[pre] <= 0x4F)):
            return Insn(OP_OTHER, BR_NO_BRANCH, pre + 1, 0)
        got = self._capstone(code, ip, bits)
        if got is None and locks:
            rest = bytes(b for i, b in enumerate(code) if i >= pre or b != 0xF0)
            got = self._capstone(rest, ip + locks, bits)
            if got is not None:
                got = Insn(got.op, got.branch, got.length + locks, got.rel)
        if got is None:
            got = self._perf_tables(code, pre, bits)
        return got

    @staticmethod
    def _perf_tables(code: bytes, pre: int, bits: int) -> Insn | None:
        """Bytes capstone rejects for their operands (``ff e8``, LEA with mod=11, an empty group
        entry...): insn.c's table length, classified by opcode as perf does (``insnlen``)."""
        got = perf_length(code, pre, bits)
        if got is None:
            return None
        length, opcode, modrm, imm_at = got
        rel = int.from_bytes(code[imm_at:length], "little", signed=True) if length > imm_at else 0
        return classify(opcode[0], opcode[1] if len(opcode) > 1 else 0, modrm, length, rel)

    def _capstone(self, code: bytes, ip: int, bits: int) -> Insn | None:
        for ins in self._disassembler(bits).disasm(code, ip, 1):
            opc = ins.opcode
            first = opc[0]
            second = opc[1]
            rel = 0
            if ins.id in self._direct:
                ops = ins.operands
                if ops and ops[0].type == self._imm:
                    rel = (ops[0].imm - (ip + ins.size)) & 0xFFFFFFFFFFFFFFFF
                    if rel >= 1 << 63:
                        rel -= 1 << 64
            if _is_vex(ins.bytes, bits):  # perf: AVX instructions are never branches
                return Insn(OP_OTHER, BR_NO_BRANCH, ins.size, 0)
            return classify(first, second, ins.modrm, ins.size, rel)
        return None


_LEGACY_PREFIXES = frozenset((0x66, 0x67, 0xF0, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65))


def _perf_prefixes(code: bytes | bytearray, bits: int) -> tuple[int, int]:
    """(offset of the opcode byte, LOCK bytes before it) by insn.c's insn_get_prefixes."""
    seen: list[int] = []
    i = 0
    locks = 0
    n = len(code)
    while i < n and code[i] in _LEGACY_PREFIXES:
        b = code[i]
        if b not in seen:
            if len(seen) == 4:
                break  # a fifth distinct prefix: perf stops, the byte becomes the opcode
            seen.append(b)
        if b == 0xF0:
            locks += 1
        i += 1
    if bits == 64 and i < n and 0x40 <= code[i] <= 0x4F:
        i += 1
    return i, locks


def _is_vex(raw: bytes | bytearray, bits: int) -> bool:
    """True for VEX/EVEX-encoded instructions (perf's insn_is_avx)."""
    i = 0
    while i < len(raw) and raw[i] in _LEGACY_PREFIXES:
        i += 1
    if bits == 64 and i < len(raw) and 0x40 <= raw[i] <= 0x4F:
        return False  # REX cannot precede VEX
    if i >= len(raw) or raw[i] not in (0xC4, 0xC5, 0x62):
        return False
    if bits == 64:
        return True
    return i + 1 < len(raw) and (raw[i + 1] & 0xC0) == 0xC0


@dataclass(slots=True)
class CodeObject:
    """A file perf would call a DSO: its bytes and whether reading failed before."""

    name: str
    data: memoryview | None
    bits: int = 64
    failed: bool = False  # a read failed (perf's DSO_DATA_STATUS_ERROR)
    # what block caches key its code by: the name, unless another object of the name came first
    # (:class:`CodeObjects`: a file of another build-id, e.g. a guest's library beside the host's)
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.name

    def read(self, offset: int, size: int) -> bytes:
        if self.data is None or offset < 0 or offset >= len(self.data):
            return b""
        return bytes(self.data[offset:offset + size])


class CodeObjects:
    """Finds and maps the files behind mappings (build-id cache, --symfs, the path)."""

    def __init__(self, symfs: str | None = None, buildid_dir: str | None = None,
                 search_dirs: tuple[str, ...] = ()) -> None:
        self.symfs = symfs
        self.buildid_dir = buildid_dir or os.path.join(os.path.expanduser("~"), ".debug")
        self.search_dirs = search_dirs
        self._objects: dict[tuple[str, bytes | None], CodeObject] = {}
        self._of_name: dict[str, int] = {}  # objects made of each name

    def candidates(self, filename: str, build_id: bytes | None) -> list[str]:
        out = []
        if build_id:
            h = build_id.hex()
            out.append(os.path.join(self.buildid_dir, ".build-id", h[:2], h[2:] + ".debug"))
            out.append(os.path.join(self.buildid_dir, ".build-id", h[:2], h[2:]))
        if self.symfs:
            out.append(os.path.join(self.symfs, filename.lstrip("/")))
        else:
            out.append(filename)
        for d in self.search_dirs:
            out.append(os.path.join(d, os.path.basename(filename)))
        return out

    def get(self, filename: str, build_id: bytes | None) -> CodeObject:
        key = (filename, build_id)
        obj = self._objects.get(key)
        if obj is not None:
            return obj
        data = None
        bits = 64
        if filename and not filename.startswith("[") and not filename.startswith("//anon"):
            for path in self.candidates(filename, build_id):
                try:
                    with open(path, "rb") as f:
                        size = os.fstat(f.fileno()).st_size
                        if size == 0:
                            continue
                        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
                except OSError:
                    continue
                if bytes(data[:4]) == b"\x7fELF" and data[4] == 1:
                    bits = 32
                break
        k = self._of_name.get(filename, 0)
        self._of_name[filename] = k + 1
        obj = CodeObject(filename, data, bits, key=filename if k == 0 else f"{filename}#{k}")
        self._objects[key] = obj
        return obj


class KcoreCode:
    """A kcore copy (``perf record --kcore``'s kcore_dir/kcore) as perf uses it once loaded:
    each PT_LOAD segment is a kernel map whose bytes are read from the file.

    ``at(ip)`` answers like a :data:`MapLookup` (start, end, file offset of start, object).
    An unreadable or non-ELF file gives an empty object (every read fails, as in perf).
    """

    def __init__(self, path: str, name: str | None = None) -> None:
        self.path = path
        self.segments: list[tuple[int, int, int, CodeObject]] = []
        try:
            from elftools.elf.elffile import ELFFile

            with open(path, "rb") as f:
                data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
                f.seek(0)
                elf = ELFFile(f)
                phdrs = [(p["p_vaddr"], p["p_offset"], p["p_filesz"]) for p in elf.iter_segments()
                         if p["p_type"] == "PT_LOAD" and p["p_filesz"]]
        except Exception:  # noqa: BLE001 - unreadable kcore: perf reports failed reads
            return
        label = name or path
        for vaddr, off, size in sorted(phdrs):
            obj = CodeObject(f"{label}@{vaddr:#x}", data[off:off + size])
            self.segments.append((vaddr, vaddr + size, 0, obj))
        self._starts = [s[0] for s in self.segments]

    def at(self, ip: int) -> "tuple[int, int, int, CodeObject] | None":
        if not self.segments:
            return None
        import bisect

        i = bisect.bisect_right(self._starts, ip) - 1
        if i >= 0 and ip < self.segments[i][1]:
            return self.segments[i]
        return None


# A lookup from (ip, kernel?) to (mapping start, mapping end, file offset of start, CodeObject), or None.
MapLookup = Callable[[int, bool], "tuple[int, int, int, CodeObject] | None"]


class PerfCodeWalker:
    """The decoder's ``walk`` callback for one queue; ``lookup`` is swapped as threads change."""

    def __init__(self, lookup: MapLookup, kernel_start: int, decoder: InsnDecoder | None = None) -> None:
        self.lookup = lookup
        # Guest code (non-root ips): the lookup's ``guest(ip, kernel)`` when it has one.
        self.guest_lookup: MapLookup | None = getattr(lookup, "guest", None)
        self.kernel_start = kernel_start
        self.dec = decoder or InsnDecoder()
        # (object name, build id, offset) -> (insn_cnt, byte_cnt, Insn)
        self.cache: dict[tuple, tuple[int, int, Insn]] = {}
        self.have_thread = True
        # Name of the object whose read failed in the last walk (None: no mapping).
        # perf stops reporting an object's failures after two; the session applies
        # that rule across queues in time order, so every failure is reported here.
        self.fail_obj: str | None = None

    def walk(self, ip: int, to_ip: int, max_insn_cnt: int, nr: bool) -> tuple[int, int, int, Insn]:
        """(error, instructions, ip reached, last instruction) of one walk, as perf's
        intel_pt_walk_next_insn: a failed walk stops at the instruction it could not get and counts
        no instructions (perf sets the count only on success), so the decoder's totals and its
        estimated timestamp leave out the instructions walked before the failure."""
        insn = Insn()
        self.fail_obj = None
        if to_ip and ip == to_ip:
            return 0, 0, ip, insn
        if nr:
            # perf's intel_pt_nr_cpumode: bit 63 makes a guest ip kernel code (64-bit guests)
            lookup = self.guest_lookup
            if lookup is None:
                return _EINVAL, 0, ip, insn
            kernel = bool(ip >> 63)
        else:
            lookup = self.lookup
            kernel = ip >= self.kernel_start
            if not self.have_thread and not kernel:
                return _EINVAL, 0, ip, insn
        insn_cnt = 0
        one_map = True
        while True:
            hit = lookup(ip, kernel)
            if hit is None:
                return _EINVAL, 0, ip, insn
            start, end, pgoff, obj = hit
            offset = ip - start + pgoff
            key = (obj.key, offset)
            if not to_ip and one_map:
                e = self.cache.get(key)
                if e is not None and (not max_insn_cnt or e[0] <= max_insn_cnt):
                    return 0, e[0], ip + e[1], e[2]
            start_offset, start_ip = offset, ip
            while True:
                code = obj.read(offset, _INSN_BUF)
                got = self.dec.decode(code, ip, obj.bits) if code else None
                if got is None:
                    obj.failed = True
                    self.fail_obj = obj.name
                    return _EINVAL, 0, ip, insn
                insn = got
                insn_cnt += 1
                if insn.branch != BR_NO_BRANCH:
                    if one_map and not (to_ip and self.cache.get((obj.key, start_offset))):
                        self.cache[(obj.key, start_offset)] = (insn_cnt, ip - start_ip, insn)
                    return 0, insn_cnt, ip, insn
                if max_insn_cnt and insn_cnt >= max_insn_cnt:
                    return 0, insn_cnt, ip, insn
                ip += insn.length
                if to_ip and ip == to_ip:
                    return 0, insn_cnt, ip, Insn(insn.op, insn.branch, 0, insn.rel)
                if ip >= end:
                    break
                offset += insn.length
            one_map = False


    def block(self, ip: int, nr: bool, hit: "tuple[int, int, int, CodeObject] | None" = None
              ) -> tuple[int, int, int, Insn, list[int], bool]:
        """``walk(ip, 0, 0, nr)`` with the distance from ``ip`` of each instruction after the first,
        and whether the block (up to its branch) lies in ``ip``'s mapping (``hit``: that mapping as
        the lookup gives it, when the caller has it).  Boundaries only for such a block: a walk
        that fails, ends without a branch or leaves the mapping has none (and False)."""
        err, cnt, new_ip, insn = self.walk(ip, 0, 0, nr)
        if err or insn.branch == BR_NO_BRANCH:
            return err, cnt, new_ip, insn, [], False
        if hit is None:
            hit = (self.guest_lookup(ip, bool(ip >> 63)) if nr and self.guest_lookup is not None
                   else None if nr else self.lookup(ip, ip >= self.kernel_start))
        if hit is None:
            return err, cnt, new_ip, insn, [], False
        start, end, pgoff, obj = hit
        bounds = []
        cur, off = ip, ip - start + pgoff
        for _ in range(cnt - 1):
            got = self.dec.decode(obj.read(off, _INSN_BUF), cur, obj.bits)
            if got is None:
                return err, cnt, new_ip, insn, [], False
            cur += got.length
            off += got.length
            if cur >= end:
                return err, cnt, new_ip, insn, [], False
            bounds.append(cur - ip)
        if cur != new_ip:
            return err, cnt, new_ip, insn, [], False
        return err, cnt, new_ip, insn, bounds, True

    def block_array(self, ip: int, nr: bool, hit: "tuple[int, int, int, CodeObject] | None" = None
                    ) -> tuple[int, int, int, Insn, np.ndarray, bool]:
        """:meth:`block` with the boundaries as an int64 array (what the compiled decoder's block cache
        takes)."""
        err, cnt, new_ip, insn, bounds, one_map = self.block(ip, nr, hit)
        return err, cnt, new_ip, insn, np.array(bounds, np.int64), one_map


def default_kernel_start(kernel_map_starts: list[int]) -> int:
    """perf's machine__kernel_start: the lowest kernel map start, else 2**63."""
    starts = [s for s in kernel_map_starts if s >= 1 << 63]
    return min(starts) if starts else 1 << 63


def exists(path: str) -> bool:
    return Path(path).exists()


# perf marks an object's data unreadable (DSO_DATA_STATUS_ERROR) outside Intel PT
# decoding too; an object so marked before its first PT read reports one
# "Failed to get instruction" instead of two.  Two places do it in perf 6.1:
#
# * perf script fetches the instruction at every sample it prints that carries
#   none (script_fetch_insn -> arch_fetch_insn -> thread__memcpy): the 'cycles'
#   samples of a recording read the object at their ip;
# * an mmap of [vdso] makes perf ask the thread's other objects for their ELF
#   class (machine__thread_dso_type -> dso__type): in address order, every map
#   of a file ('/'-named) is opened until one is a readable ELF.


def sample_fetch_marks(obj: CodeObject | None) -> list[CodeObject]:
    """The object perf script's instruction fetch at a sample's ip marks unreadable (if any)."""
    return [obj] if obj is not None and obj.data is None else []


def vdso_probe_marks(objs: list[CodeObject]) -> list[CodeObject]:
    """Objects perf's ELF-class probe at a [vdso] mmap marks unreadable.

    ``objs``: the objects of the thread's file maps ('/'-named) in address order.
    The probe stops at the first object that reads as an ELF file.
    """
    out = []
    for obj in objs:
        if obj.data is None:
            out.append(obj)
            continue
        if bytes(obj.data[:4]) == b"\x7fELF" and len(obj.data) >= 16 and obj.data[4] in (1, 2):
            break
    return out
