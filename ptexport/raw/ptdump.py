"""ptdump-format rendering of a packet stream (libipt's ptdump, line for line).

``PtdumpOptions`` carries ptdump's options; ``ptdump_lines(buf, options)``
yields the lines ptdump prints for a raw trace buffer (packets, and the
bracketed diagnostics ``[offset: what: why]``); the CLI prints them.  Column
padding follows ptdump's (offset 17, opcode 10, payload 25, tracking id 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from ptexport.errors import PacketError
from ptexport.pt import packets as P
from ptexport.pt.errata import NO_ERRATA, Errata
from ptexport.pt.lastip import LastIp, sext48
from ptexport.pt.time import PerfTime, TimeCal, TimeTracker, TimingConfig, TimeError


@dataclass
class PtdumpOptions:
    show_offset: bool = True
    show_raw_bytes: bool = False
    show_last_ip: bool = False
    show_exec_mode: bool = False
    track_time: bool = False
    show_time: bool = False
    show_tcal: bool = False
    show_time_as_delta: bool = False
    quiet: bool = False
    no_pad: bool = False
    no_sync: bool = False
    no_tcal: bool = False
    no_wall_clock: bool = False
    no_timing: bool = False
    no_cyc: bool = False
    keep_tcal_on_ovf: bool = False
    #: report a packet cut by the end of the buffer (ptdump stops silently)
    report_eos: bool = False
    #: show perf's timestamp (PerfTime) on TSC/TMA/MTC: (tsc_ctc_n, tsc_ctc_d, mtc_shift, ref_tsc)
    perf_time: tuple[int, int, int, int] | None = None
    errata: Errata = field(default_factory=lambda: NO_ERRATA)
    timing: TimingConfig = field(default_factory=TimingConfig)


# Error strings of libipt's pt_errstr for the codes ptdump shows.
ERRSTR = {
    "eos": "reached end of trace stream",
    "bad-opcode": "unknown opcode",
    "bad-packet": "unknown packet",
    "nosync": "no sync",
    "no_time": "no timing information",
    "bad_config": "bad configuration",
    "noip": "no ip",
    "internal": "internal error",
}

CFE_TYPES = {
    1: "intr",
    2: "iret",
    3: "smi",
    4: "rsm",
    5: "sipi",
    6: "init",
    7: "vmentry",
    8: "vmexit",
    9: "vmexit_intr",
    10: "shutdown",
    12: "uintr",
    13: "uiret",
    14: "swintr",
    15: "syscall",
}
# CFE types whose vector ptdump shows (SIPI's as hex, the others decimal).
CFE_VECTOR_DEC = {1, 9, 12, 14}
CFE_VECTOR_HEX = {5}
EVD_TYPES = {0: "cr2", 1: "vmxq", 2: "vmxr"}


def diag(offset: int, what: str, why: str | None = None) -> str:
    if why:
        return f"[{offset:x}: {what}: {why}]"
    return f"[{offset:x}: {what}]"


def ip_payload(ip: int, ipc: int) -> str:
    if ipc == 0:
        return "0: ????????????????"
    if ipc == 1:
        return f"1: ????????????{ip:04x}"
    if ipc == 2:
        return f"2: ????????{ip:08x}"
    if ipc == 4:
        return f"4: ????{ip:012x}"
    if ipc == 3:
        return f"3: {sext48(ip):016x}"
    return f"{ipc:x}: {ip:016x}"


def tnt_payload(bits: int, n: int) -> str:
    return "".join("!" if bits >> (n - 1 - i) & 1 else "." for i in range(n))


def exec_mode_name(bits: int) -> str:
    csl = bits & 1
    csd = bits & 2
    if csl:
        return "unknown" if csd else "64-bit"
    return "32-bit" if csd else "16-bit"


def _join(*parts: str) -> str:
    return ", ".join(p for p in parts if p)


def packet_fields(pkt: P.Packet) -> tuple[str, str, str, str]:
    """(opcode, payload, tracking id, tracking payload) of a packet as ptdump shows them.

    Tracking columns that depend on decoder state (last IP, time) are left empty.
    """
    k = pkt.kind
    p0, p1, p2 = pkt.p0, pkt.p1, pkt.p2
    name = P.KIND_NAMES[k]
    if k in (P.K_TIP, P.K_TIP_PGE, P.K_TIP_PGD, P.K_FUP):
        return name, ip_payload(p0, p1), "", ""
    if k == P.K_TNT_8 or k == P.K_TNT_64:
        return name, tnt_payload(p0, p1), "", ""
    if k == P.K_MODE_EXEC:
        return name, _join("cs.d" if p0 & 2 else "", "cs.l" if p0 & 1 else "", "if" if p0 & 4 else ""), "", ""
    if k == P.K_MODE_TSX:
        return name, _join("intx" if p0 & 1 else "", "abrt" if p0 & 2 else ""), "", ""
    if k == P.K_PIP:
        return name, f"{p0:x}{', nr' if p1 else ''}", "cr3", f"{p0:016x}"
    if k == P.K_VMCS:
        return name, f"{p0:x}", "vmcs", f"{p0:016x}"
    if k in (P.K_TSC, P.K_CBR, P.K_MTC, P.K_CYC, P.K_MNT):
        return name, f"{p0:x}", "", ""
    if k == P.K_TMA:
        return name, f"{p0:x}, {p1:x}", "", ""
    if k == P.K_EXSTOP:
        return name, "ip" if p0 else "", "", ""
    if k == P.K_MWAIT:
        return name, f"{p0:08x}, {p1:08x}", "", ""
    if k == P.K_PWRE:
        return name, f"c{(p0 + 1) & 0xF}.{(p1 + 1) & 0xF}{', hw' if p2 else ''}", "", ""
    if k == P.K_PWRX:
        wr = None
        bad = False
        for bit, txt in ((1, "int"), (4, "st"), (8, "hw")):
            if p2 & bit:
                if wr:
                    bad = True
                wr = txt
        if bad or not wr:
            wr = "bad"
        return name, f"{wr}: c{(p0 + 1) & 0xF}, c{(p1 + 1) & 0xF}", "", ""
    if k == P.K_PTW:
        return name, f"{p1:x}: {p0:x}{', ip' if p2 else ''}", "", ""
    if k == P.K_CFE:
        if p0 in CFE_VECTOR_DEC:
            pl = f"{p0}: {p1}"
        elif p0 in CFE_VECTOR_HEX:
            pl = f"{p0}: {p1:x}"
        else:
            pl = f"{p0}"
        if p2:
            pl += ", ip"
        return name, pl, "type", CFE_TYPES.get(p0, "unknown")
    if k == P.K_EVD:
        return name, f"{p0}: {p1:x}", "type", EVD_TYPES.get(p0, "unknown")
    if k == P.K_TRIG:
        pl = f"{p0:02x}"
        if p2 & 1:
            pl += ", ip"
        if p2 & 2:
            pl += ", mult"
        if p2 & 4:
            pl += f", icnt: {p1}"
        return name, pl, "", ""
    if k == P.K_BBP:
        return name, f"{p0:x}{', sz' if p1 else ''}", "", ""
    if k == P.K_BIP:
        return name, f"{p0:x}: {p1:x}", "", ""
    if k == P.K_BEP:
        return name, "ip" if p0 else "", "", ""
    return name, "", "", ""


def format_line(offset: int | None, raw: str, opcode: str, payload: str, tid: str, tpl: str) -> str:
    """Assemble one ptdump line with ptdump's column widths."""
    out = []
    sep = ""
    if offset is not None:
        out.append(f"{offset:016x} ")
        sep = " "
    if raw:
        out.append(f"{sep}{raw:<33}")
        sep = " "
    if payload:
        out.append(f"{sep}{opcode:<10}")
    else:
        out.append(f"{sep}{opcode}")
    if tid:
        out.append(f" {payload:<25} {tid:<5}{tpl}")
    elif payload:
        out.append(f" {payload}")
    return "".join(out)


