"""The emulator's ground truth and the encoder: a case run in unicorn, written as Intel PT and as
ptxed's ``--no-inst`` lines side by side (:class:`Truth`), and the build of a case (:func:`build`).

What it models (SDM vol. 3C, "Intel Processor Trace"):

* every executed instruction from the first byte until ``hlt`` (unicorn runs it; syscall/sysret,
  int/iret, xbegin/xend/xabort, ptwrite, mwait, vmptrld, vmlaunch/vmresume and ``mov cr3`` are carried
  out here with the architectural effect the tests need);
* the branch packets: a TNT bit per conditional branch and per compressed return (a RET whose CALL
  was seen since the last PSB, with return compression on), a TIP per indirect or far transfer, FUP+TIP
  for asynchronous ones (interrupts, aborts), FUP+TIP.PGD for an asynchronous disable, TIP.PGD for a
  branch that leaves tracing; PSB+ with FUP (when PacketEn), MODE.Exec and MODE.TSX; MODE.TSX+FUP
  around transactions; PIP, VMCS, PTWRITE (+FUP with FUPonPTW); OVF+FUP after lost packets;
* the expected lines in ptxed's conventions (libipt's ptxed ``--no-inst``): an IP per traced
  instruction (``? `` inside a transaction), the events in brackets, ``, ip:``/``, from:``/``, at:``
  tails with ``--event:ip``.

Extension points.  The families of cases (flowctl, errata, errors, timing, power, perfmode) extend
the core without replacing its methods:

* the registries of case.py (:data:`AT_EVENTS`, :data:`AFTER_EVENTS`, :data:`CASE_DIRECTIVES`) and
  assemble.py (:data:`ASSEMBLE_HOOKS`);
* :data:`RUN_HOOKS`: objects with ``before(truth, ip)`` (each instruction, after its @at events) and
  ``after(truth, insn, next_ip, traced) -> more @after events`` (IP filtering);
* :data:`SPECIAL_INSNS`: ``mnemonic -> function(truth, insn)`` for instructions the core leaves to a
  family (``mwait``: power);
* :class:`Extension` objects in :data:`EXTENSIONS` (:func:`register`): hooks the core calls at fixed
  points of its methods -- after ``__init__``, around ``run``, ``step``, ``encode``, ``at_event``,
  ``abort``, ``resume_after_overflow``, before ``async_disable``, ``tx_event``, ``insn_line``, after
  ``psb_plus`` and ``finish``, and on every line written.  They nest like wrappers: an extension
  registered earlier is the outer one (its ``before_*`` hooks run first, its ``after_*`` hooks last;
  its ``line`` sees a line before the later ones).  ``__init__.py`` imports the families in the order
  errors, timing, flowctl, perfmode (the order their former method wrappers nested in).
* :data:`BUILD_HOOKS` (after a build: more files, the flow) and :data:`DUMP_ARGV_HOOKS` (more
  ``dump insns`` arguments).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import capstone
from unicorn import Uc, UcError
from unicorn import UC_ARCH_X86, UC_MODE_16, UC_MODE_32, UC_MODE_64
from unicorn import x86_const as X

from ptexport.synth.ptencode import PacketWriter

from .assemble import Image, assemble
from .case import AFTER_EVENTS, AT_EVENTS, Case, CaseError, Event, _int

STACK_TOP = {64: 0x7FFF_0000, 32: 0x00F0_0000, 16: 0xF000}
STACK_SIZE = {64: 0x10000, 32: 0x10000, 16: 0x1000}

# Instruction kinds the encoder knows (from capstone, not from ptexport's classifier).
K_OTHER, K_JCC, K_JMP, K_JMP_IND, K_CALL, K_CALL_IND, K_RET, K_FAR = range(8)
_COND = {"loop", "loope", "loopne", "jrcxz", "jecxz", "jcxz"}
_FAR = {"syscall", "sysret", "sysretq", "sysenter", "sysexit", "sysexitq", "iret", "iretd", "iretq",
        "int", "int3", "into", "int1", "ljmp", "lcall", "retf", "retfq", "lret", "lretq",
        "vmlaunch", "vmresume", "vmcall", "ud2"}

_MD = {64: capstone.CS_MODE_64, 32: capstone.CS_MODE_32, 16: capstone.CS_MODE_16}

# Objects with before(truth, ip) (each instruction, after its @at events) and
# after(truth, insn, next_ip, traced) -> list of more @after events for it (e.g. IP filtering).
RUN_HOOKS: list = []

# Instructions a family carries out: mnemonic -> function(truth, insn) (called from Truth.special).
SPECIAL_INSNS: dict = {}


class Extension:
    """Hooks a family of cases adds to :class:`Truth` (override the ones needed; all default to nothing).

    ``before_X``/``after_X`` run around the core's ``X``; extensions registered earlier are outer."""

    def init(self, t: "Truth") -> None:
        """After ``Truth.__init__`` (may replace ``t.pw``)."""

    def run_start(self, t: "Truth") -> None:
        """``Truth.run`` is about to emulate."""

    def run_end(self, t: "Truth") -> None:
        """``Truth.run`` has emulated up to ``hlt`` (may rewrite ``t.lines`` in place)."""

    def before_step(self, t: "Truth", insn) -> None: ...
    def after_step(self, t: "Truth", insn, nxt: int) -> None: ...
    def before_encode(self, t: "Truth", insn, nxt: int, after: list) -> None: ...
    def after_encode(self, t: "Truth", insn, nxt: int, after: list) -> None: ...
    def before_at_event(self, t: "Truth", ev: Event, ip: int) -> None: ...
    def after_at_event(self, t: "Truth", ev: Event, ip: int, r: int | None) -> None: ...
    def before_abort(self, t: "Truth", ip: int) -> None: ...
    def after_abort(self, t: "Truth", ip: int, fallback: int) -> None: ...
    def before_async_disable(self, t: "Truth", ip: int) -> None: ...
    def before_resume_after_overflow(self, t: "Truth", ip: int) -> None: ...
    def after_resume_after_overflow(self, t: "Truth", ip: int) -> None: ...
    def before_tx_event(self, t: "Truth", intx: bool, abrt: bool, fup_ip: int) -> None: ...
    def after_psb_plus(self, t: "Truth", ip: int) -> None: ...
    def after_finish(self, t: "Truth", ip: int) -> None: ...
    def before_insn_line(self, t: "Truth", ip: int) -> None: ...

    def line(self, t: "Truth", s: str) -> str:
        """A line is about to be written: return it (or what to write instead)."""
        return s


