"""Call trees from branch samples: perf thread-stack scenarios, rows written out by hand.

Each scenario lists branch samples and the ``calls`` / ``call_paths`` rows perf's
export would write for them (ids included), derived from perf's rules
(tools/perf/util/thread-stack.c and db-export.c).
"""

from __future__ import annotations

import numpy as np
import pytest

from ptexport.calltree import CALLS_COLUMNS, CallTree
from ptexport.samples.flags import IpFlag

B, C, R, O = IpFlag.BRANCH, IpFlag.CALL, IpFlag.RETURN, IpFlag.CONDITIONAL
S, Y, I = IpFlag.SYSCALLRET, IpFlag.ASYNC, IpFlag.INTERRUPT
TB, TE = IpFlag.TRACE_BEGIN, IpFlag.TRACE_END

# symbols: id -> start address
MAIN, F, G, K1, K2, SRC, THUNK = 1, 2, 3, 4, 6, 5, 7
START = {MAIN: 0x1000, F: 0x2000, G: 0x3000, K1: 0xFFFFFFFF81000000, K2: 0xFFFFFFFF81001000,
         SRC: 0x500, THUNK: 0x7000}
KBASE = 0xFFFFFFFF81000000


def sym_of(addr: int) -> int:
    best = 0
    for s, start in START.items():
        if start <= addr < start + 0x1000 and (not best or start > START[best]):
            best = s
    return best


def br(t, flags, ip, addr, *, insn_len=5, ref=None, **extra):
    """A branch sample; symbols are looked up from the addresses."""
    d = dict(time=t, flags=int(flags), ip=ip, addr=addr, insn_len=insn_len, ref=t // 10 if ref is None else ref,
             thread_id=1, comm_id=1, pid=100, tid=100,
             from_sym=sym_of(ip) if ip else 0, to_sym=sym_of(addr) if addr else 0)
    d["to_sym_start"] = START.get(d["to_sym"], 0)
    d.update(extra)
    return d


def run(samples, *, flush=True, **kw):
    tree = CallTree(**kw)
    cols = {k: np.array([s[k] for s in samples], dtype=np.uint64 if k in ("ip", "addr", "to_sym_start") else np.int64)
            for k in samples[0]}
    tree.process_batch(cols)
    if flush:
        tree.flush_all()
    calls = tree.take_calls()
    rows = [tuple(int(calls[c][i]) for c in CALLS_COLUMNS) for i in range(len(calls["id"]))]
    cp = tree.take_call_paths()
    paths = [tuple(int(cp[c][i]) for c in ("id", "parent_id", "symbol_id", "ip")) for i in range(len(cp["id"]))]
    return rows, paths, tree


def row(id, cp, call_time, return_time, branch_count, call_id, return_id, parent_cp, flags, parent_id,
        thread_id=1, comm_id=1, insn=0, cyc=0):
    return (id, thread_id, comm_id, cp, call_time, return_time, branch_count, call_id, return_id, parent_cp,
            flags, parent_id, insn, cyc)


def test_call_and_return_match():
    rows, paths, _ = run([
        br(10, B | C, 0x1010, 0x2000),
        br(20, B | O, 0x2005, 0x2010),
        br(30, B | R, 0x2020, 0x1015),
    ])
    assert paths == [(1, 0, 0, 0), (2, 1, MAIN, 0), (3, 2, F, 0)]
    assert rows == [
        row(1, 3, 10, 30, 2, 1, 3, 2, 0, 2),  # f: returned normally; id 2 reserved for its parent
        row(2, 2, 10, 30, 3, 1, 0, 1, 3, 0),  # main: bottom entry, flushed at the end: no call + no return
    ]


def test_return_past_several_entries_marks_no_return():
    rows, paths, _ = run([
        br(10, B | C, 0x1010, 0x2000),
        br(20, B | C, 0x2010, 0x3000),
        br(30, B | R, 0x3010, 0x1015),  # g returns straight to main (longjmp-like)
    ])
    assert paths == [(1, 0, 0, 0), (2, 1, MAIN, 0), (3, 2, F, 0), (4, 3, G, 0)]
    assert rows == [
        row(1, 4, 20, 30, 1, 2, 3, 3, 2, 2),  # g: no return
        row(2, 3, 10, 30, 2, 1, 3, 2, 0, 3),  # f: the matched entry
        row(3, 2, 10, 30, 3, 1, 0, 1, 3, 0),
    ]


