"""ptexport's own instruction-level corpus: program + scenario -> (code image, PT stream, expected flow).

A case is one assembly file in ``cases/`` (GNU as, Intel syntax), written here.  Comment lines of the
form ``# @key value`` describe the case (see README.md):

* the program is assembled with the machine's binutils at ``@org`` and run, instruction by
  instruction, in unicorn (the emulator the generator uses);
* ``@at LABEL[#N] EVENT ...`` lines script what the hardware does around the program (trace
  enable/disable, PSB, interrupts, overflows, power events, timing ...);
* an encoder in this module turns the executed instructions and the scripted events into Intel PT
  packets by the SDM's rules (TNT for conditional branches and compressed returns, TIP for indirect
  and far transfers, FUP+TIP for asynchronous ones ...), written by ``ptexport synth``'s
  :class:`~ptexport.synth.ptencode.PacketWriter`;
* the expected flow, in ptxed's ``--no-inst`` format, comes from the same ground truth: the IPs the
  emulator executed while tracing was on, the scripted events in brackets.

Nothing here imports ptexport's decoders: the expected output never comes from the code under test.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import capstone
from unicorn import Uc, UcError
from unicorn import UC_ARCH_X86, UC_MODE_16, UC_MODE_32, UC_MODE_64
from unicorn import x86_const as X

from ptexport.synth.ptencode import PacketWriter

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"

STACK_TOP = {64: 0x7FFF_0000, 32: 0x00F0_0000, 16: 0xF000}
STACK_SIZE = {64: 0x10000, 32: 0x10000, 16: 0x1000}

# Instruction kinds the encoder knows (from capstone, not from ptexport's classifier).
K_OTHER, K_JCC, K_JMP, K_JMP_IND, K_CALL, K_CALL_IND, K_RET, K_FAR = range(8)
_COND = {"loop", "loope", "loopne", "jrcxz", "jecxz", "jcxz"}
_FAR = {"syscall", "sysret", "sysretq", "sysenter", "sysexit", "sysexitq", "iret", "iretd", "iretq",
        "int", "int3", "into", "int1", "ljmp", "lcall", "retf", "retfq", "lret", "lretq",
        "vmlaunch", "vmresume", "vmcall", "ud2"}


# Scripted events: name -> function(truth, event, ip) -> new ip or None ("@at"), and
# name -> function(truth, event, insn, next_ip) -> True when it wrote the branch's packets ("@after").
# Add an event with the decorators below (each family of cases keeps its events in its own section).
AT_EVENTS: dict = {}
AFTER_EVENTS: dict = {}
# Objects with before(truth, ip) (each instruction, after its @at events) and
# after(truth, insn, next_ip, traced) -> list of more @after events for it (e.g. IP filtering).
RUN_HOOKS: list = []


def at_event(name: str):
    def deco(fn):
        AT_EVENTS[name] = fn
        return fn
    return deco


def after_event(name: str):
    def deco(fn):
        AFTER_EVENTS[name] = fn
        return fn
    return deco


class CaseError(Exception):
    """A corpus case that cannot be built (bad directive, assembler error, emulation fault)."""


@dataclass
class Event:
    label: str
    nth: int
    name: str
    args: list[str]
    where: str = "at"          # "at": before the instruction; "after": in place of its branch packet


@dataclass
class Case:
    name: str
    path: Path
    org: int = 0x100000
    mode: int = 64
    retcomp: bool = True
    ip_mode: str = "auto"
    tnt_mode: str = "long"
    ptw_fup: bool = False      # PTWRITE packets carry a FUP (IA32_RTIT_CTL.FUPonPTW)
    ptxed: list[str] = field(default_factory=list)
    cpus: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    end: str = "disable"       # how the trace ends at hlt: disable (FUP+TIP.PGD) or eos
    max_insns: int = 20000
    perf: bool = False         # also wrap into a perf.data and compare with perf script
    covers: list[str] = field(default_factory=list)
    regs: dict[str, int] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


# Extra case directives: name -> function(case, words); options go into case.extra.
CASE_DIRECTIVES: dict = {}


def _int(s: str) -> int:
    return int(s, 0)


def parse_case(path: Path) -> Case:
    case = Case(name=path.stem, path=path)
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"\s*#\s*@(\w[\w-]*)\s*(.*)$", line)
        if not m:
            continue
        key, rest = m.group(1), m.group(2).strip()
        words = shlex.split(rest, comments=False)
        try:
            if key == "org":
                case.org = _int(words[0])
            elif key == "mode":
                case.mode = int(words[0])
            elif key == "retcomp":
                case.retcomp = words[0] in ("on", "1", "yes")
            elif key == "ip":
                case.ip_mode = words[0]
            elif key == "tnt":
                case.tnt_mode = words[0]
            elif key == "ptw-fup":
                case.ptw_fup = True
            elif key == "ptxed":
                case.ptxed += words
            elif key == "cpu":
                case.cpus += words
            elif key == "end":
                case.end = words[0]
            elif key == "max":
                case.max_insns = int(words[0])
            elif key == "perf":
                case.perf = True
            elif key == "covers":
                case.covers += words
            elif key == "reg":
                case.regs[words[0].lower()] = _int(words[1])
            elif key in CASE_DIRECTIVES:
                CASE_DIRECTIVES[key](case, words)
            elif key in ("at", "after"):
                label, _, nth = words[0].partition("#")
                case.events.append(Event(label, int(nth or 1), words[1], words[2:], key))
            else:
                raise CaseError(f"{path.name}:{lineno}: unknown directive @{key}")
        except (IndexError, ValueError) as e:
            raise CaseError(f"{path.name}:{lineno}: bad @{key} line: {e}") from e
    return case


def all_cases() -> list[Case]:
    return [parse_case(p) for p in sorted(CASES.glob("*.s"))]


# -- assembling -----------------------------------------------------------------------------------

@dataclass
class Image:
    code: bytes
    org: int
    labels: dict[str, int]
    regions: list = field(default_factory=list)   # more code: (addr, bytes, path) (see @section)


def assemble(case: Case, workdir: Path) -> Image:
    """Assemble the case at its org with ``as``/``ld``; a flat image plus the labels."""
    workdir.mkdir(parents=True, exist_ok=True)
    src = case.path.read_text()
    head = {64: ".code64", 32: ".code32", 16: ".code16"}[case.mode]
    asm = workdir / f"{case.name}.s"
    asm.write_text(f"\t.intel_syntax noprefix\n\t{head}\n\t.text\n" + src + "\n")
    obj, elf, flat = (workdir / f"{case.name}.{ext}" for ext in ("o", "elf", "flat"))
    as_flags = ["--64"]
    ld_flags = ["-m", "elf_x86_64", *case.extra.get("ld_flags", [])]
    cmds = [["as", *as_flags, "-o", str(obj), str(asm)],
            ["ld", *ld_flags, "-static", "-nostdlib", "--no-relax", "-Ttext", hex(case.org),
             "-e", hex(case.org), "-o", str(elf), str(obj)],
            ["objcopy", "-O", "binary", "-j", ".text", str(elf), str(flat)]]
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise CaseError(f"{case.name}: {cmd[0]} failed: {r.stderr.strip()}")
    labels = {}
    r = subprocess.run(["nm", str(elf)], capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            labels[parts[2]] = int(parts[0], 16)
    image = Image(flat.read_bytes(), case.org, labels)
    for hook in ASSEMBLE_HOOKS:
        hook(case, workdir, elf, image)
    return image


# Functions (case, workdir, elf_path, image) run after assembling (e.g. extra code sections).
ASSEMBLE_HOOKS: list = []


# -- the emulator's ground truth and the encoder --------------------------------------------------

_MD = {64: capstone.CS_MODE_64, 32: capstone.CS_MODE_32, 16: capstone.CS_MODE_16}


def _is_far_call(insn) -> bool:
    """Far transfers that push a return (ptxed assumes the flow continues after them)."""
    m = insn.mnemonic
    return (m in ("int", "int3", "into", "int1", "syscall", "sysenter", "vmcall")
            or m.startswith("lcall") or (m == "call" and "far" in insn.op_str))


def _kind(insn) -> int:
    m = insn.mnemonic
    if m in _FAR or m.startswith("ljmp") or m.startswith("lcall"):
        return K_FAR
    ops = insn.op_str
    direct = bool(re.fullmatch(r"0x[0-9a-f]+", ops))
    if m in _COND or (m.startswith("j") and m != "jmp"):
        return K_JCC
    if m == "jmp":
        if "far" in ops:
            return K_FAR
        return K_JMP if direct else K_JMP_IND
    if m == "call":
        if "far" in ops:
            return K_FAR
        return K_CALL if direct else K_CALL_IND
    if m in ("ret", "retq", "retw", "retl"):
        return K_RET
    return K_OTHER


class Truth:
    """Runs a case and writes its PT stream and expected ptxed lines side by side."""

    def __init__(self, case: Case, image: Image) -> None:
        self.case = case
        self.image = image
        self.md = capstone.Cs(capstone.CS_ARCH_X86, _MD[case.mode])
        self.pw = PacketWriter(ip_mode=case.ip_mode, tnt_mode=case.tnt_mode)
        self.lines: list[str] = []
        self.on = False            # PacketEn: tracing the current instruction
        self.started = False       # anything written yet (the first PSB)
        self.in_tx = False
        self.retstack: list[int] = []
        self.iret_frames: list[int] = []
        self.skip = 0              # instructions lost to an overflow still to run
        self.visits: dict[int, int] = {}
        self.executed = 0
        self.traced = 0
        self.events_at: dict[tuple[int, int], list[Event]] = {}
        self.events_after: dict[tuple[int, int], list[Event]] = {}
        for ev in case.events:
            if ev.label not in image.labels:
                raise CaseError(f"{case.name}: event at unknown label {ev.label!r}")
            table = self.events_at if ev.where == "at" else self.events_after
            table.setdefault((image.labels[ev.label], ev.nth), []).append(ev)
        self.labels = image.labels
        self.evip = "--event:ip" in case.ptxed
        self.pos: int | None = None   # where the flow stands after tracing stopped (ptxed's "resumed")

    # -- output helpers -----------------------------------------------------------------------
    def line(self, s: str) -> None:
        self.lines.append(s)

    def insn_line(self, ip: int) -> None:
        self.traced += 1
        self.line(("? " if self.in_tx else "") + f"{ip:016x}")

    def target(self, name: str) -> int:
        if name in self.labels:
            return self.labels[name]
        return _int(name)

    def psb_plus(self, ip: int) -> None:
        # SDM: only RETs whose CALLs were seen since the last PSB may be compressed.
        self.retstack.clear()
        self.pw.psb()
        if self.on:
            self.pw.fup(ip)
        self.pw.mode_exec(self.case.mode)
        if self.in_tx:
            self.pw.mode_tsx(True)
        self.pw.psbend()
        self.started = True

    def ensure_started(self) -> None:
        if not self.started:
            self.pw.psb()
            self.pw.mode_exec(self.case.mode)
            self.pw.psbend()
            self.started = True

    # -- emulation ------------------------------------------------------------------------------
    def run(self) -> tuple[bytes, list[str]]:
        case, img = self.case, self.image
        mode = {64: UC_MODE_64, 32: UC_MODE_32, 16: UC_MODE_16}[case.mode]
        uc = Uc(UC_ARCH_X86, mode)
        base = img.org & ~0xFFF
        size = ((img.org + len(img.code) + 0xFFF) & ~0xFFF) - base + 0x1000
        uc.mem_map(base, size)
        uc.mem_write(img.org, img.code)
        for addr, data, _path in img.regions:
            rbase = addr & ~0xFFF
            uc.mem_map(rbase, ((addr + len(data) + 0xFFF) & ~0xFFF) - rbase + 0x1000)
            uc.mem_write(addr, data)
        top = STACK_TOP[case.mode]
        uc.mem_map(top - STACK_SIZE[case.mode], STACK_SIZE[case.mode])
        sp = {64: X.UC_X86_REG_RSP, 32: X.UC_X86_REG_ESP, 16: X.UC_X86_REG_SP}[case.mode]
        uc.reg_write(sp, top - 0x100)
        for name, value in case.regs.items():
            uc.reg_write(getattr(X, f"UC_X86_REG_{name.upper()}"), value)
        self.uc = uc
        self.pc_reg = {64: X.UC_X86_REG_RIP, 32: X.UC_X86_REG_EIP, 16: X.UC_X86_REG_IP}[case.mode]
        if not any(ev.name in ("enable", "psb") and ev.where == "at" and self.labels[ev.label] == img.org
                   for ev in case.events):
            self.on = True
            self.psb_plus(img.org)
        ip = img.org
        while True:
            if self.executed >= case.max_insns:
                raise CaseError(f"{case.name}: no hlt within {case.max_insns} instructions")
            n = self.visits.get(ip, 0) + 1
            self.visits[ip] = n
            redirect = None
            for ev in self.events_at.get((ip, n), []):
                r = self.at_event(ev, ip)
                if r is not None:
                    redirect = r
            if redirect is not None:
                ip = redirect
                continue
            for hook in RUN_HOOKS:
                hook.before(self, ip)
            code = bytes(uc.mem_read(ip, 16))
            insn = next(self.md.disasm(code, ip), None)
            if insn is None:
                raise CaseError(f"{case.name}: undecodable bytes at {ip:#x}")
            if insn.mnemonic == "hlt":
                self.finish(ip)
                break
            traced = self.on and not self.skip
            if insn.mnemonic == "xabort":
                # The aborting instruction does not complete: FUP carries its IP, no line.
                self.executed += 1
                ip = self.abort(ip)
                continue
            if traced:
                self.insn_line(ip)
            self.executed += 1
            nxt = self.step(insn)
            after = self.events_after.get((ip, n), [])
            for hook in RUN_HOOKS:
                after = after + hook.after(self, insn, nxt, traced)
            if traced:
                self.encode(insn, nxt, after)
            elif self.skip:
                self.skip -= 1
                if not self.skip:
                    self.resume_after_overflow(nxt)
            ip = nxt
        return bytes(self.pw.buf), self.lines

    def step(self, insn) -> int:
        """Execute one instruction; special ones are done here, the rest by unicorn."""
        uc, m, ip = self.uc, insn.mnemonic, insn.address
        nxt = ip + insn.size
        if m == "syscall":
            uc.reg_write(X.UC_X86_REG_RCX, nxt)
            return self.target("syscall_entry")
        if m in ("sysret", "sysretq"):
            return uc.reg_read(X.UC_X86_REG_RCX)
        if m in ("int", "int3", "int1"):
            self.iret_frames.append(nxt)
            vec = 3 if m == "int3" else (1 if m == "int1" else int(insn.op_str, 0))
            return self.target(f"vector_{vec}")
        if m in ("iret", "iretd", "iretq"):
            return self.iret_frames.pop()
        if m in ("xbegin",):
            self.xbegin_fallback = int(insn.op_str, 0)
            self.tx_event(True, False, nxt)
            return nxt
        if m == "xend":
            self.tx_event(False, False, nxt)
            return nxt
        if m == "xabort":
            return self.abort(ip)
        if m in ("xtest", "mwait", "monitor", "vmptrld", "vmxon", "vmclear", "clflush"):
            self.special(insn)
            return nxt
        if m == "ptwrite":
            self.ptwrite(insn)
            return nxt
        if m == "mov" and insn.op_str.startswith("cr3"):
            reg = insn.op_str.split(",")[1].strip()
            cr3 = uc.reg_read(getattr(X, f"UC_X86_REG_{reg.upper()}"))
            self.paging(cr3)
            return nxt
        if m in ("vmlaunch", "vmresume", "vmcall"):
            return self.target(f"{m}_target")
        try:
            uc.emu_start(ip, 0, count=1)
        except UcError as e:
            raise CaseError(f"{self.case.name}: emulation fault at {ip:#x} ({insn.mnemonic} "
                            f"{insn.op_str}): {e}") from e
        return uc.reg_read(self.pc_reg) if self.case.mode != 16 else uc.reg_read(X.UC_X86_REG_IP)

    # -- special instructions -------------------------------------------------------------------
    def tx_event(self, intx: bool, abrt: bool, fup_ip: int) -> None:
        if self.on and not self.skip:
            self.pw.mode_tsx(intx, abrt)
            self.pw.fup(fup_ip)
            self.line("[begin transaction]" if intx else "[committed]")
        self.in_tx = intx

    def abort(self, ip: int) -> int:
        fallback = self.xbegin_fallback
        if self.on and not self.skip:
            self.pw.mode_tsx(False, True)
            self.pw.fup(ip)
            self.pw.tip(fallback)
            self.line("[aborted" + (f", ip: {ip:016x}" if self.evip else "") + "]")
            self.line("[interrupt" + (f", from: {ip:016x}, to: {fallback:016x}" if self.evip else "") + "]")
        self.in_tx = False
        return fallback

    def special(self, insn) -> None:
        if insn.mnemonic == "mwait":
            self.mwait_insn(insn)      # the "timing and power events" section
        if insn.mnemonic == "vmptrld":
            base = self.uc.reg_read(X.UC_X86_REG_RAX)
            if self.on:
                self.pw.vmcs(base)
                self.line(f"[vmcs, base: {base & ~0xFFF:016x}]")

    def ptwrite(self, insn) -> None:
        reg = insn.op_str.strip()
        value = self.uc.reg_read(getattr(X, f"UC_X86_REG_{reg.upper()}"))
        size = 8 if reg.startswith("r") else 4
        if self.on and not self.skip:
            self.pw.ptwrite(value, size, ip=self.case.ptw_fup)
            if self.case.ptw_fup:
                self.pw.fup(insn.address)
                self.line(f"[ptwrite: {value:x}, ip: {insn.address:016x}]"
                          if "--event:ip" in self.case.ptxed else f"[ptwrite: {value:x}]")
            else:
                self.line(f"[ptwrite: {value:x}]")

    def paging(self, cr3: int, nr: bool = False) -> None:
        if self.on and not self.skip:
            self.pw.pip(cr3, nr)
            self.line(f"[paging, cr3: {cr3 & ~0x1F:016x}" + (", nr" if nr else "") + "]")

    # -- scripted events --------------------------------------------------------------------------
    def at_event(self, ev: Event, ip: int) -> int | None:
        name, a = ev.name, ev.args
        pw = self.pw
        if name == "psb":
            self.psb_plus(ip)
        elif name == "enable":
            _enable(self, ip)       # TIP.PGE (see the control-flow section below)
        elif name == "disable":
            self.async_disable(ip)
        elif name == "interrupt":
            to = self.target(a[0])
            self.iret_frames.append(ip)
            if self.on:
                pw.fup(ip)
                pw.tip(to)
                self.line("[interrupt" + (f", from: {ip:016x}, to: {to:016x}" if self.evip else "") + "]")
            return to
        elif name == "abort":
            return self.abort(ip)
        elif name == "ovf":
            # The next N instructions' packets are lost; OVF and a FUP where tracing resumes.
            self.skip = int(a[0]) if a else 0
            if not self.skip:
                self.resume_after_overflow(ip)
        # pwre/pwrx/exstop and the timing packets (tsc, tma, mtc, cyc, cbr): AT_EVENTS, see
        # the "timing and power events" section.
        elif name == "pad":
            pw.pad(int(a[0]) if a else 1)
        elif name in AT_EVENTS:
            return AT_EVENTS[name](self, ev, ip)
        else:
            raise CaseError(f"{self.case.name}: unknown event {name!r}")
        return None

    def async_disable(self, ip: int) -> None:
        self.pw.fup(ip)
        self.pw.tip_pgd(None)
        self.on = False
        self.pos = ip
        self.line("[disabled" + (f", at: {ip:016x}" if self.evip else "") + "]")

    def full_ip(self, packet, ip: int) -> None:
        """An IP packet that does not depend on the last IP (after OVF the decoder has none)."""
        mode, self.pw.ip_mode = self.pw.ip_mode, "sext48"
        self.pw.last_ip = 0
        packet(ip)
        self.pw.ip_mode = mode

    def resume_after_overflow(self, ip: int) -> None:
        self.retstack.clear()
        self.pw.ovf()
        if self.on:
            self.full_ip(self.pw.fup, ip)
            self.line("[overflow" + (f", ip: {ip:016x}" if self.evip else "") + "]")
        else:
            self.line("[overflow]")

    # -- the branch packets ----------------------------------------------------------------------
    def encode(self, insn, nxt: int, after: list[Event]) -> None:
        pw, kind = self.pw, _kind(insn)
        ret_addr = insn.address + insn.size
        for ev in after:
            if ev.name == "disable":
                # The branch leaves the traced region: TIP.PGD (target IP, or suppressed with noip).
                if kind == K_CALL or kind == K_CALL_IND:
                    self.retstack.append(ret_addr)
                noip = "noip" in ev.args
                pw.tip_pgd(None if noip else nxt)
                self.on = False
                # Where ptxed's flow stands: the target of a direct jmp/call; otherwise unknown (the
                # branch needs trace that the TIP.PGD does not give), a call's return address.
                if kind in (K_JMP, K_CALL):
                    self.pos = nxt
                elif kind == K_CALL_IND or (kind == K_FAR and _is_far_call(insn)):
                    self.pos = ret_addr
                else:
                    self.pos = None
                self.line("[disabled" + (f", ip: {nxt:016x}" if self.evip and not noip else "") + "]")
                return
            if ev.name in AFTER_EVENTS:
                if AFTER_EVENTS[ev.name](self, ev, insn, nxt):
                    return
                continue
            raise CaseError(f"{self.case.name}: unknown @after event {ev.name!r}")
        if kind == K_JCC:
            pw.tnt(nxt != ret_addr)
        elif kind in (K_CALL, K_CALL_IND):
            self.retstack.append(ret_addr)
            if kind == K_CALL_IND:
                pw.tip(nxt)
        elif kind == K_JMP_IND:
            pw.tip(nxt)
        elif kind == K_RET:
            top = self.retstack.pop() if self.retstack else None
            if self.case.retcomp and top == nxt:
                pw.tnt(True)
            else:
                pw.tip(nxt)
        elif kind == K_FAR:
            pw.tip(nxt)

    def finish(self, ip: int) -> None:
        if self.on and self.case.end == "disable":
            self.async_disable(ip)
        elif self.on:
            self.pw.flush_tnt()
            self.line("[end of trace]")


@dataclass
class Built:
    case: Case
    image: Image
    code_path: Path
    pt_path: Path
    expected: list[str]
    executed: int


def build(case: Case, workdir: Path) -> Built:
    image = assemble(case, workdir)
    pt, lines = Truth(case, image).run_and_count()
    pt_path = workdir / f"{case.name}.pt"
    pt_path.write_bytes(pt)
    code_path = workdir / f"{case.name}.code"
    code_path.write_bytes(image.code)
    return Built(case, image, code_path, pt_path, lines[0], lines[1])


def _run_and_count(self: Truth):
    pt, lines = self.run()
    return pt, (lines, self.executed)


Truth.run_and_count = _run_and_count


def dump_argv(b: Built, *, block: bool = False, cpu: str | None = None) -> list[str]:
    argv = ["dump", "insns", "--raw", str(b.pt_path), "--image", f"{b.code_path}:{b.image.org:#x}"]
    if cpu:
        argv += ["--cpu", cpu]
    argv += b.case.ptxed
    for hook in DUMP_ARGV_HOOKS:
        argv += hook(b)
    if block:
        argv.append("--block-decoder")
    return argv


# Functions (built) -> more dump-insns arguments (e.g. the images of extra sections, filters).
DUMP_ARGV_HOOKS: list = []


def normalize(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


# == perf mode (perf.data wrapping, executed-instruction truth for perf script) ======================
# A case marked ``@perf`` is also wrapped into a per-thread perf.data (its code as a static ELF mapped
# by MMAP2, its PT stream as one AUXTRACE buffer) and compared with ``perf script`` (test_corpus_perf.py).

PERF_PID = 1000


@dataclass
class Step:
    """One executed instruction or hardware event of the ground truth (``Truth.flow``), in order.

    ``kind``: a K_* constant for an executed instruction; else "interrupt", "abort", "enable",
    "disable", "ovf-start" (packets lost from here), "ovf-resume", "tx-begin", "tx-commit" or
    "async:NAME" (another @at event that redirected the flow)."""
    ip: int
    next_ip: int | None
    kind: object
    traced: bool               # its packets were written (PacketEn, not lost to an overflow)
    in_tx: bool = False        # inside a transaction (before the instruction executed)
    mnemonic: str = ""
    size: int = 0
    ends_trace: bool = False   # a branch whose packet was TIP.PGD
    pgd_ip: int | None = None  # that TIP.PGD's IP (None: suppressed)


def _flow(self: Truth) -> list:
    flow = self.__dict__.get("flow")
    if flow is None:
        flow = self.flow = []
    return flow


def _wrap_truth(name: str):
    """Record into Truth.flow around Truth.NAME (the encoder itself stays unchanged)."""
    def deco(fn):
        orig = getattr(Truth, name)

        def wrapper(self, *args, **kwargs):
            return fn(self, orig, *args, **kwargs)
        wrapper.__name__ = name
        setattr(Truth, name, wrapper)
        return fn
    return deco


_LAST_TRUTH: list = []


@_wrap_truth("run")
def _flow_run(self, orig):
    """Note the TIP.PGD IPs the encoder writes; keep the Truth for build_perf."""
    pw, tip_pgd = self.pw, self.pw.tip_pgd

    def noting_tip_pgd(ip=None):
        self.last_pgd_ip = ip
        return tip_pgd(ip)
    pw.tip_pgd = noting_tip_pgd
    _flow(self)
    _LAST_TRUTH[:] = [self]
    return orig(self)


@_wrap_truth("step")
def _flow_step(self, orig, insn):
    s = Step(insn.address, None, _kind(insn), self.on and not self.skip, self.in_tx, insn.mnemonic, insn.size)
    _flow(self).append(s)
    s.next_ip = orig(self, insn)
    return s.next_ip


@_wrap_truth("encode")
def _flow_encode(self, orig, insn, nxt, after):
    on = self.on
    self.last_pgd_ip = None
    r = orig(self, insn, nxt, after)
    flow = _flow(self)
    if on and not self.on and flow and flow[-1].ip == insn.address:
        flow[-1].ends_trace = True
        flow[-1].pgd_ip = self.last_pgd_ip
    return r


@_wrap_truth("at_event")
def _flow_at_event(self, orig, ev, ip):
    on, traced, intx = self.on, self.on and not self.skip, self.in_tx
    if ev.name == "ovf":
        _flow(self).append(Step(ip, ip, "ovf-start", on, intx))
    n = len(_flow(self))
    r = orig(self, ev, ip)
    flow = _flow(self)
    if r is not None and r != ip and ev.name != "abort":
        kind = "interrupt" if ev.name == "interrupt" else f"async:{ev.name}"
        flow.insert(n, Step(ip, r, kind, traced, intx))
    if not on and self.on and not any(s.kind == "enable" for s in flow[n:]):
        flow.append(Step(ip, ip, "enable", True, self.in_tx))
    return r


@_wrap_truth("abort")
def _flow_abort(self, orig, ip):
    s = Step(ip, None, "abort", self.on and not self.skip, self.in_tx)
    _flow(self).append(s)
    s.next_ip = orig(self, ip)
    return s.next_ip


@_wrap_truth("async_disable")
def _flow_disable(self, orig, ip):
    if self.on:
        _flow(self).append(Step(ip, None, "disable", True, self.in_tx))
    return orig(self, ip)


@_wrap_truth("resume_after_overflow")
def _flow_resume(self, orig, ip):
    _flow(self).append(Step(ip, ip, "ovf-resume", self.on, self.in_tx))
    return orig(self, ip)


@_wrap_truth("tx_event")
def _flow_tx(self, orig, intx, abrt, fup_ip):
    _flow(self).append(Step(fup_ip, fup_ip, "tx-begin" if intx else "tx-commit", self.on and not self.skip,
                            self.in_tx))
    return orig(self, intx, abrt, fup_ip)


def build_perf(case: Case, workdir: Path) -> Built:
    """build() that also keeps the executed flow (``Built.flow``, a list of Step)."""
    _LAST_TRUTH.clear()
    b = build(case, workdir)
    b.flow = list(_flow(_LAST_TRUTH.pop()))
    return b


# perf's sample flags (PERF_IP_FLAG_*), its names for them and its --itrace=c/r filter (perf script's
# conventions: how a branch sample is labelled is perf's rule, the branches themselves are the truth's).
PF_BRANCH, PF_CALL, PF_RETURN, PF_COND, PF_SYSCALLRET, PF_ASYNC, PF_INTR, PF_TX_ABORT, PF_TR_BEGIN, PF_TR_END, \
    PF_IN_TX = (1 << i for i in range(11))
_PF_NAMES = {
    PF_BRANCH | PF_CALL: "call", PF_BRANCH | PF_RETURN: "return", PF_BRANCH | PF_COND: "jcc",
    PF_BRANCH: "jmp", PF_BRANCH | PF_CALL | PF_INTR: "int", PF_BRANCH | PF_RETURN | PF_INTR: "iret",
    PF_BRANCH | PF_CALL | PF_SYSCALLRET: "syscall", PF_BRANCH | PF_RETURN | PF_SYSCALLRET: "sysret",
    PF_BRANCH | PF_ASYNC: "async", PF_BRANCH | PF_CALL | PF_ASYNC | PF_INTR: "hw int",
    PF_BRANCH | PF_TX_ABORT: "tx abrt", PF_BRANCH | PF_TR_BEGIN: "tr strt", PF_BRANCH | PF_TR_END: "tr end",
}


def perf_flags_text(flags: int) -> str:
    """perf script's ``flags`` column (blanks collapsed)."""
    xs = " (x)" if flags & PF_IN_TX else ""
    name = _PF_NAMES.get(flags & ~PF_IN_TX)
    if name:
        return name + xs
    for bit, word in ((PF_TR_BEGIN, "tr strt"), (PF_TR_END, "tr end")):
        if flags & bit:
            name = _PF_NAMES.get(flags & ~(PF_IN_TX | bit))
            if name:
                return f"{word} {name}{xs}"
    return "".join(c for i, c in enumerate("bcrosyiABEx") if flags >> i & 1)


