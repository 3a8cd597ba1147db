"""Run a small x86-64 Linux program in unicorn and record what it executed.

The program is a static executable, or one linked against shared objects
that lie next to it (its ``DT_NEEDED``; no libc: the emulator is the dynamic
loader).  Then, as ``ld.so`` would before the first instruction: the
libraries are mapped at :data:`LIB_BASE` upwards (a PIE executable at
:data:`PIE_BASE`) and their and the executable's relocations applied
(``RELATIVE``, ``64``, ``GLOB_DAT``, ``JUMP_SLOT``, ``COPY``; others are a
:class:`SynthError`), symbols looked up in load order (the executable, then
its libraries breadth first).  Nothing of this is traced (no ``ld.so`` runs).
An object linked ``-z now`` gets its GOT filled then; otherwise its PLT binds
lazily as with ``ld.so``: the first call of a function runs its PLT entry,
PLT0 and the lazy binder, which writes the GOT slot and jumps to the
function; later calls go PLT entry -> ``jmp *GOT`` -> function.  The binder
is a stub of the emulator's own (:data:`RESOLVER_NAME`, a small ELF file
mapped after the libraries and recorded like them, so perf decodes it); it
reads the target from a table the loader prepared (GOT[1]) instead of
looking the symbol up.

The result is the ground truth the generator encodes: for every thread, the
sequence of basic blocks it ran (start address and size, as unicorn reports
them), cut into *slices* at each system call.  A slice is one stretch of user
space execution; in a ``//u`` recording each slice is one TIP.PGE ... TIP.PGD
span.  The emulator provides the few system calls the sample programs use:
write, sched_yield, clone (threads), fork, execve, wait4, exit, exit_group.

Programs are scheduled cooperatively: a thread that calls ``sched_yield``
(or exits) lets the next runnable thread run, round robin.  Which CPU a slice
runs on and at what time is decided later by the generator.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path

from ptexport.errors import SynthError

PAGE = 0x1000
STACK_TOP = 0x7FFF_FFFF_0000
STACK_SIZE = 0x4_0000
PIE_BASE = 0x5555_5555_4000     # where a position-independent executable is loaded
LIB_BASE = 0x7F00_0000_0000     # where the first shared library is loaded
LIB_ALIGN = 0x100_0000          # libraries start on this alignment, one after the other
RESOLVER_NAME = "ptx-lazy-binder.so"  # the lazy binder's file (written next to perf.data)
RESOLVER_DATA = 0x7E00_0000_0000  # its tables: per object, (GOT slot, target) per PLT relocation
# The lazy binder, entered from PLT0 with GOT[1] (the object's table) and the relocation's index
# on the stack: endbr64; pop %r11; pop %r10; shl $4,%r10; add %r10,%r11; mov 8(%r11),%r10;
# mov (%r11),%r11; mov %r10,(%r11); jmp *%r10
_RESOLVER_CODE = bytes.fromhex("f30f1efa415b415a49c1e2044d01d34d8b53084d8b1b4d891341ffe2")

SYS_WRITE, SYS_SCHED_YIELD, SYS_CLONE, SYS_FORK = 1, 24, 56, 57
SYS_EXECVE, SYS_EXIT, SYS_WAIT4, SYS_EXIT_GROUP = 59, 60, 61, 231
SYSCALL_NAMES = {SYS_WRITE: "write", SYS_SCHED_YIELD: "sched_yield", SYS_CLONE: "clone",
                 SYS_FORK: "fork", SYS_EXECVE: "execve", SYS_EXIT: "exit", SYS_WAIT4: "wait4",
                 SYS_EXIT_GROUP: "exit_group"}


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD segment of an ELF: where it is mapped and where it comes from."""

    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int  # PF_X=1, PF_W=2, PF_R=4

    @property
    def executable(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True)
class DynSym:
    """A ``.dynsym`` entry as the loader sees it (``value`` not yet moved by the load bias)."""

    name: str
    value: int
    size: int
    defined: bool
    local: bool
    weak: bool


@dataclass(frozen=True)
class Reloc:
    """A dynamic relocation: where (unbiased), type, symbol index, addend; ``plt``: its index in
    DT_JMPREL (what its PLT entry pushes), -1 for the others."""

    offset: int
    type: int
    sym: int
    addend: int
    plt: int = -1