class _Tracking:
    def __init__(self, opts: PtdumpOptions) -> None:
        self.opts = opts
        self.reset()

    def reset(self) -> None:
        self.last_ip = LastIp()
        self.tcal = TimeCal(self.opts.timing)
        self.time = TimeTracker(self.opts.timing)
        self.tsc = 0
        self.fcr = 0
        self.in_header = False
        # perf keeps its timestamp over decode errors: created once, never reset
        if getattr(self, "perf", None) is None:
            self.perf = PerfTime(*self.opts.perf_time) if self.opts.perf_time else None


def ptdump_lines(buf, options: PtdumpOptions | None = None, source: str = "<buffer>",
                 sideband: Callable[[int | None], Iterator[str]] | None = None) -> Iterator[str]:
    """Yield ptdump's output lines for a raw trace buffer.

    ``sideband(tsc)``, if given, yields the sideband lines due up to ``tsc``
    (None: the rest); it is called after each timing update as ptdump does.
    """
    o = options or PtdumpOptions()
    dec = P.PacketDecoder(buf, o.errata, source)
    trk = _Tracking(o)
    if o.no_sync:
        dec.sync_set(0)
    elif dec.sync_forward() < 0:
        if sideband:
            yield from sideband(None)
        return
    while True:
        off = dec.offset
        try:
            pkt = dec.next()
        except PacketError as e:
            reason = getattr(e, "reason", "internal")
            if reason != "eos" or o.report_eos:
                yield diag(off, "error decoding packet", ERRSTR.get(reason, e.cause))
            if dec.sync_forward() < 0:
                break
            trk.reset()
            continue
        if pkt is None:
            break
        lines: list[str] = []
        line = _render(pkt, trk, o, buf, lines, sideband)
        yield from lines
        if line is not None and not o.quiet:
            yield line
    if sideband:
        yield from sideband(None)