def _insn_flags(s: Step) -> int:
    """The branch flags of an executed instruction (0: not a branch)."""
    k, m = s.kind, s.mnemonic
    if k == K_JCC:
        return PF_BRANCH | PF_COND
    if k in (K_JMP, K_JMP_IND):
        return PF_BRANCH
    if k in (K_CALL, K_CALL_IND):
        return PF_BRANCH | PF_CALL
    if k == K_RET:
        return PF_BRANCH | PF_RETURN
    if k == K_FAR:
        if m in ("syscall", "sysenter"):
            return PF_BRANCH | PF_CALL | PF_SYSCALLRET
        if m.startswith("sysret") or m.startswith("sysexit"):
            return PF_BRANCH | PF_RETURN | PF_SYSCALLRET
        if m.startswith("iret"):
            return PF_BRANCH | PF_RETURN | PF_INTR
        if m.startswith("int"):
            return PF_BRANCH | PF_CALL | PF_INTR
        raise CaseError(f"perf mode: no perf flags for {m}")
    return 0


def _taken(s: Step) -> bool:
    return s.kind != K_JCC or s.next_ip != s.ip + s.size


def perf_samples(flow: list, itrace: str, pid: int = PERF_PID) -> list[str]:
    """The ``perf script -F pid,tid,ip,addr,flags --itrace=ITRACE`` lines (blanks collapsed, timeless)
    that the executed flow implies, for ITRACE in be, i1i, x, bex, cr (a trailing Z is ignored).

    Branch samples ``FLAGS FROM => TO``: every taken branch that was traced, asynchronous transfers
    (interrupt: hw int, abort: tx abrt), trace ends (TIP.PGD after a branch: "tr end KIND" to its IP or 0; an
    asynchronous disable: "tr end async" to 0) and trace starts (TIP.PGE, and the FUP after an overflow:
    "tr strt" from 0); the PSB+ that begins the trace is no sample.  Instruction samples (i1i) ``FLAGS
    ADDR IP``: every traced instruction, ADDR its target when it is a taken branch, else 0.  Transaction
    samples (x) ``FLAGS ADDR IP``: begin ("x", at the instruction after XBEGIN), commit (after XEND),
    abort ("tx abrt", ADDR the fallback).  Errors (e): an overflow, at the IP where packets were lost."""
    itrace = itrace.replace("Z", "")
    want_b, want_e, want_x = "b" in itrace, "e" in itrace, "x" in itrace
    want_c, want_r = "c" in itrace, "r" in itrace
    want_i = itrace.startswith("i")
    who = f"{pid}/{pid}"
    out: list[str] = []

    def branch(flags: int, frm: int, to: int) -> None:
        if want_b or (want_c and flags & (PF_CALL | PF_ASYNC | PF_TR_END)) or \
                (want_r and flags & (PF_RETURN | PF_TR_BEGIN)):
            out.append(" ".join(p for p in (who, perf_flags_text(flags), f"{frm:x} => {to:x}") if p))

    def sample(flags: int, addr: int, ip: int) -> None:
        out.append(" ".join(p for p in (who, perf_flags_text(flags), f"{addr:x}", f"{ip:x}") if p))

    for s in _flowlist(flow):
        tx = PF_IN_TX if s.in_tx else 0
        if isinstance(s.kind, int):
            if not s.traced:
                continue
            fl = _insn_flags(s)
            to = s.next_ip if fl and _taken(s) else 0
            if s.ends_trace:
                fl |= PF_TR_END
                to = s.pgd_ip or 0
            if want_i:
                sample(fl | tx, to, s.ip)
            if s.ends_trace:
                branch(fl | tx, s.ip, to)
            elif fl and _taken(s):
                branch(fl | tx, s.ip, s.next_ip)
        elif s.kind == "interrupt" and s.traced:
            branch(PF_BRANCH | PF_CALL | PF_ASYNC | PF_INTR | tx, s.ip, s.next_ip)
        elif s.kind == "abort" and s.traced:
            if want_x:
                sample(PF_BRANCH | PF_TX_ABORT, s.next_ip, s.ip)
            branch(PF_BRANCH | PF_TX_ABORT, s.ip, s.next_ip)
        elif s.kind == "tx-begin" and s.traced and want_x:
            sample(PF_IN_TX, 0, s.ip)
        elif s.kind == "tx-commit" and s.traced and want_x:
            sample(0, 0, s.ip)
        elif s.kind == "enable":
            branch(PF_BRANCH | PF_TR_BEGIN, 0, s.ip)
        elif s.kind == "disable":
            # perf's rule: the asynchronous trace end carries no in-transaction flag (perf 6.1)
            branch(PF_BRANCH | PF_ASYNC | PF_TR_END, s.ip, 0)
        elif s.kind == "ovf-start" and want_e:
            out.append(f"instruction trace error type 1 time 0 cpu -1 pid {pid} tid {pid} ip {s.ip:#x} "
                       "code 7: Overflow packet")
        elif s.kind == "ovf-resume" and s.traced:
            branch(PF_BRANCH | PF_TR_BEGIN, 0, s.ip)
        elif isinstance(s.kind, str) and s.kind.startswith("async:") and s.traced:
            raise CaseError(f"perf mode: no perf sample rule for event {s.kind[6:]}")
    return out


