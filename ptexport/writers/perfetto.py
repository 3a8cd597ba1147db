"""``ptexport perfetto DB OUT.pftrace``: an export written as a Perfetto trace (TracePacket / TrackEvent
protobuf, the ``perfetto`` package's protos), for the Perfetto UI (ui.perfetto.dev) and trace_processor.

What the trace holds (docs/perfetto.md), time on perf's clock in ns:

* a process track per host process, a thread track per thread with its ``calls`` as nested slices
  (name: the symbol; args: dso, ip, call path id, branch/instruction/cycle counts, IPC where cycles are
  known, perf's flags); a call that never returned (perf's "no return") is closed at its end time, or,
  without one, at the thread's last time, and marked (``flags``, ``closed_at_thread_end``);
* a guest machine (``machines.pid`` != -1) as a track named after its hypervisor process, with its
  processes and threads under it (custom tracks: a guest's pids would collide with the host's), and a
  track per VCPU showing the guest thread that ran (its context switches);
* a track per host CPU showing the thread that ran (``context_switches``), a CBR counter (MHz) per CPU,
  the power events (mwait, pwre, exstop, pwrx) as instants per CPU, PTWRITE payloads as instants per
  thread, decoder errors and lost data (``decode_errors``, ``stats``) as instants on "Trace errors".

Read in bounded chunks (``calls`` ordered by thread and call time through the database's own sort), each
slice written as it is met: memory holds one call stack, the names and the small tables.  Names and
argument names are interned (``InternedData``), so a file pays for each string once.

``--time``/``--pid``/``--tid`` keep what perf script's filters would (a call when it overlaps a range);
``--max-depth`` and ``--min-duration`` drop deep and short calls (with everything under them: a callee
is deeper and no longer than its caller), counted in the summary.  The file is written to
``.OUT.ptexport-tmp-PID`` and renamed into place when complete; an error or Ctrl-C leaves nothing.
"""

from __future__ import annotations

import os
import re
import time as _time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ptexport.errors import DatabaseExistsError, ExportError, UsageError
from ptexport.samples.filters import TimeRange, parse_time_ranges
from ptexport.writers.base import _mark_placed
from ptexport.writers.leftovers import os_error
from ptexport.writers.source import DbSource

