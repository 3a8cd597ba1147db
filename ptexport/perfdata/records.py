"""Record classes (one per perf record kind, perf's field names) and their parsers.

A parser takes ``(ctx, buf, off, size)`` where ``buf[off:off+size]`` is the whole record (header
included) and returns the record object; the caller has already checked that the record lies inside
its buffer.  Parsers raise :class:`BadRecord` with a cause; the reader turns it into a
:class:`~ptexport.errors.PerfDataError` naming the file, the absolute offset and the record kind.

Layouts are declared once, as plain data (pyelftools' ``structs.py`` way): :data:`SAMPLE_ID_LAYOUT` and
:data:`SAMPLE_HEAD_LAYOUT` list each sample_type bit's struct format and field names, :data:`FIXED_SPECS`
each fixed-layout kind's struct and the function naming its fields.  The per-attr parsers (trailer,
SAMPLE head, fixed kind + trailer in one unpack) are closures built from those declarations by ordinary
code; nothing is generated as source text.
"""

from __future__ import annotations

import struct
from operator import itemgetter as _itemgetter
from typing import TYPE_CHECKING, Callable

from ptexport.perfdata.constants import (
    PERF_RECORD_MISC_COMM_EXEC,
    PERF_RECORD_MISC_CPUMODE_MASK,
    PERF_RECORD_MISC_MMAP_BUILD_ID,
    PERF_RECORD_MISC_SWITCH_OUT,
    PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    RECORD_NAMES,
    AuxFlag,
    CpuMapType,
    EventUpdateType,
    ReadFormat,
    RecordType,
    SampleType,
)

if TYPE_CHECKING:
    from ptexport.perfdata.attr import EventAttr

PERF_SAMPLE_BRANCH_HW_INDEX = 1 << 17
PERF_RECORD_MISC_BUILD_ID_SIZE = 1 << 15


_tuple_new = tuple.__new__


class BadRecord(Exception):
    """Internal: a record's body does not fit its declared layout (converted to PerfDataError)."""

    def __init__(self, cause: str, rel: int = 0):
        super().__init__(cause)
        self.cause = cause
        self.rel = rel  # offset inside the record where it went wrong


_u8 = struct.Struct("<B").unpack_from
_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i32 = struct.Struct("<i").unpack_from
_u64 = struct.Struct("<Q").unpack_from
_2u32 = struct.Struct("<II").unpack_from
_2i32 = struct.Struct("<ii").unpack_from
_2u64 = struct.Struct("<QQ").unpack_from
_3u64 = struct.Struct("<QQQ").unpack_from


def cstr(buf, start: int, end: int) -> str:
    """A NUL-terminated (or end-bounded) string from ``buf[start:end]``."""
    raw = bytes(buf[start:end])
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    return raw.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------------
# sample_id (the sample_id_all trailer, or the id fields of a SAMPLE)
# --------------------------------------------------------------------------------------------------


class SampleId(tuple):
    """The identifying fields perf appends to non-sample records (attr.sample_id_all), or a SAMPLE's own.

    An immutable tuple (pid, tid, time, id, stream_id, cpu, identifier) with those names as attributes;
    absent fields are None."""

    __slots__ = ()
    _fields = ("pid", "tid", "time", "id", "stream_id", "cpu", "identifier")

    def __new__(cls, pid=None, tid=None, time=None, id=None, stream_id=None, cpu=None, identifier=None):
        return _tuple_new(cls, (pid, tid, time, id, stream_id, cpu, identifier))

    pid = property(_itemgetter(0), doc="pid (PERF_SAMPLE_TID)")
    tid = property(_itemgetter(1), doc="tid (PERF_SAMPLE_TID)")
    time = property(_itemgetter(2), doc="perf time (PERF_SAMPLE_TIME)")
    id = property(_itemgetter(3), doc="event id (PERF_SAMPLE_ID, else PERF_SAMPLE_IDENTIFIER)")
    stream_id = property(_itemgetter(4), doc="PERF_SAMPLE_STREAM_ID")
    cpu = property(_itemgetter(5), doc="cpu (PERF_SAMPLE_CPU)")
    identifier = property(_itemgetter(6), doc="PERF_SAMPLE_IDENTIFIER")

    def __repr__(self) -> str:
        parts = [f"{k}={v}" for k, v in zip(self._fields, self) if v is not None]
        return f"SampleId({', '.join(parts)})"

    def __getnewargs__(self):
        return tuple(self)


#: The sample_id fields as perf writes them (struct layout declared once): sample_type bit, struct format,
#: field names.  The trailer of non-sample records (attr.sample_id_all) holds the present ones in this order.
SAMPLE_ID_LAYOUT: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (int(SampleType.TID), "ii", ("pid", "tid")),
    (int(SampleType.TIME), "Q", ("time",)),
    (int(SampleType.ID), "Q", ("id",)),
    (int(SampleType.STREAM_ID), "Q", ("stream_id",)),
    (int(SampleType.CPU), "I4x", ("cpu",)),
    (int(SampleType.IDENTIFIER), "Q", ("identifier",)),
)

_NONE = (None,)  # appended to unpacked values: the index of an absent field


def layout_of(table, sample_type: int) -> tuple[str, tuple[str, ...]]:
    """The struct format (without byte order) and field names of the entries of ``table`` (a
    ``(bit, format, names)`` declaration) whose bit is set in ``sample_type``."""
    fmt, names = "", []
    for bit, f, ns in table:
        if sample_type & bit:
            fmt += f
            names.extend(ns)
    return fmt, tuple(names)


def sample_id_positions(names: tuple[str, ...], base: int = 0) -> tuple[int, ...]:
    """Where :class:`SampleId`'s fields are, in its order, in ``values + (None,)`` when ``values[base:]`` are
    ``names``' values and nothing follows them: absent fields read the trailing None, ``id`` reads
    ``identifier`` without PERF_SAMPLE_ID."""
    absent = base + len(names)
    where = {n: base + i for i, n in enumerate(names)}
    where.setdefault("id", where.get("identifier", absent))
    return tuple(where.get(f, absent) for f in SampleId._fields)


def sample_id_getter(names: tuple[str, ...], base: int = 0) -> Callable[[tuple], tuple]:
    """:func:`sample_id_positions` as one getter of ``values + (None,)``."""
    return _itemgetter(*sample_id_positions(names, base))


class TrailerLayout:
    """How to read the sample_id_all trailer of one sample_type (precomputed per attr)."""

    __slots__ = ("size", "parse", "fmt", "names")

    def __init__(self, sample_type: int):
        fmt, names = layout_of(SAMPLE_ID_LAYOUT, sample_type)
        st = struct.Struct("<" + fmt)
        self.size = size = st.size
        self.fmt = fmt  # without "<"
        self.names = names
        unpack = st.unpack_from
        # SampleId's fields by plain (non-negative) indexes: cheaper per record than an itemgetter
        a, b, c, d, e, f, g = sample_id_positions(names)

        def parse(buf, end):
            """The trailer of the record ending at ``end``."""
            v = unpack(buf, end - size) + _NONE
            return _tuple_new(SampleId, (v[a], v[b], v[c], v[d], v[e], v[f], v[g]))

        self.parse = parse


# --------------------------------------------------------------------------------------------------
# Record classes
# --------------------------------------------------------------------------------------------------


