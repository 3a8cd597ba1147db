"""perf.data writer: the file layout ``perf record`` produces, file mode or pipe mode.

File mode: header (104 bytes), the attrs with their id arrays, the data
section (records), then the feature sections after it, indexed by an array of
(offset, size) pairs in feature-bit order.  Pipe mode: the 16-byte pipe
header, HEADER_ATTR and HEADER_FEATURE records, then the same records.

Records are built with :func:`record` and the helpers below; every non-sample
record from a ``sample_id_all`` event ends with the sample-id trailer, whose
layout follows the attrs' ``sample_type`` (all attrs here share one).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import BinaryIO

from ptexport.perfdata.constants import (
    PERF_MAGIC2, AttrFlag, AuxtraceType, Feature, RecordType, SampleType,
)

ATTR_SIZE = 128          # PERF_ATTR_SIZE_VER7, what perf 6.1 writes
NAME_ALIGN = 64


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass
class Attr:
    """One perf_event_attr plus the ids of its per-CPU (or per-thread) instances."""

    type: int
    config: int
    sample_type: int
    flags: int
    name: str
    ids: list[int] = field(default_factory=list)
    sample_period: int = 1
    read_format: int = 0
    aux_watermark: int = 0

    def pack(self) -> bytes:
        body = struct.pack("<IIQQQQQIIQQQQIiQIHHII", self.type, ATTR_SIZE, self.config,
                           self.sample_period, self.sample_type, self.read_format, self.flags,
                           0, 0, 0, 0, 0, 0, 0, 0, 0, self.aux_watermark, 0, 0, 0, 0)
        body += b"\0" * (ATTR_SIZE - len(body))
        return body


def attr_flags(*bits: AttrFlag) -> int:
    v = 0
    for b in bits:
        v |= 1 << int(b)
    return v


def sample_id(sample_type: int, pid: int, tid: int, time: int, cpu: int, ident: int) -> bytes:
    """The sample_id_all trailer for ``sample_type`` (TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER)."""
    out = b""
    if sample_type & SampleType.TID:
        out += struct.pack("<II", pid & 0xFFFFFFFF, tid & 0xFFFFFFFF)
    if sample_type & SampleType.TIME:
        out += struct.pack("<Q", time)
    if sample_type & SampleType.ID:
        out += struct.pack("<Q", ident)
    if sample_type & SampleType.STREAM_ID:
        out += struct.pack("<Q", ident)
    if sample_type & SampleType.CPU:
        out += struct.pack("<II", cpu, 0)
    if sample_type & SampleType.IDENTIFIER:
        out += struct.pack("<Q", ident)
    return out


def record(rtype: int, misc: int, body: bytes) -> bytes:
    size = 8 + len(body)
    if size > 0xFFFF:
        raise ValueError(f"record of {size} bytes")
    return struct.pack("<IHH", rtype, misc, size) + body


def pad8(b: bytes) -> bytes:
    return b + b"\0" * (_align(len(b) + 1, 8) - len(b))   # NUL-terminated, 8-aligned


# -- record bodies (without the sample-id trailer) -------------------------------------------

def comm_body(pid: int, tid: int, comm: str) -> bytes:
    return struct.pack("<II", pid, tid) + pad8(comm.encode())


def mmap2_body(pid: int, tid: int, addr: int, length: int, pgoff: int, filename: str,
               *, prot: int = 5, flags: int = 2, maj: int = 8, minor: int = 1, ino: int = 0) -> bytes:
    return (struct.pack("<IIQQQIIQQII", pid, tid, addr, length, pgoff, maj, minor, ino, 0, prot, flags)
            + pad8(filename.encode()))


def task_body(pid: int, ppid: int, tid: int, ptid: int, time: int) -> bytes:
    """FORK / EXIT body."""
    return struct.pack("<IIIIQ", pid, ppid, tid, ptid, time)


def itrace_start_body(pid: int, tid: int) -> bytes:
    return struct.pack("<II", pid, tid)


def aux_body(offset: int, size: int, flags: int) -> bytes:
    return struct.pack("<QQQ", offset, size, flags)


def switch_cpu_wide_body(next_prev_pid: int, next_prev_tid: int) -> bytes:
    return struct.pack("<II", next_prev_pid & 0xFFFFFFFF, next_prev_tid & 0xFFFFFFFF)


def auxtrace_record(size: int, offset: int, reference: int, idx: int, tid: int, cpu: int) -> bytes:
    """AUXTRACE header; ``size`` bytes of trace follow it (not counted in header.size)."""
    return record(RecordType.AUXTRACE, 0,
                  struct.pack("<QQQIIII", size, offset, reference, idx, tid & 0xFFFFFFFF,
                              cpu & 0xFFFFFFFF, 0))


def auxtrace_info_record(priv: list[int]) -> bytes:
    return record(RecordType.AUXTRACE_INFO, 0,
                  struct.pack("<II", AuxtraceType.INTEL_PT, 0)
                  + b"".join(struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF) for v in priv))


def time_conv_record(shift: int, mult: int, zero: int) -> bytes:
    return record(RecordType.TIME_CONV, 0,
                  struct.pack("<QQQQQBB6x", shift, mult, zero, 0, 0, 1, 0))


def finished_round() -> bytes:
    return record(RecordType.FINISHED_ROUND, 0, b"")


def build_id_record(pid: int, build_id: bytes, filename: str, misc: int = 2) -> bytes:
    bid = build_id[:20]
    name = filename.encode() + b"\0"
    name += b"\0" * (_align(len(name), NAME_ALIGN) - len(name))
    body = (struct.pack("<i", pid) + bid + b"\0" * (20 - len(bid))
            + struct.pack("<BBH", len(bid), 0, 0) + name)
    return record(RecordType.HEADER_BUILD_ID, misc | (1 << 15), body)  # MISC_BUILD_ID_SIZE


# -- feature sections ------------------------------------------------------------------------

def feat_string(s: str) -> bytes:
    b = s.encode() + b"\0"
    n = _align(len(b), NAME_ALIGN)
    return struct.pack("<I", n) + b + b"\0" * (n - len(b))


def feat_nrcpus(nr: int) -> bytes:
    return struct.pack("<II", nr, nr)


def feat_cmdline(args: list[str]) -> bytes:
    return struct.pack("<I", len(args)) + b"".join(feat_string(a) for a in args)


def feat_event_desc(attrs: list[Attr]) -> bytes:
    out = struct.pack("<II", len(attrs), ATTR_SIZE)
    for a in attrs:
        out += a.pack() + struct.pack("<I", len(a.ids)) + feat_string(a.name)
        out += b"".join(struct.pack("<Q", i) for i in a.ids)
    return out


def feat_pmu_mappings(pmus: list[tuple[int, str]]) -> bytes:
    return struct.pack("<I", len(pmus)) + b"".join(struct.pack("<I", t) + feat_string(n)
                                                   for t, n in pmus)


def feat_auxtrace(index: list[tuple[int, int]]) -> bytes:
    return struct.pack("<Q", len(index)) + b"".join(struct.pack("<QQ", o, s) for o, s in index)


def feat_u64(v: int) -> bytes:
    return struct.pack("<Q", v)


class PerfDataWriter:
    """Writes records to ``f``; :meth:`close` adds the attrs, features and the header.

    In file mode ``f`` must be seekable (the header is written last).  In pipe
    mode the attrs and features are written first as records, so they must be
    known at construction (``features`` given then).
    """

    def __init__(self, f: BinaryIO, attrs: list[Attr], *, pipe: bool = False,
                 features: dict[int, bytes] | None = None) -> None:
        self.f = f
        self.attrs = attrs
        self.pipe = pipe
        self.auxtrace_index: list[tuple[int, int]] = []
        if pipe:
            f.write(PERF_MAGIC2 + struct.pack("<Q", 16))
            self.pos = 16
            for a in attrs:
                body = a.pack() + b"".join(struct.pack("<Q", i) for i in a.ids)
                self.write(record(RecordType.HEADER_ATTR, 0, body))
            for feat, data in sorted((features or {}).items()):
                self.write(record(RecordType.HEADER_FEATURE, 0, struct.pack("<Q", feat) + data))
        else:
            self.attr_off = 104
            self.ids_off = self.attr_off + len(attrs) * (ATTR_SIZE + 16)
            nids = sum(len(a.ids) for a in attrs)
            self.data_off = _align(self.ids_off + 8 * nids, 8)
            f.write(b"\0" * self.data_off)
            self.pos = self.data_off

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.f.write(data)
        self.pos += len(data)

    def write_auxtrace(self, payload, *, offset: int, reference: int, idx: int, tid: int,
                       cpu: int) -> None:
        """An AUXTRACE record and its payload (padded to 8 bytes, as perf does)."""
        n = len(payload)
        padded = _align(n, 8)
        rec_off = self.pos
        self.write(auxtrace_record(padded, offset, reference, idx, tid, cpu))
        self.write(payload)
        if padded != n:
            self.write(b"\0" * (padded - n))
        self.auxtrace_index.append((rec_off, 48))  # perf checks sz == header.size

    def close(self, features: dict[int, bytes] | None = None) -> None:
        if self.pipe:
            self.f.flush()
            return
        f = self.f
        data_size = self.pos - self.data_off
        feats = dict(features or {})
        if self.auxtrace_index and Feature.AUXTRACE not in feats:
            feats[Feature.AUXTRACE] = feat_auxtrace(self.auxtrace_index)
        order = sorted(feats)
        sec_off = self.pos
        content_off = sec_off + 16 * len(order)
        index = b""
        contents = b""
        for feat in order:
            index += struct.pack("<QQ", content_off + len(contents), len(feats[feat]))
            contents += feats[feat]
        f.write(index + contents)
        bitmap = 0
        for feat in order:
            bitmap |= 1 << int(feat)
        attr_sec = b""
        ids_blob = b""
        for a in self.attrs:
            attr_sec += a.pack() + struct.pack("<QQ", self.ids_off + len(ids_blob), 8 * len(a.ids))
            ids_blob += b"".join(struct.pack("<Q", i) for i in a.ids)
        header = (PERF_MAGIC2 + struct.pack("<QQ", 104, ATTR_SIZE + 16)
                  + struct.pack("<QQ", self.attr_off, len(attr_sec))
                  + struct.pack("<QQ", self.data_off, data_size)
                  + struct.pack("<QQ", 0, 0)
                  + bitmap.to_bytes(32, "little"))
        f.seek(0)
        f.write(header + attr_sec + ids_blob)
        f.flush()
