"""``ptexport TRACE --db DB``: decode a recording and write the database.

The rows are perf's (``export-to-sqlite.py ... branches calls``) plus our
extensions, produced in the order perf's db-export produces them, because
ids follow from that order:

* synthesized samples, the recording's own SAMPLE records (e.g. ``cycles``)
  and the sideband records are taken in perf's delivery order (a record
  before synthesized samples of the same TSC, as perf's queues run up to
  each event);
* threads are perf's thread table as it stands at each export
  (:mod:`ptexport.pipeline.perfthreads`): a sample's thread is created if
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

The decoder stage knows nothing of SQL and the writer nothing of packets:
this module is where the two meet (DESIGN.md section 2).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ptexport.calltree import make_call_tree, perf_flush_order
from ptexport.errors import PtExportError
from ptexport.export.model import ExportModel
from ptexport.export.writer import open_writer
from ptexport.images.kallsyms import find_kallsyms, kmod_name, load_kallsyms
from ptexport.images.symbols import EMPTY, SymbolTable, load_elf_symbols
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import RecordType
from ptexport.pipeline.perfthreads import PerfComm, PerfThread, PerfThreads
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
_COMM_EXEC = 0x2000
_BATCH = 65536

_SAMPLE_KEYS = ("id", "evsel_id", "machine_id", "thread_id", "comm_id", "dso_id", "symbol_id", "sym_offset", "ip",
                "time", "cpu", "to_dso_id", "to_symbol_id", "to_sym_offset", "to_ip", "branch_type", "in_tx",
                "call_path_id", "insn_count", "cyc_count", "flags")
_TREE_KEYS = ("time", "ip", "addr", "flags", "ref", "thread_id", "cpu", "pid", "tid", "comm_id", "insn_len",
              "insn_cnt", "cyc_cnt", "from_sym", "to_sym", "to_sym_start", "trace_nr")

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
    kallsyms: str | None = None
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
        # perf_session__set_comm_exec: from the attrs, but not for a pipe (then only once a COMM exec arrives)
        self.pt = PerfThreads(comm_exec=not getattr(session.pd, "is_pipe", False)
                              and any(getattr(a, "comm_exec", False) for a in session.pd.attrs))
        self._symtabs: dict[str, SymbolTable] = {}
        self._file_tabs: dict[tuple[str, bytes | None], SymbolTable] = {}
        self._dso_ids: dict[str, int] = {}
        self._sym_ids: dict[tuple[int, int], tuple[int, int]] = {}  # (dso id, sym start) -> (id, start)
        self._unknown: dict[int, dict[int, int]] = {}  # dso id -> {address: symbol id} ("unknown" symbols)
        self._evsel: dict[Any, int] = {}
        self.calltree = make_call_tree(kernel_start=session.kernel_start) if config.calls else None
        if self.calltree is not None:
            self.m.call_paths.pending.clear()  # the call tree numbers call paths, root included
        self.n_samples = 0
        self.switch_rows: list[tuple] = []
        self.error_rows: list[tuple] = []
        self.payload_rows: dict[str, list[tuple]] = {}
        self._samples: dict[str, list[int]] = {k: [] for k in _SAMPLE_KEYS}
        self._tree: dict[str, list[int]] = {k: [] for k in _TREE_KEYS}
        self.kallsyms = None
        self._kmap_range: tuple[int, int] | None = None
        self._map_info: dict[int, tuple] = {}  # id(map entry) -> (entry, dso id, symbols, map_ip base, is kernel)
        self._load_kallsyms()

    # ------------------------------------------------------------ threads, comms

    def _thread_row(self, th: PerfThread, main: PerfThread | None) -> None:
        """perf's db_export__thread."""
        if th.db_id:
            return
        nid = self.m.threads.next_id
        process_id = nid if main is th else (main.db_id if main is not None else 0)
        th.db_id = self.m.threads.get(("thread", id(th)), (self.host, process_id, th.pid, th.tid))

    def _comm_row(self, c: PerfComm, th: PerfThread) -> bool:
        """perf's db_export__comm: True when the comm was new."""
        if c.db_id:
            return False
        c.db_id = self.m.comms.get(("comm", id(c)), (c.name[:15], th.db_id, c.start, bool(c.exec), None))
        return True

    def _comm_thread(self, comm_id: int, thread_id: int) -> None:
        t = self.m.comm_threads
        t.get(("ct", t.next_id), (comm_id, thread_id))

    def export_threads(self, th: PerfThread) -> int:
        """perf's db_export__threads; returns the main thread's exec comm id (0 if none)."""
        main = self.pt.main_thread(th)
        comm = None
        if main is not None:
            self._thread_row(main, main)
            comm = self.pt.exec_comm(main)
            if comm is not None and self._comm_row(comm, main):
                self._comm_thread(comm.db_id, main.db_id)
        if th is not main:
            export_ct = comm is not None and not th.db_id
            self._thread_row(th, main)
            if export_ct:
                self._comm_thread(comm.db_id, th.db_id)
        cur = th.comm
        if cur is not None:
            self._comm_row(cur, th)
        return comm.db_id if comm is not None else 0

    def threads(self, pid: int, tid: int, time: int = 0) -> tuple[int, int]:
        """A sample's thread (created if perf has not seen it): (thread id, main thread's exec comm id)."""
        th = self.pt.findnew(pid, tid)
        comm_id = self.export_threads(th)
        return th.db_id, comm_id

    def _switch_side(self, pid: int, tid: int) -> tuple[int, int, bool]:
        """perf's db_export__pid_tid: (thread id, comm id, is idle); 0s for unknown or comm-less threads."""
        th = self.pt.find(pid, tid)
        if th is None or not th.comm_set:
            return 0, 0, False
        comm_id = self.export_threads(th)
        return th.db_id, comm_id, th.pid == 0 and th.tid == 0

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

    def _dso(self, e: Any, kernel: bool) -> tuple[int, str]:
        """perf's DSO of a map: (dso id, name the symbols are looked up by)."""
        name = e.filename
        if kernel and name.startswith(("[kernel.kallsyms]", "[guest.kernel.kallsyms]")):
            name = name[: name.index("]") + 1]  # perf's kernel DSO ("[kernel.kallsyms]_text" is its map)
            short = long = name
        elif kernel and (name.startswith("/") or name.startswith("[")):
            short, long = kmod_name(name), name  # a module: perf's "[name]" with '-' as '_'
        else:
            short = name.rsplit("/", 1)[-1] if not name.startswith("[") else name
            long = name
        dso = self._dso_ids.get(name)
        if dso is None:
            build_id = self.s.build_id_of(name, e.build_id)
            dso = self.m.dso(self.host, long, short, build_id.hex() if build_id else "")
            self._dso_ids[name] = dso
        return dso, name

    def _kernel_symtab(self, name: str, e: Any) -> SymbolTable:
        """The kernel's or a module's symbols from kallsyms (none without a kallsyms file)."""
        tab = self._symtabs.get(name)
        if tab is None:
            tab = EMPTY
            ks = self.kallsyms
            if ks is not None and name == "[kernel.kallsyms]":
                ref = e.filename[len(name):] or None  # "_text" of "[kernel.kallsyms]_text"
                tab = ks.kernel_table(ref, e.pgoff)
            elif ks is not None and not name.startswith("["):
                tab = ks.module_table(kmod_name(name), e.start)
            self._symtabs[name] = tab
        return tab

    def _load_kallsyms(self) -> None:
        cfg = self.cfg
        path = find_kallsyms(cfg.kallsyms, getattr(self.s.pd, "kcore_dir", None), cfg.symfs,
                             self.s.build_id_of("[kernel.kallsyms]", None), cfg.buildid_dir)
        if path is None:
            return
        try:
            self.kallsyms = load_kallsyms(str(path))
        except PtExportError:
            if cfg.kallsyms:
                raise

    def _file_symtab(self, name: str, build_id: bytes | None) -> SymbolTable:
        key = (name, build_id)
        tab = self._file_tabs.get(key)
        if tab is None:
            tab = self._file_tabs[key] = self._find_file_symtab(name, build_id)
        return tab

    def _find_file_symtab(self, name: str, build_id: bytes | None) -> SymbolTable:
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
        return self._symtab(path)

    def resolve(self, pid: int, ip: int, time: int, kernel: bool | None = None) -> tuple[int, int, int, int]:
        """(dso id, symbol id, symbol offset, symbol start as an address) of ``ip`` (perf's db_ids_from_al).

        An address in a map but in no symbol gets perf's placeholder: a zero-size
        symbol "unknown" at that address, kept in the DSO from then on.
        """
        if not ip:
            return 0, 0, 0, 0
        if kernel is None:
            kernel = ip >= self.s.kernel_start
        e = self.sb.host.map_at(pid, ip, time, kernel=kernel)
        if e is None:
            return 0, 0, 0, 0
        info = self._map_info.get(id(e))
        if info is None or info[0] is not e:
            kdso = kernel and e.filename.startswith(("[kernel.kallsyms]", "[guest.kernel.kallsyms]"))
            if kdso and self._kmap_range is not None and not self._kmap_range[0] <= ip < self._kmap_range[1]:
                return 0, 0, 0, 0  # outside the kernel map as perf fixed it up after loading kallsyms
            dso, name = self._dso(e, kernel)
            if kernel and (name.startswith("[") or (self.kallsyms is not None and name.startswith("/"))):
                tab = self._kernel_symtab(name, e)
            else:
                tab = self._file_symtab(name, self.s.build_id_of(name, e.build_id))
            # perf's map_ip: identity for the kernel map, ip - start for a module map (its pgoff is 0)
            base = 0 if kdso else (e.start if kernel else e.start - e.pgoff)
            if kdso and self._kmap_range is None and len(tab):
                self._kmap_range = (tab.symbols[0].start, tab.symbols[-1].end)  # map__fixup_start/end
            info = self._map_info[id(e)] = (e, dso, tab, base, kdso)
        else:
            _, dso, tab, base, kdso = info
            if kdso and self._kmap_range is not None and not self._kmap_range[0] <= ip < self._kmap_range[1]:
                return 0, 0, 0, 0
        off = ip - base
        sym = tab.find(off)
        if sym is None:
            unknown = self._unknown.setdefault(dso, {})
            sid = unknown.get(off)
            if sid is None:
                sid = self.m.symbols.get(("unknown", dso, off), (dso, off, off, 0, "unknown"))
                unknown[off] = sid
            return dso, sid, 0, ip
        key = (dso, sym.start)
        hit = self._sym_ids.get(key)
        if hit is None:
            sid = self.m.symbol(dso, sym.start, sym.end, sym.name, sym.binding)
            hit = (sid, sym.start)
            self._sym_ids[key] = hit
        return dso, hit[0], off - sym.start, sym.start + base

    def evsel(self, kind: int) -> int:
        eid = self._evsel.get(kind)
        if eid is None:
            name, with_mod = _EVENT_NAMES[kind]
            eid = self.m.evsel(name + (self.modifier if with_mod else ""))
            self._evsel[kind] = eid
        return eid

    # -------------------------------------------------------------------- rows

    def switch(self, rec: Any) -> None:
        """perf's db_export__switch (after Intel PT has seen the switch)."""
        if self.cfg.cpus is not None and rec.cpu is not None and rec.cpu not in self.cfg.cpus:
            return
        time = rec.time or 0
        out = bool(rec.misc & _SWITCH_OUT)
        a_id, a_comm, a_idle = self._switch_side(rec.pid, rec.tid)
        b_id, b_comm, b_idle = 0, 0, False
        if rec.type == RecordType.SWITCH_CPU_WIDE:
            b_id, b_comm, b_idle = self._switch_side(rec.next_prev_pid, rec.next_prev_tid)
        if (not a_id or a_idle) and (not b_id or b_idle):
            return
        if out:
            t_out, c_out, t_in, c_in = a_id, a_comm, b_id, b_comm
        else:
            t_out, c_out, t_in, c_in = b_id, b_comm, a_id, a_comm
        flags = (1 if out else 0) | (2 if out and rec.misc & _SWITCH_OUT_PREEMPT else 0)
        cpu = rec.cpu if rec.cpu is not None else -1
        self.switch_rows.append((len(self.switch_rows) + 1, self.host, time, cpu, t_out, c_out, t_in, c_in, flags))

    def event(self, rec: Any) -> None:
        """One sideband record, as perf's session delivers it (Intel PT first, then the tool)."""
        t = rec.type
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

    def sample_record(self, rec: Any) -> None:
        """A SAMPLE record of the recording (perf exports those beside the synthesized ones)."""
        cpu = rec.cpu if rec.cpu is not None else -1
        if self.cfg.cpus is not None and rec.cpu is not None and rec.cpu not in self.cfg.cpus:
            return
        attr = rec.attr if getattr(rec, "attr", None) is not None else self.s.pd.attr_for_id(rec.id)
        evsel_id = self._evsel.get(("attr", id(attr)))
        if evsel_id is None:
            evsel_id = self.m.evsel(self.s.pd.event_name(attr))
            self._evsel[("attr", id(attr))] = evsel_id
        pid = rec.pid if rec.pid is not None else -1
        tid = rec.tid if rec.tid is not None else -1
        time = rec.time or 0
        thread_id, comm_id = self.threads(pid, tid, time)
        ip = rec.ip or 0
        cpumode = rec.misc & 7
        dso, sym, sym_off, _ = self.resolve(pid, ip, time, kernel=cpumode in (1, 4))
        self.n_samples += 1
        row = {"id": self.n_samples, "evsel_id": evsel_id, "machine_id": self.host, "thread_id": thread_id,
               "comm_id": comm_id, "dso_id": dso, "symbol_id": sym, "sym_offset": sym_off, "ip": ip,
               "time": time, "cpu": cpu}
        for key in self._samples:
            self._samples[key].append(row.get(key, 0))

    def _events(self) -> list[tuple[int, Any]]:
        """(TSC, record) of the sideband records db-export reacts to, in perf's delivery order."""
        pd = self.s.pd
        if isinstance(pd, _RecordTee):  # a pipe, read once: perf's order is by time, stable
            recs = sorted(pd.kept, key=lambda r: r.time or 0)
        else:
            recs = [r for r in pd.ordered_records() if r.type in _SIDEBAND]
        tc = self.s.tc
        if self.s.timeless or tc is None:
            return [(0, r) for r in recs]
        times = np.array([r.time or 0 for r in recs], dtype=np.uint64)
        tscs = tc.perf_time_to_tsc_array(times).tolist() if len(times) else []
        return [(int(t) if r.time else 0, r) for t, r in zip(tscs, recs)]

    def run(self, batches: SampleColumns | Iterable[SampleColumns],
            progress: Callable[[int, int], None] | None = None) -> None:
        """Export samples in perf's order: one :class:`SampleColumns` or its batches (bounded memory)."""
        if isinstance(batches, SampleColumns):
            batches = [batches]
            total = len(batches[0])
        else:
            total = 0  # not known while streaming
        events = self._events()
        samples = self._samples
        tree = self._tree
        j = 0
        n_ev = len(events)
        done = 0
        for cols in batches:
            n = len(cols)
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
            for i in range(n):
                k = kinds[i]
                while j < n_ev and events[j][0] <= tscs[i]:
                    self.event(events[j][1])
                    j += 1
                if k == EV_ERROR:
                    th = self.pt.find(pids[i], tids[i])
                    self.error_rows.append((len(self.error_rows) + 1, 0, offsets[i], codes[i],
                                            cols.error_message(codes[i]), times[i], cpus[i], ips[i],
                                            th.db_id if th is not None else 0, self.host))
                    continue
                time = times[i]
                thread_id, comm_id = self.threads(pids[i], tids[i], time)
                evsel_id = self.evsel(k)
                pid = pids[i]
                dso, sym, sym_off, _ = self.resolve(pid, ips[i], time)
                to_dso, to_sym, to_off, to_start = self.resolve(pid, addrs[i], time) if k == EV_BRANCH \
                    else (0, 0, 0, 0)
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
                        progress(done + i + 1, total)
            done += n
        while j < n_ev:
            self.event(events[j][1])
            j += 1
        self._flush(samples, tree)
        if self.calltree is not None:
            exported = [th for th in self.pt.all if th.db_id]
            self.calltree.flush_all(perf_flush_order([th.db_id for th in exported], [th.tid for th in exported]))
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
            freq_khz = cbr * self._cbr2khz()
            if self.w.dialect == "sqlite":
                # export-to-sqlite.py binds str() of Python 3 true divisions: SQLite's integer affinity
                # keeps 2900.5 REAL and makes 3000.0 INTEGER; bind the same text.
                mhz: str | int = str((freq_khz + 500) / 1000)
                percent: str | int = str(((cbr * 1000 / ratio) + 5) / 10) if ratio else 0
            else:  # export-to-postgresql.py packs int() of the same values
                mhz = int((freq_khz + 500) / 1000)
                percent = int(((cbr * 1000 / ratio) + 5) / 10) if ratio else 0
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


