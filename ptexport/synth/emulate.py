"""Run a small static x86-64 Linux program in unicorn and record what it executed.

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


@dataclass
class Program:
    """A loaded static ELF: its path, segments, entry point and symbols."""

    path: Path
    name: str
    entry: int
    segments: list[Segment]
    symbols: dict[str, int]
    build_id: bytes
    data: bytes

    @classmethod
    def load(cls, path: Path) -> "Program":
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
            if elf.get_machine_arch() != "x64" or elf["e_type"] != "ET_EXEC":
                raise SynthError(
                    f"{path}: not a static x86-64 executable (machine {elf.get_machine_arch()}, "
                    f"type {elf['e_type']}); the emulator runs -static -no-pie x86-64 programs only")
            if any(s["p_type"] == "PT_INTERP" for s in elf.iter_segments()):
                raise SynthError(f"{path}: dynamically linked; build it with -static -nostdlib")
            segs = [Segment(s["p_vaddr"], s["p_memsz"], s["p_offset"], s["p_filesz"], s["p_flags"])
                    for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            symbols: dict[str, int] = {}
            symtab = elf.get_section_by_name(".symtab")
            if symtab is not None:
                for sym in symtab.iter_symbols():
                    if sym.name and sym["st_value"]:
                        symbols[sym.name] = sym["st_value"]
            build_id = b""
            for sec in elf.iter_sections():
                if sec["sh_type"] == "SHT_NOTE":
                    for note in sec.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            build_id = bytes.fromhex(note["n_desc"])
            entry = elf["e_entry"]
        except ELFError as e:
            raise SynthError(f"{path}: not a readable ELF file: {e}") from e
        if not segs:
            raise SynthError(f"{path}: no loadable segments")
        return cls(path, path.name, entry, segs, symbols, build_id, data)

    def exec_segments(self) -> list[Segment]:
        return [s for s in self.segments if s.executable]


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
    for seg in program.segments:
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
        uc.mem_write(seg.vaddr, program.data[seg.offset:seg.offset + seg.filesz])
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
    programs = [program]
    insns_left = max_insns

    cur_addrs = array("Q")
    cur_sizes = array("I")
    cur_ptw: list = []
    sys_ip = [0]

    def on_block(uc, address, size, _ud):
        cur_addrs.append(address)
        cur_sizes.append(size)

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

    def attach(uc) -> None:
        uc.hook_add(U.UC_HOOK_BLOCK, on_block)
        uc.hook_add(U.UC_HOOK_INSN, on_syscall, None, 1, 0, UC_X86_INS_SYSCALL)
        uc.hook_add(U.UC_HOOK_INSN_INVALID, on_invalid)

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
        sys_ip[0] = 0
        count = min(insns_left, preempt) if preempt else insns_left
        try:
            uc.emu_start(start, 0xFFFF_FFFF_FFFF_FFFF, 0, count)
        except U.UcError as e:
            rip = uc.reg_read(UC_X86_REG_RIP)
            raise SynthError(f"program {info.program.name}: the emulator cannot run it: {e} at "
                             f"{rip:#x} (thread {tid})") from e
        insns_left -= sum(cur_sizes) // 3 or 1    # a cheap under-estimate: ~3+ bytes/insn
        if not sys_ip[0] and preempt and insns_left > 0:
            # preempted: unicorn reports the last block whole; keep what ran of it
            rip = uc.reg_read(UC_X86_REG_RIP)
            if cur_addrs and cur_addrs[-1] <= rip < cur_addrs[-1] + cur_sizes[-1]:
                if rip == cur_addrs[-1]:
                    cur_addrs.pop()
                    cur_sizes.pop()
                else:
                    cur_sizes[-1] = rip - cur_addrs[-1]
            insns_left -= count
            if cur_addrs:
                slices.append(Slice(info.pid, tid, cur_addrs, cur_sizes, SYS_PREEMPTED, rip, rip,
                                    ptwrites=cur_ptw))
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
        sl = Slice(info.pid, tid, cur_addrs, cur_sizes, nr, sys_ip[0], resume, ptwrites=cur_ptw)
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
            if newprog not in programs:
                programs.append(newprog)
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
