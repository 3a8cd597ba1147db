"""perf_event sideband records as libipt's ptdump prints them (``--pevent`` + ``--sb:*``).

A small reader for the perf_event record stream libipt's pevent sideband
files hold (``struct perf_event_header`` + body + ``sample_id`` trailer laid
out by the sample type), the perf-time -> TSC conversion of the
``time-zero/time-shift/time-mult`` triple, and the compact/verbose printing
of ptdump's ``pt_sb_dump``.  The project's own perf.data reader lives in
``ptexport.perfdata``; this one only serves raw-dump sideband files.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass
from typing import Iterator

from ptexport.errors import InputError

# perf_event sample type bits used by sample_id.
S_TID = 1 << 1
S_TIME = 1 << 2
S_ID = 1 << 6
S_CPU = 1 << 7
S_STREAM_ID = 1 << 9
S_IDENTIFIER = 1 << 16

MISC_SWITCH_OUT = 0x2000
MISC_COMM_EXEC = 0x2000

REC_NAMES = {
    1: "PERF_RECORD_MMAP",
    2: "PERF_RECORD_LOST",
    3: "PERF_RECORD_COMM",
    4: "PERF_RECORD_EXIT",
    5: "PERF_RECORD_THROTTLE",
    6: "PERF_RECORD_UNTHROTTLE",
    7: "PERF_RECORD_FORK",
    8: "PERF_RECORD_READ",
    9: "PERF_RECORD_SAMPLE",
    10: "PERF_RECORD_MMAP2",
    11: "PERF_RECORD_AUX",
    12: "PERF_RECORD_ITRACE_START",
    13: "PERF_RECORD_LOST_SAMPLES",
    14: "PERF_RECORD_SWITCH",
    15: "PERF_RECORD_SWITCH_CPU_WIDE",
}


@dataclass(frozen=True)
class PeventConfig:
    sample_type: int = 0
    time_zero: int = 0
    time_shift: int = 0
    time_mult: int = 1

    def time_to_tsc(self, time: int) -> int:
        """perf time -> TSC (the inverse of perf's time_zero + (tsc * mult) >> shift)."""
        t = time - self.time_zero
        mult = self.time_mult or 1
        quot, rem = divmod(t, mult)
        return (quot << self.time_shift) + ((rem << self.time_shift) // mult)


@dataclass
class SbRecord:
    offset: int
    type: int
    misc: int
    tsc: int
    fields: list[tuple[str, object]]  # verbose (name, value) of the body
    compact: str  # compact body text
    sample: list[tuple[str, object]]  # sample_id fields
    filename: str


PERF_RECORD_USER_TYPE_START = 64  # perf tool records: not from the kernel, no sample_id


def _sample_id_size(st: int) -> int:
    n = 0
    for bit, size in ((S_TID, 8), (S_TIME, 8), (S_ID, 8), (S_STREAM_ID, 8), (S_CPU, 8),
                      (S_IDENTIFIER, 8)):
        if st & bit:
            n += size
    return n


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def load_pevent(data: bytes, cfg: PeventConfig, filename: str = "<sideband>",
                primary: bool = True) -> list[SbRecord]:
    """Parse a pevent sideband file into records (InputError on a malformed one)."""
    recs: list[SbRecord] = []
    st = cfg.sample_type
    sid_size = _sample_id_size(st)
    pos = 0
    n = len(data)
    while pos < n:
        if pos + 8 > n:
            raise InputError("truncated record header", source=filename, offset=pos,
                             what="sideband record")
        rtype, misc, size = struct.unpack_from("<IHH", data, pos)
        if size < 8 or pos + size > n:
            raise InputError(f"bad record size {size}", source=filename, offset=pos,
                             what="sideband record")
        if rtype >= PERF_RECORD_USER_TYPE_START:
            # perf's own records (HEADER_ATTR, THREAD_MAP, TIME_CONV ...), as perf-read-sideband
            # scripts copy them: no sample_id; applied at once (time 0), like libipt does.
            rec = SbRecord(pos, rtype, misc, 0, [("type", rtype), ("misc", misc)], "", [], filename)
            rec.name = f"UNKNOWN ({rtype:x}, {misc:x})"  # type: ignore[attr-defined]
            recs.append(rec)
            pos += size
            continue
        body = data[pos + 8 : pos + size - sid_size] if size - 8 >= sid_size else b""
        if size - 8 < sid_size:
            raise InputError("record too small for its sample_id", source=filename,
                             offset=pos, what="sideband record")
        sid = data[pos + size - sid_size : pos + size]
        sample: list[tuple[str, object]] = []
        time = 0
        i = 0
        vals = {}
        if st & S_TID:
            vals["pid"], vals["tid"] = struct.unpack_from("<II", sid, i)
            i += 8
        if st & S_TIME:
            (time,) = struct.unpack_from("<Q", sid, i)
            vals["time"] = time
            i += 8
        if st & S_ID:
            (vals["id"],) = struct.unpack_from("<Q", sid, i)
            i += 8
        if st & S_STREAM_ID:
            (vals["stream id"],) = struct.unpack_from("<Q", sid, i)
            i += 8
        if st & S_CPU:
            (vals["cpu"],) = struct.unpack_from("<I", sid, i)
            i += 8
        if st & S_IDENTIFIER:
            (vals["identifier"],) = struct.unpack_from("<Q", sid, i)
            i += 8
        for key in ("pid", "tid", "time", "id", "cpu", "stream id", "identifier"):
            if key in vals:
                sample.append((key, vals[key]))
        try:
            fields, compact, name = _body(rtype, misc, body)
        except struct.error as e:
            raise InputError(f"record body too short: {e}", source=filename, offset=pos,
                             what=f"sideband record {REC_NAMES.get(rtype, rtype)}") from e
        rec = SbRecord(pos, rtype, misc, cfg.time_to_tsc(time), fields, compact, sample, filename)
        rec.name = name  # type: ignore[attr-defined]
        recs.append(rec)
        pos += size
    return recs


def _body(rtype: int, misc: int, body: bytes):
    name = REC_NAMES.get(rtype, f"PERF_RECORD_{rtype}")
    if rtype == 1:  # MMAP
        pid, tid, addr, ln, pgoff = struct.unpack_from("<IIQQQ", body, 0)
        fn = _cstr(body[32:])
        return ([("pid", pid), ("tid", tid), ("addr", addr), ("len", ln), ("pgoff", pgoff),
                 ("filename", fn)],
                f"{pid:x}/{tid:x}, {addr:x}, {ln:x}, {pgoff:x}, {fn}", name)
    if rtype == 10:  # MMAP2
        pid, tid, addr, ln, pgoff, maj, mnr, ino, ino_gen, prot, flags = struct.unpack_from(
            "<IIQQQIIQQII", body, 0)
        fn = _cstr(body[64:])
        return ([("pid", pid), ("tid", tid), ("addr", addr), ("len", ln), ("pgoff", pgoff),
                 ("maj", maj), ("min", mnr), ("ino", ino), ("ino generation", ino_gen),
                 ("prot", prot), ("flags", flags), ("filename", fn)],
                f"{pid:x}/{tid:x}, {addr:x}, {ln:x}, {pgoff:x}, {fn}", name)
    if rtype == 2:  # LOST
        lid, lost = struct.unpack_from("<QQ", body, 0)
        return [("id", lid), ("lost", lost)], f"{lid:x}, {lost:x}", name
    if rtype == 3:  # COMM
        pid, tid = struct.unpack_from("<II", body, 0)
        comm = _cstr(body[8:])
        if misc & MISC_COMM_EXEC:
            name += ".EXEC"
        return [("pid", pid), ("tid", tid), ("comm", comm)], f"{pid:x}/{tid:x}, {comm}", name
    if rtype in (4, 7):  # EXIT, FORK
        pid, ppid, tid, ptid, time = struct.unpack_from("<IIIIQ", body, 0)
        return ([("pid", pid), ("ppid", ppid), ("tid", tid), ("ptid", ptid), ("time", time)],
                f"{pid:x}/{tid:x}, {ppid:x}/{ptid:x}, {time:x}", name)
    if rtype == 11:  # AUX
        off, size, flags = struct.unpack_from("<QQQ", body, 0)
        for bit, sfx in ((1, ".TRUNCATED"), (2, ".OVERWRITE"), (4, ".PARTIAL")):
            if flags & bit:
                name += sfx
        return ([("aux offset", off), ("aux size", size), ("flags", flags)],
                f"{off:x}, {size:x}, {flags:x}", name)
    if rtype == 12:  # ITRACE_START
        pid, tid = struct.unpack_from("<II", body, 0)
        return [("pid", pid), ("tid", tid)], f"{pid:x}/{tid:x}", name
    if rtype == 13:  # LOST_SAMPLES
        (lost,) = struct.unpack_from("<Q", body, 0)
        return [("lost", lost)], f"{lost:x}", name
    if rtype == 14:  # SWITCH
        name += ".OUT" if misc & MISC_SWITCH_OUT else ".IN"
        return [], "", name
    if rtype == 15:  # SWITCH_CPU_WIDE
        pid, tid = struct.unpack_from("<II", body, 0)
        out = bool(misc & MISC_SWITCH_OUT)
        name += ".OUT" if out else ".IN"
        who = "next" if out else "prev"
        return [(f"{who} pid", pid), (f"{who} tid", tid)], f"{pid:x}/{tid:x}", name
    return [], "", name


def _fmt(v) -> str:
    return f"{v:x}" if isinstance(v, int) else str(v)


def _sample_compact(sample) -> str:
    parts = []
    d = dict(sample)
    if "pid" in d:
        parts.append(f"{d['pid']:x}/{d['tid']:x}")
    if "time" in d:
        parts.append(f"{d['time']:x}")
    if "id" in d:
        parts.append(f"{d['id']:x}")
    if "cpu" in d:
        parts.append(f"cpu-{d['cpu']:x}")
    if "stream id" in d:
        parts.append(f"{d['stream id']:x}")
    if "identifier" in d:
        parts.append(f"{d['identifier']:x}")
    return "{ " + " ".join(parts) + " }"


class SidebandPrinter:
    """Merges sideband streams by TSC and renders them as ptdump's pt_sb_dump does."""

    def __init__(self, streams: list[list[SbRecord]], *, verbose: bool = False,
                 compact: bool = True, show_filename: bool = False, show_offset: bool = False,
                 show_time: bool = False, warn: bool = False, enabled: bool = True) -> None:
        merged = heapq.merge(*[[(r.tsc, i, r.offset, r) for r in s] for i, s in enumerate(streams)])
        self.records = [t[3] for t in merged]
        self.next = 0
        self.verbose = verbose
        self.compact = compact
        self.show_filename = show_filename
        self.show_offset = show_offset
        self.show_time = show_time
        self.warn = warn
        self.enabled = enabled

    def render(self, r: SbRecord) -> Iterator[str]:
        head = []
        if self.show_filename:
            head.append(r.filename)
        if self.show_offset:
            head.append(f"{r.offset:016x}")
        if self.show_time:
            head.append(f"{r.tsc:016x}")
        name = r.name  # type: ignore[attr-defined]
        if self.verbose:
            yield "  ".join(head + [name])
            for k, v in r.fields + r.sample:
                yield f" {k}: {_fmt(v)}"
        else:
            body = f" {r.compact}" if r.compact else ""
            yield "  ".join(head + [f"{name}{body}  {_sample_compact(r.sample)}"])

    def lines_until(self, tsc: int | None) -> Iterator[str]:
        """Lines of the records with TSC <= ``tsc`` not printed yet (all with None)."""
        out = []
        recs = self.records
        while self.next < len(recs) and (tsc is None or recs[self.next].tsc <= tsc):
            r = recs[self.next]
            self.next += 1
            if self.enabled:
                out.extend(self.render(r))
        return iter(out)
