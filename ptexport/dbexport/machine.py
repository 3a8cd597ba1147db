"""One machine's db-export state: its thread table, address spaces and DSO/symbol ids.

perf keeps a ``struct machine`` per machine (the host, each guest): its own
threads, maps and kernel symbols.  :class:`MachineState` is that, as
db-export sees it while events arrive.  The exporter holds one per machine
(``DbExporter.machines``, index 0 is the host) and every per-sample lookup is
keyed by the machine's index first, so guests plug in without touching the
per-sample code:

* ``machine_id`` is the ``machines`` row id, ``pid`` perf's machine pid (-1
  for the host, the hypervisor's pid for a guest), ``sb`` the sideband
  :class:`~ptexport.sideband.model.Machine` whose maps are looked up, ``pt``
  its :class:`~ptexport.dbexport.threads.PerfThreads`;
* :meth:`threads` / :meth:`export_threads` / :meth:`switch_side` are perf's
  ``db_export__threads`` and ``db_export__pid_tid`` on this machine's table;
* :meth:`lookup` is perf's map and symbol lookup of an address in this
  machine's address spaces (DSO ids are per machine, as perf's DSOs are),
  :meth:`db_ids` perf's ``db_ids_from_al`` on its answer (an "unknown" symbol
  where there is none), :meth:`resolve` the two; :meth:`find` is
  :meth:`lookup` through perf's per-DSO last-lookup cache, which
  ``db_ids_from_al`` can leave answering an address with an "unknown" below
  it (the per-sample export uses it; the batch export follows the cache in
  :class:`~ptexport.dbexport.samples_compiled.DsoLastFind`);
* :meth:`user_epochs` / :meth:`kernel_epochs` number the states of an
  address space over time: two samples of one process with the same epoch see
  the same maps, so ``resolve`` gives them the same answer for the same
  address (what lets the vectorized export resolve each distinct
  (machine, space, epoch, address) once).

Kernel symbols (kallsyms) are loaded the first time a kernel map is resolved,
so traces without kernel addresses do not pay for parsing them.
"""

from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np

from ptexport.errors import PtExportError
from ptexport.writers.model import ExportModel
from ptexport.images.kallsyms import kmod_name
from ptexport.images.symbols import EMPTY, OPEN_END, Symbol, SymbolTable, load_elf_symbols
from ptexport.dbexport.threads import PerfComm, PerfThread, PerfThreads

_KERNEL_DSOS = ("[kernel.kallsyms]", "[guest.kernel.kallsyms]")
_NONE = (0, 0, 0, 0)
_I64_MAX = (1 << 63) - 1

# The symbol a lookup found: None (no symbol, no "unknown" there yet), an "unknown"'s id, or a
# symbol of the DSO's table with its end (as perf 6.1 exports it).
Hit = Union[None, int, tuple[Symbol, int]]
Found = tuple[int, int, int, Hit]  # (dso id, address in the DSO, map base, hit); see MachineState.lookup


