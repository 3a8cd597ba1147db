#!/usr/bin/env python3
"""Decoding on a dask cluster (issue #16): per-unit costs, the coordinator's serial share, end to end.

    python3 bench/bench_cluster.py                        # 2 M branches
    python3 bench/bench_cluster.py --branches 5M --pg postgresql://postgres@127.0.0.1:5432 --json c.json
    python3 bench/bench_cluster.py --tiny                 # a quick check that it works

One trace (``ptexport synth --program calls``, in a temporary directory or ``--keep DIR``), in one run:

* **end to end** (each a separate ``ptexport TRACE --db X.sqlite`` process, numba's cache warm):
  ``--jobs 1``, ``--jobs 2``, ``--scheduler local:2`` (its LocalCluster started by the run: counted)
  and ``--scheduler tcp://...`` to a LocalCluster of 2 workers started (and warmed) beforehand;
* **per-unit costs**, measured in this process, one at a time (per million exported samples):

  - *decode*: every PSB segment of the trace (the cluster's work units, ``STREAM_SEGMENT_BYTES``
    each) decoded by ``_segment_job`` as a worker would; with the bytes of its result as pickled
    for the wire;
  - *join + merge*: ``iter_batches`` fed the segments' results ready-made: what the coordinator
    does between receiving units and handing batches to db-export (serial);
  - *db-export*, *call tree*, *write SQLite* / *COPY PostgreSQL*: the decoded batches exported
    into a writer that drops its rows, without and with calls, then into SQLite (and PostgreSQL
    with ``--pg``); each the difference to the previous (wall seconds: the call tree runs in a
    thread of its own beside db-export);

* the **projection** for 8, 32 and 128 workers from those figures: the decode share divides by the
  workers, the coordinator's share (join + merge, db-export, call tree, write) does not.  Amdahl
  (no overlap) and pipelined (decode overlapped with the coordinator: its share is the floor).

On a 2-core machine a cluster of 2 workers cannot beat ``--jobs 2`` (3 processes on 2 cores,
results through loopback TCP); the point is the measured serial share.  ``--tiny`` is 20 k branches.
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from _common import add_options, one_line_errors, parse, parse_count, ratio, workdir, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's ptexport, as the subprocesses get it (PYTHONPATH)

WORKERS = (8, 32, 128)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def _ptexport(*args: str) -> list[str]:
    return [sys.executable, "-c", "from ptexport.cli import entry; entry()", *args]


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    return time.perf_counter() - t0


def _samples(path: str) -> int:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return int(con.execute("SELECT count(*) FROM samples").fetchone()[0])
    finally:
        con.close()


def _calls_digest(path: str) -> tuple:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return tuple(con.execute("SELECT count(*), sum(call_path_id), sum(parent_id), sum(call_id), sum(branch_count), "
                                 "(SELECT count(*) FROM call_paths), (SELECT sum(parent_id) FROM call_paths) "
                                 "FROM calls").fetchone())
    finally:
        con.close()


def generate(work: Path, branches: int, program: str) -> Path:
    subprocess.run(_ptexport("synth", "--out", str(work), "--program", program, "--branches", str(branches)),
                   check=True, stdout=subprocess.DEVNULL, env=_env())
    return work / "perf.data"


class _Ready:
    """A finished future (the per-unit measurement's executor hands back results computed before)."""

    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value

    def done(self) -> bool:
        return True

    def cancel(self) -> None:
        pass


class _Inline:
    """A UnitExecutor that runs each unit here, timing it, and can replay the results."""

    def __init__(self, width: int = 2) -> None:
        self.width = self.window = width
        self.budget = None  # each stream has its window (units.py)
        self.in_flight = 0
        self.results: dict = {}
        self.unit_s: list[float] = []
        self.unit_bytes: list[int] = []
        self.replay = False
        self.fresh: dict = {}  # the results a replay hands out (unpickled before it is timed)

    def submit(self, fn, *args):
        key = args[3:6]  # queue, start, stop
        if self.replay:
            return _Ready(self.fresh.pop(key))
        t0 = time.perf_counter()
        res = fn(*args)
        self.unit_s.append(time.perf_counter() - t0)
        wire = pickle.dumps(res, protocol=5)
        self.unit_bytes.append(len(wire))
        self.results[key] = wire  # a fresh copy for the replay: the join takes a result's rows in place
        return _Ready(res)

    def release(self) -> None:
        pass


class _TimedTrees:
    """The cluster's call tree executor (session/cluster.py DaskTrees), run here: each shard's step timed,
    with the bytes it would cross the wire with (its arguments out, its result back)."""

    def __init__(self, shards: int = 2) -> None:
        self.shards = shards
        self.step_s: dict[int, float] = {}  # shard (its threads' part of each batch) -> seconds of its steps
        self.wire_bytes = 0
        self.wire_s = 0.0  # the coordinator's share of (un)pickling, measured apart
        self.pickle_s = 0.0  # all the (un)pickling done here
        self.steps = 0

    def submit(self, fn, *args):
        params, state, root_id, part, flush = args
        shard = -1 if part is None else int(np.asarray(part[0]["thread_id"]).flat[0]) % self.shards
        t0 = time.thread_time()
        res = fn(*args)
        t1 = time.thread_time()
        self.step_s[shard] = self.step_s.get(shard, 0.0) + t1 - t0
        self.steps += 1
        # the coordinator pickles what it sends and unpickles what comes back (the worker the reverse)
        out = pickle.dumps((state, part, flush), protocol=5)
        back = pickle.dumps(res, protocol=5)
        t2 = time.thread_time()
        pickle.loads(back)
        t3 = time.thread_time()
        self.pickle_s += t3 - t1
        self.wire_s += t3 - t2 + (t2 - t1) / 2  # (about half the dumps: the coordinator's)
        self.wire_bytes += len(out) + len(back)
        return _Ready(res)


def _tree_costs(session, batches) -> dict:
    """The call tree's CPU in the coordinator's tree thread (``time.thread_time``: not its waits for the
    interpreter lock), built by this process (``tree_here_s``) and as the cluster builds it with
    ``--cluster-trees`` (calltree/sharded.py): the workers' steps (``tree_steps_s``, run here inline
    and timed apart) and what stays here (``tree_stitch_s``: cutting each batch by thread, ranking the
    shards' ids, finding call paths by content, the rows' columns and aggregates)."""
    from ptexport.calltree.sharded import ShardedCallTree
    from ptexport.calltree.threadstack_compiled import CallTree
    from ptexport.dbexport.exporter import DbExporter, ExportConfig
    from ptexport.samples.itrace import export_default
    from ptexport.session.export import sample_loop, vm_trace

    out = {}
    for cls, trees in ((CallTree, None), (ShardedCallTree, _TimedTrees())):
        spent = [0.0]
        names = [n for n in ("process_batch", "flush_all", "take_calls", "take_call_batches", "take_call_paths",
                             "take_stats") if hasattr(cls, n)]
        orig = {n: getattr(cls, n) for n in names}

        def timed_method(name, orig=orig, spent=spent):
            def run(self, *a, **k):
                t0 = time.thread_time()
                try:
                    return orig[name](self, *a, **k)
                finally:
                    spent[0] += time.thread_time() - t0
            return run

        for n in names:
            setattr(cls, n, timed_method(n))
        try:
            cfg = ExportConfig(itrace=export_default(), calls=True, force=True)
            with _null_writer() as w:
                ex = DbExporter(session, w, cfg, vm_trace(session, cfg), trees=trees)
                try:
                    ex.run(iter(batches), sample_loop(cfg))
                finally:
                    ex.close()
        finally:
            for n, f in orig.items():
                setattr(cls, n, f)
        if trees is None:
            out["tree_here_s"] = spent[0]
            continue
        steps = sum(trees.step_s.values())
        out.update(tree_steps_s=steps, tree_steps_longest_shard_s=max(trees.step_s.values(), default=0.0),
                   tree_stitch_s=max(0.0, spent[0] - steps - trees.pickle_s), tree_pickle_s=trees.wire_s,
                   tree_steps=trees.steps, tree_wire_bytes=trees.wire_bytes)
    return out


def _null_writer():
    from ptexport.writers.base import Writer

    class NullWriter(Writer):
        """Drops every row: db-export's own cost."""

        dialect = "sqlite"
        target = "null"

        def _insert_rows(self, table, rows):
            pass

        def _insert_columns(self, table, cols, n):
            pass

        def _finish_database(self):
            pass

        def abort(self):
            pass

    return NullWriter()


def per_unit(trace: Path, pg: str | None) -> dict:
    from ptexport.dbexport.exporter import DbExporter, ExportConfig
    from ptexport.perfdata import open_perf_data
    from ptexport.samples.itrace import export_default
    from ptexport.session import parallel
    from ptexport.session.export import sample_loop, vm_trace
    from ptexport.session.perfsession import DecodeConfig, open_session
    from ptexport.writers import open_writer

    out: dict = {}
    with open_perf_data(str(trace)) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default(), insn_fetch_marks=False))
        units = _Inline()
        t0 = time.perf_counter()
        batches = list(session.iter_batches(1, units=units))
        first = time.perf_counter() - t0
        if not units.unit_s:
            raise SystemExit("bench_cluster: the trace is too small to be cut into segments (use more --branches)")
        units.replay = True
        units.fresh = {k: pickle.loads(v) for k, v in units.results.items()}  # as a worker's arrive: fresh
        # as the coordinator streams them: each batch dropped once taken (holding every one, each fresh
        # array would be new memory: 2 M samples measured 0.42-0.58 s held against 0.37 s streamed)
        t0 = time.perf_counter()
        again = sum(len(b) for b in session.iter_batches(1, units=units))
        out["join_merge_s"] = time.perf_counter() - t0
        samples = sum(len(b) for b in batches)
        assert samples == again
        out.update(samples=samples, units=len(units.unit_s), decode_s=sum(units.unit_s),
                   decode_unit_mean_s=sum(units.unit_s) / len(units.unit_s), decode_unit_max_s=max(units.unit_s),
                   unit_trace_bytes=parallel.STREAM_SEGMENT_BYTES,
                   unit_result_bytes_mean=sum(units.unit_bytes) / len(units.unit_bytes),
                   result_bytes=sum(units.unit_bytes), decode_and_merge_inline_s=first)

        def export(target, calls: bool) -> float:
            cfg = ExportConfig(itrace=export_default(), calls=calls, force=True)
            w = target if not isinstance(target, str) else open_writer(target, force=True)
            t = time.perf_counter()
            with w:
                ex = DbExporter(session, w, cfg, vm_trace(session, cfg))
                try:
                    ex.run(iter(batches), sample_loop(cfg))
                finally:
                    ex.close()
            return time.perf_counter() - t

        out["dbexport_s"] = export(_null_writer(), False)
        out["calltree_s"] = max(0.0, export(_null_writer(), True) - out["dbexport_s"])
        db = trace.parent / "per_unit.sqlite"
        out["write_sqlite_s"] = max(0.0, export(str(db), True) - out["dbexport_s"] - out["calltree_s"])
        out.update(_tree_costs(session, batches))
        if pg:
            import psycopg

            name = f"ptx_bench_cluster_{uuid.uuid4().hex[:8]}"
            try:
                out["copy_pg_s"] = max(0.0, export(f"{pg.rstrip('/')}/{name}", True) - out["dbexport_s"]
                                       - out["calltree_s"])
            finally:
                with psycopg.connect(f"{pg.rstrip('/')}/postgres", autocommit=True) as a:
                    a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            kept = _keeping_writer()
            export(kept, True)
            out.update(worker_loads(kept.batches, pg))
    return out


