"""Power events: MWAIT, PWRE, EXSTOP, PWRX packets (SDM vol. 3C "Power Event Tracing") and ptxed's lines.

``mwait`` with EAX hints (C-state EAX[7:4]+1, sub-state EAX[3:0]; 0xF0 = C0: no packets) writes MWAIT
(if ContextEn), PWRE, EXSTOP (IP bit = ContextEn) and a FUP with the MWAIT's IP (which MWAIT and
EXSTOP bind to); on wake PWRX and, with a clock (timing.py), TSC (TMA) CBR.  ContextEn stays set while
tracing is off (address filtering) unless the case says ``@pwr-ctx cpl`` (tracing off = wrong CPL: no
MWAIT, EXSTOP without IP).  ``@wake LABEL[#N] [int|st|hw][+...] [last=V] [deepest=V] [sleep=TICKS]``:
how the MWAIT at LABEL wakes (PWRX C-states in the MWAIT encoding, default the entered state; default
wake: int).  Scripted packets: ``@at L pwre STATE SUB [hw]``, ``exstop [noip]``, ``pwrx LAST DEEPEST
REASON``.

ptxed's conventions: it binds a PWRE to the next PWRE/PWRX (it prints when that packet is decoded), so
the PWRE line comes after the EXSTOP/MWAIT lines bound to the FUP; FUP-bound events print before the
instruction at their IP (so before the MWAIT instruction itself).

Truth extension: ``mwait`` in :data:`SPECIAL_INSNS`; the pending PWRE lines (``t.pwre_pending``) and
the clock (``t.clock``) are set up by timing.py.
"""

from __future__ import annotations

import re

from unicorn import x86_const as X

from .case import CASE_DIRECTIVES, Case, Event, _int, at_event
from .truth import SPECIAL_INSNS, Truth

_PWRX_REASON = {"int": 1, "st": 4, "hw": 8}


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


CASE_DIRECTIVES["wake"] = _wake_directive
CASE_DIRECTIVES["pwr-ctx"] = _pwr_ctx_directive


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


SPECIAL_INSNS["mwait"] = _mwait_insn