EXTENSIONS: list[Extension] = []


def register(ext: Extension) -> Extension:
    EXTENSIONS.append(ext)
    return ext


def _is_far_call(insn) -> bool:
    """Far transfers that push a return (ptxed assumes the flow continues after them)."""
    m = insn.mnemonic
    return (m in ("int", "int3", "into", "int1", "syscall", "sysenter", "vmcall")
            or m.startswith("lcall") or (m == "call" and "far" in insn.op_str))


# Jcc conditions over EFLAGS (CF 0, PF 2, ZF 6, SF 7, OF 11), by the mnemonic's condition suffix.
_CC = {
    "o": lambda f: f >> 11 & 1, "no": lambda f: not f >> 11 & 1, "b": lambda f: f & 1, "c": lambda f: f & 1,
    "nae": lambda f: f & 1, "ae": lambda f: not f & 1, "nb": lambda f: not f & 1, "nc": lambda f: not f & 1,
    "e": lambda f: f >> 6 & 1, "z": lambda f: f >> 6 & 1, "ne": lambda f: not f >> 6 & 1,
    "nz": lambda f: not f >> 6 & 1, "be": lambda f: (f | f >> 6) & 1, "na": lambda f: (f | f >> 6) & 1,
    "a": lambda f: not (f | f >> 6) & 1, "nbe": lambda f: not (f | f >> 6) & 1, "s": lambda f: f >> 7 & 1,
    "ns": lambda f: not f >> 7 & 1, "p": lambda f: f >> 2 & 1, "pe": lambda f: f >> 2 & 1,
    "np": lambda f: not f >> 2 & 1, "po": lambda f: not f >> 2 & 1,
    "l": lambda f: (f >> 7 ^ f >> 11) & 1, "nge": lambda f: (f >> 7 ^ f >> 11) & 1,
    "ge": lambda f: not (f >> 7 ^ f >> 11) & 1, "nl": lambda f: not (f >> 7 ^ f >> 11) & 1,
    "le": lambda f: (f >> 6 | f >> 7 ^ f >> 11) & 1, "ng": lambda f: (f >> 6 | f >> 7 ^ f >> 11) & 1,
    "g": lambda f: not (f >> 6 | f >> 7 ^ f >> 11) & 1, "nle": lambda f: not (f >> 6 | f >> 7 ^ f >> 11) & 1,
}


