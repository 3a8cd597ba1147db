#!/usr/bin/env python3
"""Viewer responsiveness benchmark on a large generated database.

    python3 bench/bench_viewer.py [--samples 10000000] [--db /tmp/big.db] [--keep] [--pg]

Generates an SQLite database in ptexport's schema (ptexport/schema.sql, with
its indexes) holding N branch samples and ~N/10 calls (8 threads, 3-level
call trees over 1110 call paths, context switches on 4 CPUs) with recursive
CTEs inside SQLite (seconds, not minutes), then times what a user waits for:

* opening the database (read-only, schema introspection);
* the call graph's first level (comms), a thread's top call paths and one
  level deeper, through the query functions and through the Qt model (worker
  thread round trip until the rows are in the model);
* the first page of 'All branches' (1000 rows, keyset), a page deep in the
  table (keyset: as fast as the first), a filtered page (CPU + time range
  via the id binary search), through queries and through the Qt model;
* the same on a copy without ptexport's indexes (a perf export's indexes only).

Prints one line per measure and exits non-zero when a first level or first
page takes a second or more.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ptexport.export.schema import load_schema  # noqa: E402

THREADS = 8
CPUS = 4
FANOUT = 10          # call tree: 10 x 10 x 10 call paths below the root


def generate(path: Path, samples: int, perf_indexes_only: bool = False) -> float:
    t0 = time.perf_counter()
    if path.exists():
        path.unlink()
    sch = load_schema("sqlite")
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    for sql in sch.table_sql.values():
        con.execute(sql)
    con.execute("BEGIN")
    con.executemany("INSERT INTO selected_events VALUES (?, ?)", [(0, "unknown"), (1, "branches")])
    con.executemany("INSERT INTO machines VALUES (?, ?, ?)", [(0, 0, "unknown"), (1, -1, "")])
    con.execute("INSERT INTO threads VALUES (0, 0, 0, -1, -1)")
    con.execute("INSERT INTO comms VALUES (0, 'unknown', 0, 0, 0, 1)")
    for t in range(1, THREADS + 1):
        pid = 1000 + (t - 1) // 2 * 2
        con.execute("INSERT INTO threads VALUES (?, 1, ?, ?, ?)", (t, t - (t - 1) % 2, pid, 1000 + t - 1))
        if t % 2:
            con.execute("INSERT INTO comms VALUES (?, ?, ?, 0, 1, 1)", ((t + 1) // 2, f"proc{(t + 1) // 2}", t))
        con.execute("INSERT INTO comm_threads VALUES (?, ?, ?)", (t, (t + 1) // 2, t))
    con.execute("INSERT INTO dsos VALUES (0, 0, 'unknown', 'unknown', '')")
    con.execute("INSERT INTO dsos VALUES (1, 1, 'app', '/usr/bin/app', '')")
    con.execute("INSERT INTO symbols VALUES (0, 0, 0, 0, 0, 'unknown')")
    nsym = FANOUT ** 3
    con.executemany("INSERT INTO symbols VALUES (?, 1, ?, ?, 1, ?)",
                    [(i, 0x400000 + i * 0x100, 0x400000 + i * 0x100 + 0x100, f"func_{i}") for i in range(1, nsym + 1)])
    # call paths: 1 = root; level 1: 2..11; level 2: 12..111; level 3: 112..1111
    rows = [(0, 0, 0, 0), (1, 0, 0, 0)]
    for a in range(FANOUT):
        rows.append((2 + a, 1, 1 + a, 0))
    for a in range(FANOUT):
        for b in range(FANOUT):
            rows.append((12 + a * FANOUT + b, 2 + a, 11 + a * FANOUT + b, 0))
    for a in range(FANOUT):
        for b in range(FANOUT):
            for c in range(FANOUT):
                k = (a * FANOUT + b) * FANOUT + c
                rows.append((112 + k, 12 + a * FANOUT + b, 111 + k % (nsym - 111), 0))
    con.executemany("INSERT INTO call_paths VALUES (?, ?, ?, ?)", rows)
    # samples: id n, 10 ns apart, threads round-robin in blocks of 1000, cpu = thread % CPUS
    con.execute(f"""
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {samples})
        INSERT INTO samples
        SELECT i, 1, 1, 1 + (i / 1000) % {THREADS}, 1 + ((i / 1000) % {THREADS}) / 2,
               1, 1 + i % {nsym}, i % 200, 4194304 + (i % {nsym}) * 256 + i % 200,
               1000000 + i * 10, ((i / 1000) % {THREADS}) % {CPUS},
               1, 1 + (i * 7) % {nsym}, 16, 4194304 + ((i * 7) % {nsym}) * 256 + 16,
               CASE i % 4 WHEN 0 THEN 3 WHEN 1 THEN 5 WHEN 2 THEN 9 ELSE 1 END, 0, 0,
               i % 50, i % 37 + 1, 0, -1, -1
        FROM n""")
    con.execute("INSERT INTO samples (id, evsel_id, machine_id, thread_id, comm_id, dso_id, symbol_id, sym_offset, "
                "ip, time, cpu, to_dso_id, to_symbol_id, to_sym_offset, to_ip, branch_type, in_tx, call_path_id, "
                "insn_count, cyc_count, flags, vcpu, machine_pid) VALUES "
                "(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1)")
    # calls: per top-level call k (thread = k % THREADS): 1 + 10 + 100 calls
    tops = max(THREADS, samples // 10 // 111)
    span = samples * 10 // tops * THREADS
    per = 1 + FANOUT + FANOUT * FANOUT
    con.execute(f"""
        WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < {tops - 1}),
        top AS (SELECT i, 1 + i % {THREADS} AS th, 1000000 + (i / {THREADS}) * {span} AS t0,
                       i % {FANOUT} AS a, 1 + i * {per} AS base FROM k)
        INSERT INTO calls
        SELECT base, th, 1 + (th - 1) / 2, 2 + a, t0, t0 + {span} - 10, 1000, 0, 0, 1, 0, 0, 50000, 40000 FROM top
        UNION ALL
        SELECT base + 1 + b.i, th, 1 + (th - 1) / 2, 12 + a * {FANOUT} + b.i, t0 + b.i * ({span} / {FANOUT}),
               t0 + (b.i + 1) * ({span} / {FANOUT}) - 20, 90, 0, 0, 2 + a, 0, base, 4500, 3600
        FROM top, (SELECT i FROM k WHERE i < {FANOUT}) b
        UNION ALL
        SELECT base + 1 + {FANOUT} + b.i * {FANOUT} + c.i, th, 1 + (th - 1) / 2,
               112 + (a * {FANOUT} + b.i) * {FANOUT} + c.i,
               t0 + b.i * ({span} / {FANOUT}) + c.i * ({span} / {FANOUT * FANOUT}),
               t0 + b.i * ({span} / {FANOUT}) + (c.i + 1) * ({span} / {FANOUT * FANOUT}) - 30, 8, 0, 0,
               12 + a * {FANOUT} + b.i, 0, base + 1 + b.i, 400, 330
        FROM top, (SELECT i FROM k WHERE i < {FANOUT}) b, (SELECT i FROM k WHERE i < {FANOUT}) c""")
    con.execute("INSERT INTO calls VALUES (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)")
    # context switches: every 1000 samples a new thread comes in on its CPU
    con.execute(f"""
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {samples // 1000})
        INSERT INTO context_switches
        SELECT i + 1, 1, 1000000 + i * 10000, (i % {THREADS}) % {CPUS}, 1 + (i + {THREADS} - {CPUS}) % {THREADS},
               1 + ((i + {THREADS} - {CPUS}) % {THREADS}) / 2, 1 + i % {THREADS}, 1 + (i % {THREADS}) / 2, 0
        FROM n""")
    con.execute("COMMIT")
    if perf_indexes_only:
        con.execute("CREATE INDEX pcpid_idx ON calls (parent_call_path_id)")
        con.execute("CREATE INDEX pid_idx ON calls (parent_id)")
    else:
        for sql in sch.index_sql.values():
            con.execute(sql)
    for sql in sch.view_sql.values():
        con.execute(sql)
    con.commit()
    con.close()
    return time.perf_counter() - t0


def timed(label: str, fn, results: dict, limit: float | None = None):
    t0 = time.perf_counter()
    value = fn()
    dt = time.perf_counter() - t0
    mark = ""
    if limit is not None:
        mark = "  ok (< %.1f s)" % limit if dt < limit else "  SLOW (>= %.1f s)" % limit
        results.setdefault("fail", False)
        results["fail"] |= dt >= limit
    print(f"  {label:<58} {dt * 1000:9.1f} ms{mark}")
    return value


def bench_queries(path: str, results: dict) -> None:
    from ptexport_viewer import queries as q
    from ptexport_viewer.db import Database

    db = timed("open (read-only, introspection)", lambda: Database(path), results)
    try:
        with db.session() as s:
            comms = timed("call graph first level: comms with calls", lambda: q.comms_with_calls(s), results, 1.0)
            threads = timed("call graph: threads of the first comm", lambda: q.threads_of_comm(s, comms[0][0]),
                            results, 1.0)
            root = q.root_call_path(s)
            top = timed("call graph: a thread's top call paths",
                        lambda: q.call_graph_children(s, comms[0][0], threads[0][0], root), results, 1.0)
            timed("call graph: one level deeper",
                  lambda: q.call_graph_children(s, comms[0][0], threads[0][0], top[0].id), results, 1.0)
            ct = timed("call tree: a thread's top-level calls",
                       lambda: q.call_tree_children(s, comms[0][0], threads[0][0], 0), results, 1.0)
            print(f"    ({len(ct)} top-level calls)")
            ev = q.branch_events(s)[0][0]
            page = timed("branches: first page (1000 rows)", lambda: q.branches_page(s, evsel_id=ev), results, 1.0)
            last = int(s.scalar("SELECT MAX(id) FROM samples"))
            timed("branches: a page near the end (keyset)",
                  lambda: q.branches_page(s, after_id=last - 1500, evsel_id=ev), results, 1.0)
            first, lastt = q.sample_time_bounds(s)
            mid = (first + lastt) // 2

            def filtered():
                where, params = q.branch_where(s, q.BranchFilter(cpus="2", time_ranges=f"{mid}-{mid + 10_000_000}"))
                return q.branches_page(s, where, params, evsel_id=ev)
            fp = timed("branches: first filtered page (cpu 2, a time range)", filtered, results, 1.0)
            print(f"    ({len(page.rows)} and {len(fp.rows)} rows)")
            timed("table browser: first page of samples_view", lambda: q.table_page(s, "samples_view"), results, 1.0)
            timed("time chart: context switches of one CPU",
                  lambda: q.cpu_intervals(s, 1, 0, first, lastt), results)
    finally:
        db.close()


def bench_qt(path: str, results: dict) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QModelIndex
    from PySide6.QtWidgets import QApplication

    from ptexport_viewer import queries as q
    from ptexport_viewer.db import Database
    from ptexport_viewer.models import CallGraphModel, PagedTableModel, branch_fetcher

    app = QApplication.instance() or QApplication([])
    db = Database(path)

    def until(cond, timeout=30.0):
        t0 = time.perf_counter()
        while not cond():
            app.processEvents()
            time.sleep(0.0005)
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError
    try:
        def first_level():
            m = CallGraphModel(db)
            m.fetchMore(QModelIndex())
            until(lambda: m.rowCount() > 0)
            return m
        m = timed("Qt: call graph model, first level in the model", first_level, results, 1.0)

        def expand_thread():
            comm = m.index(0, 0)
            m.fetchMore(comm)
            until(lambda: m.rowCount(comm) > 0)
            th = m.index(0, 0, comm)
            m.fetchMore(th)
            until(lambda: m.rowCount(th) > 0)
        timed("Qt: expand comm and thread (two round trips)", expand_thread, results, 1.0)
        with db.session() as s:
            ev = q.branch_events(s)[0][0]

        def first_page():
            pm = PagedTableModel(db, branch_fetcher("", {}, ev))
            pm.fetch_rows(1)
            until(lambda: len(pm.rows) > 0)
            return pm
        timed("Qt: branches model, first page in the model", first_page, results, 1.0)
    finally:
        db.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--db", help="database path (default: a temporary file)")
    ap.add_argument("--keep", action="store_true", help="keep the generated databases")
    ap.add_argument("--reuse", action="store_true", help="reuse --db if it exists")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ptv_bench_"))
    path = Path(args.db) if args.db else tmp / "big.db"
    results: dict = {}
    if not (args.reuse and path.exists()):
        dt = generate(path, args.samples)
        print(f"generated {args.samples:,} samples in {dt:.1f} s: {path} ({path.stat().st_size / 1e6:.0f} MB)")
    con = sqlite3.connect(path)
    n_s = con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    n_c = con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    con.close()
    print(f"database: {n_s:,} samples, {n_c:,} calls")
    print("ptexport schema and indexes, query functions:")
    bench_queries(str(path), results)
    print("ptexport schema and indexes, through the Qt models (worker thread, signals):")
    bench_qt(str(path), results)
    perf_path = path.with_name(path.stem + "_perfidx.db")
    small = min(args.samples, args.samples)
    dt = generate(perf_path, small, perf_indexes_only=True)
    print(f"perf's two indexes only ({small:,} samples, generated in {dt:.1f} s):")
    bench_queries(str(perf_path), results)
    if not args.keep:
        for p in (path, perf_path):
            if p.exists() and (not args.db or p != Path(args.db)):
                p.unlink()
    print("RESULT:", "all first levels and first pages under 1 s" if not results.get("fail")
          else "some first level or first page took 1 s or more")
    return 1 if results.get("fail") else 0


if __name__ == "__main__":
    sys.exit(main())