def test_return_matching_only_the_bottom_symbol_pops_it():
    rows, paths, _ = run([
        br(10, B | R, 0x2020, 0x1015),  # trace starts in f, which returns into main
        br(20, B | C, 0x1020, 0x3000),
        br(30, B | R, 0x3010, 0x1025),
    ])
    assert paths == [(1, 0, 0, 0), (2, 1, F, 0), (3, 1, MAIN, 0), (4, 3, G, 0)]
    assert rows == [
        row(1, 2, 10, 10, 1, 1, 1, 1, 1, 0),  # f: bottom entry, its return seen: "no call"
        row(2, 4, 20, 30, 1, 2, 3, 3, 0, 3),  # g under a new bottom entry for main
        row(3, 3, 20, 30, 2, 2, 0, 1, 3, 0),
    ]


def test_return_without_matching_call_pushes_missing_caller():
    rows, paths, _ = run([
        br(10, B | O, 0x1000, 0x1008),  # bottom: main
        br(20, B | R, 0x2020, 0x1015),  # f returns into main, its call never seen
    ])
    # perf assumes main has not returned: pushes 'to' (main again), then pushes and pops 'from' (f)
    assert paths == [(1, 0, 0, 0), (2, 1, MAIN, 0), (3, 2, MAIN, 0), (4, 3, F, 0)]
    assert rows == [
        row(1, 4, 20, 20, 0, 2, 2, 3, 1, 2),  # f: no call
        row(2, 3, 20, 20, 0, 2, 0, 2, 3, 3),  # main (pushed as 'to'): no call, flushed
        row(3, 2, 10, 20, 2, 1, 0, 1, 3, 0),
    ]


def test_tail_call_jump_to_symbol_start_is_a_non_call_entry():
    rows, paths, _ = run([
        br(10, B | C, 0x1010, 0x2000),
        br(20, B, 0x2008, 0x3000),  # f jmps to the start of g
        br(25, B, 0x3004, 0x3008),  # a jmp inside g: nothing
        br(30, B | R, 0x3010, 0x1015),  # g returns to main
    ], )
    assert paths == [(1, 0, 0, 0), (2, 1, MAIN, 0), (3, 2, F, 0), (4, 3, G, 0)]
    assert rows == [
        row(1, 4, 20, 30, 2, 2, 3, 3, 6, 2),  # g: non call + no return = 6, "jump"
        row(2, 3, 10, 30, 3, 1, 3, 2, 0, 3),
        row(3, 2, 10, 30, 4, 1, 0, 1, 3, 0),
    ]


def test_trace_end_then_begin_makes_unknown_gap_row():
    rows, paths, _ = run([
        br(10, B | C, 0x1010, 0x2000),
        br(20, B | Y | TE, 0x2010, 0, insn_len=0),  # "tr end async"
        br(30, B | TB, 0, 0x2010, insn_len=0),  # "tr strt"
        br(40, B | R, 0x2020, 0x1015),
    ])
    assert paths == [(1, 0, 0, 0), (2, 1, MAIN, 0), (3, 2, F, 0), (4, 3, 0, 0)]  # symbol 0, ip 0: unknown
    assert rows == [
        row(1, 4, 20, 30, 1, 2, 3, 3, 0, 2),  # the gap
        row(2, 3, 10, 40, 3, 1, 4, 2, 0, 3),
        row(3, 2, 10, 40, 4, 1, 0, 1, 3, 0),
    ]


def test_call_as_trace_ends_is_popped_by_trace_begin():
    rows, _, _ = run([
        br(10, B | C | TE, 0x1010, 0x2000),  # call, and tracing stops
        br(30, B | TB, 0, 0x1800, insn_len=0),
    ])
    assert rows == [
        row(1, 3, 10, 30, 1, 1, 3, 2, 0, 2),
        row(2, 2, 10, 30, 2, 1, 0, 1, 3, 0),
    ]


