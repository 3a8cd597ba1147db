"""``--guest-data FILE,PID[,OFFSET[,SCALE]]``: a guest's own perf.data merged into the host recording.

What ``perf inject -i host.data --guest-data=FILE,PID,OFFSET[,SCALE] -o injected.data`` writes
(perf 6.1 builtin-inject.c, guest_session), given here as a view of the host recording, so the
sideband model, the decoder and the export read it exactly as they read the injected file:

* the VCPU threads are the host threads of process PID named ``CPU n/KVM`` (perf peeks at every
  host COMM first; none: an error, as in perf);
* every guest sample id gets a new unused host id (after the highest host id, in the guest's
  attr order); its VCPU is the guest CPU of that id (the guest's ID_INDEX); the guest attrs come
  along with PERF_SAMPLE_IDENTIFIER, exclude_host set and exclude_guest clear, and an ID_INDEX
  record names machine PID, VCPU and the VCPU's host thread of each new id;
* only the guest's MMAP, MMAP2, COMM, FORK, EXIT, LOST, SWITCH(_CPU_WIDE), out-of-line KSYMBOL and
  TEXT_POKE records are taken, in the guest's delivery order (perf's ordered events), with their
  cpumode made a guest one (``cpumode & USER`` -> GUEST_USER, else GUEST_KERNEL), their sample id
  trailer rewritten (new id, the host CPU the VCPU was last switched in on, host time);
* guest time -> host time: guest TSC = perf_time_to_tsc(guest time, guest TIME_CONV); host TSC =
  (guest TSC - OFFSET) / SCALE (u64 wrap, then a double division truncated, as perf computes it);
  host time = tsc_to_perf_time(host TSC, host TIME_CONV); time 0 stays 0;
* the host records come in perf's delivery order (ordered events; records without a time or
  at time 0 at once), and guest records are put before each host sideband record (the kinds
  above) whose time is not earlier, at each FINISHED_ROUND up to the last time flushed, and the
  rest at the end; the ID_INDEX and the time-0 guest records go before FINISHED_INIT;
* the guest's build-ids become the guest machine's; the guest's ``kcore_dir`` (a ``perf record
  --kcore`` directory) is that machine's kernel code and symbols (perf inject copies it to
  ``kcore_dir__PID``).

Several ``--guest-data`` apply one after the other (as running perf inject once per guest would).
Deviations: a host recording without FINISHED_INIT gets the guest records anyway (perf 6.1 injects
none), before its first timed record; a pipe-mode guest file is read (perf 6.1 refuses it: "Guest
data has no sample IDs"); a pipe-mode host is refused (perf cannot peek a pipe either). The vcpus
rows are those of perf inject's file: OFFSET does not go into vcpus.tsc_offset (that file does not
carry it).
"""

from __future__ import annotations

import copy
import heapq
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ptexport.errors import PerfDataError, UsageError
from ptexport.perfdata.constants import (
    PERF_RECORD_MISC_GUEST_KERNEL,
    PERF_RECORD_MISC_GUEST_USER,
    PERF_RECORD_MISC_SWITCH_OUT,
    PERF_RECORD_MISC_USER,
    AttrFlag,
    RecordType as RT,
    SampleType,
)
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.attr import EventAttr, perf_event_name
from ptexport.perfdata.features import BuildIdEntry
from ptexport.perfdata.reader import PerfData, machine_pid_of, vcpu_of
from ptexport.perfdata.records import IdIndexEntry, IdIndexRecord, SampleId
from ptexport.sideband.timeconv import TimeConversion, perf_time_mult

_U64 = (1 << 64) - 1
_USER_START = 64
# the guest records perf inject takes (guest_session__start's tool), and the host records whose
# delivery lets guest records in first (host__repipe)
_INJECTED = frozenset(int(t) for t in (RT.MMAP, RT.MMAP2, RT.COMM, RT.FORK, RT.EXIT, RT.LOST, RT.SWITCH,
                                       RT.SWITCH_CPU_WIDE, RT.KSYMBOL, RT.TEXT_POKE))