_SIDEBAND = (RecordType.SAMPLE, RecordType.COMM, RecordType.FORK, RecordType.MMAP, RecordType.MMAP2,
             RecordType.SWITCH, RecordType.SWITCH_CPU_WIDE)


class _RecordTee:
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


class _Timed:
    """An iterator of sample batches that adds up the time spent producing them (decoding)."""

    def __init__(self, it: Iterable[SampleColumns], seconds: float = 0.0) -> None:
        self._it = iter(it)
        self.seconds = seconds

    def __iter__(self) -> Iterator[SampleColumns]:
        return self

    def __next__(self) -> SampleColumns:
        t = _time.perf_counter()
        try:
            return next(self._it)
        finally:
            self.seconds += _time.perf_counter() - t


def export_trace(path: str, target: str, config: ExportConfig,
                 progress: Callable[[int, int], None] | None = None) -> ExportSummary:
    """Decode ``path`` and write the database at ``target`` (SQLite path or postgresql:// URL)."""
    t0 = _time.perf_counter()
    summary = ExportSummary(target)
    with open_perf_data(path) as pd:
        session = open_session(_RecordTee(pd) if getattr(pd, "is_pipe", False) else pd, DecodeConfig(itrace=config.itrace, symfs=config.symfs,
                                                buildid_dir=config.buildid_dir, cpus=config.cpus))
        batches = _Timed(session.iter_batches(), _time.perf_counter() - t0)  # decoded as the export goes
        with open_writer(target, force=config.force) as w:
            ex = _Exporter(session, w, config)
            ex.run(batches, progress)
            summary.decode_seconds = batches.seconds
            summary.rows = {"samples": ex.n_samples, "context_switches": len(ex.switch_rows),
                            "decode_errors": len(ex.error_rows), "threads": len(ex.m.threads),
                            "symbols": len(ex.m.symbols), "dsos": len(ex._dso_ids)}
            summary.errors = len(ex.error_rows)
    summary.seconds = _time.perf_counter() - t0
    return summary
