"""The perf.data reader: file mode, pipe mode (file or stdin), the --kcore and multi-file directory forms.

File-backed inputs are memory-mapped; records are parsed from the map one at a time as the caller
iterates (nothing keeps a list of records). Non-seekable pipes (stdin) are read through a buffered
reader, one record at a time.
"""

from __future__ import annotations

import heapq
import mmap
import os
import re
import struct
import sys
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

import numpy as _np

from ptexport.errors import PerfDataError, TruncatedError
from ptexport.perfdata.attr import EventAttr, perf_event_name
from ptexport.perfdata.auxtrace import AuxtraceInfo, TimeConv
from ptexport.perfdata.constants import (
    FEATURE_NAMES,
    FILE_HEADER_SIZE,
    GUEST_CPUMODES,
    HEADER_FEAT_BITS,
    PERF_MAGIC2,
    PERF_MAGIC2_SWAPPED,
    PIPE_HEADER_SIZE,
    RECORD_NAMES,
    EventUpdateType,
    Feature,
    RecordType,
)
from ptexport.perfdata.features import (
    FEATURE_PARSERS,
    BadFeature,
    FeatReader,
    parse_cpu_topology,
)
from ptexport.perfdata.records import (
    PARSERS,
    AuxtraceRecord,
    BadRecord,
    IdIndexEntry,
    ParseContext,
    Record,
    p_unknown,
)

_HDR = struct.Struct("<IHH")
_hdr = _HDR.unpack_from
_FILE_HDR = struct.Struct("<8sQQ QQ QQ QQ 4Q")

T_AUXTRACE = int(RecordType.AUXTRACE)
T_COMPRESSED = int(RecordType.COMPRESSED)
T_COMPRESSED2 = int(RecordType.COMPRESSED2)
T_TRACING_DATA = int(RecordType.HEADER_TRACING_DATA)
USER_START = 64
HEADER_LAST_FEATURE = 32  # end marker of the pipe-mode feature records

# record types that may precede the first kernel record in a stream (perf's "header" records)
_PREAMBLE_TYPES = frozenset(int(t) for t in (
    RecordType.HEADER_ATTR, RecordType.HEADER_EVENT_TYPE, RecordType.HEADER_TRACING_DATA,
    RecordType.HEADER_BUILD_ID, RecordType.ID_INDEX, RecordType.AUXTRACE_INFO, RecordType.THREAD_MAP,
    RecordType.CPU_MAP, RecordType.STAT_CONFIG, RecordType.EVENT_UPDATE, RecordType.TIME_CONV,
    RecordType.HEADER_FEATURE, RecordType.FINISHED_INIT,
))
_PREAMBLE_STOP = frozenset(int(t) for t in (
    RecordType.SAMPLE, RecordType.FINISHED_ROUND, RecordType.FINISHED_INIT, RecordType.AUXTRACE,
    RecordType.COMPRESSED, RecordType.COMPRESSED2,
))
_PREFETCH_MAX_RECORDS = 100_000
_PREFETCH_MAX_BYTES = 64 << 20


class RecordStats(dict):
    """Record counts by perf's record name (inner records of COMPRESSED ones counted by their own kind).

    ``unknown`` counts records of types this reader does not know (skipped, also listed as
    ``UNKNOWN(n)``); ``total`` counts all.
    """

    @property
    def total(self) -> int:
        return sum(self.values())

    @property
    def unknown(self) -> int:
        return sum(v for k, v in self.items() if k.startswith("UNKNOWN("))

    def by_type(self) -> dict[int, int]:
        rev = {v: k for k, v in RECORD_NAMES.items()}
        out = {}
        for k, v in self.items():
            if k in rev:
                out[rev[k]] = v
            else:
                out[int(k[8:-1])] = v
        return out


def _counts_to_stats(counts: list[int], extra: dict[int, int]) -> RecordStats:
    st = RecordStats()
    for t, n in enumerate(counts):
        if n:
            st[RECORD_NAMES.get(t) or f"UNKNOWN({t})"] = n
    for t, n in sorted(extra.items()):
        st[f"UNKNOWN({t})"] = st.get(f"UNKNOWN({t})", 0) + n
    return st


class _Tally:
    """Record counts of one pass (each pass counts on its own, so two iterations never mix)."""

    __slots__ = ("counts", "extra", "aux")

    def __init__(self) -> None:
        self.counts = [0] * 128
        self.extra: dict[int, int] = {}
        self.aux = 0  # AUXTRACE payload bytes handed out

    @property
    def total(self) -> int:
        return sum(self.counts) + sum(self.extra.values())

    def add(self, counts: list[int], extra: dict[int, int]) -> None:
        for i, n in enumerate(counts):
            if n:
                self.counts[i] += n
        for t, n in extra.items():
            self.extra[t] = self.extra.get(t, 0) + n

    def stats(self) -> RecordStats:
        return _counts_to_stats(self.counts, self.extra)


@dataclass
class FileCut:
    """Where a cut recording ends (perf killed, disk full), as a salvaging reader found it.

    ``offset``: where the readable bytes end: the size of the file (or stream) that was cut, or the
    end of the data section when the header's data size ends inside a record; ``source``: the file's
    name; ``cause``: the error a strict reader raises there. ``part``: what the cut falls into:
    ``"data"`` (a record, or between two records), ``"payload"`` (an AUXTRACE record's payload) or
    ``"features"`` (the feature sections behind the data); ``where``: the same in words, for a user
    (``inside data record 3 (MMAP2 at 0x2b0, 23 of 128 bytes present)``). ``record_index`` /
    ``record_offset`` / ``record_type``: the data record the cut falls into (its index counts the
    records before it as ``stats`` does), None for a cut between records or in the features.
    ``records``: records read before the cut, as ``stats`` counts them (the partial AUXTRACE one
    included; a COMPRESSED record and the records inside it); ``aux_bytes``: AUXTRACE payload bytes
    handed out (the present part of a partial payload included). ``partial_offset``: offset of an
    AUXTRACE record whose payload the cut falls into (None if none), ``partial_cpu`` /
    ``partial_tid`` its queue, ``partial_size`` / ``partial_present`` its payload's size and the
    bytes of it present (that record's ``size`` is set to the present bytes). ``data_size_zero``:
    the file-mode header's data size was 0 (perf record did not finish its header).

    A cut before the data section (inside the header, the attrs or their ids) leaves nothing to read:
    opening such a file raises a :class:`TruncatedError` naming the part instead."""

    offset: int
    source: str
    cause: str
    records: int = 0
    aux_bytes: int = 0
    partial_offset: int | None = None
    partial_cpu: int = -1
    partial_tid: int = -1
    partial_size: int = 0
    partial_present: int = 0
    part: str = "data"
    where: str = ""
    record_index: int | None = None
    record_offset: int | None = None
    record_type: str | None = None
    data_size_zero: bool = False

    def as_dict(self) -> dict:
        """The facts as plain values (``ptexport info --json``)."""
        return {"offset": self.offset, "source": self.source, "part": self.part, "where": self.where,
                "record_index": self.record_index, "record_offset": self.record_offset,
                "record_type": self.record_type, "records_before": self.records, "aux_bytes": self.aux_bytes,
                "partial_offset": self.partial_offset, "partial_cpu": self.partial_cpu,
                "partial_tid": self.partial_tid, "partial_size": self.partial_size,
                "partial_present": self.partial_present, "data_size_zero": self.data_size_zero,
                "cause": self.cause}


def _records(n: int) -> str:
    return f"{n} data record" + ("" if n == 1 else "s")


#: File bytes a pass over the records reads between two releases of the pages behind it.
RELEASE_BYTES = 32 << 20


