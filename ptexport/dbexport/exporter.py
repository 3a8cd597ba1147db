"""perf's db-export as a class: :class:`DbExporter` turns decoded samples and sideband records into rows.

``ptexport TRACE --db DB`` runs it (:func:`ptexport.session.export.export_trace` opens the
recording, decodes it and hands the batches of samples in).  The rows are perf's
(``export-to-sqlite.py ... branches calls``) plus our extensions, produced in the
order perf's db-export produces them, because ids follow from that order:

* synthesized samples, the recording's own SAMPLE records (e.g. ``cycles``)
  and the sideband records are taken in perf's delivery order (a record
  before synthesized samples of the same TSC, as perf's queues run up to
  each event);
* threads are perf's thread table as it stands at each export
  (:mod:`ptexport.dbexport.threads`): a sample's thread is created if
  need be (``:TID`` comm), a switch only finds threads and is dropped when
  neither side is a known, comm-set, non-idle thread;
* a thread, its main thread, comms and comm_threads, a DSO, a symbol and a
  selected event get their id when first referenced (perf's
  ``db_export__threads``: main thread first, its exec comm with a
  comm_threads row, then the thread, then the thread's current comm);
* ``samples.comm_id`` and ``calls.comm_id`` are the main thread's exec comm;
  symbols live in perf's map space (``ip - map.start + map.pgoff`` for files,
  the address for ``[kernel.kallsyms]``, ``ip - map.start`` for modules); an
  address in a map but in no symbol gets perf's zero-size "unknown" symbol;
  kernel symbols come from kallsyms as perf finds it
  (:mod:`ptexport.images.kallsyms`);
* branch samples feed the call tree (perf's thread-stack) in export order;
  at the end every stack is flushed in perf's thread-table order.

The samples go through one of two loops with the same rows: the batch loop
(:func:`ptexport.dbexport.samples_compiled.export_samples`, numpy) or, with
``ExportConfig(reference=True)``, the per-sample loop it is checked against
(:func:`ptexport.dbexport.samples.export_samples`); both take a :class:`DbExporter`.

Db-export sees samples (:class:`~ptexport.samples.columns.SampleColumns`), never packets,
and the writer sees rows (see docs/architecture.md).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ptexport.calltree import make_call_tree, perf_flush_order
from ptexport.calltree.stats import GroupStats
from ptexport.errors import PtExportError
from ptexport.writers.aggregates import BUCKET_NS
from ptexport.writers.model import ExportModel
from ptexport.images.kallsyms import find_kallsyms, load_kallsyms
from ptexport.perfdata.constants import RecordType
from ptexport.dbexport.machine import MachineState
from ptexport.dbexport.vm import (KernelMachineState, SideMemo, VmExport, VmTrace, host_kernel_image,
                                  perf_event_modifier)
from ptexport.dbexport.callchains import apply_callchains
from ptexport.dbexport.decode_errors import ErrorSegments
from ptexport.dbexport.stats import ExportStats, error_kind
from ptexport.dbexport.threads import PerfThread, PerfThreads
from ptexport.samples.columns import (
    EV_BRANCH,
    EV_CBR,
    EV_EVT,
    EV_EXSTOP,
    EV_IFLAG,
    EV_INSTRUCTION,
    EV_MWAIT,
    EV_PSB,
    EV_PTWRITE,
    EV_PWRE,
    EV_PWRX,
    EV_TRANSACTION,
    SampleColumns,
)
from ptexport.samples.filters import thread_kept, time_kept
from ptexport.samples.itrace import ItraceOptions

#: The columns of a batch of ``samples`` rows and of the call tree's input, as both loops build them.
SAMPLE_KEYS = ("id", "evsel_id", "machine_id", "thread_id", "comm_id", "dso_id", "symbol_id", "sym_offset", "ip",
               "time", "cpu", "to_dso_id", "to_symbol_id", "to_sym_offset", "to_ip", "branch_type", "in_tx",
               "call_path_id", "insn_count", "cyc_count", "flags")
TREE_KEYS = ("time", "ip", "addr", "flags", "ref", "thread_id", "cpu", "pid", "tid", "comm_id", "insn_len",
             "insn_cnt", "cyc_cnt", "from_sym", "to_sym", "to_sym_start", "trace_nr")

#: Width of a ``cpu_time_stats`` bucket: 1 ms of perf time (bucket ``time`` = sample time rounded down to it).
CPU_TIME_BUCKET_NS = BUCKET_NS
# sample_stats' key: thread id, symbol id and a code of the (event, branch type) pair in one int64
_THREAD_MAX, _SYMBOL_MAX, _CODE_MAX = (1 << 21) - 1, (1 << 30) - 1, 1 << 12

_SWITCH_OUT = 0x2000
_U64_MAX = (1 << 64) - 1
_SWITCH_OUT_PREEMPT = 0x4000
_COMM_EXEC = 0x2000

# Sample kinds -> perf's synthesized event names; True: carries the PT event's modifier.
_EVENT_NAMES = {
    EV_BRANCH: ("branches", True),
    EV_INSTRUCTION: ("instructions", True),
    EV_TRANSACTION: ("transactions", True),
    EV_PTWRITE: ("ptwrite", False),
    EV_CBR: ("cbr", False),
    EV_MWAIT: ("mwait", False),
    EV_PWRE: ("pwre", False),
    EV_EXSTOP: ("exstop", False),
    EV_PWRX: ("pwrx", False),
    EV_PSB: ("psb", False),
    EV_EVT: ("evt", False),
    EV_IFLAG: ("iflag", False),
}


@dataclass
class ExportConfig:
    itrace: ItraceOptions
    calls: bool = True
    force: bool = False
    symfs: str | None = None
    kallsyms: str | None = None
    buildid_dir: str | None = None
    cpus: frozenset[int] | None = None
    pids: frozenset[int] | None = None
    tids: frozenset[int] | None = None
    time: str | None = None  # perf script --time ranges, as perf writes them (samples/filters.py)
    reference: bool = False  # the per-sample loop (dbexport/samples.py), the oracle of the batch loop
    decode_process: bool | None = None  # decode in a forked child (session/decode_proc.py): None = with jobs >= 2
    guestkallsyms: str | None = None  # perf's default guest's kallsyms (guest code without guest sideband)
    guest_kcore: str | None = None  # the default guest's kcore_dir (default: --guestkallsyms' folder)
    guestmount: str | None = None  # guests' root directories: GUESTMOUNT/PID
    guest_data: tuple = ()  # --guest-data specs (session/guestdata.py): guests merged as perf inject does
    jobs: int = 1  # processes (1: this one; N >= 2: a decoding child with N - 1 workers): the same rows as 1
    callchains: bool = False  # samples.call_path_id from perf's --itrace=g call chains (dbexport/callchains.py)
    salvage: bool = True  # a cut recording: export what is before the cut (perfdata reader's FileCut), else an error
    aggregates: bool = True  # call_path_stats, symbol_stats, sample_stats, cpu_time_stats (else left empty)
    scheduler: str | None = None  # decode on a dask cluster: tcp://HOST:PORT or local:N (session/cluster.py)
    cluster_paths: tuple[tuple[str, str], ...] = ()  # (local, worker) directory prefixes: where workers read
    cluster_copy: bool = True  # with a cluster and PostgreSQL: the workers load samples and calls (pg_copy.py)
    cluster_trees: bool = False  # with a cluster: its workers build the call tree, by thread (calltree/sharded.py)


def _modifier(attr: Any) -> str:
    """perf's event-name modifier (``:u``, ``:k``, ``:HG``...): evsel__add_modifiers."""
    return perf_event_modifier(attr)