class Record:
    """One perf record. ``offset`` is the byte offset of its header in its file (or stream); for records
    that came out of a COMPRESSED record it is that record's offset and ``inner_offset`` is the offset in
    the decompressed stream. ``src`` names the file for directory-format recordings (else None)."""

    __slots__ = ("type", "misc", "size", "offset", "inner_offset", "sample_id", "src")

    def __getattr__(self, name: str):
        # unset optional slots read as None (e.g. SampleRecord fields the attr did not ask for)
        if name in _OPTIONAL and name in _slots_of(type(self)):
            return None
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    @property
    def name(self) -> str:
        return RECORD_NAMES.get(self.type) or f"UNKNOWN({self.type})"

    @property
    def cpumode(self) -> int:
        return self.misc & PERF_RECORD_MISC_CPUMODE_MASK

    @property
    def guest(self) -> bool:
        """The record comes from a guest (cpumode GUEST_KERNEL or GUEST_USER): it belongs to a guest
        machine (see PerfData.machine_pid_of)."""
        return self.misc & PERF_RECORD_MISC_CPUMODE_MASK in (4, 5)

    @property
    def pid(self):
        sid = self.sample_id
        return None if sid is None else sid.pid

    @property
    def tid(self):
        sid = self.sample_id
        return None if sid is None else sid.tid

    @property
    def time(self):
        sid = self.sample_id
        return None if sid is None else sid.time

    @property
    def cpu(self):
        sid = self.sample_id
        return None if sid is None else sid.cpu

    @property
    def id(self):
        sid = self.sample_id
        return None if sid is None else sid.id

    def fields(self) -> dict:
        """The record's own fields (for dumps and tests)."""
        out = {}
        for cls in type(self).__mro__:
            for k in getattr(cls, "__slots__", ()):
                if cls is Record or k.startswith("_") or k in out:
                    continue
                out[k] = getattr(self, k, None)
        return out

    def __repr__(self) -> str:
        fs = ", ".join(f"{k}={v!r}" for k, v in self.fields().items() if v is not None)
        where = f"{self.offset:#x}" + ("" if self.inner_offset is None else f"+{self.inner_offset:#x}")
        return f"<{self.name} @{where} misc={self.misc:#x} size={self.size} {fs}>"


# names of optional fields that read as None when unset (filled in at the end of the module)
_OPTIONAL: frozenset = frozenset()
_SLOTS_CACHE: dict = {}


def _slots_of(cls) -> frozenset:
    s = _SLOTS_CACHE.get(cls)
    if s is None:
        s = frozenset(k for c in cls.__mro__ for k in getattr(c, "__slots__", ()))
        _SLOTS_CACHE[cls] = s
    return s


class MmapRecord(Record):
    __slots__ = ("pid", "tid", "addr", "len", "pgoff", "filename")

    @property
    def start(self) -> int:
        return self.addr


class Mmap2Record(Record):
    __slots__ = ("pid", "tid", "addr", "len", "pgoff", "maj", "min", "ino", "ino_generation", "prot", "flags",
                 "build_id", "filename")

    @property
    def start(self) -> int:
        return self.addr


class CommRecord(Record):
    __slots__ = ("pid", "tid", "comm")

    @property
    def exec(self) -> bool:
        return bool(self.misc & PERF_RECORD_MISC_COMM_EXEC)


class ForkRecord(Record):
    __slots__ = ("pid", "ppid", "tid", "ptid", "time")


class ExitRecord(ForkRecord):
    __slots__ = ()


class LostRecord(Record):
    __slots__ = ("lost_id", "lost")


class LostSamplesRecord(Record):
    __slots__ = ("lost",)


class ThrottleRecord(Record):
    __slots__ = ("time", "throttle_id", "stream_id")

    @property
    def throttled(self) -> bool:
        return self.type == RecordType.THROTTLE


class ReadRecord(Record):
    __slots__ = ("pid", "tid", "values")


class AuxRecord(Record):
    __slots__ = ("aux_offset", "aux_size", "flags")

    @property
    def truncated(self) -> bool:
        return bool(self.flags & AuxFlag.TRUNCATED)

    @property
    def overwrite(self) -> bool:
        return bool(self.flags & AuxFlag.OVERWRITE)

    @property
    def partial(self) -> bool:
        return bool(self.flags & AuxFlag.PARTIAL)

    @property
    def collision(self) -> bool:
        return bool(self.flags & AuxFlag.COLLISION)

    @property
    def pmu_format_type(self) -> int:
        return (self.flags >> 8) & 0xFF


class ItraceStartRecord(Record):
    __slots__ = ("pid", "tid")


class SwitchRecord(Record):
    """SWITCH and SWITCH_CPU_WIDE; next_prev_pid/tid only for the CPU-wide kind."""

    __slots__ = ("next_prev_pid", "next_prev_tid")

    @property
    def out(self) -> bool:
        return bool(self.misc & PERF_RECORD_MISC_SWITCH_OUT)

    @property
    def preempt(self) -> bool:
        return bool(self.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)

    @property
    def cpu_wide(self) -> bool:
        return self.type == 15  # PERF_RECORD_SWITCH_CPU_WIDE


class NamespacesRecord(Record):
    __slots__ = ("pid", "tid", "link_info")  # link_info: list of (dev, ino) by NamespaceIndex


class KsymbolRecord(Record):
    __slots__ = ("addr", "len", "ksym_type", "flags", "name_")

    @property
    def ksym_name(self) -> str:
        return self.name_

    @property
    def unregister(self) -> bool:
        return bool(self.flags & 1)


class BpfEventRecord(Record):
    __slots__ = ("bpf_type", "flags", "bpf_id", "tag")


class CgroupRecord(Record):
    __slots__ = ("cgroup_id", "path")


class TextPokeRecord(Record):
    __slots__ = ("addr", "old_len", "new_len", "old_bytes", "new_bytes")


class AuxOutputHwIdRecord(Record):
    __slots__ = ("hw_id",)


class SampleRecord(Record):
    """PERF_RECORD_SAMPLE with every field perf can write; absent fields are None, except ``period``, which is
    the attr's sample_period when PERF_SAMPLE_PERIOD is not sampled (as perf does)."""

    __slots__ = (
        "attr", "identifier", "ip", "pid", "tid", "time", "addr", "id", "stream_id", "cpu", "period",
        "read", "callchain", "raw", "branch_stack", "branch_hw_idx", "user_regs_abi", "user_regs",
        "user_stack", "user_stack_dyn_size", "weight", "data_src", "transaction", "intr_regs_abi",
        "intr_regs", "phys_addr", "cgroup", "data_page_size", "code_page_size", "aux",
    )

    @property
    def exact_ip(self) -> bool:
        return bool(self.misc & (1 << 14))




class FinishedRoundRecord(Record):
    __slots__ = ()


class FinishedInitRecord(Record):
    __slots__ = ()


class IdIndexEntry:
    __slots__ = ("id", "idx", "cpu", "tid", "machine_pid", "vcpu")

    def __init__(self, id, idx, cpu, tid, machine_pid=None, vcpu=None):
        self.id, self.idx, self.cpu, self.tid, self.machine_pid, self.vcpu = id, idx, cpu, tid, machine_pid, vcpu

    def __repr__(self) -> str:
        return (f"IdIndexEntry(id={self.id}, idx={self.idx}, cpu={self.cpu}, tid={self.tid}, "
                f"machine_pid={self.machine_pid}, vcpu={self.vcpu})")


class IdIndexRecord(Record):
    __slots__ = ("entries",)


class AuxtraceInfoRecord(Record):
    __slots__ = ("auxtrace_type", "priv", "info")  # info: AuxtraceInfo / IntelPTInfo


class AuxtraceRecord(Record):
    """PERF_RECORD_AUXTRACE: ``size`` is the payload size (perf's field name); the record header's size is
    ``header_size``; the payload starts at ``data_offset`` (absolute, in the record's file)."""

    __slots__ = ("header_size", "aux_offset", "reference", "idx", "tid", "cpu", "data_offset", "_data")

    # Record.size is the header size for every other record; here perf's 'size' field wins.