_KSYM_OOL = 2  # PERF_RECORD_KSYMBOL_TYPE_OOL: the only kind perf inject passes on
_T_ROUND, _T_INIT = int(RT.FINISHED_ROUND), int(RT.FINISHED_INIT)
_T_SWITCH, _T_SWITCH_CW = int(RT.SWITCH), int(RT.SWITCH_CPU_WIDE)
_VCPU_COMM = re.compile(r"CPU\s*(\d+)")  # perf's sscanf("CPU %u/KVM"): the "/KVM" is not checked
_USAGE = "expected --guest-data FILE,PID[,OFFSET[,SCALE]]"


@dataclass(frozen=True)
class GuestDataSpec:
    """One ``--guest-data`` argument."""

    path: str
    machine_pid: int
    offset: int = 0
    scale: float = 1.0


def _c_number(tok: str, what: str, text: str, *, signed: bool = False) -> int:
    """An integer as C's strtoul(tok, NULL, 0) reads a whole token: 0x hex, 0 octal, decimal."""
    t = tok.strip()
    neg = signed and t.startswith("-")
    body = t[1:] if neg else t
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", body):
        v = int(body, 16)
    elif re.fullmatch(r"0[0-7]*", body):
        v = int(body, 8)
    elif re.fullmatch(r"[1-9][0-9]*", body):
        v = int(body)
    else:
        raise UsageError(f"--guest-data {text}: {what} {tok!r} is not a number ({_USAGE})")
    if v > _U64:
        raise UsageError(f"--guest-data {text}: {what} {tok!r} does not fit in 64 bits")
    return (-v) & _U64 if neg else v


def parse_guest_data(text: str) -> GuestDataSpec:
    """``FILE,PID[,OFFSET[,SCALE]]`` as perf inject reads it (parse_guest_data), but strict:
    every field must be a number, PID above 0, SCALE a positive finite number."""
    parts = text.split(",")
    if not parts[0].strip():
        raise UsageError(f"--guest-data {text!r}: no guest perf.data file name ({_USAGE})")
    if len(parts) < 2:
        raise UsageError(f"--guest-data {text}: no guest machine PID ({_USAGE})")
    if len(parts) > 4:
        raise UsageError(f"--guest-data {text}: {len(parts)} fields ({_USAGE})")
    pid = _c_number(parts[1], "PID", text)
    if not 0 < pid <= 0x7FFFFFFF:
        raise UsageError(f"--guest-data {text}: PID {parts[1]!r} must be a process id above 0")
    offset = _c_number(parts[2], "OFFSET", text, signed=True) if len(parts) > 2 else 0
    scale = 1.0
    if len(parts) > 3:
        try:
            scale = float(parts[3])
        except ValueError:
            raise UsageError(f"--guest-data {text}: SCALE {parts[3]!r} is not a number ({_USAGE})") from None
        if not (scale > 0 and scale != float("inf")):
            raise UsageError(f"--guest-data {text}: SCALE {parts[3]!r} must be a positive finite number")
    return GuestDataSpec(parts[0], pid, offset, scale)


def parse_guest_data_list(texts: Iterable[str] | None) -> tuple[GuestDataSpec, ...]:
    """Every ``--guest-data`` of a command line; one per guest machine PID."""
    specs = tuple(parse_guest_data(t) for t in (texts or ()))
    seen: set[int] = set()
    for s in specs:
        if s.machine_pid in seen:
            raise UsageError(f"--guest-data: machine PID {s.machine_pid} given twice")
        seen.add(s.machine_pid)
    return specs


def apply_guest_data(pd: Any, specs: Iterable[GuestDataSpec] | None) -> Any:
    """``pd`` with each guest merged in, as perf inject would (``pd`` itself without specs). Idempotent:
    a view that already holds these guests is returned as it is."""
    specs = tuple(specs or ())
    if not specs or tuple(getattr(pd, "guest_data_specs", ())) == specs:
        return pd
    for s in specs:
        pd = InjectedView(pd, s)
    return pd


# ------------------------------------------------------------------------------------ delivery


