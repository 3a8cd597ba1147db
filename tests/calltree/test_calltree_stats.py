"""The call tree's aggregates (calltree/stats.py): both twins give the same call_path_stats and symbol_stats,
and those equal the GROUP BY over the calls rows they hand out (self time by the parent_id join)."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
from test_calltree_fast import THUNK, random_stream

from ptexport.calltree import CALLS_COLUMNS, CallTree
from ptexport.calltree.stats import (
    CALL_PATH_STATS_COLUMNS,
    SYMBOL_STATS_COLUMNS,
    GroupStats,
)
from ptexport.calltree.threadstack_compiled import CallTree as FastCallTree
from ptexport.jit import available


def run(tree, batch, pieces):
    n = len(batch["ref"])
    cuts = np.linspace(0, n, pieces + 1).astype(int)
    calls, paths = [], []
    for a, b in itertools.pairwise(cuts):
        tree.process_batch({k: v[a:b] for k, v in batch.items()})
        paths.append(tree.take_call_paths())
        calls.append(tree.take_calls())
    tree.flush_all(order=[4, 3, 2, 1])
    paths.append(tree.take_call_paths())
    calls.append(tree.take_calls())
    c = {k: np.concatenate([x[k] for x in calls]) for k in CALLS_COLUMNS}
    p = {k: np.concatenate([x[k] for x in paths]) for k in ("id", "symbol_id")}
    return c, p, tree.take_stats()


def stats_from_calls(c, p):
    """call_path_stats and symbol_stats as the migration's SQL computes them, in plain Python."""
    dur = {int(i): int(r) - int(t) for i, t, r in zip(c["id"], c["call_time"], c["return_time"])}
    child = defaultdict(int)
    for i, parent in zip(c["id"].tolist(), c["parent_id"].tolist()):
        if parent > 0:
            child[parent] += dur[i]
    groups: dict[tuple[int, int], list[int]] = {}
    for j, i in enumerate(c["id"].tolist()):
        d = dur[i]
        key = (int(c["thread_id"][j]), int(c["call_path_id"][j]))
        g = groups.setdefault(key, [0, 0, 0, d, d, 0, 0, 0])
        g[0] += 1
        g[1] += d
        g[2] += d - child[i]
        g[3] = min(g[3], d)
        g[4] = max(g[4], d)
        g[5] += int(c["branch_count"][j])
        g[6] += int(c["insn_count"][j])
        g[7] += int(c["cyc_count"][j])
    cps = [(k + 1, *key, *groups[key]) for k, key in enumerate(sorted(groups))]
    sym_of = dict(zip(p["id"].tolist(), p["symbol_id"].tolist()))
    by_sym: dict[int, list[int]] = {}
    for row in cps:
        g = row[3:]
        s = by_sym.setdefault(sym_of[row[2]], [0, 0, 0, g[3], g[4], 0, 0, 0])
        for k in (0, 1, 2, 5, 6, 7):
            s[k] += g[k]
        s[3] = min(s[3], g[3])
        s[4] = max(s[4], g[4])
    syms = [(k + 1, sym, *by_sym[sym]) for k, sym in enumerate(sorted(by_sym))]
    return cps, syms


def rows(cols, names):
    return list(zip(*(cols[n].tolist() for n in names)))


@pytest.mark.parametrize("seed", range(4))
def test_reference_stats_equal_the_group_by_over_its_calls(seed):
    c, p, st = run(CallTree(retpoline_syms={THUNK}, stats=True), random_stream(seed, 3000), pieces=5)
    cps, syms = stats_from_calls(c, p)
    assert len(cps) > 20 and any(r[5] != r[4] for r in cps)  # some paths have callees: self < total
    assert rows(st["call_path_stats"], CALL_PATH_STATS_COLUMNS) == cps
    assert rows(st["symbol_stats"], SYMBOL_STATS_COLUMNS) == syms


@pytest.mark.skipif(not available(), reason="numba not installed")
@pytest.mark.parametrize("seed", range(6))
def test_compiled_stats_equal_the_reference(seed):
    batch = random_stream(seed, 3000)
    _, _, ref = run(CallTree(retpoline_syms={THUNK}, stats=True), batch, pieces=1)
    c, p, fast = run(FastCallTree(retpoline_syms={THUNK}, capacity=8, stats=True), batch, pieces=7)
    for table, names in (("call_path_stats", CALL_PATH_STATS_COLUMNS), ("symbol_stats", SYMBOL_STATS_COLUMNS)):
        assert rows(fast[table], names) == rows(ref[table], names), table
    assert rows(fast["call_path_stats"], CALL_PATH_STATS_COLUMNS) == stats_from_calls(c, p)[0]