def branch_taken(uc, insn, mode: int) -> bool:
    """Whether a conditional branch (Jcc, LOOP*, J*CXZ) about to run is taken, from the state before it
    (needed when its target is the next instruction: the next IP cannot tell)."""
    m = insn.mnemonic
    flags = uc.reg_read(X.UC_X86_REG_EFLAGS)
    addr32 = 0x67 in bytes(insn.bytes[:insn.size - 1])  # an address-size prefix: the other count register
    width = {64: 32 if addr32 else 64, 32: 16 if addr32 else 32, 16: 32 if addr32 else 16}[mode]
    count = uc.reg_read(X.UC_X86_REG_RCX) & ((1 << width) - 1)
    if m in ("jrcxz", "jecxz", "jcxz"):
        return count == 0
    if m.startswith("loop"):
        left = (count - 1) & ((1 << width) - 1)
        zf = flags >> 6 & 1
        return left != 0 and (m == "loop" or (zf == 1) == (m in ("loope", "loopz")))
    return bool(_CC[m[1:]](flags))


def _target(insn) -> int | None:
    ops = insn.op_str
    return int(ops, 16) if re.fullmatch(r"0x[0-9a-f]+", ops) else None


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
        self.taken_to_next = False  # the conditional branch being run targets its next instruction and is taken
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
        for x in EXTENSIONS:
            x.init(self)

    # -- output helpers -----------------------------------------------------------------------
    def line(self, s: str) -> None:
        for x in EXTENSIONS:
            s = x.line(self, s)
        self.lines.append(s)

    def insn_line(self, ip: int) -> None:
        for x in EXTENSIONS:
            x.before_insn_line(self, ip)
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
        for x in reversed(EXTENSIONS):
            x.after_psb_plus(self, ip)

    def ensure_started(self) -> None:
        if not self.started:
            self.pw.psb()
            self.pw.mode_exec(self.case.mode)
            self.pw.psbend()
            self.started = True

    # -- emulation ------------------------------------------------------------------------------
    def run_and_count(self):
        pt, lines = self.run()
        return pt, (lines, self.executed)

    def run(self) -> tuple[bytes, list[str]]:
        for x in EXTENSIONS:
            x.run_start(self)
        self._emulate()
        pt = bytes(self.pw.buf)
        for x in reversed(EXTENSIONS):
            x.run_end(self)
        return pt, self.lines

    def _emulate(self) -> None:
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
            self.taken_to_next = (_kind(insn) == K_JCC and _target(insn) == insn.address + insn.size
                                  and branch_taken(self.uc, insn, self.case.mode))
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

    def step(self, insn) -> int:
        """Execute one instruction (the extensions' hooks around it)."""
        for x in EXTENSIONS:
            x.before_step(self, insn)
        nxt = self._execute(insn)
        for x in reversed(EXTENSIONS):
            x.after_step(self, insn, nxt)
        return nxt

    def _execute(self, insn) -> int:
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
        for x in EXTENSIONS:
            x.before_tx_event(self, intx, abrt, fup_ip)
        if self.on and not self.skip:
            self.pw.mode_tsx(intx, abrt)
            self.pw.fup(fup_ip)
            self.line("[begin transaction]" if intx else "[committed]")
        self.in_tx = intx

    def abort(self, ip: int) -> int:
        for x in EXTENSIONS:
            x.before_abort(self, ip)
        fallback = self.xbegin_fallback
        if self.on and not self.skip:
            self.pw.mode_tsx(False, True)
            self.pw.fup(ip)
            self.pw.tip(fallback)
            self.line("[aborted" + (f", ip: {ip:016x}" if self.evip else "") + "]")
            self.line("[interrupt" + (f", from: {ip:016x}, to: {fallback:016x}" if self.evip else "") + "]")
        self.in_tx = False
        for x in reversed(EXTENSIONS):
            x.after_abort(self, ip, fallback)
        return fallback

    def special(self, insn) -> None:
        handler = SPECIAL_INSNS.get(insn.mnemonic)
        if handler is not None:
            handler(self, insn)        # mwait: power.py
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
        for x in EXTENSIONS:
            x.before_at_event(self, ev, ip)
        r = self._at_event(ev, ip)
        for x in reversed(EXTENSIONS):
            x.after_at_event(self, ev, ip, r)
        return r

    def _at_event(self, ev: Event, ip: int) -> int | None:
        name, a = ev.name, ev.args
        pw = self.pw
        if name == "psb":
            self.psb_plus(ip)
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
        elif name == "pad":
            pw.pad(int(a[0]) if a else 1)
        # enable (TIP.PGE: flowctl.py), pwre/pwrx/exstop (power.py), the timing packets (tsc, tma,
        # mtc, cyc, cbr: timing.py), errata and faults: AT_EVENTS.
        elif name in AT_EVENTS:
            return AT_EVENTS[name](self, ev, ip)
        else:
            raise CaseError(f"{self.case.name}: unknown event {name!r}")
        return None

    def async_disable(self, ip: int) -> None:
        for x in EXTENSIONS:
            x.before_async_disable(self, ip)
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
        for x in EXTENSIONS:
            x.before_resume_after_overflow(self, ip)
        self.retstack.clear()
        self.pw.ovf()
        if self.on:
            self.full_ip(self.pw.fup, ip)
            self.line("[overflow" + (f", ip: {ip:016x}" if self.evip else "") + "]")
        else:
            self.line("[overflow]")
        for x in reversed(EXTENSIONS):
            x.after_resume_after_overflow(self, ip)

    # -- the branch packets ----------------------------------------------------------------------
    def encode(self, insn, nxt: int, after: list[Event]) -> None:
        for x in EXTENSIONS:
            x.before_encode(self, insn, nxt, after)
        self._encode(insn, nxt, after)
        for x in reversed(EXTENSIONS):
            x.after_encode(self, insn, nxt, after)

    def _encode(self, insn, nxt: int, after: list[Event]) -> None:
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
            pw.tnt(nxt != ret_addr or self.taken_to_next)
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
        for x in reversed(EXTENSIONS):
            x.after_finish(self, ip)


