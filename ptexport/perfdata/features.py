"""Feature sections of perf.data (tools/perf/util/header.c write_* / process_* formats).

Each parser takes a :class:`FeatReader` over the section's bytes and returns a plain value; a malformed
section raises :class:`BadFeature` (the reader names the feature and the absolute offset).
"""

from __future__ import annotations

import struct
from typing import Callable, NamedTuple

from ptexport.perfdata.constants import Feature

PERF_RECORD_MISC_BUILD_ID_SIZE = 1 << 15


class BadFeature(Exception):
    def __init__(self, cause: str, rel: int):
        super().__init__(cause)
        self.cause = cause
        self.rel = rel


class FeatReader:
    """Bounds-checked cursor over one feature section."""

    __slots__ = ("buf", "pos", "end", "start")

    def __init__(self, buf, start: int, end: int):
        self.buf = buf
        self.pos = start
        self.start = start
        self.end = end

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise BadFeature(f"{what} ({n} bytes) runs past the end of the section", self.pos - self.start)

    def u32(self, what: str = "u32") -> int:
        self.need(4, what)
        (v,) = struct.unpack_from("<I", self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str = "u64") -> int:
        self.need(8, what)
        (v,) = struct.unpack_from("<Q", self.buf, self.pos)
        self.pos += 8
        return v

    def bytes(self, n: int, what: str = "bytes") -> bytes:
        self.need(n, what)
        v = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return v

    def string(self, what: str = "string") -> str:
        """perf's do_write_string: u32 length (padded, NUL included) then the bytes."""
        n = self.u32(f"{what} length")
        raw = self.bytes(n, what)
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    @property
    def left(self) -> int:
        return self.end - self.pos


class BuildIdEntry(NamedTuple):
    pid: int
    misc: int
    build_id: bytes
    filename: str

    @property
    def cpumode(self) -> int:
        return self.misc & 7


class NrCpus(NamedTuple):
    nr_cpus_avail: int
    nr_cpus_online: int


class NumaNode(NamedTuple):
    node: int
    mem_total: int
    mem_free: int
    cpus: str


class GroupDesc(NamedTuple):
    name: str
    leader_idx: int
    nr_members: int


class CacheLevel(NamedTuple):
    level: int
    line_size: int
    sets: int
    ways: int
    type: str
    size: str
    map: str


class ClockData(NamedTuple):
    version: int
    clockid: int
    wall_clock_ns: int
    clockid_time_ns: int


class Compressed(NamedTuple):
    version: int
    type: int
    level: int
    ratio: int
    mmap_len: int


class EventDesc(NamedTuple):
    attr: object  # EventAttr
    name: str
    ids: list[int]


def f_build_id(r: FeatReader):
    out = []
    while r.left > 0:
        start = r.pos
        r.need(8, "build-id entry header")
        _type, misc, size = struct.unpack_from("<IHH", r.buf, r.pos)
        if size < 36:
            raise BadFeature(f"build-id entry size {size} is smaller than 36", start - r.start)
        r.need(size, "build-id entry")
        (pid,) = struct.unpack_from("<i", r.buf, start + 8)
        raw = bytes(r.buf[start + 12:start + 36])
        if misc & PERF_RECORD_MISC_BUILD_ID_SIZE:
            bid = raw[:min(raw[20], 20)]
        else:
            bid = raw[:20]
        name = bytes(r.buf[start + 36:start + size]).split(b"\0", 1)[0].decode("utf-8", "replace")
        out.append(BuildIdEntry(pid, misc & ~PERF_RECORD_MISC_BUILD_ID_SIZE, bid, name))
        r.pos = start + size
    return out


def f_string(r: FeatReader):
    return r.string()


def f_nrcpus(r: FeatReader):
    avail = r.u32("nr_cpus_avail")
    online = r.u32("nr_cpus_online")
    return NrCpus(avail, online)


def f_total_mem(r: FeatReader):
    return r.u64("total_mem")


def _count(r: FeatReader, what: str, min_item: int) -> int:
    n = r.u32(f"{what} count")
    if n * min_item > r.left:
        raise BadFeature(f"{n} {what} entries do not fit the section", r.pos - 4 - r.start)
    return n


def f_cmdline(r: FeatReader):
    n = _count(r, "cmdline", 4)
    return [r.string("argument") for _ in range(n)]


