"""CPU errata (``--cpu``): apl11 apl12 bdm64 bdm70 skd007 skd010 skd022 skl014 skl168 skz84.

Events that make the encoder write the packet pattern an affected CPU writes, as Intel's
specification updates describe the errata.  The expected flow stays what executed, so such a case
passes only when the decoder applies the erratum's workaround for the ``@cpu`` the case names
(test_corpus_errata.py also checks that it fails without it).  SKL014 needs no event: ``@after JMP
disable noip`` with an address filter in @ptxed is its pattern.

ptxed's conventions modelled here: after an OVF the decoder knows no execution mode until a PSB+ or a
MODE.Exec tells it (``[exec mode]`` after the next ``[enabled]``); the instructions after the last
packet that anchors them (TNT/TIP or an IP event) and before an overflow are lost to the decoder.

SKL168 (``@skl168-timing``): CTC:TSC = 1:4 (CPUID.15H eax=1, ebx=4), MTC every 2^4 CTC (--mtc-freq
4, 64 TSC ticks), core clock 2 TSC ticks per cycle (32 cycles per MTC period); the PSB+ due at the
third period makes the CYC just before it and its MTC disappear.

No Truth extension: only @at/@after events and one directive.
"""

from __future__ import annotations

from .case import CASE_DIRECTIVES, CaseError, _int, after_event, at_event
from .truth import K_CALL, K_CALL_IND, K_FAR, K_JCC, K_JMP, K_JMP_IND, K_OTHER, K_RET, _kind


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


@at_event("erratum-psb")
def _erratum_psb(t, ev, ip):
    """A PSB+ (FUP only while tracing is on); afterwards the decoder knows the execution mode again."""
    t.psb_plus(ip)
    _erratum_mode_unknown(t, False)
    return None


# -- SKL168 timing ---------------------------------------------------------------------------------
# The timing model (ground truth): CTC:TSC = 1:4 (CPUID.15H eax=1, ebx=4), MTC every 2^4 CTC
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