# x86-64 dynamic relocations the emulator applies
R_X86_64_64, R_X86_64_COPY, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT, R_X86_64_RELATIVE = 1, 5, 6, 7, 8


@dataclass
class Program:
    """A loaded ELF (an executable, or a shared library of one): its path, segments (at their
    load addresses), entry point and symbols; ``libs`` the shared objects it is linked with."""

    path: Path
    name: str
    entry: int
    segments: list[Segment]
    symbols: dict[str, int]
    build_id: bytes
    data: bytes
    bias: int = 0                       # load address minus link address (0 for ET_EXEC)
    needed: list[str] = field(default_factory=list)
    dynsyms: list[DynSym] = field(default_factory=list)
    relocs: list[Reloc] = field(default_factory=list)
    libs: list["Program"] = field(default_factory=list)
    bind_now: bool = False              # DF_BIND_NOW / DF_1_NOW: no lazy binding
    pltgot: int = 0                     # DT_PLTGOT (unbiased; 0: none)

    @classmethod
    def load(cls, path: Path, *, library_base: int | None = None) -> "Program":
        """Load an executable (with the shared libraries it needs, from its directory), or with
        ``library_base`` one shared library at that address."""
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise SynthError(f"cannot read program {path}: {e.strerror}") from e
        import io

        try:
            elf = ELFFile(io.BytesIO(data))
            etype = elf["e_type"]
            if library_base is not None:
                if elf.get_machine_arch() != "x64" or etype != "ET_DYN":
                    raise SynthError(f"{path}: not an x86-64 shared library (machine "
                                     f"{elf.get_machine_arch()}, type {etype})")
                bias = library_base
            elif elf.get_machine_arch() != "x64" or etype not in ("ET_EXEC", "ET_DYN"):
                raise SynthError(
                    f"{path}: not an x86-64 executable (machine {elf.get_machine_arch()}, "
                    f"type {etype}); the emulator runs x86-64 programs without libc only")
            else:
                bias = PIE_BASE if etype == "ET_DYN" else 0
            dyn = next((s for s in elf.iter_segments() if s["p_type"] == "PT_DYNAMIC"), None)
            if dyn is None and etype == "ET_DYN":
                raise SynthError(f"{path}: position-independent but without a dynamic section")
            if dyn is None and any(s["p_type"] == "PT_INTERP" for s in elf.iter_segments()):
                raise SynthError(f"{path}: dynamically linked; build it with -static -nostdlib")
            segs = [Segment(s["p_vaddr"] + bias, s["p_memsz"], s["p_offset"], s["p_filesz"],
                            s["p_flags"])
                    for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            symbols: dict[str, int] = {}
            symtab = elf.get_section_by_name(".symtab")
            if symtab is not None:
                for sym in symtab.iter_symbols():
                    if sym.name and sym["st_value"]:
                        symbols[sym.name] = sym["st_value"] + bias
            needed, dynsyms, relocs, bind_now, pltgot = (_dynamic(path, elf, dyn) if dyn is not None
                                                         else ([], [], [], False, 0))
            build_id = b""
            for sec in elf.iter_sections():
                if sec["sh_type"] == "SHT_NOTE":
                    for note in sec.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            build_id = bytes.fromhex(note["n_desc"])
            entry = elf["e_entry"] + bias
        except ELFError as e:
            raise SynthError(f"{path}: not a readable ELF file: {e}") from e
        if not segs:
            raise SynthError(f"{path}: no loadable segments")
        prog = cls(path, path.name, entry, segs, symbols, build_id, data, bias, needed, dynsyms,
                   relocs, bind_now=bind_now, pltgot=pltgot)
        if library_base is None:
            if needed:
                prog.libs = _load_libraries(prog)
            if any(image.lazy() for image in prog.images()):
                base = (max(image.end() for image in prog.images()) + LIB_ALIGN - 1) & ~(LIB_ALIGN - 1)
                prog.libs.append(_resolver(max(base, LIB_BASE)))
        return prog

    def lazy(self) -> list[Reloc]:
        """The JUMP_SLOT relocations bound lazily (none with ``-z now``)."""
        if self.bind_now:
            return []
        return [r for r in self.relocs if r.type == R_X86_64_JUMP_SLOT and r.plt >= 0]

    def exec_segments(self) -> list[Segment]:
        return [s for s in self.segments if s.executable]

    def images(self) -> list["Program"]:
        """The executable and its shared libraries, in load order."""
        return [self, *self.libs]

    def end(self) -> int:
        return max(s.vaddr + s.memsz for s in self.segments)


def _dynamic(path: Path, elf, dyn) -> tuple[list[str], list[DynSym], list[Reloc], bool, int]:
    """DT_NEEDED, the dynamic symbols, the relocations, bind-now and DT_PLTGOT of a PT_DYNAMIC
    segment."""
    from elftools.common.exceptions import ELFError

    try:
        tags = {}
        needed = []
        for t in dyn.iter_tags():
            tag = t.entry.d_tag
            if tag == "DT_NEEDED":
                needed.append(t.needed)
            else:
                tags[tag] = t.entry.d_val
        bind_now = ("DT_BIND_NOW" in tags or bool(tags.get("DT_FLAGS", 0) & 0x8)        # DF_BIND_NOW
                    or bool(tags.get("DT_FLAGS_1", 0) & 0x1))                             # DF_1_NOW
        # .dynsym's own count when the section headers are there (the hash tables' count
        # misses the undefined symbols after the last defined one)
        table = elf.get_section_by_name(".dynsym")
        if table is None or table["sh_type"] != "SHT_DYNSYM":
            table = dyn
        dynsyms = []
        for i in range(table.num_symbols()):
            sym = table.get_symbol(i)
            bind = sym["st_info"]["bind"]
            dynsyms.append(DynSym(sym.name, sym["st_value"], sym["st_size"],
                                  sym["st_shndx"] != "SHN_UNDEF" and i != 0, bind == "STB_LOCAL",
                                  bind == "STB_WEAK"))
        relocs = []
        for kind, table in dyn.get_relocation_tables().items():
            for i, r in enumerate(table.iter_relocations()):
                relocs.append(Reloc(r["r_offset"], r["r_info_type"], r["r_info_sym"],
                                    r["r_addend"] if r.is_RELA() else 0,
                                    i if kind == "JMPREL" else -1))
    except (ELFError, KeyError, ValueError) as e:
        raise SynthError(f"{path}: unreadable dynamic section: {e}") from e
    return needed, dynsyms, relocs, bind_now, tags.get("DT_PLTGOT", 0)


def _table_size(image: Program) -> int:
    """Bytes of the lazy binder's table of ``image`` (16 per PLT relocation, whole pages)."""
    lazy = image.lazy()
    return (16 * (max(r.plt for r in lazy) + 1) + PAGE - 1) & ~(PAGE - 1) if lazy else 0


def _resolver(base: int) -> Program:
    """The lazy binder: an ELF file (ET_DYN, one PT_LOAD of code at 0x1000) loaded at ``base``."""
    import struct

    code = _RESOLVER_CODE
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 3, 62, 1,
                       0x1000, 64, 0, 0, 64, 56, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0x1000, 0x1000, 0x1000, len(code), len(code), 0x1000)
    data = (ehdr + phdr).ljust(0x1000, b"\0") + code
    seg = Segment(base + 0x1000, len(code), 0x1000, len(code), 5)
    return Program(Path(RESOLVER_NAME), RESOLVER_NAME, base + 0x1000, [seg], {}, b"", data, base)


