"""AUXTRACE_INFO private data (Intel PT decoded) and TIME_CONV."""

from __future__ import annotations

from dataclasses import dataclass, field

from ptexport.perfdata.constants import INTEL_PT_AUXTRACE_PRIV_MAX, AuxtraceType, IntelPTInfo as Idx


@dataclass
class AuxtraceInfo:
    """auxtrace_info of a PMU this reader does not decode: its type and raw u64 private words."""

    type: int
    priv: tuple[int, ...]

    @property
    def type_name(self) -> str:
        try:
            return AuxtraceType(self.type).name.lower()
        except ValueError:
            return f"unknown({self.type})"


@dataclass
class IntelPTInfo(AuxtraceInfo):
    """Intel PT's auxtrace_info (tools/perf/arch/x86/util/intel-pt.c intel_pt_info_fill)."""

    pmu_type: int = 0
    time_shift: int = 0
    time_mult: int = 0
    time_zero: int = 0
    cap_user_time_zero: bool = False
    tsc_bit: int = 0
    noretcomp_bit: int = 0
    have_sched_switch: int = 0
    snapshot_mode: bool = False
    per_cpu_mmaps: bool = False
    mtc_bit: int | None = None
    mtc_freq_bits: int | None = None
    tsc_ctc_ratio_n: int | None = None
    tsc_ctc_ratio_d: int | None = None
    cyc_bit: int | None = None
    max_non_turbo_ratio: int | None = None
    filter_str_len: int | None = None
    filter: str = ""
    #: u64 words after the filter string: perf >= 5.18 writes cap_event_trace there
    extra: tuple[int, ...] = field(default_factory=tuple)

    @property
    def cap_event_trace(self) -> bool | None:
        """Whether the PMU could do Event Trace (the first word after the filter string), None if absent."""
        return bool(self.extra[0]) if self.extra else None

    @property
    def vmcs_bit(self) -> int | None:
        """perf does not store the vmcs config bit in auxtrace_info; None (kept for API symmetry)."""
        return None

    @property
    def mtc_period_shift(self) -> int:
        """Bit position of mtc_freq_bits' lowest set bit (the mtc_period term's shift)."""
        bits = self.mtc_freq_bits or 0
        return (bits & -bits).bit_length() - 1 if bits else 0

    def config_terms(self, config: int) -> dict[str, int]:
        """The terms of an intel_pt attr config as the recording perf saw them (from the stored bits)."""
        out: dict[str, int] = {}
        if self.tsc_bit and config & self.tsc_bit:
            out["tsc"] = 1
        if self.noretcomp_bit and config & self.noretcomp_bit:
            out["noretcomp"] = 1
        if self.mtc_bit and config & self.mtc_bit:
            out["mtc"] = 1
        if self.mtc_freq_bits:
            out["mtc_period"] = (config & self.mtc_freq_bits) >> self.mtc_period_shift
        if self.cyc_bit and config & self.cyc_bit:
            out["cyc"] = 1
        return out


def decode_auxtrace_info(auxtrace_type: int, priv: tuple[int, ...], raw: bytes) -> AuxtraceInfo:
    """Decode the private words of an AUXTRACE_INFO record (``raw``: the bytes after type/reserved)."""
    if auxtrace_type != AuxtraceType.INTEL_PT or len(priv) <= Idx.PER_CPU_MMAPS:
        return AuxtraceInfo(auxtrace_type, tuple(priv))
    n = len(priv)

    def get(i):
        return priv[i] if i < n else None

    info = IntelPTInfo(
        type=auxtrace_type,
        priv=tuple(priv),
        pmu_type=priv[Idx.PMU_TYPE],
        time_shift=priv[Idx.TIME_SHIFT],
        time_mult=priv[Idx.TIME_MULT],
        time_zero=priv[Idx.TIME_ZERO],
        cap_user_time_zero=bool(priv[Idx.CAP_USER_TIME_ZERO]),
        tsc_bit=priv[Idx.TSC_BIT],
        noretcomp_bit=priv[Idx.NORETCOMP_BIT],
        have_sched_switch=priv[Idx.HAVE_SCHED_SWITCH],
        snapshot_mode=bool(priv[Idx.SNAPSHOT_MODE]),
        per_cpu_mmaps=bool(priv[Idx.PER_CPU_MMAPS]),
        mtc_bit=get(Idx.MTC_BIT),
        mtc_freq_bits=get(Idx.MTC_FREQ_BITS),
        tsc_ctc_ratio_n=get(Idx.TSC_CTC_N),
        tsc_ctc_ratio_d=get(Idx.TSC_CTC_D),
        cyc_bit=get(Idx.CYC_BIT),
        max_non_turbo_ratio=get(Idx.MAX_NONTURBO_RATIO),
        filter_str_len=get(Idx.FILTER_STR_LEN),
    )
    if info.filter_str_len is not None:
        # the filter string follows priv[FILTER_STR_LEN], NUL-terminated, padded to 8 bytes
        start = 8 * INTEL_PT_AUXTRACE_PRIV_MAX
        length = info.filter_str_len
        if length:
            padded = (length + 1 + 7) & ~7
            text = raw[start:start + min(length, max(0, len(raw) - start))]
            info.filter = text.split(b"\0", 1)[0].decode("utf-8", "replace")
            after = start + padded
        else:
            after = start
        if after < len(raw):
            k = (len(raw) - after) // 8
            info.extra = tuple(int.from_bytes(raw[after + 8 * i:after + 8 * i + 8], "little") for i in range(k))
    return info


@dataclass
class TimeConv:
    """perf time <-> TSC conversion (PERF_RECORD_TIME_CONV)."""

    time_shift: int
    time_mult: int
    time_zero: int
    time_cycles: int | None = None
    time_mask: int | None = None
    cap_user_time_zero: bool | None = None
    cap_user_time_short: bool | None = None

    def tsc_to_perf_time(self, cyc: int) -> int:
        """perf's tsc_to_perf_time (tools/perf/util/tsc.c)."""
        if self.cap_user_time_short and self.time_mask is not None:
            cyc = self.time_cycles + ((cyc - self.time_cycles) & self.time_mask)
        quot = cyc >> self.time_shift
        rem = cyc & ((1 << self.time_shift) - 1)
        return (self.time_zero + quot * self.time_mult + ((rem * self.time_mult) >> self.time_shift)) & (
            (1 << 64) - 1
        )

    def perf_time_to_tsc(self, ns: int) -> int:
        """perf's perf_time_to_tsc."""
        t = (ns - self.time_zero) & ((1 << 64) - 1)
        quot, rem = divmod(t, self.time_mult)
        return (quot << self.time_shift) + (rem << self.time_shift) // self.time_mult
