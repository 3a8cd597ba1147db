"""Event decoder: Intel PT packets -> events (libipt's pt_event_decoder).

It binds packets to each other as the SDM says - MODE.EXEC to TIP, MODE.TSX,
PTW, EXSTOP, CFE and MWAIT to FUP, FUP+TIP to an asynchronous branch, PSB+
contents to PSBEND as status updates - handles OVF (with errata SKD010,
APL11, APL12) and BDM70, keeps time (TSC/MTC/TMA/CYC, ptexport.pt.time), and
delivers TNT and TIP as events too.  :class:`DecoderConfig` is the decoders'
configuration (errata, flags, address filters, timing).

Errors raise :class:`~ptexport.raw.status.FlowError`; packet errors met while
fetching are kept and raised when decoding gets to them.
"""


from __future__ import annotations

import copy

from ptexport.errors import PacketError
from ptexport.raw import status as st
from ptexport.raw.events import (
    EVB_CFE,
    EVB_EXSTOP,
    EVB_FUP,
    EVB_FUP_BOUND,
    EVB_ALL,
    EVB_PSBEND,
    EVB_PWR,
    EVB_TIP,
    Event,
    EventQueue,
)
from ptexport.raw.status import FlowError
from ptexport.pt.errata import NO_ERRATA
from ptexport.pt.lastip import LastIp
from ptexport.pt.packets import PacketDecoder, PacketKind
from ptexport.pt.time import TimeCal, TimeError, TimeTracker, TimingConfig

K = PacketKind
PAD, TNT_8, TNT_64, TIP, TIP_PGE, TIP_PGD, FUP = (
    int(K.PAD), int(K.TNT_8), int(K.TNT_64), int(K.TIP), int(K.TIP_PGE), int(K.TIP_PGD),
    int(K.FUP))
PIP, MODE_EXEC, MODE_TSX, STOP, CBR, TSC, MTC, TMA, CYC, VMCS, OVF, PSB, PSBEND = (
    int(K.PIP), int(K.MODE_EXEC), int(K.MODE_TSX), int(K.STOP), int(K.CBR), int(K.TSC),
    int(K.MTC), int(K.TMA), int(K.CYC), int(K.VMCS), int(K.OVF), int(K.PSB), int(K.PSBEND))
MNT, PTW, EXSTOP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, CFE, EVD, TRIG, INVALID = (
    int(K.MNT), int(K.PTW), int(K.EXSTOP), int(K.MWAIT), int(K.PWRE), int(K.PWRX),
    int(K.BBP), int(K.BIP), int(K.BEP), int(K.CFE), int(K.EVD), int(K.TRIG), int(K.INVALID))

# The event decoder's "no packet" marker (libipt ppt_invalid after an error).
NO_PACKET = -1

# CFE types (Intel SDM, Event Trace).
CFE_INTR, CFE_IRET, CFE_SMI, CFE_RSM, CFE_SIPI, CFE_INIT = 1, 2, 3, 4, 5, 6
CFE_VMENTRY, CFE_VMEXIT, CFE_VMEXIT_INTR, CFE_SHUTDOWN = 7, 8, 9, 10
CFE_UINTR, CFE_UIRET, CFE_SWINTR, CFE_SYSCALL = 12, 13, 14, 15
# EVD types.
EVD_CR2, EVD_VMXQ, EVD_VMXR = 0, 1, 2

_REASON_CODE = {"eos": st.EOS, "bad-opcode": st.BAD_OPC, "bad-packet": st.BAD_PACKET}


def exec_mode(csl: bool, csd: bool) -> int:
    """pt_get_exec_mode: 64, 32, 16 or 0 (unknown)."""
    if csl:
        return 0 if csd else 64
    return 32 if csd else 16


class DecoderConfig:
    """What the decoders need beyond the trace bytes (libipt's pt_config)."""

    def __init__(self, errata=None, *, keep_tcal_on_ovf: bool = False,
                 enable_iflags_events: bool = False, enable_tick_events: bool = False,
                 addr_filter=None, source: str = "<trace>", timing=None) -> None:
        self.errata = errata if errata is not None else NO_ERRATA
        self.keep_tcal_on_ovf = keep_tcal_on_ovf
        self.enable_iflags_events = enable_iflags_events
        self.enable_tick_events = enable_tick_events
        # addr_filter: list of (cfg, a, b) for addr0..3; cfg 1 = filter, 2 = stop.
        self.addr_filter = addr_filter or []
        self.source = source
        self.timing = timing or TimingConfig(skl168=bool(getattr(self.errata, "skl168", False)))

    def addr_filter_check(self, ip: int) -> bool:
        """libipt pt_filter_addr_check: is ``ip`` inside an enabled filter range?"""
        have = False
        for cfg, a, b in self.addr_filter:
            if cfg == 1:
                have = True
                if a <= ip <= b:
                    return True
            elif cfg == 2 and a <= ip <= b:
                return False
        return not have