def _flowlist(flow) -> list:
    return flow.flow if isinstance(flow, Built) else flow


def wrap_perf(built: Built, out_dir: Path) -> Path:
    """A per-thread perf.data of a built case: COMM, MMAP2 of the code as a static ELF, ITRACE_START,
    the PT stream as one AUXTRACE buffer and its AUX record; returns its path."""
    from ptexport.perfdata.constants import RecordType
    from ptexport.synth import generate as G
    from ptexport.synth.perfwrite import (PerfDataWriter, aux_body, auxtrace_info_record, comm_body,
                                          finished_round, itrace_start_body, mmap2_body, time_conv_record)
    from ptexport.synth.sideband import _Records, auxtrace_priv, make_attrs
    from ptexport.synth.vm import _common_features
    from ptexport.synth.vm_code import Code, write_static_elf

    misc_user, misc_comm_exec = 2, 0x2000
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    case, org = built.case, built.image.org
    pt_bytes = built.pt_path.read_bytes()
    elf = (out_dir / "prog").resolve()
    write_static_elf(elf, Code(base=org, data=built.image.code, insns={}, labels={}))
    opts = G.SynthOptions(per_thread=True, timing="tsc", cpus=1, retcomp=case.retcomp,
                          ptwrite=("fup" if case.ptw_fup else "off"))
    pt, dummy = make_attrs(opts, 1)
    recs = _Records(pt, dummy, lambda cpu, tid: 0)
    pid = PERF_PID
    t0 = 1_000_000
    start = org & ~0xFFF
    end = (org + len(built.image.code) + 0xFFF) & ~0xFFF
    recs.add(t0, RecordType.COMM, misc_comm_exec, comm_body(pid, pid, "prog"), pid=pid, tid=pid, cpu=0)
    recs.add(t0 + 100, RecordType.MMAP2, misc_user,
             mmap2_body(pid, pid, start, end - start, 0x1000 - (org - start), str(elf), ino=4242),
             pid=pid, tid=pid, cpu=0)
    for k, (addr, data, _path) in enumerate(built.image.regions):
        # more code (e.g. @section): one more static ELF, mapped like the first
        relf = (out_dir / f"prog.{k + 1}").resolve()
        write_static_elf(relf, Code(base=addr, data=data, insns={}, labels={}))
        rstart, rend = addr & ~0xFFF, (addr + len(data) + 0xFFF) & ~0xFFF
        recs.add(t0 + 101 + k, RecordType.MMAP2, misc_user,
                 mmap2_body(pid, pid, rstart, rend - rstart, 0x1000 - (addr - rstart), str(relf), ino=4243 + k),
                 pid=pid, tid=pid, cpu=0)
    recs.add(t0 + 200, RecordType.ITRACE_START, 0, itrace_start_body(pid, pid), pid=pid, tid=pid, cpu=0,
             pt_event=True)
    recs.add_raw(t0 + 300, ("AUXTRACE", pt_bytes, 0, t0 + 500, 0, pid, -1))
    recs.add(t0 + 400, RecordType.AUX, 0, aux_body(0, len(pt_bytes), 0), pid=pid, tid=pid, cpu=0,
             pt_event=True)
    recs.items.sort(key=lambda x: (x[0], x[1]))
    path = out_dir / "perf.data"
    with open(path, "wb") as f:
        w = PerfDataWriter(f, [pt, dummy])
        w.write(auxtrace_info_record(auxtrace_priv(opts, pt)))
        w.write(time_conv_record(G.TIME_SHIFT, G.TIME_MULT, G.TIME_ZERO))
        for _ns, _n, data in recs.items:
            if isinstance(data, tuple):
                _tag, chunk, off, ref, idx, tid, cpu = data
                w.write_auxtrace(chunk, offset=off, reference=ref, idx=idx, tid=tid, cpu=cpu)
            else:
                w.write(data)
        w.write(finished_round())
        w.close(_common_features(1, ["/usr/bin/perf", "record", "--per-thread", "-e", "intel_pt//u", str(elf)],
                                 [pt, dummy]))
    return path


