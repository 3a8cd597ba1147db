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

from ptexport.calltree import CALLS_COLUMNS, CallTree
from tests.conftest import needs_perf

EXPORT = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
U64 = (1 << 64) - 1


def perf_export(trace, db, itrace="be"):
    subprocess.run(
        ["perf", "script", f"--itrace={itrace}", "-i", str(trace), "-s", EXPORT, str(db), "branches", "calls"],
        capture_output=True, check=True, cwd=db.parent,
        env=dict(os.environ, PATH="/usr/local/bin:/usr/bin:/bin"),  # perf's embedded Python finds its prefix via PATH
    )


def branch_batch(con):
    threads = {r[0]: (r[1], r[2]) for r in con.execute("SELECT id, pid, tid FROM threads")}
    rows = con.execute(
        "SELECT samples.id, thread_id, comm_id, symbol_id, ip, to_symbol_id, to_sym_offset, to_ip, branch_type,"
        " insn_count, cyc_count, cpu, time FROM samples JOIN selected_events ON evsel_id = selected_events.id"
        " WHERE selected_events.name = 'branches' ORDER BY samples.id"
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


@needs_perf
def test_calls_and_call_paths_match_perf_export(quipper, tmp_path):
    db = tmp_path / "perf.db"
    perf_export(quipper, db)
    with sqlite3.connect(db) as con:
        batch, threads = branch_batch(con)
        perf_calls = [tuple(r) for r in con.execute("SELECT * FROM calls WHERE id != 0 ORDER BY id")]
        perf_paths = [tuple(r) for r in con.execute("SELECT * FROM call_paths WHERE id != 0 ORDER BY id")]
    assert len(batch["ref"]) == 619 and len(perf_calls) == 10

    tree = CallTree()
    half = len(batch["ref"]) // 2  # two batches: state carries over
    tree.process_batch({k: v[:half] for k, v in batch.items()})
    tree.process_batch({k: v[half:] for k, v in batch.items()})
    # perf flushes what is left in its thread-table order: tid modulo 256, then tid
    tree.flush_all(order=sorted(set(batch["thread_id"].tolist()), key=lambda t: (threads[t][1] % 256, threads[t][1])))

    calls = tree.take_calls()
    ours = sorted(tuple(int(calls[c][i]) for c in CALLS_COLUMNS) for i in range(len(calls["id"])))
    assert ours == perf_calls
    cp = tree.take_call_paths()
    assert [tuple(int(cp[c][i]) for c in ("id", "parent_id", "symbol_id", "ip")) for i in range(len(cp["id"]))] == [
        (r[0], r[1], r[2], r[3] & U64) for r in perf_paths
    ]
    # the flags perf wrote: bottom entries "no call/no return" (3) and stacks flushed mid-trace (2)
    assert sorted({r[10] for r in perf_calls}) == [0, 2, 3]