def _timestamp(rec: Any) -> int | None:
    if rec.type == 9:  # PERF_RECORD_SAMPLE
        return rec.time
    sid = rec.sample_id
    return None if sid is None else sid.time


def delivery(records: Iterable[Any]) -> Iterator[tuple[Any, int | None]]:
    """perf's ordered-events delivery of ``records`` (file order): user records and records without
    a time (or at time 0) at once, the others held and released at each FINISHED_ROUND up to the
    highest time seen before the previous round (stable by time), the rest at the end.  Yields
    ``(record, None)``, and ``(None, last_flush_time)`` after each round's flush, before its
    FINISHED_ROUND record."""
    heap: list = []
    push, pop = heapq.heappush, heapq.heappop
    seq = next_flush = max_ts = last_flush = 0
    for rec in records:
        t = rec.type
        if t >= _USER_START:
            if t == _T_ROUND:
                while heap and heap[0][0] <= next_flush:
                    last_flush, _s, r = pop(heap)
                    yield r, None
                next_flush = max_ts
                yield None, last_flush
            yield rec, None
            continue
        ts = _timestamp(rec)
        if not ts or ts == _U64:  # perf: ordered_events__queue gives -ETIME, delivered at once
            yield rec, None
            continue
        if not heap or ts >= max_ts:
            max_ts = ts
        seq += 1
        push(heap, (ts, seq, rec))
    while heap:
        yield pop(heap)[2], None


# ------------------------------------------------------------------------------------ the guest


class _Conv:
    """perf's struct perf_tsc_conversion from a TIME_CONV record (cap_user_time_zero off: identity)."""

    def __init__(self, tc: Any) -> None:
        self.tc = None
        if tc is not None and perf_time_mult(tc) and getattr(tc, "cap_user_time_zero", True) is not False:
            self.tc = TimeConversion.from_time_conv(tc)

    def to_tsc(self, ns: int) -> int:
        return ns if self.tc is None else self.tc.perf_time_to_tsc(ns)

    def to_time(self, tsc: int) -> int:
        return tsc if self.tc is None else self.tc.tsc_to_perf_time(tsc)


class _Guest:
    """One guest perf.data, read once: its attrs, ids, build-ids and sideband records (delivery order)."""

    def __init__(self, spec: GuestDataSpec) -> None:
        self.spec = spec
        path = spec.path
        if str(path) == "-":
            raise UsageError(f"--guest-data {path}: the guest perf.data must be a file or directory, not stdin")
        if not os.path.exists(path):
            raise UsageError(f"--guest-data {path}: no such file or directory")
        p = Path(path)
        kd = p / "kcore_dir"
        self.kcore_dir = str(kd) if p.is_dir() and (kd / "kcore").is_file() else None
        try:
            gpd = open_perf_data(path)
        except PerfDataError as e:  # say which option the file came from
            raise PerfDataError(f"{e.cause} (the guest perf.data of --guest-data)", source=e.source,
                                offset=e.offset, what=e.what) from None
        with gpd:
            recs = []
            build_ids = list(gpd.features.get("build_id") or ())
            for rec, _flush in delivery(gpd.records()):
                if rec is None:
                    continue
                t = rec.type
                if t == RT.HEADER_BUILD_ID:
                    build_ids.append(rec)
                elif t in _INJECTED and not (t == RT.KSYMBOL and getattr(rec, "ksym_type", _KSYM_OOL) != _KSYM_OOL):
                    recs.append(rec)
            # after the records: a pipe-mode guest file brings its attrs, TIME_CONV and ids as records
            self.attrs = list(gpd.attrs)
            self.time_conv = gpd.time_conv
            self.id_cpu = {i: e.cpu for i, e in gpd.id_index.items()}
            self.path = gpd.path
        if not any(a.ids for a in self.attrs):
            raise PerfDataError("guest data has no sample ids (record the guest with --sample-identifier)",
                                source=path)
        if not recs:
            raise PerfDataError("no sideband records (MMAP, COMM, context switches ...) to merge", source=path)
        self.records = recs
        self.build_ids = build_ids
        self.dflt_id = next(a.ids[0] for a in self.attrs if a.ids)
        self.by_id = {i: a for a in self.attrs for i in a.ids}