# == control flow: IP compression, enable/disable, filtering, overflow variants, VMX ==================
# @section NAME ADDR       more code in ``.section .NAME, "ax"`` linked at ADDR (a second code region,
#                          e.g. far from the first so that every IP compression occurs)
# @expect-ipbytes N ...    the encoder must have written IP packets with each of these IPBytes
# @filter filter|stop A B  IA32_RTIT_ADDRn range (labels or numbers; the n-th @filter line is addrn):
#                          the encoder enables (TIP.PGE) and disables (TIP.PGD) tracing as the flow
#                          enters and leaves the filter ranges, stops (FUP+TIP.PGD, TraceStop) at a
#                          stop range; ptexport gets the same --filter:addrn_* options.
# Events: ``@at L ovf-off`` (OVF while tracing is off), ``@at L enable-full`` (TIP.PGE with a full IP),
# ``@at L psb-ovf N`` (PSB, FUP, OVF before PSBEND; N instructions lost), ``@after L vmentry CR3
# [vmcs BASE]`` (VMLAUNCH/VMRESUME: PIP.NR=1, VMCS, TIP guest), ``@at L vmexit HANDLER CR3 [vmcs
# BASE]`` (FUP guest IP, PIP.NR=0, VMCS, TIP to the host's handler).

def _section_directive(case: Case, words: list[str]) -> None:
    name, addr = words[0].lstrip("."), _int(words[1])
    case.extra.setdefault("sections", {})[name] = addr
    case.extra.setdefault("ld_flags", []).append(f"--section-start=.{name}={addr:#x}")


CASE_DIRECTIVES["section"] = _section_directive


def _sections_assemble(case: Case, workdir: Path, elf: Path, image: Image) -> None:
    for name, addr in case.extra.get("sections", {}).items():
        flat = workdir / f"{case.name}.{name}.code"
        r = subprocess.run(["objcopy", "-O", "binary", "-j", f".{name}", str(elf), str(flat)],
                           capture_output=True, text=True)
        if r.returncode or not flat.exists() or not flat.stat().st_size:
            raise CaseError(f"{case.name}: no code in section .{name}: {r.stderr.strip()}")
        image.regions.append((addr, flat.read_bytes(), flat))


ASSEMBLE_HOOKS.append(_sections_assemble)


def _sections_argv(b: Built) -> list[str]:
    out = []
    for addr, _data, path in b.image.regions:
        out += ["--image", f"{path}:{addr:#x}"]
    return out


DUMP_ARGV_HOOKS.append(_sections_argv)


def _expect_ipbytes_directive(case: Case, words: list[str]) -> None:
    case.extra["expect_ipbytes"] = [int(w) for w in words]


CASE_DIRECTIVES["expect-ipbytes"] = _expect_ipbytes_directive

_orig_finish = Truth.finish


def _finish_check_ipbytes(self: Truth, ip: int) -> None:
    _orig_finish(self, ip)
    want = self.case.extra.get("expect_ipbytes")
    if want:
        missing = [w for w in want if w not in self.pw.ipbytes_used]
        if missing:
            raise CaseError(f"{self.case.name}: no IP packet with IPBytes {missing} "
                            f"(used {sorted(self.pw.ipbytes_used)})")


Truth.finish = _finish_check_ipbytes


def _enable(t: Truth, ip: int, full: bool = False) -> None:
    """TIP.PGE at ``ip`` (the ``enable`` event; ``full``: an IP independent of the last IP).

    After an overflow the decoder knows neither the last IP (the TIP.PGE carries a full IP) nor the
    execution mode (the MODE.Exec before it is reported: ptxed prints ``[exec mode]`` after
    ``[enabled]``)."""
    t.ensure_started()
    t.pw.mode_exec(t.case.mode)
    after_ovf = t.__dict__.pop("after_ovf", False)
    if full or after_ovf:
        t.full_ip(t.pw.tip_pge, ip)
    else:
        t.pw.tip_pge(ip)
    t.on = True
    word = "resumed" if t.pos == ip else "enabled"
    t.line(f"[{word}" + (f", ip: {ip:016x}" if t.evip else "") + "]")
    if after_ovf:
        t.line(f"[exec mode: {t.case.mode}-bit" + (f", ip: {ip:016x}" if t.evip else "") + "]")


_orig_resume_after_overflow = Truth.resume_after_overflow
_orig_psb_plus = Truth.psb_plus


def _resume_after_overflow(self: Truth, ip: int) -> None:
    _orig_resume_after_overflow(self, ip)
    self.pos = None
    if not self.on:
        self.after_ovf = True      # tracing resumes with TIP.PGE


def _psb_plus(self: Truth, ip: int) -> None:
    _orig_psb_plus(self, ip)
    self.__dict__.pop("after_ovf", None)   # PSB+ gives the decoder the mode (and PSB resets the last IP)


Truth.resume_after_overflow = _resume_after_overflow
Truth.psb_plus = _psb_plus


@at_event("enable-full")
def _ev_enable_full(t: Truth, ev: Event, ip: int):
    _enable(t, ip, full=True)


@at_event("ovf-off")
def _ev_ovf_off(t: Truth, ev: Event, ip: int):
    """An overflow while tracing is off: OVF alone; tracing resumes with the next TIP.PGE."""
    if t.on:
        raise CaseError(f"{t.case.name}: ovf-off while tracing is on")
    t.ensure_started()
    t.retstack.clear()
    t.pw.ovf()
    t.pos = None
    t.after_ovf = True
    t.line("[overflow]")


@at_event("psb-ovf")
def _ev_psb_ovf(t: Truth, ev: Event, ip: int):
    """PSB, MODE.Exec, FUP; the buffer overflows before PSBEND: OVF and a FUP where tracing resumes
    (after N lost instructions)."""
    if not t.on:
        raise CaseError(f"{t.case.name}: psb-ovf while tracing is off")
    t.pw.psb()
    t.pw.mode_exec(t.case.mode)
    t.pw.fup(ip)
    t.skip = int(ev.args[0]) if ev.args else 0
    if not t.skip:
        t.resume_after_overflow(ip)


@after_event("vmentry")
def _ev_vmentry(t: Truth, ev: Event, insn, nxt: int) -> bool:
    """VMLAUNCH/VMRESUME with tracing on in host and guest: PIP (guest CR3, NR=1), VMCS, TIP."""
    if insn.mnemonic not in ("vmlaunch", "vmresume"):
        raise CaseError(f"{t.case.name}: vmentry on {insn.mnemonic}")
    a = ev.args
    t.paging(_int(a[0]), nr=True)
    if "vmcs" in a:
        base = _int(a[a.index("vmcs") + 1])
        t.pw.vmcs(base)
        t.line(f"[vmcs, base: {base & ~0xFFF:016x}]")
    t.pw.tip(nxt)
    return True


@at_event("vmexit")
def _ev_vmexit(t: Truth, ev: Event, ip: int):
    """An asynchronous VM exit before the guest instruction at ``ip``: FUP (guest IP), PIP (host CR3,
    NR=0), VMCS, TIP to the host's exit handler."""
    a = ev.args
    to = t.target(a[0])
    cr3 = _int(a[1])
    vmcs = _int(a[a.index("vmcs") + 1]) if "vmcs" in a else None
    if t.on:
        t.pw.fup(ip)
        t.pw.pip(cr3, False)
        if vmcs is not None:
            t.pw.vmcs(vmcs)
        t.pw.tip(to)
        t.line("[interrupt" + (f", from: {ip:016x}, to: {to:016x}" if t.evip else "") + "]")
        # ptxed reports the VMCS before the paging event of an asynchronous branch.
        if vmcs is not None:
            t.line(f"[vmcs, base: {vmcs & ~0xFFF:016x}" + (f", ip: {to:016x}" if t.evip else "") + "]")
        t.line(f"[paging, cr3: {cr3 & ~0x1F:016x}" + (f", ip: {to:016x}" if t.evip else "") + "]")
    return to


# -- IP filtering -----------------------------------------------------------------------------------

def _filter_directive(case: Case, words: list[str]) -> None:
    kind = {"filter": 1, "stop": 2}[words[0]]
    filters = case.extra.setdefault("filters", [])
    if len(filters) >= 4:
        raise CaseError(f"{case.name}: more than 4 @filter ranges")
    filters.append((kind, words[1], words[2]))
    if len(filters) == 1:
        # Tracing starts with PSB+ but without a FUP; the filter decides when packets start.
        case.events.append(Event("_start", 1, "psb", []))


CASE_DIRECTIVES["filter"] = _filter_directive


def _filters(t: Truth) -> list[tuple[int, int, int]]:
    out = t.__dict__.get("_filters_resolved")
    if out is None:
        out = [(k, t.target(a), t.target(b)) for k, a, b in t.case.extra.get("filters", [])]
        t._filters_resolved = out
    return out


def _in_filter(t: Truth, ip: int) -> bool:
    fs = [(a, b) for k, a, b in _filters(t) if k == 1]
    return not fs or any(a <= ip <= b for a, b in fs)


def _in_stop(t: Truth, ip: int) -> bool:
    return any(a <= ip <= b for k, a, b in _filters(t) if k == 2)


class _FilterHook:
    def before(self, t: Truth, ip: int) -> None:
        if not t.case.extra.get("filters") or getattr(t, "stopped", False):
            return
        if _in_stop(t, ip):
            # TraceStop: tracing stops before the first instruction of the range.
            if t.on:
                t.async_disable(ip)
            t.pw.tracestop()
            t.line("[stopped]")
            t.stopped = True
            return
        inside = _in_filter(t, ip)
        if inside and not t.on and not t.skip:
            # Entering the range (by a branch or linearly): TIP.PGE with the first IP in it.
            # Returns into the range are not compressed (calls made outside are not known).
            t.retstack.clear()
            _enable(t, ip)
        elif not inside and t.on:
            raise CaseError(f"{t.case.name}: the flow leaves the filter range at {ip:#x} without "
                            "a branch (not modelled)")

    def after(self, t: Truth, insn, nxt: int, traced: bool) -> list:
        if (not t.case.extra.get("filters") or not traced or getattr(t, "stopped", False)
                or _in_filter(t, nxt)):
            return []
        # The branch leaves the range: TIP.PGD with its target instead of its TNT/TIP.
        return [Event("", 0, "disable", [])]


RUN_HOOKS.append(_FilterHook())


def _filter_argv(b: Built) -> list[str]:
    out = []
    labels = b.image.labels
    for n, (kind, a, bb) in enumerate(b.case.extra.get("filters", [])):
        lo = labels[a] if a in labels else _int(a)
        hi = labels[bb] if bb in labels else _int(bb)
        out += [f"--filter:addr{n}_cfg", str(kind), f"--filter:addr{n}_a", hex(lo),
                f"--filter:addr{n}_b", hex(hi)]
    return out


DUMP_ARGV_HOOKS.append(_filter_argv)


# == CPU errata (--cpu): apl11 apl12 bdm64 bdm70 skd007 skd010 skd022 skl014 skl168 skz84 ===========
# Events that make the encoder write the packet pattern an affected CPU writes (the errata as Intel's
# specification updates describe them).  The expected flow stays what executed, so such a case passes
# only when the decoder applies the erratum's workaround for the @cpu the case names.  (SKL014 needs no
# event: ``@after JMP disable noip`` with an address filter in @ptxed is its pattern.)

def _erratum_mode_unknown(t, unknown: bool | None = None) -> bool:
    """After an OVF the decoder knows no execution mode until a PSB+ or a MODE.Exec tells it."""
    if unknown is not None:
        t._erratum_no_mode = unknown
    return getattr(t, "_erratum_no_mode", False)


def _erratum_drop_unanchored(t) -> None:
    """Drop the trailing instruction lines no packet anchors: the decoder learns of an overflow (OVF)
    before it walks on from its last branch packet (TNT/TIP) or IP event, so the instructions executed
    after that (and before the overflow) are lost to it."""
    while t.lines and not t.lines[-1].startswith("["):
        ip = int(t.lines[-1].split()[-1], 16)
        insn = next(t.md.disasm(bytes(t.uc.mem_read(ip, 16)), ip))
        if _kind(insn) not in (K_OTHER, K_JMP, K_CALL):
            break
        t.lines.pop()


def _erratum_overflow(t) -> None:
    _erratum_drop_unanchored(t)
    t.retstack.clear()
    t.pw.ovf()
    _erratum_mode_unknown(t, True)