def test_trace_number_change_flushes_the_stack():
    rows, paths, _ = run([
        br(10, B | C, 0x1010, 0x2000, trace_nr=1),
        br(20, B | O, 0x2004, 0x2008, trace_nr=1),
        br(30, B | O, 0x3004, 0x3008, trace_nr=2),  # discontinuity: decoding restarted in g
    ])
    assert paths == [(1, 0, 0, 0), (2, 1, MAIN, 0), (3, 2, F, 0), (4, 1, G, 0)]
    assert rows == [
        row(1, 3, 10, 20, 1, 1, 0, 2, 2, 2),  # flushed at the last time seen (20), return id 0
        row(2, 2, 10, 20, 2, 1, 0, 1, 3, 0),
        row(3, 4, 30, 30, 1, 3, 0, 1, 3, 0),  # new bottom after the flush; flushed at the end
    ]


def test_exec_flushes_main_thread_stack():
    rows, _, _ = run([
        br(10, B | C, 0x1010, 0x2000),
        br(20, B | O, 0x1004, 0x1008, comm_id=2),  # same thread, new comm: exec
    ])
    assert [(r[0], r[2], r[3], r[5], r[10]) for r in rows] == [
        (1, 1, 3, 10, 2),  # f, flushed at the exec with the old comm
        (2, 1, 2, 10, 3),
        (3, 2, 2, 20, 3),  # new bottom under the new comm (call path main again)
    ]
    rows, _, _ = run([
        br(10, B | C, 0x1010, 0x2000, pid=100, tid=101),
        br(20, B | O, 0x1004, 0x1008, pid=100, tid=101, comm_id=2),  # not the main thread: no flush
    ])
    assert [(r[0], r[2], r[5]) for r in rows] == [(1, 1, 20), (2, 1, 20)]


def test_return_to_user_pops_kernel_entries():
    k = KBASE
    rows, paths, _ = run([
        br(10, B | O, k + 0x50, k + 0x60),  # bottom in kernel function K1
        br(20, B | C, k + 0x70, k + 0x1000),  # K1 calls K2
        br(30, B | R | S, k + 0x1010, 0x1012, insn_len=3),  # sysret from K2 to user: no match
        br(40, B | O, 0x1014, 0x1020),
    ])
    assert paths == [(1, 0, 0, 0), (2, 1, K1, 0), (3, 2, K2, 0), (4, 1, MAIN, 0)]
    assert rows == [
        row(1, 3, 20, 30, 1, 2, 3, 2, 2, 2),  # K2: no return
        row(2, 2, 10, 30, 3, 1, 3, 1, 3, 0),  # K1: bottom (no call), no return
        row(3, 4, 30, 40, 1, 3, 0, 1, 3, 0),  # user main pushed as the new bottom
    ]


def test_return_to_address_zero_from_kernel_pops_kernel_entries():
    k = KBASE
    rows, _, tree = run([
        br(10, B | C | S, 0x1010, k, insn_len=2),  # syscall from main
        br(20, B | R | S, k + 0x100, 0, insn_len=3),  # sysret, user space not traced: addr 0
        br(30, B | R, k + 0x100, 0, insn_len=1),  # a plain return to 0 is ignored
    ], flush=False)
    assert [(r[3], r[5], r[10]) for r in rows] == [(3, 20, 2)]  # the kernel entry, no return
    assert tree.depth(1) == 1  # main stays


def test_zero_length_call_and_unknown_addresses_push_nothing():
    _, _, tree = run([
        br(10, B | C, 0x1010, 0x1015),  # call to the next instruction
        br(20, B | C, 0x1020, 0),  # call with unknown target
    ], flush=False)
    assert tree.depth(1) == 1  # only the bottom entry


def test_idle_task_has_a_stack_per_cpu():
    rows, _, tree = run([
        br(10, B | C, 0x1010, 0x2000, pid=0, tid=0, cpu=0),
        br(20, B | C, 0x1010, 0x3000, pid=0, tid=0, cpu=1),
        br(30, B | R, 0x2010, 0x1015, pid=0, tid=0, cpu=0),
    ], flush=False)
    assert tree.depth(1, cpu=0, pid=0, tid=0) == 1 and tree.depth(1, cpu=1, pid=0, tid=0) == 2
    assert [(r[3], r[4], r[5]) for r in rows] == [(3, 10, 30)]


