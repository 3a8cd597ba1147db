"""The numba call tree against the reference one: identical rows on random branch streams."""

from __future__ import annotations

import numpy as np
import pytest

from ptexport.calltree import CALLS_COLUMNS, CallTree
from ptexport.jit import available
from ptexport.calltree.threadstack_compiled import CallTree as FastCallTree
from ptexport.samples.flags import IpFlag

pytestmark = pytest.mark.skipif(not available(), reason="numba not installed")

B, C, R, O = IpFlag.BRANCH, IpFlag.CALL, IpFlag.RETURN, IpFlag.CONDITIONAL
S, Y, I = IpFlag.SYSCALLRET, IpFlag.ASYNC, IpFlag.INTERRUPT
TB, TE = IpFlag.TRACE_BEGIN, IpFlag.TRACE_END
K = 0xFFFFFFFF81000000
NSYM = 12
THUNK = 11  # a retpoline thunk symbol


def sym_start(s):
    return (K if s >= 8 else 0x400000) + s * 0x1000


def random_stream(seed: int, n: int) -> dict[str, np.ndarray]:
    """Branches that exercise every rule: real call/return nesting mixed with noise."""
    rng = np.random.default_rng(seed)
    threads = [(1, 10, 10), (2, 10, 11), (3, 0, 0), (4, 20, 20)]  # (thread_id, pid, tid); 3 is idle
    state = {t[0]: {"pc": sym_start(1) + 0x10, "stack": [], "comm": 1, "trace_nr": 1} for t in threads}
    cols = {k: [] for k in ("time", "ip", "addr", "flags", "ref", "thread_id", "cpu", "pid", "tid", "comm_id",
                            "insn_len", "insn_cnt", "cyc_cnt", "from_sym", "to_sym", "to_sym_start", "trace_nr")}
    t = 0
    for ref in range(1, n + 1):
        thread_id, pid, tid = threads[int(rng.integers(0, len(threads)))]
        st = state[thread_id]
        t += int(rng.integers(0, 3))
        pc = st["pc"]
        r = rng.random()
        insn_len = int(rng.integers(1, 6))
        if r < 0.25 and len(st["stack"]) < 30:  # call to a symbol start (or mid-symbol, like a thunk)
            s = int(rng.integers(1, NSYM))
            tgt = sym_start(s) + (0 if rng.random() < 0.8 else 0x10)
            if rng.random() < 0.1:  # call into the middle of the current symbol (retpoline pattern)
                tgt = (pc & ~0xFFF) + 0x20
            flags = B | C
            if rng.random() < 0.05:
                flags |= TE
            if rng.random() < 0.05:
                flags = B | C | S
            st["stack"].append(pc + insn_len)
            ip, addr = pc, tgt
        elif r < 0.5:  # return: usually matching, sometimes skipping frames or unmatched
            if st["stack"] and rng.random() < 0.8:
                k = 1 if rng.random() < 0.85 else int(rng.integers(1, len(st["stack"]) + 1))
                for _ in range(k):
                    tgt = st["stack"].pop()
            else:
                tgt = sym_start(int(rng.integers(1, NSYM))) + int(rng.integers(0, 0x100))
            flags = B | R
            if rng.random() < 0.05:
                flags = B | R | S
            if rng.random() < 0.03:
                tgt = 0  # return out of the traced space
            ip, addr = pc + 0x30, tgt
        elif r < 0.6:  # jmp to the start of another symbol (tail call)
            tgt = sym_start(int(rng.integers(1, NSYM)))
            flags, ip, addr = B, pc, tgt
        elif r < 0.65:  # trace end / begin pairs
            if rng.random() < 0.5:
                flags, ip, addr = B | Y | TE, pc, 0
            else:
                flags, ip, addr = B | TB, 0, pc
        elif r < 0.68:
            flags, ip, addr = B | C | Y | I, pc, sym_start(9)
        else:
            tgt = pc + int(rng.integers(1, 0x40))
            flags, ip, addr = B | O, pc, tgt
        if rng.random() < 0.01:
            st["trace_nr"] += 1
        if rng.random() < 0.005:
            st["comm"] += 1
        if addr:
            st["pc"] = addr
        fs = (ip & 0xFFFF) // 0x1000 if ip else 0
        ts_ = (addr & 0xFFFF) // 0x1000 if addr else 0
        cols["time"].append(t)
        cols["ip"].append(ip)
        cols["addr"].append(addr)
        cols["flags"].append(int(flags))
        cols["ref"].append(ref)
        cols["thread_id"].append(thread_id)
        cols["cpu"].append(int(rng.integers(0, 3)))
        cols["pid"].append(pid)
        cols["tid"].append(tid)
        cols["comm_id"].append(st["comm"])
        cols["insn_len"].append(insn_len)
        cols["insn_cnt"].append(int(rng.integers(0, 9)))
        cols["cyc_cnt"].append(int(rng.integers(0, 20)))
        cols["from_sym"].append(fs)
        cols["to_sym"].append(ts_)
        cols["to_sym_start"].append(sym_start(ts_) if ts_ else 0)
        cols["trace_nr"].append(st["trace_nr"])
    return {k: np.array(v, dtype=np.uint64 if k in ("ip", "addr", "to_sym_start") else np.int64)
            for k, v in cols.items()}


