"""``ptexport TRACE --db DB``: open a recording, decode it and run perf's db-export into a writer.

The orchestration of one export, above the layers it joins (see docs/architecture.md):
the perf.data reader (optionally with guests merged as ``perf inject --guest-data``
does, :mod:`ptexport.session.guestdata`), the perf session that decodes it into
sample batches (:mod:`ptexport.session.perfsession`: in-process, in a forked child,
:mod:`ptexport.session.decode_proc`, or by ``--jobs`` workers), the writer
(:func:`ptexport.writers.open_writer`) and perf's db-export
(:class:`ptexport.dbexport.exporter.DbExporter`), with the sample loop picked here.

What db-export needs from the trace itself (the VMCS and TSC offset of each VCPU
thread, guest kernel code at VM exits) is read here and handed in
(:class:`~ptexport.dbexport.vm.VmTrace`): db-export sees samples, never packets.
"""

from __future__ import annotations

import contextlib
import os
import time as _time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from ptexport.dbexport import samples, samples_compiled
from ptexport.dbexport.exporter import DbExporter, ExportConfig, RecordTee, SampleLoop
from ptexport.dbexport.progress import AuxPosition, ProgressBatches, ProgressFn
from ptexport.dbexport.vm import VmTrace
from ptexport.decoder.guest import GuestSpaces
from ptexport.errors import PtExportError
from ptexport.perfdata import open_perf_data
from ptexport.pt.vmtime import VmBuffer, VmTimeConfig, VmTimeCorrelator
from ptexport.samples.columns import SampleColumns
from ptexport.session.cluster import DaskCopies, open_cluster, prepare_workers
from ptexport.session.decode_proc import maybe_process
from ptexport.session.guestdata import apply_guest_data
from ptexport.session.perfsession import DecodeConfig, PerfSession, open_session
from ptexport.session.prefetch import Prefetched
from ptexport.writers import open_writer
from ptexport.writers.targets import target_path
from ptexport.writers.leftovers import refuse_if_busy

__all__ = ["ExportConfig", "ExportSummary", "export_trace", "measure_vmcs", "sample_loop"]

#: Trace bytes per CPU read to find each VCPU's VMCS and TSC offset.
MEASURE_BYTES = 4 << 20


@dataclass
class ExportSummary:
    target: str
    rows: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    lost: int = 0  # data-loss events: lost records and samples, truncated or colliding AUX, overflows, lost data
    losses: dict[str, int] = field(default_factory=dict)  # the stats rows of severity data_loss, by name
    seconds: float = 0.0
    decode_seconds: float = 0.0
    leftovers: list[Any] = field(default_factory=list)  # temporaries of dead exports removed (writers/leftovers.py)
    cut: Any = None  # where a cut recording ended (perfdata.reader.FileCut), None if it was whole
    cluster_units: int = 0  # PSB segments decoded on the --scheduler cluster's workers
    cluster_workers: int = 0  # its workers when the export started
    cluster_copies: int = 0  # batches of samples and calls the workers loaded into PostgreSQL
    cluster_tree_steps: int = 0  # call tree tasks (a shard of threads, a batch) the workers ran
    warnings: list[str] = field(default_factory=list)  # one line each, for the CLI to show


def sample_loop(config: ExportConfig) -> SampleLoop:
    """The loop the samples go through: the batch loop (numpy, Python work per change of thread or
    sideband, not per sample), or with ``config.reference`` the per-sample loop written to read as
    perf's db-export, its oracle (same rows, compared table by table in ``tests/dbexport/``)."""
    return samples.export_samples if config.reference else samples_compiled.export_samples


