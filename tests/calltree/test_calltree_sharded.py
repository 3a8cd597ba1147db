"""The call tree cut by thread into shards (calltree/sharded.py) against the serial compiled tree:
identical calls, call paths and aggregates on random branch streams, whatever the shards and batches."""

from __future__ import annotations

import numpy as np
import pytest

from ptexport.calltree import CALLS_COLUMNS
from ptexport.calltree import sharded
from ptexport.calltree.sharded import LOCAL, InlineExecutor, ShardedCallTree, tree_step
from ptexport.calltree.threadstack_compiled import CallTree as FastCallTree
from ptexport.jit import available

from test_calltree_fast import THUNK, random_stream, run

pytestmark = pytest.mark.skipif(not available(), reason="numba not installed")


def _differences(kw: dict, batch: dict, shards: int, pieces: int, step_rows: int = 1) -> list[str]:
    """What differs from the serial tree; ``step_rows``: a round of steps every that many branches (1: a
    round a batch; a big number: one round at the end)."""
    serial, cut = FastCallTree(**kw), ShardedCallTree(InlineExecutor(), shards, **kw)
    cut.step_rows = step_rows
    sc, sp = run(serial, batch, pieces=pieces)
    cc, cp = run(cut, batch, pieces=pieces)
    bad = [k for k in CALLS_COLUMNS if sc[k].tolist() != cc[k].tolist()]
    bad += [f"call_paths.{k}" for k in sp if sp[k].tolist() != cp[k].tolist()]
    if kw.get("stats"):
        a, b = serial.take_stats(), cut.take_stats()
        bad += [f"{t}.{k}" for t in a for k in a[t] if a[t][k].tolist() != b[t][k].tolist()]
    if serial.last_call_id != cut.last_call_id:
        bad.append("last_call_id")
    return bad


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shards,pieces,step_rows", [(1, 1, 1), (1, 5, 1), (2, 1, 1), (2, 7, 1), (3, 4, 1),
                                                     (4, 40, 1), (2, 9, 1000), (3, 12, 10 ** 9)])
def test_shards_give_the_serial_rows(seed, shards, pieces, step_rows):
    batch = random_stream(seed, 3000)
    assert not _differences({"retpoline_syms": {THUNK}}, batch, shards, pieces, step_rows)


@pytest.mark.parametrize("kw", [
    {"x86": False, "first_call_id": 1000},  # ids continued from a caller's
    {"retpoline_syms": {THUNK}, "root_call_path_id": 1, "first_call_path_id": 7},  # the root written by the caller
    {"retpoline_syms": {THUNK}, "stats": True},  # call_path_stats and symbol_stats
    {"retpoline_syms": {THUNK}, "kernel_start": 0xFFFFFFFF80000000},
])
def test_shards_keep_the_options(kw):
    assert not _differences(kw, random_stream(42, 3000), 3, 6)


def test_many_threads_over_few_shards():
    """50 threads (the stream's four, each cut into its own trace stretches) over 3 shards."""
    batch = random_stream(5, 12000)
    thread = batch["thread_id"].copy()
    stretch = np.arange(len(thread)) // 1000  # a thread's stretch of the stream: a thread of its own
    batch["thread_id"] = thread * 13 + stretch
    batch["trace_nr"] = batch["trace_nr"] + stretch * 1000  # a new thread starts a new stack anyway
    assert len(np.unique(batch["thread_id"])) >= 40
    assert not _differences({"retpoline_syms": {THUNK}}, batch, 3, 11)


def test_a_step_is_pure_and_its_state_is_the_open_calls():
    """A retried step (a worker died) gives the same rows and state; the state it hands on holds only
    the calls still open and the call paths they use."""
    batch = random_stream(9, 2000)
    part = {k: v for k, v in batch.items()}
    part["key"] = np.arange(len(batch["ref"]), dtype=np.int64)
    params = sharded.TreeParams(retpoline_syms=(THUNK,))
    a = tree_step(params, None, 0, [part], None)
    b = tree_step(params, None, 0, [part], None)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert all(np.array_equal(a[2][k], b[2][k]) for k in a[2])
    state = a[2]
    serial = FastCallTree(retpoline_syms={THUNK})
    serial.process_batch(batch)
    open_calls = sum(serial.depth(int(t), int(c)) for t, c in state["keys"].tolist() if c < 0)
    open_calls += sum(serial.depth(3, int(c), pid=0, tid=0) for t, c in state["keys"].tolist() if c >= 0)
    assert len(state["E"]) == open_calls > 0
    assert len(state["P"]) < int(serial.G[2])  # fewer nodes than the paths the tree made
    # ids of the step's own are above LOCAL until the stitch renumbers them
    assert (a[0][:, 0] > LOCAL).all()


def test_the_stitch_ranks_by_the_branch_that_gave_the_id():
    """Two threads in two shards, alternating: the ids interleave as the serial tree gives them."""
    batch = random_stream(1, 4000)
    keep = np.isin(batch["thread_id"], (1, 2))
    batch = {k: v[keep] for k, v in batch.items()}
    serial, cut = FastCallTree(), ShardedCallTree(InlineExecutor(), 2)
    cut.step_rows = 1
    sc, _ = run(serial, batch, pieces=3)
    cc, _ = run(cut, batch, pieces=3)
    assert cut.steps >= 6
    by_thread = {t: cc["id"][cc["thread_id"] == t] for t in (1, 2)}
    assert by_thread[1].size and by_thread[2].size
    assert not (by_thread[1].max() < by_thread[2].min() or by_thread[2].max() < by_thread[1].min())
    assert cc["id"].tolist() == sc["id"].tolist() and cc["parent_id"].tolist() == sc["parent_id"].tolist()
