"""Control flow: IP compression, trace enable/disable, IP filtering, overflow variants, VMX.

What it models (SDM vol. 3C, "Intel Processor Trace"; ptxed's reports as libipt's ptxed prints them):

* ``@section NAME ADDR``: more code in ``.section .NAME, "ax"`` linked at ADDR (a second code region,
  e.g. far from the first so that every IP compression occurs); its own ``--image`` for the decoder;
* ``@expect-ipbytes N ...``: the encoder must have written IP packets with each of these IPBytes
  (checked when the trace ends);
* ``@at L enable`` / ``enable-full``: MODE.Exec and TIP.PGE (``-full``: an IP independent of the last
  IP).  After an overflow the decoder knows neither the last IP (the TIP.PGE carries a full IP) nor the
  execution mode (ptxed reports ``[exec mode]`` after ``[enabled]``) until a PSB+ tells it; ptxed says
  ``[resumed]`` when tracing comes back where the flow stood when it stopped;
* ``@filter filter|stop A B``: an IA32_RTIT_ADDRn range (labels or numbers; the n-th @filter line is
  addrn, cfg 1 / 2): the encoder enables (TIP.PGE with the first IP in range) and disables (TIP.PGD
  with the branch target, in place of the branch's TNT/TIP) tracing as the flow enters and leaves the
  filter ranges, and stops (FUP+TIP.PGD, TraceStop) before the first instruction of a stop range;
  ptexport gets the same ``--filter:addrn_*`` options;
* overflow variants: ``@at L ovf-off`` (OVF alone while tracing is off; the next TIP.PGE has a full IP),
  ``@at L psb-ovf [LOST]`` (PSB, MODE.Exec, FUP, then OVF before PSBEND);
* VMX: ``@after L vmentry CR3 [vmcs BASE]`` (VMLAUNCH/VMRESUME: PIP with NR=1, VMCS, TIP to the
  guest), ``@at L vmexit HANDLER CR3 [vmcs BASE]`` (asynchronous VM exit: FUP with the guest IP, PIP
  with NR=0, VMCS, TIP to the host's handler; ptxed reports the VMCS before the paging event).

Truth extension (:class:`_FlowCtl`): after ``resume_after_overflow`` the flow position is unknown and,
with tracing off, the next TIP.PGE needs a full IP (``t.after_ovf``); a PSB+ clears that again; after
``finish`` the ``@expect-ipbytes`` check.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .assemble import ASSEMBLE_HOOKS, Image
from .case import CASE_DIRECTIVES, Case, CaseError, Event, _int, after_event, at_event
from .truth import DUMP_ARGV_HOOKS, RUN_HOOKS, Built, Extension, Truth, register


# -- more code sections ----------------------------------------------------------------------------

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


# -- enable, overflow state ------------------------------------------------------------------------

class _FlowCtl(Extension):
    def after_finish(self, t: Truth, ip: int) -> None:
        want = t.case.extra.get("expect_ipbytes")
        if want:
            missing = [w for w in want if w not in t.pw.ipbytes_used]
            if missing:
                raise CaseError(f"{t.case.name}: no IP packet with IPBytes {missing} "
                                f"(used {sorted(t.pw.ipbytes_used)})")

    def after_resume_after_overflow(self, t: Truth, ip: int) -> None:
        t.pos = None
        if not t.on:
            t.after_ovf = True     # tracing resumes with TIP.PGE

    def after_psb_plus(self, t: Truth, ip: int) -> None:
        t.__dict__.pop("after_ovf", None)   # PSB+ gives the decoder the mode (and PSB resets the last IP)


register(_FlowCtl())


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


@at_event("enable")
def _ev_enable(t: Truth, ev: Event, ip: int):
    _enable(t, ip)


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


# -- VMX -------------------------------------------------------------------------------------------

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


# -- IP filtering ----------------------------------------------------------------------------------

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