def f_event_desc(r: FeatReader):
    from ptexport.perfdata.attr import ATTR_MAX_SIZE, EventAttr

    n = _count(r, "event", 8)
    asize = r.u32("attr size")
    if n and asize < 64:
        raise BadFeature(f"attr size {asize} is smaller than 64", r.pos - 4 - r.start)
    out = []
    for i in range(n):
        raw = r.bytes(asize, f"attr {i}")
        attr = EventAttr(raw[:ATTR_MAX_SIZE], index=i)
        nr_ids = r.u32("id count")
        name = r.string("event name")
        if nr_ids * 8 > r.left:
            raise BadFeature(f"{nr_ids} ids do not fit the section", r.pos - r.start)
        ids = list(struct.unpack_from(f"<{nr_ids}Q", r.buf, r.pos))
        r.pos += 8 * nr_ids
        attr.ids = ids
        attr.name = name
        out.append(EventDesc(attr, name, ids))
    return out


def f_cpu_topology(r: FeatReader):
    out: dict[str, object] = {}
    n = _count(r, "core siblings", 4)
    out["core_siblings"] = [r.string() for _ in range(n)]
    n = _count(r, "thread siblings", 4)
    out["thread_siblings"] = [r.string() for _ in range(n)]
    # optional: per-cpu core/socket ids (count = nr_cpus_avail, unknown here: read pairs until dies)
    out["cpus"] = []
    out["die_siblings"] = []
    out["die_ids"] = []
    return out


def f_numa_topology(r: FeatReader):
    n = _count(r, "numa node", 24)
    out = []
    for _ in range(n):
        node = r.u32("node")
        total = r.u64("mem_total")
        free = r.u64("mem_free")
        out.append(NumaNode(node, total, free, r.string("cpus")))
    return out


def f_pmu_mappings(r: FeatReader):
    n = _count(r, "pmu", 8)
    out = {}
    for _ in range(n):
        t = r.u32("pmu type")
        out[t] = r.string("pmu name")
    return out


def f_group_desc(r: FeatReader):
    n = _count(r, "group", 12)
    out = []
    for _ in range(n):
        name = r.string("group name")
        out.append(GroupDesc(name, r.u32("leader idx"), r.u32("nr members")))
    return out


def f_auxtrace(r: FeatReader):
    """The auxtrace index: (file offset, size) of every AUXTRACE record, as perf recorded them."""
    n = r.u64("index count")
    if n * 16 > r.left:
        raise BadFeature(f"{n} auxtrace index entries do not fit the section", 0)
    return [struct.unpack_from("<QQ", r.buf, r.pos + 16 * i) for i in range(n)]


def f_empty(r: FeatReader):
    return True


def f_cache(r: FeatReader):
    version = r.u32("version")
    if version != 1:
        raise BadFeature(f"cache version {version} is not 1", 0)
    n = _count(r, "cache level", 28)
    out = []
    for _ in range(n):
        level, line, sets, ways = (r.u32("level"), r.u32("line_size"), r.u32("sets"), r.u32("ways"))
        out.append(CacheLevel(level, line, sets, ways, r.string("type"), r.string("size"), r.string("map")))
    return out


def f_sample_time(r: FeatReader):
    return (r.u64("first sample time"), r.u64("last sample time"))


def f_mem_topology(r: FeatReader):
    version = r.u64("version")
    block_size = r.u64("block size")
    n = r.u64("node count")
    if n * 24 > r.left:
        raise BadFeature(f"{n} memory nodes do not fit the section", 16)
    nodes = []
    for _ in range(n):
        node = r.u64("node")
        size = r.u64("size")
        nbits = r.u64("bitmap size")
        words = (nbits + 63) // 64
        if words * 8 > r.left:
            raise BadFeature(f"memory bitmap of {nbits} bits runs past the section", r.pos - r.start)
        bitmap = struct.unpack_from(f"<{words}Q", r.buf, r.pos)
        r.pos += 8 * words
        nodes.append({"node": node, "size": size, "bitmap_bits": nbits, "bitmap": bitmap})
    return {"version": version, "block_size": block_size, "nodes": nodes}


def f_u64(r: FeatReader):
    return r.u64()


def f_bpf_btf(r: FeatReader):
    n = _count(r, "btf", 8)
    out = []
    for _ in range(n):
        bid = r.u32("btf id")
        size = r.u32("btf size")
        out.append((bid, r.bytes(size, "btf data")))
    return out


