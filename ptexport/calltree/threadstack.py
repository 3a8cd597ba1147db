"""Per-thread call stacks from branch samples: perf's thread-stack semantics.

This is the reference implementation (plain Python, one sample at a time) of
what perf's ``thread_stack__process`` does for ``export-to-sqlite.py ...
calls``.  Feed it the *branch samples perf would export*, in export order
(:class:`CallTree.process_batch` takes numpy columns, batch after batch); it
produces ``calls`` rows and ``call_paths`` rows with perf's ids.

The rules (perf tools/perf/util/thread-stack.c; the layers: docs/architecture.md):

* An empty stack first gets a "bottom" entry for the sample's own symbol
  (flag 1 "no call" when it returns).
* A call pushes ``ret_addr = ip + insn_len`` (zero-length calls, where the
  target is the next instruction, push nothing; so do calls with ip or addr 0).
* A return pops the entry whose ``ret_addr`` is the return's target; entries
  above it are popped first with flag 2 "no return".  A return that matches
  only the bottom entry's symbol pops that.  A return with no match is a
  return for a call not seen: entries in the kernel are popped on a return to
  user space, then the missing caller is pushed with flag 1 "no call" (see
  :meth:`CallTree._no_call_return`).  A return to address 0 from the kernel
  (``sysret``/``iret`` leaving a kernel-only trace) pops the kernel entries.
* A branch (not call/return) to the start of a different symbol is a tail
  call: it pushes an entry with flag 4 "non call", which only leaves the stack
  when a return pops past it (so it shows as 6, "jump").
* A call made as the trace ends pushes an entry that the next trace begin
  pops; a trace end that is not a call pushes an "unknown" entry (symbol 0,
  ip 0) that the next trace begin pops: the gap row.
* A new trace number (decoder discontinuity) or an exec (new comm of a main
  thread) flushes the stack: every entry is popped with flag 2 at the time of
  the thread's last sample and return id 0.  :meth:`CallTree.flush_all` does
  the same at the end, as perf does when its session ends.
* x86 retpolines (``__x86_indirect_thunk_*`` symbols, given as a set of symbol
  ids) are removed from the tree once a call into the middle of the calling
  symbol has been seen, as perf does.
* The idle task (pid = tid = 0) has one stack per CPU.

Export ids: a call gets its id when it leaves the stack, except that a child
leaving first reserves the id of its parent entry (``parent_id`` must point at
it); call paths get ids when first used by an exported call, parents first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ptexport.calltree.callpath import ROOT, CallPathTable
from ptexport.calltree.stats import CallStats, symbol_stats
from ptexport.samples.flags import IpFlag

__all__ = [
    "CallTree",
    "perf_flush_order",
    "is_x86_retpoline",
    "CALL_RETURN_NO_CALL",
    "CALL_RETURN_NO_RETURN",
    "CALL_RETURN_NON_CALL",
    "CALLS_COLUMNS",
    "SAMPLE_COLUMNS",
]

#: ``calls.flags`` bits (perf's ``enum`` in thread-stack.h).
CALL_RETURN_NO_CALL = 1
CALL_RETURN_NO_RETURN = 2
CALL_RETURN_NON_CALL = 4

#: ``calls`` table columns, in perf's order.
CALLS_COLUMNS = (
    "id",
    "thread_id",
    "comm_id",
    "call_path_id",
    "call_time",
    "return_time",
    "branch_count",
    "call_id",
    "return_id",
    "parent_call_path_id",
    "flags",
    "parent_id",
    "insn_count",
    "cyc_count",
)

#: Input columns (name, default when absent).  ``None`` marks required ones.
SAMPLE_COLUMNS: dict[str, int | None] = {
    "time": None,  # perf time (ns) of the sample
    "ip": None,  # branch source (0 when unknown)
    "addr": None,  # branch target (0 when unknown)
    "flags": None,  # PERF_IP_FLAG_* bits
    "ref": None,  # export id of the sample (call_id / return_id)
    "thread_id": None,  # export id of the thread: one stack per thread
    "cpu": -1,
    "pid": -1,
    "tid": -1,  # pid == tid: a main thread (exec flushes); pid == tid == 0: idle, one stack per CPU
    "comm_id": 0,  # export id of the main thread's exec comm
    "insn_len": 0,
    "insn_cnt": 0,
    "cyc_cnt": 0,
    "from_sym": 0,  # export id of the symbol at ip (0 = none)
    "to_sym": 0,  # export id of the symbol at addr (0 = none)
    "to_sym_start": 0,  # start address of to_sym
    "from_sym_start": 0,  # start address of from_sym (unused by perf's rules; kept for symmetry)
    "trace_nr": 0,  # decoder trace number: a change flushes the stack (0 = not tracked); see below
}
# perf's trace number (intel-pt.c intel_pt_get_trace): 1 + the session-wide index, in
# file order, of the AUXTRACE buffer that starts a run of consecutive buffers.  In
# full-trace mode that is the queue's first buffer, so it is constant per queue (per
# CPU, or per thread with --per-thread) and a thread moving to another CPU queue gets
# its stack flushed; in snapshot/sampling mode every non-consecutive buffer starts a
# new number.  perf applies it for every decoder state before synthesizing samples;
# a pipeline that drops rows (--itrace=c) can call CallTree.set_trace_nr for them.

_CALL = int(IpFlag.CALL)
_RETURN = int(IpFlag.RETURN)
_TRACE_BEGIN = int(IpFlag.TRACE_BEGIN)
_TRACE_END = int(IpFlag.TRACE_END)
_BRANCH = int(IpFlag.BRANCH)
_RETURN_FROM_KERNEL = int(IpFlag.SYSCALLRET | IpFlag.INTERRUPT)

_NONE, _RETPOLINE_POSSIBLE, _RETPOLINE_DETECTED = 0, 1, 2


class _Entry:
    __slots__ = (
        "ret_addr", "timestamp", "ref", "branch_count", "insn_count", "cyc_count",
        "db_id", "cp", "no_call", "trace_end", "non_call", "child_ns",
    )

    def __init__(self, ret_addr, timestamp, ref, branch_count, insn_count, cyc_count, cp, no_call, trace_end):
        self.ret_addr = ret_addr
        self.timestamp = timestamp
        self.ref = ref
        self.branch_count = branch_count
        self.insn_count = insn_count
        self.cyc_count = cyc_count
        self.db_id = 0
        self.cp = cp
        self.no_call = no_call
        self.trace_end = trace_end
        self.non_call = False
        self.child_ns = 0  # summed durations of the calls it made that returned (for its self time)


class _Stack:
    __slots__ = ("entries", "thread_id", "comm_id", "trace_nr", "branch_count", "insn_count",
                 "cyc_count", "last_time", "rstate")

    def __init__(self, thread_id: int, comm_id: int, rstate: int) -> None:
        self.entries: list[_Entry] = []
        self.thread_id = thread_id
        self.comm_id = comm_id
        self.trace_nr = 0
        self.branch_count = 0
        self.insn_count = 0
        self.cyc_count = 0
        self.last_time = 0
        self.rstate = rstate


class _Sample:
    """One branch sample, by attribute (the row being processed)."""

    __slots__ = tuple(SAMPLE_COLUMNS)
    # one attribute per column of SAMPLE_COLUMNS (declared for type checkers; the slots hold them)
    time: int
    ip: int
    addr: int
    flags: int
    ref: int
    thread_id: int
    cpu: int
    pid: int
    tid: int
    comm_id: int
    insn_len: int
    insn_cnt: int
    cyc_cnt: int
    from_sym: int
    to_sym: int
    to_sym_start: int
    from_sym_start: int
    trace_nr: int

    def __init__(self, **kw: int) -> None:
        for name, default in SAMPLE_COLUMNS.items():
            value = kw.get(name, default)
            if value is None:
                raise TypeError(f"branch sample needs {name!r}")
            setattr(self, name, int(value))


class CallTree:
    """perf's call/return processor: per-thread stacks, ``calls`` and ``call_paths`` rows.

    ``kernel_start`` splits user from kernel addresses (perf: 1 << 63 on
    x86_64); ``x86`` enables retpoline handling; ``retpoline_syms`` are the
    symbol ids of ``__x86_indirect_thunk_*`` functions.  ``first_call_id``,
    ``first_call_path_id`` and ``call_paths`` let an export continue numbering;
    ``root_call_path_id`` says the root call path row is already written with
    that id (perf's root is 1), so it is not exported again.  ``stats``: keep
    the aggregates of the calls rows as :meth:`take_calls` hands them out
    (:mod:`ptexport.calltree.stats`; :meth:`take_stats`), each call's self time
    being its duration minus its direct callees' durations, summed here as they return.
    """

    #: Whether :meth:`process_batch` lets other threads run meanwhile (plain Python: no).
    releases_gil = False


    def __init__(
        self,
        *,
        kernel_start: int = 1 << 63,
        x86: bool = True,
        retpoline_syms: Iterable[int] = (),
        first_call_id: int = 0,
        first_call_path_id: int = 0,
        root_call_path_id: int = 0,
        call_paths: CallPathTable | None = None,
        stats: bool = False,
    ) -> None:
        self.kernel_start = kernel_start
        self.paths = call_paths if call_paths is not None else CallPathTable(
            kernel_start, first_db_id=first_call_path_id, root_db_id=root_call_path_id)
        self.rstate0 = _RETPOLINE_POSSIBLE if x86 else _NONE
        self.retpoline_syms = frozenset(int(s) for s in retpoline_syms if s)
        self.last_call_id = first_call_id
        self.stacks: dict[tuple[int, int], _Stack] = {}
        self._rows: list[tuple[int, ...]] = []
        self.call_stats = CallStats() if stats else None

    # ------------------------------------------------------------------ input

    def process_batch(self, batch: Mapping[str, np.ndarray]) -> None:
        """Process branch samples given as equal-length columns (see :data:`SAMPLE_COLUMNS`)."""
        n = None
        cols: dict[str, list[int] | int] = {}
        for name, default in SAMPLE_COLUMNS.items():
            if name in batch:
                col = np.asarray(batch[name])
                if n is None:
                    n = len(col)
                elif len(col) != n:
                    raise ValueError(f"column {name!r} has {len(col)} rows, expected {n}")
                cols[name] = col.astype(np.uint64 if col.dtype.kind == "u" else np.int64).tolist()
            elif default is None:
                raise ValueError(f"branch batch lacks column {name!r}")
            else:
                cols[name] = default
        if not n:
            return
        names = list(SAMPLE_COLUMNS)
        getters = [(nm, cols[nm]) for nm in names]
        s = _Sample.__new__(_Sample)
        for i in range(n):
            for nm, values in getters:
                setattr(s, nm, values[i] if isinstance(values, list) else values)
            self._process(s)

    def process(self, **sample: int) -> None:
        """Process one branch sample given by keyword (the columns of :data:`SAMPLE_COLUMNS`)."""
        self._process(_Sample(**sample))

    def set_trace_nr(self, thread_id: int, trace_nr: int, *, cpu: int = -1, pid: int = -1, tid: int = -1) -> None:
        """A decoder state of this thread has trace number ``trace_nr``: flush on change."""
        ts = self.stacks.get(self._key(thread_id, cpu, pid, tid))
        if ts is not None and trace_nr != ts.trace_nr:
            if ts.trace_nr:
                self._flush(ts)
            ts.trace_nr = trace_nr

    def stack_return_addresses(self, thread_id: int, cpu: int = -1, pid: int = -1, tid: int = -1) -> list[int]:
        """The return addresses on the thread's stack, top first (what perf's thread_stack__sample reads)."""
        ts = self.stacks.get(self._key(thread_id, cpu, pid, tid))
        return [e.ret_addr for e in reversed(ts.entries)] if ts is not None else []

    def call_path_id(self, nodes: Iterable[tuple[int, int]]) -> int:
        """The export id of the call path root -> ``nodes`` ((symbol id, ip), caller first), created and
        exported (parents first) if need be: perf's call_path__findnew walk and db_export__call_path."""
        node = 0
        for sym, ip in nodes:
            node = self.paths.findnew(node, sym, ip)
        return self.paths.export(node)

    def flush_thread(self, thread_id: int) -> None:
        """Pop every entry of the thread's stack(s), as perf does on exec or at the end."""
        for key in sorted(k for k in self.stacks if k[0] == thread_id):
            self._flush(self.stacks[key])

    def flush_all(self, order: Iterable[int] | None = None) -> None:
        """End of input: flush every stack.

        perf flushes threads in its thread-table order (tid modulo 256, then tid);
        pass ``order`` (thread ids) to reproduce it; by default stacks are
        flushed in the order they were created.
        """
        if order is None:
            for ts in list(self.stacks.values()):
                self._flush(ts)
            return
        for thread_id in order:
            self.flush_thread(thread_id)
        for ts in list(self.stacks.values()):
            self._flush(ts)

    # ----------------------------------------------------------------- output

    def take_calls(self) -> dict[str, np.ndarray]:
        """``calls`` rows produced since the last call, as columns (:data:`CALLS_COLUMNS`)."""
        rows = self._rows
        self._rows = []
        out: dict[str, np.ndarray] = {}
        arr = np.array(rows, dtype=np.int64).reshape(-1, len(CALLS_COLUMNS) + 1) if rows else np.zeros(
            (0, len(CALLS_COLUMNS) + 1), dtype=np.int64
        )
        for i, name in enumerate(CALLS_COLUMNS):
            out[name] = arr[:, i]
        out["flags"] = out["flags"].astype(np.int32)
        if self.call_stats is not None:
            self.call_stats.add(out, arr[:, len(CALLS_COLUMNS)])
        return out

    def take_stats(self) -> dict[str, dict[str, np.ndarray]]:
        """The aggregates of every ``calls`` row taken so far (``stats=True``; else none), as the
        ``call_path_stats`` and ``symbol_stats`` tables' columns; given away (asked once, at the end)."""
        if self.call_stats is None:
            return {}
        cps = self.call_stats.rows()
        paths = self.paths
        cp_symbol = np.zeros(paths.last_db_id + 1, dtype=np.int64)
        for node, db_id in enumerate(paths.db_id):
            if db_id:
                cp_symbol[db_id] = paths.sym[node]
        return {"call_path_stats": cps, "symbol_stats": symbol_stats(cps, cp_symbol)}

    def take_call_paths(self) -> dict[str, np.ndarray]:
        """``call_paths`` rows exported since the last call."""
        return self.paths.take_rows()

    def depth(self, thread_id: int, cpu: int = -1, pid: int = -1, tid: int = -1) -> int:
        ts = self.stacks.get(self._key(thread_id, cpu, pid, tid))
        return len(ts.entries) if ts else 0

    # --------------------------------------------------------------- internals

    @staticmethod
    def _key(thread_id: int, cpu: int, pid: int, tid: int) -> tuple[int, int]:
        if pid == 0 and tid == 0:  # the idle task: one stack per CPU
            return (thread_id, max(cpu, 0))
        return (thread_id, -1)

    def _call_return(self, ts: _Stack, idx: int, timestamp: int, ref: int, no_return: bool) -> None:
        tse = ts.entries[idx]
        paths = self.paths
        cp_id = paths.export(tse.cp)
        flags = 0
        if tse.no_call:
            flags |= CALL_RETURN_NO_CALL
        if no_return:
            flags |= CALL_RETURN_NO_RETURN
        if tse.non_call:
            flags |= CALL_RETURN_NON_CALL
        db_id = tse.db_id
        if not db_id:
            self.last_call_id += 1
            db_id = self.last_call_id
        parent_id = 0
        duration = timestamp - tse.timestamp
        if idx:
            below = ts.entries[idx - 1]
            if not below.db_id:
                self.last_call_id += 1
                below.db_id = self.last_call_id
            parent_id = below.db_id
            below.child_ns += duration
        parent_cp = paths.parent[tse.cp]
        self._rows.append((
            db_id,
            ts.thread_id,
            ts.comm_id,
            cp_id,
            tse.timestamp,
            timestamp,
            ts.branch_count - tse.branch_count,
            tse.ref,
            ref,
            paths.db_id[parent_cp] if parent_cp >= 0 else 0,
            flags,
            parent_id,
            ts.insn_count - tse.insn_count,
            ts.cyc_count - tse.cyc_count,
            duration - tse.child_ns,  # self time (not a calls column: take_calls gives it to the stats)
        ))

    def _pop_return(self, ts: _Stack, timestamp: int, ref: int, no_return: bool) -> None:
        idx = len(ts.entries) - 1
        self._call_return(ts, idx, timestamp, ref, no_return)
        ts.entries.pop()

    def _flush(self, ts: _Stack) -> None:
        while ts.entries:
            self._pop_return(ts, ts.last_time, 0, True)

    def _push(self, ts: _Stack, ret_addr: int, timestamp: int, ref: int, cp: int,
              no_call: bool, trace_end: bool) -> _Entry:
        e = _Entry(ret_addr, timestamp, ref, ts.branch_count, ts.insn_count, ts.cyc_count, cp, no_call, trace_end)
        ts.entries.append(e)
        return e

    def _in_kernel(self, ts: _Stack) -> bool:
        return bool(ts.entries) and self.paths.in_kernel[ts.entries[-1].cp]

    def _pop_ks(self, ts: _Stack, s: _Sample) -> None:
        while self._in_kernel(ts):
            self._pop_return(ts, s.time, s.ref, True)

    def _process(self, s: _Sample) -> None:
        key = self._key(s.thread_id, s.cpu, s.pid, s.tid)
        ts = self.stacks.get(key)
        if ts is not None and s.trace_nr != ts.trace_nr:
            # perf's thread_stack__set_trace_nr, run for the decoder state first
            if ts.trace_nr:
                self._flush(ts)
            ts.trace_nr = s.trace_nr
        if ts is None:
            ts = _Stack(s.thread_id, s.comm_id, self.rstate0)
            self.stacks[key] = ts

        rstate = ts.rstate
        if rstate == _RETPOLINE_DETECTED:
            ts.rstate = _RETPOLINE_POSSIBLE

        # Flush stack on exec
        if ts.comm_id != s.comm_id and s.pid == s.tid:
            self._flush(ts)
            ts.comm_id = s.comm_id

        paths = self.paths
        if not ts.entries:
            self._bottom(ts, s)

        ts.branch_count += 1
        ts.insn_count += s.insn_cnt
        ts.cyc_count += s.cyc_cnt
        ts.last_time = s.time
        flags = s.flags

        if flags & _CALL:
            if not s.ip or not s.addr:
                return
            ret_addr = s.ip + s.insn_len
            if ret_addr == s.addr:
                return  # zero-length calls are excluded
            cp = paths.findnew(ts.entries[-1].cp, s.to_sym, s.addr)
            self._push(ts, ret_addr, s.time, s.ref, cp, False, bool(flags & _TRACE_END))
            # a call to the same symbol, not to its start, may start an x86 retpoline
            if (rstate == _RETPOLINE_POSSIBLE and s.to_sym and s.from_sym == s.to_sym
                    and s.addr != s.to_sym_start):
                ts.rstate = _RETPOLINE_DETECTED
        elif flags & _RETURN:
            if not s.addr:
                if flags & _RETURN_FROM_KERNEL:
                    self._pop_ks(ts, s)
                return
            if not s.ip:
                return
            if rstate == _RETPOLINE_DETECTED and len(ts.entries) > 2 and ts.entries[-1].ret_addr != s.addr:
                self._x86_retpoline(ts, s)
                return
            if not self._pop_cp(ts, s):
                self._no_call_return(ts, s)
        elif flags & _TRACE_BEGIN:
            if ts.entries and ts.entries[-1].trace_end:
                self._pop_return(ts, s.time, s.ref, False)
        elif flags & _TRACE_END:
            # no point having 'trace end' on the bottom of the stack
            if not ts.entries or (len(ts.entries) == 1 and ts.entries[0].ref == s.ref):
                return
            cp = paths.findnew(ts.entries[-1].cp, 0, 0)
            self._push(ts, s.ip + s.insn_len, s.time, s.ref, cp, False, True)
        elif flags & _BRANCH and s.from_sym != s.to_sym and s.to_sym and s.addr == s.to_sym_start:
            # a jmp to the start of another symbol: a call/ret optimised into a jmp
            cp = paths.findnew(ts.entries[-1].cp, s.to_sym, s.addr)
            self._push(ts, 0, s.time, s.ref, cp, False, False).non_call = True

    def _bottom(self, ts: _Stack, s: _Sample) -> None:
        if s.ip:
            ip, sym = s.ip, s.from_sym
        elif s.addr:
            ip, sym = s.addr, s.to_sym
        else:
            return
        cp = self.paths.findnew(ROOT, sym, ip)
        self._push(ts, ip, s.time, s.ref, cp, True, False)

    def _pop_cp(self, ts: _Stack, s: _Sample) -> bool:
        """Pop to the entry that returns to ``s.addr``; False when none matches."""
        entries = ts.entries
        if not entries:
            return False
        if len(entries) == 1 and self.paths.sym[entries[0].cp] == s.from_sym:
            self._pop_return(ts, s.time, s.ref, False)
            return True
        top = entries[-1]
        if top.ret_addr == s.addr and not top.non_call:
            self._pop_return(ts, s.time, s.ref, False)
            return True
        for i in range(len(entries) - 2, -1, -1):
            e = entries[i]
            if e.ret_addr != s.addr or e.non_call:
                continue
            while len(entries) > i + 1:
                self._pop_return(ts, s.time, s.ref, True)
            self._pop_return(ts, s.time, s.ref, False)
            return True
        return False

    def _no_call_return(self, ts: _Stack, s: _Sample) -> None:
        paths = self.paths
        ks = self.kernel_start
        ip, addr, tm, ref = s.ip, s.addr, s.time, s.ref
        if ip >= ks and addr < ks:
            # return to user space: pop all kernel addresses
            self._pop_ks(ts, s)
            if not ts.entries:
                cp = paths.findnew(ROOT, s.to_sym, addr)
                self._push(ts, 0, tm, ref, cp, True, False)
                return
        elif self._in_kernel(ts) and ip < ks:
            self._pop_ks(ts, s)

        parent = ts.entries[-1].cp if ts.entries else ROOT
        if paths.sym[parent] == s.from_sym:
            # at the bottom: assume the missing call was before the trace started
            if len(ts.entries) == 1:
                self._pop_return(ts, tm, ref, False)
            if not ts.entries:
                cp = paths.findnew(ROOT, s.to_sym, addr)
                self._push(ts, addr, tm, ref, cp, True, False)
                return
            # otherwise the 'return' is used as a jump (e.g. retpoline): push 'to'
            cp = paths.findnew(parent, s.to_sym, addr)
            self._push(ts, 0, tm, ref, cp, True, False).non_call = True
            return
        # assume 'parent' has not returned yet: push 'to', then push and pop 'from'
        cp = paths.findnew(parent, s.to_sym, addr)
        self._push(ts, addr, tm, ref, cp, True, False)
        cp = paths.findnew(cp, s.from_sym, ip)
        self._push(ts, ip, tm, ref, cp, True, False)
        self._pop_return(ts, tm, ref, False)

    def _x86_retpoline(self, ts: _Stack, s: _Sample) -> None:
        paths = self.paths
        entries = ts.entries
        sym = paths.sym[entries[-1].cp]
        tsym = s.to_sym
        if sym and sym in self.retpoline_syms:
            # drop the thunk; then replace the new top with the real target
            entries.pop()
            sym = paths.sym[entries[-2].cp]
            if sym and sym == tsym and s.addr != s.to_sym_start:
                # back into the middle of the caller: an indirect jmp, forget it
                entries.pop()
                return
        elif sym and sym == tsym:
            entries.pop()
            return
        entries[-1].cp = paths.findnew(entries[-2].cp, tsym, s.addr)


def perf_flush_order(
    thread_ids: Iterable[int], tids: Iterable[int], machine_pids: Iterable[int] | None = None
) -> list[int]:
    """Thread ids in the order perf flushes their stacks when the session ends.

    perf walks the host machine, then guest machines by pid; in each, its
    thread table buckets (``tid`` modulo 256, as unsigned) in order, each
    bucket by ascending tid.  ``machine_pids`` gives each thread's machine
    (-1 or None for the host).  Pass the result to :meth:`CallTree.flush_all`.
    """
    ids = list(thread_ids)
    tid_l = list(tids)
    mp = [-1] * len(ids) if machine_pids is None else [(-1 if m is None else int(m)) for m in machine_pids]

    def key(i: int) -> tuple[int, int, int, int]:
        m = mp[i]
        return (0 if m == -1 else 1, m, (int(tid_l[i]) & 0xFFFFFFFF) % 256, int(tid_l[i]))

    return [ids[i] for i in sorted(range(len(ids)), key=key)]


def is_x86_retpoline(name: str) -> bool:
    """perf 6.1's test for an x86 retpoline thunk symbol (pass their ids as ``retpoline_syms``)."""
    return name.startswith("__x86_indirect_thunk_") or name == "__indirect_thunk_start"