class AuxtraceErrorRecord(Record):
    __slots__ = ("error_type", "code", "cpu", "pid", "tid", "fmt", "ip", "time", "msg", "machine_pid", "vcpu")


class ThreadMapRecord(Record):
    __slots__ = ("entries",)  # list of (pid, comm)


class CpuMapRecord(Record):
    __slots__ = ("cpus", "any_cpu")


class StatConfigRecord(Record):
    __slots__ = ("config",)  # dict tag -> value


class StatRecord(Record):
    __slots__ = ("stat_id", "cpu", "thread", "val", "ena", "run")


class StatRoundRecord(Record):
    __slots__ = ("round_type", "time")


class TimeConvRecord(Record):
    __slots__ = ("time_shift", "time_mult", "time_zero", "time_cycles", "time_mask", "cap_user_time_zero",
                 "cap_user_time_short")


class HeaderAttrRecord(Record):
    __slots__ = ("attr", "ids")


class HeaderFeatureRecord(Record):
    __slots__ = ("feat_id", "data")


class EventUpdateRecord(Record):
    __slots__ = ("update_type", "event_id", "unit", "scale", "name_", "cpus")

    @property
    def event_name(self):
        return self.name_


class HeaderBuildIdRecord(Record):
    __slots__ = ("pid", "build_id", "filename")


class HeaderTracingDataRecord(Record):
    __slots__ = ("data_size",)


class CompressedRecord(Record):
    __slots__ = ("data_size",)


class UnknownRecord(Record):
    __slots__ = ()


# --------------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------------


class ParseContext:
    """What the parsers need from the reader: attrs and how to find the attr of a record."""

    __slots__ = ("attrs", "by_id", "uniform", "trailer", "trailers", "tsize", "utrailer", "parsers")

    def __init__(self) -> None:
        self.attrs: list[EventAttr] = []
        self.by_id: dict[int, EventAttr] = {}
        self.uniform: EventAttr | None = None
        self.trailer: TrailerLayout | None = None
        self.trailers: dict[int, TrailerLayout] = {}
        self.tsize = 0
        self.utrailer: TrailerLayout | None = None  # the trailer when every attr has the same one
        self.parsers: dict[int, Callable] = PARSERS

    def set_attrs(self, attrs: list["EventAttr"]) -> None:
        self.attrs = attrs
        self.by_id = {}
        for a in attrs:
            for i in a.ids:
                self.by_id[i] = a
        self.trailers = {}
        types = {(a.sample_type, a.sample_id_all) for a in attrs}
        self.uniform = attrs[0] if len(types) == 1 else None
        if attrs:
            first = attrs[0]
            self.trailer = self._trailer_for(first) if first.sample_id_all else None
        else:
            self.trailer = None
        u = self.uniform
        self.utrailer = None
        if u is not None and u.sample_id_all:
            t = self._trailer_for(u)
            if t.size:
                self.utrailer = t
        # the parser table for this set of attrs: with one trailer for all, the fixed-layout kinds read
        # body and trailer in one unpack
        self.parsers = PARSERS
        if self.utrailer is not None:
            self.parsers = dict(PARSERS)
            for rtype, spec in FIXED_SPECS.items():
                self.parsers[rtype] = _combined_parser(rtype, spec, self.utrailer)

    def _trailer_for(self, attr) -> TrailerLayout:
        t = self.trailers.get(attr.sample_type)
        if t is None:
            t = self.trailers[attr.sample_type] = TrailerLayout(attr.sample_type)
        return t

    def sample_attr(self, buf, off: int, size: int):
        """The attr of a SAMPLE record at ``off``."""
        if self.uniform is not None or not self.attrs:
            return self.uniform
        first = self.attrs[0]
        pos = first.id_pos
        if pos < 0:
            return first
        p = off + 8 + 8 * pos
        if p + 8 > off + size:
            raise BadRecord("too short to hold the sample id", 8 + 8 * pos)
        (sid,) = _u64(buf, p)
        a = self.by_id.get(sid)
        if a is None:
            raise BadRecord(f"sample id {sid} belongs to no attr", 8 + 8 * pos)
        return a

    def sample_id(self, buf, off: int, size: int, fixed: int) -> SampleId | None:
        """Parse the sample_id_all trailer of a non-sample record whose fixed part is ``fixed`` bytes;
        leaves the trailer's size in ``self.tsize``."""
        ut = self.utrailer
        if ut is not None:
            if size - ut.size < fixed:
                raise BadRecord(f"size {size} is too small for the fixed fields ({fixed} bytes) and the "
                                f"{ut.size}-byte sample_id trailer", 0)
            self.tsize = ut.size
            return ut.parse(buf, off + size)
        self.tsize = 0
        if self.uniform is not None:
            a = self.uniform
        elif not self.attrs:
            return None
        else:
            first = self.attrs[0]
            if not first.sample_id_all:
                return None
            pos = first.is_pos
            if pos < 0:
                a = first
            else:
                p = off + size - 8 * pos
                if p < off + fixed:
                    raise BadRecord(f"size {size} is too small for the fixed fields ({fixed} bytes) and the "
                                    "sample_id trailer", 0)
                (sid,) = _u64(buf, p)
                a = self.by_id.get(sid) or first
        if not a.sample_id_all:
            return None
        t = self.trailers.get(a.sample_type)
        if t is None:
            t = self._trailer_for(a)
        if not t.size:
            return None
        if size - t.size < fixed:
            raise BadRecord(f"size {size} is too small for the fixed fields ({fixed} bytes) and the "
                            f"{t.size}-byte sample_id trailer", 0)
        self.tsize = t.size
        return t.parse(buf, off + size)


def _new(cls, rtype, misc, size):
    # inner_offset / src stay unset (they read as None) unless the reader sets them; the record classes
    # have no __init__, so cls() is a bare instance (cheaper than cls.__new__(cls))
    r = cls()
    r.type = rtype
    r.misc = misc
    r.size = size
    return r


def _need(size: int, n: int, what: str) -> None:
    if size < n:
        raise BadRecord(f"size {size} is too small for {what} ({n} bytes)")


def p_mmap(ctx, buf, off, size, rtype, misc):
    _need(size, 40, "the MMAP fields")
    r = _new(MmapRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 40)
    end = off + size - ctx.tsize
    r.pid, r.tid = _2i32(buf, off + 8)
    r.addr, r.len, r.pgoff = _3u64(buf, off + 16)
    r.filename = cstr(buf, off + 40, max(end, off + 40))
    return r


def p_mmap2(ctx, buf, off, size, rtype, misc):
    _need(size, 72, "the MMAP2 fields")
    r = _new(Mmap2Record, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 72)
    end = off + size - ctx.tsize
    r.pid, r.tid = _2i32(buf, off + 8)
    r.addr, r.len, r.pgoff = _3u64(buf, off + 16)
    if misc & PERF_RECORD_MISC_MMAP_BUILD_ID:
        (bsize,) = _u8(buf, off + 40)
        if bsize > 20:
            raise BadRecord(f"build-id size {bsize} is larger than 20", 40)
        r.build_id = bytes(buf[off + 44:off + 44 + bsize])
    else:
        r.maj, r.min = _2u32(buf, off + 40)
        r.ino, r.ino_generation = _2u64(buf, off + 48)
    r.prot, r.flags = _2u32(buf, off + 64)
    r.filename = cstr(buf, off + 72, max(end, off + 72))
    return r