@pytest.mark.parametrize("cls", [CallTree, FastCallTree])
def test_no_stats_unless_asked(cls):
    if cls is FastCallTree and not available():
        pytest.skip("numba not installed")
    tree = cls()
    tree.process_batch(random_stream(1, 100))
    tree.flush_all()
    tree.take_calls()
    assert tree.take_stats() == {}


def test_group_stats_merges_batches_exactly():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 50, 5000)
    vals = rng.integers(-(1 << 40), 1 << 40, 5000)
    g = GroupStats(sums=("v",), mins=("lo",), maxs=("hi",))
    for a in range(0, 5000, 700):
        sl = slice(a, a + 700)
        g.add(keys[sl], {"v": vals[sl], "lo": vals[sl], "hi": vals[sl]})
    k, cols = g.result()
    assert k.tolist() == sorted(set(keys.tolist()))
    for j, key in enumerate(k.tolist()):
        v = vals[keys == key]
        assert (cols["count"][j], cols["v"][j], cols["lo"][j], cols["hi"][j]) == (len(v), v.sum(), v.min(), v.max())


@pytest.mark.skipif(not available(), reason="numba not installed")
@pytest.mark.parametrize("spread", [7, 200_000, 1 << 62])
def test_group_stats_compiled_equals_sorted_form(monkeypatch, spread):
    """The hash-table fold (growing through many batches and rehashes) gives the numpy form's groups,
    keys negative and far apart included, sums wrapping at 64 bits alike."""
    from ptexport.calltree import stats

    rng = np.random.default_rng(spread % 1000)
    keys = rng.integers(-spread, spread, 150_000)
    vals = rng.integers(-(1 << 62), 1 << 62, 150_000)
    kinds = {"sums": ("v",), "mins": ("lo",), "maxs": ("hi",), "count": "n"}
    compiled = GroupStats(**kinds)
    real = stats.numba
    monkeypatch.setattr(stats, "numba", None)
    sorted_form = GroupStats(**kinds)
    cuts = [0, 1, 100, 3000, 20_000, 90_000, 150_000]
    for a, b in itertools.pairwise(cuts):
        sl = {"v": vals[a:b], "lo": vals[a:b], "hi": vals[a:b] ^ 5}
        sorted_form.add(keys[a:b], sl)
        monkeypatch.setattr(stats, "numba", real)
        compiled.add(keys[a:b], sl)
        monkeypatch.setattr(stats, "numba", None)
    want = sorted_form.result()
    assert len(sorted_form) == len(want[0])
    monkeypatch.setattr(stats, "numba", real)
    got = compiled.result()
    assert len(compiled) == len(want[0])
    assert got[0].tolist() == want[0].tolist()
    for name in ("n", "v", "lo", "hi"):
        assert got[1][name].tolist() == want[1][name].tolist(), name


@pytest.mark.parametrize("compiled", [True, False])
def test_group_stats_take_gives_the_result_and_starts_anew(monkeypatch, compiled):
    from ptexport.calltree import stats

    if not compiled:
        monkeypatch.setattr(stats, "numba", None)
    elif not available():
        pytest.skip("numba not installed")
    rng = np.random.default_rng(9)
    g = GroupStats(sums=("v",), mins=("lo",), maxs=("hi",))
    keys, vals = rng.integers(-50, 3000, 20_000), rng.integers(-(1 << 40), 1 << 40, 20_000)
    for a in range(0, 20_000, 3000):
        g.add(keys[a:a + 3000], {"v": vals[a:a + 3000], "lo": vals[a:a + 3000], "hi": vals[a:a + 3000]})
    want_k, want = g.result()
    got_k, got = g.take()
    assert got_k.tolist() == want_k.tolist()
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
    assert len(g) == 0 and len(g.result()[0]) == 0
    g.add(keys[:10], {"v": vals[:10], "lo": vals[:10], "hi": vals[:10]})  # folds anew
    assert g.result()[1]["count"].sum() == 10