def measure_vmcs(session: Any, limit: int = MEASURE_BYTES) -> dict[int, tuple[int, int, str]]:
    """host tid -> (VMCS, TSC offset, source) from the first ``limit`` bytes of each CPU's trace: the
    thread current on the CPU at a VMCS packet runs that VMCS; a guest TSC packet in a PSB+ (PIP
    NR=1) measured against the MTC/TMA clock gives its offset ('measured'; 0 and 'none' when no guest
    TSC was seen or the guest TSC packets equal the host's, as after perf inject --vm-time-correlation)."""
    pd, tc = session.pd, session.tc
    info = getattr(pd, "auxtrace_info", None)
    if tc is None or info is None or not hasattr(pd, "aux_data"):
        return {}
    pt_attrs = [a for a in pd.attrs if a.type == info.pmu_type]
    config = pt_attrs[0].config if pt_attrs else 0
    bits = info.mtc_freq_bits or 0
    mtc_period = (config & bits) >> ((bits & -bits).bit_length() - 1) if bits else 0
    corr = VmTimeCorrelator(VmTimeConfig(mtc_period=mtc_period, tsc_ctc_ratio_n=info.tsc_ctc_ratio_n or 0,
                                         tsc_ctc_ratio_d=info.tsc_ctc_ratio_d or 0))
    try:
        for key in sorted(k for k in session.streams if k[0] == "cpu"):
            bufs, size = [], 0
            for i, rec in enumerate(session.streams[key]):
                data = bytes(pd.aux_data(rec))
                bufs.append(VmBuffer(data, rec.reference, i > 0))
                size += len(data)
                if size >= limit:
                    break
            corr.run_queue(bufs, key)
    except PtExportError:
        return {}  # unreadable trace data: decode errors say where; no measurement
    out: dict[int, tuple[int, int, str]] = {}
    # the thread on the CPU at each VMCS packet (a VCPU's runs show thousands): the first per thread wins
    seen = corr.vmcs_seen
    rows: dict[Any, list[int]] = {}  # queue -> its entries
    for i, (queue, _, _) in enumerate(seen):
        rows.setdefault(queue, []).append(i)
    tscs = np.array([t for _, t, _ in seen], dtype=np.uint64)
    tids = np.zeros(len(seen), dtype=np.int64)
    found = np.zeros(len(seen), dtype=bool)
    for queue, at_list in rows.items():
        at = np.array(at_list, dtype=np.int64)
        tl = session.sb.host.cpus.get(queue[1])
        if tl is None or not len(tl):
            continue
        idx = np.searchsorted(tl.times, tc.tsc_to_perf_time_array(tscs[at]), side="right") - 1
        found[at] = idx >= 0
        tids[at] = tl.tids[np.maximum(idx, 0)]
    where = np.flatnonzero(found)
    got, first = np.unique(tids[where], return_index=True)
    for k in np.argsort(first, kind="stable").tolist():
        tid = int(got[k])
        i = int(where[first[k]])
        vmcs = seen[i][2]
        vi = corr.vmcs_table.get(vmcs)
        if vi is not None and vi.tsc_offset:
            out[tid] = (vmcs, vi.tsc_offset, "measured")
        else:
            out[tid] = (vmcs, 0, "none")
    return out


def _guest_kcore(session: Any, guestkallsyms: str | None) -> Callable[[int], Any]:
    """machine pid -> the guest kernel's code (kcore copies), the guest spaces found when first asked."""
    spaces: GuestSpaces | None = None

    def kcore(machine_pid: int) -> Any:
        nonlocal spaces
        if spaces is None:
            spaces = GuestSpaces(session.pd, session.sb, guestkallsyms and os.path.dirname(guestkallsyms))
        return spaces.kcore(machine_pid)

    return kcore


def vm_trace(session: Any, config: ExportConfig, proc: Any = None) -> VmTrace:
    """What the VM export reads from the trace of ``session`` (read when it asks); ``proc``: the decoding
    process (:func:`decode_process`), which may have measured the VMCSs."""
    return VmTrace(measure_vmcs=lambda: measure_vmcs(session),
                   guest_kcore=_guest_kcore(session, config.guestkallsyms),
                   measured=proc.tail if proc is not None else None)


def decode_process(session: Any, config: ExportConfig) -> Any:
    """The decoding process of ``--jobs N`` (:func:`maybe_process`), or None.  A recording with VCPU
    threads has it measure their VMCSs too (:func:`measure_vmcs`) once it has decoded the trace: there
    it is idle while this process finishes the export, and the measurement (loading its kernels is
    Python) does not take turns with the export for this process's interpreter lock."""
    tail = (lambda: measure_vmcs(session)) if session.sb.hypervisors() else None
    return maybe_process(session, config.jobs, config.decode_process, tail=tail)


def _offload(units: Any, w: Any, config: ExportConfig, summary: ExportSummary) -> DaskCopies | None:
    """With a cluster and a PostgreSQL target, the workers load the samples and calls (each on its own
    session: :class:`DaskCopies`) when each of them reaches the database; else this process does, with
    a warning."""
    if not config.cluster_copy or getattr(w, "dialect", "") != "postgresql":
        return None
    copier = DaskCopies(units, w.worker_params(), w.target)
    why = copier.probe()
    if why is not None:
        summary.warnings.append(f"{units.where}: {why}: the workers only decode, this process loads every table "
                                "(give a database URL the workers reach, not localhost)")
        return None
    w.offload(copier)
    return copier