class _EventFeed:
    """The sideband records db-export reacts to, in perf's delivery order, with their TSCs, read as needed.

    ``take_upto(tsc)`` hands out the records due at or before ``tsc`` (a record
    whose TSC is later holds back the ones after it, as perf's queue does);
    only a few thousand records are held at a time.
    """

    _CHUNK = 4096

    def __init__(self, records: Iterable[Any], tc: Any, timeless: bool) -> None:
        self._it = iter(records)
        self._tc = None if timeless else tc
        self._tsc: list[int] = []
        self._tarr = np.zeros(0, np.uint64)
        self._recs: list[Any] = []
        self._pos = 0

    def _fill(self) -> bool:
        chunk = list(islice(self._it, self._CHUNK))
        if not chunk:
            return False
        if self._tc is None:
            tscs = [0] * len(chunk)
        else:
            times = np.array([r.time or 0 for r in chunk], dtype=np.uint64)
            tscs = [int(t) if r.time else 0 for t, r in zip(self._tc.perf_time_to_tsc_array(times).tolist(), chunk)]
        self._tsc, self._recs, self._pos = tscs, chunk, 0
        self._tarr = np.array(tscs, dtype=np.uint64)
        return True

    def take_upto(self, limit: int) -> tuple[list[int], list[Any]]:
        tscs: list[int] = []
        recs: list[Any] = []
        while self._pos < len(self._recs) or self._fill():
            a = self._pos
            if self._tsc[a] > limit:  # (the per-sample loop asks at every sample: mostly nothing is due)
                break
            over = self._tarr[a:] > min(limit, _U64_MAX)  # (a search of the chunk, not a step per record)
            b = a + int(over.argmax()) if over.any() else len(self._recs)
            tscs += self._tsc[a:b]
            recs += self._recs[a:b]
            self._pos = b
            if b < len(self._recs):
                break
        return tscs, recs

    def rest(self) -> Iterator[Any]:
        while self._pos < len(self._recs) or self._fill():
            rec = self._recs[self._pos]
            self._pos += 1
            yield rec