def _keeping_writer():
    """A writer that keeps the samples and calls batches (as the workers would get them) and drops the rest."""
    from ptexport.writers.base import Writer

    class KeepingWriter(Writer):
        dialect = "postgresql"
        target = "keep"

        def __init__(self) -> None:
            super().__init__()
            self.batches: list = []

        def _insert_rows(self, table, rows):
            pass

        def _insert_columns(self, table, cols, n):
            if table in ("samples", "calls"):
                columns = [(c.name, c.type) for c in self.schema.tables[table]]
                self.batches.append((table, columns, {k: v if np.isscalar(v) else np.array(v) for k, v in cols.items()},
                                     n))

        def _finish_database(self):
            pass

        def abort(self):
            pass

    return KeepingWriter()


def worker_loads(batches: list, pg: str) -> dict:
    """The samples and calls loaded as the cluster's workers load them (pg_copy.copy_batch, in
    CopyBatches' tasks), one at a time into a new database: ``load_pg_s`` (a worker's encode and COPY,
    and the server's work), and ``ship_pg_s``, what sending them costs the coordinator (CopyBatches'
    copy and gathering, and the pickling for the wire)."""
    import psycopg

    from ptexport.session.cluster import CopyBatches
    from ptexport.writers.pg_copy import MARKER_SQL, close_sessions, copy_batch
    from ptexport.writers.schema import load_schema
    from ptexport.writers.targets import parse_target

    parts = []
    gathered = CopyBatches()
    t = time.perf_counter()
    for batch in batches:
        parts += gathered.add(*batch)
    parts += gathered.flush()
    for p in parts:
        pickle.dumps(p, protocol=5)
    ship = time.perf_counter() - t
    name = f"ptx_bench_loads_{uuid.uuid4().hex[:8]}"
    base = pg.rstrip("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as a:
        a.execute(f'CREATE DATABASE "{name}"')
    try:
        schema = load_schema("postgresql")
        with psycopg.connect(f"{base}/{name}", autocommit=True) as c:
            c.execute(";\n".join([schema.table_sql["samples"], schema.table_sql["calls"], MARKER_SQL]))
        params = dict(parse_target(f"{base}/{name}"))
        t = time.perf_counter()
        rows = sum(copy_batch(params, name, *p, name) for p in parts)  # one session, as a worker's
        load = time.perf_counter() - t
        close_sessions(name)
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as a:
            a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return {"ship_pg_s": ship, "load_pg_s": load, "load_tasks": len(parts), "load_rows": rows}


def pg_end_to_end(trace: Path, pg: str, addr: str, rounds: int = 2) -> dict:
    """Into PostgreSQL, in this process (imports warm): ``--jobs 1``, and the tcp:// cluster with the
    workers loading samples and calls or this process loading every table; the best of ``rounds``."""
    import psycopg

    from ptexport.dbexport.exporter import ExportConfig
    from ptexport.samples.itrace import export_default
    from ptexport.session.export import export_trace

    base = pg.rstrip("/")
    name = f"ptx_bench_e2e_{uuid.uuid4().hex[:8]}"
    runs = {"pg_jobs1": {"jobs": 1}, "pg_tcp2_here": {"scheduler": addr, "cluster_copy": False},
            "pg_tcp2_workers": {"scheduler": addr, "cluster_copy": True}}
    out: dict = {k: float("inf") for k in runs}
    try:
        for _ in range(rounds):
            for key, kw in runs.items():
                t = time.perf_counter()
                s = export_trace(str(trace), f"{base}/{name}", ExportConfig(itrace=export_default(), force=True, **kw))
                out[key] = min(out[key], time.perf_counter() - t)
                if key == "pg_tcp2_workers":
                    out["pg_worker_loads"] = s.cluster_copies
                    assert s.cluster_copies and not s.warnings, (s.cluster_copies, s.warnings)
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as a:
            a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return out


def project(u: dict, writer: str, trees: bool = False) -> dict:
    """Seconds per million samples, and the projected speed-up over one process for 8/32/128 workers.

    ``trees``: the call tree is the workers' (``--cluster-trees``, calltree/sharded.py): its steps are
    spread over them but a shard's steps follow each other (a thread's stack goes on from batch to
    batch), so the busiest shard is a floor of its own; cutting, ranking and finding call paths stays
    with the coordinator.  Else the coordinator builds it."""
    per_m = 1e6 / max(1, u["samples"])
    one = (u["decode_s"] + u["join_merge_s"] + u["dbexport_s"] + u["calltree_s"] + u[writer]) * per_m
    if trees:
        decode = (u["decode_s"] + u["tree_steps_s"]) * per_m
        chain = u["tree_steps_longest_shard_s"] * per_m
        serial = (u["join_merge_s"] + u["dbexport_s"] + u["tree_stitch_s"] + u["tree_pickle_s"] + u[writer]) * per_m
    else:
        decode, chain = u["decode_s"] * per_m, 0.0
        serial = (u["join_merge_s"] + u["dbexport_s"] + u["calltree_s"] + u[writer]) * per_m
    proj = {}
    for w in WORKERS:
        amdahl = serial + max(decode / w, chain)
        piped = max(serial, decode / w, chain)
        proj[str(w)] = {"amdahl_s_per_M": amdahl, "amdahl_speedup": one / amdahl,
                        "pipelined_s_per_M": piped, "pipelined_speedup": one / piped}
    return {"decode_s_per_M": decode, "serial_s_per_M": serial, "serial_fraction": serial / one,
            "tree_chain_s_per_M": chain, "limit_speedup": one / max(serial, chain), "workers": proj}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", type=parse_count, default=2_000_000, help="branches in the trace (default 2M)")
    ap.add_argument("--program", default="calls", help="synth program (default calls)")
    ap.add_argument("--pg", metavar="URL", help="also measure COPY into this PostgreSQL server (a database is "
                                               "made and dropped)")
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"branches": 20_000})
    with one_line_errors(ap), workdir(args.keep, "bench_cluster.") as work:
        return run(args, work)