#: perf's ``calls.flags`` bits and the names calls_view gives their values.
CALL_NO_CALL = 1
CALL_NO_RETURN = 2
CALL_NON_CALL = 4  # with NO_RETURN: entered by a jump (calls_view's "jump"), not a call that never returned
FLAG_NAMES = {1: "no call", 2: "no return", 3: "no call/return", 6: "jump"}
#: Track uuids: the row's id (ids are trace-unique) above a kind in the low 4 bits: small numbers, which
#: every event names in a few bytes.
_KIND_BITS = 4
K_PROCESS, K_THREAD, K_MACHINE, K_CPUS, K_CPU, K_VCPU, K_CBR, K_POWER, K_PTWRITE, K_ERRORS, K_VMEXITS = range(1, 12)
#: The one packet sequence of the file (interning is per sequence).
SEQUENCE_ID = 1
#: Packets serialized and written at a time.
FLUSH_PACKETS = 4096
#: Slice templates (one per call path) kept at most; then they are made again.
TEMPLATES = 1 << 16
#: Rows fetched at a time (Python tuples: ~0.5 KiB a calls row).
READ_CHUNK = 8192
SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
BEGIN, END, INSTANT, COUNTER = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                                pb.TrackEvent.TYPE_INSTANT, pb.TrackEvent.TYPE_COUNTER)
#: Categories: what a slice or instant is (trace_processor's slice.category).
CAT_CALL, CAT_SCHED, CAT_PTWRITE, CAT_POWER, CAT_ERROR, CAT_VMEXIT = "call", "sched", "ptwrite", "power", "error", "vm_exit"
_U64 = (1 << 64) - 1
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s)?")
_UNIT_NS = {None: 1, "ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def track_uuid(kind: int, n: int) -> int:
    return (n << _KIND_BITS) | kind


def track_kind(uuid: int) -> tuple[int, int]:
    """A track uuid's kind (``K_*``) and number (a thread's, machine's, CPU's id)."""
    return uuid & ((1 << _KIND_BITS) - 1), uuid >> _KIND_BITS


def parse_duration(text: str) -> int:
    """``--min-duration``: ns by default, or with a unit (``500ns``, ``2us``, ``1.5ms``, ``1s``)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"--min-duration: invalid duration {text!r} (a number of ns, or with ns, us, ms or s)")
    return int(round(float(m.group(1)) * _UNIT_NS[m.group(2)]))


@dataclass
class PerfettoOptions:
    time: str | None = None  # perf script's --time ranges
    pids: Iterable[int] | None = None
    tids: Iterable[int] | None = None
    max_depth: int | None = None  # call levels kept per thread (1: the outermost calls only)
    min_duration: int = 0  # ns: shorter calls are dropped
    force: bool = False


@dataclass
class PerfettoSummary:
    target: str
    size: int = 0  # bytes of the file
    slices: int = 0  # call slices written
    dropped_depth: int = 0  # calls dropped by --max-depth
    dropped_duration: int = 0  # calls dropped by --min-duration
    outside_time: int = 0  # calls outside the --time ranges
    closed: int = 0  # calls that never returned (perf's "no return"), closed and marked
    clamped: int = 0  # calls that ended after their caller, cut at the caller's end (none in perf's trees)
    cpu_slices: int = 0  # slices on CPU and VCPU tracks
    counters: int = 0  # counter values (CBR)
    instants: int = 0  # PTWRITE, power events, errors
    tracks: int = 0
    seconds: float = 0.0

    @property
    def dropped(self) -> int:
        return self.dropped_depth + self.dropped_duration + self.outside_time


@dataclass
class _Thread:
    id: int
    machine_id: int
    process_id: int
    pid: int
    tid: int
    comm: str


@dataclass
class _Call:
    """A calls row (with its call path's symbol and ip)."""

    id: int
    thread_id: int
    start: int
    end: int | None  # None: no return time in the database
    flags: int
    parent_id: int
    call_path_id: int
    branch_count: int
    insn: int
    cyc: int
    symbol_id: int
    ip: int

    @classmethod
    def of(cls, r: tuple[Any, ...]) -> "_Call":
        start = int(r[2])
        end = int(r[3]) if r[3] is not None and int(r[3]) >= start and int(r[3]) != 0 else None
        return cls(int(r[0]), int(r[1]), start, end, int(r[4] or 0), int(r[5] or 0), int(r[6] or 0), int(r[7] or 0),
                   int(r[8] or 0), int(r[9] or 0), int(r[10] or 0), int(r[11] or 0))

    def order(self) -> tuple[float, int]:
        """Of calls that begin at one time under one caller: the one that returned first ran first."""
        return (self.end if self.end is not None else float("inf"), self.id)


@dataclass
class _ThreadCalls:
    """One thread's open calls while its rows are read."""

    thread_id: int
    stack: list["_Frame"] = field(default_factory=list)
    track: int = 0
    last: int = 0  # the thread's last time so far


@dataclass
class _Frame:
    id: int
    end: int | None  # None: no return time (closed at the thread's last time)
    drop: str | None  # why the call is not written (inherited by its callees)


class _Out:
    """The trace being written: packets serialized in batches, interned strings, tracks declared once."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.trace = pb.Trace()
        self.pending = 0
        self.names: dict[str, int] = {}
        self.arg_names: dict[str, int] = {}
        self.strings: dict[str, int] = {}
        self.categories: dict[str, int] = {}
        self.tracks: set[int] = set()
        self.templates: dict[Any, Any] = {}
        pk = self._packet()
        pk.sequence_flags = SEQ_CLEARED  # the sequence's interned state starts here

    def _packet(self) -> Any:
        if self.pending >= FLUSH_PACKETS:
            self.flush()
        pk = self.trace.packet.add()
        pk.trusted_packet_sequence_id = SEQUENCE_ID
        self.pending += 1
        return pk

    def _track_event(self, ts: int, kind: int, track: int) -> tuple[Any, Any]:
        """A new packet at ``ts`` holding a TrackEvent of ``kind`` on ``track``: (packet, event)."""
        pk = self._packet()
        pk.timestamp = ts
        pk.sequence_flags = SEQ_NEEDS
        te = pk.track_event
        te.type = kind
        te.track_uuid = track
        return pk, te

    def flush(self) -> None:
        """Write the packets made so far (a Trace's packets, serialized one batch after another, are a Trace)."""
        if self.pending:
            self.f.write(self.trace.SerializeToString())
            self.trace = pb.Trace()  # a new one: Clear() keeps what the message's arena allocated
            self.pending = 0

    # ------------------------------------------------------------------ tracks

    def has_track(self, uuid: int) -> bool:
        return uuid in self.tracks

    def track(self, uuid: int, name: str | None = None, parent: int | None = None, *,
              process: tuple[int, str] | None = None, thread: tuple[int, int, str] | None = None,
              counter_unit: str | None = None, rank: int | None = None, ordered: bool = False) -> int:
        """Declare a track once (``rank``: its place among its siblings when the parent is ``ordered``)."""
        if uuid in self.tracks:
            return uuid
        self.tracks.add(uuid)
        d = self._packet().track_descriptor
        d.uuid = uuid
        if parent is not None:
            d.parent_uuid = parent
        if name is not None:
            d.name = name
        if process is not None:
            d.process.pid, d.process.process_name = process
        if thread is not None:
            d.thread.pid, d.thread.tid, d.thread.thread_name = thread
        if counter_unit is not None:
            d.counter.unit_name = counter_unit
        if rank is not None:
            d.sibling_order_rank = rank
        if ordered:
            d.child_ordering = pb.TrackDescriptor.EXPLICIT
        return uuid

    # ------------------------------------------------------------------ events

    def _iid(self, table: dict[str, int], value: str, pk: Any, kind: str) -> int:
        iid = table.get(value)
        if iid is None:
            iid = table[value] = len(table) + 1
            entry = getattr(pk.interned_data, kind).add()
            entry.iid = iid
            if kind == "event_names" or kind == "debug_annotation_names" or kind == "event_categories":
                entry.name = value
            else:
                entry.str = value.encode()
        return iid

    def event(self, kind: int, ts: int, track: int, name: str | None = None, category: str | None = None,
              args: Iterable[tuple[str, Any]] = ()) -> None:
        pk, te = self._track_event(ts, kind, track)
        self._fill(te, pk, name, category, args)

    def _fill(self, te: Any, pk: Any, name: str | None, category: str | None, args: Iterable[tuple[str, Any]]) -> None:
        if name is not None:
            te.name_iid = self._iid(self.names, name, pk, "event_names")
        if category is not None:
            te.category_iids.append(self._iid(self.categories, category, pk, "event_categories"))
        for key, value in args:
            a = te.debug_annotations.add()
            a.name_iid = self._iid(self.arg_names, key, pk, "debug_annotation_names")
            if isinstance(value, bool):
                a.bool_value = value
            elif isinstance(value, int):
                a.int_value = value
            elif isinstance(value, float):
                a.double_value = value
            elif isinstance(value, Pointer):
                a.pointer_value = value.value & _U64
            else:
                a.string_value_iid = self._iid(self.strings, str(value), pk, "debug_annotation_string_values")

    def begin(self, ts: int, track: int, key: Any, fixed: Callable[[], tuple[str, str, list[tuple[str, Any]]]],
              args: Iterable[tuple[str, Any]]) -> None:
        """A slice's begin whose name, category and first args are the same for every ``key`` (a call
        path): made once as a TrackEvent and copied (the protobuf library's CopyFrom), then ``args``."""
        pk = self._packet()
        pk.timestamp = ts
        pk.sequence_flags = SEQ_NEEDS
        tmpl = self.templates.get(key)
        if tmpl is None:
            if len(self.templates) >= TEMPLATES:
                self.templates.clear()
            tmpl = self.templates[key] = pb.TrackEvent(type=BEGIN)
            name, category, fixed_args = fixed()
            self._fill(tmpl, pk, name, category, fixed_args)  # the strings it interns go in this packet
        te = pk.track_event
        te.CopyFrom(tmpl)
        te.track_uuid = track
        self._fill(te, pk, None, None, args)

    def end(self, ts: int, track: int) -> None:
        self._track_event(ts, END, track)

    def counter(self, ts: int, track: int, value: float) -> None:
        self._track_event(ts, COUNTER, track)[1].double_counter_value = float(value)


@dataclass(frozen=True)
class Pointer:
    """An address argument (shown in hex by the UI)."""

    value: int


class _Ranges:
    """--time as a test: a time (or an interval) is kept when it meets one of the ranges."""

    def __init__(self, ranges: list[TimeRange] | None) -> None:
        self.ranges = ranges or []

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def sql(self, start: str, end: str) -> str:
        """A WHERE condition (`` AND ...``) keeping the rows whose [start, end] meets the ranges' envelope
        (a superset of what :meth:`keeps` keeps: several ranges are then tested one by one)."""
        if not self.ranges:
            return ""
        lo = min(r.start for r in self.ranges)
        hi = 0 if any(r.end == 0 for r in self.ranges) else max(r.end for r in self.ranges)
        cond = [f"{end} >= {lo}"] + ([f"{start} <= {hi}"] if hi else [])
        # no end time (closed at the thread's last time), time 0 (never dropped)
        return f" AND (({' AND '.join(cond)}) OR {end} IS NULL OR {end} < {start} OR {start} = 0)"

    def keeps(self, start: int, end: int | None = None) -> bool:
        if not self.ranges or start == 0:
            return True
        stop = start if end is None else end
        return any((r.end == 0 or start <= r.end) and stop >= r.start for r in self.ranges)


def check_target(out: str, force: bool) -> str:
    """The directory the trace ``out`` goes into; a typed error when it cannot be written there."""
    if os.path.isdir(out):
        raise UsageError(f"{out}: is a directory (give the trace file's name, e.g. trace.pftrace)")
    if os.path.lexists(out) and not force:
        raise DatabaseExistsError(f"{out}: exists (use --force to replace it)")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UsageError(f"{out}: no such directory {parent}")
    return parent


def write_perfetto(source: str, out: str, options: PerfettoOptions | None = None,
                   progress: Callable[[int, int], None] | None = None) -> PerfettoSummary:
    """Write the export at ``source`` (SQLite file, PostgreSQL URL, DuckDB file) as a Perfetto trace at ``out``.
    ``progress(calls read, calls to read)`` is called after each chunk of calls rows."""
    opts = options or PerfettoOptions()
    t0 = _time.perf_counter()
    if opts.max_depth is not None and opts.max_depth < 1:
        raise UsageError(f"--max-depth {opts.max_depth}: expected 1 or more")
    if opts.min_duration < 0:
        raise UsageError(f"--min-duration {opts.min_duration}: expected 0 or more")
    out = os.fspath(out)
    parent = check_target(out, opts.force)
    summary = PerfettoSummary(out)
    with DbSource(source, reader="perfetto") as src:
        reader = _Reader(src, opts, summary, progress)
        tmp = os.path.join(parent, f".{os.path.basename(out)}.ptexport-tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                w = _Out(f)
                reader.write(w)
                w.flush()
                f.flush()
                os.fsync(f.fileno())
            summary.size = os.path.getsize(tmp)
            summary.tracks = len(w.tracks)
            _mark_placed()
            os.replace(tmp, out)
        except OSError as e:
            raise os_error(e, out, "writing the trace") from e
        finally:
            if os.path.lexists(tmp):
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    summary.seconds = _time.perf_counter() - t0
    return summary


class _Reader:
    """The database's rows as trace events (one pass per table, in the order the tracks need)."""

    def __init__(self, src: DbSource, opts: PerfettoOptions, summary: PerfettoSummary,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.progress = progress
        self.src = src
        self.opts = opts
        self.summary = summary
        self.tables = src.tables()
        for need in ("calls", "call_paths", "symbols", "dsos", "threads", "comms", "machines"):  # perf's too
            if need not in self.tables:
                raise ExportError(f"{src.name}: no table {need}: not a ptexport or perf export "
                                  "(export with calls: ptexport TRACE --db DB)")
        self.machines = {int(r[0]): (int(r[1] if r[1] is not None else -1), r[2] or "") for r in src.query_rows(
            "SELECT id, pid, root_dir FROM machines")}
        self.threads = self._threads()
        self.symbols = {int(r[0]): (r[1] or "", int(r[2] or 0)) for r in src.query_rows(
            "SELECT id, name, dso_id FROM symbols")}
        self.dsos = {int(r[0]): r[1] or "" for r in src.query_rows("SELECT id, short_name FROM dsos")}
        self.kept_threads = self._kept_threads()
        bounds = self._bounds()
        self.start, self.end = bounds
        sample_time = bounds if bounds[1] else None
        self.ranges = _Ranges(parse_time_ranges(opts.time, sample_time) if opts.time else None)
        self.vcpu_host = {}
        if "vcpus" in self.tables:
            for mid, vcpu, tid in src.query_rows("SELECT v.machine_id, v.vcpu, t.tid FROM vcpus v "
                                                 "JOIN threads t ON t.id = v.thread_id WHERE v.id <> 0"):
                self.vcpu_host[(int(mid), int(vcpu))] = int(tid)

    def _has(self, table: str, column: str) -> bool:
        return table in self.tables and column in self.src.columns(table)

    def _threads(self) -> dict[int, _Thread]:
        comm: dict[int, tuple[int, int, str]] = {}
        # a thread's names: those it took (comms.c_thread_id) and those perf gave it (comm_threads); the latest
        rows = self.src.query_rows("SELECT c_thread_id, c_time, id, comm FROM comms WHERE id <> 0")
        if "comm_threads" in self.tables:
            rows += self.src.query_rows("SELECT ct.thread_id, c.c_time, c.id, c.comm FROM comm_threads ct "
                                        "JOIN comms c ON c.id = ct.comm_id")
        for tid, c_time, cid, name in rows:
            if tid is None:
                continue
            key = (int(c_time or 0), int(cid))
            if int(tid) not in comm or key > comm[int(tid)][:2]:
                comm[int(tid)] = (*key, name or "")
        out = {}
        for r in self.src.query_rows("SELECT id, machine_id, process_id, pid, tid FROM threads"):
            i = int(r[0])
            out[i] = _Thread(i, int(r[1] or 0), int(r[2] or 0), int(r[3] if r[3] is not None else -1),
                             int(r[4] if r[4] is not None else -1),
                             comm[i][2] if i in comm else ("unknown" if i == 0 else ""))
        return out

    def _kept_threads(self) -> set[int] | None:
        pids = set(self.opts.pids) if self.opts.pids is not None else None
        tids = set(self.opts.tids) if self.opts.tids is not None else None
        if pids is None and tids is None:
            return None
        return {t.id for t in self.threads.values()
                if (pids is not None and t.pid in pids) or (tids is not None and t.tid in tids)}

    def _bounds(self) -> tuple[int, int]:
        """The first and last perf time of the export (samples, calls, context switches)."""
        parts = ["SELECT MIN(time), MAX(time) FROM samples WHERE id <> 0" if "samples" in self.tables else None,
                 "SELECT MIN(call_time), MAX(return_time) FROM calls WHERE id <> 0",
                 "SELECT MIN(time), MAX(time) FROM context_switches" if "context_switches" in self.tables else None]
        lo, hi = [], []
        for sql in parts:
            if sql is None:
                continue
            for a, b in self.src.query_rows(sql):
                if a is not None:
                    lo.append(int(a))
                if b is not None:
                    hi.append(int(b))
        return (min(lo) if lo else 0, max(hi) if hi else 0)

    # ------------------------------------------------------------------ tracks

    def is_guest(self, machine_id: int) -> bool:
        """A guest machine: its pid is the hypervisor's (the host's is -1; id 0 is perf's unknown machine)."""
        return machine_id != 0 and self.machines.get(machine_id, (-1, ""))[0] != -1

    def machine_track(self, w: _Out, machine_id: int) -> int:
        pid, root = self.machines.get(machine_id, (0, ""))
        uuid = track_uuid(K_MACHINE, machine_id)
        if not w.has_track(uuid):
            hv = next((t.comm for t in self.threads.values()
                       if t.pid == pid and t.tid == pid and not self.is_guest(t.machine_id)), "")
            name = f"guest machine {pid}" + (f" ({hv})" if hv else "") + (f" {root}" if root else "")
            w.track(uuid, name, ordered=True)
        return uuid

    def process_track(self, w: _Out, t: _Thread) -> int:
        uuid = track_uuid(K_PROCESS, t.process_id)
        if w.has_track(uuid):
            return uuid
        main = self.threads.get(t.process_id, t)
        if self.is_guest(t.machine_id):
            return w.track(uuid, f"{main.comm} {main.pid}", self.machine_track(w, t.machine_id),
                           rank=(1 << 24) + max(main.pid, 0))  # after the VCPUs
        if t.pid < 0:
            return w.track(uuid, f"{main.comm or 'unknown'} (unknown process)")
        return w.track(uuid, process=(t.pid, main.comm))

    def thread_track(self, w: _Out, thread_id: int) -> int:
        uuid = track_uuid(K_THREAD, thread_id)
        if w.has_track(uuid):
            return uuid
        t = self.threads.get(thread_id) or _Thread(thread_id, 0, 0, -1, -1, "unknown")
        parent = self.process_track(w, t)
        if self.is_guest(t.machine_id) or t.pid < 0 or t.tid < 0:
            return w.track(uuid, f"{t.comm} {t.tid}", parent)
        return w.track(uuid, parent=parent, thread=(t.pid, t.tid, t.comm))

    def thread_label(self, thread_id: int) -> str:
        t = self.threads.get(thread_id)
        return f"{t.comm} {t.tid}" if t is not None else f"thread {thread_id}"

    # ------------------------------------------------------------------ the passes

    def write(self, w: _Out) -> None:
        passes = (("calls", self.write_calls), ("context_switches", self.write_switches), ("cbr", self.write_cbr),
                  ("power events", self.write_power), ("ptwrite", self.write_ptwrite),
                  ("vm_exits", self.write_vm_exits), ("decode_errors", self.write_errors))
        for what, write in passes:
            try:
                write(w)
            except (TypeError, ValueError, OverflowError) as e:  # a NULL or out-of-range value the schema does not allow
                raise ExportError(f"{self.src.name}: {what}: a row that is not what the schema says ({e})") from e

    def _thread_filter(self, column: str) -> str:
        if self.kept_threads is None:
            return ""
        ids = ",".join(str(i) for i in sorted(self.kept_threads)) or "-1"
        return f" AND {column} IN ({ids})"

    def write_calls(self, w: _Out) -> None:
        """Each thread's calls as nested slices.

        The database sorts them by thread and call time; the calls that begin at the same time (a caller
        and its callee, or a call that returned at once and the next one) are put in the order they ran
        from their parent_id: callers first, siblings by return time, then id (perf writes a call when it
        returns, so the lower id returned first).  A stack of the open calls gives the nesting.
        """
        has_counts = self._has("calls", "insn_count")
        counts = "c.insn_count, c.cyc_count" if has_counts else "0, 0"
        sql = (f"SELECT c.id, c.thread_id, c.call_time, c.return_time, c.flags, c.parent_id, c.call_path_id, "
               f"c.branch_count, {counts}, p.symbol_id, p.ip FROM calls c JOIN call_paths p ON p.id = c.call_path_id "
               f"WHERE c.id <> 0{self._thread_filter('c.thread_id')}{self.ranges.sql('c.call_time', 'c.return_time')} "
               "ORDER BY c.thread_id, c.call_time, c.id")
        within = total = 0
        if self.ranges or self.progress is not None:
            where = f"WHERE c.id <> 0{self._thread_filter('c.thread_id')}"
            total = int(self.src.query_rows(f"SELECT COUNT(*) FROM calls c {where}")[0][0])
            within = total
        if self.ranges:  # the calls the database leaves out are outside --time too
            within = int(self.src.query_rows(f"SELECT COUNT(*) FROM calls c {where}"
                                             f"{self.ranges.sql('c.call_time', 'c.return_time')}")[0][0])
            self.summary.outside_time += total - within
        done = 0
        th: _ThreadCalls | None = None
        group: list[_Call] = []
        for rows in self.src.stream(sql, "calls", READ_CHUNK):
            for row in rows:
                c = _Call.of(row)
                if group and (c.thread_id != group[0].thread_id or c.start != group[0].start):
                    th = self._group(w, th, group)
                    group = []
                group.append(c)
            if self.progress is not None:
                done += len(rows)
                self.progress(done, within)
        if group:
            th = self._group(w, th, group)
        if th is not None:
            self._close_thread(w, th)

    def _group(self, w: _Out, th: _ThreadCalls | None, group: list[_Call]) -> _ThreadCalls:
        """The calls of one thread that begin at one time, in the order they ran."""
        if th is None or th.thread_id != group[0].thread_id:
            if th is not None:
                self._close_thread(w, th)
            th = _ThreadCalls(group[0].thread_id)
        th.last = max(th.last, group[0].start, *(c.end or 0 for c in group))
        if len(group) == 1:
            self._call(w, th, group[0])
            return th
        ids = {c.id for c in group}
        children: dict[int, list[_Call]] = {}
        roots = []
        for c in group:
            if c.parent_id in ids and c.parent_id != c.id:
                children.setdefault(c.parent_id, []).append(c)
            else:
                roots.append(c)
        depth = {f.id: i for i, f in enumerate(th.stack)}
        roots.sort(key=lambda c: (-depth.get(c.parent_id, -1), c.order()))  # the deepest caller's first
        todo = [iter(roots)]
        while todo:  # depth first: a call, then its callees
            nxt = next(todo[-1], None)
            if nxt is None:
                todo.pop()
                continue
            c = nxt
            self._call(w, th, c)
            kids = children.pop(c.id, None)
            if kids:
                todo.append(iter(sorted(kids, key=_Call.order)))
        for orphans in children.values():  # a cycle of parent ids (never in perf's trees): as they come
            for c in orphans:
                self._call(w, th, c)
        return th

    def _call(self, w: _Out, th: _ThreadCalls, c: _Call) -> None:
        s = self.summary
        stack = th.stack
        start, end = c.start, c.end
        while stack:  # the calls that ended before this one began (at the same time: unless it is the caller)
            top = stack[-1]
            if top.end is None or top.end > start or (top.end == start and top.id == c.parent_id):
                break
            self._pop(w, th)
        if stack and stack[-1].end is not None and (end is None or end > stack[-1].end):
            if end is not None:
                s.clamped += 1
            end = stack[-1].end  # within its caller (a call perf could not close ends with it)
        drop = stack[-1].drop if stack and stack[-1].drop else None
        if drop is None:
            if not self.ranges.keeps(start, end if end is not None else self.end or start):
                drop = "time"
            elif self.opts.max_depth is not None and len(stack) >= self.opts.max_depth:
                drop = "depth"
            elif self.opts.min_duration and end is not None and end - start < self.opts.min_duration:
                drop = "duration"
        stack.append(_Frame(c.id, end, drop))
        if drop == "time":
            s.outside_time += 1
            return
        if drop == "depth":
            s.dropped_depth += 1
            return
        if drop == "duration":
            s.dropped_duration += 1
            return
        if not th.track:
            th.track = self.thread_track(w, c.thread_id)
        args: list[tuple[str, Any]] = [("branch_count", c.branch_count)]
        if c.insn or c.cyc:
            args += [("insn_count", c.insn), ("cyc_count", c.cyc)]
        if c.cyc:
            args.append(("IPC", round(c.insn / c.cyc, 2)))
        if c.flags:
            args.append(("flags", FLAG_NAMES.get(c.flags, str(c.flags))))
        if (c.flags & CALL_NO_RETURN and not c.flags & CALL_NON_CALL) or end is None:
            s.closed += 1
        if end is None:
            args.append(("closed_at_thread_end", True))
        args.append(("call_id", c.id))
        w.begin(start, th.track, c.call_path_id, lambda: self._call_path_args(c), args)
        s.slices += 1

    def _call_path_args(self, c: _Call) -> tuple[str, str, list[tuple[str, Any]]]:
        """A call slice's name, category and the args its call path gives it."""
        name, dso_id = self.symbols.get(c.symbol_id, ("", 0))
        if not name or c.symbol_id == 0:
            name = f"[unknown] {c.ip & _U64:#x}" if c.ip else "[unknown]"
        args: list[tuple[str, Any]] = [("dso", self.dsos.get(dso_id, "unknown")), ("call_path_id", c.call_path_id)]
        if c.ip:
            args.append(("ip", Pointer(c.ip)))
        return name, CAT_CALL, args

    def _pop(self, w: _Out, th: _ThreadCalls) -> None:
        f = th.stack.pop()
        if f.drop is None:
            w.end(f.end if f.end is not None else th.last, th.track)

    def _close_thread(self, w: _Out, th: _ThreadCalls) -> None:
        while th.stack:
            self._pop(w, th)

    # context switches: which thread ran on each CPU (host) and VCPU (guest)

    def write_switches(self, w: _Out) -> None:
        if "context_switches" not in self.tables:
            return
        has_vcpu = self._has("context_switches", "vcpu")  # perf's table has none
        sql = (f"SELECT machine_id, {'vcpu' if has_vcpu else '-1'}, cpu, time, thread_out_id, thread_in_id, flags "
               f"FROM context_switches ORDER BY machine_id, {'vcpu, ' if has_vcpu else ''}cpu, time, id")
        key = None
        running: tuple[int, int] | None = None  # (thread id, since)
        track = 0
        for rows in self.src.stream(sql, "context_switches", READ_CHUNK):
            for mid, vc, cpu, t, t_out, t_in, flags in rows:
                mid, t, flags = int(mid or 0), int(t), int(flags or 0)
                guest = self.is_guest(mid)
                n = int(vc) if guest and vc is not None and int(vc) >= 0 else int(cpu if cpu is not None else -1)
                k = (mid if guest else -1, n)
                if k != key:
                    if running is not None:
                        self._ran(w, track, key, running, self.end)
                    key, running = k, None
                    track = self._cpu_track(w, mid, n, guest)
                if flags & 1 == 0:  # in
                    if running is not None and running[0] == int(t_in):
                        continue
                    if running is not None:
                        self._ran(w, track, key, running, t)
                    running = (int(t_in), t)
                else:  # out
                    self._ran(w, track, key, running if running is not None else (int(t_out), self.start), t)
                    running = None
        if running is not None and key is not None:
            self._ran(w, track, key, running, self.end)

    def _cpu_track(self, w: _Out, machine_id: int, n: int, guest: bool) -> int:
        if guest:
            host = self.vcpu_host.get((machine_id, n))
            return w.track(track_uuid(K_VCPU, (machine_id << 20) | (n & 0xFFFFF)),
                           f"VCPU {n}" + (f" (host thread {host})" if host is not None else ""),
                           self.machine_track(w, machine_id), rank=2 * n)
        return w.track(track_uuid(K_CPU, n & 0xFFFFF), f"CPU {n}", self._cpus_track(w), rank=3 * n)

    def _cpus_track(self, w: _Out) -> int:
        return w.track(track_uuid(K_CPUS, 0), "CPUs", ordered=True)

    def _ran(self, w: _Out, track: int, key: Any, running: tuple[int, int], until: int) -> None:
        thread_id, since = running
        until = max(until, since)
        if not self.ranges.keeps(since, until):
            return
        t = self.threads.get(thread_id)
        args: list[tuple[str, Any]] = [("pid", t.pid if t else -1), ("tid", t.tid if t else -1)]
        w.event(BEGIN, since, track, self.thread_label(thread_id), CAT_SCHED, args)
        w.event(END, until, track)
        self.summary.cpu_slices += 1

    # samples' payloads: CBR counters, power events, PTWRITE

    def _payload_rows(self, table: str, cols: str, order: str) -> Iterator[tuple[Any, ...]]:
        if table not in self.tables or "samples" not in self.tables:
            return
        sql = (f"SELECT s.time, s.cpu, s.thread_id, {cols} FROM {table} x JOIN samples s ON s.id = x.id "
               f"WHERE x.id <> 0{self._thread_filter('s.thread_id')} ORDER BY {order}, s.time, s.id")
        for rows in self.src.stream(sql, table, READ_CHUNK):
            for r in rows:
                if self.ranges.keeps(int(r[0])):
                    yield r

    def write_cbr(self, w: _Out) -> None:
        for r in self._payload_rows("cbr", "x.mhz", "s.cpu"):
            cpu = int(r[1] if r[1] is not None else -1)
            uuid = track_uuid(K_CBR, cpu & 0xFFFFF)
            w.track(uuid, f"CBR CPU {cpu} (MHz)", self._cpus_track(w), counter_unit="MHz", rank=3 * cpu + 1)
            w.counter(int(r[0]), uuid, float(r[3] or 0))
            self.summary.counters += 1

    def write_power(self, w: _Out) -> None:
        kinds: dict[str, tuple[str, Callable[[tuple[Any, ...]], list[tuple[str, Any]]]]] = {
            "mwait": ("x.hints, x.extensions", lambda r: [("hints", Pointer(int(r[3]))), ("extensions", Pointer(int(r[4])))]),
            "pwre": ("x.cstate, x.subcstate, x.hw", lambda r: [("cstate", int(r[3])), ("subcstate", int(r[4])),
                                                              ("hw", bool(r[5]))]),
            "exstop": ("x.exact_ip", lambda r: [("exact_ip", bool(r[3]))]),
            "pwrx": ("x.deepest_cstate, x.last_cstate, x.wake_reason",
                     lambda r: [("deepest_cstate", int(r[3])), ("last_cstate", int(r[4])),
                                ("wake_reason", WAKE_REASONS.get(int(r[5]), str(r[5])))]),
        }
        for table, (cols, args) in kinds.items():
            for r in self._payload_rows(table, cols, "s.cpu"):
                cpu = int(r[1] if r[1] is not None else -1)
                uuid = w.track(track_uuid(K_POWER, cpu & 0xFFFFF), f"Power events CPU {cpu}", self._cpus_track(w),
                               rank=3 * cpu + 2)
                w.event(INSTANT, int(r[0]), uuid, table, CAT_POWER, [("cpu", cpu), *args(r)])
                self.summary.instants += 1

    def write_ptwrite(self, w: _Out) -> None:
        for r in self._payload_rows("ptwrite", "x.payload, x.exact_ip", "s.thread_id"):
            thread_id = int(r[2] or 0)
            uuid = track_uuid(K_PTWRITE, thread_id)
            if not w.has_track(uuid):
                t = self.threads.get(thread_id) or _Thread(thread_id, 0, 0, -1, -1, "unknown")
                w.track(uuid, f"PTWRITE {self.thread_label(thread_id)}", self.process_track(w, t))
            payload = int(r[3] or 0) & _U64
            w.event(INSTANT, int(r[0]), uuid, f"ptwrite {payload:#x}", CAT_PTWRITE,
                    [("payload", Pointer(payload)), ("exact_ip", bool(r[4])), ("cpu", int(r[1] if r[1] is not None else -1))])
            self.summary.instants += 1

    def write_vm_exits(self, w: _Out) -> None:
        """Each VM exit as a slice from the exit to the next entry, on a track under the guest's VCPU."""
        if "vm_exits" not in self.tables:
            return
        sql = ("SELECT machine_id, vcpu, exit_time, entry_time, entry_id, reason, guest_ip, cpu FROM vm_exits "
               "ORDER BY machine_id, vcpu, exit_time, id")
        for rows in self.src.stream(sql, "vm_exits", READ_CHUNK):
            for mid, vcpu, t0, t1, entry_id, reason, gip, cpu in rows:
                mid, vcpu, t0 = int(mid), int(vcpu), int(t0)
                t1 = int(t1) if entry_id and t1 is not None and int(t1) >= t0 else self.end
                if not self.ranges.keeps(t0, t1):
                    continue
                uuid = track_uuid(K_VMEXITS, (mid << 20) | (vcpu & 0xFFFFF))
                if not w.has_track(uuid):
                    w.track(uuid, f"VCPU {vcpu} VM exits", self.machine_track(w, mid), rank=2 * vcpu + 1)
                w.event(BEGIN, t0, uuid, f"VM exit: {reason}", CAT_VMEXIT,
                        [("guest_ip", Pointer(int(gip or 0))), ("cpu", int(cpu if cpu is not None else -1))])
                w.event(END, max(t1, t0), uuid)
                self.summary.cpu_slices += 1

    def write_errors(self, w: _Out) -> None:
        uuid = track_uuid(K_ERRORS, 0)
        if "decode_errors" in self.tables:
            sql = ('SELECT time, cpu, kind, message, "offset", ip, thread_id, segment FROM decode_errors '
                   "WHERE id <> 0 ORDER BY id")
            for rows in self.src.stream(sql, "decode_errors", READ_CHUNK):
                for t, cpu, kind, message, offset, ip, thread_id, segment in rows:
                    t = int(t or 0) or self.start
                    if not self.ranges.keeps(t):
                        continue
                    w.track(uuid, "Trace errors")
                    th = self.threads.get(int(thread_id or 0))
                    w.event(INSTANT, t, uuid, f"decode error: {kind}", CAT_ERROR,
                            [("message", message or ""), ("cpu", int(cpu if cpu is not None else -1)),
                             ("segment", int(segment if segment is not None else -1)), ("offset", int(offset or 0)),
                             ("ip", Pointer(int(ip or 0))), ("pid", th.pid if th else -1), ("tid", th.tid if th else -1)])
                    self.summary.instants += 1
        if "stats" in self.tables:
            for name, cpu, value, severity, description in self.src.query_rows(
                    "SELECT name, cpu, value, severity, description FROM stats "
                    "WHERE severity IN ('data_loss', 'warning') ORDER BY id"):
                if not value:
                    continue
                w.track(uuid, "Trace errors")
                w.event(INSTANT, self.start, uuid, f"lost: {name}", CAT_ERROR,
                        [("value", int(value)), ("cpu", int(cpu if cpu is not None else -1)),
                         ("severity", severity or ""), ("description", description or "")])
                self.summary.instants += 1


#: pwrx.wake_reason as pwrx_view names it.
WAKE_REASONS = {1: "Interrupt", 2: "Timer Deadline", 4: "Monitored Address", 8: "HW"}