def _load_libraries(exe: Program) -> list[Program]:
    """The shared objects ``exe`` needs, breadth first, each from ``exe``'s directory."""
    libs: list[Program] = []
    by_name: dict[str, Program] = {}
    queue = list(exe.needed)
    base = LIB_BASE
    while queue:
        name = queue.pop(0)
        if name in by_name:
            continue
        path = exe.path.parent / name
        if not path.is_file():
            raise SynthError(f"{exe.path}: needs {name}, which is not next to it; the emulator "
                             "runs static programs, or programs without libc (-nostdlib) whose "
                             "shared libraries lie next to them")
        lib = Program.load(path, library_base=base)
        libs.append(lib)
        by_name[name] = lib
        queue += lib.needed
        base = (lib.end() + LIB_ALIGN - 1) & ~(LIB_ALIGN - 1)
    return libs


def _lookup(scope: list[Program], obj: Program, index: int, *, skip: Program | None = None
            ) -> tuple[int, int]:
    """(address, size) of ``obj``'s dynamic symbol ``index`` as ld.so binds it: a local symbol
    to itself, a global one to its first definition in ``scope`` (not in ``skip``)."""
    if index == 0:
        return 0, 0
    if index >= len(obj.dynsyms):
        raise SynthError(f"{obj.name}: a relocation names dynamic symbol {index} of "
                         f"{len(obj.dynsyms)}")
    sym = obj.dynsyms[index]
    if sym.local:
        return sym.value + obj.bias, sym.size
    for cand in scope:
        if cand is skip:
            continue
        for d in cand.dynsyms:
            if d.defined and not d.local and d.name == sym.name:
                return d.value + cand.bias, d.size
    if sym.weak:
        return 0, 0
    raise SynthError(f"{obj.name}: undefined symbol {sym.name!r} (not in "
                     f"{', '.join(p.name for p in scope)})")