class MachineState:
    """db-export state of one machine (see the module docstring for the interface)."""

    def __init__(self, model: ExportModel, session: Any, *, pid: int, root_dir: str, sb: Any,
                 pt: PerfThreads, kernel_start: int, load_kallsyms: Callable[[], Any],
                 elf_tabs: dict[str, SymbolTable]) -> None:
        self.m = model
        self.s = session
        self.pid = pid
        self.machine_id = model.machine(pid, root_dir)
        self.sb = sb
        self.pt = pt
        self.kernel_start = kernel_start
        self._load_kallsyms = load_kallsyms
        self._kallsyms_loaded = False
        self._kallsyms: Any = None
        self._elf_tabs = elf_tabs  # shared by machines: an ELF file's symbols do not depend on who maps it
        self._symtabs: dict[str, SymbolTable] = {}  # kernel and module tables of this machine
        self._file_tabs: dict[tuple[str, bytes | None, bool], SymbolTable] = {}
        self.dso_ids: dict[str, int] = {}
        self._sym_ids: dict[tuple[int, int], tuple[int, int]] = {}  # (dso id, sym start) -> (id, start)
        self._unknown: dict[int, dict[int, int]] = {}  # dso id -> {address: symbol id} ("unknown" symbols)
        self.sym_starts: dict[int, int] = {}  # symbol id -> start in its DSO (map_ip space)
        self.new_unknowns = 0  # "unknown" symbols made so far (a caller sees whether a lookup made one)
        self._last_find: dict[int, tuple[int, Hit]] = {}  # dso id -> perf's last_find_result (find / db_ids)
        self.kmap_range: tuple[int, int] | None = None
        self._map_info: dict[int, tuple] = {}  # id(map entry) -> (entry, dso id, symbols, map_ip base, is kernel)
        self._changes: dict[int | None, np.ndarray] = {}  # pid (None: kernel) -> sorted map change times

    # ------------------------------------------------------------ threads, comms

    def _thread_row(self, th: PerfThread, main: PerfThread | None) -> None:
        """perf's db_export__thread."""
        if th.db_id:
            return
        nid = self.m.threads.next_id
        process_id = nid if main is th else (main.db_id if main is not None else 0)
        th.db_id = self.m.threads.get(("thread", id(th)), (self.machine_id, process_id, th.pid, th.tid))

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

    def threads(self, pid: int, tid: int) -> tuple[int, int]:
        """A sample's thread (created if perf has not seen it): (thread id, main thread's exec comm id).

        Calling it twice in a row with the same (pid, tid) gives the same answer and
        changes nothing the second time (what the vectorized export relies on).
        """
        th = self.pt.findnew(pid, tid)
        comm_id = self.export_threads(th)
        return th.db_id, comm_id

    def switch_side(self, pid: int, tid: int) -> tuple[int, int, bool]:
        """perf's db_export__pid_tid: (thread id, comm id, is idle); 0s for unknown or comm-less threads."""
        th = self.pt.find(pid, tid)
        if th is None or not th.comm_set:
            return 0, 0, False
        comm_id = self.export_threads(th)
        return th.db_id, comm_id, th.pid == 0 and th.tid == 0

    # -------------------------------------------------------------- dsos, symbols

    @property
    def kallsyms(self) -> Any:
        if not self._kallsyms_loaded:
            self._kallsyms_loaded = True
            self._kallsyms = self._load_kallsyms()
        return self._kallsyms

    def _elf_symtab(self, path: str | None, kernel: bool = False) -> SymbolTable:
        """An ELF file's symbols (a kernel module's: names not demangled, perf's demangle_kernel)."""
        if path is None:
            return EMPTY
        key = path if not kernel else f"{path}\0kernel"
        tab = self._elf_tabs.get(key)
        if tab is None:
            try:
                tab = load_elf_symbols(path, demangled=not kernel)
            except PtExportError:
                tab = EMPTY
            self._elf_tabs[key] = tab
        return tab

    def _dso(self, e: Any, kernel: bool) -> tuple[int, str]:
        """perf's DSO of a map: (dso id, name the symbols are looked up by)."""
        name = e.filename
        if kernel and name.startswith(_KERNEL_DSOS):
            name = name[: name.index("]") + 1]  # perf's kernel DSO ("[kernel.kallsyms]_text" is its map)
            short = long = name
        elif kernel and (name.startswith("/") or name.startswith("[")):
            short, long = kmod_name(name), name  # a module: perf's "[name]" with '-' as '_'
        else:
            short = name.rsplit("/", 1)[-1] if not name.startswith("[") else name
            long = name
        dso = self.dso_ids.get(name)
        if dso is None:
            build_id = self.s.build_id_of(name, e.build_id)
            dso = self.m.dso(self.machine_id, long, short, build_id.hex() if build_id else "")
            self.dso_ids[name] = dso
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

    def _file_symtab(self, name: str, build_id: bytes | None, kernel: bool = False) -> SymbolTable:
        key = (name, build_id, kernel)
        tab = self._file_tabs.get(key)
        if tab is None:
            tab = self._file_tabs[key] = self._find_file_symtab(name, build_id, kernel)
        return tab

    def _find_file_symtab(self, name: str, build_id: bytes | None, kernel: bool = False) -> SymbolTable:
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
        return self._elf_symtab(path, kernel)

    def lookup(self, pid: int, ip: int, time: int, kernel: bool | None = None) -> Found | None:
        """perf's thread__find_map + dso__find_symbol without the DSO's last-lookup cache (what the
        symbol tree answers): ``(dso id, address in the DSO (map_ip), map base, symbol)`` or None
        outside every map.  The symbol is the :data:`Hit` the address falls in: None when it has
        none (and no "unknown" yet); nothing gets an id here (:meth:`db_ids` does that).
        """
        if not ip:
            return None
        if kernel is None:
            kernel = ip >= self.kernel_start
        e = self.sb.map_at(pid, ip, time, kernel=kernel)
        if e is None:
            return None
        info = self._map_info.get(id(e))
        if info is None or info[0] is not e:
            kdso = kernel and e.filename.startswith(_KERNEL_DSOS)
            if kdso and self.kmap_range is not None and not self.kmap_range[0] <= ip < self.kmap_range[1]:
                return None  # outside the kernel map as perf fixed it up after loading kallsyms
            dso, name = self._dso(e, kernel)
            if kernel and (name.startswith("[") or (name.startswith("/") and self.kallsyms is not None)):
                tab = self._kernel_symtab(name, e)
            else:
                tab = self._file_symtab(name, self.s.build_id_of(name, e.build_id), kernel)
            # perf's map_ip: identity for the kernel map, ip - start for a module map (its pgoff is 0)
            base = 0 if kdso else (e.start if kernel else e.start - e.pgoff)
            if kdso and self.kmap_range is None and len(tab):
                self.kmap_range = (tab.symbols[0].start, tab.symbols[-1].end)  # map__fixup_start/end
            info = self._map_info[id(e)] = (e, dso, tab, base, kdso)
        else:
            _, dso, tab, base, kdso = info
            if kdso and self.kmap_range is not None and not self.kmap_range[0] <= ip < self.kmap_range[1]:
                return None
        off = ip - base
        sym = tab.find(off)
        if sym is None:
            unknown = self._unknown.get(dso)
            return dso, off, base, unknown.get(off) if unknown is not None else None
        end = sym.end if sym.end != OPEN_END else e.end - base  # perf 6.1: a last size-0 symbol ends with its map
        return dso, off, base, (sym, end)

    def db_ids(self, found: Found | None) -> tuple[int, int, int, int]:
        """perf's db_ids_from_al on a lookup: (dso id, symbol id, symbol offset, symbol start as an address).

        An address in a map but in no symbol gets perf's placeholder: a zero-size
        symbol "unknown" at that address, kept in the DSO from then on (and, through
        :meth:`find`, the DSO's cached answer when its last lookup is at or above it).
        """
        if found is None:
            return _NONE
        dso, off, base, hit = found
        if hit is None:
            unknown = self._unknown.setdefault(dso, {})
            sid = unknown.get(off)
            if sid is None:
                sid = self.m.symbols.get(("unknown", dso, off), (dso, off, off, 0, "unknown"))
                unknown[off] = sid
                self.sym_starts[sid] = off
                self.new_unknowns += 1
                last = self._last_find.get(dso)
                if last is not None and last[0] >= off:  # dso__insert_symbol: start == end, addr >= start
                    self._last_find[dso] = (last[0], sid)
            return dso, sid, 0, off + base
        if type(hit) is int:  # an "unknown" (found at its address, or the DSO's cached answer)
            start = self.sym_starts[hit]
            return dso, hit, off - start, start + base
        sym, end = hit
        key = (dso, sym.start)
        ids = self._sym_ids.get(key)
        if ids is None:
            sid = self.m.symbol(dso, sym.start, end, sym.name, sym.binding)
            ids = self._sym_ids[key] = (sid, sym.start)
            self.sym_starts[sid] = sym.start
        return dso, ids[0], off - sym.start, sym.start + base

    def find(self, pid: int, ip: int, time: int, kernel: bool | None = None) -> Found | None:
        """:meth:`lookup` through perf's per-DSO last-lookup cache (dso__find_symbol's
        ``last_find_result``), for exporters that run lookups one by one in perf's order:
        the same address as the DSO's last lookup gets the cached symbol, which
        :meth:`db_ids` may have replaced by an "unknown" inserted below it since.
        """
        found = self.lookup(pid, ip, time, kernel)
        if found is None:
            return None
        dso, off, base, hit = found
        last = self._last_find.get(dso)
        if last is not None and last[0] == off and last[1] is not None:
            return dso, off, base, last[1]
        self._last_find[dso] = (off, hit)
        return found

    def resolve(self, pid: int, ip: int, time: int, kernel: bool | None = None) -> tuple[int, int, int, int]:
        """(dso id, symbol id, symbol offset, symbol start as an address) of ``ip`` as the symbol tree
        answers it (perf's db_ids_from_al after a lookup that misses the DSO's cache)."""
        return self.db_ids(self.lookup(pid, ip, time, kernel))

    # ----------------------------------------------------------- address-space epochs

    def _change_times(self, pid: int | None) -> np.ndarray:
        """Sorted times at which ``map_at`` answers for ``pid``'s user space (None: the kernel) may change:
        every mapping's start of validity and every exec that cleared the space."""
        ch = self._changes.get(pid)
        if ch is None:
            idx = self.sb.kernel_maps if pid is None else self.sb._maps.get(pid)
            times: list[int] = []
            if idx is not None:
                times = [e.valid_from for e, _ in idx._all]
                times += list(idx._clears)
            # perf's times are u64: one past int64 (a damaged record's) changes nothing before it
            ch = self._changes[pid] = np.unique(np.asarray([min(t, _I64_MAX) for t in times], dtype=np.int64))
        return ch

    def user_epochs(self, pid: int, times: np.ndarray) -> np.ndarray:
        """Epoch of ``pid``'s user address space at each time (equal epochs: equal maps)."""
        ch = self._change_times(pid)
        if not len(ch):
            return np.zeros(len(times), np.int64)
        return np.searchsorted(ch, times, side="right").astype(np.int64)

    def kernel_epochs(self, times: np.ndarray) -> np.ndarray:
        ch = self._change_times(None)
        if not len(ch):
            return np.zeros(len(times), np.int64)
        return np.searchsorted(ch, times, side="right").astype(np.int64)