class _Source:
    """One file of a recording: a name, a buffer (mmap or bytes) and the record region in it."""

    __slots__ = ("name", "path", "buf", "start", "end", "size", "_mm", "_fd")

    def __init__(self, path: Path | None, name: str, data: bytes | None = None):
        self.path = path
        self.name = name
        self._mm = None
        self._fd = None
        if data is not None:
            self.buf = data
            self.size = len(data)
            self.start = 0
            self.end = self.size
            return
        try:
            f = open(path, "rb")  # noqa: SIM115 - kept open for the map's lifetime
        except OSError as e:
            raise PerfDataError(f"cannot open: {e.strerror}", source=name) from e
        self._fd = f
        try:
            self.size = os.fstat(f.fileno()).st_size
            if self.size:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self.buf = self._mm
            else:
                self.buf = b""
        except (OSError, ValueError) as e:
            f.close()
            raise PerfDataError(f"cannot map: {e}", source=name) from e
        self.start = 0
        self.end = self.size

    def release_pages(self, upto: int | None = None) -> None:
        """Unmap the file's pages (below byte ``upto``) from this process: they stay in the page cache
        and a later read maps them again.  A read of each record's header maps its neighbours too (the
        kernel's fault-around), so a pass over the records would leave the whole file resident."""
        if self._mm is not None and hasattr(mmap, "MADV_DONTNEED"):
            n = self.size if upto is None else min(upto, self.size) & ~(mmap.PAGESIZE - 1)
            try:
                if n > 0:
                    self._mm.madvise(mmap.MADV_DONTNEED, 0, n)
            except (OSError, ValueError):  # pragma: no cover - not supported here
                pass

    def close(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a caller still holds a memoryview (aux_data); the map dies with it
            self._mm = None
        if self._fd is not None:
            self._fd.close()
            self._fd = None


def machine_pid_of(rec: Record, id_index: dict) -> int | None:
    """perf's machine attribution: None for host records; for guest cpumodes (GUEST_KERNEL/GUEST_USER)
    the hypervisor pid that identifies the guest machine (``id_index``'s machine_pid of the record's id,
    else the MMAP/MMAP2 pid, else the sample pid)."""
    if rec.misc & 7 not in GUEST_CPUMODES:
        return None
    sid = rec.sample_id
    if sid is not None and sid.id is not None:
        e = id_index.get(sid.id)
        if e is not None and e.machine_pid:
            return e.machine_pid
    if rec.type in (RecordType.MMAP, RecordType.MMAP2):
        return rec.pid
    return sid.pid if sid is not None else None


def vcpu_of(rec: Record, id_index: dict) -> int | None:
    """The VCPU of a record's event (``id_index``'s vcpu for guest recordings), else None."""
    sid = rec.sample_id
    if sid is None or sid.id is None:
        return None
    e = id_index.get(sid.id)
    return None if e is None or not e.machine_pid else e.vcpu


class PerfData:
    """An open perf.data recording. Use :func:`open_perf_data` (or :func:`perf_data_from_bytes`).

    Attributes known right after open (for pipe mode: from the header records at the start of the
    stream, completed as records() goes on):

    ``path``, ``is_pipe``, ``kcore_dir`` (``DIR/kcore_dir`` of a ``perf record --kcore`` directory),
    ``dir_path`` (the directory, for directory forms), ``header`` (file header fields), ``attrs``
    (:class:`EventAttr` list with ids and names), ``features`` (by perf's lower-case names),
    ``unknown_features`` (ids without a parser, skipped), ``feature_errors`` (malformed sections left
    out; with ``strict`` they raise), ``auxtrace_info``, ``time_conv``, ``id_index`` (id ->
    :class:`IdIndexEntry`, with machine_pid/vcpu for guest recordings), ``sources`` (the files that
    hold records).

    Iteration: :meth:`records` (file order), :meth:`ordered_records` (perf's delivery order),
    :meth:`iter_headers` (the fast path); then ``stats``. Lookups: :meth:`attr_for_id`,
    :meth:`attr_of`, :meth:`machine_pid_of`, :meth:`vcpu_of`, :meth:`aux_data`.

    Salvage (``salvage=True``): a recording cut anywhere (perf killed, disk full) reads as far as it
    goes. A pass hands out every whole record before the cut and an AUXTRACE record whose payload is
    cut with ``size`` set to the bytes present, then ends without an error and sets ``cut``
    (:class:`FileCut`, with where the cut falls). A file-mode header whose data size is 0 (perf killed
    before it rewrote the header at exit) is read to the end of the file, or up to the feature table
    perf wrote behind the data before it was killed (the features are read from there), or up to a
    record header of size 0 (a table it did not get to write); a finished recording without records
    (its feature table at the data offset) is whole. A data size that ends inside a record (a write
    torn by a full disk behind the counted data) ends the data there, like a cut. A cut inside the
    header, the attrs or their ids (before the data section) still raises, naming the part; a
    pipe-mode file cut between two records reads as whole (nothing marks its end). Without
    ``salvage`` a cut, and a data size of 0 with records behind it, raise :class:`TruncatedError`.
    """

    def __init__(self, path: str | os.PathLike, *, strict: bool = False, stream: BinaryIO | None = None,
                 data: bytes | None = None, salvage: bool = False):
        self.path = str(path)
        self.strict = strict
        self.salvage = salvage
        self.cut: FileCut | None = None  # set by a salvaging reader's pass that met the end of a cut file
        # (offset, source, cause, part, where) of a cut seen at open (feature sections, data size 0)
        self._open_cut: tuple[int, str, str, str, str] | None = None
        self._data_size_zero = False
        self._partial: AuxtraceRecord | None = None
        self._partial_size = 0
        self._partial_cause = ""
        self.is_pipe = False
        self.kcore_dir: Path | None = None
        self.dir_path: Path | None = None
        self.attrs: list[EventAttr] = []
        self.features: dict[str, object] = {}
        self.unknown_features: list[int] = []
        self.feature_errors: list[PerfDataError] = []
        self.auxtrace_info: AuxtraceInfo | None = None
        self.time_conv: TimeConv | None = None
        self.auxtrace_info_at: tuple[str, int] | None = None
        self.id_index: dict[int, IdIndexEntry] = {}
        self.header: dict[str, int] = {}
        self._ctx = ParseContext()
        self._consumed: set = set()
        self._sources: list[_Source] = []
        self._stream: BinaryIO | None = None
        self._stream_used = False
        self._prefetched: list[Record] = []
        self._stream_pos = 0
        self._stats: RecordStats | None = None
        try:
            if stream is not None:
                self._open_stream(stream, self.path)
            elif data is not None:
                main = _Source(None, self.path, data)
                self._sources.append(main)
                self._open_main(main)
            else:
                self._open_path(Path(path))
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------------------------------- open
    def _open_path(self, p: Path) -> None:
        if p.is_dir():
            self.dir_path = p
            data = p / "data"
            if not data.exists():
                raise PerfDataError("directory has no 'data' file (not a perf.data directory)", source=str(p))
            kd = p / "kcore_dir"
            self.kcore_dir = kd if kd.is_dir() else None
            main = _Source(data, str(data))
            self._sources.append(main)
            self._open_main(main)
            parts = []
            for q in p.iterdir():
                m = re.fullmatch(r"data\.(\d+)", q.name)
                if m and q.is_file():
                    parts.append((int(m.group(1)), q))
            for _, q in sorted(parts):
                s = _Source(q, str(q))
                self._sources.append(s)
            return
        if not p.exists():
            raise PerfDataError("no such file", source=str(p))
        if not p.is_file():
            # a FIFO or character device: stream it
            try:
                f = open(p, "rb")  # noqa: SIM115 - closed in close()
            except OSError as e:
                raise PerfDataError(f"cannot open: {e.strerror}", source=str(p)) from e
            self._open_stream(f, str(p), owned=True)
            return
        main = _Source(p, str(p))
        self._sources.append(main)
        self._open_main(main)

    def _open_main(self, src: _Source) -> None:
        buf, name = src.buf, src.name
        if src.size < 16:
            if src.size >= 1 and bytes(buf[:min(src.size, 8)]) == PERF_MAGIC2[:min(src.size, 8)]:
                raise TruncatedError(f"the file ends at {src.size:#x}, inside the header: cut before the data "
                                     "section, no records to read", source=name, offset=src.size, what="header")
            raise TruncatedError(f"file of {src.size} bytes is too small for a perf.data header",
                                 source=name, offset=0, what="header")
        magic = bytes(buf[0:8])
        if magic == PERF_MAGIC2_SWAPPED:
            raise PerfDataError("big-endian perf.data is not supported", source=name, offset=0, what="header")
        if magic != PERF_MAGIC2:
            raise PerfDataError(f"bad magic {magic!r} (not a perf.data file)", source=name, offset=0,
                                what="header")
        (hsize,) = struct.unpack_from("<Q", buf, 8)
        if hsize == PIPE_HEADER_SIZE:
            self.is_pipe = True
            src.start = PIPE_HEADER_SIZE
            src.end = src.size
            self.header = {"size": hsize, "data_offset": PIPE_HEADER_SIZE, "data_size": src.size - PIPE_HEADER_SIZE}
            self._preamble_from_buffer(src)
            return
        if hsize != FILE_HEADER_SIZE:
            raise PerfDataError(f"header size {hsize} is neither {FILE_HEADER_SIZE} (file) nor "
                                f"{PIPE_HEADER_SIZE} (pipe)", source=name, offset=8, what="header")
        if src.size < FILE_HEADER_SIZE:
            raise TruncatedError(f"the file ends at {src.size:#x}, inside the {FILE_HEADER_SIZE}-byte header: cut "
                                 "before the data section, no records to read", source=name, offset=src.size,
                                 what="header")
        (_m, _s, attr_size, a_off, a_size, d_off, d_size, e_off, e_size, *bits) = _FILE_HDR.unpack_from(buf, 0)
        self.header = {"size": hsize, "attr_size": attr_size, "attrs_offset": a_off, "attrs_size": a_size,
                       "data_offset": d_off, "data_size": d_size, "event_types_offset": e_off,
                       "event_types_size": e_size}
        feat_bits = bits[0] | bits[1] << 64 | bits[2] << 128 | bits[3] << 192
        self.header["features"] = feat_bits
        if d_off < FILE_HEADER_SIZE and d_size:
            raise PerfDataError(f"data section at {d_off:#x} overlaps the header", source=name, offset=40,
                                what="header")
        if d_off > src.size:
            self._cut_before_data(src, attr_size, a_off, a_size, d_off)
        src.start = d_off
        # a data section running past the end is reported at the record that gets cut
        src.end = d_off + d_size
        self._read_attrs(src, attr_size, a_off, a_size)
        if d_size == 0 and src.size > d_off:
            # perf record writes the final header at exit: killed before, the data runs to the end of the
            # file, or (killed after it wrote the feature sections) to the feature table behind it; a
            # finished recording without records has its feature table right at the data offset
            data_end, has_table = self._data_end_when_size_zero(src, feat_bits)
            if not (has_table and data_end == d_off):
                cause = "the header's data size is 0 (perf record did not finish)"
                if not self.salvage:
                    raise TruncatedError(f"{cause}: {src.size - d_off} bytes follow the data offset, not a feature "
                                         "table", source=name, offset=48, what="header")
                self._data_size_zero = True
                src.end = src.size if data_end is None else data_end
                if has_table:
                    self._open_cut = (data_end, name, cause, "data",
                                      f"at the end of the data: the feature sections follow at {data_end:#x}")
                else:
                    feat_bits = 0
                    if data_end is None:
                        self._open_cut = (src.size, name, cause, "data", "after the last whole data record")
                    else:
                        self._open_cut = (data_end, name, cause, "data",
                                          f"at {data_end:#x}, where the records end (no valid record header "
                                          "follows)")
        self._read_features(src, feat_bits, src.end)
        if self.salvage and self._open_cut is None and src.end <= src.size:
            cut = next((e for e in self.feature_errors if isinstance(e, TruncatedError)), None)
            if cut is not None:
                w = cut.what or ""
                self._open_cut = (src.size, name, str(cut), "features",
                                  f"inside the {w[8:]} feature section" if w.startswith("feature ")
                                  else "inside the feature table behind the data")
        self._ctx.set_attrs(self.attrs)
        self._preamble_from_buffer(src)

    def _cut_before_data(self, src: _Source, attr_size: int, a_off: int, a_size: int, d_off: int) -> None:
        """Raise the error for a file that ends before its data section starts, naming the part the
        end falls into (the attrs, one attr's ids, or the gap before the data)."""
        n, name = src.size, src.name
        part, what = f"the gap before the data section at {d_off:#x}", "header"
        if attr_size and a_off <= n < a_off + a_size:
            k = (n - a_off) // attr_size
            part, what = f"attr {k} of the attrs section [{a_off:#x}, {a_off + a_size:#x})", "attrs"
        elif attr_size >= 16 and a_off + a_size <= n:
            for i in range(a_size // attr_size):
                at = a_off + i * attr_size
                ids_off, ids_size = struct.unpack_from("<QQ", src.buf, at + attr_size - 16)
                if ids_size and ids_off <= n < ids_off + ids_size:
                    part, what = f"the ids of attr {i} [{ids_off:#x}, {ids_off + ids_size:#x})", f"attr {i}"
                    break
        elif n < a_off:
            part = f"the gap between the header and the attrs section at {a_off:#x}"
        raise TruncatedError(f"the file ends at {n:#x}, inside {part}: cut before the data section at {d_off:#x}, "
                             "no records to read", source=name, offset=n, what=what)

    def _data_end_when_size_zero(self, src: _Source, feat_bits: int) -> tuple[int | None, bool]:
        """Where the data ends in a file whose header's data size is 0 (perf record killed before it
        rewrote the header at exit), and whether a feature table starts there. Killed while recording,
        the records run to the end of the file (None; the last one may be cut); killed after it wrote
        the feature sections behind the data, a feature table follows the last record (one (offset,
        size) entry per feature bit, the sections right behind it one after the other, the last ending
        at the end of the file); killed while writing them, a record header of size 0 (zeros, or the
        table's first offset) follows the last record. Walks the record headers only."""
        nfeat = bin(feat_bits).count("1")
        buf, pos, size = src.buf, src.start, src.size
        table = 16 * nfeat
        while pos + 8 <= size:
            rtype, _misc, rsize = _hdr(buf, pos)
            if rsize < 8:
                if nfeat and pos + table <= size:
                    nxt = pos + table
                    for k in range(nfeat):
                        f_off, f_size = struct.unpack_from("<QQ", buf, pos + 16 * k)
                        if f_off != nxt or f_off + f_size > size:
                            break
                        nxt = f_off + f_size
                    else:
                        if nxt == size:
                            return pos, True
                return pos, False
            if pos + rsize > size:
                return None, False
            if rtype == T_AUXTRACE and pos + 16 <= size:
                rsize += struct.unpack_from("<Q", buf, pos + 8)[0]
            elif rtype == T_TRACING_DATA and pos + 12 <= size:
                rsize += (struct.unpack_from("<I", buf, pos + 8)[0] + 7) & ~7
            pos += rsize
        return None, False

    def _read_attrs(self, src: _Source, attr_size: int, a_off: int, a_size: int) -> None:
        name, buf = src.name, src.buf
        if a_size == 0:
            raise PerfDataError("the file has no event attrs", source=name, offset=24, what="header")
        if attr_size < 64 + 16:
            raise PerfDataError(f"attr entry size {attr_size} is smaller than 80", source=name, offset=16,
                                what="header")
        if a_size % attr_size:
            raise PerfDataError(f"attrs section size {a_size} is not a multiple of the entry size {attr_size}",
                                source=name, offset=32, what="header")
        if a_off + a_size > src.size:
            raise TruncatedError(f"attrs section [{a_off:#x}, {a_off + a_size:#x}) runs past the end of the file",
                                 source=name, offset=a_off, what="attrs")
        n = a_size // attr_size
        attrs = []
        for i in range(n):
            at = a_off + i * attr_size
            raw = bytes(buf[at:at + attr_size - 16])
            (own,) = struct.unpack_from("<I", raw, 4)
            if own and own < 64:
                raise PerfDataError(f"attr size {own} is smaller than 64", source=name, offset=at,
                                    what=f"attr {i}")
            attr = EventAttr(raw[:own] if own and own < len(raw) else raw, index=i)
            ids_off, ids_size = struct.unpack_from("<QQ", buf, at + attr_size - 16)
            if ids_size % 8:
                raise PerfDataError(f"ids section size {ids_size} is not a multiple of 8", source=name,
                                    offset=at + attr_size - 8, what=f"attr {i}")
            if ids_off + ids_size > src.size:
                raise TruncatedError(f"ids section [{ids_off:#x}, {ids_off + ids_size:#x}) runs past the end "
                                     "of the file", source=name, offset=at + attr_size - 16, what=f"attr {i}")
            attr.ids = list(struct.unpack_from(f"<{ids_size // 8}Q", buf, ids_off))
            attrs.append(attr)
        self.attrs = attrs

    def _feature_error(self, err: PerfDataError) -> None:
        if self.strict:
            raise err
        self.feature_errors.append(err)

    def _read_features(self, src: _Source, feat_bits: int, sec_off: int) -> None:
        name, buf = src.name, src.buf
        ids = [b for b in range(HEADER_FEAT_BITS) if feat_bits >> b & 1]
        if not ids:
            return
        if sec_off + 16 * len(ids) > src.size:
            self._feature_error(TruncatedError(
                f"feature table of {len(ids)} entries runs past the end of the file",
                source=name, offset=sec_off, what="features"))
            return
        for k, fid in enumerate(ids):
            f_off, f_size = struct.unpack_from("<QQ", buf, sec_off + 16 * k)
            self._parse_feature(fid, buf, f_off, f_size, src.size, name, sec_off + 16 * k)
        self._apply_event_desc()

    def _parse_feature(self, fid: int, buf, f_off: int, f_size: int, limit: int, srcname: str,
                       entry_off: int | None) -> None:
        parser = FEATURE_PARSERS.get(fid)
        fname = FEATURE_NAMES.get(fid, f"feature_{fid}")
        what = f"feature {fname.upper()}"
        if parser is None:
            if fid != HEADER_LAST_FEATURE:
                self.unknown_features.append(fid)
            return
        if f_off + f_size > limit:
            self._feature_error(TruncatedError(
                f"section [{f_off:#x}, {f_off + f_size:#x}) runs past the end of the file",
                source=srcname, offset=entry_off if entry_off is not None else f_off, what=what))
            return
        r = FeatReader(buf, f_off, f_off + f_size)
        try:
            if fid == Feature.CPU_TOPOLOGY:
                nr = self.features.get("nrcpus")
                val = parse_cpu_topology(r, nr.nr_cpus_avail if nr else None)
            else:
                val = parser(r)
        except BadFeature as e:
            self._feature_error(PerfDataError(e.cause, source=srcname, offset=f_off + e.rel, what=what))
            return
        except (struct.error, ValueError, IndexError, OverflowError, MemoryError) as e:
            self._feature_error(PerfDataError(f"malformed section ({e})", source=srcname, offset=f_off,
                                              what=what))
            return
        self.features[fname] = val

    def _apply_event_desc(self) -> None:
        descs = self.features.get("event_desc")
        if not descs:
            return
        by_ids = {}
        for d in descs:
            for i in d.ids:
                by_ids[i] = d.name
        for k, a in enumerate(self.attrs):
            nm = None
            for i in a.ids:
                if i in by_ids:
                    nm = by_ids[i]
                    break
            if nm is None and k < len(descs):
                nm = descs[k].name
            a.name = nm

    def _open_stream(self, f: BinaryIO, name: str, owned: bool = False) -> None:
        self.is_pipe = True
        self._stream = f
        self._stream_owned = owned
        head = _read_exact(f, 16)
        if len(head) < 16:
            raise TruncatedError(f"stream of {len(head)} bytes is too short for a perf.data header",
                                 source=name, offset=0, what="header")
        if head[:8] != PERF_MAGIC2:
            raise PerfDataError(f"bad magic {head[:8]!r} (not a perf.data stream)", source=name, offset=0,
                                what="header")
        (hsize,) = struct.unpack_from("<Q", head, 8)
        if hsize != PIPE_HEADER_SIZE:
            raise PerfDataError(f"header size {hsize} on a pipe: file-mode perf.data must be a regular file "
                                "(it needs seeking)", source=name, offset=8, what="header")
        self._stream_pos = 16
        self._stream_compressed = 0
        self.header = {"size": hsize, "data_offset": 16}
        # read the preamble records so attrs/features are known before records() is called
        total = 0
        it = self._iter_stream()
        while len(self._prefetched) < _PREFETCH_MAX_RECORDS and total < _PREFETCH_MAX_BYTES:
            rec = next(it, None)
            if rec is None:
                self._stream_eof = True
                break
            self._prefetched.append(rec)
            total += rec.size
            if rec.type in _PREAMBLE_STOP or rec.inner_offset is not None:
                break
        self._stream_iter = it

    # ------------------------------------------------------------------------------------ preamble
    def _preamble_from_buffer(self, src: _Source) -> None:
        """Consume the header-like records near the start of the data (HEADER_ATTR, HEADER_FEATURE,
        EVENT_UPDATE, AUXTRACE_INFO, TIME_CONV, ID_INDEX...) so they are known right after open.

        Walks record headers up to the first SAMPLE / FINISHED_ROUND / FINISHED_INIT / AUXTRACE /
        COMPRESSED record; kernel records are not parsed. Malformed records stop the walk silently:
        records() reports them with their offset."""
        buf, pos, end = src.buf, src.start, min(src.end, src.size)
        ctx = self._ctx
        for _ in range(_PREFETCH_MAX_RECORDS):
            if pos + 8 > end:
                return
            rtype, misc, size = _hdr(buf, pos)
            if size < 8 or pos + size > end or rtype in _PREAMBLE_STOP:
                if rtype == RecordType.FINISHED_INIT:
                    pass
                return
            if rtype in _PREAMBLE_TYPES:
                try:
                    rec = PARSERS[rtype](ctx, buf, pos, size, rtype, misc)
                except (BadRecord, struct.error, ValueError, IndexError, OverflowError, UnicodeError):
                    return
                rec.offset = pos
                try:
                    self._consume(rec, src.name)
                except PerfDataError:
                    return
                if rtype == T_TRACING_DATA:
                    size += (rec.data_size + 7) & ~7
            pos += size

    def _consume(self, rec: Record, name: str) -> None:
        """Fold a user (type >= 64) record into the reader's state (once per record)."""
        key = (name, rec.offset, rec.inner_offset)
        if key in self._consumed:
            return
        self._consumed.add(key)
        t = rec.type
        if t == RecordType.HEADER_ATTR:
            a = rec.attr
            a.index = len(self.attrs)
            self.attrs.append(a)
            self._ctx.set_attrs(self.attrs)
        elif t == RecordType.HEADER_FEATURE:
            data = rec.data
            self._parse_feature(rec.feat_id, data, 0, len(data), len(data), name, None)
            if rec.feat_id == Feature.EVENT_DESC:
                self._apply_event_desc()
        elif t == RecordType.EVENT_UPDATE:
            if rec.update_type == EventUpdateType.NAME:
                a = self._ctx.by_id.get(rec.event_id)
                if a is not None:
                    a.name = rec.event_name
        elif t == RecordType.AUXTRACE_INFO:
            self.auxtrace_info = rec.info
            self.auxtrace_info_at = (name, rec.offset)  # where a later check of its values points
        elif t == RecordType.TIME_CONV:
            self.time_conv = TimeConv(rec.time_shift, rec.time_mult, rec.time_zero, rec.time_cycles,
                                      rec.time_mask, rec.cap_user_time_zero, rec.cap_user_time_short)
        elif t == RecordType.ID_INDEX:
            for e in rec.entries:
                self.id_index[e.id] = e

    # ----------------------------------------------------------------------------------- iteration
    def _error(self, cause: str, src: str, off: int, rtype: int | None, cls=PerfDataError):
        what = "record" if rtype is None else f"record {RECORD_NAMES.get(rtype) or f'UNKNOWN({rtype})'}"
        return cls(cause, source=src, offset=off, what=what)

    def _cut(self, src: _Source, pos: int, rtype: int | None, size: int | None) -> PerfDataError:
        """The error for a record that does not fit its region (header or body cut, or a bad size)."""
        lim = min(src.end, src.size)
        where = "file" if src.size <= src.end else "data section"
        if size is None:
            return self._error(f"record header runs past the end of the {where} ({lim:#x})", src.name, pos, None,
                               TruncatedError)
        if size < 8:
            return self._error(f"size {size} is smaller than the 8-byte record header", src.name, pos, rtype)
        return self._error(f"size {size} runs past the end of the {where} ({lim:#x})", src.name, pos, rtype,
                           TruncatedError)

    def _is_cut(self, src: _Source, err: PerfDataError) -> bool:
        """Whether a salvaging reader takes ``err`` (raised while walking ``src``) for the end of a cut
        recording: a record, payload or compressed stream running past the end of the file, or past the
        end of the data section when the header's data size ends inside a record (perf record's header
        counts the bytes it wrote whole: a write cut short by a full disk leaves a torn record behind)."""
        return self.salvage and isinstance(err, TruncatedError)

    def _set_cut(self, offset: int, source: str, cause: str, tally: "_Tally",
                 err: PerfDataError | None = None, part: str | None = None, where: str | None = None) -> None:
        p = self._partial
        if p is not None:
            cause = self._partial_cause
        cut = FileCut(offset=offset, source=source, cause=cause, records=tally.total, aux_bytes=tally.aux,
                      data_size_zero=self._data_size_zero)
        if p is not None:
            cut.partial_offset = p.offset
            cut.partial_cpu = -1 if p.cpu in (-1, 0xFFFFFFFF) else p.cpu
            cut.partial_tid = p.tid
            cut.partial_size = self._partial_size
            cut.partial_present = p.size
            queue = f"cpu {cut.partial_cpu}" if cut.partial_cpu != -1 else f"thread {cut.partial_tid}"
            cut.part, cut.record_type = "payload", "AUXTRACE"
            cut.record_index, cut.record_offset = tally.total - 1, p.offset
            cut.where = (f"inside the payload of data record {cut.record_index} (AUXTRACE at {p.offset:#x}, {queue}:"
                         f" {p.size} of {self._partial_size} bytes present)")
        elif part is not None:
            cut.part, cut.where = part, where or ""
        elif err is not None and err.offset is not None and (err.what or "").startswith("record"):
            rtype = err.what[7:] or None
            if rtype is None and err.offset >= offset:
                cut.where = (f"between two data records, after {_records(tally.total)}" if tally.total
                             else "at the start of the data section, before its first record")
            else:
                cut.record_index, cut.record_offset, cut.record_type = tally.total, err.offset, rtype
                desc = f"{rtype} at {err.offset:#x}" if rtype else f"at {err.offset:#x}"
                if rtype is None:
                    cut.where = f"inside the 8-byte header of data record {tally.total} ({desc})"
                else:
                    cut.where = f"inside data record {tally.total} ({desc})"
        if not cut.where:
            cut.where = f"after {_records(tally.total)}"
        early = self._source_size(source) - offset
        if (err is not None or p is not None) and early > 0:
            cut.where += f"; the header's data size ends the data there, {early} bytes before the end of the file"
        if self._data_size_zero and "data size is 0" not in cut.where:
            cut.where += "; the header's data size is 0 (perf record did not finish)"
        self._partial = None
        if self.cut is None or self.cut.offset == offset:
            self.cut = cut

    def _source_size(self, name: str) -> int:
        for s in self._sources:
            if s.name == name:
                return s.size
        return 0

    def _pass_done(self, tally: "_Tally") -> None:
        """End of a whole pass: a cut seen at open (features, a data size of 0) gets its counts."""
        oc = self._open_cut
        if oc is not None and (self.cut is None or self.cut.source == oc[1] and self.cut.cause == oc[2]):
            self._set_cut(oc[0], oc[1], oc[2], tally, part=oc[3], where=oc[4])

    def _user_extent(self, src: _Source, rec: Record, pos: int, nxt: int, lim: int) -> int:
        """Where the record after a user record starts (AUXTRACE payloads and tracing data follow their
        record); folds header records into the reader's state."""
        rtype = rec.type
        if rtype == T_AUXTRACE:
            dsize = rec.size
            if nxt + dsize > lim and self.salvage:
                # the file (or the data section) is cut inside this payload: hand out the bytes present, the
                # pass ends after it
                rec.data_offset = nxt
                rec.size = lim - nxt
                self._partial, self._partial_size = rec, dsize
                self._partial_cause = (f"record AUXTRACE: payload of {dsize} bytes at {nxt:#x} runs past the end "
                                       f"({lim:#x})")
                return lim
            if nxt + dsize > lim:
                raise self._error(f"payload of {dsize} bytes at {nxt:#x} runs past the end ({lim:#x})", src.name,
                                  pos, rtype, TruncatedError)
            rec.data_offset = nxt
            return nxt + dsize
        if rtype == T_TRACING_DATA:
            skip = (rec.data_size + 7) & ~7
            if nxt + skip > lim:
                raise self._error(f"tracing data of {rec.data_size} bytes runs past the end ({lim:#x})", src.name,
                                  pos, rtype, TruncatedError)
            return nxt + skip
        if rtype in _PREAMBLE_TYPES:
            self._consume(rec, src.name)
        return nxt

    def _record_chunks(self, src: _Source, tally: "_Tally",
                       want: frozenset | None = None) -> Iterator[list[Record]]:
        """Parse one file's records in file order, handed out in lists of up to 128 (chained by the
        caller: one generator resume per chunk, not per record). An error is raised after the records
        before it have been handed out. With ``want``, kernel records of other types are skipped
        unparsed and user records of other types are parsed (for state) but not handed out."""
        buf = src.buf
        pos = src.start
        end = src.end
        lim = min(end, src.size)
        ctx = self._ctx
        parsers = ctx.parsers
        hdr = _hdr
        counts = [0] * 128
        extra: dict[int, int] = {}
        comp = None
        srcname = None if src is self._sources[0] else src.name
        out: list[Record] = []
        add = out.append
        skip_size = skipped = 0
        skip_backoff = 8
        want_arr = None if want is None else _np.array(sorted(want), dtype=_np.uint32)
        aux = 0
        try:
            while pos < end:
                if pos + 8 > lim:
                    raise self._cut(src, pos, None, None)
                rtype, misc, size = hdr(buf, pos)
                nxt = pos + size
                if size < 8 or nxt > lim:
                    raise self._cut(src, pos, rtype, size)
                if want is not None and rtype < USER_START and rtype not in want:
                    counts[rtype] += 1
                    pos = nxt
                    if size != skip_size:
                        skip_size, skipped = size, 0
                        continue
                    skipped += 1
                    if skipped >= skip_backoff and lim - pos >= 64 * size:
                        # skip a run of unwanted same-size records with one numpy check
                        k, types, _m = _same_size_run(buf, pos, size, lim)
                        if k:
                            hit = _np.flatnonzero(_np.isin(types, want_arr))
                            if len(hit):
                                k = int(hit[0])
                                types = types[:k]
                            bc = _np.bincount(types, minlength=64)
                            for t in _np.flatnonzero(bc).tolist():
                                counts[t] += int(bc[t])
                            pos += k * size
                        if k < 64:
                            skipped, skip_backoff = 0, min(skip_backoff * 2, 4096)
                        else:
                            skip_backoff = 8
                    continue
                try:
                    rec = (parsers.get(rtype) or p_unknown)(ctx, buf, pos, size, rtype, misc)
                except BadRecord as e:
                    raise self._error(e.cause, src.name, pos, rtype) from None
                except (struct.error, ValueError, IndexError, OverflowError, UnicodeError) as e:
                    raise self._error(f"malformed record ({e})", src.name, pos, rtype) from None
                rec.offset = pos
                if srcname is not None:
                    rec.src = srcname
                if rtype < 128:
                    counts[rtype] += 1
                else:
                    extra[rtype] = extra.get(rtype, 0) + 1
                if rtype >= USER_START:
                    if rtype == T_COMPRESSED or rtype == T_COMPRESSED2:
                        if comp is None:
                            comp = _Decompressor(self, src.name)
                        inner = comp.feed(rec, buf, pos)
                        for r in inner:
                            t = r.type
                            if t < 128:
                                counts[t] += 1
                            else:
                                extra[t] = extra.get(t, 0) + 1
                            if srcname is not None:
                                r.src = srcname
                        out.extend(inner if want is None else [r for r in inner if r.type in want])
                        pos = nxt
                        continue
                    nxt = self._user_extent(src, rec, pos, nxt, lim)
                    if rtype == T_AUXTRACE:
                        aux += rec.size
                    parsers = ctx.parsers  # a HEADER_ATTR may have changed the attrs
                    if want is not None and rtype not in want:
                        pos = nxt
                        continue
                add(rec)
                pos = nxt
                if len(out) >= 128:
                    yield out
                    out = []
                    add = out.append
            if comp is not None:
                comp.finish()
        except PerfDataError as e:
            if out:
                yield out
            if not self._is_cut(src, e):
                raise
            tally.add(counts, extra)
            tally.aux += aux
            self._set_cut(lim, src.name, str(e), tally, e)
            return
        yield out
        tally.add(counts, extra)
        tally.aux += aux
        if self._partial is not None:  # a pipe-mode file cut inside its last payload
            self._set_cut(lim, src.name, "", tally)

    def _header_chunks(self, src: _Source, tally: "_Tally") -> Iterator:
        """The header walk of one file as chunks (lists or zip iterators) of (offset, type, misc, size):
        kernel records are not parsed; user records are (payloads, COMPRESSED). Chunks let a caller
        chain them, so runs of same-size records pass through C iterators only."""
        buf = src.buf
        pos = src.start
        end = src.end
        lim = min(end, src.size)
        stop = lim - 8  # the last offset where a whole header fits
        hdr = _hdr
        counts = [0] * 128
        extra: dict[int, int] = {}
        comp = None
        run_size = same = 0
        backoff = 8
        out: list = []
        add = out.append
        aux = 0
        try:
            while pos < end:
                if pos > stop:
                    yield out
                    raise self._cut(src, pos, None, None)
                rtype, misc, size = hdr(buf, pos)
                nxt = pos + size
                if rtype < 64 and nxt <= lim and size >= 8:  # the common case: a whole kernel record
                    counts[rtype] += 1
                    add((pos, rtype, misc, size))
                    pos = nxt
                    if size != run_size:
                        run_size, same = size, 0
                        continue
                    same += 1
                    if same < backoff or lim - pos < 64 * size:
                        continue
                    # sideband streams are long runs of same-size records (SWITCH*, samples of one shape):
                    # check a whole run's headers with numpy and hand them out through zip at C speed
                    k, types, miscs = _same_size_run(buf, pos, size, lim)
                    if k:
                        bc = _np.bincount(types, minlength=64)
                        for t in _np.flatnonzero(bc).tolist():
                            counts[t] += int(bc[t])
                        yield out
                        out = []
                        add = out.append
                        yield zip(range(pos, pos + k * size, size), types.tolist(), miscs.tolist(), repeat(size, k))
                        pos += k * size
                    if k < 64:  # a short run: walk longer before trying again
                        same, backoff = 0, min(backoff * 2, 4096)
                    else:
                        backoff = 8
                    continue
                if size < 8 or nxt > lim:
                    yield out
                    raise self._cut(src, pos, rtype, size)
                try:
                    rec = (PARSERS.get(rtype) or p_unknown)(self._ctx, buf, pos, size, rtype, misc)
                    rec.offset = pos
                    if rtype == T_COMPRESSED or rtype == T_COMPRESSED2:
                        if comp is None:
                            comp = _Decompressor(self, src.name)
                        inner = comp.feed(rec, buf, pos)
                    else:
                        inner = None
                        nxt = self._user_extent(src, rec, pos, nxt, lim)
                        if rtype == T_AUXTRACE:
                            aux += rec.size
                except BadRecord as e:
                    yield out
                    raise self._error(e.cause, src.name, pos, rtype) from None
                except (struct.error, ValueError, IndexError, OverflowError, UnicodeError) as e:
                    yield out
                    raise self._error(f"malformed record ({e})", src.name, pos, rtype) from None
                except PerfDataError:
                    yield out
                    raise
                if rtype < 128:
                    counts[rtype] += 1
                else:
                    extra[rtype] = extra.get(rtype, 0) + 1
                if inner is not None:
                    for r in inner:
                        t = r.type
                        if t < 128:
                            counts[t] += 1
                        else:
                            extra[t] = extra.get(t, 0) + 1
                        add((pos, t, r.misc, r.size))
                else:
                    add((pos, rtype, misc, size))
                pos = nxt
                if len(out) >= 256:
                    yield out
                    out = []
                    add = out.append
            yield out
            if comp is not None:
                comp.finish()
        except PerfDataError as e:
            if not self._is_cut(src, e):
                raise
            tally.add(counts, extra)
            tally.aux += aux
            self._set_cut(lim, src.name, str(e), tally, e)
            return
        tally.add(counts, extra)
        tally.aux += aux
        if self._partial is not None:  # a pipe-mode file cut inside its last payload
            self._set_cut(lim, src.name, "", tally)

    def _all_header_chunks(self) -> Iterator:
        tally = _Tally()
        for src in self._sources:
            yield from self._header_chunks(src, tally)
        self._stats = tally.stats()
        self._pass_done(tally)

    def _iter_stream(self) -> Iterator[Record]:
        """The stream's records; a salvaging reader ends at a cut (see ``_records_stream``)."""
        self._stream_read = self._stream_pos
        try:
            yield from self._iter_stream_raw()
        except TruncatedError as e:
            if not self.salvage:
                raise
            self._stream_cut = (self._stream_read, str(e), e)
            return
        if self._partial is not None:
            self._stream_cut = (self._stream_read, "", None)

    def _iter_stream_raw(self) -> Iterator[Record]:
        f = self._stream
        name = self.path
        ctx = self._ctx
        comp = None
        done = [self._stream_pos]  # bytes read from the stream so far

        def read(n: int) -> bytes:
            b = _read_exact(f, n)
            done[0] += len(b)
            self._stream_read = done[0]
            return b

        while True:
            pos = self._stream_pos
            head = read(8)
            if not head:
                break
            if len(head) < 8:
                raise self._error("record header cut by the end of the stream", name, pos, None, TruncatedError)
            rtype, misc, size = _hdr(head, 0)
            if size < 8:
                raise self._error(f"size {size} is smaller than the 8-byte record header", name, pos, rtype)
            body = read(size - 8)
            if len(body) < size - 8:
                raise self._error(f"size {size} runs past the end of the stream", name, pos, rtype, TruncatedError)
            buf = head + body
            parser = ctx.parsers.get(rtype) or p_unknown
            try:
                rec = parser(ctx, buf, 0, size, rtype, misc)
            except BadRecord as e:
                raise self._error(e.cause, name, pos, rtype) from None
            except (struct.error, ValueError, IndexError, OverflowError, UnicodeError) as e:
                raise self._error(f"malformed record ({e})", name, pos, rtype) from None
            rec.offset = pos
            nxt = pos + size
            if rtype >= USER_START:
                if rtype == T_AUXTRACE:
                    if rec.size > (1 << 34):
                        raise self._error(f"payload size {rec.size} is implausible", name, pos, rtype)
                    data = read(rec.size)
                    if len(data) < rec.size and self.salvage:
                        # the stream is cut inside this payload: hand out the bytes present, then end
                        self._partial, self._partial_size = rec, rec.size
                        self._partial_cause = (f"record AUXTRACE: payload of {rec.size} bytes at {nxt:#x} runs past "
                                               f"the end of the stream ({nxt + len(data):#x})")
                        rec.data_offset = nxt
                        rec._data = data
                        rec.size = len(data)
                        self._stream_pos = nxt + len(data)
                        yield rec
                        return
                    if len(data) < rec.size:
                        raise self._error(f"payload of {rec.size} bytes runs past the end of the stream", name,
                                          pos, rtype, TruncatedError)
                    rec.data_offset = nxt
                    rec._data = data
                    nxt += rec.size
                elif rtype == T_COMPRESSED or rtype == T_COMPRESSED2:
                    if comp is None:
                        comp = _Decompressor(self, name)
                    inner = comp.feed(rec, buf, 0, base=pos)
                    self._stream_pos = nxt
                    self._stream_compressed += 1
                    yield from inner
                    continue
                elif rtype == T_TRACING_DATA:
                    skip = (rec.data_size + 7) & ~7
                    got = read(skip)
                    if len(got) < skip:
                        raise self._error("tracing data runs past the end of the stream", name, pos, rtype,
                                          TruncatedError)
                    nxt += skip
                elif rtype in _PREAMBLE_TYPES:
                    self._consume(rec, name)
            self._stream_pos = nxt
            yield rec
        if comp is not None:
            comp.finish()

    def records(self, types: Iterable[int] | None = None) -> Iterator[Record]:
        """Every record in file order (main data, then ``data.N`` files of a directory), COMPRESSED ones
        expanded; header records (HEADER_ATTR, HEADER_FEATURE, ...) are folded into attrs/features as they
        come and still yielded. Unknown types come as :class:`UnknownRecord`. Records are parsed a chunk
        (up to 128) ahead of the caller.

        ``types`` (record type numbers) keeps only those kinds: other kernel records are skipped without
        being parsed (like :meth:`iter_headers`), which is much faster when few kinds are wanted
        (e.g. only AUXTRACE). ``stats`` still counts everything."""
        want = None if types is None else frozenset(int(t) for t in types)
        if self._stream is not None:
            it = self._records_stream()
            return it if want is None else (r for r in it if r.type in want)
        return chain.from_iterable(self._all_record_chunks(want))

    def _all_record_chunks(self, want: frozenset | None = None) -> Iterator[list[Record]]:
        tally = _Tally()
        for src in self._sources:
            released = 0
            for chunk in self._record_chunks(src, tally, want):
                yield chunk
                at = getattr(chunk[-1], "offset", 0) if chunk else 0
                if at - released >= RELEASE_BYTES:  # what the pass read leaves the resident set
                    src.release_pages(at)
                    released = at
            src.release_pages()
        self._stats = tally.stats()
        self._pass_done(tally)

    def ordered_records(self, types: Iterable[int] | None = None) -> Iterator[Record]:
        """Records in the order perf delivers them (its ordered-events queue): user records (>= 64) and
        records without a timestamp come at once; timed records are held and released at each
        FINISHED_ROUND up to the highest time seen before the previous round, sorted by time (stable),
        and the rest at the end. Memory holds at most about two rounds. For the multi-file directory
        format each file is ordered this way and the files are merged by time. ``types`` as in
        :meth:`records`."""
        if types is not None:
            want = frozenset(int(t) for t in types)
            keep = want | {int(RecordType.FINISHED_ROUND)}
            return (r for r in self._ordered_all(keep) if r.type in want)
        return self._ordered_all(None)

    def _ordered_all(self, want: frozenset | None) -> Iterator[Record]:
        if self._stream is None and len(self._sources) > 1:
            tally = _Tally()
            its = [self._ordered(chain.from_iterable(self._record_chunks(src, tally, want)))
                   for src in self._sources]
            seq = iter(range(1 << 62))
            keyed = [((_timestamp(r) or 0, next(seq), r) for r in it) for it in its]
            for _t, _n, r in heapq.merge(*keyed):
                yield r
            self._stats = tally.stats()
            return
        yield from self._ordered(self.records(want))

    @staticmethod
    def _ordered(records: Iterator[Record]) -> Iterator[Record]:
        heap: list = []
        push, pop = heapq.heappush, heapq.heappop
        seq = 0
        next_flush = 0
        max_ts = 0
        finished_round = int(RecordType.FINISHED_ROUND)
        for rec in records:
            t = rec.type
            if t >= USER_START:
                yield rec
                if t == finished_round:
                    while heap and heap[0][0] <= next_flush:
                        yield pop(heap)[2]
                    next_flush = max_ts
                continue
            ts = _timestamp(rec)
            if ts is None:
                yield rec
                continue
            if not heap or ts >= max_ts:
                max_ts = ts
            seq += 1
            push(heap, (ts, seq, rec))
        while heap:
            yield pop(heap)[2]

    def _records_stream(self) -> Iterator[Record]:
        if self._stream_used:
            raise PerfDataError("a stream can be read only once", source=self.path)
        self._stream_used = True
        counts = [0] * 128
        extra: dict[int, int] = {}
        aux = [0]

        def tally(r):
            t = r.type
            if t < 128:
                counts[t] += 1
                if t == T_AUXTRACE:
                    aux[0] += r.size
            else:
                extra[t] = extra.get(t, 0) + 1

        for rec in self._prefetched:
            tally(rec)
            yield rec
        self._prefetched = []
        if not getattr(self, "_stream_eof", False):
            for rec in self._stream_iter:
                tally(rec)
                self._stats = None
                yield rec
        if self._stream_compressed:
            counts[T_COMPRESSED] += self._stream_compressed
        self._stats = _counts_to_stats(counts, extra)
        cut = getattr(self, "_stream_cut", None)
        if cut is not None:
            t = _Tally()
            t.add(counts, extra)
            t.aux = aux[0]
            self._set_cut(cut[0], self.path, cut[1], t, cut[2])

    def iter_headers(self) -> Iterator[tuple[int, int, int, int]]:
        """(offset, type, misc, size) of every record: the fast path (kernel records are not parsed).

        Records inside a COMPRESSED record are reported with that record's offset; an AUXTRACE record's
        size is its header's (its payload follows). Errors are raised at the record they concern, after
        every record before it has been handed out.
        """
        if self._stream is not None:
            return ((rec.offset, rec.type, rec.misc, rec.size if rec.type != T_AUXTRACE else rec.header_size)
                    for rec in self._records_stream())
        return chain.from_iterable(self._all_header_chunks())

    @property
    def stats(self) -> RecordStats:
        """Record counts by type name over the whole recording (one fast pass if not yet counted)."""
        if self._stats is None:
            if self._stream is not None:
                raise PerfDataError("stats of a stream are known only after records() has been read to the end",
                                    source=self.path)
            for _ in self.iter_headers():
                pass
        return self._stats

    # -------------------------------------------------------------------------------------- lookups
    def attr_for_id(self, sample_id: int | None) -> EventAttr:
        """The attr a sample id belongs to (the only attr when there is one)."""
        if sample_id is not None:
            a = self._ctx.by_id.get(sample_id)
            if a is not None:
                return a
        if len(self.attrs) == 1:
            return self.attrs[0]
        raise PerfDataError(f"sample id {sample_id} belongs to no event attr", source=self.path, what="attrs")

    def attr_of(self, rec: Record) -> EventAttr | None:
        """The attr of a record (its sample's attr, or via the sample_id trailer's id)."""
        a = getattr(rec, "attr", None)
        if a is not None:
            return a
        sid = rec.sample_id
        if sid is not None and sid.id is not None:
            a = self._ctx.by_id.get(sid.id)
            if a is not None:
                return a
        return self.attrs[0] if len(self.attrs) == 1 else None

    def machine_pid_of(self, rec: Record) -> int | None:
        """perf's machine attribution (:func:`machine_pid_of` with this file's ID_INDEX)."""
        return machine_pid_of(rec, self.id_index)

    def vcpu_of(self, rec: Record) -> int | None:
        """The VCPU of a record's event (:func:`vcpu_of` with this file's ID_INDEX)."""
        return vcpu_of(rec, self.id_index)

    def aux_data(self, rec: AuxtraceRecord) -> memoryview:
        """The payload that follows an AUXTRACE record (a slice of the map for files)."""
        if rec._data is not None:
            return memoryview(rec._data)
        src = self._sources[0]
        if rec.src is not None:
            for s in self._sources:
                if s.name == rec.src:
                    src = s
                    break
        start = rec.data_offset
        stop = start + rec.size
        if stop > src.size:
            raise TruncatedError(f"payload of {rec.size} bytes runs past the end of the file", source=src.name,
                                 offset=rec.offset, what="record AUXTRACE")
        return memoryview(src.buf)[start:stop]

    @property
    def sources(self) -> list[str]:
        """Names of the files that hold records (the data file, then data.N files)."""
        return [s.name for s in self._sources]

    def event_name(self, attr: EventAttr) -> str:
        """The recorded name (event_desc, EVENT_UPDATE), else the one perf derives from the attr."""
        return attr.name or perf_event_name(attr)

    def release_pages(self) -> None:
        """The mapped files' pages out of this process's resident set (read again on demand): called
        after a pass over the records and as decoding goes, so the resident set does not grow with
        the recording."""
        for s in self._sources:
            s.release_pages()

    # ------------------------------------------------------------------------------------- lifetime
    def close(self) -> None:
        for s in self._sources:
            s.close()
        self._sources = []
        if self._stream is not None and getattr(self, "_stream_owned", False):
            self._stream.close()
        self._stream = None if getattr(self, "_stream_owned", False) else self._stream

    def __enter__(self) -> "PerfData":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "pipe" if self.is_pipe else "file"
        return f"<PerfData {self.path!r} {mode} attrs={len(self.attrs)}>"


class _Sink:
    """Collects decompressed bytes; refuses more than ``cap`` per record (a zstd bomb must not eat memory)."""

    def __init__(self, cap: int):
        self.buf = bytearray()
        self.cap = cap

    def write(self, b) -> int:
        self.buf += b
        if len(self.buf) > self.cap:
            raise _TooBig(len(self.buf))
        return len(b)


class _TooBig(Exception):
    pass


class _Decompressor:
    """Expands COMPRESSED records: one zstd stream across records; a record may be cut at a record
    boundary and continue in the next COMPRESSED record (perf keeps the remainder, so do we)."""

    def __init__(self, pd: PerfData, name: str):
        self.pd = pd
        self.name = name
        comp = pd.features.get("compressed")
        mmap_len = getattr(comp, "mmap_len", 0) or 0
        # perf never puts more than one mmap buffer (mmap_len) into one COMPRESSED record
        self.max_out = max(64 << 20, 4 * mmap_len)
        self.sink = _Sink(self.max_out)
        import zstandard  # (only a compressed recording needs it: start-up speed)

        self._zstd_error = zstandard.ZstdError
        self.writer = zstandard.ZstdDecompressor().stream_writer(self.sink)
        self.pending = b""
        self.inner = 0  # decompressed bytes handed out so far (offset of pending[0])
        self.last_off = 0

    def feed(self, rec, buf, off: int, base: int | None = None) -> list[Record]:
        pos = off if base is None else base
        self.last_off = pos
        if rec.type == T_COMPRESSED2:
            data = bytes(buf[off + 16:off + 16 + rec.data_size])
        else:
            data = bytes(buf[off + 8:off + rec.size])
        try:
            self.writer.write(data)
        except self._zstd_error as e:
            raise PerfDataError(f"zstd: {e}", source=self.name, offset=pos, what="record COMPRESSED") from None
        except _TooBig:
            raise PerfDataError(f"decompresses to more than {self.max_out} bytes", source=self.name, offset=pos,
                                what="record COMPRESSED") from None
        out = bytes(self.sink.buf)
        self.sink.buf.clear()
        b = self.pending + out if self.pending else out
        recs: list[Record] = []
        p = 0
        n = len(b)
        ctx = self.pd._ctx
        while p + 8 <= n:
            rtype, misc, size = _hdr(b, p)
            if size < 8:
                raise self.pd._error(f"size {size} is smaller than the 8-byte record header (inside COMPRESSED "
                                     f"at decompressed offset {self.inner + p:#x})", self.name, pos, rtype)
            extra = 0
            if p + size > n:
                break
            parser = ctx.parsers.get(rtype) or p_unknown
            try:
                r = parser(ctx, b, p, size, rtype, misc)
            except BadRecord as e:
                raise self.pd._error(f"{e.cause} (inside COMPRESSED at decompressed offset {self.inner + p:#x})",
                                     self.name, pos, rtype) from None
            except (struct.error, ValueError, IndexError, OverflowError, UnicodeError) as e:
                raise self.pd._error(f"malformed record ({e}) inside COMPRESSED", self.name, pos, rtype) from None
            if rtype == T_AUXTRACE:
                extra = r.size
                if p + size + extra > n:
                    break
                r._data = bytes(b[p + size:p + size + extra])
                r.data_offset = None
            elif rtype == T_TRACING_DATA:
                extra = (r.data_size + 7) & ~7
                if p + size + extra > n:
                    break
            r.offset = pos
            r.inner_offset = self.inner + p
            if rtype >= USER_START and rtype in _PREAMBLE_TYPES:
                self.pd._consume(r, self.name)
            recs.append(r)
            p += size + extra
        self.pending = b[p:]
        self.inner += p
        return recs

    def finish(self) -> None:
        if self.pending:
            raise TruncatedError(f"{len(self.pending)} decompressed bytes left over: the last record is cut",
                                 source=self.name, offset=self.last_off, what="record COMPRESSED")


_HDR_DTYPE = _np.dtype([("type", "<u4"), ("misc", "<u2"), ("size", "<u2")])
_RUN_MAX = 1 << 16


def _same_size_run(buf, pos: int, size: int, lim: int):
    """How many whole kernel records of ``size`` bytes follow each other from ``pos`` (up to _RUN_MAX),
    with their types and misc values (numpy arrays). Looks at a small window first and widens it
    while the run goes on, so a short run costs little."""
    k_total = 0
    types, miscs = [], []
    window = 64
    p = pos
    while True:
        k_max = min(window, (lim - p) // size, _RUN_MAX - k_total)
        if k_max <= 0:
            break
        arr = _np.ndarray((k_max,), dtype=_HDR_DTYPE, buffer=buf, offset=p, strides=(size,))
        t = arr["type"]
        bad = _np.flatnonzero((arr["size"] != size) | (t >= 64))
        k = int(bad[0]) if len(bad) else k_max
        if k:
            types.append(t[:k].copy())
            miscs.append(arr["misc"][:k].copy())
            k_total += k
            p += k * size
        if k < k_max:
            break
        window *= 8
    if not k_total:
        return 0, None, None
    if len(types) == 1:
        return k_total, types[0], miscs[0]
    return k_total, _np.concatenate(types), _np.concatenate(miscs)


def _timestamp(rec: Record) -> int | None:
    """The time perf orders a record by (sample time, or the sample_id trailer's), None if it has none."""
    if rec.type == 9:  # PERF_RECORD_SAMPLE
        return rec.time
    sid = rec.sample_id
    return None if sid is None else sid.time


def perf_data_from_bytes(data: bytes, name: str = "<bytes>", *, strict: bool = False,
                         salvage: bool = False) -> PerfData:
    """A recording held in memory (file or pipe mode); ``name`` is used in error messages."""
    return PerfData(name, strict=strict, data=bytes(data), salvage=salvage)


def _read_exact(f: BinaryIO, n: int) -> bytes:
    if n <= 0:
        return b""
    chunks = []
    left = n
    while left:
        b = f.read(min(left, 1 << 20))  # bounded reads: a corrupt size must not allocate gigabytes
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def open_perf_data(path: str | os.PathLike, *, strict: bool = False, salvage: bool = False) -> PerfData:
    """Open a perf.data recording: a file (file or pipe mode), ``-`` for stdin, a FIFO, or a directory
    (``perf record --kcore`` output or the multi-file ``data``/``data.N`` format).

    With ``strict`` a malformed feature section is an error; otherwise it is left out of ``features`` and
    listed in ``feature_errors``. With ``salvage`` a cut recording reads up to its cut (see
    :class:`PerfData`, ``cut``).
    """
    if str(path) == "-":
        return PerfData("-", strict=strict, stream=sys.stdin.buffer, salvage=salvage)
    return PerfData(path, strict=strict, salvage=salvage)