def _relocate(uc, program: Program) -> None:
    """Apply the dynamic relocations of ``program`` and its libraries in ``uc``'s memory, as
    ld.so does with ``-z now``: the libraries first (last loaded first), the executable last."""
    scope = program.images()
    resolver = next((p for p in program.libs if p.name == RESOLVER_NAME), None)
    table_at = RESOLVER_DATA
    for obj in reversed(scope):
        lazy = obj.lazy()
        if lazy:
            # GOT[1]: the object's table for the binder, GOT[2]: the binder (ld.so's link map and
            # _dl_runtime_resolve); each slot keeps its PLT entry's push (moved by the bias)
            got = obj.pltgot + obj.bias
            uc.mem_write(got + 8, table_at.to_bytes(8, "little"))
            uc.mem_write(got + 16, resolver.entry.to_bytes(8, "little"))
            for r in lazy:
                where = r.offset + obj.bias
                stub = int.from_bytes(uc.mem_read(where, 8), "little") + obj.bias
                uc.mem_write(where, (stub & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "little"))
                target = _lookup(scope, obj, r.sym)[0]
                uc.mem_write(table_at + 16 * r.plt, where.to_bytes(8, "little")
                             + (target & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "little"))
            table_at += _table_size(obj)
        for r in obj.relocs:
            if lazy and r.type == R_X86_64_JUMP_SLOT and r.plt >= 0:
                continue
            where = r.offset + obj.bias
            if r.type == R_X86_64_RELATIVE:
                value = obj.bias + r.addend
            elif r.type in (R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT, R_X86_64_64):
                value = _lookup(scope, obj, r.sym)[0] + (r.addend if r.type == R_X86_64_64 else 0)
            elif r.type == R_X86_64_COPY:
                src, size = _lookup(scope, obj, r.sym, skip=obj)
                uc.mem_write(where, bytes(uc.mem_read(src, size)))
                continue
            else:
                raise SynthError(f"{obj.name}: relocation type {r.type} at {r.offset:#x} is not "
                                 "supported (RELATIVE, 64, GLOB_DAT, JUMP_SLOT, COPY are)")
            uc.mem_write(where, (value & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "little"))


@dataclass
class Slice:
    """One stretch of user-space execution of one thread, ended by a system call.

    ``addrs``/``sizes`` are the blocks in execution order.  ``end_ip`` is the
    address of the ending ``syscall`` instruction (or of the last instruction
    executed when the emulation stopped), ``resume_ip`` where the thread goes
    on after it (None for exit).
    """

    pid: int
    tid: int
    addrs: array
    sizes: array
    sysno: int
    end_ip: int
    resume_ip: int | None
    new_tid: int | None = None      # clone/fork: the child's tid
    exec_program: "Program | None" = None  # execve: the program now running
    program: "Program | None" = None  # the program this slice ran (set by the generator)
    ptwrites: list = field(default_factory=list)  # (block index, ip, value) of each PTWRITE
    # block index -> taken, for blocks ending in a conditional branch to the next instruction
    # (Jcc/LOOP*/JrCXZ with displacement 0: the next block's address cannot tell)
    taken: dict = field(default_factory=dict)


@dataclass
class ThreadInfo:
    pid: int
    tid: int
    ppid: int
    ptid: int
    comm: str
    program: Program
    start_ip: int
    forked: bool = False   # a new process (fork) rather than a thread