@dataclass
class Built:
    case: Case
    image: Image
    code_path: Path
    pt_path: Path
    expected: list[str]
    executed: int
    images: list = field(default_factory=list)   # the decoder's images, when not just code_path (@nomap)
    flow: list | None = None                      # the executed flow (perfmode.Step; a BUILD_HOOK)


# Functions (built, workdir, truth) run after a build (e.g. the decoder's images around @nomap holes).
BUILD_HOOKS: list = []


def build(case: Case, workdir: Path) -> Built:
    image = assemble(case, workdir)
    truth = Truth(case, image)
    pt, lines = truth.run_and_count()
    pt_path = workdir / f"{case.name}.pt"
    pt_path.write_bytes(pt)
    code_path = workdir / f"{case.name}.code"
    code_path.write_bytes(image.code)
    b = Built(case, image, code_path, pt_path, lines[0], lines[1])
    for hook in BUILD_HOOKS:
        hook(b, workdir, truth)
    return b


# Functions (built) -> more dump-insns arguments (e.g. the images of extra sections, filters).
DUMP_ARGV_HOOKS: list = []


def dump_argv(b: Built, *, block: bool = False, cpu: str | None = None) -> list[str]:
    argv = ["dump", "insns", "--raw", str(b.pt_path)]
    if b.images:
        argv += [x for p, org in b.images for x in ("--image", f"{p}:{org:#x}")]
    else:
        argv += ["--image", f"{b.code_path}:{b.image.org:#x}"]
    if cpu:
        argv += ["--cpu", cpu]
    argv += b.case.ptxed
    for hook in DUMP_ARGV_HOOKS:
        argv += hook(b)
    if block:
        argv.append("--block-decoder")
    return argv


def normalize(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]
