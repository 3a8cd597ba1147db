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


def project(u: dict, writer: str) -> dict:
    """Seconds per million samples, and the projected speed-up over one process for 8/32/128 workers."""
    per_m = 1e6 / max(1, u["samples"])
    decode = u["decode_s"] * per_m
    serial = (u["join_merge_s"] + u["dbexport_s"] + u["calltree_s"] + u[writer]) * per_m
    one = decode + serial
    proj = {}
    for w in WORKERS:
        amdahl = serial + decode / w
        piped = max(serial, decode / w)
        proj[str(w)] = {"amdahl_s_per_M": amdahl, "amdahl_speedup": one / amdahl,
                        "pipelined_s_per_M": piped, "pipelined_speedup": one / piped}
    return {"decode_s_per_M": decode, "serial_s_per_M": serial, "serial_fraction": serial / one,
            "limit_speedup": one / serial, "workers": proj}


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
        lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=":0", silence_logs=logging.ERROR, local_directory=str(work / "dask"))
    try:
        addr = lc.scheduler_address
        # the workers load the kernels and open this trace once (a long-lived cluster's state)
        subprocess.run(_ptexport(str(trace), "--db", str(warm / "w.sqlite"), "-q", "--force", "--scheduler", addr),
                       check=True, env=_env())
        wall["tcp2"] = timed(_ptexport(str(trace), "--db", db("tcp2"), "-q", "--force", "--scheduler", addr), work)
        pg_wall = pg_end_to_end(trace, args.pg, addr) if args.pg else {}
    finally:
        lc.close()

    counts = {k: _samples(db(k)) for k in wall}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"bench_cluster: the exports differ in samples: {counts}")
    if tiny:  # cut a tiny trace into several units all the same, for the per-unit figures
        parallel.STREAM_SEGMENT_BYTES = 4096
        parallel.MIN_SEGMENT_BYTES = 1
    u = per_unit(trace, args.pg)
    proj = {"sqlite": project(u, "write_sqlite_s")}
    if "copy_pg_s" in u:
        proj["postgres"] = project(u, "copy_pg_s")
        # the workers load samples and calls: the coordinator ships them, the load spreads (server allowing)
        moved = dict(u, decode_s=u["decode_s"] + u["load_pg_s"])
        proj["postgres_worker_loads"] = project(moved, "ship_pg_s")

    n = u["samples"]
    print(f"{n} samples, {u['units']} units of {u['unit_trace_bytes'] >> 10} KiB of trace")
    print("end to end (wall s):")
    for k, label in (("jobs1", "--jobs 1"), ("jobs2", "--jobs 2"), ("local2", "--scheduler local:2 (starts it)"),
                     ("tcp2", "--scheduler tcp:// (2 warm workers)")):
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
    print(f"  call tree (coordinator)   {u['calltree_s'] * per_m:7.3f}")
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
              f"(decode {p['decode_s_per_M']:.3f} s/M parallel, coordinator {p['serial_s_per_M']:.3f} s/M serial), "
              f"limit x{p['limit_speedup']:.2f}")
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