@dataclass
class Emulation:
    """Everything one run produced, in execution order."""

    programs: list[Program]
    threads: dict[int, ThreadInfo]
    slices: list[Slice]
    output: bytes
    memory_images: dict[int, "object"] = field(default_factory=dict)


class _Proc:
    """One process: a unicorn instance (its address space) and its program."""

    def __init__(self, pid: int, program: Program, uc) -> None:
        self.pid = pid
        self.program = program
        self.uc = uc


def _unicorn():
    try:
        import unicorn
    except ImportError as e:
        raise SynthError("the generator needs unicorn: pip install 'ptexport[synth]' "
                         "(or pip install unicorn)") from e
    return unicorn


def _new_uc(program: Program, iterations: int | None):
    U = _unicorn()

    uc = U.Uc(U.UC_ARCH_X86, U.UC_MODE_64)
    for seg in (seg for image in program.images() for seg in image.segments):
        start = seg.vaddr & ~(PAGE - 1)
        end = (seg.vaddr + seg.memsz + PAGE - 1) & ~(PAGE - 1)
        try:
            uc.mem_map(start, end - start)
        except U.UcError:
            # Overlapping page with a previous segment: map what is missing.
            for page in range(start, end, PAGE):
                try:
                    uc.mem_map(page, PAGE)
                except U.UcError:
                    pass
    for image in program.images():
        for seg in image.segments:
            uc.mem_write(seg.vaddr, image.data[seg.offset:seg.offset + seg.filesz])
    if program.relocs or program.libs:
        tables = sum(_table_size(image) for image in program.images())
        if tables:
            uc.mem_map(RESOLVER_DATA, tables)
        _relocate(uc, program)
    uc.mem_map(STACK_TOP - STACK_SIZE, STACK_SIZE)
    if iterations is not None:
        addr = program.symbols.get("ptx_iterations")
        if addr is None:
            raise SynthError(f"{program.path}: no symbol ptx_iterations, so the round count "
                             "cannot be set")
        uc.mem_write(addr, int(iterations).to_bytes(8, "little"))
    return uc


def _initial_regs(uc, program: Program) -> None:
    from unicorn.x86_const import UC_X86_REG_RIP, UC_X86_REG_RSP

    sp = STACK_TOP - 0x100
    # argc = 0, argv = {NULL}, envp = {NULL}, auxv = {AT_NULL}
    uc.mem_write(sp, b"\0" * 0x40)
    uc.reg_write(UC_X86_REG_RSP, sp)
    uc.reg_write(UC_X86_REG_RIP, program.entry)


SYS_PREEMPTED = -1      # Slice.sysno of a slice ended by a (timer) interrupt