#: A loop over the sample batches (``export_samples`` of :mod:`ptexport.dbexport.samples_compiled`
#: or :mod:`ptexport.dbexport.samples`): (exporter, batches, progress, total samples or 0).
SampleLoop = Callable[["DbExporter", Iterable[SampleColumns], "Callable[[int, int], None] | None", int], None]


class DbExporter:
    """perf's db-export state of one run: ids and rows, in perf's order.

    ``session``: the decoded recording (its reader ``pd``, sideband ``sb``, time conversion ``tc``,
    code objects, ``time_ranges``...); ``writer``: an open writer (:func:`ptexport.writers.open_writer`);
    ``vm_trace``: what the VM export reads from the trace (:class:`~ptexport.dbexport.vm.VmTrace`).

    Per-machine state (thread table, maps, DSO and symbol ids) is in
    :class:`~ptexport.dbexport.machine.MachineState`, one per machine in
    ``self.machines`` (index 0: the host); :meth:`machine_index` says which
    machine each sample belongs to.  :meth:`run` exports the samples through a
    :data:`SampleLoop`: :func:`ptexport.dbexport.samples_compiled.export_samples` (whole
    batches) or :func:`ptexport.dbexport.samples.export_samples` (one sample at a time,
    the oracle of the first).
    """

    def __init__(self, session: Any, writer: Any, config: ExportConfig, vm_trace: VmTrace | None = None,
                 trees: Any = None) -> None:
        self.s = session
        self.sb = session.sb
        self.w = writer
        self.cfg = config
        self.m = ExportModel()
        info = session.info
        pt_attr = next((a for a in session.pd.attrs if a.type == info.pmu_type), None)
        self.modifier = _modifier(pt_attr) if pt_attr is not None else ""
        # perf_session__set_comm_exec: from the attrs, but not for a pipe (then only once a COMM exec arrives)
        pt = PerfThreads(comm_exec=not getattr(session.pd, "is_pipe", False)
                         and any(getattr(a, "comm_exec", False) for a in session.pd.attrs))
        self._elf_tabs: dict[str, Any] = {}
        kimage = host_kernel_image(session, config.kallsyms)  # a --kcore recording: perf loads kcore
        if kimage is not None:
            host: MachineState = KernelMachineState(
                self.m, session, pid=-1, root_dir="", sb=session.sb.host, pt=pt,
                kernel_start=session.kernel_start, load_kallsyms=self._load_kallsyms, elf_tabs=self._elf_tabs,
                kernel_image=kimage)
        else:
            host = MachineState(self.m, session, pid=-1, root_dir="", sb=session.sb.host, pt=pt,
                                kernel_start=session.kernel_start, load_kallsyms=self._load_kallsyms,
                                elf_tabs=self._elf_tabs)
        self.machines: list[MachineState] = [host]
        # switch_side's answers while nothing they depend on changes; forgotten at every record but a
        # host's context switch (``event``)
        self._sides = SideMemo(self.m)
        self.host = host.machine_id  # the host's machines row id
        self.pt = host.pt  # the host's thread table
        if config.kallsyms:
            host.kallsyms  # an explicit --kallsyms is read (and its errors raised) at once; else when needed
        self._evsel: dict[Any, int] = {}  # event kind, or ("attr", id of a recorded attr) -> evsel id
        self._evsel_names: dict[int, str] = {}  # evsel id -> name, of the recording's own events
        self.calltree: Any
        if config.calls and trees is not None and not config.callchains:
            # a cluster's: the tree cut by thread into shards that its workers build (calltree/sharded.py)
            from ptexport.calltree.sharded import ShardedCallTree

            self.calltree = ShardedCallTree(trees, trees.shards, kernel_start=session.kernel_start,
                                            stats=config.aggregates)
        else:
            self.calltree = make_call_tree(kernel_start=session.kernel_start,
                                           stats=config.aggregates) if config.calls else None
        # samples, instructions and cycles per CPU and 1 ms of time (the cpu_time_stats table), and per
        # thread, event, symbol and branch type (sample_stats)
        self.cpu_time = GroupStats(sums=("insn_count", "cyc_count"), count="samples") if config.aggregates else None
        self.sample_groups = (GroupStats(sums=("insn_count", "cyc_count", "cyc_insn_count"), count="samples")
                              if config.aggregates else None)
        self._event_codes: dict[int, int] = {}  # (evsel_id << 32 | branch_type) -> small code of the key
        self._pairs_sorted = np.zeros(0, dtype=np.int64)  # the pairs of _event_codes, sorted, and their codes
        self._pair_codes = np.zeros(0, dtype=np.int64)
        if self.calltree is not None:
            self.m.call_paths.pending.clear()  # the call tree numbers call paths, root included
        self.callchains = config.callchains and self.calltree is not None
        # the call tree of batch N runs in a thread while batch N + 1 is resolved and written, where
        # its loop lets go of the GIL (_tree_submit); its rows are written, in order, before N + 1's
        self._tree_pool: ThreadPoolExecutor | None = None
        self._tree_future: Future[Any] | None = None  # a batch's (paths, calls), or the end's
        self._stats_pool: ThreadPoolExecutor | None = None
        self._stats_future: Future[None] | None = None
        self.n_samples = 0
        self.n_switches = 0
        self.n_errors = 0
        self.n_evd = 0  # evd rows written (their ids)
        self.stats = ExportStats()  # the stats table's counters (dbexport/stats.py)
        self.segments = ErrorSegments(session)  # decode_errors.segment (dbexport/decode_errors.py)
        self.switch_rows: list[tuple] = []  # pending, written with each batch
        self.error_rows: list[tuple] = []
        self._samples: dict[str, list[int]] = {k: [] for k in SAMPLE_KEYS}  # the recording's SAMPLE records
        self.feed: _EventFeed | None = None
        # guest machines, VCPUs and VM exits (dbexport/vm.py); inactive without KVM VCPU threads
        self.vm = VmExport(self, config.guestkallsyms, config.guestmount, vm_trace)

    # ------------------------------------------------------------------ machines

    def lookup_times(self, cols: SampleColumns) -> np.ndarray:
        """The perf time each sample's addresses are resolved at (its dso and symbol): its own.  In a
        timeless session a sample has no time (0, before every map), and perf resolves it when it decodes
        its queue, at the end (or its thread's EXIT) with the maps of then: the end's, as the decoder
        reads the code (``PerfSession.map_times``)."""
        return self.s.map_times(cols)

    def machine_index(self, cols: SampleColumns) -> np.ndarray | None:
        """Index into ``self.machines`` of each sample, or None when all are the host's.

        Guest machines plug in here: give each guest a :class:`MachineState` (its
        own PerfThreads, sideband Machine, kernel_start) and map the samples'
        ``machine_pid`` column (0: host) to its index.  Everything downstream keys
        its lookups by this index.  Guests: :meth:`VmExport.machine_index` (which also fills
        ``cols.machine_pid``/``cols.vcpu``, perf's VM split).
        """
        if not self.vm.active:
            return None
        return self.vm.machine_index(cols)

    def machine_ids(self, mi: np.ndarray | None, n: int) -> np.ndarray:
        """machines row ids for machine indexes ``mi`` (None: ``n`` host samples)."""
        if mi is None:
            return np.full(n, self.host, np.int64)
        ids = np.array([st.machine_id for st in self.machines], np.int64)
        return ids[mi]

    # ------------------------------------------------------------ host shortcuts

    def threads(self, pid: int, tid: int, time: int = 0) -> tuple[int, int]:
        """A host sample's thread: (thread id, main thread's exec comm id)."""
        return self.machines[0].threads(pid, tid)

    def export_threads(self, th: PerfThread) -> int:
        return self.machines[0].export_threads(th)

    def _switch_side(self, pid: int, tid: int) -> tuple[int, int, bool]:
        return self.machines[0].switch_side(pid, tid)

    def resolve(self, pid: int, ip: int, time: int, kernel: bool | None = None) -> tuple[int, int, int, int]:
        return self.machines[0].resolve(pid, ip, time, kernel)

    def _load_kallsyms(self) -> Any:
        cfg = self.cfg
        path = find_kallsyms(cfg.kallsyms, getattr(self.s.pd, "kcore_dir", None), cfg.symfs,
                             self.s.build_id_of("[kernel.kallsyms]", None), cfg.buildid_dir)
        if path is None:
            return None
        try:
            return load_kallsyms(str(path))
        except PtExportError:
            if cfg.kallsyms:
                raise
            return None

    def evsel(self, kind: int) -> int:
        eid = self._evsel.get(kind)
        if eid is None:
            name, with_mod = _EVENT_NAMES[kind]
            eid = self.m.evsel(name + (self.modifier if with_mod else ""))
            self._evsel[kind] = eid
        return eid

    # -------------------------------------------------------------------- rows

    def switch(self, rec: Any, st: MachineState | None = None, vcpu: int = -1) -> None:
        """perf's db_export__switch (after Intel PT has seen the switch) on the host or guest ``st``."""
        if self.cfg.cpus is not None and rec.cpu is not None and rec.cpu not in self.cfg.cpus:
            return
        st = st if st is not None else self.machines[0]
        time = rec.time or 0
        out = bool(rec.misc & _SWITCH_OUT)
        a_id, a_comm, a_idle = self._sides.side(st, rec.pid, rec.tid)
        b_id, b_comm, b_idle = 0, 0, False
        if rec.type == RecordType.SWITCH_CPU_WIDE:
            b_id, b_comm, b_idle = self._sides.side(st, rec.next_prev_pid, rec.next_prev_tid)
        if (not a_id or a_idle) and (not b_id or b_idle):
            return
        if out:
            t_out, c_out, t_in, c_in = a_id, a_comm, b_id, b_comm
        else:
            t_out, c_out, t_in, c_in = b_id, b_comm, a_id, a_comm
        flags = (1 if out else 0) | (2 if out and rec.misc & _SWITCH_OUT_PREEMPT else 0)
        cpu = rec.cpu if rec.cpu is not None else -1
        self.n_switches += 1
        self.switch_rows.append((self.n_switches, st.machine_id, time, cpu, t_out, c_out, t_in, c_in, flags, vcpu))

    def event(self, rec: Any) -> None:
        """One sideband record, as perf's session delivers it (Intel PT first, then the tool)."""
        t = rec.type
        if t != RecordType.SWITCH_CPU_WIDE and t != RecordType.SWITCH or self.vm.guest_ids:
            self._sides.clear()  # (a comm, fork, exit, map or sample record, or any record of a VM trace)
        if self.vm.guest_ids and t != RecordType.SAMPLE:
            hit = self.vm.record_machine(rec)
            if hit is not None:
                self.guest_event(rec, self.machines[hit[0]], hit[1])
                return
        if t == RecordType.SAMPLE:
            self.sample_record(rec)
        elif t == RecordType.COMM:
            self.pt.on_comm(rec.pid, rec.tid, rec.comm, rec.time or 0, bool(rec.misc & _COMM_EXEC))
        elif t == RecordType.FORK:
            self.pt.on_fork(rec.pid, rec.tid, rec.ppid, rec.ptid, rec.time or 0)
        elif t in (RecordType.MMAP, RecordType.MMAP2):
            if (rec.misc & 7) not in (1, 4):  # user maps belong to a thread perf creates
                self.pt.findnew(rec.pid, rec.tid)
        elif t == RecordType.SWITCH_CPU_WIDE:
            if rec.misc & _SWITCH_OUT:  # Intel PT makes the next task current (machine__set_current_tid)
                self.pt.findnew(rec.next_prev_pid, rec.next_prev_tid)
            self.switch(rec)
        elif t == RecordType.SWITCH:
            if not rec.misc & _SWITCH_OUT:
                self.pt.findnew(rec.pid, rec.tid)
            self.switch(rec)

    def guest_event(self, rec: Any, st: MachineState, vcpu: int) -> None:
        """A guest's sideband record (merged by perf inject --guest-data) on its machine's thread table."""
        t = rec.type
        if t == RecordType.COMM:
            st.pt.on_comm(rec.pid, rec.tid, rec.comm, rec.time or 0, bool(rec.misc & _COMM_EXEC))
        elif t == RecordType.FORK:
            st.pt.on_fork(rec.pid, rec.tid, rec.ppid, rec.ptid, rec.time or 0)
        elif t in (RecordType.MMAP, RecordType.MMAP2):
            if (rec.misc & 7) not in (1, 4):
                st.pt.findnew(rec.pid, rec.tid)
        elif t in (RecordType.SWITCH_CPU_WIDE, RecordType.SWITCH):
            if not rec.misc & _SWITCH_OUT:  # intel_pt_guest_context_switch: the VCPU's current thread
                st.pt.findnew(rec.pid, rec.tid)
            self.switch(rec, st, vcpu)

    def sample_record(self, rec: Any) -> None:
        """A SAMPLE record of the recording (perf exports those beside the synthesized ones)."""
        if not (thread_kept(-1 if rec.pid is None else rec.pid, -1 if rec.tid is None else rec.tid, self.cfg.pids,
                            self.cfg.tids) and time_kept(rec.time or 0, self.s.time_ranges)):
            return  # perf script's --pid/--tid/--time drop it before the exporter sees it
        cpu = rec.cpu if rec.cpu is not None else -1
        if self.cfg.cpus is not None and rec.cpu is not None and rec.cpu not in self.cfg.cpus:
            return
        attr = rec.attr if getattr(rec, "attr", None) is not None else self.s.pd.attr_for_id(rec.id)
        evsel_id = self._evsel.get(("attr", id(attr)))
        if evsel_id is None:
            evsel_id = self.m.evsel(self.s.pd.event_name(attr))
            self._evsel[("attr", id(attr))] = evsel_id
            self._evsel_names[evsel_id] = self.s.pd.event_name(attr)
        pid = rec.pid if rec.pid is not None else -1
        tid = rec.tid if rec.tid is not None else -1
        time = rec.time or 0
        thread_id, comm_id = self.threads(pid, tid, time)
        if self.vm.active:  # a kvm:kvm_exit tracepoint names its VM exit's reason
            self.vm.sample_record(rec, self._evsel_names.get(evsel_id, ""), thread_id)
        ip = rec.ip or 0
        cpumode = rec.misc & 7
        dso, sym, sym_off, _ = self.resolve(pid, ip, time, kernel=cpumode in (1, 4))
        self.n_samples += 1
        row = {"id": self.n_samples, "evsel_id": evsel_id, "machine_id": self.host, "thread_id": thread_id,
               "comm_id": comm_id, "dso_id": dso, "symbol_id": sym, "sym_offset": sym_off, "ip": ip,
               "time": time, "cpu": cpu}
        for key in self._samples:
            self._samples[key].append(row.get(key, 0))

    def error_row(self, st: MachineState, i: int, cols: SampleColumns, thread_id: int) -> None:
        """A decode error (row ``i`` of ``cols``) as a decode_errors row."""
        self.n_errors += 1
        code = int(cols.code[i])
        self.stats.error(code, int(cols.cpu[i]))
        offset = int(cols.offset[i])
        self.error_rows.append((self.n_errors, self.segments.segment(int(cols.queue[i]), offset), offset,
                                error_kind(code), cols.error_message(code), int(cols.time[i]), int(cols.cpu[i]),
                                int(cols.ip[i]), thread_id, st.machine_id, code))

    def cbr_row(self, sid: int, payload: int) -> tuple:
        """A ``cbr`` row as perf's exporter makes it."""
        cbr = payload & 0xFF
        ratio = self.s.params.max_non_turbo_ratio
        freq_khz = cbr * self._cbr2khz()
        if self.w.dialect == "sqlite":
            # export-to-sqlite.py binds str() of Python 3 true divisions: SQLite's integer affinity
            # keeps 2900.5 REAL and makes 3000.0 INTEGER; bind the same text.
            mhz: str | int = str((freq_khz + 500) / 1000)
            percent: str | int = str(((cbr * 1000 / ratio) + 5) / 10) if ratio else 0
        else:  # export-to-postgresql.py packs int() of the same values
            mhz = int((freq_khz + 500) / 1000)
            percent = int(((cbr * 1000 / ratio) + 5) / 10) if ratio else 0
        return (sid, cbr, mhz, percent)

    def _cbr2khz(self) -> int:
        tc = self.s.tc
        if not tc or not tc.time_mult:
            return 0
        tsc_freq = ((1_000_000_000 << tc.time_shift) // tc.time_mult) if tc.time_mult else 0
        ratio = self.s.params.max_non_turbo_ratio
        return tsc_freq // ratio // 1000 if ratio else 0

    # ------------------------------------------------------------------ output

    def _event_feed(self) -> _EventFeed:
        pd = self.s.pd
        if isinstance(pd, RecordTee):  # a pipe, read once: perf's order is by time, stable
            recs: Iterable[Any] = sorted(pd.kept, key=lambda r: r.time or 0)
        else:
            recs = pd.ordered_records(_SIDEBAND)
        return _EventFeed(recs, self.s.tc, self.s.timeless or self.s.tc is None)

    def take_record_samples(self) -> dict[str, np.ndarray] | None:
        """The pending rows of the recording's own SAMPLE records, as columns (None if none)."""
        rows = self._samples
        if not rows["id"]:
            return None
        out = {k: np.asarray(v, dtype=np.uint64 if k in ("ip", "to_ip") else np.int64) for k, v in rows.items()}
        for v in rows.values():
            v.clear()
        return out

    def write_batch(self, samples: dict[str, np.ndarray] | None, tree: Mapping[str, np.ndarray] | None,
                    payload_rows: dict[str, list[tuple]], chains: dict[str, np.ndarray] | None = None) -> None:
        """Write one batch: new small-table rows, samples (with pending SAMPLE records, by id), call-tree
        input, and the pending context switches, decode errors and payload rows.  ``chains``: the samples
        that get a call path (--callchains), the call tree then runs up to each of them first."""
        if chains is not None and len(chains["sid"]) and samples is not None:
            self._tree_wait()
            apply_callchains(self.calltree, self.machines, self.cfg.itrace.callchain_sz, samples, tree, chains)
            if tree is not None and branch_rows(tree):
                tree = None
                self.m.flush(self.w)
                self._write_calls()
        rec = self.take_record_samples()
        if rec is not None:
            if samples is None or not len(samples["id"]):
                samples = rec
            else:
                order = np.argsort(np.concatenate([samples["id"], rec["id"]]), kind="stable")
                samples = {k: np.concatenate([samples[k], rec[k].astype(samples[k].dtype, copy=False)])[order]
                           for k in samples}
        self.m.flush(self.w)
        if samples is not None and len(samples["id"]):
            if self.vm.active and "machine_pid" in samples:
                self.vm.samples(samples)
            self.w.write_samples(samples)
            if self.cpu_time is not None:
                self._stats_submit(samples)
        if self.calltree is not None and tree is not None and branch_rows(tree):
            self._tree_submit(tree)
        if self.switch_rows:
            self.w.write_rows("context_switches", self.switch_rows)
            self.switch_rows = []
        if self.error_rows:
            self.w.write_rows("decode_errors", self.error_rows)
            self.error_rows = []
        for table, rows in payload_rows.items():
            if rows:
                self.w.write_rows(table, rows)

    def run(self, batches: SampleColumns | Iterable[SampleColumns], export_samples: SampleLoop,
            progress: Callable[[int, int], None] | None = None) -> None:
        """Export samples in perf's order through the loop ``export_samples``: one :class:`SampleColumns`
        or its batches (bounded memory); then the call tree's flush, the VM rows and the stats."""
        if isinstance(batches, SampleColumns):
            total = len(batches)
            batches = [batches]
        else:
            total = 0  # not known while streaming
        self.feed = self._event_feed()
        export_samples(self, batches, progress, total)
        self.write_batch(None, None, {})
        self._tree_wait()
        tree_end: Future[Any] | None = None
        if self.calltree is not None:
            # the stacks left flushed and the aggregates taken in the tree's thread, beside the VM rows
            tree = self.calltree
            exported = [(th, st.pid) for st in self.machines for th in st.pt.all if th.db_id]
            order = perf_flush_order([th.db_id for th, _ in exported], [th.tid for th, _ in exported],
                                     [pid for _, pid in exported])

            def end() -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]], dict[str, dict[str, np.ndarray]]]:
                tree.flush_all(order)
                return tree.take_call_paths(), _take_calls(tree), tree.take_stats()

            if tree.releases_gil and self._tree_pool is not None:
                tree_end = self._tree_future = self._tree_pool.submit(end)
            else:
                paths, calls, stats = end()
        self._stats_wait()
        self._write_cpu_time()
        self.m.flush(self.w)
        if self.vm.active:
            self.vm.finish(self.w)
        if self.calltree is not None:
            if tree_end is not None:
                paths, calls, stats = tree_end.result()
                self._tree_future = None
            self._write_calls(paths, calls)
            for table, cols in stats.items():
                if len(cols["id"]):
                    self.w.write_columns(table, cols)
        self.stats_rows = self.stats.rows(self.s)
        first = len(self.vm.stats) + 1 if self.vm.active else 1  # after the VM guest-data warnings
        self.w.write_rows("stats", [(first + i, *row) for i, row in enumerate(self.stats_rows)])

    def _stats_submit(self, samples: dict[str, np.ndarray]) -> None:
        """Fold a batch's samples into the aggregates (cpu_time_stats, sample_stats) in a thread of their
        own, one batch at a time and in order: their sorts and sums release the GIL, and on the thread
        that reads the batches they cost 1 s of 6 exporting 10 M branches.  (The batch's columns are
        not written to after this: each batch's arrays are made anew.)"""
        self._stats_wait()
        if self._stats_pool is None:
            self._stats_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptexport-stats")
        self._stats_future = self._stats_pool.submit(self._add_cpu_time, samples)

    def _stats_wait(self) -> None:
        """The batch in flight folded into the aggregates (its error raised here)."""
        fut, self._stats_future = self._stats_future, None
        if fut is not None:
            fut.result()

    def _add_cpu_time(self, samples: dict[str, np.ndarray]) -> None:
        assert self.cpu_time is not None
        cpu = np.asarray(samples["cpu"], dtype=np.int64)
        bucket = np.asarray(samples["time"], dtype=np.int64) // CPU_TIME_BUCKET_NS
        # one int64 key: the bucket number above 20 bits of CPU + 1 (-1: per-thread traces); samples come in
        # time order, so the keys are nearly sorted already (cheap to sort)
        self.cpu_time.add((bucket << 20) | (cpu + 1), samples)
        # sample_stats: one int64 key, thread id (21 bits) | symbol id (30 bits) | code of (event, branch type)
        thread = np.asarray(samples["thread_id"], dtype=np.int64)
        symbol = np.asarray(samples["symbol_id"], dtype=np.int64)
        pair = (np.asarray(samples["evsel_id"], dtype=np.int64) << 32) | (
            np.asarray(samples["branch_type"], dtype=np.int64) & 0xFFFFFFFF)
        code = self._pair_code(pair)
        if len(self._event_codes) > _CODE_MAX or int(thread.max()) > _THREAD_MAX or int(symbol.max()) > _SYMBOL_MAX:
            raise PtExportError("sample_stats: more threads, symbols or event/branch-type pairs than its key holds "
                                "(2**21, 2**30, 4096): export with --no-aggregates")
        cyc = np.asarray(samples["cyc_count"], dtype=np.int64)
        insn = np.asarray(samples["insn_count"], dtype=np.int64)
        assert self.sample_groups is not None
        self.sample_groups.add((thread << 42) | (symbol << 12) | code,
                               {"insn_count": insn, "cyc_count": cyc, "cyc_insn_count": np.where(cyc > 0, insn, 0)})

    def _pair_code(self, pair: np.ndarray) -> np.ndarray:
        """The code of each (event, branch type) pair: a binary search among the few pairs seen so far
        (new ones get the next codes, in order of appearance), not a sort of the batch."""
        known = self._pairs_sorted
        pos = np.searchsorted(known, pair).clip(0, max(len(known) - 1, 0))
        hit = known[pos] == pair if len(known) else np.zeros(len(pair), dtype=bool)
        if not hit.all():
            for p in np.unique(pair[~hit]).tolist():
                self._event_codes.setdefault(int(p), len(self._event_codes))
            items = sorted(self._event_codes.items())
            self._pairs_sorted = np.array([p for p, _ in items], dtype=np.int64)
            self._pair_codes = np.array([c for _, c in items], dtype=np.int64)
            pos = np.searchsorted(self._pairs_sorted, pair)
        return self._pair_codes[pos]

    def _write_cpu_time(self) -> None:
        if self.sample_groups is not None and len(self.sample_groups):
            keys, cols = self.sample_groups.result()
            pairs = np.zeros(len(self._event_codes), dtype=np.int64)
            for p, code in self._event_codes.items():
                pairs[code] = p
            pair = pairs[keys & 0xFFF]
            out = {"thread_id": keys >> 42, "evsel_id": pair >> 32, "symbol_id": (keys >> 12) & ((1 << 30) - 1),
                   "branch_type": pair & 0xFFFFFFFF, **cols}
            order = np.lexsort((out["branch_type"], out["symbol_id"], out["evsel_id"], out["thread_id"]))
            out = {k: v[order] for k, v in out.items()}
            self.w.write_columns("sample_stats", {"id": np.arange(1, len(keys) + 1, dtype=np.int64), **out})
        if self.cpu_time is None or not len(self.cpu_time):
            return
        keys, cols = self.cpu_time.result()
        out = {"cpu": (keys & 0xFFFFF) - 1, "time": (keys >> 20) * CPU_TIME_BUCKET_NS, **cols}
        order = np.lexsort((out["time"], out["cpu"]))
        self.w.write_columns("cpu_time_stats", {"id": np.arange(1, len(keys) + 1, dtype=np.int64),
                                                **{k: v[order] for k, v in out.items()}})

    def _tree_submit(self, tree: Mapping[str, np.ndarray]) -> None:
        """Run the call tree over one batch's branches: in the tree's thread where its loop releases
        the GIL (the rows of the batch before are written first), else here and now."""
        calltree = self.calltree
        assert calltree is not None  # called with --calls only
        self._tree_wait()
        if not calltree.releases_gil:
            calltree.process_batch(tree)
            self._write_calls()
            return
        if self._tree_pool is None:
            self._tree_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptexport-calltree")

        def job() -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
            # the rows taken (and folded into call_path_stats) in the tree's thread too: only writing is left
            calltree.process_batch(tree)
            return calltree.take_call_paths(), _take_calls(calltree)

        self._tree_future = self._tree_pool.submit(job)

    def _tree_wait(self) -> None:
        """The call tree's batch in flight finished (its error raised here) and its rows written."""
        fut, self._tree_future = self._tree_future, None
        if fut is not None:
            self._write_calls(*fut.result())

    def close(self) -> None:
        """Stop the call tree's and the aggregates' threads (after an error: their batches in flight are
        dropped)."""
        for fut, pool in ((self._tree_future, self._tree_pool), (self._stats_future, self._stats_pool)):
            if fut is not None:
                fut.cancel()
            if pool is not None:
                pool.shutdown(wait=True)
        self._tree_future = self._stats_future = None
        self._tree_pool = self._stats_pool = None

    def _write_calls(self, paths: dict[str, np.ndarray] | None = None,
                     calls: list[dict[str, np.ndarray]] | None = None) -> None:
        """Write the call paths and calls the tree made (``paths``, ``calls``: taken already)."""
        tree = self.calltree
        assert tree is not None  # called with --calls only
        if paths is None:
            paths = tree.take_call_paths()
        if len(paths.get("id", ())):
            self.w.write_call_paths(paths)
        for batch in _take_calls(tree) if calls is None else calls:
            if len(batch["id"]):
                self.w.write_calls(batch)


def _take_calls(tree: Any) -> list[dict[str, np.ndarray]]:
    """The calls rows the tree made since the last take, batch by batch as it made them (a sharded
    tree hands out several batches' at once: calltree/sharded.py)."""
    batches = getattr(tree, "take_call_batches", None)
    return batches() if batches is not None else [tree.take_calls()]


def branch_rows(tree: Mapping[str, np.ndarray]) -> int:
    """The branches of a batch's call-tree input (a lazy one knows without gathering its columns)."""
    rows = getattr(tree, "rows", None)
    return len(tree["ref"]) if rows is None else int(rows)


_SIDEBAND = (RecordType.SAMPLE, RecordType.COMM, RecordType.FORK, RecordType.MMAP, RecordType.MMAP2,
             RecordType.SWITCH, RecordType.SWITCH_CPU_WIDE)


class RecordTee:
    """A pipe-mode reader that keeps the sideband records db-export needs as the session reads them once."""

    def __init__(self, pd: Any) -> None:
        self._pd = pd
        self.kept: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pd, name)

    def records(self):
        for rec in self._pd.records():
            if rec.type in _SIDEBAND:
                self.kept.append(rec)
            yield rec
