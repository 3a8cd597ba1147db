"""Id registry for the small tables: machines, threads, comms, dsos, symbols, call paths...

perf's id conventions: ids start at 1 (0 is the "unknown" row the writer
adds), a thread's ``process_id`` is the id of its process's main thread,
``call_paths`` are keyed by (parent, symbol, ip) with ip = 0 when the symbol
is known.  The registry hands out ids as keys are first seen and keeps the
new rows until :meth:`ExportModel.flush` gives them to a writer, so it can be
filled while the trace streams by.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ptexport.writers.base import Writer


class IdTable:
    """Ids for one table: ``get(key, row)`` returns the key's id, adding ``(id, *row)`` once."""

    def __init__(self, table: str, first_id: int = 1) -> None:
        self.table = table
        self.ids: dict[Hashable, int] = {}
        self.next_id = first_id
        self.pending: list[tuple[Any, ...]] = []

    def get(self, key: Hashable, row: tuple[Any, ...] | None = None) -> int:
        i = self.ids.get(key)
        if i is None:
            i = self.next_id
            self.next_id += 1
            self.ids[key] = i
            self.pending.append((i, *(row if row is not None else key)))  # type: ignore[misc]
        return i

    def find(self, key: Hashable) -> int | None:
        return self.ids.get(key)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self) -> list[tuple[Any, ...]]:
        rows, self.pending = self.pending, []
        return rows


class ExportModel:
    """All small-table ids of one export (host and guest machines alike)."""

    def __init__(self) -> None:
        self.selected_events = IdTable("selected_events")
        self.machines = IdTable("machines")
        self.threads = IdTable("threads")
        self.comms = IdTable("comms")
        self.comm_threads = IdTable("comm_threads")
        self.dsos = IdTable("dsos")
        self.symbols = IdTable("symbols")
        self.call_paths = IdTable("call_paths", first_id=2)
        self.vcpus = IdTable("vcpus")
        self._machine_pid: dict[int, int] = {0: 0}
        self.root_call_path = 1
        self.call_paths.pending.append((1, 0, 0, 0))  # the root every path hangs from

    # --------------------------------------------------------------- rows
    def evsel(self, name: str) -> int:
        return self.selected_events.get(name, (name,))

    def machine(self, pid: int = -1, root_dir: str = "") -> int:
        """Machine id; ``pid`` -1 is the host, a guest is keyed by its hypervisor's pid."""
        mid = self.machines.get(pid, (pid, root_dir))
        self._machine_pid[mid] = pid
        return mid

    def machine_pid(self, machine_id: int) -> int:
        return self._machine_pid[machine_id]

    def thread(self, machine_id: int, pid: int, tid: int) -> int:
        """Thread id; the process's main thread (pid, pid) gets an id first."""
        if pid >= 0 and pid != tid:
            process_id = self.thread(machine_id, pid, pid)
        else:
            process_id = None
        key = (machine_id, tid if tid >= 0 else ("pid", pid))
        i = self.threads.find(key)
        if i is not None:
            return i
        nid = self.threads.next_id
        return self.threads.get(key, (machine_id, process_id if process_id is not None else nid, pid, tid))

    def comm(self, comm: str, thread_id: int, time: int = 0, exec_flag: bool = False) -> int:
        """Comm id: one per (name, thread that took it, time), as perf keeps them."""
        cid = self.comms.get((comm, thread_id, time), (comm[:15], thread_id, time, bool(exec_flag), None))
        self.comm_thread(cid, thread_id)
        return cid

    def comm_thread(self, comm_id: int, thread_id: int) -> int:
        return self.comm_threads.get((comm_id, thread_id))

    def dso(self, machine_id: int, long_name: str, short_name: str | None = None, build_id: str = "") -> int:
        if short_name is None:
            short_name = long_name.rsplit("/", 1)[-1]
        return self.dsos.get((machine_id, long_name), (machine_id, short_name, long_name, build_id))

    def symbol(self, dso_id: int, sym_start: int, sym_end: int, name: str, binding: int = 1) -> int:
        return self.symbols.get((dso_id, sym_start, name), (dso_id, sym_start, sym_end, binding, name))

    def call_path(self, parent_id: int, symbol_id: int, ip: int = 0) -> int:
        """perf's key: (parent, symbol, ip) with ip 0 when the symbol is known."""
        if symbol_id:
            ip = 0
        return self.call_paths.get((parent_id, symbol_id, ip))

    def vcpu(self, machine_id: int, vcpu: int, thread_id: int, vmcs: int = 0, tsc_offset: int = 0,
             tsc_multiplier: int = 0, tsc_offset_source: str = "none") -> int:
        return self.vcpus.get((machine_id, vcpu),
                              (machine_id, vcpu, thread_id, vmcs, tsc_offset, tsc_multiplier, tsc_offset_source))

    # --------------------------------------------------------------- output
    def tables(self) -> list[IdTable]:
        return [self.selected_events, self.machines, self.threads, self.comms, self.comm_threads,
                self.dsos, self.symbols, self.call_paths, self.vcpus]

    def flush(self, writer: "Writer") -> None:
        """Give every new row to ``writer`` (rows are written once)."""
        for t in self.tables():
            rows = t.take()
            if rows:
                writer.write_rows(t.table, rows)