def run_program(program: Program, *, iterations: int | None = None, max_insns: int = 60_000_000,
                first_pid: int = 1000, extra_programs: dict[str, Program] | None = None,
                preempt: int = 0) -> Emulation:
    """Run ``program`` to its exit and return every slice it executed.

    ``preempt``: a timer interrupt stops a thread after this many instructions
    (0: never); the slice then ends with ``sysno == SYS_PREEMPTED`` and the thread
    goes to the back of the run queue.
    """
    U = _unicorn()
    from unicorn.x86_const import (UC_X86_INS_SYSCALL, UC_X86_REG_RAX,
                                   UC_X86_REG_RDI, UC_X86_REG_RDX, UC_X86_REG_RIP,
                                   UC_X86_REG_RSI, UC_X86_REG_RSP)

    extra_programs = extra_programs or {}
    procs: dict[int, _Proc] = {}
    threads: dict[int, ThreadInfo] = {}
    contexts: dict[int, object] = {}
    runnable: list[int] = []
    waiting: dict[int, int] = {}   # tid waiting in wait4 -> child pid
    exited_pids: set[int] = set()
    slices: list[Slice] = []
    output = bytearray()
    programs = program.images()
    insns_left = max_insns

    cur_addrs = array("Q")
    cur_sizes = array("I")
    cur_ptw: list = []
    cur_taken: dict = {}
    pending: list = []      # the block just entered ends in a branch to the next instruction
    sys_ip = [0]

    def settle(uc) -> None:
        """The branch of the last block has run: record whether it was taken."""
        cur_taken[len(cur_addrs) - 1] = _branch_taken(uc, pending.pop())

    def attach(uc) -> None:
        branch_next: dict = {}      # (address, size) -> what settle() needs, or 0

        def on_block(uc, address, size, _ud):
            if pending:
                settle(uc)
            cur_addrs.append(address)
            cur_sizes.append(size)
            key = (address, size)
            cond = branch_next.get(key)
            if cond is None:
                cond = branch_next[key] = _branch_to_next(bytes(uc.mem_read(address, size)),
                                                          address)
            if cond:
                pending.append(cond)

        uc.hook_add(U.UC_HOOK_BLOCK, on_block)
        uc.hook_add(U.UC_HOOK_INSN, on_syscall, None, 1, 0, UC_X86_INS_SYSCALL)
        uc.hook_add(U.UC_HOOK_INSN_INVALID, on_invalid)

    def on_syscall(uc, _ud):
        sys_ip[0] = uc.reg_read(UC_X86_REG_RIP)
        uc.emu_stop()

    def on_invalid(uc, _ud):
        # unicorn has no PTWRITE: do it here (value from its register operand), skip it
        rip = uc.reg_read(UC_X86_REG_RIP)
        ptw = _decode_ptwrite(bytes(uc.mem_read(rip, 8)))
        if ptw is None:
            return False
        length, reg = ptw
        cur_ptw.append((len(cur_addrs) - 1, rip, uc.reg_read(reg)))
        uc.reg_write(UC_X86_REG_RIP, rip + length)
        return True

    pid = first_pid
    uc = _new_uc(program, iterations)
    attach(uc)
    _initial_regs(uc, program)
    procs[pid] = _Proc(pid, program, uc)
    threads[pid] = ThreadInfo(pid, pid, 0, 0, program.name[:15], program, program.entry)
    contexts[pid] = uc.context_save()
    runnable.append(pid)
    next_tid = pid + 1

    while runnable:
        tid = runnable.pop(0)
        info = threads[tid]
        proc = procs[info.pid]
        uc = proc.uc
        uc.context_restore(contexts[tid])
        start = uc.reg_read(UC_X86_REG_RIP)
        cur_addrs = array("Q")
        cur_sizes = array("I")
        cur_ptw = []
        cur_taken = {}
        pending.clear()
        sys_ip[0] = 0
        count = min(insns_left, preempt) if preempt else insns_left
        try:
            uc.emu_start(start, 0xFFFF_FFFF_FFFF_FFFF, 0, count)
        except U.UcError as e:
            rip = uc.reg_read(UC_X86_REG_RIP)
            raise SynthError(f"program {info.program.name}: the emulator cannot run it: {e} at "
                             f"{rip:#x} (thread {tid})") from e
        if pending:     # stopped after the last block's branch to the next instruction, or in it
            settle(uc)
        insns_left -= sum(cur_sizes) // 3 or 1    # a cheap under-estimate: ~3+ bytes/insn
        if not sys_ip[0] and preempt and insns_left > 0:
            # preempted: unicorn reports the last block whole; keep what ran of it
            rip = uc.reg_read(UC_X86_REG_RIP)
            if cur_addrs and cur_addrs[-1] <= rip < cur_addrs[-1] + cur_sizes[-1]:
                cur_taken.pop(len(cur_addrs) - 1, None)     # its branch has not run
                if rip == cur_addrs[-1]:
                    cur_addrs.pop()
                    cur_sizes.pop()
                else:
                    cur_sizes[-1] = rip - cur_addrs[-1]
            insns_left -= count
            if cur_addrs:
                slices.append(Slice(info.pid, tid, cur_addrs, cur_sizes, SYS_PREEMPTED, rip, rip,
                                    ptwrites=cur_ptw, taken=cur_taken))
            contexts[tid] = uc.context_save()
            runnable.append(tid)
            continue
        if not sys_ip[0]:
            rip = uc.reg_read(UC_X86_REG_RIP)
            raise SynthError(f"program {info.program.name}: stopped at {rip:#x} without a system "
                             f"call after {max_insns} instructions at most; is it an endless "
                             "loop? (a halt or a jump to nowhere stops it too)")
        if insns_left <= 0:
            raise SynthError(f"program {info.program.name}: more than {max_insns} instructions; "
                             "ask for fewer branches")
        nr = uc.reg_read(UC_X86_REG_RAX)
        a0, a1, a2 = (uc.reg_read(r) for r in (UC_X86_REG_RDI, UC_X86_REG_RSI, UC_X86_REG_RDX))
        resume = uc.reg_read(UC_X86_REG_RIP)
        sl = Slice(info.pid, tid, cur_addrs, cur_sizes, nr, sys_ip[0], resume, ptwrites=cur_ptw,
                   taken=cur_taken)
        slices.append(sl)
        keep_running = True
        ret = 0
        if nr == SYS_WRITE:
            try:
                output += bytes(uc.mem_read(a1, a2))
            except U.UcError as e:
                raise SynthError(f"program {info.program.name}: write from bad buffer {a1:#x}") from e
            ret = a2
        elif nr == SYS_SCHED_YIELD:
            keep_running = False   # let the others run
        elif nr in (SYS_EXIT, SYS_EXIT_GROUP):
            sl.resume_ip = None
            if nr == SYS_EXIT_GROUP or tid == info.pid:
                dead = [t for t, ti in threads.items() if ti.pid == info.pid]
                for t in dead:
                    if t in runnable:
                        runnable.remove(t)
                exited_pids.add(info.pid)
                for w, child in list(waiting.items()):
                    if child in (info.pid, -1) and threads[w].pid != info.pid:
                        del waiting[w]
                        runnable.append(w)
            continue
        elif nr == SYS_CLONE:
            child = next_tid
            next_tid += 1
            parent_sp = uc.reg_read(UC_X86_REG_RSP)
            uc.reg_write(UC_X86_REG_RAX, 0)
            uc.reg_write(UC_X86_REG_RSP, a1)
            contexts[child] = uc.context_save()
            uc.reg_write(UC_X86_REG_RSP, parent_sp)
            threads[child] = ThreadInfo(info.pid, child, info.pid, tid, info.comm, info.program,
                                        resume)
            sl.new_tid = child
            runnable.append(child)
            ret = child
        elif nr == SYS_FORK:
            child = next_tid
            next_tid += 1
            cuc = U.Uc(U.UC_ARCH_X86, U.UC_MODE_64)
            for begin, end, perms in uc.mem_regions():
                cuc.mem_map(begin, end - begin + 1, perms)
                cuc.mem_write(begin, bytes(uc.mem_read(begin, end - begin + 1)))
            attach(cuc)
            ctx = uc.context_save()
            cuc.context_restore(ctx)
            cuc.reg_write(UC_X86_REG_RAX, 0)
            contexts[child] = cuc.context_save()
            procs[child] = _Proc(child, info.program, cuc)
            threads[child] = ThreadInfo(child, child, info.pid, tid, info.comm, info.program,
                                        resume, forked=True)
            sl.new_tid = child
            runnable.append(child)
            ret = child
        elif nr == SYS_EXECVE:
            path = _read_cstr(uc, a0)
            name = Path(path).name
            newprog = extra_programs.get(name)
            if newprog is None:
                raise SynthError(f"program {info.program.name}: execve of {path!r}, which the "
                                 f"generator does not know (known: {sorted(extra_programs)})")
            programs += [p for p in newprog.images() if p not in programs]
            nuc = _new_uc(newprog, iterations)
            attach(nuc)
            _initial_regs(nuc, newprog)
            proc.uc = nuc
            proc.program = newprog
            info.program = newprog
            info.comm = newprog.name[:15]
            sl.exec_program = newprog
            sl.resume_ip = newprog.entry
            contexts[tid] = nuc.context_save()
            runnable.insert(0, tid)
            continue
        elif nr == SYS_WAIT4:
            target = a0 if a0 < (1 << 63) else -1
            if target in exited_pids or (target == -1 and any(
                    t.pid in exited_pids and t.ppid == info.pid for t in threads.values())):
                ret = target
            else:
                waiting[tid] = target
                uc.reg_write(UC_X86_REG_RAX, target)
                contexts[tid] = uc.context_save()
                continue
        else:
            raise SynthError(f"program {info.program.name}: system call {nr} at {sys_ip[0]:#x} is "
                             "not emulated (supported: "
                             f"{', '.join(sorted(SYSCALL_NAMES.values()))})")
        uc.reg_write(UC_X86_REG_RAX, ret)
        contexts[tid] = uc.context_save()
        if keep_running:
            runnable.insert(0, tid)
        else:
            runnable.append(tid)
    if waiting:
        raise SynthError(f"program {program.name}: threads {sorted(waiting)} wait forever")
    return Emulation(programs, threads, slices, bytes(output))


