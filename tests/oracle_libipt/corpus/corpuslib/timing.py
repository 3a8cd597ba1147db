"""Timing: TSC, TMA, MTC, CYC, CBR packets, the decoder's time and ptxed's ``--event:time``/``--event:tick``.

``DecoderTime`` is what a decoder knows of the time at each point of the stream, computed from the
timing packets written so far by the SDM's formulas (vol. 3C "Tracing and Time"):

* TSC sets the time;  TMA(CTC, FC): the CTC edge before that TSC was at TSC - FC;
* MTC(payload): CTC = payload << MTCFreq (upper bits from the last CTC, wrapping at 2^(MTCFreq+8));
  time = time of the last CTC edge + CTC delta * CPUID.15H EBX/EAX;
* CYC(n): time += n * (TSC ticks per core cycle), where that ratio is known from CBR and the nominal
  frequency (--nom-freq: ratio = nom/cbr), or calibrated from two MTCs (CTC delta * EBX/EAX over the
  cycles counted in between), or from two PSB+ TSCs (TSC delta over the cycles); without a ratio a
  CYC cannot be converted and is lost; an OVF forgets the ratio unless --insn:keep-tcal-on-ovf.

Expected values must be exact (the case's clock is chosen so): an inexact one is a CaseError, so no
rounding convention of the decoder under test leaks in.

``@clock key=value ...`` runs a hardware clock beside the emulator (:class:`HwClock`): every
instruction takes ``cpi`` core cycles; TSC ticks per cycle = nom/cbr; the CTC (ART) ticks once every
ebx/eax TSC ticks; with ``mtc`` an MTC is written at each 2^mtcfreq CTC boundary, with ``cyc`` a CYC
precedes every CYC-eligible packet (and each MTC) with the cycles since the last CYC
(:class:`TimedWriter`); every PSB+ carries TSC (and TMA with mtc) and CBR.  Keys: tsc0 (the TSC at CTC
edge ctc0) start (TSC ticks from there to the first instruction) cpi cbr nom eax ebx mtcfreq ctc0;
flags mtc cyc no-nom (leave --nom-freq off, for calibration).  It adds the matching ptxed options.

Scripted timing packets: ``@at L tsc V``, ``tma CTC FC``, ``mtc PAYLOAD``, ``cyc N``, ``cbr RATIO``.

What ptxed prints (its conventions, libipt's ptxed): with --event:time every event line carries the
decoder's time at the packet that completes the event; with --event:tick a ``[tick]`` follows a
branch whose TIP, or whose TNT packet's first bit, comes at a time other than the last event's.  A
mid-stream CBR is a ``[cbr: N]`` event (in PSB+ a status update, not printed).

Truth extension (:class:`_Timing`): after ``__init__`` the decoder's time (``t.dtime``), the clock
and, for timed cases, the ``TimedWriter``; each line gets its time stamp (``--event:time``); each
step advances the clock; ``encode`` is marked (a TIP written there is a branch's, for ticks); an
overflow makes the decoder forget its calibration and stamps ``[overflow]`` with the time at the OVF;
before an ``ovf`` event the pending TNT (and its CYC) is written.
"""

from __future__ import annotations

import re
from fractions import Fraction as _F

from ptexport.synth import ptencode as _pte

from .case import CASE_DIRECTIVES, Case, CaseError, Event, _int, at_event
from .truth import Extension, Truth, register

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
            _tick(self.truth, self.tick_at)
        super().flush_tnt()

    def ip_packet(self, opcode: int, ip) -> None:
        self.flush_tnt()
        self._cyc()
        super().ip_packet(opcode, ip)
        if opcode == _pte.OP_TIP and getattr(self.truth, "_in_encode", False):
            _tick(self.truth, None)

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


CASE_DIRECTIVES["clock"] = _clock_directive


def _ptxed_opt(case: Case, name: str):
    p = case.ptxed
    return _int(p[p.index(name) + 1]) if name in p else 0


_ERROR_LINE = re.compile(r"\[[0-9a-f]+, [0-9a-f]+: ")


def _tick(t: Truth, at) -> None:
    """A branch's TNT/TIP was decoded at the current time: ptxed's tick, if the time moved."""
    if not t.ev_tick or not t.on:
        return
    d = t.dtime
    now = d.now() if d.have_tsc else 0
    if now == t.last_ev_time:
        return
    t.last_ev_time = now
    s = f"[{now:016x}  tick]" if t.ev_time and d.have_tsc else "[tick]"
    if at is None:
        t.lines.append(s)
    else:
        t.lines.insert(at, s)


class _Timing(Extension):
    def init(self, t: Truth) -> None:
        case = t.case
        p = case.ptxed
        t.ev_time = "--event:time" in p
        t.ev_tick = "--event:tick" in p
        t.dtime = DecoderTime(case, {"mtc_freq": _ptxed_opt(case, "--mtc-freq"),
                                     "eax": _ptxed_opt(case, "--cpuid-0x15.eax"),
                                     "ebx": _ptxed_opt(case, "--cpuid-0x15.ebx"),
                                     "nom": _ptxed_opt(case, "--nom-freq"),
                                     "keep_tcal": "--insn:keep-tcal-on-ovf" in p
                                     or "--block:keep-tcal-on-ovf" in p})
        t.last_ev_time = 0
        t.pwre_pending: list[str] = []
        t.clock = None
        timed = ("clock" in case.extra or t.ev_time or t.ev_tick
                 or any(ev.name in ("tsc", "tma", "mtc", "cyc", "cbr") for ev in case.events))
        if timed:
            t.pw = TimedWriter(t, ip_mode=case.ip_mode, tnt_mode=case.tnt_mode)
            if "clock" in case.extra:
                t.clock = HwClock(t, case.extra["clock"])

    def line(self, t: Truth, s: str) -> str:
        if (getattr(t, "dtime", None) is not None and s.startswith("[")
                and s not in ("[end of trace]", "[block]") and not _ERROR_LINE.match(s)):
            d = t.dtime
            have, now = d.have_tsc, d.now()
            if s.startswith("[overflow") and getattr(t, "_ovf_time", None) is not None:
                have, now = t._ovf_time[0], _exact(t._ovf_time[1], "time", t.case)
            t.last_ev_time = now if have else 0
            if t.ev_time and have:
                s = f"[{now:016x}  " + s[1:]
        return s

    def before_step(self, t: Truth, insn) -> None:
        if t.clock is not None:
            t.clock.advance(t.clock.o["cpi"])

    def before_encode(self, t: Truth, insn, nxt: int, after: list) -> None:
        t._in_encode = True

    def after_encode(self, t: Truth, insn, nxt: int, after: list) -> None:
        t._in_encode = False

    def before_resume_after_overflow(self, t: Truth, ip: int) -> None:
        """An OVF: the decoder forgets its cycle calibration (unless --insn:keep-tcal-on-ovf)."""
        d = getattr(t, "dtime", None)
        if d is None:
            return
        d.ovf()
        # ptxed stamps the overflow event with the time at the OVF packet (a CYC may precede the FUP).
        t._ovf_time = (d.have_tsc, d.t)

    def after_resume_after_overflow(self, t: Truth, ip: int) -> None:
        if getattr(t, "dtime", None) is not None:
            t._ovf_time = None

    def before_at_event(self, t: Truth, ev: Event, ip: int) -> None:
        """Before an overflow starts, the packets already due (the pending TNT and its CYC) are out."""
        if ev.name == "ovf" and isinstance(t.pw, TimedWriter):
            t.pw.flush_tnt()


register(_Timing())


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
