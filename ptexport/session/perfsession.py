"""Decode a perf.data Intel PT recording into perf's samples, as columns.

The glue between the perf.data reader and sideband model on one side and the
perf decoder on the other (docs/architecture.md): :class:`PerfSession` reads
the recording once, derives perf's decoder parameters, and hands each AUX queue
(a CPU in per-CPU mode, a thread in ``--per-thread`` mode) to a decoder backend
through a :class:`~ptexport.decoder.context.DecodeContext`
(:meth:`PerfSession.decode_context`); :mod:`ptexport.decoder.backend` picks the
backend, :mod:`ptexport.decoder.reference.queue` is the reference one (perf's
``intel_pt_sample`` and ``intel_pt_synth_*``).  Here: samples of all queues
merged in perf's order (its queue heap), perf's failure budget, ``--itrace=sN``,
perf script's ``--time``/``--pid``/``--tid``, lost-data and cut errors.

Output is a :class:`SampleColumns` of numpy arrays; nothing here prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from ptexport.decoder.constants import PERIOD_INSTRUCTIONS, PERIOD_TICKS
from ptexport.decoder.context import TIMELESS_MAP_TIME as _TIMELESS_MAP_TIME, CpuTimeline, DecodeContext, MapLookup, \
    queue_tid
from ptexport.decoder.reference import queue as reference_queue
from ptexport.decoder.reference.decoder import Buffer, Params
from ptexport.decoder.reference.queue import EVD_ROW as _EVD_ROW
from ptexport.decoder.reference.queue import Rows as _Rows
from ptexport.samples.columns import (
    COLUMNS,
    ERR_LOST,
    ERR_NODATA,
    EV_BRANCH,
    EV_CBR,
    EV_ERROR,
    EV_EVT,
    EV_INSTRUCTION,
    OUT_COLUMNS,
    U64_COLUMNS,
    SampleColumns,
    concat_columns,
)
from ptexport.errors import PerfDataError, TruncatedError, UsageError
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import IntelPTConfig, RecordType
from ptexport.session.guestdata import apply_guest_data
from ptexport.sideband.builder import build_sideband
from ptexport.pt.perfpkt import whole_packets_end
from ptexport.session.queues import PerfQueueHeap
from ptexport.session.units import UnitExecutor
from ptexport.decoder.codewalk import CodeObjects, default_kernel_start, sample_fetch_marks, vdso_probe_marks
from ptexport.decoder.guest import GuestSpaces, VcpuAttribution, host_kcore
from ptexport.decoder.filters import QueueTimeFilter, TscRanges
from ptexport.samples.filters import TimeRange, parse_time_ranges, thread_kept, thread_mask, time_kept, time_mask
from ptexport.samples.itrace import ItraceOptions, PeriodType

_INTEL_PT_CFG_EVT_EN = 1 << 31  # intel_pt/event_trace=1/

# perf reports an object's failed code reads twice, then recovers silently.
_REPORTED_FAILURES_PER_OBJECT = 2
_U32 = 0xFFFF_FFFF


@dataclass
class DecodeStats:
    """What the queue orchestration (session/parallel.py) did for a session, for tests and benchmarks."""

    matched: int = 0  # PSB segment joins that agreed with the serial decoder
    redone: int = 0  # PSB segments decoded again serially (their join failed)
    max_held_rows: int = 0  # most rows of finished segments waiting in the parent while streaming
    max_source_rows: int = 0  # most undelivered rows of one queue while streaming
    units: int = 0  # PSB segments sent to workers (a process pool's or a cluster's) while streaming


@dataclass
class DecodeConfig:
    itrace: ItraceOptions
    symfs: str | None = None
    buildid_dir: str | None = None
    search_dirs: tuple[str, ...] = ()
    cpus: frozenset[int] | None = None
    guest_kcore: str | None = None  # guest kcore_dir for perf's default guest (--guestkallsyms' folder)
    time: str | None = None  # perf script --time ranges as perf writes them (samples/filters.py)
    pids: frozenset[int] | None = None  # perf script --pid
    tids: frozenset[int] | None = None  # perf script --tid
    insn_fetch_marks: bool = True  # perf script's text output's instruction fetches at non-PT samples
    guest_data: tuple = ()  # --guest-data specs: guests merged as perf inject does (session/guestdata.py)


def _params(info: Any, attrs: Iterable[Any], cpuid: str, itrace: ItraceOptions, tc: Any) -> tuple[Params, bool]:
    """Decoder parameters from AUXTRACE_INFO and the intel_pt attr, as perf derives them."""
    pmu_type = info.pmu_type
    pt_attrs = [a for a in attrs if a.type == pmu_type]
    config = pt_attrs[0].config if pt_attrs else 0
    p = Params()
    p.quick = min(int(itrace.quick or 0), 2)
    p.return_compression = not (info.noretcomp_bit and any(a.config & info.noretcomp_bit for a in pt_attrs))
    p.branch_enable = not any((a.config & 1) and not (a.config & 0x2000) for a in pt_attrs)
    bits = info.mtc_freq_bits or 0
    if bits:
        shift = (bits & -bits).bit_length() - 1
        p.mtc_period = ((config & bits) >> shift) & _U32  # perf's intel_pt_mtc_period() is an unsigned int
        if p.mtc_period > 15:  # IA32_RTIT_CTL.MTCFreq has 4 bits: damaged mtc_freq_bits (or config)
            if info.mtc_bit and any(a.config & info.mtc_bit for a in pt_attrs):
                raise PerfDataError(f"the MTC period {p.mtc_period} (config {config:#x} & mtc_freq_bits {bits:#x}) "
                                    "is not 0..15", what="record AUXTRACE_INFO")
            p.mtc_period = 0  # MTC off: no MTC or TMA packet to convert with it
    if config & (1 << IntelPTConfig.CYC):  # perf's decoder takes CycThresh only with CYC on
        p.cyc_threshold = (config >> IntelPTConfig.CYC_THRESH) & 0xF
    # perf holds these in 32 bits (struct intel_pt's u32 tsc_ctc_ratio_n/d, unsigned max_non_turbo_ratio)
    p.tsc_ctc_ratio_n = (info.tsc_ctc_ratio_n or 0) & _U32
    p.tsc_ctc_ratio_d = (info.tsc_ctc_ratio_d or 0) & _U32
    p.max_non_turbo_ratio = (info.max_non_turbo_ratio or 0) & _U32
    p.fup_with_nlip = cpuid.startswith("GenuineIntel,6,92,")
    if itrace.instructions:
        period = itrace.period
        ptype = itrace.period_type
        if period:
            if ptype == PeriodType.INSTRUCTIONS:
                p.period_type, p.period = PERIOD_INSTRUCTIONS, period
            elif ptype == PeriodType.TICKS:
                p.period_type, p.period = PERIOD_TICKS, period
            elif ptype == PeriodType.NANOSECS:
                quot, rem = divmod(period, tc.time_mult)
                p.period_type = PERIOD_TICKS
                p.period = (quot << tc.time_shift) + (rem << tc.time_shift) // tc.time_mult
        if not p.period:
            p.period_type, p.period = PERIOD_INSTRUCTIONS, 1
    # Timeless decoding when TSC is off or perf time cannot be related to it.
    timeless = not info.tsc_bit or not info.cap_user_time_zero or bool(itrace.timeless_decoding)  # or --itrace=Z
    for a in attrs:
        if not a.sample_type & 0x4:  # PERF_SAMPLE_TIME
            timeless = True
        if a.type == pmu_type and not (a.config & info.tsc_bit):
            timeless = True
    return p, timeless


class PerfSession:
    """One perf.data file decoded perf's way."""

    def __init__(self, pd: Any, sideband: Any, config: DecodeConfig,
                 streams: dict[tuple[str, int], list[Any]]) -> None:
        self.pd = pd
        self.sb = sideband
        self.streams = streams
        self.cfg = config
        info = pd.auxtrace_info
        if info is None or not hasattr(info, "pmu_type"):
            cut = getattr(pd, "cut", None)
            if info is None and cut is not None:  # a salvaged recording cut before its AUXTRACE_INFO record
                raise TruncatedError(f"the file is cut {cut.where}: no Intel PT AUXTRACE_INFO record before "
                                     "the cut, nothing to decode", source=cut.source, offset=cut.offset, what="cut")
            hint = " (or a pipe-mode recording cut before that record)" if getattr(pd, "is_pipe", False) else ""
            raise UsageError(f"{pd.path}: no Intel PT AUXTRACE_INFO: not an intel_pt recording{hint}")
        self.info = info
        self.tc = sideband.time_conv
        cpuid = str(pd.features.get("cpuid") or "")
        try:
            self.params, self.timeless = _params(info, pd.attrs, cpuid, config.itrace, self.tc)
        except PerfDataError as e:  # named by the record it came from
            src, off = getattr(pd, "auxtrace_info_at", None) or (pd.path, None)
            raise PerfDataError(e.cause, source=str(src), offset=off, what=e.what) from None
        host = sideband.host
        self.kernel_start = default_kernel_start([e.start for e in host.kernel_maps.entries])
        self.objects = CodeObjects(config.symfs, config.buildid_dir,
                                   config.search_dirs or (os.path.dirname(os.path.abspath(pd.path)),))
        # The header's build-id list names objects whose mmaps carry none (perf reads it too).
        self.build_ids: dict[str, bytes] = {}
        for entry in pd.features.get("build_id") or ():
            if entry.filename and entry.build_id:
                self.build_ids.setdefault(entry.filename, bytes(entry.build_id))
        self.buffer_nr: dict[int, int] = {}  # id(AUXTRACE record) -> place among all AUXTRACE records
        self.event_tscs: list[tuple[int, bool]] = []  # timestamped records as TSC, perf's order
        # Outside PT decoding perf marks objects unreadable at these (see codewalk.sample_fetch_marks):
        self.sample_ips: list[tuple[int, int, int, int]] = []  # (time, pid, tid, ip) of non-PT SAMPLE records
        self.vdso_mmaps: list[tuple[int, int]] = []  # (time, pid) of [vdso] mmaps
        self._cpu_index: dict[int, CpuTimeline] = {}
        self.decode_stats = DecodeStats()  # counters of session/parallel.py
        self.time_ranges: list[TimeRange] | None = None  # perf script --time (samples/filters.py), perf times
        self._tsc_ranges: TscRanges | None = None
        self._obj_ids: dict[str, int] = {}
        # Where a cluster's workers open this recording (--cluster-path) with the options as they see
        # them, and what tells them it is the same file (session/cluster.py); None: this process's.
        self.worker_path: str | None = None
        self.worker_config: DecodeConfig | None = None
        self.worker_ident: tuple | None = None
        # Event Trace: perf's cap_event_trace (AUXTRACE_INFO) puts RFLAGS.IF in the flags of every
        # sample; 'evt' samples need the event_trace config bit (perf makes their attr only then).
        self.event_trace = bool(getattr(info, "cap_event_trace", None))
        self._evt_attr = any(a.type == info.pmu_type and a.config & _INTEL_PT_CFG_EVT_EN for a in pd.attrs)

    # ----------------------------------------------------------- sideband views

    def _cpu_current(self, cpu: int) -> CpuTimeline:
        idx = self._cpu_index.get(cpu)
        if idx is None:
            tl = self.sb.host.cpus.get(cpu)
            if tl is None or not len(tl):
                idx = CpuTimeline(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64))
            else:
                idx = CpuTimeline(self.tc.perf_time_to_tsc_array(tl.times.astype(np.uint64)), tl.pids, tl.tids)
            self._cpu_index[cpu] = idx
        return idx

    def _obj_id(self, name: str) -> int:
        return self._obj_ids.setdefault(name, len(self._obj_ids))

    @classmethod
    def reopen(cls, path: str, config: DecodeConfig) -> "PerfSession":
        """The recording at ``path`` opened again with ``config`` (a worker process's own session)."""
        pd = open_perf_data(path, salvage=True)  # a cut file: the parent has read it so (or stopped)
        return open_session(pd, config)

    def obj_names(self) -> list[str]:
        """Names of the objects with failed code reads, by their id in this session (worker processes
        hand these back: ids are per process)."""
        names = [""] * len(self._obj_ids)
        for name, i in self._obj_ids.items():
            names[i] = name
        return names

    def _perf_time(self, tsc: int) -> int:
        return 0 if self.timeless else self.tc.tsc_to_perf_time(tsc)

    @property
    def _est_tsc(self) -> bool:
        """perf's est_tsc: a branch from the kernel (or from nowhere) to user space (x86_64: below
        2^63, perf's kernel_start there) is dated by the decoder's estimate.  perf 6.1 sets it on
        every timed session (intel_pt_process_auxtrace_info: est_tsc = !timeless_decoding) and
        never clears it: sync_switch no longer turns it off (perf 4.x did, with est_tsc_orig), it
        only adds its own estimate in an unknown switch state, after est_tsc's test (sync_switch
        needs __switch_to in the kernel's symbols; it is not modelled here).  The compiled
        decoder takes this flag as P_EST_TSC (DecodeContext.est_tsc)."""
        return not self.timeless

    def _lookup(self) -> MapLookup:
        if not hasattr(self, "_guest_spaces"):
            self._host_kcore = host_kcore(self.pd)
            self._guest_spaces = GuestSpaces(self.pd, self.sb, getattr(self.cfg, "guest_kcore", None))
            self._vcpus = VcpuAttribution(self)
        lookup = MapLookup(self.sb.host, self.objects, self.build_ids, self._host_kcore, self._guest_spaces)
        lookup.vcpus = self._vcpus
        return lookup

    def build_id_of(self, filename: str, build_id: bytes | None) -> bytes | None:
        return build_id or self.build_ids.get(filename)

    # ------------------------------------------------------------------ queues

    def queues(self) -> list[tuple[tuple[str, int], list[Any]]]:
        streams = self.streams
        out = []
        for key in sorted(streams, key=lambda k: (k[0] != "cpu", k[1])):
            if self.cfg.cpus is not None and key[0] == "cpu" and key[1] not in self.cfg.cpus:
                continue
            out.append((key, streams[key]))
        return out

    def _buffers(self, bufs: list[Any]) -> list[Buffer]:
        out = []
        pos = 0
        # perf numbers a trace by its first buffer's place among all AUXTRACE buffers (+1).
        trace_nr = self.buffer_nr.get(id(bufs[0]), 0) + 1 if bufs else 1
        cut = getattr(self.pd, "cut", None)
        for i, b in enumerate(bufs):
            data = self.pd.aux_data(b)
            if cut is not None and b.offset == cut.partial_offset and b.src is None:
                # the file's cut tore the payload: decode its whole packets (cut_error_rows marks the end)
                data = data[:whole_packets_end(data)]
            # a reference TSC past 2^63 (~97 years at 3 GHz) is a damaged record's: as a buffer without one
            ref = b.reference if b.reference < 1 << 63 else 0
            out.append(Buffer(data=data, ref_timestamp=ref, consecutive=i > 0, trace_nr=trace_nr,
                              offset=pos))
            pos += len(data)
        return out

    def decode_context(self) -> DecodeContext:
        """What a decoder backend reads of this session (:mod:`ptexport.decoder.backend` picks the backend).

        Built afresh on each call (cheap): it reads the session's attributes as they are now."""
        return DecodeContext(
            params=self.params, itrace=self.cfg.itrace, timeless=self.timeless, est_tsc=self._est_tsc,
            kernel_start=self.kernel_start, branches_filter=self.cfg.itrace.branches_filter, event_trace=self.event_trace,
            evt_attr=self._evt_attr, sb=self.sb, tc=self.tc, buffers=self._buffers, new_lookup=self._lookup,
            cpu_timeline=self._cpu_current, obj_id=self._obj_id, time_filter=self._queue_time_filter,
            perf_time=self._perf_time,
            have_sched_switch=int(getattr(getattr(self.pd, "auxtrace_info", None), "have_sched_switch", 0) or 0))

    def decode_queue(self, qnum: int, key: tuple[str, int], bufs: list[Any]) -> _Rows:
        """Run perf's decoder over one queue and synthesize its samples (the reference backend)."""
        return reference_queue.decode_queue(self.decode_context(), qnum, key, bufs)

    def iter_queue(self, qnum: int, key: tuple[str, int], bufs: list[Any], chunk: int = 0) -> Iterator[_Rows]:
        """:meth:`decode_queue` in pieces of about ``chunk`` rows or steps (0: one piece), see
        :func:`ptexport.decoder.reference.queue.iter_queue`."""
        return reference_queue.iter_queue(self.decode_context(), qnum, key, bufs, chunk)

    def _queue_time_filter(self) -> "QueueTimeFilter | None":
        """A queue's --time position (perf's intel_pt_setup_time_range), None without ranges or TSC."""
        if not self.time_ranges or self.timeless or self.tc is None:
            return None
        if self._tsc_ranges is None:
            self._tsc_ranges = TscRanges.from_ranges(self.time_ranges, self.tc)
        return QueueTimeFilter(self._tsc_ranges)

    # ----------------------------------------------------------------- public

    def lost_data_rows(self) -> _Rows:
        """perf's 'Lost trace data' errors for truncated AUX areas, at their record's time."""
        rows = _Rows()
        if not self.cfg.itrace.errors or "l" in self.cfg.itrace.error_minus:
            return rows
        events = [ev for evs in self.sb.aux_events.values() for ev in evs]
        for ev in sorted(events, key=lambda e: e.time):
            if ev.lost_data:
                tsc = self.tc.perf_time_to_tsc(ev.time) if not self.timeless else 0
                rows.add(kind=EV_ERROR, tsc=tsc, time=ev.time, cpu=ev.cpu, pid=getattr(ev, "pid", -1),
                         tid=ev.tid, code=ERR_LOST, queue=-1)
        return rows

    def cut_error_rows(self, tsc: int, time: int) -> _Rows:
        """The decode error at the end of an AUXTRACE buffer the file's cut falls into (a salvaging reader's
        ``pd.cut``): perf's "No more data" (ERR_NODATA, ``decode_errors.kind`` ``no_data``), the code
        perf's decoder uses when the trace ends where a packet or an operation needs more of it;
        "Lost trace data" stays the AUX records' TRUNCATED flag. One row, dated ``tsc``/``time`` (the
        latest of the rows before it: the cut ends the recording), on the partial buffer's queue at the
        buffer's end (the queue's stream offset). No rows without a partial buffer, with --itrace
        without errors, or when the queue is filtered out (--cpu)."""
        rows = _Rows()
        cut = getattr(self.pd, "cut", None)
        if cut is None or cut.partial_offset is None or not self.cfg.itrace.errors:
            return rows
        for qnum, (key, bufs) in enumerate(self.queues()):
            if bufs and bufs[-1].offset == cut.partial_offset:
                break
        else:
            return rows
        per_cpu = key[0] == "cpu"
        cpu = key[1] if per_cpu else -1
        pid, tid = (-1, -1)
        if per_cpu and not self.timeless:
            pid, tid = self._cpu_current(cpu).at(tsc)
        elif not per_cpu:
            t = self.sb.thread(key[1])
            pid, tid = (t.pid if t is not None else -1), key[1]
        offset = sum(len(self.pd.aux_data(b)) for b in bufs)
        rows.add(kind=EV_ERROR, tsc=tsc, time=time, cpu=cpu, pid=pid, tid=tid, code=ERR_NODATA, queue=qnum,
                 offset=offset, trace_nr=self.buffer_nr.get(id(bufs[0]), 0) + 1)
        return rows

    def decode(self, jobs: int | None = 1) -> SampleColumns:
        """All samples in perf's order; ``jobs`` > 1 (None: all cores) decodes in worker processes.

        The compiled decoder (:mod:`ptexport.decoder.compiled.decoder`) is used when numba is
        installed and the options allow it; its output equals :meth:`decode_queue`'s.
        This is :meth:`iter_batches` concatenated.
        """
        return self.vcpu_columns(concat_columns(list(self.iter_batches(jobs))))

    def vcpu_columns(self, cols: SampleColumns) -> SampleColumns:
        """Fill machine_pid/vcpu and give guest samples their guest pid/tid (perf's VM split; batches
        split already are returned as they are)."""
        if getattr(self, "_vcpu_attr", None) is None:
            self._vcpu_attr = VcpuAttribution(self)
        return self._vcpu_attr.apply(cols)

    def split_batches(self, batches: Iterable[SampleColumns]) -> Iterator[SampleColumns]:
        """``batches`` with perf's VM split done (:meth:`vcpu_columns`) where the recording has VMs, by
        whoever makes them: the decoding process or thread, not the exporting one (a VM export's
        batches each cost it 3-10 ms there).  Closing this closes ``batches``."""
        if not self.sb.has_vms():
            yield from batches
            return
        it = iter(batches)
        try:
            for cols in it:
                yield self.vcpu_columns(cols)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def iter_batches(self, jobs: int | None = 1, batch_rows: int = 1 << 16,
                     units: UnitExecutor | None = None) -> Iterator[SampleColumns]:
        """:meth:`decode`'s samples in order, in batches of at most ``batch_rows`` rows.

        Memory does not grow with the trace: queues are decoded a chunk at a time
        (the compiled decoder, or the reference one) as perf's queue heap (run
        incrementally, see :class:`ptexport.session.parallel.StreamMerge`) needs
        them; with ``jobs`` > 1 worker processes decode ahead (PSB segments of a
        queue for the compiled decoder, whole queues for the reference) and hand
        back bounded chunks.  ``units`` (a cluster's executor, :mod:`ptexport.session.units`)
        decodes the PSB segments instead of ``jobs`` processes here.  Timeless sessions emit
        queue after queue in perf's timeless order; ``--itrace=sN`` is applied as the batches pass.
        """
        # parallel loads numba (the compiled backend): imported when decoding starts (start-up speed)
        from ptexport.session.parallel import STREAM_CHUNK, StreamMerge, _as_cols, _queue_chunks, _rebatch, _Source

        batch_rows = max(1, int(batch_rows))
        lost = _as_cols(self.lost_data_rows(), COLUMNS)
        sources = [_Source(chunks, COLUMNS, self.decode_stats) for chunks in _queue_chunks(self, jobs, STREAM_CHUNK, units)]
        try:
            if self.timeless:
                for src in sources:
                    src.ensure(0)  # every queue's setup (its failures count first)
                gen = _rebatch(self._timeless_chunks(sources, lost), batch_rows)
            else:
                merge = StreamMerge(sources, self.event_tscs, lost, batch_rows)
                merge.start()
                gen = merge.batches()
            seen: dict[int, int] = {}
            for src in sources:
                for obj in src.setup_failures:
                    seen[obj] = seen.get(obj, 0) + 1
            marks = self.data_error_marks()
            skip = self.cfg.itrace.initial_skip
            skip_state: dict = {}
            filtered = self.filters_samples
            evd_pending: list[tuple[int, int]] = []  # EVDs whose evt row is in the next batch
            last = [0, 0]  # latest tsc and time seen (the cut error's date)
            release = getattr(self.pd, "release_pages", None)
            for nbatch, cols in enumerate(gen):
                if release is not None and nbatch % RELEASE_BATCHES == RELEASE_BATCHES - 1:
                    release()  # the trace decoded so far out of the resident set (perfdata/reader.py)
                if len(cols["kind"]):
                    last = [max(last[0], int(cols["tsc"].max())), max(last[1], int(cols["time"].max()))]
                evd = _evd_owners(cols, evd_pending) if self.event_trace else None
                other = np.ones(len(cols["kind"]), bool)  # the rows --itrace=sN and --time/--pid/--tid keep
                if skip:
                    other &= self._initial_skip_keep(cols, skip, skip_state, not self.cfg.itrace.quick)
                if filtered:
                    other &= self._script_filter_keep(cols)
                keep = self._budget_keep(cols, seen, marks, self._mark_when(cols) if marks else None,
                                         self._fetch_marks(cols, other)) & other
                if keep.all():
                    out = SampleColumns(**{c: cols[c] for c in OUT_COLUMNS})
                elif keep.any():
                    out = SampleColumns(**{c: cols[c][keep] for c in OUT_COLUMNS})
                else:
                    continue
                if evd is not None:
                    rows_, types, payloads = evd
                    kept = keep[rows_]
                    out.evd_row = (np.cumsum(keep) - 1)[rows_[kept]]
                    out.evd_type = types[kept]
                    out.evd_payload = payloads[kept]
                yield out
            cut = self.cut_error_rows(*last)
            if len(cut):
                yield SampleColumns(**{c: np.asarray(cut.cols[c], dtype=np.uint64 if c in U64_COLUMNS else np.int64)
                                       for c in OUT_COLUMNS})
        finally:
            for src in sources:
                close = getattr(src.chunks, "close", None)
                if close is not None:
                    close()  # stop worker processes of an abandoned stream

    def _timeless_chunks(self, sources: list[Any], lost: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        """Timeless order: lost-data errors first, then queue after queue (:meth:`_timeless_queue_order`)."""
        if len(lost["kind"]):
            yield lost
        for q in self._timeless_queue_order():
            src = sources[q]
            while True:
                yield from src.take_rows(None)
                src.clear_items()
                if not src.more():
                    break

    def _decode_whole(self, jobs: int | None = 1) -> SampleColumns:
        """Every queue decoded whole, then ordered (timeless sessions and --itrace=sN)."""
        from ptexport.session.parallel import decode_queues  # numba: at decode time (start-up speed)

        parts = decode_queues(self, jobs)
        lost = self.lost_data_rows()
        if self.timeless:
            parts = self._timeless_order(parts)
        allp = parts + [lost]
        if self.timeless and len(lost):
            # perf reports lost data when it reads the AUX record; timeless queues are decoded
            # later (at their thread's EXIT, else at the end): those rows come first.
            allp = [lost] + parts
        cols = {c: np.concatenate([np.asarray(p.cols[c], dtype=np.int64 if c not in ("tsc", "ip", "addr", "payload") else np.uint64)
                                   for p in allp]) for c in COLUMNS}
        if not self.timeless and len(cols["kind"]):
            order = self._perf_order(parts, len(lost), cols)
            cols = {c: v[order] for c, v in cols.items()}
        marks = self.data_error_marks()
        other = np.ones(len(cols["kind"]), bool)
        if self.cfg.itrace.initial_skip:
            other &= self._initial_skip_keep(cols, self.cfg.itrace.initial_skip, None, not self.cfg.itrace.quick)
        if self.filters_samples:
            other &= self._script_filter_keep(cols)
        keep = self._perf_failure_budget(cols, [f for p in parts for f in p.setup_failures], marks,
                                         self._mark_when(cols) if marks else None, self._fetch_marks(cols, other)) & other
        cols = {c: v[keep] for c, v in cols.items()}
        del cols["obj"], cols["step"]
        return SampleColumns(**cols)

    def _timeless_order(self, parts: list[Any]) -> list[Any]:
        """Timeless decoding order: a per-thread queue at its thread's EXIT, the others at the end."""
        order = self._timeless_queue_order()
        return [parts[q] for q in order] if len(order) == len(parts) else parts

    def _timeless_queue_order(self) -> list[int]:
        """perf decodes a timeless queue when its thread exits (a per-thread queue's, or a CPU queue's
        first buffer's: a workload's recording), the others at the end, in queue order."""
        return [q for _, q in sorted((int(t), q) for q, t in enumerate(self._timeless_decode_times()))]

    def _timeless_decode_times(self) -> np.ndarray:
        """Per queue (in :meth:`queues` order), the perf time perf decodes it at in a timeless session:
        its thread's EXIT, else TIMELESS_MAP_TIME (the end)."""
        ctx = self.decode_context()
        out = []
        for key, bufs in self.queues():
            end = ctx.timeless_end(key[1] if key[0] == "thread" else queue_tid(bufs))
            out.append(end if end is not None else _TIMELESS_MAP_TIME)
        return np.array(out, dtype=np.int64)

    def _fetch_marks(self, cols: dict[str, np.ndarray], printed: np.ndarray) -> np.ndarray | None:
        """Per row, the object perf script's instruction fetch at that sample marks unreadable (-1: none;
        None: no row does).

        perf script fetches the instruction at every sample it prints that carries none
        (script_fetch_insn: ``insn_len`` 0, an ip): an asynchronous branch ('hw int', 'tr end async') or
        a power event of Intel PT too, not only the recording's other events.  In an object whose file
        is not here that read fails and marks it unreadable, as :meth:`data_error_marks` does, at that
        sample: one failed PT read of it reported after that, not two.  ``printed``: the rows --itrace=sN
        and --time/--pid/--tid keep (perf prints no other).  Host code only (a guest sample's thread is
        the guest's)."""
        if not self.cfg.insn_fetch_marks or not self._native_arch():
            return None
        kind = cols["kind"]
        cand = printed & (kind >= 0) & (kind != EV_ERROR) & (cols["insn_len"] == 0) & (cols["ip"] != 0) \
            & (cols["nr"] == 0)
        rows = np.flatnonzero(cand)
        if not len(rows):
            return None
        out = np.full(len(kind), -1, np.int64)
        lookup = self._lookup()
        cache: dict[tuple[int, int, int], int] = {}
        pids, ips = cols["pid"][rows].tolist(), cols["ip"][rows].tolist()
        times = cols["time"][rows].tolist() if not self.timeless else [_TIMELESS_MAP_TIME] * len(rows)
        for i, pid, ip, time in zip(rows.tolist(), pids, ips, times):
            key = (pid, ip, time)
            got = cache.get(key)
            if got is None:
                lookup.pid, lookup.time = pid, time
                hit = lookup(ip, ip >= self.kernel_start)
                objs = sample_fetch_marks(hit[3] if hit else None)
                got = cache[key] = self._obj_id(objs[0].name) if objs else -1
            out[i] = got
        return out if (out >= 0).any() else None

    def map_times(self, cols: SampleColumns) -> np.ndarray:
        """The perf time each sample's code and symbols are looked up at: its own; in a timeless session
        (no sample time) the end's, as the decoders read code (TIMELESS_MAP_TIME)."""
        if not self.timeless:
            return cols.time
        return np.full(len(cols), _TIMELESS_MAP_TIME, np.int64)

    def _native_arch(self) -> bool:
        """perf script fetches instructions on the recording's own architecture only (x86_64)."""
        arch = self.pd.features.get("arch")
        return not arch or str(arch) == "x86_64"

    def _mark_when(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        """What :meth:`data_error_marks` are compared with, per row: its TSC; in a timeless session the
        perf time its queue is decoded at (a mark made before then is made before its first read)."""
        if not self.timeless:
            return cols["tsc"]
        times = np.append(self._timeless_decode_times(), _TIMELESS_MAP_TIME)  # the last: no queue's (the end)
        q = np.asarray(cols["queue"], dtype=np.int64)
        return times[np.where((q >= 0) & (q < len(times) - 1), q, len(times) - 1)]

    def _perf_order(self, parts: list[_Rows], n_lost: int, cols: dict[str, np.ndarray]) -> np.ndarray:
        """Row order perf produces: its queue heap run up to each sideband event's time.

        perf decodes a queue until its timestamp reaches the next queue's (plus 1)
        or the next event's, keeping the state that crossed the limit pending; a
        pending state is emitted when its queue next runs.  Which of two queues
        at the same timestamp runs first follows perf's binary heap exactly.
        """
        from ptexport.session.queues_compiled import numba, perf_order  # numba: when needed (start-up speed)

        if numba is not None:  # the same algorithm over arrays, compiled
            return perf_order([(p.items_err, p.items_ts) for p in parts], self.event_tscs, n_lost,
                              cols["queue"], cols["step"], sum(len(p) for p in parts))
        emitted: list[tuple[int, int]] = []  # (queue, step) or (-1, lost index), in emission order
        heap = PerfQueueHeap()
        push, pop = heap.push, heap.pop_top

        nxt = [0] * len(parts)  # next item to decode per queue (item 0 is the pending first state)
        for q, p in enumerate(parts):
            if p.items_ts:
                push(q, p.items_ts[0])

        def run(q: int, limit: int) -> int | None:
            p = parts[q]
            cur = nxt[q]
            emitted.append((q, cur))  # the pending state
            i = cur + 1
            err, ts = p.items_err, p.items_ts
            while i < len(ts):
                if err[i]:
                    emitted.append((q, i))
                    i += 1
                    continue
                if ts[i] >= limit:
                    nxt[q] = i
                    return ts[i]
                emitted.append((q, i))
                i += 1
            nxt[q] = i
            return None

        def process(limit: int) -> None:
            while heap and heap[0][0] < limit:
                q = heap[0][1]
                pop()
                ts = min(heap[0][0] + 1, limit) if heap else limit
                ordinal = run(q, ts)
                if ordinal is not None:
                    push(q, ordinal)

        lost_i = 0
        for tsc, is_lost in self.event_tscs:
            if tsc:
                process(tsc)
            if is_lost and lost_i < n_lost:
                emitted.append((-1, lost_i))
                lost_i += 1
        process(1 << 64)
        while lost_i < n_lost:
            emitted.append((-1, lost_i))
            lost_i += 1
        # Rows of each emitted item keep their order inside the item.
        key_rank = {k: r for r, k in enumerate(emitted)}
        queue = cols["queue"]
        step = cols["step"]
        lost_base = sum(len(p) for p in parts)
        ranks = np.empty(len(queue), dtype=np.int64)
        for i in range(len(queue)):
            q = int(queue[i])
            k = (q, int(step[i])) if q >= 0 else (-1, i - lost_base)
            ranks[i] = key_rank.get(k, len(emitted))
        return np.lexsort((np.arange(len(queue)), ranks))

    @property
    def filters_samples(self) -> bool:
        """True when perf script's --time/--pid/--tid drop samples of this session."""
        return bool(self.time_ranges) or self.cfg.pids is not None or self.cfg.tids is not None

    def _script_filter_keep(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        """perf script's --time/--pid/--tid over a batch: samples outside are dropped, errors never
        (perf checks them in process_sample_event; errors come through auxtrace_error)."""
        keep = time_mask(cols["time"], self.time_ranges)
        if self.cfg.pids is not None or self.cfg.tids is not None:
            pid, tid = cols["pid"], cols["tid"]
            if np.any(cols["nr"] != 0):  # guest samples: perf filters the guest thread
                tmp = self.vcpu_columns(SampleColumns(**{c: cols[c] for c in OUT_COLUMNS}))
                pid, tid = tmp.pid, tmp.tid
            keep &= thread_mask(pid, tid, self.cfg.pids, self.cfg.tids)
        return keep | (cols["kind"] == EV_ERROR)

    def data_error_marks(self) -> dict[int, int]:
        """Object id -> TSC at which perf (outside PT decoding) first marks the object unreadable.

        perf script fetches the instruction at each non-PT sample's ip, and a
        [vdso] mmap probes the thread's file maps for their ELF class; both open
        the object and, when that fails, set its data status to ERROR.  In a timeless
        session the values are perf times (:meth:`_mark_when`): perf decodes a queue at
        its thread's EXIT or at the end, after the records before then.
        """
        if not self.timeless and self.tc is None:
            return {}
        native = self._native_arch()
        found: list[tuple[int, str]] = []
        lookup = self._lookup()
        if native and self.cfg.insn_fetch_marks:
            # perf script's text output fetches at the samples it prints: --time/--pid/--tid drop the others
            # first; a script (perf's exporter) fetches none.
            for time, pid, tid, ip in self.sample_ips:
                if not (time_kept(time, self.time_ranges) and thread_kept(pid, tid, self.cfg.pids, self.cfg.tids)):
                    continue
                lookup.pid, lookup.time = pid, time
                hit = lookup(ip, ip >= self.kernel_start)
                found += [(time, o.name) for o in sample_fetch_marks(hit[3] if hit else None)]
        host = self.sb.host
        for time, pid in self.vdso_mmaps:
            objs, last = [], None
            for e in host.maps(pid).live_at(time):
                if e is last or not e.filename.startswith("/"):
                    continue
                last = e
                objs.append(self.objects.get(e.filename, e.build_id or self.build_ids.get(e.filename)))
            found += [(time, o.name) for o in vdso_probe_marks(objs)]
        marks: dict[int, int] = {}
        for time, name in found:
            tsc = time if self.timeless else int(self.tc.perf_time_to_tsc(time))
            obj = self._obj_id(name)
            if obj not in marks or tsc < marks[obj]:
                marks[obj] = tsc
        return marks

    @staticmethod
    def _initial_skip_keep(cols: dict[str, np.ndarray], skip: int, state: dict | None = None,
                           periods: bool = True) -> np.ndarray:
        """--itrace=sN: perf drops its first N synthesized samples (errors are not samples).

        A CBR event is not counted: perf holds it back (its queue retries at each
        state) while fewer than N - 4 samples were skipped (intel_pt_skip_cbr_event).
        ``state`` carries the count and the CBRs seen over consecutive batches.  What the skipped
        samples counted goes on (:meth:`_skip_carry`; ``periods``: instruction periods too, not in
        quick mode, where every period is 1).
        """
        kinds = np.asarray(cols["kind"])
        keep = np.ones(len(kinds), bool)
        state = {} if state is None else state
        seen: dict[int, int] = state.setdefault("cbr", {})  # queue -> CBR ratio emitted last
        n0 = state.get("n", 0)
        sample = (kinds >= 0) & (kinds != EV_ERROR) & (kinds != EV_CBR)
        before = np.cumsum(sample) - sample  # the samples ahead of each row in this batch
        if n0 < skip:
            keep[sample & (before < min(skip - n0, len(kinds)))] = False
        for i in np.flatnonzero(kinds == EV_CBR).tolist():  # (rare: power events)
            n = min(skip, n0 + int(before[i]))  # samples skipped so far at this row
            q, cbr = int(cols["queue"][i]), int(cols["payload"][i]) & 0xFF
            if seen.get(q) == cbr or (cols["code"][i] and n + 4 < skip):
                keep[i] = False
            else:
                seen[q] = cbr
        state["n"] = min(skip, n0 + int(np.count_nonzero(sample)))
        cols["code"][cols["kind"] == EV_CBR] = 0
        PerfSession._skip_carry(cols, keep, state, periods)
        return keep

    @staticmethod
    def _skip_carry(cols: dict[str, np.ndarray], keep: np.ndarray, state: dict, periods: bool = True) -> None:
        """What a skipped sample counted goes to its queue's next sample of the kind: perf skips a sample
        before it takes its counts (intel_pt_skip_event first), so the branch sample it delivers next
        has the cycles and instructions since the last one delivered (IPC: last_br_cyc_cnt), and an
        instruction sample its period and IPC since the last instruction sample delivered."""
        names = ("insn_cnt", "cyc_cnt", "period")
        if not all(name in cols for name in names):  # (rows without counts)
            return
        kinds = cols["kind"]
        rows = np.flatnonzero(((kinds == EV_BRANCH) | (kinds == EV_INSTRUCTION)) & ~keep)
        if not len(rows) and not state.get("carry"):
            return
        carry: dict[tuple[int, int], list[int]] = state.setdefault("carry", {})
        for i in rows.tolist():
            k = int(kinds[i])
            acc = carry.setdefault((int(cols["queue"][i]), k), [0, 0, 0])
            for j, name in enumerate(names):
                if name != "period" or (k == EV_INSTRUCTION and periods):
                    acc[j] += int(cols[name][i])
        if not carry:
            return
        cand = np.flatnonzero(((kinds == EV_BRANCH) | (kinds == EV_INSTRUCTION)) & keep)
        for i in cand.tolist():
            key = (int(cols["queue"][i]), int(kinds[i]))
            pending = carry.get(key)
            if pending is None:
                continue
            acc = pending
            if acc[2]:  # the period: since the last instruction sample delivered, always
                cols["period"][i] += acc[2]
                acc[2] = 0
            if cols["cyc_cnt"][i]:  # IPC: where the sample has cycles (else perf's counts go on, untaken)
                cols["insn_cnt"][i] += acc[0]
                cols["cyc_cnt"][i] += acc[1]
                acc[0] = acc[1] = 0
            if not any(acc):
                del carry[key]
                if not carry:
                    del state["carry"]
                    return

    @staticmethod
    def _perf_failure_budget(cols: dict[str, np.ndarray], setup_failures: list[int],
                             marks: dict[int, int] | None = None, when: np.ndarray | None = None,
                             fetched: np.ndarray | None = None) -> np.ndarray:
        """Rows to keep: an object's failures past perf's first two are silent in perf.

        ``marks`` (object id -> TSC, or what ``when`` holds per row) are objects perf found
        unreadable outside PT decoding: one marked before its first PT read reports only that read.
        ``fetched``: per row, an object marked so at that row (:meth:`_fetch_marks`).
        """
        seen: dict[int, int] = {}
        for obj in setup_failures:
            seen[obj] = seen.get(obj, 0) + 1
        return PerfSession._budget_keep(cols, seen, marks, when, fetched)

    @staticmethod
    def _budget_keep(cols: dict[str, np.ndarray], seen: dict[int, int], marks: dict[int, int] | None,
                     when: np.ndarray | None = None, fetched: np.ndarray | None = None) -> np.ndarray:
        """:meth:`_perf_failure_budget` over consecutive batches: ``seen`` (object id -> failures) carries over."""
        keep = cols["kind"] >= 0
        tscs = cols["tsc"] if when is None else when
        failed = cols["obj"] >= 0
        for i in np.flatnonzero(failed if fetched is None else failed | (fetched >= 0)):
            if not failed[i]:  # a sample whose instruction fetch marks its object (status ERROR), unless it was
                assert fetched is not None  # already: a failed PT read made it so
                seen.setdefault(int(fetched[i]), 1)
                continue
            obj = int(cols["obj"][i])
            if marks and obj not in seen and obj in marks and marks[obj] <= int(tscs[i]):
                seen[obj] = 1  # status ERROR already: the first PT read reports, later ones are silent
            n = seen.get(obj, 0) + 1
            seen[obj] = n
            if n > _REPORTED_FAILURES_PER_OBJECT:
                keep[i] = False
        return keep


def _evd_owners(cols: dict[str, np.ndarray], pending: list[tuple[int, int]]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(row of the evt sample, EVD type, payload) of each EVD row of a batch: the EVDs of a decoder state
    come just before its evt row (the same item, never split by perf's order); ``pending`` carries EVDs
    whose evt row is in the next batch.  None when the batch has no EVD."""
    kind = cols["kind"]
    at = np.flatnonzero(kind == _EVD_ROW)
    if not len(at) and not pending:
        return None
    rows: list[int] = []
    types: list[int] = []
    payloads: list[int] = []
    code, payload = cols["code"], cols["payload"]
    for i in np.flatnonzero((kind == _EVD_ROW) | (kind == EV_EVT)).tolist():
        if kind[i] == _EVD_ROW:
            pending.append((int(code[i]), int(payload[i])))
            continue
        for t, p in pending:
            rows.append(i)
            types.append(t)
            payloads.append(p)
        pending.clear()
    return (np.asarray(rows, np.int64), np.asarray(types, np.int64), np.asarray(payloads, np.uint64))


#: Batches between two releases of the recording's pages while streaming (PerfData.release_pages):
#: the resident set holds about this many batches' trace, not the whole file.
RELEASE_BATCHES = 16


def open_session(pd: Any, config: DecodeConfig) -> PerfSession:
    """Read ``pd`` once: the sideband model (with perf's map semantics) and the AUX queues."""
    if config.guest_data:  # read as perf inject --guest-data's output (also in worker processes)
        pd = apply_guest_data(pd, config.guest_data)

    # perf script --time: parsed once, percent forms against the header's first/last sample time
    time_ranges = parse_time_ranges(config.time, pd.features.get("sample_time")) if config.time else None
    streams: dict[tuple[str, int], list[Any]] = {}
    buffer_nr: dict[int, int] = {}
    events: list[tuple[int, bool]] = []  # (perf time, AUX record reporting lost data)
    sample_ips: list[tuple[int, int, int, int]] = []
    vdso_mmaps: list[tuple[int, int]] = []
    pmu_type = getattr(getattr(pd, "auxtrace_info", None), "pmu_type", None)

    t_auxtrace, t_aux, t_sample = int(RecordType.AUXTRACE), int(RecordType.AUX), int(RecordType.SAMPLE)
    t_mmaps = (int(RecordType.MMAP), int(RecordType.MMAP2))
    t_switches = (int(RecordType.SWITCH), int(RecordType.SWITCH_CPU_WIDE))

    def tap(records: Iterable[Any]):
        add_event = events.append
        for rec in records:
            t = rec.type
            if t == t_auxtrace:
                key = ("cpu", rec.cpu) if rec.cpu != -1 and rec.cpu != 0xFFFFFFFF else ("thread", rec.tid)
                buffer_nr[id(rec)] = len(buffer_nr)
                streams.setdefault(key, []).append(rec)
            elif t < 64:
                time = rec.time
                if time:
                    if t in t_switches:  # (the bulk of a `perf record -a` recording's records)
                        add_event((time, False))
                    else:
                        add_event((time, t == t_aux and bool(rec.flags & 0x01)))  # TRUNCATED: perf 6.1 reports lost data
                        if t == t_sample:
                            if rec.ip and rec.pid is not None and getattr(rec.attr, "type", None) != pmu_type:
                                sample_ips.append((time, rec.pid, -1 if rec.tid is None else rec.tid, rec.ip))
                        elif t in t_mmaps and rec.filename == "[vdso]":
                            vdso_mmaps.append((time, rec.pid))
            yield rec

    sb = build_sideband(tap(pd.records()), time_conv=getattr(pd, "time_conv", None),
                        auxtrace_info=getattr(pd, "auxtrace_info", None), exec_clears_maps=False)
    release = getattr(pd, "release_pages", None)
    if release is not None:  # the pass over the records mapped the whole file: out of the resident set
        release()
    session = PerfSession(pd, sb, config, streams)
    session.time_ranges = time_ranges or None
    session.sample_ips = sample_ips
    session.vdso_mmaps = vdso_mmaps
    session.buffer_nr = buffer_nr
    events.sort(key=lambda e: e[0])  # perf's ordered events: by time, file order within a time
    if not session.timeless and session.tc is not None:
        tscs = session.tc.perf_time_to_tsc_array(np.array([t for t, _ in events], dtype=np.uint64)).tolist()
        session.event_tscs = [(int(t), lost) for t, (_, lost) in zip(tscs, events)]
    return session