_CS64 = None


def _branch_to_next(code: bytes, address: int):
    """For a block ending in a conditional branch whose target is the next instruction: how to
    tell afterwards whether it was taken, ``(opcode, condition, 32-bit count)``; else 0.

    ``opcode`` is 0x70 for a Jcc (``condition`` its tttn), else E0/E1/E2 (LOOPNE/LOOPE/LOOP) or
    E3 (JrCXZ); the count is ECX with the address-size prefix, else RCX.
    """
    global _CS64
    import capstone

    if _CS64 is None:
        _CS64 = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    last = None
    for last in _CS64.disasm_lite(code, address):
        pass
    if last is None or last[0] + last[1] != address + len(code):
        return 0
    raw = code[last[0] - address:]
    i = 0
    addr32 = False
    while i < len(raw) and raw[i] in _LEGACY_PREFIXES:
        addr32 |= raw[i] == 0x67
        i += 1
    if i < len(raw) and 0x40 <= raw[i] <= 0x4F:
        i += 1
    op = raw[i:]
    if len(op) == 2 and 0x70 <= op[0] <= 0x7F and op[1] == 0:
        return (0x70, op[0] & 0xF, False)
    if len(op) == 6 and op[0] == 0x0F and 0x80 <= op[1] <= 0x8F and op[2:] == b"\0\0\0\0":
        return (0x70, op[1] & 0xF, False)
    if len(op) == 2 and 0xE0 <= op[0] <= 0xE3 and op[1] == 0:
        return (op[0], 0, addr32)
    return 0


