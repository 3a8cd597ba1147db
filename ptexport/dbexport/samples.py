"""The per-sample export loop: the reference the batch loop (:mod:`ptexport.dbexport.samples_compiled`) is checked against.

One Python iteration per sample, in perf's order: the sideband records due
before it, then its thread (:meth:`MachineState.threads`), event, symbols
(lookups of ``ip`` then, for a branch, ``addr`` through perf's per-DSO
last-lookup cache, then their ids: :meth:`MachineState.find` /
:meth:`MachineState.db_ids`), its row, its payload row and its call-tree
input.  Slow, and written to be obviously perf's db-export; select
it with ``ExportConfig(reference=True)``.  Its twin, the same function by the same name:
:func:`ptexport.dbexport.samples_compiled.export_samples`.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from ptexport.samples.columns import (
    EV_BRANCH,
    EV_CBR,
    EV_ERROR,
    EV_EVT,
    EV_EXSTOP,
    EV_IFLAG,
    EV_MWAIT,
    EV_PSB,
    EV_PTWRITE,
    EV_PWRE,
    EV_PWRX,
    SampleColumns,
)
from ptexport.dbexport.exporter import SAMPLE_KEYS, TREE_KEYS, DbExporter
from ptexport.dbexport.payloads import evt_row, iflag_row
from ptexport.samples.flags import PERF_BRANCH_MASK, IpFlag

_IN_TX = int(IpFlag.IN_TX)
_BATCH = 65536

def _payload(ex: DbExporter, rows: dict[str, list[tuple]], kind: int, sid: int, payload: int, code: int) -> None:
    if kind == EV_PSB:
        rows.setdefault("psb", []).append((sid, payload))
    elif kind == EV_PTWRITE:
        rows.setdefault("ptwrite", []).append((sid, payload, bool(code)))
    elif kind == EV_CBR:
        rows.setdefault("cbr", []).append(ex.cbr_row(sid, payload))
    elif kind == EV_MWAIT:
        rows.setdefault("mwait", []).append((sid, payload & 0xFF, (payload >> 32) & 0x3))
    elif kind == EV_PWRE:
        rows.setdefault("pwre", []).append((sid, (payload >> 12) & 0xF, (payload >> 8) & 0xF, (payload >> 7) & 1))
    elif kind == EV_PWRX:
        rows.setdefault("pwrx", []).append((sid, payload & 0xF, (payload >> 4) & 0xF, (payload >> 8) & 0xF))
    elif kind == EV_EXSTOP:
        rows.setdefault("exstop", []).append((sid, bool(payload)))
    elif kind == EV_EVT:
        rows.setdefault("evt", []).append(evt_row(sid, payload))
    elif kind == EV_IFLAG:
        rows.setdefault("iflag", []).append(iflag_row(sid, payload))


def _arrays(d: dict[str, list[int]], unsigned: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.uint64 if k in unsigned else np.int64) for k, v in d.items()}


def export_samples(ex: DbExporter, batches: Iterable[SampleColumns],
                   progress: Callable[[int, int], None] | None, total: int) -> None:
    """Export ``batches`` through ``ex`` one sample at a time (host machine only: samples carry no machine yet)."""
    feed = ex.feed
    assert feed is not None  # DbExporter.run sets it before it runs the loop
    st = ex.machines[0]
    tree: dict[str, list[int]] | None = {k: [] for k in TREE_KEYS} if ex.calltree is not None else None
    samples: dict[str, list[int]] = {k: [] for k in SAMPLE_KEYS}
    payload_rows: dict[str, list[tuple]] = {}
    done = 0

    def flush() -> None:
        ex.write_batch(_arrays(samples, ("ip", "to_ip")) if samples["id"] else None,
                       _arrays(tree, ("ip", "addr", "to_sym_start")) if tree is not None and tree["ref"] else None,
                       payload_rows)
        for v in samples.values():
            v.clear()
        if tree is not None:
            for v in tree.values():
                v.clear()
        payload_rows.clear()

    for cols in batches:
        n = len(cols)
        kinds = cols.kind.tolist()
        tscs = cols.tsc.tolist()
        times = cols.time.tolist()
        when = ex.lookup_times(cols).tolist()  # when a sample's addresses are resolved
        cpus = cols.cpu.tolist()
        pids = cols.pid.tolist()
        tids = cols.tid.tolist()
        ips = cols.ip.tolist()
        addrs = cols.addr.tolist()
        flags = cols.flags.tolist()
        insn = cols.insn_cnt.tolist()
        cyc = cols.cyc_cnt.tolist()
        codes = cols.code.tolist()
        payloads = cols.payload.tolist()
        insn_len = cols.insn_len.tolist()
        trace_nr = cols.trace_nr.tolist()
        for i in range(n):
            k = kinds[i]
            for rec in feed.take_upto(tscs[i])[1]:
                ex.event(rec)
            if k == EV_ERROR:
                th = st.pt.find(pids[i], tids[i])
                ex.error_row(st, i, cols, th.db_id if th is not None else 0)
                continue
            time = times[i]
            pid = pids[i]
            thread_id, comm_id = st.threads(pid, tids[i])
            evsel_id = ex.evsel(k)
            # perf script: machine__resolve (ip), thread__resolve (addr, branches only), then db-export's
            # db_ids_from_al for each, which may insert an "unknown" into a DSO whose cached last
            # lookup (perhaps this addr) it then becomes
            found = st.find(pid, ips[i], when[i])
            to_found = st.find(pid, addrs[i], when[i]) if k == EV_BRANCH else None
            dso, sym, sym_off, _ = st.db_ids(found)
            to_dso, to_sym, to_off, to_start = st.db_ids(to_found)
            ex.n_samples += 1
            sid = ex.n_samples
            f = flags[i]
            for key, val in (("id", sid), ("evsel_id", evsel_id), ("machine_id", st.machine_id),
                             ("thread_id", thread_id), ("comm_id", comm_id), ("dso_id", dso), ("symbol_id", sym),
                             ("sym_offset", sym_off), ("ip", ips[i]), ("time", time), ("cpu", cpus[i]),
                             ("to_dso_id", to_dso), ("to_symbol_id", to_sym), ("to_sym_offset", to_off),
                             ("to_ip", addrs[i]), ("branch_type", f & PERF_BRANCH_MASK),
                             ("in_tx", 1 if f & _IN_TX else 0), ("call_path_id", 0), ("insn_count", insn[i]),
                             ("cyc_count", cyc[i]), ("flags", f)):
                samples[key].append(val)
            _payload(ex, payload_rows, k, sid, payloads[i], codes[i])
            if k == EV_BRANCH and tree is not None:
                for key, val in (("time", time), ("ip", ips[i]), ("addr", addrs[i]), ("flags", f), ("ref", sid),
                                 ("thread_id", thread_id), ("cpu", cpus[i]), ("pid", pid), ("tid", tids[i]),
                                 ("comm_id", comm_id), ("insn_len", insn_len[i]), ("insn_cnt", insn[i]),
                                 ("cyc_cnt", cyc[i]), ("from_sym", sym), ("to_sym", to_sym),
                                 ("to_sym_start", to_start), ("trace_nr", trace_nr[i])):
                    tree[key].append(val)
            if len(samples["id"]) >= _BATCH:
                flush()
                if progress:
                    progress(done + i + 1, total)
        done += n
    for rec in feed.rest():
        ex.event(rec)
    flush()