def _render(pkt: P.Packet, trk: _Tracking, o: PtdumpOptions, buf, diags: list[str],
            sideband) -> str | None:
    off = pkt.offset
    k = pkt.kind
    opcode, payload, tid, tpl = packet_fields(pkt)
    skip = False
    raw = ""
    if o.show_raw_bytes:
        raw = bytes(buf[off : off + pkt.size]).hex()[:32]
    if k == P.K_PSB:
        if o.track_time:
            trk.tcal.update_psb()
        trk.in_header = True
    elif k == P.K_PSBEND:
        trk.in_header = False
    elif k == P.K_PAD:
        skip = o.no_pad
    elif k == P.K_OVF:
        if o.track_time:
            if o.keep_tcal_on_ovf:
                trk.tcal.update_ovf()
            else:
                trk.tcal.reset()
    elif k in (P.K_FUP, P.K_TIP, P.K_TIP_PGE, P.K_TIP_PGD):
        if o.show_last_ip:
            tid = "ip"
            trk.last_ip.update(pkt.p0, pkt.p1)
            try:
                ip = trk.last_ip.query()
                tpl = "<suppressed>" if ip is None else f"{ip:016x}"
            except PacketError:
                tpl = "<unavailable>"
                diags.append(diag(off, "error tracking last-ip", ERRSTR["noip"]))
    elif k == P.K_MODE_EXEC:
        if o.show_exec_mode:
            tid, tpl = "em", exec_mode_name(pkt.p0)
    elif k in (P.K_TSC, P.K_CBR, P.K_TMA, P.K_MTC, P.K_CYC):
        if k == P.K_CYC and o.no_cyc:
            skip = True
        else:
            if o.track_time:
                tid, tpl = _track_time(pkt, trk, o, diags, sideband)
            if trk.perf is not None and k in (P.K_TSC, P.K_TMA, P.K_MTC):
                pt = trk.perf
                if k == P.K_TSC:
                    pt.update_tsc(pkt.p0)
                elif k == P.K_TMA:
                    pt.update_tma(pkt.p0, pkt.p1)
                else:
                    pt.update_mtc(pkt.p0)
                extra = f"{pt.timestamp:016x}"
                if tid:
                    tpl = f"{tpl}  perf {extra}"
                else:
                    tid, tpl = "perf", extra
            skip = o.no_timing
    if skip:
        return None
    return format_line(off if o.show_offset else None, raw, opcode, payload, tid, tpl)


