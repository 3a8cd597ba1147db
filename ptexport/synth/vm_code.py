"""Code for the VM trace generator: a tiny fixed-size x86-64 assembler, code walkers and
the files perf reads code from (a static ELF for user code, a kcore_dir for kernel code).

Every instruction the generator uses has one fixed encoding, so layout is one pass and the
walker needs no disassembler: ``nop`` (90), ``call rel32`` (e8), ``jmp rel32`` (e9),
``jz rel32`` (0f 84), ``call *%rax`` (ff d0), ``ret`` (c3), ``vmresume`` (0f 01 c3),
``syscall`` (0f 05, to the kernel entry given as ``syscall_entry``) and ``sysretq``
(48 0f 07).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from ptexport.errors import SynthError

SIZES = {"nop": 1, "call": 5, "jmp": 5, "jz": 6, "icall": 2, "ret": 1, "vmresume": 3,
         "syscall": 2, "sysret": 3}


@dataclass(frozen=True)
class Insn:
    ip: int
    kind: str
    size: int
    target: int = 0                  # direct target (call, jmp, jz)
    targets: tuple[int, ...] = ()    # the choices of an indirect call


@dataclass
class Code:
    """Assembled code: bytes at ``base``, the instruction table and the symbols."""

    base: int
    data: bytes
    insns: dict[int, Insn]
    labels: dict[str, int]
    symbols: list[tuple[int, str]] = field(default_factory=list)   # function starts

    @property
    def end(self) -> int:
        return self.base + len(self.data)


def assemble(base: int, program: list, functions: tuple[str, ...], syscall_entry: int = 0) -> Code:
    """``program``: a list of ``"label:"`` strings and ``(kind, arg)`` tuples."""
    labels: dict[str, int] = {}
    ip = base
    for item in program:
        if isinstance(item, str):
            labels[item.rstrip(":")] = ip
        else:
            ip += SIZES[item[0]]
    out = bytearray()
    insns: dict[int, Insn] = {}
    ip = base
    for item in program:
        if isinstance(item, str):
            continue
        kind, arg = item if len(item) == 2 else (item[0], None)
        size = SIZES[kind]
        if kind == "nop":
            out += b"\x90"
            insns[ip] = Insn(ip, kind, size)
        elif kind in ("call", "jmp", "jz"):
            tgt = labels[arg]
            op = {"call": b"\xe8", "jmp": b"\xe9", "jz": b"\x0f\x84"}[kind]
            out += op + struct.pack("<i", tgt - (ip + size))
            insns[ip] = Insn(ip, kind, size, target=tgt)
        elif kind == "icall":
            out += b"\xff\xd0"
            insns[ip] = Insn(ip, kind, size, targets=tuple(labels[a] for a in arg))
        elif kind == "ret":
            out += b"\xc3"
            insns[ip] = Insn(ip, kind, size)
        elif kind == "vmresume":
            out += b"\x0f\x01\xc3"
            insns[ip] = Insn(ip, kind, size)
        elif kind == "syscall":
            out += b"\x0f\x05"
            insns[ip] = Insn(ip, kind, size, target=syscall_entry)
        elif kind == "sysret":
            out += b"\x48\x0f\x07"
            insns[ip] = Insn(ip, kind, size)
        else:
            raise SynthError(f"unknown instruction kind {kind!r}")
        ip += size
    syms = sorted((labels[f], f) for f in functions)
    return Code(base, bytes(out), insns, labels, syms)


def _body(prefix: str, nfuncs: int, syscalls: bool = False,
          kernel_entry: bool = False) -> tuple[list, tuple[str, ...]]:
    """A main loop calling ``nfuncs`` small functions directly and through a pointer,
    with conditional branches whose outcome the walker chooses (and, for user code, a
    system call per round; for kernel code, the system call entry ending in sysretq)."""
    p = prefix
    fn = [f"{p}_f{i}" for i in range(nfuncs)]
    prog: list = [f"{p}_main:"]
    for i in range(nfuncs):
        prog += [("nop",), ("call", fn[i]), ("jz", f"{p}_m{i}"), ("nop",), f"{p}_m{i}:",
                 ("icall", fn)]
        if syscalls and i == nfuncs // 2:
            prog += [("nop",), ("syscall",)]
    prog += [("nop",), ("jmp", f"{p}_main")]
    if kernel_entry:
        prog += [f"{p}_syscall_entry:", ("nop",), ("call", fn[0]), ("jz", f"{p}_se_x"),
                 ("icall", fn), f"{p}_se_x:", ("nop",), ("sysret",)]
    for i in range(nfuncs):
        prog += [f"{fn[i]}:", ("nop",), f"{fn[i]}_l:", ("nop",), ("jz", f"{fn[i]}_x"), ("nop",),
                 ("jz", f"{fn[i]}_l"), f"{fn[i]}_x:", ("nop",), ("ret",)]
    return prog, (f"{p}_main", *fn) + ((f"{p}_syscall_entry",) if kernel_entry else ())


def guest_code(base: int, prefix: str, nfuncs: int = 4, *, kernel: bool = False,
               syscall_entry: int = 0) -> Code:
    """Guest kernel code (with a system call entry) or guest user code (making system calls
    to ``syscall_entry`` when given)."""
    prog, funcs = _body(prefix, nfuncs, syscalls=bool(syscall_entry), kernel_entry=kernel)
    return assemble(base, prog, funcs, syscall_entry)


def host_code(base: int) -> Code:
    """The host side of a KVM VCPU thread: the run loop, VM entry (vmresume), the VM-exit
    landing point and an exit handler with a few calls."""
    prog = [
        "vcpu_run:", ("nop",), ("call", "vmx_vcpu_run"), ("nop",), ("call", "handle_exit"),
        ("jmp", "vcpu_run"),
        "vmx_vcpu_run:", ("nop",), ("call", "vmx_vmenter"), ("nop",), ("ret",),
        "vmx_vmenter:", ("vmresume",),
        "vmx_vmexit:", ("nop",), ("ret",),
        "handle_exit:", ("nop",), ("jz", "he_1"), ("nop",), "he_1:",
        ("icall", ["kvm_emulate_cpuid", "kvm_io", "kvm_msr"]), ("nop",), ("ret",),
        "kvm_emulate_cpuid:", ("nop",), ("nop",), ("ret",),
        "kvm_io:", ("nop",), ("jz", "kvm_io_x"), ("call", "kvm_msr"), "kvm_io_x:", ("ret",),
        "kvm_msr:", ("nop",), ("jz", "kvm_msr_x"), ("nop",), "kvm_msr_x:", ("ret",),
    ]
    funcs = ("vcpu_run", "vmx_vcpu_run", "vmx_vmenter", "vmx_vmexit", "handle_exit",
             "kvm_emulate_cpuid", "kvm_io", "kvm_msr")
    return assemble(base, prog, funcs)


# -- files ------------------------------------------------------------------------------------

def write_static_elf(path: Path, code: Code) -> None:
    """A minimal static ET_EXEC: the code in one R+X PT_LOAD at file offset 0x1000."""
    off = 0x1000
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 2, 62, 1,
                       code.base, 64, 0, 0, 64, 56, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, off, code.base, code.base, len(code.data),
                       len(code.data), 0x1000)
    head = ehdr + phdr
    _write(path, head + b"\0" * (off - len(head)) + code.data)


def write_kcore_dir(path: Path, code: Code, text_sym: str = "_stext") -> None:
    """A ``perf record --kcore`` style directory: kallsyms, modules and a kcore ELF core file
    whose one PT_LOAD holds ``code`` (perf reads kernel code from kcore next to kallsyms)."""
    base = code.base
    size = (len(code.data) + 0xFFF) & ~0xFFF
    syms = [(base, "T", "_stext"), (base, "T", "_text")]
    syms += [(a, "t", n) for a, n in code.symbols]
    syms += [(base + size, "T", "_etext")]
    text = code.data + b"\xcc" * (size - len(code.data))
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 4, 62, 1,
                       0, 64, 0, 0, 64, 56, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0x1000, base, 0, size, size, 0x1000)
    head = ehdr + phdr
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SynthError(f"cannot create {path}: {e.strerror}") from e
    _write(path / "kallsyms", "".join(f"{a:016x} {t} {n}\n" for a, t, n in sorted(syms)).encode())
    _write(path / "modules", b"")
    _write(path / "kcore", head + b"\0" * (0x1000 - len(head)) + text)


def _write(path: Path, data: bytes) -> None:
    try:
        Path(path).write_bytes(data)
    except OSError as e:
        raise SynthError(f"cannot write {path}: {e.strerror}") from e
