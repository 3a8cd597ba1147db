"""``ptexport TRACE --db DB``: decode a recording and write the database.

The rows are perf's (``export-to-sqlite.py ... branches calls``) plus our
extensions, produced in the order perf's db-export produces them, because
ids follow from that order:

* samples and context switches are taken in time order (a switch record
  before samples of the same TSC, as perf's queues run up to each event);
* a thread, its main thread, comms and comm_threads, a DSO, a symbol and a
  selected event get their id when first referenced (perf's
  ``db_export__threads``: main thread first, its exec comm with a
  comm_threads row, then the thread, then the thread's current comm);
* ``samples.comm_id`` and ``calls.comm_id`` are the main thread's exec comm;
  symbols live in file-offset space (``ip - map.start + map.pgoff``);
* branch samples feed the call tree (perf's thread-stack) in export order;
  at the end every stack is flushed in perf's thread-table order.

The decoder stage knows nothing of SQL and the writer nothing of packets:
this module is where the two meet (DESIGN.md section 2).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ptexport.calltree import make_call_tree
from ptexport.errors import PtExportError
from ptexport.export.model import ExportModel
from ptexport.export.writer import open_writer
from ptexport.images.symbols import EMPTY, SymbolTable, load_elf_symbols
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import RecordType
from ptexport.pipeline.perfsession import (
    EV_BRANCH,
    EV_CBR,
    EV_ERROR,
    EV_EXSTOP,
    EV_INSTRUCTION,
    EV_MWAIT,
    EV_PSB,
    EV_PTWRITE,
    EV_PWRE,
    EV_PWRX,
    EV_TRANSACTION,
    DecodeConfig,
    SampleColumns,
    open_session,
)
from ptexport.samples.flags import PERF_BRANCH_MASK, IpFlag
from ptexport.samples.itrace import ItraceOptions

_IN_TX = int(IpFlag.IN_TX)
_SWITCH_OUT = 0x2000
_SWITCH_OUT_PREEMPT = 0x4000
_BATCH = 65536

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
}


@dataclass
class ExportConfig:
    itrace: ItraceOptions
    calls: bool = True
    force: bool = False
    symfs: str | None = None
    buildid_dir: str | None = None
    cpus: frozenset[int] | None = None
    pids: frozenset[int] | None = None
    tids: frozenset[int] | None = None
    time_range: tuple[int | None, int | None] | None = None


@dataclass
class ExportSummary:
    target: str
    rows: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    lost: int = 0
    seconds: float = 0.0
    decode_seconds: float = 0.0


def _modifier(attr: Any) -> str:
    """perf's event-name modifier for exclude bits (``:u``, ``:k``)."""
    mods = ""
    if attr.exclude_kernel and not attr.exclude_user:
        mods += "u"
    elif attr.exclude_user and not attr.exclude_kernel:
        mods += "k"
    if attr.exclude_hv and not (attr.exclude_kernel or attr.exclude_user):
        pass
    return f":{mods}" if mods else ""