@at_event("erratum-enable")
def _erratum_enable(t, ev, ip):
    """MODE.Exec and TIP.PGE, as ``enable`` but with an uncompressed IP (after an OVF or a PSB+ whose
    FUP the decoder must drop, the decoder's last IP is not the encoder's); after an overflow ptxed
    also reports the MODE.Exec."""
    t.ensure_started()
    t.pw.mode_exec(t.case.mode)
    t.full_ip(t.pw.tip_pge, ip)
    t.on = True
    word = "resumed" if t.pos == ip else "enabled"
    t.line(f"[{word}" + (f", ip: {ip:016x}" if t.evip else "") + "]")
    if _erratum_mode_unknown(t):
        t.line(f"[exec mode: {t.case.mode}-bit]")
        _erratum_mode_unknown(t, False)
    return None


@at_event("erratum-bdm70")
def _erratum_bdm70(t, ev, ip):
    """BDM70: tracing is about to be enabled here (TIP.PGE), and the PSB+ just before it wrongly holds
    a FUP (and MODE.Exec/MODE.TSX) although no packet generation is on yet."""
    if t.on:
        raise CaseError(f"{t.case.name}: erratum-bdm70 while tracing is on")
    pw = t.pw
    pw.psb()
    pw.mode_exec(t.case.mode)
    pw.fup(ip)
    if t.in_tx or "tsx" in ev.args:
        pw.mode_tsx(True)
    pw.psbend()
    _erratum_mode_unknown(t, False)
    return _erratum_enable(t, ev, ip)


@at_event("erratum-apl12")
def _erratum_apl12(t, ev, ip):
    """APL12: an overflow while FilterEn is clear (between TIP.PGD and TIP.PGE): OVF and then an
    unexpected FUP (with the IP where the overflow hit), although packet generation stays off."""
    if t.on:
        raise CaseError(f"{t.case.name}: erratum-apl12 while tracing is on")
    _erratum_overflow(t)
    t.full_ip(t.pw.fup, ip)
    t.line("[overflow]")
    return None


def _erratum_apl11(t, ip_or_none, insn=None) -> None:
    if insn is not None:               # the far transfer's own packet is the TIP.PGD after the OVF
        t.lines.pop()
    _erratum_overflow(t)
    if ip_or_none is None:
        t.pw.tip_pgd(None)
    else:
        t.full_ip(t.pw.tip_pgd, ip_or_none)
    t.on = False
    t.line("[overflow]")


@at_event("erratum-apl11")
def _erratum_apl11_at(t, ev, ip):
    """APL11: an overflow just as TraceEn is cleared here: OVF followed by TIP.PGD (no FUP)."""
    _erratum_apl11(t, None)
    return None


@after_event("erratum-apl11")
def _erratum_apl11_after(t, ev, insn, nxt):
    """APL11: an overflow during a far transfer that clears ContextEn: OVF, then the transfer's TIP.PGD
    (``noip``: IP suppressed)."""
    _erratum_apl11(t, None if "noip" in ev.args else nxt, insn)
    return True


@after_event("erratum-bdm64")
def _erratum_bdm64(t, ev, insn, nxt):
    """BDM64: a transactional abort right after this branch; the branch's own packet has a wrong target:
    a TIP to ``ev.args[0]`` (indirect branch) or the opposite TNT bit (conditional branch)."""
    kind = _kind(insn)
    if kind == K_JCC:
        t.pw.tnt(nxt == insn.address + insn.size)
    elif kind in (K_JMP_IND, K_CALL_IND, K_RET, K_FAR):
        if kind == K_CALL_IND:
            t.retstack.append(insn.address + insn.size)
        t.pw.tip(t.target(ev.args[0]))
    else:
        raise CaseError(f"{t.case.name}: erratum-bdm64 on {insn.mnemonic}")
    return True


@after_event("erratum-skd022")
def _erratum_skd022(t, ev, insn, nxt):
    """SKD022: a VM entry (VMLAUNCH/VMRESUME) that clears TraceEn writes FUP (the VM entry's own IP) and
    TIP.PGD without IP: like an asynchronous disable before the instruction, yet it executed."""
    if insn.mnemonic not in ("vmlaunch", "vmresume"):
        raise CaseError(f"{t.case.name}: erratum-skd022 on {insn.mnemonic}")
    t.pw.fup(insn.address)
    t.pw.tip_pgd(None)
    t.on = False
    t.pos = nxt
    t.line("[disabled]")
    return True


@at_event("erratum-skd010-ovf")
def _erratum_skd010_ovf(t, ev, ip):
    """SKD010: an overflow whose FUP is dropped: OVF only.  Nothing tells the decoder where the flow
    resumed, so the instructions up to the next packet (``erratum-skd010-tip``/``-psb``/``-pgd``) are
    lost to it like those of ``ovf N``."""
    if not t.on:
        raise CaseError(f"{t.case.name}: erratum-skd010-ovf while tracing is off")
    _erratum_overflow(t)
    t.on = False
    t.line("[overflow]")
    return None


@at_event("erratum-skd010-tip")
def _erratum_skd010_tip(t, ev, ip):
    """(after erratum-skd010-ovf) the indirect branch that just executed writes its TIP to here."""
    t.full_ip(t.pw.tip, ip)
    t.on = True
    return None


@at_event("erratum-skd010-psb")
def _erratum_skd010_psb(t, ev, ip):
    """(after erratum-skd010-ovf) the next PSB+, with the FUP of the current IP."""
    t.on = True
    t.psb_plus(ip)
    _erratum_mode_unknown(t, False)
    return None


@at_event("erratum-skd010-pgd")
def _erratum_skd010_pgd(t, ev, ip):
    """(after erratum-skd010-ovf) TraceEn/FilterEn is cleared here: TIP.PGD without IP."""
    t.pw.tip_pgd(None)
    t.on = False
    return None


@at_event("erratum-skd010-tsx")
def _erratum_skd010_tsx(t, ev, ip):
    """SKD010 at an XBEGIN: OVF without FUP, then the transaction's MODE.TSX and FUP.  The XBEGIN
    is executed here (its own line is lost with the FUP)."""
    insn = next(t.md.disasm(bytes(t.uc.mem_read(ip, 16)), ip))
    if insn.mnemonic != "xbegin" or not t.on:
        raise CaseError(f"{t.case.name}: erratum-skd010-tsx needs a traced xbegin")
    _erratum_overflow(t)
    t.line("[overflow]")
    t.xbegin_fallback = int(insn.op_str, 0)
    t.executed += 1
    nxt = ip + insn.size
    t.pw.mode_tsx(True)
    t.full_ip(t.pw.fup, nxt)
    t.line("[begin transaction]")
    t.in_tx = True
    return nxt


_SKD007_CYC_BYTE = (0x0B << 3) | 0x07      # CYC header: 5 low count bits, "more bytes follow"


@at_event("erratum-skd007")
def _erratum_skd007(t, ev, ip):
    """SKD007: an overflow (OVF, FUP) ``ovf N``-style, whose OVF is written right after the first byte
    of a multi-byte CYC in place of the CYC's remaining bytes."""
    if not t.on:
        raise CaseError(f"{t.case.name}: erratum-skd007 while tracing is off")
    _erratum_drop_unanchored(t)
    t.pw.flush_tnt()
    t.pw.buf.append(_SKD007_CYC_BYTE)
    t.skip = int(ev.args[0]) if ev.args else 0
    if not t.skip:
        t.resume_after_overflow(ip)
    _erratum_mode_unknown(t, True)
    return None


@at_event("erratum-skz84")
def _erratum_skz84(t, ev, ip):
    """SKZ84: in a VMX guest with TSC offsetting/scaling the TMA after a TSC is corrupted (CTC and
    FastCounter garbage, reserved bits set) and followed by one bogus byte."""
    tsc = _int(ev.args[0]) if ev.args else 0x1234_5678
    t.pw.tsc(tsc)
    t.pw.buf += bytes([0x02, 0x73, 0xA5, 0x5A, 0xC3, 0x3C, 0xFE, 0x96])
    return None