class InjectedView:
    """A host recording with one guest merged in, read like ``perf inject --guest-data``'s output.

    Everything not overridden here is the host's (``__getattr__``)."""

    def __init__(self, host: Any, spec: GuestDataSpec) -> None:
        if getattr(host, "is_pipe", False):
            raise UsageError(f"--guest-data {spec.path}: the host recording {host.path} is a pipe-mode stream; "
                             "perf inject needs to look through the host's COMM records first: give a file")
        self._host = host
        self.guest_data_specs = tuple(getattr(host, "guest_data_specs", ())) + (spec,)
        self.spec = spec
        g = self._g = _Guest(spec)
        mp = spec.machine_pid
        # host_peek_vm_comms: the VCPU threads "CPU n/KVM" of process PID
        vcpu_tid: dict[int, int] = {}
        for rec in host.records([RT.COMM]):
            if rec.pid != mp:
                continue
            m = _VCPU_COMM.match(rec.comm)
            if not m:
                continue
            v = int(m.group(1))
            if v > 0x7FFFFFFF:
                raise PerfDataError(f"invalid VCPU {v} in the comm {rec.comm!r} of thread {rec.tid}", source=host.path)
            if vcpu_tid.get(v, rec.tid) != rec.tid:
                raise PerfDataError(f"two threads of pid {mp} ({vcpu_tid[v]}, {rec.tid}) run VCPU {v}",
                                    source=host.path)
            vcpu_tid[v] = rec.tid
        if not vcpu_tid:
            raise UsageError(f"--guest-data {spec.path},{mp}: no VCPU threads ('CPU n/KVM') of pid {mp} in "
                             f"{host.path}: is {mp} the hypervisor's (e.g. QEMU's) pid?")
        n = 8  # perf's gs->vcpu array: 64 bytes at first, doubled as needed
        while max(vcpu_tid) >= n:
            n *= 2
        self._vcpu_cnt = n
        self._vcpu_tid = vcpu_tid
        # guest_session__map_ids: new unused host ids, in the guest's attr order
        used = {i for a in host.attrs for i in a.ids} | set(getattr(host, "id_index", {}) or {})
        hid = max([1, *used])
        self._id_map: dict[int, tuple[int, int]] = {}  # guest id -> (host id, vcpu)
        for a in g.attrs:
            for gid in a.ids:
                cpu = g.id_cpu.get(gid, 0)  # no ID_INDEX: perf's zeroed sample id says CPU 0
                if cpu is None or cpu < 0 or cpu > 0x7FFFFFFF:
                    raise PerfDataError(f"sample id {gid} is per-thread (no CPU in ID_INDEX): perf inject needs "
                                        "a system-wide guest recording (perf record -a)", source=g.path)
                hid += 1
                while hid in used:
                    hid += 1
                self._id_map[gid] = (hid, cpu)
        # guest_session__add_attr: the guest attrs with the new ids, guest-only
        self._new_attrs = []
        for a in g.attrs:
            na = copy.copy(a)
            na.ids = [self._id_map[i][0] for i in a.ids]
            na.sample_type = a.sample_type | SampleType.IDENTIFIER
            na.flags = (a.flags | (1 << AttrFlag.EXCLUDE_HOST)) & ~(1 << AttrFlag.EXCLUDE_GUEST)
            # perf inject's new evsel has no name: the injected file's event_desc gets the derived one
            na.name = perf_event_name(na)
            na.index = len(host.attrs) + len(self._new_attrs)
            EventAttr._derive(na)
            self._new_attrs.append(na)
        self.attrs = list(host.attrs) + self._new_attrs
        self._attr_by_id = {i: a for a in self._new_attrs for i in a.ids}
        self._entries = [IdIndexEntry(self._id_map[gid][0], 0, -1, vcpu_tid.get(self._id_map[gid][1], 0), mp,
                                      self._id_map[gid][1]) for a in g.attrs for gid in a.ids]
        self.id_index = dict(getattr(host, "id_index", {}) or {})
        self.id_index.update({e.id: e for e in self._entries})
        # the guest's build-ids become the guest machine's (guest_session__add_build_ids)
        self.features = dict(host.features)
        extra = []
        for b in g.build_ids:
            if getattr(b, "pid", -1) not in (-1, 0xFFFFFFFF) or not getattr(b, "build_id", None):
                continue
            name = str(b.filename)
            kernel = name.startswith("[") and not name.startswith("[vdso") or name.endswith(".ko")
            extra.append(BuildIdEntry(mp, PERF_RECORD_MISC_GUEST_KERNEL if kernel else PERF_RECORD_MISC_GUEST_USER,
                                      bytes(b.build_id), name))
        if extra:
            self.features["build_id"] = list(host.features.get("build_id") or ()) + extra
        self.guest_kcore_dirs = dict(getattr(host, "guest_kcore_dirs", {}) or {})
        if g.kcore_dir:
            self.guest_kcore_dirs[mp] = g.kcore_dir
        self._host_conv = None
        self._guest_conv = _Conv(g.time_conv)
        self._converted = [self._guest_time(r) for r in g.records]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    # ------------------------------------------------------------------ time

    def _guest_time(self, rec: Any) -> int:
        sid = rec.sample_id
        t = sid.time if sid is not None else None
        return _U64 if t is None else t  # perf: no time in the sample -> -1

    def _to_host(self, guest_time: int) -> int:
        if not guest_time:
            return 0
        if self._host_conv is None:
            self._host_conv = _Conv(self._host.time_conv)
        tsc = self._guest_conv.to_tsc(guest_time)
        tsc = (tsc - self.spec.offset) & _U64
        tsc = int(float(tsc) / self.spec.scale) & _U64  # (u64)((double)tsc / time_scale)
        return self._host_conv.to_time(tsc)

    # ------------------------------------------------------------------ records

    def _guest_record(self, rec: Any, time: int, vcpu_cpu: dict[int, int]) -> Any:
        g = self._g
        sid = rec.sample_id
        gid = sid.id if sid is not None and sid.id is not None else None
        if not gid:
            gid = g.dflt_id
        hit = self._id_map.get(gid)
        if hit is None:
            raise PerfDataError(f"guest record {rec.name} at {rec.offset:#x} has the unknown sample id {gid}",
                                source=g.path)
        hid, _v = hit
        attr = self._attr_by_id[hid]
        st = attr.sample_type
        cpu = sid.cpu if sid is not None else None
        if cpu is not None and cpu != 0xFFFFFFFF and cpu != -1:
            if cpu >= self._vcpu_cnt:
                raise PerfDataError(f"guest record {rec.name} at {rec.offset:#x} is on VCPU {cpu}, which pid "
                                    f"{self.spec.machine_pid} has no thread for", source=g.path)
            cpu = vcpu_cpu.get(cpu, 0)  # the host CPU the VCPU was last switched in on
        new = copy.copy(rec)
        cm = rec.misc & 7
        cm = PERF_RECORD_MISC_GUEST_USER if cm & PERF_RECORD_MISC_USER else PERF_RECORD_MISC_GUEST_KERNEL
        new.misc = (rec.misc & ~7) | cm
        new.sample_id = SampleId(
            pid=(sid.pid if sid is not None and sid.pid is not None else -1) if st & SampleType.TID else None,
            tid=(sid.tid if sid is not None and sid.tid is not None else -1) if st & SampleType.TID else None,
            time=time if st & SampleType.TIME else None,
            id=hid,
            stream_id=hid if st & SampleType.STREAM_ID else None,
            cpu=(-1 if cpu is None else cpu) if st & SampleType.CPU else None,
            identifier=hid if st & SampleType.IDENTIFIER else None,
        )
        return new

    def _id_index_record(self, at: Any) -> Any:
        r = object.__new__(IdIndexRecord)
        r.type, r.misc, r.size = int(RT.ID_INDEX), 0, 16 + 56 * len(self._entries)
        r.offset, r.inner_offset, r.sample_id, r.src = getattr(at, "offset", 0), None, None, None
        r.entries = list(self._entries)
        return r

    def records(self, types: Iterable[int] | None = None) -> Iterator[Any]:
        """The records of the injected file, in the order perf inject writes them."""
        it = self._stream()
        if types is None:
            return it
        want = frozenset(int(t) for t in types)
        return (r for r in it if r.type in want)

    def ordered_records(self, types: Iterable[int] | None = None) -> Iterator[Any]:
        """perf's delivery order of the injected file (as :meth:`PerfData.ordered_records`)."""
        if types is None:
            return PerfData._ordered(self._stream())
        want = frozenset(int(t) for t in types)
        keep = want | {_T_ROUND}
        return (r for r in PerfData._ordered(r for r in self._stream() if r.type in keep) if r.type in want)

    def _stream(self) -> Iterator[Any]:
        g = self._g
        grecs, gtimes = g.records, self._converted
        n = len(grecs)
        pos = 0
        ready = False
        vcpu_cpu: dict[int, int] = {}
        tid_vcpu = {tid: v for v, tid in self._vcpu_tid.items()}
        mp = self.spec.machine_pid

        def inject(limit: int) -> Iterator[Any]:
            nonlocal pos
            while pos < n:
                t = self._to_host(gtimes[pos])
                if t > limit:
                    return
                yield self._guest_record(grecs[pos], t, vcpu_cpu)
                pos += 1

        def init(at: Any) -> Iterator[Any]:
            nonlocal ready
            ready = True
            yield self._id_index_record(at)
            yield from inject(0)

        for rec, flushed in delivery(self._host.records()):
            if rec is None:
                if ready:
                    yield from inject(flushed)
                continue
            t = rec.type
            if t == _T_INIT and not ready:
                yield from init(rec)
            elif t in _INJECTED:
                sid = rec.sample_id
                time = sid.time if sid is not None and sid.time is not None else _U64
                if not ready and time and time != _U64:
                    yield from init(rec)
                if (t == _T_SWITCH_CW or t == _T_SWITCH) and not rec.misc & PERF_RECORD_MISC_SWITCH_OUT:
                    # host__context_switch: the VCPU thread switched in; PERF_RECORD_SWITCH has no
                    # next_prev fields, perf reads the sample id's pid/tid there
                    if t == _T_SWITCH_CW:
                        npid, ntid = rec.next_prev_pid, rec.next_prev_tid
                    else:
                        npid, ntid = (sid.pid, sid.tid) if sid is not None else (None, None)
                    if npid == mp and ntid in tid_vcpu and sid is not None and sid.cpu is not None:
                        vcpu_cpu[tid_vcpu[ntid]] = sid.cpu
                if ready:
                    yield from inject(time)
            elif not ready and t < _USER_START:
                ts = _timestamp(rec)
                if ts and ts != _U64:
                    yield from init(rec)
            yield rec
        if not ready:
            yield from init(None)
        yield from inject(_U64)

    # ------------------------------------------------------------------ lookups

    def attr_for_id(self, sample_id: int | None) -> Any:
        a = self._attr_by_id.get(sample_id) if sample_id is not None else None
        return a if a is not None else self._host.attr_for_id(sample_id)

    def attr_of(self, rec: Any) -> Any:
        sid = getattr(rec, "sample_id", None)
        if sid is not None and sid.id in self._attr_by_id:
            return self._attr_by_id[sid.id]
        return self._host.attr_of(rec)

    def machine_pid_of(self, rec: Any) -> int | None:
        """The reader's attribution with the merged ID_INDEX (the host's entries and the guest's)."""
        return machine_pid_of(rec, self.id_index)

    def vcpu_of(self, rec: Any) -> int | None:
        return vcpu_of(rec, self.id_index)

    def __enter__(self) -> "InjectedView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._host.close()

    def __repr__(self) -> str:
        return f"<InjectedView {self._host!r} + {self.spec.path},{self.spec.machine_pid}>"