class _Exporter:
    """The db-export state of one run: ids and rows, in perf's order."""

    def __init__(self, session: Any, writer: Any, config: ExportConfig) -> None:
        self.s = session
        self.sb = session.sb
        self.w = writer
        self.cfg = config
        self.m = ExportModel()
        self.host = self.m.machine(-1, "")
        info = session.info
        pt_attr = next((a for a in session.pd.attrs if a.type == info.pmu_type), None)
        self.modifier = _modifier(pt_attr) if pt_attr is not None else ""
        self._thread_ids: dict[int, int] = {}  # Thread.uid -> db id
        self._thread_tid: dict[int, int] = {}  # db id -> tid
        self._comm_ids: dict[tuple[int, int], int] = {}  # (thread uid, comm start) -> db id
        self._exec_of: dict[int, int] = {}  # thread db id -> exec comm db id
        self._symtabs: dict[str, SymbolTable] = {}
        self._dso_ids: dict[str, int] = {}
        self._sym_ids: dict[tuple[int, int], tuple[int, int]] = {}  # (dso id, sym start) -> (id, start)
        self._evsel: dict[int, int] = {}
        self.calltree = make_call_tree(kernel_start=session.kernel_start) if config.calls else None
        if self.calltree is not None:
            self.m.call_paths.pending.clear()  # the call tree numbers call paths, root included
        self.n_samples = 0
        self.switch_rows: list[tuple] = []
        self.error_rows: list[tuple] = []
        self.payload_rows: dict[str, list[tuple]] = {}

    # ------------------------------------------------------------ threads, comms

    def _comm_row(self, thread_uid: int, thread_db: int, c: Any) -> int:
        key = (thread_uid, c.start)
        cid = self._comm_ids.get(key)
        if cid is None:
            cid = self.m.comms.get(key, (c.comm[:15], thread_db, c.start, bool(c.exec), None))
            self._comm_ids[key] = cid
        return cid

    def _thread_row(self, t: Any, main_db: int | None) -> tuple[int, bool]:
        tid_db = self._thread_ids.get(t.uid)
        if tid_db is not None:
            return tid_db, False
        nid = self.m.threads.next_id
        process_id = main_db if main_db is not None else nid
        tid_db = self.m.threads.get(("uid", t.uid), (self.host, process_id, t.pid, t.tid))
        self._thread_ids[t.uid] = tid_db
        self._thread_tid[tid_db] = t.tid
        return tid_db, True

    def threads(self, pid: int, tid: int, time: int) -> tuple[int, int]:
        """perf's db_export__threads: (thread id, main thread's exec comm id)."""
        if tid < 0:
            return 0, 0
        t = self.sb.thread(tid, time)
        if t is None:
            t = self.sb.host.thread(tid, time)
        if t is None:
            return 0, 0
        main = self.sb.thread(t.pid, time) if t.pid >= 0 and t.pid != t.tid else t
        comm_id = 0
        main_db = None
        if main is not None:
            main_db, _ = self._thread_row(main, None)
            ec = main.exec_comm(time)
            if ec is not None:
                key = (main.uid, ec.start)
                if key not in self._comm_ids:
                    comm_id = self._comm_row(main.uid, main_db, ec)
                    self.m.comm_threads.get((comm_id, main_db))
                else:
                    comm_id = self._comm_ids[key]
        tdb = main_db
        if t is not main:
            tdb, new = self._thread_row(t, main_db)
            if new and comm_id:
                self.m.comm_threads.get((comm_id, tdb))
        cur = t.comm_at(time)
        if cur is not None:
            self._comm_row(t.uid, tdb, cur)
        return tdb or 0, comm_id

    # -------------------------------------------------------------- dsos, symbols

    def _symtab(self, path: str | None) -> SymbolTable:
        if path is None:
            return EMPTY
        tab = self._symtabs.get(path)
        if tab is None:
            try:
                tab = load_elf_symbols(path)
            except PtExportError:
                tab = EMPTY
            self._symtabs[path] = tab
        return tab

    def resolve(self, pid: int, ip: int, time: int) -> tuple[int, int, int, int]:
        """(dso id, symbol id, symbol offset, symbol start as an address) of ``ip``."""
        if not ip:
            return 0, 0, 0, 0
        kernel = ip >= self.s.kernel_start
        e = self.sb.host.map_at(pid, ip, time, kernel=kernel)
        if e is None:
            return 0, 0, 0, 0
        name = e.filename
        build_id = self.s.build_id_of(name, e.build_id)
        dso = self._dso_ids.get(name)
        if dso is None:
            short = name.rsplit("/", 1)[-1] if not name.startswith("[") else name
            dso = self.m.dso(self.host, name, short, build_id.hex() if build_id else "")
            self._dso_ids[name] = dso
        obj = self.s.objects.get(name, build_id)
        path = None
        if obj.data is not None:
            for cand in self.s.objects.candidates(name, build_id):
                try:
                    open(cand, "rb").close()
                    path = cand
                    break
                except OSError:
                    continue
        off = ip - e.start + e.pgoff
        sym = self._symtab(path).find(off)
        if sym is None:
            return dso, 0, 0, 0
        key = (dso, sym.start)
        hit = self._sym_ids.get(key)
        if hit is None:
            sid = self.m.symbol(dso, sym.start, sym.end, sym.name, sym.binding)
            hit = (sid, sym.start)
            self._sym_ids[key] = hit
        return dso, hit[0], off - sym.start, sym.start - e.pgoff + e.start

    def evsel(self, kind: int) -> int:
        eid = self._evsel.get(kind)
        if eid is None:
            name, with_mod = _EVENT_NAMES[kind]
            eid = self.m.evsel(name + (self.modifier if with_mod else ""))
            self._evsel[kind] = eid
        return eid

    # -------------------------------------------------------------------- rows

    def switch(self, rec: Any) -> None:
        time = rec.time or 0
        out = bool(rec.misc & _SWITCH_OUT)
        if rec.type == RecordType.SWITCH_CPU_WIDE:
            other = (rec.next_prev_pid, rec.next_prev_tid)
        else:
            other = (-1, -1)
        me = (rec.pid, rec.tid)
        th_out, th_in = (me, other) if out else (other, me)
        t_out, c_out = self.threads(th_out[0], th_out[1], time)
        t_in, c_in = self.threads(th_in[0], th_in[1], time)
        flags = (1 if out else 0) | (2 if rec.misc & _SWITCH_OUT_PREEMPT else 0)
        cpu = rec.cpu if rec.cpu is not None else -1
        self.switch_rows.append((len(self.switch_rows) + 1, self.host, time, cpu, t_out, c_out, t_in, c_in, flags))

    def run(self, cols: SampleColumns, progress: Callable[[int, int], None] | None = None) -> None:
        n = len(cols)
        switches = [r for r in self.s.switches if r.time is not None]
        tc = self.s.tc
        sw_tsc = [tc.perf_time_to_tsc(r.time) for r in switches] if not self.s.timeless else [0] * len(switches)
        kinds = cols.kind.tolist()
        tscs = cols.tsc.tolist()
        times = cols.time.tolist()
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
        offsets = cols.offset.tolist()
        insn_len = cols.insn_len.tolist()
        trace_nr = cols.trace_nr.tolist()
        samples: dict[str, list[int]] = {k: [] for k in (
            "id", "evsel_id", "machine_id", "thread_id", "comm_id", "dso_id", "symbol_id", "sym_offset", "ip",
            "time", "cpu", "to_dso_id", "to_symbol_id", "to_sym_offset", "to_ip", "branch_type", "in_tx",
            "call_path_id", "insn_count", "cyc_count", "flags")}
        tree: dict[str, list[int]] = {k: [] for k in (
            "time", "ip", "addr", "flags", "ref", "thread_id", "cpu", "pid", "tid", "comm_id", "insn_len",
            "insn_cnt", "cyc_cnt", "from_sym", "to_sym", "to_sym_start", "trace_nr")}
        j = 0
        for i in range(n):
            k = kinds[i]
            while j < len(switches) and sw_tsc[j] <= tscs[i]:
                self.switch(switches[j])
                j += 1
            if k == EV_ERROR:
                t_db = self._thread_ids.get(getattr(self.sb.thread(tids[i], times[i]), "uid", -1), 0)
                self.error_rows.append((len(self.error_rows) + 1, 0, offsets[i], codes[i],
                                        cols.error_message(codes[i]), times[i], cpus[i], ips[i], t_db, self.host))
                continue
            time = times[i]
            thread_id, comm_id = self.threads(pids[i], tids[i], time)
            evsel_id = self.evsel(k)
            pid = pids[i]
            dso, sym, sym_off, _ = self.resolve(pid, ips[i], time)
            to_dso, to_sym, to_off, to_start = self.resolve(pid, addrs[i], time)
            self.n_samples += 1
            sid = self.n_samples
            f = flags[i]
            for key, val in (("id", sid), ("evsel_id", evsel_id), ("machine_id", self.host),
                             ("thread_id", thread_id), ("comm_id", comm_id), ("dso_id", dso), ("symbol_id", sym),
                             ("sym_offset", sym_off), ("ip", ips[i]), ("time", time), ("cpu", cpus[i]),
                             ("to_dso_id", to_dso), ("to_symbol_id", to_sym), ("to_sym_offset", to_off),
                             ("to_ip", addrs[i]), ("branch_type", f & PERF_BRANCH_MASK),
                             ("in_tx", 1 if f & _IN_TX else 0), ("call_path_id", 0), ("insn_count", insn[i]),
                             ("cyc_count", cyc[i]), ("flags", f)):
                samples[key].append(val)
            self._payload(k, sid, payloads[i], codes[i])
            if k == EV_BRANCH and self.calltree is not None:
                for key, val in (("time", time), ("ip", ips[i]), ("addr", addrs[i]), ("flags", f), ("ref", sid),
                                 ("thread_id", thread_id), ("cpu", cpus[i]), ("pid", pid), ("tid", tids[i]),
                                 ("comm_id", comm_id), ("insn_len", insn_len[i]), ("insn_cnt", insn[i]),
                                 ("cyc_cnt", cyc[i]), ("from_sym", sym), ("to_sym", to_sym),
                                 ("to_sym_start", to_start), ("trace_nr", trace_nr[i])):
                    tree[key].append(val)
            if len(samples["id"]) >= _BATCH:
                self._flush(samples, tree)
                if progress:
                    progress(i + 1, n)
        while j < len(switches):
            self.switch(switches[j])
            j += 1
        self._flush(samples, tree)
        if self.calltree is not None:
            self.calltree.flush_all(self._perf_thread_order())
            self._write_calls()
        self.m.flush(self.w)
        if self.switch_rows:
            self.w.write_rows("context_switches", self.switch_rows)
        if self.error_rows:
            self.w.write_rows("decode_errors", self.error_rows)
        for table, rows in self.payload_rows.items():
            self.w.write_rows(table, rows)

    def _payload(self, kind: int, sid: int, payload: int, code: int) -> None:
        if kind == EV_PSB:
            self.payload_rows.setdefault("psb", []).append((sid, payload))
        elif kind == EV_PTWRITE:
            self.payload_rows.setdefault("ptwrite", []).append((sid, payload, bool(code)))
        elif kind == EV_CBR:
            cbr = payload & 0xFF
            ratio = self.s.params.max_non_turbo_ratio
            percent = (cbr * 100 + ratio // 2) // ratio if ratio else 0
            mhz = (cbr * self._cbr2khz() + 500) // 1000
            self.payload_rows.setdefault("cbr", []).append((sid, cbr, mhz, percent))
        elif kind == EV_MWAIT:
            self.payload_rows.setdefault("mwait", []).append((sid, payload & 0xFF, (payload >> 32) & 0x3))
        elif kind == EV_PWRE:
            self.payload_rows.setdefault("pwre", []).append(
                (sid, (payload >> 12) & 0xF, (payload >> 8) & 0xF, (payload >> 7) & 1))
        elif kind == EV_PWRX:
            self.payload_rows.setdefault("pwrx", []).append(
                (sid, payload & 0xF, (payload >> 4) & 0xF, (payload >> 8) & 0xF))
        elif kind == EV_EXSTOP:
            self.payload_rows.setdefault("exstop", []).append((sid, bool(payload)))

    def _cbr2khz(self) -> int:
        tc = self.s.tc
        if not tc or not tc.time_mult:
            return 0
        tsc_freq = ((1_000_000_000 << tc.time_shift) // tc.time_mult) if tc.time_mult else 0
        ratio = self.s.params.max_non_turbo_ratio
        return tsc_freq // ratio // 1000 if ratio else 0

    def _perf_thread_order(self) -> list[int]:
        """perf flushes thread stacks in its thread-table order: tid % 256 buckets, then tid."""
        return [db for _b, _t, db in sorted(((tid % 256 if tid >= 0 else 0), tid, db)
                                            for db, tid in self._thread_tid.items())]

    def _flush(self, samples: dict[str, list[int]], tree: dict[str, list[int]]) -> None:
        self.m.flush(self.w)
        if samples["id"]:
            self.w.write_samples({k: np.asarray(v, dtype=np.uint64 if k in ("ip", "to_ip") else np.int64)
                                  for k, v in samples.items()})
            for v in samples.values():
                v.clear()
        if self.calltree is not None and tree["ref"]:
            self.calltree.process_batch({k: np.asarray(v, dtype=np.uint64 if k in ("ip", "addr", "to_sym_start")
                                                       else np.int64) for k, v in tree.items()})
            for v in tree.values():
                v.clear()
            self._write_calls()

    def _write_calls(self) -> None:
        paths = self.calltree.take_call_paths()
        if len(paths.get("id", ())):
            self.w.write_call_paths(paths)
        calls = self.calltree.take_calls()
        if len(calls["id"]):
            self.w.write_calls(calls)


def export_trace(path: str, target: str, config: ExportConfig,
                 progress: Callable[[int, int], None] | None = None) -> ExportSummary:
    """Decode ``path`` and write the database at ``target`` (SQLite path or postgresql:// URL)."""
    t0 = _time.perf_counter()
    summary = ExportSummary(target)
    with open_perf_data(path) as pd:
        session = open_session(pd, DecodeConfig(itrace=config.itrace, symfs=config.symfs,
                                                buildid_dir=config.buildid_dir, cpus=config.cpus))
        cols = session.decode()
        summary.decode_seconds = _time.perf_counter() - t0
        with open_writer(target, force=config.force) as w:
            ex = _Exporter(session, w, config)
            ex.run(cols, progress)
            summary.rows = {"samples": ex.n_samples, "context_switches": len(ex.switch_rows),
                            "decode_errors": len(ex.error_rows), "threads": len(ex._thread_ids),
                            "symbols": len(ex._sym_ids), "dsos": len(ex._dso_ids)}
            summary.errors = len(ex.error_rows)
    summary.seconds = _time.perf_counter() - t0
    return summary
