"""Differential test: our call tree against perf 6.1's export-to-sqlite.py ``calls``.

perf exports the real quipper Intel PT recording (``--itrace=be``); its
``samples`` table is fed back to :class:`CallTree` and the ``calls`` and
``call_paths`` tables must come out identical, ids included.  The decoder's
trace number is not in the database: perf decodes per CPU, so a thread moving
to another CPU queue sees another trace number (which flushes its stack); the
test stands that in with ``trace_nr = cpu + 1``.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess

import numpy as np
import pytest

from ptexport.calltree import CALLS_COLUMNS, CallTree, make_call_tree, perf_flush_order
from ptxtest import needs_perf

EXPORT = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
U64 = (1 << 64) - 1


def perf_export(trace, db, itrace="be"):
    subprocess.run(
        ["perf", "script", f"--itrace={itrace}", "-i", str(trace), "-s", EXPORT, str(db), "branches", "calls"],
        capture_output=True, check=True, cwd=db.parent,
        env=dict(os.environ, PATH="/usr/local/bin:/usr/bin:/bin"),  # perf's embedded Python finds its prefix via PATH
    )


def insn_lengths(trace):
    """perf's insn_len of each branch sample (not in the database; perf script prints it)."""
    out = subprocess.run(
        ["perf", "script", "--itrace=be", "-F", "event,insnlen", "-i", str(trace)],
        capture_output=True, text=True, check=True, env=dict(os.environ, PATH="/usr/local/bin:/usr/bin:/bin"),
    ).stdout
    return np.array([int(ln.rsplit("ilen:", 1)[1]) for ln in out.splitlines()
                     if ln.lstrip().startswith("branches") and "ilen:" in ln], dtype=np.int64)


def branch_batch(con):
    threads = {r[0]: (r[1], r[2]) for r in con.execute("SELECT id, pid, tid FROM threads")}
    rows = con.execute(
        "SELECT samples.id, thread_id, comm_id, symbol_id, ip, to_symbol_id, to_sym_offset, to_ip, branch_type,"
        " insn_count, cyc_count, cpu, time FROM samples JOIN selected_events ON evsel_id = selected_events.id"
        " WHERE selected_events.name LIKE 'branches%' ORDER BY samples.id"
    ).fetchall()
    a = np.array([[int(v) & U64 for v in r] for r in rows], dtype=np.uint64)
    thread_id = a[:, 1].astype(np.int64)
    to_sym = a[:, 5].astype(np.int64)
    batch = {
        "ref": a[:, 0].astype(np.int64),
        "thread_id": thread_id,
        "comm_id": a[:, 2].astype(np.int64),
        "from_sym": a[:, 3].astype(np.int64),
        "ip": a[:, 4],
        "to_sym": to_sym,
        "to_sym_start": np.where(to_sym != 0, a[:, 7] - a[:, 6], 0).astype(np.uint64),
        "addr": a[:, 7],
        "flags": a[:, 8].astype(np.int64),
        "insn_cnt": a[:, 9].astype(np.int64),
        "cyc_cnt": a[:, 10].astype(np.int64),
        "cpu": a[:, 11].astype(np.int64),
        "time": a[:, 12].astype(np.int64),
        "pid": np.array([threads[t][0] for t in thread_id], dtype=np.int64),
        "tid": np.array([threads[t][1] for t in thread_id], dtype=np.int64),
    }
    batch["trace_nr"] = batch["cpu"] + 1
    return batch, threads


def compare_with_perf(trace, tmp_path, n_branches=None):
    db = tmp_path / "perf.db"
    perf_export(trace, db)
    with sqlite3.connect(db) as con:
        batch, threads = branch_batch(con)
        perf_calls = [tuple(r) for r in con.execute("SELECT * FROM calls WHERE id != 0 ORDER BY id")]
        perf_paths = [tuple(r) for r in con.execute("SELECT * FROM call_paths WHERE id != 0 ORDER BY id")]
    batch["insn_len"] = insn_lengths(trace)
    assert len(batch["insn_len"]) == len(batch["ref"])
    if n_branches is not None:
        assert len(batch["ref"]) == n_branches
    ids = sorted(set(batch["thread_id"].tolist()))
    order = perf_flush_order(ids, [threads[t][1] for t in ids])
    half = len(batch["ref"]) // 2  # two batches: state carries over
    for tree in (CallTree(), make_call_tree()):
        tree.process_batch({k: v[:half] for k, v in batch.items()})
        tree.process_batch({k: v[half:] for k, v in batch.items()})
        # perf flushes what is left in its thread-table order: tid modulo 256, then tid
        tree.flush_all(order=order)
        calls = tree.take_calls()
        ours = sorted(tuple(int(calls[c][i]) for c in CALLS_COLUMNS) for i in range(len(calls["id"])))
        assert ours == perf_calls, type(tree).__name__
        cp = tree.take_call_paths()
        assert [tuple(int(cp[c][i]) for c in ("id", "parent_id", "symbol_id", "ip")) for i in range(len(cp["id"]))] == [
            (r[0], r[1], r[2], r[3] & U64) for r in perf_paths
        ]
    return perf_calls


@needs_perf
def test_calls_and_call_paths_match_perf_export(quipper, tmp_path):
    perf_calls = compare_with_perf(quipper, tmp_path, n_branches=619)
    assert len(perf_calls) == 10
    # the flags perf wrote: bottom entries "no call/no return" (3) and stacks flushed mid-trace (2)
    assert sorted({r[10] for r in perf_calls}) == [0, 2, 3]


@needs_perf
def test_calls_match_perf_on_generated_call_heavy_trace(tmp_path):
    """A generated trace of a real program (calls, recursion, tail calls) that perf decodes fully."""
    pytest.importorskip("unicorn")
    from ptexport.synth.generate import SynthOptions, synthesize

    res = synthesize(str(tmp_path / "syn"), SynthOptions(program="calls", branches=5000, seed=3, timing="cyc"))
    perf_calls = compare_with_perf(res.perf_data, tmp_path)
    assert len(perf_calls) > 1000
    flags = {r[10] for r in perf_calls}
    assert {0, 6}.issubset(flags)  # plain calls and tail calls ("jump")
    assert sum(r[12] for r in perf_calls) > 0 and sum(r[13] for r in perf_calls) > 0  # CYC: insn/cycle counts


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("program,cpus,per_thread", [("threads", 2, False), ("forkexec", 1, False), ("threads", 1, True)])
def test_calls_match_perf_with_threads_cpus_and_exec(tmp_path, program, cpus, per_thread):
    """Several threads migrating between CPU queues (stack flushes), fork+exec (exec flush), --per-thread."""
    pytest.importorskip("unicorn")
    from ptexport.synth.generate import SynthOptions, synthesize

    res = synthesize(str(tmp_path / "syn"), SynthOptions(program=program, branches=4000, seed=5, cpus=cpus,
                                                         per_thread=per_thread))
    perf_calls = compare_with_perf(res.perf_data, tmp_path)
    assert len({r[1] for r in perf_calls}) >= 2  # calls of more than one thread