class Time:
    """Trace time: libipt's pt_time and pt_time_cal (ptexport.pt.time) side by side."""

    __slots__ = ("tracker", "cal")

    def __init__(self, cfg=None) -> None:
        cfg = cfg or TimingConfig()
        self.tracker = TimeTracker(cfg)
        self.cal = TimeCal(cfg)

    @property
    def have_tsc(self) -> bool:
        return self.tracker.have_tsc

    @property
    def tsc(self) -> int:
        return self.tracker.tsc

    def copy(self) -> "Time":
        t = Time.__new__(Time)
        t.tracker = copy.copy(self.tracker)
        t.cal = copy.copy(self.cal)
        return t

    def apply(self, pkt, header: bool = False) -> None:
        """Apply a timing packet (TSC, CBR, TMA, MTC, CYC); bad timing is not fatal."""
        k = pkt.kind
        tr, cal = self.tracker, self.cal
        try:
            if k == TSC:
                try:
                    (cal.header_tsc if header else cal.update_tsc)(pkt.p0)
                except TimeError:
                    pass
                tr.update_tsc(pkt.p0)
            elif k == CBR:
                try:
                    (cal.header_cbr if header else cal.update_cbr)(pkt.p0)
                except TimeError:
                    pass
                tr.update_cbr(pkt.p0)
            elif k == TMA:
                tr.update_tma(pkt.p0, pkt.p1)
            elif k == MTC:
                try:
                    cal.update_mtc(pkt.p0)
                except TimeError:
                    pass
                tr.update_mtc(pkt.p0)
            elif k == CYC:
                cal.update_cyc(pkt.p0)
                try:
                    fcr = cal.fcr_get()
                except TimeError:
                    fcr = 0
                tr.update_cyc(pkt.p0, fcr)
        except TimeError:
            pass

    def ovf(self, keep_tcal: bool) -> None:
        if keep_tcal:
            self.cal.update_ovf()
        else:
            self.cal.reset()


class _Cursor:
    """A packet decoder position; cheap to copy for looking ahead."""

    __slots__ = ("dec",)

    def __init__(self, dec: PacketDecoder) -> None:
        self.dec = dec

    def copy(self) -> "_Cursor":
        return _Cursor(copy.copy(self.dec))

    def next(self):
        try:
            pkt = self.dec.next()
        except PacketError as e:
            raise FlowError(_REASON_CODE.get(getattr(e, "reason", ""), st.BAD_PACKET)) from None
        if pkt is None:
            raise FlowError(st.EOS)
        return pkt


