"""perf's thread table, as ``perf script``'s db-export sees it while events arrive.

The rows perf exports for threads, comms and context switches depend on
what its ``struct machine`` holds *when* each sample or switch is exported,
not on what the recording eventually says about a task:

* a thread exists once any event looked it up with ``findnew`` (a sample,
  a COMM, FORK, user MMAP, or Intel PT's current-task switch); EXIT keeps it;
  a FORK of a tid that exists replaces the old thread with a new one;
* a new thread has the placeholder comm ``:TID`` (start 0, not exec, and
  ``comm_set`` false); its first COMM overrides that placeholder in place,
  later ones push new comms; FORK copies the parent's comm when it is set;
  the idle task 0/0 is ``swapper`` from the start;
* the "exec" comm of a main thread is its newest exec comm, else its last
  comm but one when the last has no start time, else its last comm; when no
  event of the recording asks for COMM_EXEC, it is simply the current comm;
* ``db_export__switch`` only *finds* threads (``machine__find_thread``) and
  ignores one that is missing or has no comm set; a switch is dropped when
  neither side is a known non-idle thread.

Only the host machine is modelled (guest threads come from the decoder's
pid/tid columns on the host table too).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class PerfComm:
    name: str
    start: int
    exec: bool
    db_id: int = 0


@dataclass(eq=False, slots=True)
class PerfThread:
    pid: int
    tid: int
    comms: list[PerfComm] = field(default_factory=list)  # oldest first; perf's list is newest first
    comm_set: bool = False
    db_id: int = 0

    @property
    def comm(self) -> PerfComm | None:
        return self.comms[-1] if self.comms else None

    def exec_comm(self) -> PerfComm | None:
        """perf's ``thread__exec_comm``."""
        last = second_last = None
        for c in reversed(self.comms):
            if c.exec:
                return c
            second_last, last = last, c
        # perf walks newest -> oldest, so "last" is the oldest and "second_last" the one after it.
        if second_last is not None and last is not None and not last.start and self.pid == self.tid:
            return second_last
        return last

    def set_comm(self, name: str, start: int, exec_: bool) -> None:
        """perf's ``____thread__set_comm``."""
        if not self.comm_set and self.comms:
            c = self.comms[-1]
            c.name = name
            if start:
                c.start = start
            if exec_:
                c.exec = True
        else:
            self.comms.append(PerfComm(name, start, exec_))
        self.comm_set = True


class PerfThreads:
    """The host machine's thread table (``machine__findnew_thread`` and friends)."""

    def __init__(self, comm_exec: bool) -> None:
        self.comm_exec = comm_exec
        self.pid_fixes = 0  # threads whose unknown pid a find learned (part of ThreadMemo's generation)
        self.by_tid: dict[int, PerfThread] = {}
        self.all: list[PerfThread] = []  # every thread ever created, removed ones included
        idle = self.findnew(0, 0)
        idle.set_comm("swapper", 0, False)

    def find(self, pid: int, tid: int) -> PerfThread | None:
        th = self.by_tid.get(tid)
        if th is not None and pid != -1 and th.pid == -1 and pid != th.pid:
            th.pid = pid
            self.pid_fixes += 1
        return th

    def findnew(self, pid: int, tid: int) -> PerfThread:
        th = self.find(pid, tid)
        if th is None:
            th = PerfThread(pid, tid, [PerfComm(f":{tid}", 0, False)])
            self.by_tid[tid] = th
            self.all.append(th)
        return th

    def remove(self, th: PerfThread) -> None:
        if self.by_tid.get(th.tid) is th:
            del self.by_tid[th.tid]

    def main_thread(self, th: PerfThread) -> PerfThread | None:
        """perf's ``thread__main_thread`` (a find, never a create)."""
        if th.pid == th.tid:
            return th
        if th.pid == -1:
            return None
        return self.find(th.pid, th.pid)

    def exec_comm(self, main: PerfThread) -> PerfComm | None:
        """perf's ``machine__thread_exec_comm``."""
        return main.exec_comm() if self.comm_exec else main.comm

    # ---------------------------------------------------------------- events

    def on_comm(self, pid: int, tid: int, name: str, time: int, exec_: bool) -> None:
        if exec_:
            self.comm_exec = True
        self.findnew(pid, tid).set_comm(name, time, exec_)

    def on_fork(self, pid: int, tid: int, ppid: int, ptid: int, time: int) -> None:
        thread = self.find(pid, tid)
        parent = self.findnew(ppid, ptid)
        if parent.pid != ppid:
            self.remove(parent)
            parent = self.findnew(ppid, ptid)
        if thread is not None:
            self.remove(thread)
        thread = self.findnew(pid, tid)
        if parent.comm_set:
            thread.set_comm(parent.comm.name, time, False)