def perf_script_lines(path: Path, itrace: str) -> list[str]:
    """``perf script --itrace=ITRACE -F pid,tid,ip,addr,flags`` on a wrapped case, blanks collapsed."""
    r = subprocess.run(["perf", "script", "-i", str(path), f"--itrace={itrace}", "-F", "pid,tid,ip,addr,flags"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode:
        raise AssertionError(f"perf script --itrace={itrace} failed ({r.returncode}): {r.stderr[-1000:]}")
    return normalize(r.stdout)


def _drop_cpu_time(line: str) -> str:
    if line.startswith("instruction trace error"):
        return line
    parts = line.split(" ")
    return " ".join(parts[:1] + parts[3:])  # pid/tid [cpu] time: ...


def ptexport_branch_lines(path: Path, itrace: str) -> list[str]:
    """``ptexport dump branches --itrace=ITRACE`` on a wrapped case, in perf's timeless per-thread form
    (perf prints neither cpu nor time with Z on a per-thread file: both are dropped)."""
    import io

    from ptexport.cli import main
    out = io.StringIO()
    rc = main(["dump", "branches", str(path), f"--itrace={itrace}"], out=out)
    if rc:
        raise AssertionError(f"ptexport dump branches --itrace={itrace} failed ({rc}): {out.getvalue()[-1000:]}")
    return [_drop_cpu_time(line) for line in normalize(out.getvalue())]


@at_event("erratum-psb")
def _erratum_psb(t, ev, ip):
    """A PSB+ (FUP only while tracing is on); afterwards the decoder knows the execution mode again."""
    t.psb_plus(ip)
    _erratum_mode_unknown(t, False)
    return None


# == decode errors and resynchronisation (no-map, bad query; ptxed's recovery) ======================
#
# Faults make the trace disagree with the code in a defined way:
#
# * ``# @nomap START END``: the code between the labels START and END runs (and is traced) but is
#   left out of the image the decoder gets (two ``--image`` files around the hole), so the decoder
#   hits "no memory mapped at this address" where the flow first enters it;
# * ``@after LABEL fault-tip``: a conditional branch gets a TIP (to its real successor) instead of
#   its TNT bit; ``@after LABEL fault-tnt``: an indirect branch gets a TNT bit instead of its TIP;
#   ``@after LABEL fault-drop``: the branch's packet is missing.  The decoder's query at that
#   branch does not match the trace ("trace stream does not match query").
#
# The expected lines come from the recorded packets and the emulator's flow: the error line
# ``[<offset>, <ip>: error: <text>]`` carries the IP where the decoder stands (the unmapped
# instruction, or the branch whose query failed) and the offset ptxed reports: that of the packet
# the decoder holds after reading ahead to the next event (a TIP/FUP/TIP.PGE-ended event: its last
# packet; PSB+: its PSBEND; a TNT, a lone TIP.PGD, an OVF without FUP: the packet after it).
# Recovery: without ``--resync-on-error`` nothing until the next PSB after that packet, then the
# flow from there; with it, the flow continues at the next event that gives an IP (TNT skipped,
# TIP: its target, FUP+TIP: the interrupt, OVF, PSB+ with FUP, TIP.PGE after a "[disabled]",
# TIP.PGD: "[disabled]", MODE.TSX/PTWRITE+FUP: that event at its IP).

import types as _types

from ptexport.synth import ptencode as _pe

_FAULT_NOMAP = "no memory mapped at this address"
_FAULT_QUERY = "trace stream does not match query"
_PKT_METHODS = ("ip_packet", "psb", "psbend", "mode_exec", "mode_exec64", "mode_tsx", "pip", "vmcs",
                "tracestop", "mnt", "cfe", "evd", "pad", "ovf", "tsc", "tma", "mtc", "cyc", "cbr",
                "ptwrite", "mwait", "pwre", "exstop", "pwrx")
_IP_KIND = {_pe.OP_TIP: "tip", _pe.OP_TIP_PGE: "tip_pge", _pe.OP_TIP_PGD: "tip_pgd", _pe.OP_FUP: "fup"}
_TIMING = ("pad", "tsc", "tma", "mtc", "cyc", "mode_exec", "mode_exec64", "mnt")


def _nomap_directive(case: Case, words: list[str]) -> None:
    case.extra.setdefault("nomap", []).append((words[0], words[1]))


CASE_DIRECTIVES["nomap"] = _nomap_directive


def _has_faults(case: Case) -> bool:
    return bool(case.extra.get("nomap")) or any(ev.name.startswith("fault-") for ev in case.events)


@dataclass
class _Pkt:
    off: int
    kind: str
    ip: int | None = None
    flag: bool = False        # PTWRITE: IP bit


class _Recorder:
    """Packets as written (with offsets) and the expected lines around them, in order."""

    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.pkts: list[_Pkt] = []
        self.tl: list[tuple] = []     # ("pkt", index) | ("line", text, insn_ip, npkts, tnt) | ("fault", ...)
        self.depth = 0
        self.insn_ip = None
        pw = truth.pw
        orig_flush = pw.flush_tnt

        def flush_tnt():
            if pw.tnt_pending:
                off = len(pw.buf)
                orig_flush()
                self.add(_Pkt(off, "tnt"))

        pw.flush_tnt = flush_tnt
        for name in _PKT_METHODS:
            setattr(pw, name, self._wrap(pw, name, getattr(pw, name)))
        orig_line, orig_insn_line = truth.line, truth.insn_line

        def line(s: str) -> None:
            ip, self.insn_ip = self.insn_ip, None
            self.tl.append(("line", s, ip, len(self.pkts), pw.tnt_pending))
            orig_line(s)

        def insn_line(ip: int) -> None:
            self.insn_ip = ip
            orig_insn_line(ip)

        truth.line, truth.insn_line = line, insn_line

    def add(self, pkt: _Pkt) -> None:
        self.tl.append(("pkt", len(self.pkts)))
        self.pkts.append(pkt)

    def _wrap(self, pw, name, fn):
        def wrapped(*args, **kw):
            if self.depth:
                return fn(*args, **kw)
            pw.flush_tnt()
            off = len(pw.buf)
            self.depth += 1
            try:
                r = fn(*args, **kw)
            finally:
                self.depth -= 1
            if len(pw.buf) > off or name == "pad":
                if name == "ip_packet":
                    self.add(_Pkt(off, _IP_KIND[args[0]], args[1]))
                elif name == "ptwrite":
                    self.add(_Pkt(off, "ptw", None, bool(kw.get("ip", args[2] if len(args) > 2 else False))))
                else:
                    self.add(_Pkt(off, name))
            return r
        return wrapped

    def fault(self, kind: str, ip: int, through_tnt: bool = False) -> None:
        self.truth.pw.flush_tnt()
        self.tl.append(("fault", kind, ip, len(self.pkts), through_tnt))

    # -- what the decoder sees ------------------------------------------------------------------
    def off(self, i: int) -> int:
        return self.pkts[i].off if i < len(self.pkts) else len(self.truth.pw.buf)

    def consumed(self, npkts: int, tnt: int) -> int:
        """Index of the first packet the decoder has not consumed (pending TNT bits: their packet is)."""
        if not tnt:
            return npkts
        for i in range(npkts, len(self.pkts)):
            if self.pkts[i].kind == "tnt":
                return i + 1
        raise CaseError(f"{self.truth.case.name}: TNT bits never written")

    def event(self, i: int) -> dict | None:
        """The event the decoder reads ahead to from packet ``i``: kind, first/last packet, offset, ip."""
        pk, n = self.pkts, len(self.pkts)
        start, bound, fup, bfirst = i, None, None, i
        while i < n:
            p = pk[i]
            k = p.kind
            if k in _TIMING:
                i += 1
                continue
            ev = dict(first=start, last=i, ip=p.ip, kind=k)
            if k == "tnt":
                return ev | dict(offset=self.off(i + 1))
            if k == "tip":
                if fup is not None:
                    return ev | dict(kind="async_branch", first=fup, ip=pk[fup].ip, to=p.ip, offset=p.off)
                return ev | dict(offset=p.off)
            if k == "tip_pge":
                return ev | dict(kind="enabled", offset=p.off)
            if k == "tip_pgd":
                if fup is not None:
                    return ev | dict(kind="async_disabled", offset=p.off)
                return ev | dict(kind="disabled", offset=self.off(i + 1))
            if k == "fup":
                if bound is not None:
                    return ev | dict(kind=bound, first=bfirst, offset=p.off)
                fup = i
                i += 1
                continue
            if k == "psb":
                j = i
                hdr_ip = None
                while j < n and pk[j].kind != "psbend":
                    if pk[j].kind == "fup":
                        hdr_ip = pk[j].ip
                    j += 1
                return dict(kind="psb", first=i, last=j, ip=hdr_ip, offset=self.off(j))
            if k == "mode_tsx":
                bound = "tsx"
            elif k == "ptw" and p.flag:
                bound = "ptwrite"
            elif k == "ovf":
                bound = "overflow"
                nxt = next((q for q in pk[i + 1:] if q.kind not in ("pad", "tsc", "tma", "mtc", "cyc", "cbr")), None)
                if nxt is None or nxt.kind != "fup":
                    return ev | dict(kind="overflow", ip=None, offset=self.off(i + 1))
            elif k in ("ptw", "cbr", "pwrx", "tracestop"):
                return ev | dict(kind=k, ip=None, offset=self.off(i + 1))
            else:
                raise CaseError(f"{self.truth.case.name}: resync model does not know packet {k!r}")
            bfirst = i
            i += 1
        return None

    def recovery(self, ev: dict | None, err_off: int, resync: bool):
        """(packet index to go on after, extra lines) or None (no more flow)."""
        if not resync:
            for i, p in enumerate(self.pkts):
                if p.kind == "psb" and p.off > err_off:
                    return i, []
            return None
        while ev is not None:
            k = ev["kind"]
            if k == "tip" and ev["ip"] is not None:
                return ev["last"], []
            if k == "enabled":
                return ev["last"], ["[disabled]"]
            if k in ("disabled", "async_branch"):
                return ev["first"], []
            if k == "overflow":
                return ev["first"], []
            if k == "psb" and ev["ip"] is not None:
                return ev["first"], []
            if k in ("tsx", "ptwrite"):
                return ev["first"], ["@insn-at-ip"]
            ev = self.event(ev["last"] + 1)
        return None

    # -- the expected lines ---------------------------------------------------------------------
    def replay(self) -> list[str]:
        case = self.truth.case
        resync = "--resync-on-error" in case.ptxed
        holes = [(self.truth.labels[a], self.truth.labels[b]) for a, b in case.extra.get("nomap", [])]
        out: list[str] = []
        lost = None          # packet index where the flow comes back
        last_insn = None     # the last instruction line seen (ip, text), lost or not
        fresh = False        # right after a recovery: "[resumed]" is "[enabled]" for the decoder
        errors = 0
        for ent in self.tl:
            if ent[0] == "pkt":
                if lost is not None and ent[1] == lost[0]:
                    for extra in lost[1]:
                        if extra == "@insn-at-ip":
                            if last_insn and last_insn[0] == self.event(lost[0])["ip"]:
                                out.append(last_insn[1])
                        else:
                            out.append(extra)
                    lost, fresh = None, True
                continue
            if ent[0] == "line":
                _, text, ip, npkts, tnt = ent
                if ip is not None:
                    last_insn = (ip, text)
                if lost is not None:
                    continue
                if ip is not None and any(a <= ip < b for a, b in holes):
                    ev = self.event(self.consumed(npkts, tnt))
                    if ev is not None and ev["kind"] == "overflow":
                        raise CaseError(f"{case.name}: an overflow is pending at {ip:#x}: the decoder "
                                        "applies it before it fetches the unmapped instruction")
                    lost = self._error(out, ev, ip, _FAULT_NOMAP, resync)
                    errors += 1
                    continue
                if fresh and ip is None and text.startswith("[resumed"):
                    text = "[enabled" + text[len("[resumed"):]
                if ip is not None:
                    fresh = False
                out.append(text)
                continue
            _, kind, ip, npkts, through_tnt = ent
            if lost is not None:
                continue
            if kind == "status":
                # The PSB+ (written right after the fault) binds at its FUP IP; its MODE.Exec is the
                # status that disagrees: ptxed reports that packet, resync fails the same way, and
                # decoding restarts at the next PSB.
                j = npkts
                while self.pkts[j].kind != "mode_exec":
                    j += 1
                off = self.pkts[j].off
                out.append(f"[{off:x}, {ip:x}: error: bad status update]")
                if resync:
                    out.append(f"[{off:x}, {ip:x}: resync error: bad status update]")
                lost = self.recovery(None, off, False) or (len(self.pkts) + 1, [])
                errors += 1
                continue
            start = self.consumed(npkts, 1 if through_tnt else 0)
            ev = self.event(start)
            want_tnt = kind in ("tip", "drop-jcc")
            if ev is not None and ((want_tnt and ev["kind"] == "tnt") or (not want_tnt and ev["kind"] == "tip")):
                raise CaseError(f"{case.name}: the fault at {ip:#x} would go unnoticed "
                                f"(the decoder takes the {ev['kind']} at {ev['offset']:#x})")
            lost = self._error(out, ev, ip, _FAULT_QUERY, resync)
            errors += 1
        if not errors:
            raise CaseError(f"{case.name}: a fault case without a decode error")
        return out

    def _error(self, out: list[str], ev, ip: int, text: str, resync: bool):
        off = ev["offset"] if ev is not None else len(self.truth.pw.buf)
        out.append(f"[{off:x}, {ip:x}: error: {text}]")
        rec = self.recovery(ev, off, resync)
        return rec if rec is not None else (len(self.pkts) + 1, [])


def _fault_after(kind: str):
    def fn(truth: Truth, ev: Event, insn, nxt: int) -> bool:
        rec = getattr(truth, "_resync_rec", None)
        if rec is None:
            raise CaseError(f"{truth.case.name}: fault events need the resync recorder")
        k = _kind(insn)
        if k == K_RET and truth.retstack:
            truth.retstack.pop()
        if kind == "tip":
            if k != K_JCC:
                raise CaseError(f"{truth.case.name}: fault-tip needs a conditional branch")
            rec.fault("tip", insn.address)
            truth.pw.tip(nxt)
        elif kind == "tnt":
            if k not in (K_JMP_IND, K_CALL_IND, K_RET, K_FAR):
                raise CaseError(f"{truth.case.name}: fault-tnt needs an indirect branch")
            if k == K_CALL_IND:
                truth.retstack.append(insn.address + insn.size)
            rec.fault("tnt", insn.address, through_tnt=True)
            truth.pw.tnt(True)
            truth.pw.flush_tnt()
        else:
            if k == K_CALL_IND:
                truth.retstack.append(insn.address + insn.size)
            rec.fault("drop-jcc" if k == K_JCC else "drop", insn.address)
        return True
    return fn


for _k in ("tip", "tnt", "drop"):
    after_event(f"fault-{_k}")(_fault_after(_k))

_resync_orig_run = Truth.run


def _resync_run(self: Truth):
    if not _has_faults(self.case):
        return _resync_orig_run(self)
    self._resync_rec = rec = _Recorder(self)
    pt, _ = _resync_orig_run(self)
    self.lines[:] = rec.replay()
    return pt, self.lines


Truth.run = _resync_run

_resync_orig_build = build
_resync_orig_dump_argv = dump_argv


def image_segments(b: Built) -> list[tuple[bytes, int]]:
    """The code the decoder gets: (bytes, address) pieces, without the case's @nomap holes."""
    segs = [(b.image.code, b.image.org)]
    for a, z in b.case.extra.get("nomap", []):
        lo, hi = b.image.labels[a], b.image.labels[z]
        new = []
        for code, org in segs:
            end = org + len(code)
            if hi <= org or lo >= end:
                new.append((code, org))
                continue
            if lo > org:
                new.append((code[: lo - org], org))
            if hi < end:
                new.append((code[hi - org:], hi))
        segs = new
    return segs


def build(case: Case, workdir: Path) -> Built:  # noqa: F811
    b = _resync_orig_build(case, workdir)
    if case.extra.get("nomap"):
        b.images = []
        for n, (code, org) in enumerate(image_segments(b)):
            p = workdir / f"{case.name}.code{n}"
            p.write_bytes(code)
            b.images.append((p, org))
    return b


def dump_argv(b: Built, *, block: bool = False, cpu: str | None = None) -> list[str]:  # noqa: F811
    argv = _resync_orig_dump_argv(b, block=block, cpu=cpu)
    images = getattr(b, "images", None)
    if images:
        i = argv.index("--image")
        argv[i:i + 2] = [x for p, org in images for x in ("--image", f"{p}:{org:#x}")]
    return argv


# == timing and power events (TSC/TMA/MTC/CYC/CBR, --event:time/tick; MWAIT/PWRE/EXSTOP/PWRX) ========
#
# Timing.  ``DecoderTime`` is what a decoder knows of the time at each point of the stream, computed
# from the timing packets written so far by the SDM's formulas (vol. 3C "Tracing and Time"):
#   TSC  sets the time;  TMA(CTC, FC): the CTC edge before that TSC was at TSC - FC;
#   MTC(payload): CTC = payload << MTCFreq (upper bits from the last CTC, wrapping at 2^(MTCFreq+8));
#                 time = time of the last CTC edge + CTC delta * CPUID.15H EBX/EAX;
#   CYC(n): time += n * (TSC ticks per core cycle), where that ratio is known from CBR and the nominal
#           frequency (--nom-freq: ratio = nom/cbr), or calibrated from two MTCs (CTC delta * EBX/EAX
#           over the cycles counted in between), or from two PSB+ TSCs (TSC delta over the cycles);
#           without a ratio a CYC cannot be converted and is lost; an OVF forgets the ratio unless
#           --insn:keep-tcal-on-ovf.
# Expected values must be exact (the case's clock is chosen so): an inexact one is a CaseError, so no
# rounding convention of the decoder under test leaks in.
#
# ``@clock key=value ...`` runs a hardware clock beside the emulator: every instruction takes ``cpi``
# core cycles; TSC ticks per cycle = nom/cbr; the CTC (ART) ticks once every ebx/eax TSC ticks; with
# ``mtc`` an MTC is written at each 2^mtcfreq CTC boundary, with ``cyc`` a CYC precedes every
# CYC-eligible packet (and each MTC) with the cycles since the last CYC; every PSB+ carries TSC (and
# TMA with mtc) and CBR.  Keys: tsc0 (the TSC at CTC edge ctc0) start (TSC ticks from there to the
# first instruction) cpi cbr nom eax ebx mtcfreq ctc0; flags mtc cyc no-nom (leave
# --nom-freq off, for calibration).  It adds the matching ptxed options itself.
#
# Scripted timing packets: ``@at L tsc V``, ``tma CTC FC``, ``mtc PAYLOAD``, ``cyc N``, ``cbr RATIO``.
#
# What ptxed prints (its conventions, libipt's ptxed): with --event:time every event line carries the
# decoder's time at the packet that completes the event; with --event:tick a ``[tick]`` follows a
# branch whose TIP, or whose TNT packet's first bit, comes at a time other than the last event's.
# A mid-stream CBR is a ``[cbr: N]`` event (in PSB+ a status update, not printed).
#
# Power (vol. 3C MWAIT/PWRE/EXSTOP/PWRX packets).  ``mwait`` with EAX hints (C-state EAX[7:4]+1,
# sub-state EAX[3:0]; 0xF0 = C0: no packets) writes MWAIT (if ContextEn), PWRE, EXSTOP (IP bit =
# ContextEn) and a FUP with the MWAIT's IP (which MWAIT and EXSTOP bind to); on wake PWRX and, with a
# clock, TSC (TMA) CBR.  ContextEn stays set while tracing is off (address filtering) unless the case
# says ``@pwr-ctx cpl`` (tracing off = wrong CPL: no MWAIT, EXSTOP without IP).
# ``@wake LABEL[#N] [int|st|hw][+...] [last=V] [deepest=V] [sleep=TICKS]``: how the MWAIT at LABEL
# wakes (PWRX C-states in the MWAIT encoding, default the entered state; default wake: int).
# ptxed binds a PWRE to the next PWRE/PWRX (it prints when that packet is decoded), so the PWRE line
# comes after the EXSTOP/MWAIT lines bound to the FUP; FUP-bound events print before the instruction
# at their IP (so before the MWAIT instruction itself).

from fractions import Fraction as _F  # noqa: E402

from ptexport.synth import ptencode as _pte  # noqa: E402

_PWRX_REASON = {"int": 1, "st": 4, "hw": 8}


def _exact(x, what: str, case: Case) -> int:
    x = _F(x)
    if x.denominator != 1:
        raise CaseError(f"{case.name}: inexact {what} ({x}); choose an exact clock")
    return int(x)


class DecoderTime:
    """The time a decoder can know at the current point of the stream (SDM formulas)."""

    def __init__(self, case: Case, opts: dict) -> None:
        self.case = case
        self.mtc_freq = opts.get("mtc_freq", 0)
        eax, ebx = opts.get("eax", 0), opts.get("ebx", 0)
        self.ctc_ratio = _F(ebx, eax) if eax and ebx else None
        self.nom = opts.get("nom", 0)
        self.keep_tcal = opts.get("keep_tcal", False)
        self.have_tsc = False
        self.t = _F(0)
        self.have_tma = False
        self.edge = _F(0)          # time of the last known CTC edge
        self.ctc = 0               # and its CTC (bits mtcfreq+7:0)
        self.reset_cal()

    def reset_cal(self, keep_ratio: bool = False) -> None:
        if not keep_ratio:
            self.ratio = None      # TSC ticks per core cycle, when known
        self.cal_ctc = None        # CTC of the last MTC counted for calibration
        self.cal_cycles = 0
        self.cal_tsc = None        # the last TSC (PSB+ pair calibration)
        self.cyc_since_tsc = 0

    @property
    def mask(self) -> int:
        return (1 << (self.mtc_freq + 8)) - 1

    def now(self) -> int:
        return _exact(self.t, "time", self.case)

    def set_ratio(self, r) -> None:
        r = _F(r)
        _exact(r * 256, "cycle ratio", self.case)
        self.ratio = r

    def tsc(self, v: int, header: bool = False) -> None:
        if header and self.cal_tsc is not None and self.cyc_since_tsc and self.cal_ctc is None:
            self.set_ratio(_F(v - self.cal_tsc, self.cyc_since_tsc))
        self.cal_tsc = v
        self.cyc_since_tsc = 0
        self.have_tsc = True
        self.have_tma = False
        self.t = _F(v)

    def tma(self, ctc: int, fc: int) -> None:
        if self.mtc_freq + 8 > 16:
            raise CaseError(f"{self.case.name}: TMA with mtcfreq > 8 is not modelled")
        self.have_tma = True
        self.edge = self.t - fc
        self.ctc = ctc & self.mask

    def mtc(self, payload: int) -> None:
        ctc = (payload << self.mtc_freq) & self.mask
        if self.cal_ctc is None:
            self.cal_ctc, self.cal_cycles = ctc, 0
        elif self.cal_cycles:
            delta = (ctc - self.cal_ctc) & self.mask
            self.set_ratio(delta * self.ctc_ratio / self.cal_cycles)
            self.cal_ctc, self.cal_cycles = ctc, 0
        if not self.have_tsc or not self.have_tma:
            return                 # MTC counts from a TSC+TMA
        delta = (ctc - self.ctc) & self.mask
        self.edge = self.t = self.edge + delta * self.ctc_ratio
        self.ctc = ctc

    def cyc(self, n: int) -> None:
        self.cal_cycles += n
        self.cyc_since_tsc += n
        if self.ratio is not None:
            self.t += _exact(n * self.ratio, "CYC time", self.case)

    def cbr(self, ratio: int, header: bool = False) -> None:
        if not header:
            self.reset_cal()
        if self.nom:
            self.set_ratio(_F(self.nom, ratio))

    def ovf(self) -> None:
        self.reset_cal(keep_ratio=self.keep_tcal)


def _cyc_bytes(pw, cycles: int) -> None:
    """A CYC packet (SDM: 5 bits in the header byte, then 7 bits a byte while bit 0 says more)."""
    if cycles < 32:
        pw.buf.append(((cycles & 0x1F) << 3) | 0x03)
        return
    pw.buf.append(((cycles & 0x1F) << 3) | 0x07)
    cycles >>= 5
    while True:
        b = (cycles & 0x7F) << 1
        cycles >>= 7
        pw.buf.append(b | 1 if cycles else b)
        if not cycles:
            break


class HwClock:
    """The hardware clocks of an ``@clock`` case (TSC, core cycles, CTC) and the packets they give."""

    def __init__(self, truth: "Truth", o: dict) -> None:
        self.truth = truth
        self.o = o
        self.k = _F(o["nom"], o["cbr"])              # TSC ticks per core cycle
        self.r = _F(o["ebx"], o["eax"])              # TSC ticks per CTC tick
        self.now = _F(o["tsc0"] + o.get("start", 0))  # tsc0: the TSC at CTC ctc0; start: after it
        self.cycles = 0                              # cycles since the last CYC packet
        self.cbr = o["cbr"]

    def ctc_at(self, t) -> _F:
        return self.o["ctc0"] + (t - self.o["tsc0"]) / self.r

    def live(self) -> bool:
        t = self.truth
        return t.started and not t.skip

    def emit_cyc(self) -> None:
        if self.o["cyc"] and self.cycles and self.live():
            t = self.truth
            n, self.cycles = self.cycles, 0
            _cyc_bytes(t.pw, n)            # before any pending TNT (no flush)
            t.dtime.cyc(n)

    def advance(self, n: int) -> None:
        """``n`` core cycles pass (an instruction retires at the end); MTCs at CTC boundaries."""
        t, case = self.truth, self.truth.case
        target = self.now + n * self.k
        if self.o["mtc"]:
            period = 1 << self.o["mtcfreq"]
            b = (int(self.ctc_at(self.now)) // period + 1) * period
            while b <= self.ctc_at(target):
                tb = self.o["tsc0"] + (b - self.o["ctc0"]) * self.r
                if self.live():
                    t.pw.flush_tnt()               # the branches before the boundary (CYC now)
                self.cycles += _exact((tb - self.now) / self.k, "cycles to a CTC edge", case)
                self.now = tb
                if self.live():
                    self.emit_cyc()
                    payload = (b >> self.o["mtcfreq"]) & 0xFF
                    _pte.PacketWriter.mtc(t.pw, payload)
                    t.dtime.mtc(payload)
                b += period
        self.cycles += _exact((target - self.now) / self.k, "cycles", case)
        self.now = target

    def timing_packets(self, header: bool) -> None:
        """TSC (TMA) CBR, as in PSB+ and on wake from a C-state."""
        t, case, pw = self.truth, self.truth.case, self.truth.pw
        tsc = _exact(self.now, "TSC", case)
        _pte.PacketWriter.tsc(pw, tsc)
        t.dtime.tsc(tsc, header)
        if self.o["mtc"]:
            ctc = int(self.ctc_at(self.now))
            fc = _exact(self.now - (self.o["tsc0"] + (ctc - self.o["ctc0"]) * self.r), "FC", case)
            _pte.PacketWriter.tma(pw, ctc & 0xFFFF, fc)
            t.dtime.tma(ctc, fc)
        _pte.PacketWriter.cbr(pw, self.cbr)
        t.dtime.cbr(self.cbr, header)
        if not header:
            t.line(f"[cbr: {self.cbr:x}]")


class TimedWriter(_pte.PacketWriter):
    """PacketWriter with a CYC before CYC-eligible packets and ptxed's tick lines."""

    def __init__(self, truth: "Truth", **kw) -> None:
        super().__init__(**kw)
        self.truth = truth
        self.tick_at = None        # where a tick line for the pending TNT packet would go

    def _cyc(self) -> None:
        clock = self.truth.clock
        if clock is not None:
            clock.emit_cyc()

    def tnt(self, taken: bool) -> None:
        if not self._tnt_n:
            self.tick_at = len(self.truth.lines)
        super().tnt(taken)

    def flush_tnt(self) -> None:
        if self._tnt_n:
            self._cyc()
            self.truth.tick(self.tick_at)
        super().flush_tnt()

    def ip_packet(self, opcode: int, ip) -> None:
        self.flush_tnt()
        self._cyc()
        super().ip_packet(opcode, ip)
        if opcode == _pte.OP_TIP and getattr(self.truth, "_in_encode", False):
            self.truth.tick(None)

    def psb(self) -> int:
        self.flush_tnt()
        self._cyc()
        return super().psb()

    def psbend(self) -> None:
        t = self.truth
        if t.clock is not None:
            t.clock.timing_packets(header=True)
        super().psbend()
        t.last_ev_time = t.dtime.now() if t.dtime.have_tsc else 0


def _eligible(name):
    base = getattr(_pte.PacketWriter, name)

    def method(self, *a, **kw):
        self.flush_tnt()
        self._cyc()
        return base(self, *a, **kw)
    method.__name__ = name
    return method


for _name in ("mode_exec", "mode_tsx", "pip", "vmcs", "ptwrite", "mwait", "pwre", "exstop", "pwrx",
              "tracestop", "cfe", "evd"):
    if hasattr(_pte.PacketWriter, _name):
        setattr(TimedWriter, _name, _eligible(_name))


def _clock_directive(case: Case, words: list[str]) -> None:
    o = {"tsc0": 0x10000, "cpi": 1, "cbr": 0x10, "nom": 0x20, "eax": 2, "ebx": 6, "mtcfreq": 2,
         "ctc0": 0x100, "mtc": False, "cyc": False, "nonom": False}
    for w in words:
        k, _, v = w.partition("=")
        k = k.replace("-", "")
        if not v:
            o[k] = True
        else:
            o[k] = _int(v)
    case.extra["clock"] = o
    case.ptxed += ["--cpuid-0x15.eax", str(o["eax"]), "--cpuid-0x15.ebx", str(o["ebx"]),
                   "--mtc-freq", str(o["mtcfreq"])]
    if not o["nonom"]:
        case.ptxed += ["--nom-freq", str(o["nom"])]


def _wake_directive(case: Case, words: list[str]) -> None:
    label, _, nth = words[0].partition("#")
    w = {"reason": "int"}
    for word in words[1:]:
        k, _, v = word.partition("=")
        if v:
            w[k] = _int(v)
        else:
            w["reason"] = k
    case.extra.setdefault("wake", {})[(label, int(nth or 1))] = w


def _pwr_ctx_directive(case: Case, words: list[str]) -> None:
    case.extra["pwr_ctx"] = words[0]


CASE_DIRECTIVES["clock"] = _clock_directive
CASE_DIRECTIVES["wake"] = _wake_directive
CASE_DIRECTIVES["pwr-ctx"] = _pwr_ctx_directive


def _ptxed_opt(case: Case, name: str):
    p = case.ptxed
    return _int(p[p.index(name) + 1]) if name in p else 0


_tp_orig_truth_init = Truth.__init__
_tp_orig_truth_line = Truth.line
_tp_orig_truth_step = Truth.step
_tp_orig_truth_encode = Truth.encode


def _truth_init(self, case: Case, image: Image) -> None:
    _tp_orig_truth_init(self, case, image)
    p = case.ptxed
    self.ev_time = "--event:time" in p
    self.ev_tick = "--event:tick" in p
    self.dtime = DecoderTime(case, {"mtc_freq": _ptxed_opt(case, "--mtc-freq"),
                                    "eax": _ptxed_opt(case, "--cpuid-0x15.eax"),
                                    "ebx": _ptxed_opt(case, "--cpuid-0x15.ebx"),
                                    "nom": _ptxed_opt(case, "--nom-freq"),
                                    "keep_tcal": "--insn:keep-tcal-on-ovf" in p
                                    or "--block:keep-tcal-on-ovf" in p})
    self.last_ev_time = 0
    self.pwre_pending: list[str] = []
    self.clock = None
    timed = ("clock" in case.extra or self.ev_time or self.ev_tick
             or any(ev.name in ("tsc", "tma", "mtc", "cyc", "cbr") for ev in case.events))
    if timed:
        self.pw = TimedWriter(self, ip_mode=case.ip_mode, tnt_mode=case.tnt_mode)
        if "clock" in case.extra:
            self.clock = HwClock(self, case.extra["clock"])


_ERROR_LINE = re.compile(r"\[[0-9a-f]+, [0-9a-f]+: ")


def _truth_line(self, s: str) -> None:
    if (getattr(self, "dtime", None) is not None and s.startswith("[")
            and s not in ("[end of trace]", "[block]") and not _ERROR_LINE.match(s)):
        d = self.dtime
        have, t = d.have_tsc, d.now()
        if s.startswith("[overflow") and getattr(self, "_ovf_time", None) is not None:
            have, t = self._ovf_time[0], _exact(self._ovf_time[1], "time", self.case)
        self.last_ev_time = t if have else 0
        if self.ev_time and have:
            s = f"[{t:016x}  " + s[1:]
    _tp_orig_truth_line(self, s)


def _truth_tick(self, at) -> None:
    """A branch's TNT/TIP was decoded at the current time: ptxed's tick, if the time moved."""
    if not self.ev_tick or not self.on:
        return
    d = self.dtime
    now = d.now() if d.have_tsc else 0
    if now == self.last_ev_time:
        return
    self.last_ev_time = now
    s = f"[{now:016x}  tick]" if self.ev_time and d.have_tsc else "[tick]"
    if at is None:
        self.lines.append(s)
    else:
        self.lines.insert(at, s)


def _truth_step(self, insn) -> int:
    if self.clock is not None:
        self.clock.advance(self.clock.o["cpi"])
    return _tp_orig_truth_step(self, insn)


def _truth_encode(self, insn, nxt: int, after) -> None:
    self._in_encode = True
    try:
        _tp_orig_truth_encode(self, insn, nxt, after)
    finally:
        self._in_encode = False


Truth.__init__ = _truth_init
Truth.line = _truth_line
Truth.tick = _truth_tick
Truth.step = _truth_step
Truth.encode = _truth_encode


# -- power events --------------------------------------------------------------------------------

def _ctx_en(t: Truth) -> bool:
    return t.on if t.case.extra.get("pwr_ctx") == "cpl" else True


def _pwre_packet(t: Truth, state: int, sub: int, hw: bool) -> None:
    t.pw.pwre(hw, state, sub)
    # ptxed reports a PWRE when the next PWRE/PWRX is decoded.
    _pwr_publish(t)
    t.pwre_pending.append(f"[pwre c{(state + 1) & 0xF}.{(sub + 1) & 0xF}" + (" hw" if hw else "") + "]")


def _pwr_publish(t: Truth) -> None:
    pending, t.pwre_pending = t.pwre_pending, []
    for s in pending:
        t.line(s)


def _pwrx_packet(t: Truth, last: int, deepest: int, reason: str | int) -> None:
    if isinstance(reason, str):
        bits = 0
        for r in reason.split("+"):
            bits |= _PWRX_REASON[r] if r in _PWRX_REASON else _int(r)
    else:
        bits = reason
    t.pw.pwrx(last, deepest, bits)
    _pwr_publish(t)
    s = "[pwrx " + "".join(f"{n}: " for n, b in (("int", 1), ("st", 4), ("hw", 8)) if bits & b)
    t.line(s + f"c{(last + 1) & 0xF} (c{(deepest + 1) & 0xF})]")


def _exstop_packet(t: Truth, ip: int, with_ip: bool) -> None:
    t.pw.exstop(with_ip)
    if with_ip:
        t.pw.fup(ip)
        t.line("[exstop" + (f", ip: {ip:016x}" if t.evip else "") + "]")
    else:
        t.line("[exstop]")


@at_event("pwre")
def _ev_pwre(t: Truth, ev: Event, ip: int):
    """``pwre STATE SUB [hw]``: PWRE with the resolved C-state/sub-state fields (MWAIT encoding)."""
    _pwre_packet(t, _int(ev.args[0]), _int(ev.args[1]), "hw" in ev.args)


@at_event("exstop")
def _ev_exstop(t: Truth, ev: Event, ip: int):
    """``exstop [noip]``: EXSTOP with IP and a FUP at this instruction (ContextEn), or without."""
    _exstop_packet(t, ip, "noip" not in ev.args)


@at_event("pwrx")
def _ev_pwrx(t: Truth, ev: Event, ip: int):
    """``pwrx LAST DEEPEST REASON``: REASON bits or int/st/hw joined by '+'."""
    a = ev.args
    reason = a[2] if not re.fullmatch(r"(0x)?[0-9a-fA-F]+", a[2]) else _int(a[2])
    _pwrx_packet(t, _int(a[0]), _int(a[1]), reason)


def _mwait_insn(self: Truth, insn) -> None:
    eax = self.uc.reg_read(X.UC_X86_REG_EAX) & 0xFFFFFFFF
    ecx = self.uc.reg_read(X.UC_X86_REG_ECX) & 0xFFFFFFFF
    state, sub = (eax >> 4) & 0xF, eax & 0xF
    if state == 0xF or self.skip or not self.started:
        return                       # MWAIT to C0 (or packets lost): nothing
    ip = insn.address
    visit = self.visits.get(ip, 1)
    wake = {"reason": "int"}
    for (label, n), w in self.case.extra.get("wake", {}).items():
        if self.labels.get(label) == ip and n == visit:
            wake = w
    traced = self.on
    # The MWAIT instruction's line is already out; its FUP-bound events print before it.
    insn_line = self.lines.pop() if traced else None
    ctx = _ctx_en(self)
    if ctx:
        self.pw.mwait(eax, ecx)
    _pwre_packet(self, state, sub, False)
    self.pw.exstop(ctx)
    if ctx:
        self.pw.fup(ip)
        tail = f", ip: {ip:016x}" if self.evip else ""
        self.line(f"[mwait {eax & 0xFF:x} {ecx & 3:x}{tail}]")
        self.line(f"[exstop{tail}]")
    else:
        self.line("[exstop]")
    # asleep: the TSC runs, core cycles (and PT) do not
    if self.clock is not None:
        self.clock.now += wake.get("sleep", 0x400)
    _pwrx_packet(self, wake.get("last", state), wake.get("deepest", state), wake["reason"])
    if self.clock is not None:
        self.clock.timing_packets(header=False)
    if insn_line is not None:
        self.lines.append(insn_line)


Truth.mwait_insn = _mwait_insn


# -- scripted timing packets ---------------------------------------------------------------------

@at_event("tsc")
def _ev_tsc(t: Truth, ev: Event, ip: int):
    t.pw.flush_tnt()
    _pte.PacketWriter.tsc(t.pw, _int(ev.args[0]))
    t.dtime.tsc(_int(ev.args[0]))


@at_event("tma")
def _ev_tma(t: Truth, ev: Event, ip: int):
    _pte.PacketWriter.tma(t.pw, _int(ev.args[0]), _int(ev.args[1]))
    t.dtime.tma(_int(ev.args[0]), _int(ev.args[1]))


@at_event("mtc")
def _ev_mtc(t: Truth, ev: Event, ip: int):
    _pte.PacketWriter.mtc(t.pw, _int(ev.args[0]))
    t.dtime.mtc(_int(ev.args[0]) & 0xFF)


@at_event("cyc")
def _ev_cyc(t: Truth, ev: Event, ip: int):
    _cyc_bytes(t.pw, _int(ev.args[0]))
    t.dtime.cyc(_int(ev.args[0]))


@at_event("cbr")
def _ev_cbr(t: Truth, ev: Event, ip: int):
    ratio = _int(ev.args[0])
    _pte.PacketWriter.cbr(t.pw, ratio)
    t.dtime.cbr(ratio)
    if t.clock is not None:
        t.clock.cbr = ratio
        t.clock.k = _F(t.clock.o["nom"], ratio)
    t.line(f"[cbr: {ratio:x}]")


_tp_orig_resume_after_overflow = Truth.resume_after_overflow


def _timed_resume_after_overflow(self, ip: int) -> None:
    """An OVF: the decoder forgets its cycle calibration (unless --insn:keep-tcal-on-ovf)."""
    d = getattr(self, "dtime", None)
    if d is None:
        return _tp_orig_resume_after_overflow(self, ip)
    d.ovf()
    # ptxed stamps the overflow event with the time at the OVF packet (a CYC may precede the FUP).
    self._ovf_time = (d.have_tsc, d.t)
    try:
        _tp_orig_resume_after_overflow(self, ip)
    finally:
        self._ovf_time = None


Truth.resume_after_overflow = _timed_resume_after_overflow


# == CPU errata (continued): SKL168 timing ============================================================
# SKL168 timing model (ground truth): CTC:TSC = 1:4 (CPUID.15H eax=1, ebx=4), MTC every 2^4 CTC
# (--mtc-freq 4, 64 TSC ticks), core clock 2 TSC ticks per cycle (32 cycles per MTC period).
SKL168_PTXED = ["--mtc-freq", "4", "--cpuid-0x15.eax", "1", "--cpuid-0x15.ebx", "4"]
SKL168_TSC0, SKL168_CTC0 = 0x40000, 0x100
SKL168_TSC_PER_CTC, SKL168_MTC_SHIFT, SKL168_TSC_PER_CYC = 4, 4, 2


@at_event("erratum-skl168")
def _erratum_skl168(t, ev, ip):
    """SKL168: TSC/TMA, then CYC+MTC pairs every MTC period; the PSB+ due at the third period makes the
    CYC just before it and its MTC disappear.  Then one more period (CYC, MTC) and ``ev.args[0]``
    cycles (CYC), and tracing is disabled here (FUP, TIP.PGD) at that true time, which ptxed's
    --event:time shows (the decoder must not calibrate from the period with the lost MTC)."""
    pw = t.pw
    extra = int(ev.args[0]) if ev.args else 10
    per = 1 << SKL168_MTC_SHIFT
    cyc_per = per * SKL168_TSC_PER_CTC // SKL168_TSC_PER_CYC
    pw.tsc(SKL168_TSC0)
    pw.tma(SKL168_CTC0, 0)
    ctc = SKL168_CTC0
    for period in range(1, 5):
        ctc += per
        if period == 3:
            t.psb_plus(ip)      # the CYC and MTC of this period are lost to the PSB
            continue
        pw.cyc(cyc_per)
        pw.mtc((ctc >> SKL168_MTC_SHIFT) & 0xFF)
    pw.cyc(extra)
    now = SKL168_TSC0 + (ctc - SKL168_CTC0) * SKL168_TSC_PER_CTC + extra * SKL168_TSC_PER_CYC
    t.pw.fup(ip)
    t.pw.tip_pgd(None)
    t.on = False
    t.pos = ip
    when = f"{now:016x}  " if "--event:time" in t.case.ptxed else ""
    t.line(f"[{when}disabled" + (f", at: {ip:016x}" if t.evip else "") + "]")
    return None


def _skl168_ptxed(case, words):
    case.ptxed += SKL168_PTXED


CASE_DIRECTIVES["skl168-timing"] = _skl168_ptxed


_tp_orig_at_event = Truth.at_event


def _timed_at_event(self, ev: Event, ip: int):
    """Before an overflow starts, the packets already due (the pending TNT and its CYC) are out."""
    if ev.name == "ovf" and isinstance(self.pw, TimedWriter):
        self.pw.flush_tnt()
    return _tp_orig_at_event(self, ev, ip)


Truth.at_event = _timed_at_event


@at_event("fault-psb-mode")
def _fault_psb_mode(truth: Truth, ev: Event, ip: int):
    """A PSB+ whose MODE.Exec (``ev.args[0]``: 64, 32 or 16) disagrees with the code's mode:
    "bad status update" where the decoder binds the PSB+ (its FUP IP)."""
    rec = getattr(truth, "_resync_rec", None)
    if rec is None or not truth.on:
        raise CaseError(f"{truth.case.name}: fault-psb-mode needs tracing on")
    rec.fault("status", ip)
    pw = truth.pw
    pw.psb()
    pw.fup(ip)
    pw.mode_exec(int(ev.args[0]))
    pw.psbend()
    return None
