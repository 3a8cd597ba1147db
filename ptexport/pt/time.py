"""Intel PT timing: TSC, MTC, TMA, CYC and CBR (libipt's pt_time / pt_time_cal).

``TimeTracker`` estimates the TSC at each timing packet as libipt does
(TSC sets it; TMA gives the CTC/FastCounter at that TSC; MTC advances it by
CTC deltas scaled by CPUID.15H EBX/EAX; CYC advances it by cycles scaled by
the calibrated FastCounter-to-cycles ratio ``fcr``).  ``TimeCal`` calibrates
``fcr`` from MTC periods, TSC pairs in PSB+ or the nominal frequency (CBR).

Errors are :class:`TimeError` with ``code`` in libipt's spelling ("no_time",
"bad_config", "bad_packet", "bad_context", "internal"); they are reports,
not fatal: callers print them and go on.

perf's semantics (a sample's time moves only at timing packets, MTC needs
TMA, CYC uses perf's own estimated ratio) are what ``TimingConfig`` plus the
packet values let a later stage compute; this module is the libipt model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptexport.errors import PacketError

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
FCR_SHR = 8
MTC_BITS = 8
TMA_CTC_BITS = 16
TMA_CTC_MASK = 0xFFFF
MTC_MASK = 0xFF
TSC_BITS = 56


class TimeError(PacketError):
    """A timing packet that cannot be applied (libipt's time errors)."""

    def __init__(self, code: str) -> None:
        self.code = code
        super().__init__(code.replace("_", " "), what="time")


@dataclass(frozen=True)
class TimingConfig:
    """The configuration timing needs (IA32_RTIT_CTL.MTCFreq, CPUID.15H, MSR_PLATFORM_INFO)."""

    mtc_freq: int = 0
    nom_freq: int = 0
    cpuid_0x15_eax: int = 0
    cpuid_0x15_ebx: int = 0
    skl168: bool = False


def ctc_delta(ctc: int, last_ctc: int, cfg: TimingConfig) -> int:
    if ctc < last_ctc:
        ctc = (ctc + (1 << (cfg.mtc_freq + MTC_BITS))) & M32
        if ctc < last_ctc:
            raise TimeError("bad_packet")
    return (ctc - last_ctc) & M32


def ctc_fc(ctc: int, cfg: TimingConfig) -> int:
    eax, ebx = cfg.cpuid_0x15_eax, cfg.cpuid_0x15_ebx
    if not eax or not ebx:
        raise TimeError("bad_config")
    return ((ctc * ebx) & M64) // eax


class TimeTracker:
    """libipt's struct pt_time."""

    def __init__(self, cfg: TimingConfig) -> None:
        self.cfg = cfg
        self.reset()

    def reset(self) -> None:
        self.tsc = 0
        self.base = 0
        self.fc = 0
        self.ctc = 0
        self.ctc_cyc = 0
        self.cbr = 0
        self.lost_mtc = 0
        self.lost_cyc = 0
        self.have_tsc = False
        self.have_cbr = False
        self.have_tma = False
        self.have_mtc = False

    def query_tsc(self) -> tuple[int, str | None]:
        """(tsc, error code or None); the error is "no_time" before the first TSC."""
        return self.tsc, (None if self.have_tsc else "no_time")

    def update_tsc(self, tsc: int) -> None:
        self.have_tsc = True
        self.have_tma = False
        self.have_mtc = False
        self.tsc = self.base = tsc
        self.ctc = 0
        self.fc = 0
        self.lost_mtc = 0
        self.lost_cyc = 0

    def update_cbr(self, ratio: int) -> None:
        if not ratio:
            raise TimeError("bad_packet")
        self.have_cbr = True
        self.cbr = ratio

    def update_tma(self, ctc: int, fc: int) -> None:
        if not self.have_tsc:
            raise TimeError("bad_context")
        if self.have_tma:
            raise TimeError("bad_context")
        if self.have_mtc:
            raise TimeError("internal")
        mtc_hi = self.cfg.mtc_freq + MTC_BITS
        ctc_mask = ((1 << mtc_hi) - 1) & M32
        self.have_tma = True
        self.base = (self.base - fc) & M64
        self.fc = (self.fc + fc) & M64
        if mtc_hi <= TMA_CTC_BITS:
            self.have_mtc = True
        self.ctc = self.ctc_cyc = ctc & ctc_mask

    def update_mtc(self, mtc_ctc: int) -> None:
        cfg = self.cfg
        have_tsc, have_tma, have_mtc = self.have_tsc, self.have_tma, self.have_mtc
        if have_tsc and not have_tma:
            return
        base = self.base
        last_ctc = self.ctc
        ctc = (mtc_ctc << cfg.mtc_freq) & M32
        if self.fc or self.lost_cyc or not have_mtc:
            self.ctc_cyc = ctc
        self.have_mtc = True
        self.fc = 0
        self.ctc = ctc
        self.lost_cyc = 0
        if not have_mtc:
            if not have_tma:
                return
            if last_ctc & ~TMA_CTC_MASK & M32:
                raise TimeError("internal")
            ctc_lo = ctc & TMA_CTC_MASK
            ctc_hi = ctc & ~TMA_CTC_MASK & M32
            if ctc_lo < last_ctc:
                ctc_hi = (ctc_hi - (1 << TMA_CTC_BITS)) & M32
                ctc_hi &= (MTC_MASK << cfg.mtc_freq) & M32
            last_ctc |= ctc_hi
        try:
            delta = ctc_delta(ctc, last_ctc, cfg)
        except TimeError:
            self.lost_mtc += 1
            raise
        tsc = ctc_fc(delta, cfg)
        base = (base + tsc) & M64
        self.tsc = self.base = base

    def _adjust_cyc(self, cyc: int, fcr: int) -> int:
        last_ctc = self.ctc_cyc
        ctc = self.ctc
        if ctc == last_ctc:
            return cyc
        delta = ctc_delta(ctc, last_ctc, self.cfg)
        fc = ctc_fc(delta, self.cfg)
        old_cyc = ((fc << FCR_SHR) & M64) // fcr
        total = cyc
        if total < old_cyc:
            total = old_cyc
        return total - old_cyc

    def update_cyc(self, cyc: int, fcr: int) -> None:
        if not fcr:
            self.lost_cyc += 1
            return
        fc = self.fc
        if not fc:
            cyc = self._adjust_cyc(cyc, fcr)
        fc = (fc + (((cyc * fcr) & M64) >> FCR_SHR)) & M64
        self.fc = fc
        self.tsc = (self.base + fc) & M64


class TimeCal:
    """libipt's struct pt_time_cal: calibrates the FastCounter/cycles ratio (fcr, << 8)."""

    FCR_SHR = FCR_SHR

    def __init__(self, cfg: TimingConfig) -> None:
        self.cfg = cfg
        self.reset()

    def reset(self) -> None:
        self.fcr = 0
        self.min_fcr = M64
        self.max_fcr = 0
        self.tsc = 0
        self.cyc_tsc = 0
        self.ctc = 0
        self.cyc_mtc = 0
        self.have_mtc = False
        self.check_skl168 = False
        self.lost_mtc = 0

    def have_fcr(self) -> bool:
        return self.min_fcr <= self.max_fcr

    def fcr_get(self) -> int:
        """The calibrated FastCounter/cycles ratio (<< FCR_SHR); TimeError "no_time" before any."""
        if not self.have_fcr():
            raise TimeError("no_time")
        return self.fcr

    def set_fcr(self, fcr: int) -> None:
        self.fcr = fcr
        if fcr < self.min_fcr:
            self.min_fcr = fcr
        if fcr > self.max_fcr:
            self.max_fcr = fcr

    def update_psb(self) -> None:
        if self.cfg.skl168:
            self.check_skl168 = True

    def update_tsc(self, tsc: int) -> None:
        self.tsc = tsc
        self.cyc_tsc = 0

    def header_tsc(self, tsc: int) -> None:
        last_tsc = self.tsc
        cyc = self.cyc_tsc
        self.tsc = tsc
        self.cyc_tsc = 0
        if not last_tsc or not cyc:
            return
        if self.have_mtc:
            return
        if tsc < last_tsc:
            tsc += 1 << TSC_BITS
            if tsc < last_tsc:
                raise TimeError("bad_packet")
        delta = tsc - last_tsc
        if delta & ~(M64 >> FCR_SHR):
            raise TimeError("internal")
        self.set_fcr((delta << FCR_SHR) // cyc)

    def update_cbr(self, ratio: int) -> None:
        self.reset()
        self.header_cbr(ratio)

    def header_cbr(self, ratio: int) -> None:
        p1 = self.cfg.nom_freq
        if not p1:
            return
        if not ratio:
            raise TimeError("bad_packet")
        self.set_fcr((p1 << FCR_SHR) // ratio)

    def update_tma(self, ctc: int, fc: int) -> None:
        return None

    def update_mtc(self, mtc_ctc: int) -> None:
        cfg = self.cfg
        last_ctc = self.ctc
        have_mtc = self.have_mtc
        cyc = self.cyc_mtc
        check_skl168 = self.check_skl168
        self.check_skl168 = False
        ctc = (mtc_ctc << cfg.mtc_freq) & M32
        if not have_mtc:
            self.cyc_mtc = 0
            self.ctc = ctc
            self.have_mtc = True
            return
        if not cyc:
            return
        self.have_mtc = True
        self.cyc_mtc = 0
        self.ctc = ctc
        self.lost_mtc += 1
        delta = ctc_delta(ctc, last_ctc, cfg)
        fc = ctc_fc(delta, cfg)
        if fc & ~(M64 >> FCR_SHR):
            raise TimeError("internal")
        fcr = (fc << FCR_SHR) // cyc
        if check_skl168:
            if (1 << cfg.mtc_freq) < delta:
                return
            if cfg.mtc_freq < 10 and self.have_fcr():
                dfc = ((self.fcr * (cyc + 0xF00)) & M64) >> FCR_SHR
                if dfc < fc:
                    return
        self.set_fcr(fcr)
        self.lost_mtc = 0

    def update_cyc(self, cyc: int) -> None:
        self.cyc_mtc += cyc
        self.cyc_tsc += cyc

    def update_ovf(self) -> None:
        self.tsc = 0
        self.cyc_tsc = 0
        self.cyc_mtc = 0
        self.ctc = 0
        self.have_mtc = False


def _multdiv(t: int, n: int, d: int) -> int:
    """perf's multdiv: t * n / d without overflowing 64 bits."""
    if not d:
        return 0
    return ((t // d) * n + ((t % d) * n) // d) & M64


def tsc_8b(payload: int, ref: int) -> int:
    """perf's intel_pt_8b_tsc: extend a 7-byte TSC payload next to a full reference TSC."""
    ts = payload | (ref & (0xFF << 56))
    if ts < ref:
        if ref - ts > (1 << 55):
            ts += 1 << 56
    elif ts - ref > (1 << 55):
        ts -= 1 << 56
    return ts & M64


class PerfTime:
    """perf's Intel PT timestamps (tools/perf/util/intel-pt-decoder: TSC, TMA, MTC).

    This is what perf script reports: the timestamp moves only at timing
    packets; an MTC counts only after a TMA; a timestamp never goes
    backwards (a smaller MTC estimate is suppressed; a TSC slightly behind
    is suppressed within ``tsc_slip``, far behind is a 56-bit wraparound).
    ``ref_timestamp`` is the AUXTRACE buffer's reference TSC used to extend
    the first 7-byte TSC.  CYC-based refinement is not modelled (perf moves
    time at CYC only with ``cyc`` in the config, which the caller can see).
    """

    def __init__(self, tsc_ctc_ratio_n: int, tsc_ctc_ratio_d: int, mtc_shift: int,
                 ref_timestamp: int = 0, tsc_slip: int = 0x10000) -> None:
        self.n = tsc_ctc_ratio_n
        self.d = tsc_ctc_ratio_d
        self.mult = self.n // self.d if self.n and self.d and self.n % self.d == 0 else 0
        self.mtc_shift = mtc_shift
        self.ctc_rem_mask = (1 << mtc_shift) - 1
        self.tsc_slip = tsc_slip
        self.ref_timestamp = ref_timestamp
        self.timestamp = 0
        self.tsc_timestamp = 0
        self.ctc_timestamp = 0
        self.ctc_delta = 0
        self.last_mtc = 0
        self.have_tma = False
        self.fixup_last_mtc = False

    def _ctc_to_tsc(self, ctc: int) -> int:
        return ctc * self.mult if self.mult else _multdiv(ctc, self.n, self.d)

    def set_reference(self, ref_timestamp: int) -> None:
        """A new, non-contiguous AUX buffer: its reference TSC extends the next TSC packet."""
        self.ref_timestamp = ref_timestamp

    def update_tsc(self, payload: int) -> int:
        self.have_tma = False
        if self.ref_timestamp:
            ts = tsc_8b(payload, self.ref_timestamp)
            self.tsc_timestamp = self.timestamp = ts
            self.ref_timestamp = 0
        elif self.timestamp:
            ts = payload | (self.timestamp & (0xFF << 56))
            self.tsc_timestamp = ts
            if ts < self.timestamp and self.timestamp - ts < self.tsc_slip:
                ts = self.timestamp
            if ts < self.timestamp:
                ts += 1 << 56
                self.tsc_timestamp = ts
            self.timestamp = ts
        else:
            self.tsc_timestamp = self.timestamp = payload
        return self.timestamp

    def update_tma(self, ctc: int, fc: int) -> None:
        if not self.d:
            return
        rem = ctc & self.ctc_rem_mask
        self.last_mtc = (ctc >> self.mtc_shift) & 0xFF
        self.ctc_timestamp = (self.tsc_timestamp - fc - self._ctc_to_tsc(rem)) & M64
        self.ctc_delta = 0
        self.have_tma = True
        self.fixup_last_mtc = True

    def update_mtc(self, mtc: int) -> int:
        if not self.have_tma:
            return self.timestamp
        if self.mtc_shift > 8 and self.fixup_last_mtc:
            self.fixup_last_mtc = False
            first_missing = 1 << (16 - self.mtc_shift)
            mask = ~(first_missing - 1) & M32
            last = self.last_mtc | (mtc & mask)
            if last >= mtc:
                last = (last - first_missing) & 0xFF
            self.last_mtc = last
        delta = mtc - self.last_mtc if mtc > self.last_mtc else mtc + 256 - self.last_mtc
        self.ctc_delta += delta << self.mtc_shift
        ts = (self.ctc_timestamp + self._ctc_to_tsc(self.ctc_delta)) & M64
        if ts >= self.timestamp:
            self.timestamp = ts
        self.last_mtc = mtc
        return self.timestamp
