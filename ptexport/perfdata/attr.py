"""perf_event_attr as perf stores it (file attrs section, HEADER_ATTR records, event_desc feature)."""

from __future__ import annotations

import struct

from ptexport.errors import PerfDataError, TruncatedError
from ptexport.perfdata.constants import (
    INTEL_PT_CONFIG_TERMS,
    SAMPLE_ID_ALL_BITS,
    AttrFlag,
    ReadFormat,
    SampleType,
)

# The fields of perf_event_attr up to ABI version 8 (136 bytes); shorter attrs are zero-extended.
_ATTR = struct.Struct("<IIQQQQQIIQQQQIiQIHHIIQQ")
ATTR_MAX_SIZE = _ATTR.size  # 136


def _flag(bit: int):
    mask = 1 << bit

    def get(self: "EventAttr") -> bool:
        return bool(self.flags & mask)

    get.__doc__ = f"attr flag bit {bit}"
    return property(get)


class EventAttr:
    """One perf_event_attr plus the sample ids perf recorded for it and its name (when perf wrote one)."""

    __slots__ = (
        "type", "size", "config", "sample_period", "sample_type", "read_format", "flags",
        "wakeup", "bp_type", "config1", "config2", "branch_sample_type", "sample_regs_user",
        "sample_stack_user", "clockid", "sample_regs_intr", "aux_watermark", "sample_max_stack",
        "aux_sample_size", "sig_data", "config3", "ids", "name", "index",
        # derived, for the record parser
        "id_pos", "is_pos", "sample_id_size", "_sample_head",
    )

    def __init__(self, raw: bytes, *, ids: list[int] | None = None, name: str | None = None, index: int = 0):
        size = len(raw)
        if size < ATTR_MAX_SIZE:
            raw = bytes(raw) + bytes(ATTR_MAX_SIZE - size)
        (
            self.type, self.size, self.config, self.sample_period, self.sample_type, self.read_format,
            self.flags, self.wakeup, self.bp_type, self.config1, self.config2, self.branch_sample_type,
            self.sample_regs_user, self.sample_stack_user, self.clockid, self.sample_regs_intr,
            self.aux_watermark, self.sample_max_stack, _res2, self.aux_sample_size, _res3,
            self.sig_data, self.config3,
        ) = _ATTR.unpack_from(raw, 0)
        self.ids = list(ids or [])
        self.name = name
        self.index = index
        self._derive()

    @classmethod
    def parse(cls, buf, offset: int, limit: int, *, source: str, what: str, index: int = 0) -> "EventAttr":
        """Read an attr at ``buf[offset:]`` whose own size field says how long it is (bounded by ``limit``)."""
        if offset + 8 > limit:
            raise TruncatedError("attr header runs past the end", source=source, offset=offset, what=what)
        (size,) = struct.unpack_from("<I", buf, offset + 4)
        if size == 0:
            size = 64  # PERF_ATTR_SIZE_VER0: perf treats 0 as the first ABI version
        if size < 64:
            raise PerfDataError(f"attr size {size} is smaller than 64", source=source, offset=offset, what=what)
        if offset + size > limit:
            raise TruncatedError(f"attr of {size} bytes runs past the end", source=source, offset=offset, what=what)
        return cls(bytes(buf[offset:offset + min(size, ATTR_MAX_SIZE)]), index=index)

    def _derive(self) -> None:
        st = self.sample_type
        # position of the id among the u64s at the start of a SAMPLE (perf: evsel id_pos)
        if st & SampleType.IDENTIFIER:
            self.id_pos = 0
        elif not st & SampleType.ID:
            self.id_pos = -1
        else:
            pos = 0
            for bit in (SampleType.IP, SampleType.TID, SampleType.TIME, SampleType.ADDR):
                if st & bit:
                    pos += 1
            self.id_pos = pos
        # position of the id counted from the end of other records' sample_id trailer (perf: is_pos)
        if st & SampleType.IDENTIFIER:
            self.is_pos = 1
        elif not st & SampleType.ID:
            self.is_pos = -1
        else:
            pos = 1
            if st & SampleType.CPU:
                pos += 1
            if st & SampleType.STREAM_ID:
                pos += 1
            self.is_pos = pos
        n = 0
        for bit in (SampleType.TID, SampleType.TIME, SampleType.ID, SampleType.STREAM_ID, SampleType.CPU,
                    SampleType.IDENTIFIER):
            if st & bit:
                n += 1
        self.sample_id_size = 8 * n if self.sample_id_all else 0
        self._sample_head = None  # built by the record parser on first use

    # --- convenience -------------------------------------------------------------------------------
    @property
    def sample_freq(self) -> int:
        return self.sample_period

    @property
    def precise_ip(self) -> int:
        return (self.flags >> AttrFlag.PRECISE_IP) & 3

    @property
    def bp_addr(self) -> int:
        return self.config1

    @property
    def bp_len(self) -> int:
        return self.config2

    @property
    def wakeup_events(self) -> int:
        return self.wakeup

    @property
    def wakeup_watermark(self) -> int:
        return self.wakeup

    @property
    def sample_type_flags(self) -> SampleType:
        return SampleType(self.sample_type & ((1 << 25) - 1))

    @property
    def read_format_flags(self) -> ReadFormat:
        return ReadFormat(self.read_format & 31)

    @property
    def has_sample_id_trailer(self) -> bool:
        return bool(self.sample_id_all and self.sample_type & SAMPLE_ID_ALL_BITS)

    disabled = _flag(AttrFlag.DISABLED)
    inherit = _flag(AttrFlag.INHERIT)
    pinned = _flag(AttrFlag.PINNED)
    exclusive = _flag(AttrFlag.EXCLUSIVE)
    exclude_user = _flag(AttrFlag.EXCLUDE_USER)
    exclude_kernel = _flag(AttrFlag.EXCLUDE_KERNEL)
    exclude_hv = _flag(AttrFlag.EXCLUDE_HV)
    exclude_idle = _flag(AttrFlag.EXCLUDE_IDLE)
    mmap = _flag(AttrFlag.MMAP)
    comm = _flag(AttrFlag.COMM)
    freq = _flag(AttrFlag.FREQ)
    inherit_stat = _flag(AttrFlag.INHERIT_STAT)
    enable_on_exec = _flag(AttrFlag.ENABLE_ON_EXEC)
    task = _flag(AttrFlag.TASK)
    watermark = _flag(AttrFlag.WATERMARK)
    mmap_data = _flag(AttrFlag.MMAP_DATA)
    sample_id_all = _flag(AttrFlag.SAMPLE_ID_ALL)
    exclude_host = _flag(AttrFlag.EXCLUDE_HOST)
    exclude_guest = _flag(AttrFlag.EXCLUDE_GUEST)
    exclude_callchain_kernel = _flag(AttrFlag.EXCLUDE_CALLCHAIN_KERNEL)
    exclude_callchain_user = _flag(AttrFlag.EXCLUDE_CALLCHAIN_USER)
    mmap2 = _flag(AttrFlag.MMAP2)
    comm_exec = _flag(AttrFlag.COMM_EXEC)
    use_clockid = _flag(AttrFlag.USE_CLOCKID)
    context_switch = _flag(AttrFlag.CONTEXT_SWITCH)
    write_backward = _flag(AttrFlag.WRITE_BACKWARD)
    namespaces = _flag(AttrFlag.NAMESPACES)
    ksymbol = _flag(AttrFlag.KSYMBOL)
    bpf_event = _flag(AttrFlag.BPF_EVENT)
    aux_output = _flag(AttrFlag.AUX_OUTPUT)
    cgroup = _flag(AttrFlag.CGROUP)
    text_poke = _flag(AttrFlag.TEXT_POKE)
    build_id = _flag(AttrFlag.BUILD_ID)
    inherit_thread = _flag(AttrFlag.INHERIT_THREAD)
    remove_on_exec = _flag(AttrFlag.REMOVE_ON_EXEC)
    sigtrap = _flag(AttrFlag.SIGTRAP)

    def flag_names(self) -> list[str]:
        """Names of the set flag bits in perf's order (as `perf report --header-only -I` lists them)."""
        out = []
        for f in AttrFlag:
            if f is AttrFlag.PRECISE_IP:
                if self.precise_ip:
                    out.append("precise_ip")
                continue
            if self.flags >> f & 1:
                out.append(f.name.lower())
        return out

    def __repr__(self) -> str:
        return (f"EventAttr(name={self.name!r}, type={self.type}, config={self.config:#x}, "
                f"sample_type={self.sample_type:#x}, ids={self.ids})")


def perf_config_terms(attr: EventAttr, pmu_name: str = "intel_pt") -> dict[str, int]:
    """Decode an intel_pt attr's config into perf's term names (only the terms that are set).

    Uses the bit layout the Linux intel_pt PMU publishes in /sys/bus/event_source/devices/intel_pt/format
    (pt: config:0, cyc: config:1, pwr_evt: config:4, fup_on_ptw: config:5, mtc: config:9, tsc: config:10,
    noretcomp: config:11, ptw: config:12, branch: config:13, mtc_period: config:14-17,
    cyc_thresh: config:19-22, psb_period: config:24-27, event: config:31, notnt: config:55).
    Bits outside these terms are returned under ``"unknown"`` (their mask).
    """
    if pmu_name != "intel_pt":
        return {"config": attr.config} if attr.config else {}
    cfg = attr.config
    out: dict[str, int] = {}
    known = 0
    for term, (bit, width) in INTEL_PT_CONFIG_TERMS.items():
        mask = ((1 << width) - 1) << bit
        known |= mask
        val = (cfg & mask) >> bit
        if val:
            out[term] = val
    if cfg & ~known:
        out["unknown"] = cfg & ~known
    return out