_LEGACY_PREFIXES = frozenset((0xF0, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65, 0x66, 0x67))


def _branch_taken(uc, cond) -> bool:
    """Whether the branch ``cond`` (from :func:`_branch_to_next`) that has just run was taken:
    flags and RCX as it left them (LOOP* has decremented the count already)."""
    from unicorn.x86_const import UC_X86_REG_EFLAGS, UC_X86_REG_RCX

    op, cc, addr32 = cond
    flags = uc.reg_read(UC_X86_REG_EFLAGS)
    zf = bool(flags & 0x40)
    if op == 0x70:
        cf, pf, sf, of = (bool(flags & m) for m in (0x1, 0x4, 0x80, 0x800))
        base = (of, cf, zf, cf or zf, sf, pf, sf != of, zf or sf != of)[cc >> 1]
        return base != bool(cc & 1)
    count = uc.reg_read(UC_X86_REG_RCX)
    if addr32:
        count &= 0xFFFF_FFFF
    if op == 0xE3:
        return count == 0
    return count != 0 and (op == 0xE2 or zf == (op == 0xE1))


_REGS64 = ("RAX", "RCX", "RDX", "RBX", "RSP", "RBP", "RSI", "RDI",
           "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15")


def _decode_ptwrite(b: bytes):
    """(length, unicorn register) of ``ptwrite reg`` (F3 [REX] 0F AE /4, register form)."""
    from unicorn import x86_const as X

    if len(b) < 4 or b[0] != 0xF3:
        return None
    i = 1
    rex = 0
    if 0x40 <= b[i] <= 0x4F:
        rex = b[i]
        i += 1
    if b[i:i + 2] != b"\x0f\xae" or len(b) < i + 3:
        return None
    modrm = b[i + 2]
    if (modrm >> 6) != 3 or ((modrm >> 3) & 7) != 4:
        return None
    rm = (modrm & 7) | (8 if rex & 1 else 0)
    name = _REGS64[rm] if rex & 8 else "E" + _REGS64[rm][1:] if rm < 8 else _REGS64[rm] + "D"
    return i + 3, getattr(X, "UC_X86_REG_" + name)


def _read_cstr(uc, addr: int) -> str:
    out = bytearray()
    while len(out) < 4096:
        b = bytes(uc.mem_read(addr + len(out), 64))
        i = b.find(b"\0")
        if i >= 0:
            out += b[:i]
            break
        out += b
    return out.decode("utf-8", "replace")