def test_x86_retpoline_is_removed_from_the_tree():
    samples = [
        br(10, B | C, 0x1010, 0x2000),
        br(20, B | C, 0x2010, 0x7000),  # f calls __x86_indirect_thunk_rax
        br(30, B | C, 0x7000, 0x7010),  # call into the middle of the thunk: retpoline detected
        br(40, B | R, 0x7020, 0x3000),  # 'ret' to the real target g
        br(50, B | R, 0x3010, 0x2015),  # g returns to f
        br(60, B | R, 0x2020, 0x1015),
    ]
    rows, paths, _ = run(samples, retpoline_syms={THUNK})
    assert paths == [(1, 0, 0, 0), (2, 1, MAIN, 0), (3, 2, F, 0), (4, 3, G, 0)]
    assert rows == [
        row(1, 4, 20, 50, 3, 2, 5, 3, 0, 2),  # g as if f had called it directly
        row(2, 3, 10, 60, 5, 1, 6, 2, 0, 3),
        row(3, 2, 10, 60, 6, 1, 0, 1, 3, 0),
    ]
    # Not x86: no retpoline handling; the thunk stays and its entries pop as "no return".
    rows, paths, _ = run(samples, retpoline_syms={THUNK}, x86=False)
    assert (4, 3, THUNK, 0) in paths


def test_insn_and_cycle_counts_accumulate_between_call_and_return():
    rows, _, _ = run([
        br(10, B | C, 0x1010, 0x2000, insn_cnt=3, cyc_cnt=6),
        br(20, B | O, 0x2005, 0x2010, insn_cnt=4, cyc_cnt=8),
        br(30, B | R, 0x2020, 0x1015, insn_cnt=5, cyc_cnt=10),
    ])
    assert [(r[12], r[13]) for r in rows] == [(9, 18), (12, 24)]


def test_batches_continue_and_ids_continue():
    samples = [br(10, B | C, 0x1010, 0x2000), br(20, B | O, 0x2005, 0x2010), br(30, B | R, 0x2020, 0x1015)]
    whole, whole_paths, _ = run(samples)
    tree = CallTree()
    for s in samples:
        tree.process_batch({k: np.array([v]) for k, v in s.items()})
    tree.flush_all()
    calls = tree.take_calls()
    assert [tuple(int(calls[c][i]) for c in CALLS_COLUMNS) for i in range(2)] == whole
    tree2 = CallTree(first_call_id=100)
    tree2.process(**samples[0])
    tree2.process(**samples[2])
    tree2.flush_all()
    assert list(tree2.take_calls()["id"]) == [101, 102]


def test_missing_required_column_is_an_error():
    with pytest.raises(ValueError, match="lacks column 'ref'"):
        CallTree().process_batch({"time": np.zeros(1), "ip": np.zeros(1), "addr": np.zeros(1),
                                  "flags": np.zeros(1), "thread_id": np.zeros(1)})


def test_perf_flush_order():
    from ptexport.calltree import perf_flush_order

    # tids 3174 (bucket 102), 1760 (224), 28 (28), 0 (0), -1 (255); a guest thread last
    assert perf_flush_order([1, 2, 3, 4, 5, 6], [3174, 1760, 28, 0, -1, 5], [None, -1, -1, -1, -1, 4242]) == [
        4, 3, 1, 2, 5, 6]
    assert perf_flush_order([7, 8], [300, 44]) == [8, 7]  # 300 % 256 = 44: same bucket, by tid


def test_retpoline_symbol_names():
    from ptexport.calltree import is_x86_retpoline

    assert is_x86_retpoline("__x86_indirect_thunk_rax") and is_x86_retpoline("__indirect_thunk_start")
    assert not is_x86_retpoline("x__x86_indirect_thunk_rax") and not is_x86_retpoline("__x86_return_thunk")