def p_comm(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the COMM fields")
    r = _new(CommRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 16)
    end = off + size - ctx.tsize
    r.pid, r.tid = _2i32(buf, off + 8)
    r.comm = cstr(buf, off + 16, max(end, off + 16))
    return r


_RF_GROUP = int(ReadFormat.GROUP)
_RF_ID = int(ReadFormat.ID)
_RF_LOST = int(ReadFormat.LOST)
_RF_TOTAL_TIME_ENABLED = int(ReadFormat.TOTAL_TIME_ENABLED)
_RF_TOTAL_TIME_RUNNING = int(ReadFormat.TOTAL_TIME_RUNNING)


def _read_values(buf, p, end, read_format):
    """Parse a read_format block; returns (values, new position). values: list of dicts."""
    rf = read_format
    if rf & _RF_GROUP:
        if p + 8 > end:
            raise BadRecord("read group runs past the record")
        (nr,) = _u64(buf, p)
        p += 8
        head = {}
        if rf & _RF_TOTAL_TIME_ENABLED:
            (head["time_enabled"],) = _u64(buf, p)
            p += 8
        if rf & _RF_TOTAL_TIME_RUNNING:
            (head["time_running"],) = _u64(buf, p)
            p += 8
        per = 8 + (8 if rf & _RF_ID else 0) + (8 if rf & _RF_LOST else 0)
        if nr > (end - p) // per:
            raise BadRecord(f"read group of {nr} values runs past the record")
        vals = []
        for _ in range(nr):
            v = {"value": _u64(buf, p)[0]}
            p += 8
            if rf & _RF_ID:
                (v["id"],) = _u64(buf, p)
                p += 8
            if rf & _RF_LOST:
                (v["lost"],) = _u64(buf, p)
                p += 8
            vals.append(v)
        head["values"] = vals
        return head, p
    n = 1 + sum(1 for b in (_RF_TOTAL_TIME_ENABLED, _RF_TOTAL_TIME_RUNNING, _RF_ID,
                            _RF_LOST) if rf & b)
    if p + 8 * n > end:
        raise BadRecord("read values run past the record")
    v = {"value": _u64(buf, p)[0]}
    p += 8
    for bit, key in ((_RF_TOTAL_TIME_ENABLED, "time_enabled"), (_RF_TOTAL_TIME_RUNNING,
                     "time_running"), (_RF_ID, "id"), (_RF_LOST, "lost")):
        if rf & bit:
            (v[key],) = _u64(buf, p)
            p += 8
    return v, p


def p_read(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the READ fields")
    r = _new(ReadRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 16)
    r.pid, r.tid = _2i32(buf, off + 8)
    attr = ctx.attrs[0] if ctx.attrs else None
    end = off + size - ctx.tsize
    r.values = _read_values(buf, off + 16, end, attr.read_format if attr else 0)[0] if attr else None
    return r


def p_namespaces(ctx, buf, off, size, rtype, misc):
    _need(size, 24, "the NAMESPACES fields")
    r = _new(NamespacesRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 24)
    r.pid, r.tid = _2i32(buf, off + 8)
    (nr,) = _u64(buf, off + 16)
    end = off + size - ctx.tsize
    if nr > (end - off - 24) // 16:
        raise BadRecord(f"{nr} namespaces do not fit the record", 16)
    r.link_info = [_2u64(buf, off + 24 + 16 * i) for i in range(nr)]
    return r


_ksym = struct.Struct("<QIHH").unpack_from


def p_ksymbol(ctx, buf, off, size, rtype, misc):
    _need(size, 24, "the KSYMBOL fields")
    r = _new(KsymbolRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 24)
    end = off + size - ctx.tsize
    r.addr, r.len, r.ksym_type, r.flags = _ksym(buf, off + 8)
    r.name_ = cstr(buf, off + 24, max(end, off + 24))
    return r


_bpf = struct.Struct("<HHI").unpack_from


def p_bpf_event(ctx, buf, off, size, rtype, misc):
    _need(size, 24, "the BPF_EVENT fields")
    r = _new(BpfEventRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 24)
    r.bpf_type, r.flags, r.bpf_id = _bpf(buf, off + 8)
    r.tag = bytes(buf[off + 16:off + 24])
    return r


def p_cgroup(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the CGROUP fields")
    r = _new(CgroupRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 16)
    end = off + size - ctx.tsize
    (r.cgroup_id,) = _u64(buf, off + 8)
    r.path = cstr(buf, off + 16, max(end, off + 16))
    return r


_poke = struct.Struct("<QHH").unpack_from


def p_text_poke(ctx, buf, off, size, rtype, misc):
    _need(size, 20, "the TEXT_POKE fields")
    r = _new(TextPokeRecord, rtype, misc, size)
    r.sample_id = ctx.sample_id(buf, off, size, 20)
    end = off + size - ctx.tsize
    r.addr, r.old_len, r.new_len = _poke(buf, off + 8)
    p = off + 20
    if p + r.old_len + r.new_len > end:
        raise BadRecord(f"{r.old_len}+{r.new_len} text bytes do not fit the record", 20)
    r.old_bytes = bytes(buf[p:p + r.old_len])
    r.new_bytes = bytes(buf[p + r.old_len:p + r.old_len + r.new_len])
    return r


def _popcount(x: int) -> int:
    return bin(x).count("1")


_S_IDENTIFIER = int(SampleType.IDENTIFIER)
_S_HEAD_BITS = int(SampleType.IDENTIFIER | SampleType.IP | SampleType.TID | SampleType.TIME | SampleType.ADDR
                   | SampleType.ID | SampleType.STREAM_ID | SampleType.CPU | SampleType.PERIOD)
_S_ALL_BITS = (1 << 25) - 1


#: The fixed-size leading fields of a SAMPLE record, declared once as :data:`SAMPLE_ID_LAYOUT`.
SAMPLE_HEAD_LAYOUT: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (int(SampleType.IDENTIFIER), "Q", ("identifier",)),
    (int(SampleType.IP), "Q", ("ip",)),
    (int(SampleType.TID), "ii", ("pid", "tid")),
    (int(SampleType.TIME), "Q", ("time",)),
    (int(SampleType.ADDR), "Q", ("addr",)),
    (int(SampleType.ID), "Q", ("id",)),
    (int(SampleType.STREAM_ID), "Q", ("stream_id",)),
    (int(SampleType.CPU), "I4x", ("cpu",)),
    (int(SampleType.PERIOD), "Q", ("period",)),
)


def _set_sample_head(r, v) -> None:
    """Every :data:`SAMPLE_HEAD_LAYOUT` field of a SAMPLE record, in that order (None where absent)."""
    r.identifier, r.ip, r.pid, r.tid, r.time, r.addr, r.id, r.stream_id, r.cpu, r.period = v


class _SampleHead:
    """The fixed-size leading fields of a SAMPLE for one sample_type: one struct unpack."""

    __slots__ = ("size", "unpack", "names", "tail", "has_period", "fill")

    def __init__(self, st: int):
        fmt, names = layout_of(SAMPLE_HEAD_LAYOUT, st)
        S = struct.Struct("<" + fmt)
        self.size = S.size
        self.unpack = unpack = S.unpack_from
        self.names = names
        # the head fields and SampleId's by plain indexes into values + (None,) (absent ones: the None)
        absent = len(names)
        where = {n: i for i, n in enumerate(names)}
        where.setdefault("id", where.get("identifier", absent))
        h0, h1, h2, h3, h4, h5, h6, h7, h8, h9 = (where.get(n, absent)
                                                  for _bit, _f, ns in SAMPLE_HEAD_LAYOUT for n in ns)
        a, b, c, d, e, f, g = sample_id_positions(names)

        def fill(r, buf, off):
            """The head fields of ``r`` from ``buf[off:]`` (absent ones None, read as unset) and its sample_id."""
            v = unpack(buf, off) + _NONE
            _set_sample_head(r, (v[h0], v[h1], v[h2], v[h3], v[h4], v[h5], v[h6], v[h7], v[h8], v[h9]))
            r.sample_id = _tuple_new(SampleId, (v[a], v[b], v[c], v[d], v[e], v[f], v[g]))

        self.fill = fill
        self.tail = bool(st & _S_ALL_BITS & ~_S_HEAD_BITS)
        self.has_period = bool(st & SampleType.PERIOD)


def p_sample(ctx, buf, off, size, rtype, misc):
    attr = ctx.sample_attr(buf, off, size)
    r = _new(SampleRecord, rtype, misc, size)
    r.attr = attr
    if attr is None:
        r.sample_id = None
        return r
    head = attr._sample_head
    if head is None:
        head = attr._sample_head = _SampleHead(attr.sample_type)
    if head.size + 8 > size:
        raise BadRecord(f"size {size} is too small for the sample fields of sample_type {attr.sample_type:#x} "
                        f"({head.size + 8} bytes)")
    head.fill(r, buf, off + 8)
    if not head.has_period:
        r.period = attr.sample_period  # perf's default when PERF_SAMPLE_PERIOD is not sampled
    if head.tail:
        end = off + size
        p = off + 8 + head.size
        try:
            p = _sample_tail(r, attr, attr.sample_type, buf, p, end)
        except struct.error as e:
            raise BadRecord(f"sample field runs past the buffer ({e})", p - off) from None
        if p > end:
            raise BadRecord(f"size {size} is too small for the sample fields of sample_type "
                            f"{attr.sample_type:#x}", p - off)
    return r


_S_AUX = int(SampleType.AUX)
_S_BRANCH_STACK = int(SampleType.BRANCH_STACK)
_S_CALLCHAIN = int(SampleType.CALLCHAIN)
_S_CGROUP = int(SampleType.CGROUP)
_S_CODE_PAGE_SIZE = int(SampleType.CODE_PAGE_SIZE)
_S_DATA_PAGE_SIZE = int(SampleType.DATA_PAGE_SIZE)
_S_DATA_SRC = int(SampleType.DATA_SRC)
_S_PHYS_ADDR = int(SampleType.PHYS_ADDR)
_S_RAW = int(SampleType.RAW)
_S_READ = int(SampleType.READ)
_S_REGS_INTR = int(SampleType.REGS_INTR)
_S_REGS_USER = int(SampleType.REGS_USER)
_S_STACK_USER = int(SampleType.STACK_USER)
_S_TRANSACTION = int(SampleType.TRANSACTION)
_S_WEIGHT = int(SampleType.WEIGHT)
_S_WEIGHT_STRUCT = int(SampleType.WEIGHT_STRUCT)


def _sample_tail(r, attr, st, buf, p, end):
    def need(n, what):
        if p + n > end:
            raise BadRecord(f"sample {what} ({n} bytes) runs past the record", p - (end - r.size))

    if st & _S_READ:
        r.read, p = _read_values(buf, p, end, attr.read_format)
    if st & _S_CALLCHAIN:
        need(8, "callchain")
        (nr,) = _u64(buf, p)
        p += 8
        if nr > (end - p) // 8:
            raise BadRecord(f"callchain of {nr} entries runs past the record", p - 8 - (end - r.size))
        r.callchain = struct.unpack_from(f"<{nr}Q", buf, p)
        p += 8 * nr
    if st & _S_RAW:
        need(4, "raw size")
        (n,) = _u32(buf, p)
        need(4 + n, "raw data")
        r.raw = bytes(buf[p + 4:p + 4 + n])
        p += 4 + n
    if st & _S_BRANCH_STACK:
        need(8, "branch stack")
        (nr,) = _u64(buf, p)
        p += 8
        if attr.branch_sample_type & PERF_SAMPLE_BRANCH_HW_INDEX:
            need(8, "branch hw_idx")
            (r.branch_hw_idx,) = _u64(buf, p)
            p += 8
        if nr > (end - p) // 24:
            raise BadRecord(f"branch stack of {nr} entries runs past the record", p - (end - r.size))
        flat = struct.unpack_from(f"<{3 * nr}Q", buf, p)
        r.branch_stack = [flat[i:i + 3] for i in range(0, 3 * nr, 3)]
        p += 24 * nr
    if st & _S_REGS_USER:
        need(8, "user regs abi")
        (r.user_regs_abi,) = _u64(buf, p)
        p += 8
        if r.user_regs_abi:
            n = _popcount(attr.sample_regs_user)
            need(8 * n, "user regs")
            r.user_regs = struct.unpack_from(f"<{n}Q", buf, p)
            p += 8 * n
    if st & _S_STACK_USER:
        need(8, "user stack size")
        (n,) = _u64(buf, p)
        p += 8
        if n:
            need(n + 8, "user stack")
            r.user_stack = bytes(buf[p:p + n])
            p += n
            (r.user_stack_dyn_size,) = _u64(buf, p)
            p += 8
        else:
            r.user_stack = b""
    if st & (_S_WEIGHT | _S_WEIGHT_STRUCT):
        need(8, "weight")
        (r.weight,) = _u64(buf, p)
        p += 8
    if st & _S_DATA_SRC:
        need(8, "data_src")
        (r.data_src,) = _u64(buf, p)
        p += 8
    if st & _S_TRANSACTION:
        need(8, "transaction")
        (r.transaction,) = _u64(buf, p)
        p += 8
    if st & _S_REGS_INTR:
        need(8, "intr regs abi")
        (r.intr_regs_abi,) = _u64(buf, p)
        p += 8
        if r.intr_regs_abi:
            n = _popcount(attr.sample_regs_intr)
            need(8 * n, "intr regs")
            r.intr_regs = struct.unpack_from(f"<{n}Q", buf, p)
            p += 8 * n
    if st & _S_PHYS_ADDR:
        need(8, "phys_addr")
        (r.phys_addr,) = _u64(buf, p)
        p += 8
    if st & _S_CGROUP:
        need(8, "cgroup")
        (r.cgroup,) = _u64(buf, p)
        p += 8
    if st & _S_DATA_PAGE_SIZE:
        need(8, "data_page_size")
        (r.data_page_size,) = _u64(buf, p)
        p += 8
    if st & _S_CODE_PAGE_SIZE:
        need(8, "code_page_size")
        (r.code_page_size,) = _u64(buf, p)
        p += 8
    if st & _S_AUX:
        need(8, "aux size")
        (n,) = _u64(buf, p)
        p += 8
        need(n, "aux data")
        r.aux = bytes(buf[p:p + n])
        p += n
    return p


# ---- user records --------------------------------------------------------------------------------


def p_plain(cls):
    def parse(ctx, buf, off, size, rtype, misc):
        r = _new(cls, rtype, misc, size)
        r.sample_id = None
        return r
    return parse


_idx_entry = struct.Struct("<QQQQ").unpack_from


def p_id_index(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the ID_INDEX count")
    r = _new(IdIndexRecord, rtype, misc, size)
    r.sample_id = None
    (nr,) = _u64(buf, off + 8)
    if nr > (size - 16) // 32:
        raise BadRecord(f"{nr} id index entries do not fit the record", 8)
    entries = []
    p = off + 16
    for _ in range(nr):
        i, idx, cpu, tid = _idx_entry(buf, p)
        entries.append(IdIndexEntry(i, idx, _s32(cpu), _s32(tid)))
        p += 32
    # perf >= 6.0 appends (machine_pid, vcpu) per entry for guest recordings
    if size >= 16 + nr * 48 and nr:
        for e in entries:
            mp, vc = _2u64(buf, p)
            e.machine_pid, e.vcpu = _s32(mp), _s32(vc)
            p += 16
    r.entries = entries
    return r


def _s32(v: int) -> int:
    """A u64 field holding a C int (-1 for 'any')."""
    v &= 0xFFFFFFFFFFFFFFFF
    if v >= 1 << 63:
        return v - (1 << 64)
    return v


def p_auxtrace_info(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the AUXTRACE_INFO fields")
    from ptexport.perfdata.auxtrace import decode_auxtrace_info

    r = _new(AuxtraceInfoRecord, rtype, misc, size)
    r.sample_id = None
    (r.auxtrace_type,) = _u32(buf, off + 8)
    n = (size - 16) // 8
    r.priv = struct.unpack_from(f"<{n}Q", buf, off + 16)
    r.info = decode_auxtrace_info(r.auxtrace_type, r.priv, bytes(buf[off + 16:off + size]))
    shift = getattr(r.info, "time_shift", None)
    if shift is not None:
        from ptexport.perfdata.auxtrace import Idx

        _check_time_shift(shift, 16 + 8 * Idx.TIME_SHIFT)
    return r


_auxtrace = struct.Struct("<QQQIII").unpack_from


def p_auxtrace(ctx, buf, off, size, rtype, misc):
    _need(size, 48, "the AUXTRACE fields")
    r = _new(AuxtraceRecord, rtype, misc, size)
    r.sample_id = None
    r.header_size = size
    r.size, r.aux_offset, r.reference, r.idx, tid, cpu = _auxtrace(buf, off + 8)
    r.tid = tid - (1 << 32) if tid >= 1 << 31 else tid
    r.cpu = cpu - (1 << 32) if cpu >= 1 << 31 else cpu
    r._data = None
    return r


_auxerr = struct.Struct("<IIIiiIQQ").unpack_from


def p_auxtrace_error(ctx, buf, off, size, rtype, misc):
    _need(size, 40, "the AUXTRACE_ERROR fields")
    r = _new(AuxtraceErrorRecord, rtype, misc, size)
    r.sample_id = None
    if size >= 48:
        r.error_type, r.code, cpu, r.pid, r.tid, r.fmt, r.ip, t = _auxerr(buf, off + 8)
    else:
        r.error_type, r.code, cpu, r.pid, r.tid, r.fmt, r.ip = struct.unpack_from("<IIIiiIQ", buf, off + 8)
        t = 0
    r.cpu = cpu - (1 << 32) if cpu >= 1 << 31 else cpu
    if r.fmt:
        r.time = t
        msg_at = off + 48
    else:
        r.time = None
        msg_at = off + 40
    msg_end = min(off + size, msg_at + 64)
    r.msg = cstr(buf, msg_at, msg_end)
    if r.fmt >= 2 and size >= msg_at + 64 + 8 - off:
        r.machine_pid, r.vcpu = _2i32(buf, msg_at + 64)
    return r


def p_thread_map(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the THREAD_MAP count")
    r = _new(ThreadMapRecord, rtype, misc, size)
    r.sample_id = None
    (nr,) = _u64(buf, off + 8)
    if nr > (size - 16) // 24:
        raise BadRecord(f"{nr} thread map entries do not fit the record", 8)
    ents = []
    p = off + 16
    for _ in range(nr):
        (pid,) = _u64(buf, p)
        ents.append((_s32(pid), cstr(buf, p + 8, p + 24)))
        p += 24
    r.entries = ents
    return r


def parse_cpu_map_data(buf, p: int, end: int) -> tuple[list[int], bool]:
    """perf_record_cpu_map_data at ``p`` (perf >= 6.0 layout); returns (cpus, any_cpu)."""
    if p + 2 > end:
        raise BadRecord("cpu map type runs past the record")
    (t,) = _u16(buf, p)
    if t == CpuMapType.CPUS:
        if p + 4 > end:
            raise BadRecord("cpu map count runs past the record")
        (nr,) = _u16(buf, p + 2)
        if p + 4 + 2 * nr > end:
            raise BadRecord(f"cpu map of {nr} cpus runs past the record")
        cpus = [c - 65536 if c == 0xFFFF else c for c in struct.unpack_from(f"<{nr}H", buf, p + 4)]
        return cpus, -1 in cpus
    if t == CpuMapType.MASK:
        if p + 6 > end:
            raise BadRecord("cpu mask header runs past the record")
        nr, long_size = struct.unpack_from("<HH", buf, p + 2)
        if long_size == 4:
            at, fmt = p + 6, "I"
        elif long_size == 8:
            at, fmt = p + 8, "Q"
        else:
            raise BadRecord(f"cpu mask long_size {long_size} is not 4 or 8")
        if at + long_size * nr > end:
            raise BadRecord(f"cpu mask of {nr} words runs past the record")
        words = struct.unpack_from(f"<{nr}{fmt}", buf, at)
        bits = 8 * long_size
        cpus = [i * bits + b for i, w in enumerate(words) for b in range(bits) if w >> b & 1]
        return cpus, False
    if t == CpuMapType.RANGE_CPUS:
        if p + 8 > end:
            raise BadRecord("cpu range runs past the record")
        any_cpu, _pad, start, stop = struct.unpack_from("<BBHH", buf, p + 2)
        cpus = ([-1] if any_cpu else []) + list(range(start, stop + 1))
        return cpus, bool(any_cpu)
    raise BadRecord(f"unknown cpu map type {t}")


def p_cpu_map(ctx, buf, off, size, rtype, misc):
    r = _new(CpuMapRecord, rtype, misc, size)
    r.sample_id = None
    r.cpus, r.any_cpu = parse_cpu_map_data(buf, off + 8, off + size)
    return r


def p_stat_config(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the STAT_CONFIG count")
    r = _new(StatConfigRecord, rtype, misc, size)
    r.sample_id = None
    (nr,) = _u64(buf, off + 8)
    if nr > (size - 16) // 16:
        raise BadRecord(f"{nr} stat config entries do not fit the record", 8)
    r.config = dict(_2u64(buf, off + 16 + 16 * i) for i in range(nr))
    return r


def p_stat(ctx, buf, off, size, rtype, misc):
    _need(size, 48, "the STAT fields")
    r = _new(StatRecord, rtype, misc, size)
    r.sample_id = None
    r.stat_id, r.cpu, r.thread, r.val, r.ena, r.run = struct.unpack_from("<QiIQQQ", buf, off + 8)
    return r


def p_stat_round(ctx, buf, off, size, rtype, misc):
    _need(size, 24, "the STAT_ROUND fields")
    r = _new(StatRoundRecord, rtype, misc, size)
    r.sample_id = None
    r.round_type, r.time = _2u64(buf, off + 8)
    return r


def _check_time_shift(shift: int, rel: int) -> None:
    """A clock shift past 63 has no meaning (perf would shift a u64 by it: undefined in C)."""
    if shift > 63:
        raise BadRecord(f"time_shift {shift} is larger than 63", rel)


def p_time_conv(ctx, buf, off, size, rtype, misc):
    _need(size, 32, "the TIME_CONV fields")
    r = _new(TimeConvRecord, rtype, misc, size)
    r.sample_id = None
    r.time_shift, r.time_mult, r.time_zero = _3u64(buf, off + 8)
    _check_time_shift(r.time_shift, 8)
    if size >= 56:
        r.time_cycles, r.time_mask = _2u64(buf, off + 32)
        r.cap_user_time_zero, r.cap_user_time_short = bool(buf[off + 48]), bool(buf[off + 49])
    else:
        r.time_cycles = r.time_mask = None
        r.cap_user_time_zero = r.cap_user_time_short = None
    return r


def p_header_attr(ctx, buf, off, size, rtype, misc):
    from ptexport.perfdata.attr import EventAttr

    _need(size, 8 + 64, "a perf_event_attr")
    r = _new(HeaderAttrRecord, rtype, misc, size)
    r.sample_id = None
    (asize,) = _u32(buf, off + 12)
    if asize == 0:
        asize = 64
    if asize < 64 or 8 + asize > size:
        raise BadRecord(f"attr size {asize} does not fit the record of {size} bytes", 4)
    from ptexport.perfdata.attr import ATTR_MAX_SIZE

    r.attr = EventAttr(bytes(buf[off + 8:off + 8 + min(asize, ATTR_MAX_SIZE)]))
    n = (size - 8 - asize) // 8
    # perf inject writes its own (larger) struct but keeps an older attr.size, so the padding between
    # reads as ids of 0; the kernel never hands out id 0
    r.ids = [i for i in struct.unpack_from(f"<{n}Q", buf, off + 8 + asize) if i]
    r.attr.ids = list(r.ids)
    return r


def p_header_feature(ctx, buf, off, size, rtype, misc):
    _need(size, 16, "the HEADER_FEATURE id")
    r = _new(HeaderFeatureRecord, rtype, misc, size)
    r.sample_id = None
    (r.feat_id,) = _u64(buf, off + 8)
    r.data = bytes(buf[off + 16:off + size])
    return r


def p_event_update(ctx, buf, off, size, rtype, misc):
    _need(size, 24, "the EVENT_UPDATE fields")
    r = _new(EventUpdateRecord, rtype, misc, size)
    r.sample_id = None
    r.update_type, r.event_id = _2u64(buf, off + 8)
    p, end = off + 24, off + size
    t = r.update_type
    if t == EventUpdateType.UNIT:
        r.unit = cstr(buf, p, end)
    elif t == EventUpdateType.NAME:
        r.name_ = cstr(buf, p, end)
    elif t == EventUpdateType.SCALE:
        _need(size, 32, "the EVENT_UPDATE scale")
        (r.scale,) = struct.unpack_from("<d", buf, p)
    elif t == EventUpdateType.CPUS:
        r.cpus = parse_cpu_map_data(buf, p, end)[0]
    return r


def p_header_build_id(ctx, buf, off, size, rtype, misc):
    _need(size, 36, "the HEADER_BUILD_ID fields")
    r = _new(HeaderBuildIdRecord, rtype, misc, size)
    r.sample_id = None
    (r.pid,) = _i32(buf, off + 8)
    raw = bytes(buf[off + 12:off + 36])
    if misc & PERF_RECORD_MISC_BUILD_ID_SIZE:
        n = min(raw[20], 20)
        r.build_id = raw[:n]
    else:
        r.build_id = raw[:20]
    r.filename = cstr(buf, off + 36, off + size)
    return r


def p_tracing_data(ctx, buf, off, size, rtype, misc):
    _need(size, 12, "the TRACING_DATA size")
    r = _new(HeaderTracingDataRecord, rtype, misc, size)
    r.sample_id = None
    (r.data_size,) = _u32(buf, off + 8)
    return r


def p_compressed(ctx, buf, off, size, rtype, misc):
    r = _new(CompressedRecord, rtype, misc, size)
    r.sample_id = None
    if rtype == 83:  # PERF_RECORD_COMPRESSED2
        _need(size, 16, "the COMPRESSED2 data size")
        (r.data_size,) = _u64(buf, off + 8)
        if r.data_size > size - 16:
            raise BadRecord(f"compressed data size {r.data_size} runs past the record", 8)
    else:
        r.data_size = size - 8
    return r


def p_unknown(ctx, buf, off, size, rtype, misc):
    r = _new(UnknownRecord, rtype, misc, size)
    r.sample_id = None
    return r


def _fixed_parser(cls, label: str, fixed: int, layout: struct.Struct, set_fields):
    """The parser of a record kind with only fixed-size fields (plus the sample_id trailer), from its
    :data:`FIXED_SPECS` layout: the hot sideband kinds (SWITCH*, FORK/EXIT, AUX, ITRACE_START, LOST...)."""
    unpack = layout.unpack_from

    def parse(ctx, buf, off, size, rtype, misc):
        if size < fixed:
            raise BadRecord(f"size {size} is too small for the {label} fields ({fixed} bytes)")
        r = cls()  # no __init__: a bare instance
        r.type = rtype
        r.misc = misc
        r.size = size
        set_fields(r, unpack(buf, off + 8))
        ut = ctx.utrailer
        if ut is not None:
            if size - ut.size < fixed:
                raise BadRecord(f"size {size} is too small for the {label} fields ({fixed} bytes) and the "
                                f"{ut.size}-byte sample_id trailer")
            r.sample_id = ut.parse(buf, off + size)
        else:
            r.sample_id = ctx.sample_id(buf, off, size, fixed)
        return r

    return parse


# The fixed-layout kinds' fields after the header: each struct beside the function that names its
# fields in order (the statements take the first values of a longer tuple too: body then trailer).
_FORK = struct.Struct("<iiiiQ")


def _set_fork(r, v):
    r.pid = v[0]
    r.ppid = v[1]
    r.tid = v[2]
    r.ptid = v[3]
    r.time = v[4]


_LOST = struct.Struct("<QQ")


def _set_lost(r, v):
    r.lost_id = v[0]
    r.lost = v[1]


_THROTTLE = struct.Struct("<QQQ")


def _set_throttle(r, v):
    r.time = v[0]
    r.throttle_id = v[1]
    r.stream_id = v[2]


_AUX = struct.Struct("<QQQ")


def _set_aux(r, v):
    r.aux_offset = v[0]
    r.aux_size = v[1]
    r.flags = v[2]


_ITRACE_START = struct.Struct("<ii")


def _set_itrace_start(r, v):
    r.pid = v[0]
    r.tid = v[1]


_LOST_SAMPLES = struct.Struct("<Q")


def _set_lost_samples(r, v):
    r.lost = v[0]


_SWITCH = struct.Struct("<")


def _set_switch(r, v):
    pass


_SWITCH_CPU_WIDE = struct.Struct("<ii")


def _set_switch_cpu_wide(r, v):
    r.next_prev_pid = v[0]
    r.next_prev_tid = v[1]


_AUX_OUTPUT_HW_ID = struct.Struct("<Q")


def _set_aux_output_hw_id(r, v):
    r.hw_id = v[0]


#: the fixed-layout kinds: type -> (class, label, fixed size, struct after the header, its fields' setter)
FIXED_SPECS = {
    int(RecordType.EXIT): (ExitRecord, "EXIT", 32, _FORK, _set_fork),
    int(RecordType.FORK): (ForkRecord, "FORK", 32, _FORK, _set_fork),
    int(RecordType.LOST): (LostRecord, "LOST", 24, _LOST, _set_lost),
    int(RecordType.THROTTLE): (ThrottleRecord, "THROTTLE", 32, _THROTTLE, _set_throttle),
    int(RecordType.UNTHROTTLE): (ThrottleRecord, "UNTHROTTLE", 32, _THROTTLE, _set_throttle),
    int(RecordType.AUX): (AuxRecord, "AUX", 32, _AUX, _set_aux),
    int(RecordType.ITRACE_START): (ItraceStartRecord, "ITRACE_START", 16, _ITRACE_START, _set_itrace_start),
    int(RecordType.LOST_SAMPLES): (LostSamplesRecord, "LOST_SAMPLES", 16, _LOST_SAMPLES, _set_lost_samples),
    int(RecordType.SWITCH): (SwitchRecord, "SWITCH", 8, _SWITCH, _set_switch),
    int(RecordType.SWITCH_CPU_WIDE): (SwitchRecord, "SWITCH_CPU_WIDE", 16, _SWITCH_CPU_WIDE, _set_switch_cpu_wide),
    int(RecordType.AUX_OUTPUT_HW_ID): (AuxOutputHwIdRecord, "AUX_OUTPUT_HW_ID", 16, _AUX_OUTPUT_HW_ID,
                                       _set_aux_output_hw_id),
}

_FAST = {rtype: _fixed_parser(*spec) for rtype, spec in FIXED_SPECS.items()}

_COMBINED: dict = {}

# The combined parsers, one factory per SampleId shape: the trailers perf writes (TID|TIME, with CPU for
# system-wide recordings, with IDENTIFIER when there are several events, as with Intel PT) spell their
# SampleId out, for they are on every sideband record; any other trailer indexes the None appended to its
# values for the absent fields.  ``a``..``g``: where SampleId's fields are (sample_id_positions).


def _combined_any(cls, total, unpack, set_fields, generic, a, b, c, d, e, f, g):
    def parse(ctx, buf, off, size, rtype, misc):
        if size != total:
            return generic(ctx, buf, off, size, rtype, misc)
        r = cls()  # no __init__: a bare instance (cheaper than cls.__new__(cls))
        r.type = rtype
        r.misc = misc
        r.size = size
        v = unpack(buf, off + 8) + _NONE
        set_fields(r, v)
        r.sample_id = _tuple_new(SampleId, (v[a], v[b], v[c], v[d], v[e], v[f], v[g]))
        return r

    return parse


def _combined_tid_time_cpu(cls, total, unpack, set_fields, generic, a, b, c, d, e, f, g):
    def parse(ctx, buf, off, size, rtype, misc):
        if size != total:
            return generic(ctx, buf, off, size, rtype, misc)
        r = cls()
        r.type = rtype
        r.misc = misc
        r.size = size
        v = unpack(buf, off + 8)
        set_fields(r, v)
        r.sample_id = _tuple_new(SampleId, (v[a], v[b], v[c], None, None, v[f], None))
        return r

    return parse


def _combined_tid_time_cpu_identifier(cls, total, unpack, set_fields, generic, a, b, c, d, e, f, g):
    def parse(ctx, buf, off, size, rtype, misc):
        if size != total:
            return generic(ctx, buf, off, size, rtype, misc)
        r = cls()
        r.type = rtype
        r.misc = misc
        r.size = size
        v = unpack(buf, off + 8)
        set_fields(r, v)
        r.sample_id = _tuple_new(SampleId, (v[a], v[b], v[c], v[g], None, v[f], v[g]))
        return r

    return parse


def _combined_tid_time_identifier(cls, total, unpack, set_fields, generic, a, b, c, d, e, f, g):
    def parse(ctx, buf, off, size, rtype, misc):
        if size != total:
            return generic(ctx, buf, off, size, rtype, misc)
        r = cls()
        r.type = rtype
        r.misc = misc
        r.size = size
        v = unpack(buf, off + 8)
        set_fields(r, v)
        r.sample_id = _tuple_new(SampleId, (v[a], v[b], v[c], v[g], None, None, v[g]))
        return r

    return parse


def _combined_tid_time(cls, total, unpack, set_fields, generic, a, b, c, d, e, f, g):
    def parse(ctx, buf, off, size, rtype, misc):
        if size != total:
            return generic(ctx, buf, off, size, rtype, misc)
        r = cls()
        r.type = rtype
        r.misc = misc
        r.size = size
        v = unpack(buf, off + 8)
        set_fields(r, v)
        r.sample_id = _tuple_new(SampleId, (v[a], v[b], v[c], None, None, None, None))
        return r

    return parse


_TRAILER_SHAPES = {
    ("pid", "tid", "time", "cpu"): _combined_tid_time_cpu,
    ("pid", "tid", "time", "cpu", "identifier"): _combined_tid_time_cpu_identifier,
    ("pid", "tid", "time", "identifier"): _combined_tid_time_identifier,
    ("pid", "tid", "time"): _combined_tid_time,
}


def _combined_parser(rtype: int, spec, trailer: TrailerLayout):
    """A parser for one fixed-layout kind followed by ``trailer`` that reads both in one unpack (records of
    any other size go to the generic parser)."""
    key = (rtype, trailer.fmt, trailer.names)
    fn = _COMBINED.get(key)
    if fn is not None:
        return fn
    cls, _label, fixed, layout, set_fields = spec
    generic, total = _FAST[rtype], fixed + trailer.size
    unpack = struct.Struct(layout.format + trailer.fmt).unpack_from
    # the trailer's values follow the body's: SampleId's fields by plain indexes (absent ones index the None
    # appended to the values, except in the trailers perf writes: see _TRAILER_SHAPES)
    a, b, c, d, e, f, g = sample_id_positions(trailer.names, len(layout.unpack(bytes(layout.size))))
    parse = _TRAILER_SHAPES.get(trailer.names, _combined_any)(cls, total, unpack, set_fields, generic,
                                                              a, b, c, d, e, f, g)
    fn = _COMBINED[key] = parse
    return fn


PARSERS: dict[int, Callable] = {
    RecordType.MMAP: p_mmap,
    RecordType.COMM: p_comm,
    RecordType.READ: p_read,
    RecordType.SAMPLE: p_sample,
    RecordType.MMAP2: p_mmap2,
    RecordType.NAMESPACES: p_namespaces,
    RecordType.KSYMBOL: p_ksymbol,
    RecordType.BPF_EVENT: p_bpf_event,
    RecordType.CGROUP: p_cgroup,
    RecordType.TEXT_POKE: p_text_poke,
    RecordType.HEADER_ATTR: p_header_attr,
    RecordType.HEADER_EVENT_TYPE: p_unknown,
    RecordType.HEADER_TRACING_DATA: p_tracing_data,
    RecordType.HEADER_BUILD_ID: p_header_build_id,
    RecordType.FINISHED_ROUND: p_plain(FinishedRoundRecord),
    RecordType.ID_INDEX: p_id_index,
    RecordType.AUXTRACE_INFO: p_auxtrace_info,
    RecordType.AUXTRACE: p_auxtrace,
    RecordType.AUXTRACE_ERROR: p_auxtrace_error,
    RecordType.THREAD_MAP: p_thread_map,
    RecordType.CPU_MAP: p_cpu_map,
    RecordType.STAT_CONFIG: p_stat_config,
    RecordType.STAT: p_stat,
    RecordType.STAT_ROUND: p_stat_round,
    RecordType.EVENT_UPDATE: p_event_update,
    RecordType.TIME_CONV: p_time_conv,
    RecordType.HEADER_FEATURE: p_header_feature,
    RecordType.COMPRESSED: p_compressed,
    RecordType.FINISHED_INIT: p_plain(FinishedInitRecord),
    RecordType.COMPRESSED2: p_compressed,
}
PARSERS.update(_FAST)  # the fixed-layout kinds
# plain int keys for a fast dict lookup
PARSERS = {int(k): v for k, v in PARSERS.items()}


def _all_slots(cls) -> set[str]:
    out = set(getattr(cls, "__slots__", ()))
    for sub in cls.__subclasses__():
        out |= _all_slots(sub)
    return out


# every record field reads as None when the record kind or the attr left it unset
_OPTIONAL = frozenset(_all_slots(Record))

# Aliases with the names used in the API description.
StatConfig = StatConfigRecord