def export_trace(path: str, target: str, config: ExportConfig,
                 progress: ProgressFn | None = None) -> ExportSummary:
    """Decode ``path`` and write the database at ``target`` (SQLite path, postgresql:// URL, NAME.duckdb or
    parquet:DIR: :func:`ptexport.writers.open_writer`).

    ``progress(samples written, bytes of trace decoded, bytes in the trace or 0)`` is called as batches
    go (dbexport/progress.py)."""
    t0 = _time.perf_counter()
    summary = ExportSummary(target_path(target))  # parquet:DIR shown as DIR
    refuse_if_busy(target)  # at once, not after the trace is opened
    # a dask cluster (--scheduler) is reached before anything is opened: unreachable, nothing written
    cluster = open_cluster(config.scheduler) if config.scheduler else contextlib.nullcontext(None)
    with cluster as units, open_perf_data(path, salvage=config.salvage) as pd:
        guest_kcore = config.guest_kcore or (os.path.dirname(os.path.abspath(config.guestkallsyms))
                                             if config.guestkallsyms else None)
        if config.guest_data:  # the host recording as perf inject --guest-data would write it
            pd = apply_guest_data(pd, config.guest_data)
        dcfg = DecodeConfig(itrace=config.itrace, symfs=config.symfs, buildid_dir=config.buildid_dir,
                            cpus=config.cpus, guest_kcore=guest_kcore, time=config.time, pids=config.pids,
                            tids=config.tids, guest_data=config.guest_data,
                            insn_fetch_marks=False)  # a script: no instruction fetches
        # the cluster's workers checked and warmed (they open the recording) while the sideband is read here
        view = prepare_workers(units, PerfSession, pd.path, dcfg, config.cluster_paths) \
            if units is not None and not getattr(pd, "is_pipe", False) else None
        session = open_session(RecordTee(pd) if getattr(pd, "is_pipe", False) else pd, dcfg)
        if units is not None:
            # the cluster's workers decode the PSB segments; this process joins, merges and exports
            if view is not None:
                view.bind(session)
            proc = None
            summary.cluster_workers = units.workers
            # joined and merged on a thread of this process while the batches before are exported
            batches: Any = Prefetched(session.split_batches(session.iter_batches(config.jobs, units=units)),
                                      _time.perf_counter() - t0)
        else:
            # decoded as the export goes: here with --jobs 1, else by a forked child process on another
            # core (which with --jobs N > 2 has N - 1 workers of its own)
            proc = decode_process(session, config)
            batches = proc if proc is not None else Prefetched(
                session.split_batches(session.iter_batches(config.jobs)), _time.perf_counter() - t0)
        copier: DaskCopies | None = None
        try:
            with open_writer(target, force=config.force) as w:
                summary.leftovers = list(getattr(w, "removed_leftovers", ()))
                copier = _offload(units, w, config, summary) if units is not None else None
                ex = DbExporter(session, w, config, vm_trace(session, config, proc),
                                trees=units.trees() if units is not None and config.cluster_trees else None)
                feed: Iterable[SampleColumns] = batches
                if progress is not None:
                    feed = ProgressBatches(batches, lambda: ex.n_samples,
                                           AuxPosition(session.sb.aux_events, session.timeless), progress)
                try:
                    ex.run(feed, sample_loop(config))
                finally:
                    ex.close()
                if progress is not None:
                    feed.finish()
                summary.decode_seconds = batches.seconds
                summary.rows = {t: w.row_counts[t] for t in w.schema.tables if w.row_counts.get(t)}
                summary.errors = ex.n_errors
                for name, _cpu, value, sev, _desc in ex.stats_rows:
                    if sev == "data_loss":
                        summary.losses[name] = summary.losses.get(name, 0) + value
                summary.lost = sum(summary.losses.values())
                summary.cut = getattr(pd, "cut", None)
                if units is not None:
                    summary.cluster_units = session.decode_stats.units
                    summary.cluster_tree_steps = getattr(ex.calltree, "steps", 0)
            if copier is not None:  # (the writer's finish sends the rows gathered last)
                summary.cluster_copies = copier.batches
        finally:
            if proc is not None:
                proc.close()
            else:
                batches.close()  # before the cluster's client goes: its pending segments are cancelled
    summary.seconds = _time.perf_counter() - t0
    return summary