class EventDecoder:
    """Packets -> events, libipt's pt_event_decoder."""

    def __init__(self, buf, config: DecoderConfig) -> None:
        self.config = config
        self.buf = buf
        self.cur = _Cursor(PacketDecoder(buf, errata=config.errata, source=config.source))
        self.reset()

    # -- state ------------------------------------------------------------
    def reset(self) -> None:
        self.packet = None          # current packet or None (ppt_invalid)
        self.status = -st.NOSYNC    # deferred error (negative code) or 0
        self.event: Event | None = None
        self.enabled = False
        self.bound = False
        self.mode_exec_valid = False
        self.iflag = False
        self.csd = False
        self.csl = False
        self.ip = LastIp()
        self.time = Time(self.config.timing)
        self.evq = EventQueue()

    @property
    def offset(self) -> int:
        """Offset of the current packet (libipt pt_evt_get_offset)."""
        pos = self.cur.dec.pos or 0
        if self.packet is not None:
            return pos - self.packet.size
        return pos

    @property
    def sync_offset(self) -> int:
        return self.cur.dec.sync or 0

    def _fetch_packet(self) -> int:
        """Fetch the next non-PAD packet; keep an error for later. Returns 0."""
        while True:
            try:
                pkt = self.cur.next()
            except FlowError as e:
                self.packet = None
                self.status = -e.code
                return 0
            if pkt.kind != PAD:
                self.packet = pkt
                return 0

    def _event_time(self, ev: Event) -> None:
        if self.time.have_tsc:
            ev.has_tsc = True
            ev.tsc = self.time.tsc

    def _event_ip(self, ev: Event, attr: str = "ip") -> None:
        ip = self._query_ip()
        if ip is None:
            ev.ip_suppressed = True
        else:
            setattr(ev, attr, ip)

    def _query_ip(self):
        lip = self.ip
        if not lip.have_ip or lip.suppressed:
            return None
        return lip.ip

    def _update_ip(self, pkt) -> None:
        try:
            self.ip.update(pkt.p0, pkt.p1)
        except PacketError:
            raise FlowError(st.BAD_PACKET) from None

    def _standalone(self, evtype: str) -> Event:
        ev = Event(evtype)
        self.event = ev
        return ev

    def _enqueue(self, evb: int, evtype: str) -> Event:
        ev = self.evq.enqueue(evb)
        if ev is None:
            raise FlowError(st.NOMEM)
        ev.type = evtype
        return ev

    # -- sync ---------------------------------------------------------------
    def sync_forward(self) -> None:
        self.reset()
        if self.cur.dec.sync_forward() < 0:
            raise FlowError(st.EOS)
        self._start()

    def sync_set(self, offset: int) -> None:
        self.reset()
        try:
            self.cur.dec.sync_set(offset)
        except PacketError:
            raise FlowError(st.EOS) from None
        self._start()

    def _start(self) -> None:
        self.status = 0
        self._fetch_packet()
        pkt = self.packet
        if pkt is None:
            raise FlowError(-self.status if self.status < 0 else st.INTERNAL)
        if pkt.kind != PSB:
            raise FlowError(st.NOSYNC)
        self._decode_psb()

    # -- PSB+ ---------------------------------------------------------------
    def _find_header_fup(self, cur: _Cursor):
        """1 and the FUP packet if the PSB+ at ``cur`` has a FUP, (0, None) if not."""
        cur = cur.copy()
        while True:
            pkt = cur.next()
            k = pkt.kind
            if k == FUP:
                return 1, pkt
            if k in (MODE_EXEC, MODE_TSX, PIP, VMCS, MNT, TSC, CBR, TMA, MTC, CYC, PAD,
                     INVALID):
                continue
            if k in (PSBEND, OVF):
                return 0, None
            raise FlowError(st.BAD_CONTEXT)

    def _check_bdm70(self) -> bool:
        cur = self.cur.copy()
        while True:
            try:
                pkt = cur.next()
            except FlowError as e:
                if e.code == st.EOS:
                    return False
                raise
            k = pkt.kind
            if k == TIP_PGE:
                return True
            if k in (PAD, TSC, CBR, PSBEND, PIP, MODE_EXEC, MODE_TSX, VMCS, TMA, MTC, CYC, MNT):
                continue
            return False

    def _header_fup(self, pkt) -> None:
        enabled = pkt.p1 != 0
        if self.config.errata.bdm70 and self._check_bdm70():
            enabled = False
        self.enabled = enabled
        if enabled:
            self._update_ip(pkt)

    def _header_mode_exec(self, pkt) -> None:
        p0 = pkt.p0
        csl, csd, iflag = bool(p0 & 1), bool(p0 & 2), bool(p0 & 4)
        if self.mode_exec_valid:
            if self.config.enable_iflags_events and self.iflag != iflag:
                raise FlowError(st.BAD_STATUS_UPDATE)
            if self.csd != csd or self.csl != csl:
                raise FlowError(st.BAD_STATUS_UPDATE)
        else:
            self.mode_exec_valid = True
            self.iflag, self.csd, self.csl = iflag, csd, csl
        ev = self._enqueue(EVB_PSBEND, "exec_mode")
        ev.status_update = True
        ev.mode = exec_mode(csl, csd)
        if self.config.enable_iflags_events:
            ev = self._enqueue(EVB_PSBEND, "iflags")
            ev.status_update = True
            ev.iflag = iflag

    def _decode_psb(self) -> int:
        if self.evq.pending(EVB_ALL & ~EVB_PWR & ~EVB_EXSTOP):
            raise FlowError(st.BAD_CONTEXT)
        self.evq.clear()
        self.ip.reset()
        self.enabled = False
        # SKL168: CYC packets right before a PSB may be lost; calibration skips the next span
        # (libipt's pt_qry_decode_psb -> pt_tcal_update_psb).
        self.time.cal.update_psb()
        status_ev = self._enqueue(EVB_PSBEND, "")
        status_ev.status_update = True
        while True:
            self._fetch_packet()
            pkt = self.packet
            if pkt is None:
                raise FlowError(-self.status)
            k = pkt.kind
            if k == FUP:
                self._header_fup(pkt)
            elif k == MODE_EXEC:
                self._header_mode_exec(pkt)
            elif k == MODE_TSX:
                ev = self._enqueue(EVB_PSBEND, "tsx")
                ev.status_update = True
                ev.speculative = bool(pkt.p0 & 1)
                ev.aborted = bool(pkt.p0 & 2)
            elif k == PIP:
                ev = self._enqueue(EVB_PSBEND, "async_paging")
                ev.status_update = True
                ev.cr3 = pkt.p0
                ev.non_root = bool(pkt.p1)
            elif k == VMCS:
                ev = self._enqueue(EVB_PSBEND, "async_vmcs")
                ev.status_update = True
                ev.base = pkt.p0
            elif k == MNT:
                ev = self._enqueue(EVB_PSBEND, "mnt")
                ev.payload = pkt.p0
            elif k == CBR:
                self.time.apply(pkt, header=True)
                ev = self._enqueue(EVB_PSBEND, "cbr")
                ev.status_update = True
                ev.ratio = pkt.p0
            elif k in (TSC, TMA, MTC, CYC):
                self.time.apply(pkt, header=True)
            elif k == PSBEND:
                if self.enabled:
                    status_ev.type = "enabled"
                else:
                    status_ev.type = "disabled"
                    status_ev.ip_suppressed = True
                return 1
            elif k == OVF:
                if self.enabled:
                    status_ev.type = "enabled"
                else:
                    head = self.evq.dequeue(EVB_PSBEND)
                    if head is not status_ev:
                        raise FlowError(st.INTERNAL)
                return 1
            elif k == PAD:
                continue
            else:
                raise FlowError(st.BAD_CONTEXT)

    def _decode_psbend(self) -> int:
        ev = self.evq.dequeue(EVB_PSBEND)
        if ev is None:
            return 1
        self.event = ev
        t = ev.type
        if t in ("enabled", "exec_mode", "iflags", "tsx", "async_paging", "async_vmcs"):
            self._event_ip(ev)
        elif t in ("disabled", "cbr", "mnt"):
            pass
        else:
            raise FlowError(st.BAD_CONTEXT)
        self._event_time(ev)
        return 0

    # -- FUP ------------------------------------------------------------------
    _FUP_IP_EVENTS = ("tsx", "exstop", "mwait", "ptwrite", "exec_mode", "iflags", "interrupt",
                      "iret", "smi", "init", "vmentry", "vmexit", "shutdown", "uintr", "uiret",
                      "trig", "swintr", "syscall")

    def _decode_fup(self, pkt) -> int:
        while True:
            self._update_ip(pkt)
            if self.evq.pending(EVB_FUP_BOUND):
                self.bound = True
            ev = self.evq.dequeue(EVB_FUP | EVB_FUP_BOUND)
            if ev is None:
                if self.bound:
                    return 1
                frm = self._query_ip_strict()
                ev = self._enqueue(EVB_TIP, "async_branch")
                ev.frm = frm
                return 1
            t = ev.type
            if t == "ignore":
                continue
            self.event = ev
            if t == "overflow":
                self._event_ip(ev)
                self.enabled = True
            elif t in ("rsm", "sipi"):
                self._event_time(ev)
                if not ev.ip_suppressed:
                    raise FlowError(st.INTERNAL)
            elif t in self._FUP_IP_EVENTS:
                self._event_time(ev)
                self._event_ip(ev)
            else:
                raise FlowError(st.BAD_CONTEXT)
            return 0

    def _query_ip_strict(self) -> int:
        lip = self.ip
        if not lip.have_ip:
            raise FlowError(st.NOIP)
        if lip.suppressed:
            raise FlowError(st.IP_SUPPRESSED)
        return lip.ip

    # -- TIP family -----------------------------------------------------------
    def _decode_tip(self, pkt) -> int:
        if not self.enabled:
            raise FlowError(st.BAD_CONTEXT)
        while True:
            self._update_ip(pkt)
            if not self.bound:
                return self._decode_tip_event()
            ev = self.evq.dequeue(EVB_TIP)
            if ev is None:
                return 1
            t = ev.type
            if t == "ignore":
                continue
            self.event = ev
            if t == "async_branch":
                raise FlowError(st.INTERNAL)
            if t in ("exec_mode", "async_paging", "async_vmcs", "iflags"):
                self._event_ip(ev)
            else:
                raise FlowError(st.BAD_CONTEXT)
            self._event_time(ev)
            return 0

    def _decode_tip_event(self) -> int:
        self.bound = True
        async_ev = self.evq.find(EVB_TIP, "async_branch")
        if async_ev is not None:
            ev = self.evq.dequeue_swapped(EVB_TIP, async_ev)
            if ev is None or ev.type != "async_branch":
                raise FlowError(st.INTERNAL)
            self.event = ev
            self._event_ip(ev, "to")
            self._event_time(ev)
            return 0
        ev = self._standalone("tip")
        self._event_ip(ev)
        self._event_time(ev)
        return 0

    def _decode_tip_pge(self, pkt) -> int:
        while True:
            self._update_ip(pkt)
            if not self.bound:
                ev = self._standalone("enabled")
                self._event_ip(ev)
                self.enabled = True
                self.bound = True
                self._event_time(ev)
                return 0
            ev = self.evq.dequeue(EVB_TIP)
            if ev is None:
                return 1
            t = ev.type
            if t == "ignore":
                continue
            self.event = ev
            if t in ("exec_mode", "iflags"):
                self._event_ip(ev)
            else:
                raise FlowError(st.BAD_CONTEXT)
            self._event_time(ev)
            return 0

    def _decode_tip_pgd(self, pkt) -> int:
        self._update_ip(pkt)
        ev = self.evq.dequeue(EVB_TIP)
        if ev is None:
            if self.bound:
                return 1
            ev = self._standalone("disabled")
            self._event_ip(ev)
            self._event_time(ev)
            self.enabled = False
            return self._fetch_packet()
        self.event = ev
        t = ev.type
        if t == "async_branch":
            ev.type = "async_disabled"
            ev.at = ev.frm
            self._event_ip(ev)
            self.enabled = False
            self.bound = True
        elif t in ("async_paging", "async_vmcs"):
            if not self.bound:
                raise FlowError(st.INTERNAL)
            ev.ip_suppressed = True
        elif t in ("exec_mode", "iflags", "ignore"):
            ev.ip_suppressed = True
            if t == "ignore":
                # Nothing to report; the TIP.PGD itself comes next.
                self.event = None
                return self._decode_tip_pgd(pkt)
        else:
            raise FlowError(st.BAD_CONTEXT)
        self._event_time(ev)
        return 0

    def _decode_tnt(self, pkt) -> int:
        if not self.enabled:
            raise FlowError(st.BAD_CONTEXT)
        ev = self._standalone("tnt")
        ev.bits = pkt.p0
        ev.nbits = pkt.p1
        self._event_time(ev)
        return self._fetch_packet()

    # -- MODE, PIP, VMCS, ... -------------------------------------------------
    def _decode_mode_exec(self, pkt) -> int:
        p0 = pkt.p0
        csl, csd, iflag = bool(p0 & 1), bool(p0 & 2), bool(p0 & 4)
        n = 0
        if not self.mode_exec_valid or self.csl != csl or self.csd != csd:
            ev = self._enqueue(EVB_TIP | EVB_FUP_BOUND, "exec_mode")
            ev.mode = exec_mode(csl, csd)
            self.csl, self.csd = csl, csd
            n += 1
        if self.config.enable_iflags_events and (not self.mode_exec_valid
                                                 or self.iflag != iflag):
            ev = self._enqueue(EVB_TIP | EVB_FUP_BOUND, "iflags")
            ev.iflag = iflag
            self.iflag = iflag
            n += 1
        if not n:
            self._enqueue(EVB_TIP | EVB_FUP_BOUND, "ignore")
        self.mode_exec_valid = True
        return 1

    def _decode_mode_tsx(self, pkt) -> int:
        intx, abrt = bool(pkt.p0 & 1), bool(pkt.p0 & 2)
        if self.enabled:
            ev = self._enqueue(EVB_FUP if abrt else EVB_FUP_BOUND, "tsx")
            ev.speculative, ev.aborted = intx, abrt
            return 1
        ev = self._standalone("tsx")
        ev.speculative, ev.aborted = intx, abrt
        ev.ip_suppressed = True
        self._event_time(ev)
        return self._fetch_packet()

    def _decode_pip(self, pkt) -> int:
        if self.evq.find(EVB_TIP, "async_branch") is not None:
            ev = self._enqueue(EVB_TIP, "async_paging")
            ev.cr3, ev.non_root = pkt.p0, bool(pkt.p1)
            return 1
        ev = self._standalone("paging")
        ev.cr3, ev.non_root = pkt.p0, bool(pkt.p1)
        self._event_time(ev)
        return self._fetch_packet()

    def _decode_vmcs(self, pkt) -> int:
        paging = self.evq.find(EVB_TIP, "async_paging")
        if paging is not None:
            ev = Event("async_vmcs", base=pkt.p0)
            if not self.evq.swap_in(paging, ev, EVB_TIP):
                raise FlowError(st.NOMEM)
            return 1
        if self.evq.find(EVB_TIP, "async_branch") is not None:
            ev = self._enqueue(EVB_TIP, "async_vmcs")
            ev.base = pkt.p0
            return 1
        ev = self._standalone("vmcs")
        ev.base = pkt.p0
        self._event_time(ev)
        return self._fetch_packet()

    def _decode_simple(self, evtype: str, **fields) -> int:
        ev = self._standalone(evtype)
        for k, v in fields.items():
            setattr(ev, k, v)
        self._event_time(ev)
        return self._fetch_packet()

    def _decode_exstop(self, pkt) -> int:
        ip_flag = bool(pkt.p0)
        ev = self.evq.dequeue(EVB_EXSTOP)
        if ev is not None:
            if ev.type != "mwait":
                raise FlowError(st.INTERNAL)
            if ip_flag:
                if self.evq.enqueue(EVB_FUP_BOUND, ev.copy()) is None:
                    raise FlowError(st.NOMEM)
            else:
                ev.ip = 0
                ev.ip_suppressed = True
                self.event = ev
                self._event_time(ev)
                return 0
        if ip_flag:
            self._enqueue(EVB_FUP_BOUND, "exstop")
            return 1
        ev = self._standalone("exstop")
        ev.ip_suppressed = True
        self._event_time(ev)
        return self._fetch_packet()

    def _decode_ptw(self, pkt) -> int:
        plc = pkt.p1
        if plc == 0:
            size = 4
        elif plc == 1:
            size = 8
        else:
            raise FlowError(st.BAD_PACKET)
        if pkt.p2:
            ev = self._enqueue(EVB_FUP_BOUND, "ptwrite")
            ev.size, ev.payload = size, pkt.p0
            return 1
        ev = self._standalone("ptwrite")
        ev.size, ev.payload = size, pkt.p0
        ev.ip_suppressed = True
        self._event_time(ev)
        return self._fetch_packet()

    def _decode_cfe(self, pkt) -> int:
        ctype, vector, ip_flag = pkt.p0, pkt.p1, bool(pkt.p2)
        ev = self.evq.dequeue(EVB_CFE)
        if ctype in (CFE_INTR, CFE_VMEXIT, CFE_VMEXIT_INTR):
            want = "interrupt" if ctype == CFE_INTR else "vmexit"
            if ev is None:
                ev = Event(want)
            if ev.type != want:
                raise FlowError(st.BAD_CONTEXT)
            if ctype == CFE_INTR:
                ev.vector = vector
            elif ctype == CFE_VMEXIT_INTR:
                ev.has_vector = True
                ev.vector = vector
            if ip_flag:
                if self.evq.enqueue(EVB_FUP_BOUND, ev) is None:
                    raise FlowError(st.NOMEM)
                return 1
            if self.enabled:
                if self.evq.enqueue(EVB_FUP, ev) is None:
                    raise FlowError(st.NOMEM)
                return 1
            self._event_time(ev)
            ev.ip_suppressed = True
            self.event = ev
            return self._fetch_packet()
        names = {CFE_IRET: "iret", CFE_SMI: "smi", CFE_RSM: "rsm", CFE_SIPI: "sipi",
                 CFE_INIT: "init", CFE_VMENTRY: "vmentry", CFE_SHUTDOWN: "shutdown",
                 CFE_UINTR: "uintr", CFE_UIRET: "uiret", CFE_SWINTR: "swintr",
                 CFE_SYSCALL: "syscall"}
        name = names.get(ctype)
        if name is None:
            if ev is not None:
                raise FlowError(st.INTERNAL)
            if ip_flag:
                self._enqueue(EVB_FUP_BOUND, "ignore")
            return 1
        if ev is not None:
            raise FlowError(st.BAD_CONTEXT)
        if name in ("rsm", "sipi") and ip_flag:
            raise FlowError(st.BAD_PACKET)
        if ip_flag:
            ev = self._enqueue(EVB_FUP_BOUND, name)
            if name in ("uintr", "swintr"):
                ev.vector = vector
            return 1
        # These wait for a FUP while tracing is enabled; the others stand alone.
        if self.enabled and name in ("smi", "rsm", "sipi", "init", "uintr", "swintr", "syscall"):
            ev = self._enqueue(EVB_FUP, name)
            if name in ("rsm", "sipi"):
                ev.ip_suppressed = True
            if name in ("sipi", "uintr", "swintr"):
                ev.vector = vector
            return 1
        ev = self._standalone(name)
        if name in ("sipi", "uintr", "swintr"):
            ev.vector = vector
        ev.ip_suppressed = True
        self._event_time(ev)
        return self._fetch_packet()

    def _decode_evd(self, pkt) -> int:
        etype, payload = pkt.p0, pkt.p1
        ev = self.evq.peek(EVB_CFE)
        if etype == EVD_CR2:
            if ev is not None:
                raise FlowError(st.BAD_CONTEXT)
            ev = self._enqueue(EVB_CFE, "interrupt")
            ev.has_cr2, ev.cr2 = True, payload
            return 1
        if etype in (EVD_VMXQ, EVD_VMXR):
            if ev is None:
                ev = self._enqueue(EVB_CFE, "vmexit")
            if ev.type != "vmexit":
                raise FlowError(st.BAD_CONTEXT)
            if etype == EVD_VMXQ:
                if ev.has_vmxq:
                    raise FlowError(st.BAD_CONTEXT)
                ev.has_vmxq, ev.vmxq = True, payload
            else:
                if ev.has_vmxr:
                    raise FlowError(st.BAD_CONTEXT)
                ev.has_vmxr, ev.vmxr = True, payload
        return 1

    def _decode_trig(self, pkt) -> int:
        trbv, icnt, flags = pkt.p0, pkt.p1, pkt.p2
        ip_flag, mult, icntv = bool(flags & 1), bool(flags & 2), bool(flags & 4)
        if icnt < 0:
            icnt = 0
        if ip_flag:
            if not icntv or icnt:
                raise FlowError(st.BAD_PACKET)
            ev = self._enqueue(EVB_FUP_BOUND, "trig")
            ev.trbv, ev.mult = trbv, mult
            return 1
        ev = self._standalone("trig")
        ev.trbv, ev.mult = trbv, mult
        if icntv:
            if icnt and not self.enabled:
                raise FlowError(st.BAD_PACKET)
            ev.icnt = icnt
            ev.ip_suppressed = False
        else:
            ev.icnt = 0
            ev.ip_suppressed = True
        self._event_time(ev)
        return self._fetch_packet()

    # -- OVF ------------------------------------------------------------------
    def _find_ovf_fup(self) -> int:
        """Bytes from here to after the FUP that OVF binds to; 0 if none; raises."""
        cur = self.cur.copy()
        offset = 0
        while True:
            pkt = cur.next()
            if not pkt.size:
                raise FlowError(st.BAD_PACKET)
            offset += pkt.size
            k = pkt.kind
            if k == FUP:
                return offset
            if k in (PAD, MNT, CBR, TSC, TMA, MTC, CYC, INVALID, BBP, BIP, BEP):
                continue
            if k in (PSBEND, TIP, TIP_PGD, TNT_8, TNT_64):
                raise FlowError(st.BAD_CONTEXT)
            return 0

    def _recover_ovf_at_ip(self, cur, pkt, ippkt, time) -> int:
        self._update_ip(ippkt)
        ev = self._standalone("overflow")
        self._event_time(ev)
        self.cur = cur
        self.packet = pkt
        self.time = time
        self.enabled = True
        self._event_ip(ev)
        return 0

    def _recover_ovf_disabled(self, cur, pkt, time) -> None:
        ev = self._standalone("overflow")
        ev.ip_suppressed = True
        self._event_time(ev)
        self.cur = cur
        self.packet = pkt
        self.time = time

    def _recover_ovf_at_offset(self, offset: int) -> int:
        while True:
            pkt = self.cur.next()
            self.packet = pkt
            if offset <= pkt.size:
                if offset < pkt.size:
                    raise FlowError(st.INTERNAL)
                break
            offset -= pkt.size
            k = pkt.kind
            if k in (TSC, CBR, TMA, MTC, CYC):
                self.time.apply(pkt)
            elif k in (MODE_EXEC, MODE_TSX, PIP, VMCS, INVALID):
                raise FlowError(st.INTERNAL)
        ev = self._standalone("overflow")
        ev.ip_suppressed = True
        self._event_time(ev)
        return self._fetch_packet()

    def _handle_skd010(self) -> int:
        cur = self.cur.copy()
        time = self.time.copy()
        tsx = None
        while True:
            try:
                pkt = cur.next()
            except FlowError as e:
                if e.code == st.EOS:
                    return 1
                raise
            k = pkt.kind
            if k == TIP_PGE:
                return 1
            if k == TIP_PGD:
                self._recover_ovf_disabled(cur, pkt, time)
                return self._fetch_packet()
            if k in (TNT_8, TNT_64):
                return 1
            if k in (PIP, VMCS, MODE_EXEC):
                continue
            if k == MODE_TSX:
                if tsx is not None:
                    return 1
                tsx = (bool(pkt.p0 & 1), bool(pkt.p0 & 2))
                continue
            if k == FUP:
                self.packet = pkt
                if tsx is not None:
                    ev = self._enqueue(EVB_FUP_BOUND, "tsx")
                    ev.speculative, ev.aborted = tsx
                return self._recover_ovf_at_ip(cur, pkt, pkt, time)
            if k == TIP:
                self._recover_ovf_at_ip(cur, pkt, pkt, time)
                return self._fetch_packet()
            if k == PSB:
                try:
                    found, fup = self._find_header_fup(cur)
                except FlowError as e:
                    if e.code == st.EOS:
                        return 1
                    raise
                if not found:
                    return 1
                return self._recover_ovf_at_ip(cur, pkt, fup, time)
            if k == PSBEND:
                raise FlowError(st.BAD_CONTEXT)
            if k in (OVF, STOP):
                return 1
            if k in (PAD, MNT, PWRE, PWRX):
                continue
            if k == EXSTOP:
                if not pkt.p0:
                    continue
                return 1
            if k == MWAIT:
                return 1
            if k == PTW:
                if not pkt.p2:
                    continue
                return 1
            if k in (TSC, CBR, TMA, MTC, CYC):
                time.apply(pkt)
                continue
            return 1

    def _handle_apl11(self) -> int:
        cur = self.cur.copy()
        time = self.time.copy()
        while True:
            pkt = cur.next()
            k = pkt.kind
            if k == TIP_PGD:
                self._recover_ovf_disabled(cur, pkt, time)
                return self._fetch_packet()
            if k in (TSC, CBR, TMA, MTC, CYC):
                time.apply(pkt)
                continue
            if k in (PAD, MNT):
                continue
            return 1

    def _handle_apl12(self, offset: int) -> int:
        cur = self.cur.copy()
        # Skip to after the FUP.
        skipped = 0
        while skipped < offset:
            skipped += cur.next().size
        while True:
            try:
                pkt = cur.next()
            except FlowError as e:
                if e.code == st.EOS:
                    return 1
                raise
            k = pkt.kind
            if k in (TNT_8, TNT_64, TIP, TIP_PGD):
                return 1
            if k == PSB:
                try:
                    found, _ = self._find_header_fup(cur)
                except FlowError as e:
                    if e.code == st.EOS:
                        return 1
                    raise
                if found:
                    return 1
                return self._recover_ovf_at_offset(offset)
            if k in (STOP, TIP_PGE):
                return self._recover_ovf_at_offset(offset)
            if k in (PSBEND, OVF, INVALID):
                return 1
            continue

    def _publish_pending(self, evb: int) -> bool:
        """Publish the oldest queued event bound to ``evb`` (IP suppressed), if any."""
        ev = self.evq.dequeue(evb)
        if ev is None:
            return False
        if ev.type not in ("pwre", "mwait", "exstop", "ptwrite", "tsx", "overflow"):
            # Partial events (async branches, CFE/EVD halves) die with the overflow.
            return self._publish_pending(evb)
        if ev.type == "overflow":
            return self._publish_pending(evb)
        ev.ip_suppressed = True
        self._event_time(ev)
        self.event = ev
        return True

    def _decode_ovf(self) -> int:
        status = self._decode_psbend()
        if status <= 0:
            return status
        if self._publish_pending(EVB_ALL):
            return 0
        time = self.time
        cur = self.cur
        packet = self.packet
        self.reset()
        self.cur = cur
        self.packet = packet
        self.status = 0
        time.ovf(self.config.keep_tcal_on_ovf)
        self.time = time
        try:
            offset = self._find_ovf_fup()
        except FlowError as e:
            offset = -e.code
        if offset <= 0:
            errata = self.config.errata
            if errata.skd010:
                status = self._handle_skd010()
                if status <= 0:
                    return status
            if errata.apl11 and offset == -st.BAD_CONTEXT:
                status = self._handle_apl11()
                if status <= 0:
                    return status
            if offset < 0 and offset != -st.EOS:
                raise FlowError(-offset)
            ev = self._standalone("overflow")
            ev.ip_suppressed = True
            self._event_time(ev)
            return self._fetch_packet()
        if self.config.errata.apl12:
            status = self._handle_apl12(offset)
            if status <= 0:
                return status
        ev = self._enqueue(EVB_FUP_BOUND, "overflow")
        self._event_time(ev)
        return 1

    # -- main loop ------------------------------------------------------------
    def _decode_packet(self) -> int:
        pkt = self.packet
        if pkt is None:
            if self.status < 0:
                raise FlowError(-self.status)
            return 1
        k = pkt.kind
        if k == TNT_8 or k == TNT_64:
            return self._decode_tnt(pkt)
        if k == TIP:
            return self._decode_tip(pkt)
        if k == FUP:
            return self._decode_fup(pkt)
        if k in (TSC, MTC, CYC, TMA):
            self.time.apply(pkt)
            return 1
        if k == PAD:
            return 1
        if k == TIP_PGE:
            return self._decode_tip_pge(pkt)
        if k == TIP_PGD:
            return self._decode_tip_pgd(pkt)
        if k == MODE_EXEC:
            return self._decode_mode_exec(pkt)
        if k == MODE_TSX:
            return self._decode_mode_tsx(pkt)
        if k == PSB:
            status = self._decode_psb()
            if status <= 0:
                return status
            return self._decode_packet()
        if k == PSBEND:
            return self._decode_psbend()
        if k == CBR:
            self.time.apply(pkt)
            return self._decode_simple("cbr", ratio=pkt.p0)
        if k == PIP:
            return self._decode_pip(pkt)
        if k == VMCS:
            return self._decode_vmcs(pkt)
        if k == OVF:
            return self._decode_ovf()
        if k == STOP:
            return self._decode_simple("stop")
        if k == MNT:
            return self._decode_simple("mnt", payload=pkt.p0)
        if k == PTW:
            return self._decode_ptw(pkt)
        if k == EXSTOP:
            return self._decode_exstop(pkt)
        if k == MWAIT:
            ev = self._enqueue(EVB_EXSTOP, "mwait")
            ev.hints, ev.ext = pkt.p0, pkt.p1
            return 1
        if k == PWRE:
            if self._publish_pending(EVB_PWR):
                return 0
            ev = self._enqueue(EVB_PWR, "pwre")
            ev.state, ev.sub_state, ev.hw = pkt.p0, pkt.p1, bool(pkt.p2)
            return 1
        if k == PWRX:
            if self._publish_pending(EVB_PWR):
                return 0
            w = pkt.p2
            return self._decode_simple("pwrx", last=pkt.p0, deepest=pkt.p1,
                                       interrupt=bool(w & 1), store=bool(w & 4),
                                       autonomous=bool(w & 8))
        if k == CFE:
            return self._decode_cfe(pkt)
        if k == EVD:
            return self._decode_evd(pkt)
        if k == TRIG:
            return self._decode_trig(pkt)
        # BBP/BIP/BEP (block-begin packets) and INVALID carry nothing for the flow.
        return 1

    def next(self) -> Event:
        """The next event; raises FlowError (EOS at the end)."""
        while True:
            status = self._decode_packet()
            if status <= 0:
                break
            if self.event is not None:
                raise FlowError(st.INTERNAL)
            self.bound = False
            self._fetch_packet()
        ev = self.event
        self.event = None
        return ev