def _track_time(pkt: P.Packet, trk: _Tracking, o: PtdumpOptions, diags: list[str], sideband):
    off = pkt.offset
    k = pkt.kind
    skip_time = False
    skip_tcal = False
    tcal, time = trk.tcal, trk.time
    if k == P.K_TSC:
        if not o.no_tcal:
            try:
                if trk.in_header:
                    tcal.header_tsc(pkt.p0)
                else:
                    tcal.update_tsc(pkt.p0)
            except TimeError as e:
                diags.append(diag(off, "error calibrating time", ERRSTR[e.code]))
        try:
            time.update_tsc(pkt.p0)
        except TimeError as e:
            diags.append(diag(off, "error updating time", ERRSTR[e.code]))
    elif k == P.K_CBR:
        if not o.no_tcal:
            try:
                if trk.in_header:
                    tcal.header_cbr(pkt.p0)
                else:
                    tcal.update_cbr(pkt.p0)
            except TimeError as e:
                diags.append(diag(off, "error calibrating time", ERRSTR[e.code]))
        try:
            time.update_cbr(pkt.p0)
        except TimeError as e:
            diags.append(diag(off, "error updating time", ERRSTR[e.code]))
        skip_time = True
    elif k == P.K_TMA:
        if not o.no_tcal:
            try:
                tcal.update_tma(pkt.p0, pkt.p1)
            except TimeError as e:
                diags.append(diag(off, "error calibrating time", ERRSTR[e.code]))
        try:
            time.update_tma(pkt.p0, pkt.p1)
        except TimeError as e:
            diags.append(diag(off, "error updating time", ERRSTR[e.code]))
        skip_tcal = True
    elif k == P.K_MTC:
        if not o.no_tcal:
            try:
                tcal.update_mtc(pkt.p0)
            except TimeError as e:
                diags.append(diag(off, "error calibrating time", ERRSTR[e.code]))
        try:
            time.update_mtc(pkt.p0)
        except TimeError as e:
            diags.append(diag(off, "error updating time", ERRSTR[e.code]))
    elif k == P.K_CYC:
        fcr = 0
        if not o.no_tcal:
            try:
                fcr = tcal.fcr_get()
            except TimeError as e:
                diags.append(diag(off, "calibration error", ERRSTR[e.code]))
            try:
                tcal.update_cyc(pkt.p0)
            except TimeError as e:
                diags.append(diag(off, "error calibrating time", ERRSTR[e.code]))
        try:
            time.update_cyc(pkt.p0, fcr)
            if not fcr:
                diags.append(diag(off, "error updating time: no calibration"))
        except TimeError as e:
            diags.append(diag(off, "error updating time", ERRSTR[e.code]))
        skip_tcal = True
    tid = tpl = ""
    if o.show_tcal and not skip_tcal:
        tid = "fcr"
        try:
            fcr = tcal.fcr_get()
            d = fcr / float(1 << TimeCal.FCR_SHR)
            if o.show_time_as_delta:
                d_old = trk.fcr / float(1 << TimeCal.FCR_SHR)
                tpl = f"{d - d_old:+.3f}"
                trk.fcr = fcr
            else:
                tpl = f"{d:.3f}"
        except TimeError as e:
            tpl = "<unavailable>"
            diags.append(diag(off, "error printing time", ERRSTR[e.code]))
    if o.show_time and not skip_time:
        tid = "tsc"
        tsc, err = time.query_tsc()
        if err and not (err == "no_time" and o.no_wall_clock):
            diags.append(diag(off, "error printing time", ERRSTR[err]))
            tpl = "<unavailable>"
        elif o.show_time_as_delta:
            old = trk.tsc
            tpl = f"+{tsc - old:x}" if old <= tsc else f"-{old - tsc:x}"
            trk.tsc = tsc
        else:
            tpl = f"{tsc:016x}"
    if sideband:
        tsc, err = time.query_tsc()
        if not err or err == "no_time":
            diags.extend(sideband(tsc))
    return tid, tpl
