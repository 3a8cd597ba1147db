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


def assemble(case: Case, workdir: Path) -> Image:
    """Assemble the case at its org with ``as``/``ld``; a flat image plus the labels."""
    workdir.mkdir(parents=True, exist_ok=True)
    src = case.path.read_text()
    head = {64: ".code64", 32: ".code32", 16: ".code16"}[case.mode]
    asm = workdir / f"{case.name}.s"
    asm.write_text(f"\t.intel_syntax noprefix\n\t{head}\n\t.text\n" + src + "\n")
    obj, elf, flat = (workdir / f"{case.name}.{ext}" for ext in ("o", "elf", "flat"))
    as_flags = ["--64"]
    ld_flags = ["-m", "elf_x86_64"]
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
    return Image(flat.read_bytes(), case.org, labels)


# -- the emulator's ground truth and the encoder --------------------------------------------------

_MD = {64: capstone.CS_MODE_64, 32: capstone.CS_MODE_32, 16: capstone.CS_MODE_16}


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
        if insn.mnemonic == "mwait" and self.on:
            eax = self.uc.reg_read(X.UC_X86_REG_EAX)
            ecx = self.uc.reg_read(X.UC_X86_REG_ECX)
            self.pw.mwait(eax, ecx)
            self.line(f"[mwait {eax & 0xFF:x} {ecx & 3:x}" + (f", ip: {insn.address:016x}" if self.evip else "") + "]")
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
            self.ensure_started()
            pw.mode_exec(self.case.mode)
            pw.tip_pge(ip)
            self.on = True
            word = "resumed" if self.pos == ip else "enabled"
            self.line(f"[{word}" + (f", ip: {ip:016x}" if self.evip else "") + "]")
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
        elif name == "pwre":
            pw.pwre("hw" in a, _int(a[0]), _int(a[1]))
            self.line(f"[pwre c{_int(a[0]):x}.{_int(a[1]):x}" + (", hw" if "hw" in a else "") + "]")
        elif name == "exstop":
            pw.exstop(True)
            pw.fup(ip)
            self.line("[exstop]")
        elif name == "pwrx":
            pw.pwrx(_int(a[0]), _int(a[1]), _int(a[2]))
            self.line(f"[pwrx {a[3] if len(a) > 3 else 'int'}: c{_int(a[0]):x} (c{_int(a[1]):x})]")
        elif name == "tsc":
            pw.tsc(_int(a[0]))
        elif name == "cbr":
            pw.cbr(_int(a[0]))
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
                self.pos = ret_addr if noip else nxt
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
    if block:
        argv.append("--block-decoder")
    return argv


def normalize(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]