def f_bpf_prog_info(r: FeatReader):
    # bpf_prog_info_linear blobs; only the count is decoded (perf's layout depends on the kernel's struct)
    n = _count(r, "bpf prog", 16)
    return {"count": n, "size": r.end - r.start}


def f_compressed(r: FeatReader):
    return Compressed(r.u32("version"), r.u32("type"), r.u32("level"), r.u32("ratio"), r.u32("mmap_len"))


def f_cpu_pmu_caps(r: FeatReader):
    n = _count(r, "cpu pmu cap", 8)
    caps = {}
    for _ in range(n):
        name = r.string("cap name")
        caps[name] = r.string("cap value")
    return caps


def f_clock_data(r: FeatReader):
    version = r.u32("version")
    clockid = r.u32("clockid")
    return ClockData(version, clockid, r.u64("wall clock ns"), r.u64("clockid time ns"))


def f_hybrid_topology(r: FeatReader):
    n = _count(r, "hybrid pmu", 8)
    out = {}
    for _ in range(n):
        name = r.string("pmu name")
        out[name] = r.string("cpus")
    return out


def f_pmu_caps(r: FeatReader):
    nr_pmu = _count(r, "pmu", 8)
    out = {}
    for _ in range(nr_pmu):
        nr_caps = _count(r, "pmu cap", 8)
        caps = {}
        for _ in range(nr_caps):
            name = r.string("cap name")
            caps[name] = r.string("cap value")
        out[r.string("pmu name")] = caps
    return out


def f_tracing_data(r: FeatReader):
    return {"size": r.end - r.start}


FEATURE_PARSERS: dict[int, Callable[[FeatReader], object]] = {
    Feature.TRACING_DATA: f_tracing_data,
    Feature.BUILD_ID: f_build_id,
    Feature.HOSTNAME: f_string,
    Feature.OSRELEASE: f_string,
    Feature.VERSION: f_string,
    Feature.ARCH: f_string,
    Feature.NRCPUS: f_nrcpus,
    Feature.CPUDESC: f_string,
    Feature.CPUID: f_string,
    Feature.TOTAL_MEM: f_total_mem,
    Feature.CMDLINE: f_cmdline,
    Feature.EVENT_DESC: f_event_desc,
    Feature.CPU_TOPOLOGY: f_cpu_topology,
    Feature.NUMA_TOPOLOGY: f_numa_topology,
    Feature.BRANCH_STACK: f_empty,
    Feature.PMU_MAPPINGS: f_pmu_mappings,
    Feature.GROUP_DESC: f_group_desc,
    Feature.AUXTRACE: f_auxtrace,
    Feature.STAT: f_empty,
    Feature.CACHE: f_cache,
    Feature.SAMPLE_TIME: f_sample_time,
    Feature.MEM_TOPOLOGY: f_mem_topology,
    Feature.CLOCKID: f_u64,
    Feature.DIR_FORMAT: f_u64,
    Feature.BPF_PROG_INFO: f_bpf_prog_info,
    Feature.BPF_BTF: f_bpf_btf,
    Feature.COMPRESSED: f_compressed,
    Feature.CPU_PMU_CAPS: f_cpu_pmu_caps,
    Feature.CLOCK_DATA: f_clock_data,
    Feature.HYBRID_TOPOLOGY: f_hybrid_topology,
    Feature.PMU_CAPS: f_pmu_caps,
}
FEATURE_PARSERS = {int(k): v for k, v in FEATURE_PARSERS.items()}


def parse_cpu_topology(r: FeatReader, nr_cpus_avail: int | None):
    """CPU_TOPOLOGY needs nr_cpus_avail (from NRCPUS) to read the per-cpu id arrays."""
    out = f_cpu_topology(r)
    if nr_cpus_avail and r.left >= 8 * nr_cpus_avail:
        cpus = []
        for _ in range(nr_cpus_avail):
            core = r.u32("core id")
            socket = r.u32("socket id")
            cpus.append({"core_id": _i32(core), "socket_id": _i32(socket)})
        out["cpus"] = cpus
        if r.left >= 4:
            n = _count(r, "die siblings", 4)
            out["die_siblings"] = [r.string() for _ in range(n)]
            if r.left >= 4 * nr_cpus_avail:
                out["die_ids"] = [_i32(r.u32("die id")) for _ in range(nr_cpus_avail)]
                for c, d in zip(cpus, out["die_ids"]):
                    c["die_id"] = d
    return out


def _i32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v
