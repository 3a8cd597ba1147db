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


# perf's generic event names (tools/perf/util/evsel.c), in perf_event.h enum order. perf 6.1 names no
# software event past dummy: bpf-output (10) and cgroup-switches (11) read "unknown-software".
_HW_NAMES = ("cycles", "instructions", "cache-references", "cache-misses", "branches", "branch-misses",
             "bus-cycles", "stalled-cycles-frontend", "stalled-cycles-backend", "ref-cycles")
_SW_NAMES = ("cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations", "minor-faults",
             "major-faults", "alignment-faults", "emulation-faults", "dummy")
_CACHE_NAMES = ("L1-dcache", "L1-icache", "LLC", "dTLB", "iTLB", "branch", "node")
_CACHE_OPS = (("load", "loads"), ("store", "stores"), ("prefetch", "prefetches"))  # (with a result, without)
_CACHE_RESULTS = ("refs", "misses")
# the ops each cache type supports (bit = op): L1-icache has no stores, iTLB and branch only loads
_CACHE_VALID_OPS = (0b111, 0b101, 0b111, 0b111, 0b001, 0b001, 0b111)
_BP_R, _BP_W, _BP_X = 1, 2, 4  # HW_BREAKPOINT_R / _W / _X in attr.bp_type

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT = 0, 1, 2
PERF_TYPE_HW_CACHE, PERF_TYPE_RAW, PERF_TYPE_BREAKPOINT = 3, 4, 5


def _modifiers(attr: EventAttr) -> str:
    """perf's ``:kuhpppHG`` suffix for an attr (evsel__add_modifiers, perf 6.1), "" when nothing shows.

    The contexts k/u/h are listed (the ones not excluded) only when one of them is excluded; ``p`` is
    repeated precise_ip times; H/G (the ones not excluded) appear when exclude_host is set or when
    exclude_guest equals what perf would have chosen itself (set when k/u/h or p show, clear otherwise).
    """
    mods = []
    guest_default = False
    if attr.exclude_kernel or attr.exclude_user or attr.exclude_hv:
        mods += [c for c, gone in (("k", attr.exclude_kernel), ("u", attr.exclude_user), ("h", attr.exclude_hv))
                 if not gone]
        guest_default = True
    if attr.precise_ip:
        mods.append("p" * attr.precise_ip)
        guest_default = True
    if attr.exclude_host or attr.exclude_guest == guest_default:
        mods += [c for c, gone in (("H", attr.exclude_host), ("G", attr.exclude_guest)) if not gone]
    return ":" + "".join(mods) if mods else ""


def _hw_cache_name(config: int) -> str:
    ctype, op, result = config & 0xFF, (config >> 8) & 0xFF, (config >> 16) & 0xFF
    if ctype >= len(_CACHE_NAMES):
        return "unknown-ext-hardware-cache-type"
    if op >= len(_CACHE_OPS):
        return "unknown-ext-hardware-cache-op"
    if result >= len(_CACHE_RESULTS):
        return "unknown-ext-hardware-cache-result"
    if not _CACHE_VALID_OPS[ctype] >> op & 1:
        return "invalid-cache"
    if result:
        return f"{_CACHE_NAMES[ctype]}-{_CACHE_OPS[op][0]}-{_CACHE_RESULTS[result]}"
    return f"{_CACHE_NAMES[ctype]}-{_CACHE_OPS[op][1]}"


def perf_event_name(attr: EventAttr) -> str:
    """The name perf 6.1 gives an event that has none recorded (``evsel__name``).

    Recordings name their events in the event_desc feature or EVENT_UPDATE records; without one (e.g.
    pipe-mode files whose feature records precede their attrs) perf derives the name from the attr:
    generic hardware / software / cache event names, ``raw 0x<config>``, ``mem:0x<addr>:<rwx>`` for
    breakpoints, each with the modifiers suffix; ``unknown tracepoint`` (perf would take the name from the
    tracing data's formats, which ptexport does not parse) and ``unknown attr type: N`` for PMU types.
    A hardware config with an extended PMU type in its upper 32 bits (hybrid CPUs) reads
    ``cpu/<name>/``: perf 6.1 puts that PMU name there on a host without hybrid PMUs, the one
    ptexport assumes (on a hybrid host perf would print cpu_core / cpu_atom).
    """
    t, config = attr.type, attr.config
    if t == PERF_TYPE_HARDWARE:
        ev = config & 0xFFFFFFFF
        base = _HW_NAMES[ev] if ev < len(_HW_NAMES) else "unknown-hardware"
        if config >> 32:
            base = f"cpu/{base}/"
        return base + _modifiers(attr)
    if t == PERF_TYPE_SOFTWARE:
        return (_SW_NAMES[config] if config < len(_SW_NAMES) else "unknown-software") + _modifiers(attr)
    if t == PERF_TYPE_HW_CACHE:
        return _hw_cache_name(config) + _modifiers(attr)
    if t == PERF_TYPE_RAW:
        return f"raw {config:#x}" + _modifiers(attr)
    if t == PERF_TYPE_BREAKPOINT:
        rwx = "".join(c for bit, c in ((_BP_R, "r"), (_BP_W, "w"), (_BP_X, "x")) if attr.bp_type & bit)
        return f"mem:{attr.bp_addr:#x}:{rwx}" + _modifiers(attr)
    if t == PERF_TYPE_TRACEPOINT:
        return "unknown tracepoint"
    return f"unknown attr type: {t - (1 << 32) if t >= 1 << 31 else t}"


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