def run(args: argparse.Namespace, work: Path) -> int:
    import dask
    from distributed import LocalCluster

    from ptexport.session import parallel

    t0 = time.perf_counter()
    trace = generate(work, args.branches, args.program)
    print(f"generated {trace} ({trace.stat().st_size / 1e6:.1f} MB, {args.branches} branches) in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    warm = work / "warm"
    generate(warm, 2000, args.program)
    subprocess.run(_ptexport(str(warm / "perf.data"), "--db", str(warm / "w.sqlite"), "-q", "--force"), check=True,
                   env=_env())
    tiny = args.branches < 500_000  # (end to end, a tiny trace is not worth workers: decoded by the coordinator)

    def db(name: str) -> str:
        return str(work / f"{name}.sqlite")

    wall = {}
    wall["jobs1"] = timed(_ptexport(str(trace), "--db", db("jobs1"), "-q", "--force", "--jobs", "1"), work)
    wall["jobs2"] = timed(_ptexport(str(trace), "--db", db("jobs2"), "-q", "--force", "--jobs", "2"), work)
    wall["local2"] = timed(_ptexport(str(trace), "--db", db("local2"), "-q", "--force", "--scheduler", "local:2"),
                           work)
    with dask.config.set({"temporary-directory": str(work / "dask")}):  # not dask-scratch-space in $TMPDIR
        # its logs at CRITICAL, as ptexport's own local:N cluster: closing it, a worker's heartbeat may still
        # meet the scheduler gone and log that as an ERROR with a traceback (dask's shutdown, on a busy machine)
        lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=":0", silence_logs=logging.CRITICAL, local_directory=str(work / "dask"))
    try:
        addr = lc.scheduler_address
        # the workers load the kernels and open this trace once (a long-lived cluster's state)
        subprocess.run(_ptexport(str(trace), "--db", str(warm / "w.sqlite"), "-q", "--force", "--scheduler", addr),
                       check=True, env=_env())
        wall["tcp2"] = timed(_ptexport(str(trace), "--db", db("tcp2"), "-q", "--force", "--scheduler", addr), work)
        wall["tcp2_trees"] = timed(_ptexport(str(trace), "--db", db("tcp2_trees"), "-q", "--force", "--scheduler", addr,
                                             "--cluster-trees"), work)
        pg_wall = pg_end_to_end(trace, args.pg, addr) if args.pg else {}
    finally:
        lc.close()

    counts = {k: _samples(db(k)) for k in wall}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"bench_cluster: the exports differ in samples: {counts}")
    trees = {k: _calls_digest(db(k)) for k in ("jobs1", "tcp2_trees")}
    if len(set(trees.values())) != 1:
        raise SystemExit(f"bench_cluster: the call trees differ: {trees}")
    if tiny:  # cut a tiny trace into several units all the same, for the per-unit figures
        parallel.STREAM_SEGMENT_BYTES = 4096
        parallel.MIN_SEGMENT_BYTES = 1
    u = per_unit(trace, args.pg)
    proj = {"sqlite": project(u, "write_sqlite_s"), "sqlite_cluster_trees": project(u, "write_sqlite_s", trees=True)}
    if "copy_pg_s" in u:
        proj["postgres"] = project(u, "copy_pg_s")
        # the workers load samples and calls: the coordinator ships them, the load spreads (server allowing)
        moved = dict(u, decode_s=u["decode_s"] + u["load_pg_s"])
        proj["postgres_worker_loads"] = project(moved, "ship_pg_s")
        proj["postgres_worker_loads_cluster_trees"] = project(moved, "ship_pg_s", trees=True)

    n = u["samples"]
    print(f"{n} samples, {u['units']} units of {u['unit_trace_bytes'] >> 10} KiB of trace")
    print("end to end (wall s):")
    for k, label in (("jobs1", "--jobs 1"), ("jobs2", "--jobs 2"), ("local2", "--scheduler local:2 (starts it)"),
                     ("tcp2", "--scheduler tcp:// (2 warm workers)"),
                     ("tcp2_trees", "  the same, --cluster-trees")):
        print(f"  {label:38s} {wall[k]:8.2f}   {n / wall[k] / 1e6:6.2f} M samples/s   "
              f"x{ratio(wall['jobs1'], wall[k]) or 0:.2f} of --jobs 1")
    print(f"  local:2 / jobs 2: {ratio(wall['local2'], wall['jobs2']) or 0:.2f}   "
          f"tcp:// / jobs 2: {ratio(wall['tcp2'], wall['jobs2']) or 0:.2f}")
    per_m = 1e6 / max(1, n)
    print("per-unit costs (s per million samples, one process):")
    print(f"  decode (workers)          {u['decode_s'] * per_m:7.3f}   per unit {u['decode_unit_mean_s'] * 1e3:.1f} ms "
          f"(max {u['decode_unit_max_s'] * 1e3:.1f}), result {u['unit_result_bytes_mean'] / 1e6:.2f} MB "
          f"({u['result_bytes'] * per_m / 1e6:.0f} MB per M samples on the wire)")
    print(f"  join + merge (coordinator) {u['join_merge_s'] * per_m:7.3f}")
    print(f"  db-export (coordinator)   {u['dbexport_s'] * per_m:7.3f}")
    print(f"  call tree (one process)   {u['calltree_s'] * per_m:7.3f}   (--jobs N: a thread of the coordinator; "
          f"its CPU there {u['tree_here_s'] * per_m:.3f})")
    print(f"  call tree steps (workers) {u['tree_steps_s'] * per_m:7.3f}   ({u['tree_steps']} steps, busiest shard "
          f"{u['tree_steps_longest_shard_s'] * per_m:.3f}; {u['tree_wire_bytes'] * per_m / 1e6:.0f} MB per M on the wire)")
    print(f"  call tree stitch (coord.) {u['tree_stitch_s'] * per_m:7.3f}   (CPU: cut by thread, ids ranked, paths found, "
          f"rows' columns and aggregates; its (un)pickling {u['tree_pickle_s'] * per_m:.3f})")
    print(f"  write SQLite (coordinator) {u['write_sqlite_s'] * per_m:7.3f}")
    if "copy_pg_s" in u:
        print(f"  COPY PostgreSQL (coord.)  {u['copy_pg_s'] * per_m:7.3f}")
    if "load_pg_s" in u:
        print(f"  ship to workers (coord.)  {u['ship_pg_s'] * per_m:7.3f}   ({u['load_tasks']} loads of "
              f"<= {u['load_rows'] // max(1, u['load_tasks'])} rows on average)")
        print(f"  load on a worker (+server) {u['load_pg_s'] * per_m:6.3f}   (samples and calls: encode, COPY)")
    if pg_wall:
        print("into PostgreSQL, in this process (best of 2, wall s):")
        for k, label in (("pg_jobs1", "--jobs 1"), ("pg_tcp2_here", "tcp:// cluster, this process loads"),
                         ("pg_tcp2_workers", "tcp:// cluster, the workers load")):
            print(f"  {label:38s} {pg_wall[k]:8.2f}   x{ratio(pg_wall['pg_jobs1'], pg_wall[k]) or 0:.2f} of --jobs 1")
    for name, p in proj.items():
        print(f"projection into {name}: serial share {p['serial_fraction'] * 100:.0f} % "
              f"(decode and tree steps {p['decode_s_per_M']:.3f} s/M parallel, coordinator {p['serial_s_per_M']:.3f}"
              f" s/M serial, busiest tree shard {p['tree_chain_s_per_M']:.3f} s/M), limit x{p['limit_speedup']:.2f}")
        for w, q in p["workers"].items():
            print(f"  {w:>4} workers: Amdahl x{q['amdahl_speedup']:.2f}, pipelined x{q['pipelined_speedup']:.2f}")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    write_json(args.json, {"branches": args.branches, "samples": n, "wall_s": wall, "export_samples": counts,
                           "loadavg": list(load), "cores": os.cpu_count(),
                           "ratios": {"jobs2_over_jobs1": ratio(wall["jobs1"], wall["jobs2"]),
                                      "local2_over_jobs1": ratio(wall["jobs1"], wall["local2"]),
                                      "tcp2_over_jobs1": ratio(wall["jobs1"], wall["tcp2"]),
                                      "local2_vs_jobs2": ratio(wall["local2"], wall["jobs2"])},
                           "per_unit": u,
                           "postgres_wall_s": pg_wall, "projection": proj})
    return 0


if __name__ == "__main__":
    sys.exit(main())