def run(tree, batch, pieces=1):
    n = len(batch["ref"])
    cuts = np.linspace(0, n, pieces + 1).astype(int)
    calls, paths = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        tree.process_batch({k: v[a:b] for k, v in batch.items()})
        calls.append(tree.take_calls())
        paths.append(tree.take_call_paths())
    tree.flush_all(order=[4, 3, 2, 1])
    calls.append(tree.take_calls())
    paths.append(tree.take_call_paths())
    c = {k: np.concatenate([x[k] for x in calls]) for k in CALLS_COLUMNS}
    p = {k: np.concatenate([x[k] for x in paths]) for k in ("id", "parent_id", "symbol_id", "ip")}
    return c, p


@pytest.mark.parametrize("seed", range(6))
def test_fast_matches_reference(seed):
    batch = random_stream(seed, 3000)
    ref_c, ref_p = run(CallTree(retpoline_syms={THUNK}), batch)
    fast_c, fast_p = run(FastCallTree(retpoline_syms={THUNK}, capacity=8), batch, pieces=7)  # tiny: grows
    assert len(ref_c["id"]) > 500
    for k in CALLS_COLUMNS:
        assert fast_c[k].tolist() == ref_c[k].tolist(), k
    for k in ref_p:
        assert fast_p[k].tolist() == ref_p[k].tolist(), k
    # every flag combination perf produces shows up
    assert {0, 1, 2, 3, 6}.issubset(set(ref_c["flags"].tolist()))


class _RawBatch(dict):
    """A batch as the export hands it over (``dbexport.samples_compiled.TreeColumns``): its ``raw()`` is
    every row's columns, other samples' rows among the branches, and the branches' rows."""

    def __init__(self, cols, rows):
        super().__init__()
        self._raw = (cols, rows)

    def raw(self):
        return self._raw


@pytest.mark.parametrize("seed", range(4))
def test_fast_reads_the_branches_among_other_rows_as_the_reference_reads_them(seed):
    """Rows of other samples (instructions, PSBs: noise in every column, idle and new threads among them)
    between the branches, in batches some with none: the same calls and call paths as the branches alone."""
    batch = random_stream(seed, 3000)
    ref_c, ref_p = run(CallTree(retpoline_syms={THUNK}), batch)
    rng = np.random.default_rng(seed + 100)
    tree = FastCallTree(retpoline_syms={THUNK}, capacity=8)
    n = len(batch["ref"])
    cuts = np.linspace(0, n, 8).astype(int)
    calls, paths = [], []
    for j, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        part = {k: v[a:b] for k, v in batch.items()}
        extra = 0 if j == 3 else int(rng.integers(1, b - a))  # (batch 3: branches only)
        m = b - a + extra
        is_br = np.ones(m, bool)
        is_br[rng.choice(m, extra, replace=False)] = False
        full = {}
        for k, v in part.items():
            col = rng.integers(0, 50, m).astype(v.dtype)  # the other rows' values: anything
            col[is_br] = v
            full[k] = col
        full["pid"][~is_br] = 0  # idle threads and threads the branches never have
        full["tid"][~is_br] = rng.integers(0, 2, extra)
        full["thread_id"][~is_br] = rng.integers(50, 60, extra)
        tree.process_batch(_RawBatch(full, None if not extra else np.flatnonzero(is_br)))
        calls.append(tree.take_calls())
        paths.append(tree.take_call_paths())
    tree.flush_all(order=[4, 3, 2, 1])
    calls.append(tree.take_calls())
    paths.append(tree.take_call_paths())
    for k in CALLS_COLUMNS:
        assert np.concatenate([x[k] for x in calls]).tolist() == ref_c[k].tolist(), k
    for k in ref_p:
        assert np.concatenate([x[k] for x in paths]).tolist() == ref_p[k].tolist(), k
    plain = FastCallTree(retpoline_syms={THUNK}, capacity=8)
    run(plain, batch, pieces=7)
    assert sorted(tree.slots) == sorted(plain.slots)  # no stack for a thread only the other rows have


def test_fast_without_x86_and_with_continued_ids():
    batch = random_stream(42, 1500)
    ref_c, _ = run(CallTree(x86=False, first_call_id=1000), batch)
    fast_c, _ = run(FastCallTree(x86=False, first_call_id=1000), batch)
    assert fast_c["id"].tolist() == ref_c["id"].tolist() and min(ref_c["id"]) == 1001
    assert fast_c["parent_id"].tolist() == ref_c["parent_id"].tolist()


def test_fast_set_trace_nr_and_depth():
    batch = random_stream(3, 200)
    ref, fast = CallTree(), FastCallTree()
    ref.process_batch(batch)
    fast.process_batch(batch)
    for t in (1, 2, 4):
        assert fast.depth(t) == ref.depth(t)
        ref.set_trace_nr(t, 99)
        fast.set_trace_nr(t, 99)
        assert fast.depth(t) == ref.depth(t) == 0
    assert fast.take_calls()["id"].tolist() == ref.take_calls()["id"].tolist()


@pytest.mark.parametrize("cls", [CallTree, FastCallTree])
def test_root_written_by_the_caller_is_not_exported_again(cls):
    batch = random_stream(11, 300)
    plain = cls()
    plain.process_batch(batch)
    plain.flush_all()
    own = cls(root_call_path_id=1, first_call_path_id=1)
    own.process_batch(batch)
    own.flush_all()
    p0, p1 = plain.take_call_paths(), own.take_call_paths()
    assert p0["id"][0] == 1 and p0["parent_id"][0] == 0 and p0["symbol_id"][0] == 0
    assert p1["id"].tolist() == p0["id"][1:].tolist() and p1["parent_id"].tolist() == p0["parent_id"][1:].tolist()
    assert own.take_calls()["call_path_id"].tolist() == plain.take_calls()["call_path_id"].tolist()
