#!/usr/bin/env python3
"""Viewer responsiveness benchmark on a large generated database.

    python3 bench/bench_viewer.py [--samples 10000000] [--db /tmp/big.db [--reuse]] [--json report.json]
    python3 bench/bench_viewer.py --postgres postgresql://postgres@127.0.0.1/ptx_viewer_bench [--reuse]

Generates an SQLite database holding N branch samples and ~N/10 calls (8
threads, 3-level call trees over 1110 call paths, context switches on 4 CPUs)
through ptexport's own writer (ptexport.writers.open_writer: ptexport/schema.sql
with its indexes, the id-0 rows, has_calls, branch_types, schema_version), so
the database is what an export writes and cannot fall out of step with the
schema; then times what a user waits for:

* opening the database (read-only, schema introspection);
* the call graph's first level (comms), a thread's top call paths and one
  level deeper, through the query functions and through the Qt model (worker
  thread round trip until the rows are in the model);
* the first page of 'All branches' (1000 rows, keyset), a page deep in the
  table (keyset: as fast as the first), a filtered page (CPU + time range
  via the id binary search), through queries and through the Qt model;
* the same on a copy without ptexport's indexes (a perf export's indexes only).

``--postgres URL`` measures the same on PostgreSQL: the database URL names is written by the same
writer (refused if it exists unless ``--force``, measured as it is with ``--reuse``) and kept; the
perf-indexes copy is ``CREATE DATABASE ... TEMPLATE`` of it without ptexport's indexes, dropped at
the end.

Prints one line per measure and exits 1 when a first level or first page takes
a second or more.  ``--db`` keeps the generated database there (refused if it
exists unless ``--force``, or read as it is with ``--reuse``); the copy and,
without ``--db``, the database itself live in a temporary directory that is
removed.  ``--tiny`` is a quick check (20 k samples).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

# a checkout without ptexport installed works too (appended: an installed ptexport comes first)
sys.path.append(str(Path(__file__).resolve().parents[1]))

from _common import add_options, one_line_errors, parse, workdir, write_json  # noqa: E402
from ptexport.writers.schema import load_schema  # noqa: E402
from ptexport.writers import open_writer  # noqa: E402

THREADS = 8
CPUS = 4
FANOUT = 10          # call tree: 10 x 10 x 10 call paths below the root
NSYM = FANOUT ** 3
SYM_BASE = 0x400000  # symbol i spans [SYM_BASE + i * 0x100, SYM_BASE + (i + 1) * 0x100)
T0 = 1_000_000       # time of sample 0; samples are 10 ns apart
BATCH = 1 << 20      # rows per column batch (bounded memory at 10 M samples)
LIMIT_S = 1.0        # a first level or first page must take less
#: The indexes perf's export-to-sqlite.py creates; a perf-like copy keeps only these.
PERF_INDEXES = ("pcpid_idx", "pid_idx")


def _comm_of(thread: np.ndarray) -> np.ndarray:
    return 1 + (thread - 1) // 2


def _small_tables(w) -> None:
    """Events, machine, 8 threads in 4 processes (one comm each), one DSO, 1000 symbols, 1111 call paths."""
    w.write_rows("selected_events", [(1, "branches")])
    w.write_rows("machines", [(1, -1, "")])
    w.write_rows("threads", [(t, 1, t - (t - 1) % 2, 1000 + (t - 1) // 2 * 2, 1000 + t - 1)
                             for t in range(1, THREADS + 1)])
    w.write_rows("comms", [((t + 1) // 2, f"proc{(t + 1) // 2}", t, 0, True, False)
                           for t in range(1, THREADS + 1, 2)])
    w.write_rows("comm_threads", [(t, (t + 1) // 2, t) for t in range(1, THREADS + 1)])
    w.write_rows("dsos", [(1, 1, "app", "/usr/bin/app", "")])
    w.write_rows("symbols", [(i, 1, SYM_BASE + i * 0x100, SYM_BASE + (i + 1) * 0x100, 1, f"func_{i}")
                             for i in range(1, NSYM + 1)])
    # call paths: 1 = root; level 1: 2..11; level 2: 12..111; level 3: 112..1111
    rows = [(1, 0, 0, 0)]
    rows += [(2 + a, 1, 1 + a, 0) for a in range(FANOUT)]
    rows += [(12 + a * FANOUT + b, 2 + a, 11 + a * FANOUT + b, 0) for a in range(FANOUT) for b in range(FANOUT)]
    rows += [(112 + k, 12 + k // FANOUT, 111 + k % (NSYM - 111), 0) for k in range(FANOUT ** 3)]
    w.write_rows("call_paths", rows)


def _samples(w, samples: int) -> None:
    """Sample i: 10 ns apart; threads take turns every 1000 samples, cpu = thread % CPUS; branch kinds cycle."""
    kinds = np.array([3, 5, 9, 1], dtype=np.int64)  # call, return, conditional, jump (perf's flag bits)
    for start in range(1, samples + 1, BATCH):
        i = np.arange(start, min(samples + 1, start + BATCH), dtype=np.int64)
        turn = (i // 1000) % THREADS
        sym, off = 1 + i % NSYM, i % 200
        to_sym = 1 + (i * 7) % NSYM
        bt = kinds[i % 4]
        w.write_samples({
            "id": i, "evsel_id": np.ones_like(i), "machine_id": np.ones_like(i), "thread_id": 1 + turn,
            "comm_id": _comm_of(1 + turn), "dso_id": np.ones_like(i), "symbol_id": sym, "sym_offset": off,
            "ip": SYM_BASE + sym * 0x100 + off, "time": T0 + i * 10, "cpu": turn % CPUS,
            "to_dso_id": np.ones_like(i), "to_symbol_id": to_sym, "to_sym_offset": np.full_like(i, 16),
            "to_ip": SYM_BASE + to_sym * 0x100 + 16, "branch_type": bt, "call_path_id": 112 + i % NSYM,
            "insn_count": i % 50, "cyc_count": i % 37 + 1, "flags": bt,
        })


def _calls(w, samples: int) -> None:
    """Per top-level call k (thread 1 + k % THREADS): 1 + 10 + 100 calls, ids in order, nested in time."""
    tops = max(THREADS, samples // 10 // 111)
    span = samples * 10 // tops * THREADS
    f, f2 = FANOUT, FANOUT * FANOUT
    per = 1 + f + f2
    # one top-level call's 111 rows, relative to its base id / start time / first-level branch a
    lvl = np.array([1] + [2] * f + [3] * f2)
    b = np.concatenate(([0], np.arange(f), np.repeat(np.arange(f), f)))
    c = np.concatenate(([0], np.zeros(f, np.int64), np.tile(np.arange(f), f)))
    off = np.arange(per)
    start = np.select([lvl == 1, lvl == 2], [0, b * (span // f)], b * (span // f) + c * (span // f2))
    end = np.select([lvl == 1, lvl == 2], [span - 10, (b + 1) * (span // f) - 20],
                    b * (span // f) + (c + 1) * (span // f2) - 30)
    parent_off = np.select([lvl == 1, lvl == 2], [-1, 0], 1 + b)  # offset of the caller's row (-1: none)
    count = np.select([lvl == 1, lvl == 2], [1000, 90], 8)
    insns = np.select([lvl == 1, lvl == 2], [50000, 4500], 400)
    cycles = np.select([lvl == 1, lvl == 2], [40000, 3600], 330)
    step = max(1, BATCH // per)
    for k0 in range(0, tops, step):
        k = np.arange(k0, min(tops, k0 + step), dtype=np.int64)[:, None]
        a, base, th = k % f, 1 + k * per, 1 + k % THREADS
        t0 = T0 + (k // THREADS) * span
        cp = np.select([lvl == 1, lvl == 2], [2 + a, 12 + a * f + b], 112 + (a * f + b) * f + c)
        pcp = np.select([lvl == 1, lvl == 2], [np.ones_like(a), 2 + a], 12 + a * f + b)
        shape = (len(k), per)
        w.write_calls({
            "id": (base + off).ravel(), "thread_id": np.broadcast_to(th, shape).ravel(),
            "comm_id": np.broadcast_to(_comm_of(th), shape).ravel(), "call_path_id": cp.ravel(),
            "call_time": (t0 + start).ravel(), "return_time": (t0 + end).ravel(),
            "branch_count": np.broadcast_to(count, shape).ravel(), "parent_call_path_id": pcp.ravel(),
            "parent_id": np.where(parent_off < 0, 0, base + parent_off).ravel(),
            "insn_count": np.broadcast_to(insns, shape).ravel(), "cyc_count": np.broadcast_to(cycles, shape).ravel(),
        })


def _context_switches(w, samples: int) -> None:
    """Every 1000 samples a new thread comes in on its CPU, the one that ran there before goes out."""
    i = np.arange(samples // 1000 + 1, dtype=np.int64)
    out_t, in_t = 1 + (i + THREADS - CPUS) % THREADS, 1 + i % THREADS
    w.write_columns("context_switches", {
        "id": i + 1, "machine_id": np.ones_like(i), "time": T0 + i * 10000, "cpu": (i % THREADS) % CPUS,
        "thread_out_id": out_t, "comm_out_id": _comm_of(out_t), "thread_in_id": in_t, "comm_in_id": _comm_of(in_t),
        "flags": np.zeros_like(i), "vcpu": np.full_like(i, -1),
    })


def generate(path: Path | str, samples: int) -> float:
    """Write the database at ``path`` (a file or a PostgreSQL URL, replaced) through ptexport's
    writer; seconds taken."""
    t0 = time.perf_counter()
    with open_writer(path, force=True) as w:
        _small_tables(w)
        _samples(w, samples)
        _calls(w, samples)
        _context_switches(w, samples)
    return time.perf_counter() - t0


def perf_indexes_copy(src: Path, dst: Path) -> float:
    """A copy of ``src`` with perf's two indexes only (ptexport's others dropped); seconds taken."""
    t0 = time.perf_counter()
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        for name in load_schema("sqlite").index_sql:
            if name not in PERF_INDEXES:
                con.execute(f"DROP INDEX IF EXISTS {name}")
        con.commit()
    finally:
        con.close()
    return time.perf_counter() - t0


def _pg_admin(url: str):
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return psycopg.connect(make_conninfo(**dict(conninfo_to_dict(url), dbname="postgres")), autocommit=True)


def _pg_name(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(url)["dbname"])


def _pg_url(url: str, dbname: str) -> str:
    """``url`` naming the database ``dbname`` instead."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}"))


def pg_exists(url: str) -> bool:
    with _pg_admin(url) as a:
        return a.execute("SELECT 1 FROM pg_database WHERE datname = %s", (_pg_name(url),)).fetchone() is not None


def pg_perf_indexes_copy(url: str, copy: str) -> float:
    """A copy of the database at ``url`` named ``copy``, with perf's two indexes only; seconds taken."""
    t0 = time.perf_counter()
    with _pg_admin(url) as a:
        a.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')
        a.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{_pg_name(url)}" STRATEGY FILE_COPY')
    import psycopg

    with psycopg.connect(_pg_url(url, copy), autocommit=True) as c:
        for name in load_schema("postgresql").index_sql:
            if name not in PERF_INDEXES:
                c.execute(f"DROP INDEX IF EXISTS {name}")
    return time.perf_counter() - t0


def pg_drop(url: str, dbname: str) -> None:
    with _pg_admin(url) as a:
        a.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def timed(label: str, fn, results: dict, limit: float | None = None):
    """Run ``fn``, print and record (in ``results["current"]``) its time; a limit marks it ok or SLOW."""
    t0 = time.perf_counter()
    value = fn()
    dt = time.perf_counter() - t0
    mark = ""
    if limit is not None:
        mark = "  ok (< %.1f s)" % limit if dt < limit else "  SLOW (>= %.1f s)" % limit
        if dt >= limit:
            results["slow"].append(f"{results['current']}: {label}")
    results["measures"][results["current"]][label] = {"ms": dt * 1000, "limit_s": limit}
    print(f"  {label:<58} {dt * 1000:9.1f} ms{mark}")
    return value


def bench_queries(path: str, results: dict) -> None:
    from ptexport_viewer import queries as q
    from ptexport_viewer.db import Database

    db = timed("open (read-only, introspection)", lambda: Database(path), results)
    try:
        with db.session() as s:
            comms = timed("call graph first level: comms with calls", lambda: q.comms_with_calls(s), results, LIMIT_S)
            threads = timed("call graph: threads of the first comm", lambda: q.threads_of_comm(s, comms[0][0]),
                            results, LIMIT_S)
            root = q.root_call_path(s)
            top = timed("call graph: a thread's top call paths",
                        lambda: q.call_graph_children(s, comms[0][0], threads[0][0], root), results, LIMIT_S)
            timed("call graph: one level deeper",
                  lambda: q.call_graph_children(s, comms[0][0], threads[0][0], top[0].id), results, LIMIT_S)
            ct = timed("call tree: a thread's top-level calls",
                       lambda: q.call_tree_children(s, comms[0][0], threads[0][0], 0), results, LIMIT_S)
            print(f"    ({len(ct)} top-level calls)")
            ev = q.branch_events(s)[0][0]
            page = timed("branches: first page (1000 rows)", lambda: q.branches_page(s, evsel_id=ev), results, LIMIT_S)
            last = int(s.scalar("SELECT MAX(id) FROM samples"))
            timed("branches: a page near the end (keyset)",
                  lambda: q.branches_page(s, after_id=last - 1500, evsel_id=ev), results, LIMIT_S)
            first, lastt = q.sample_time_bounds(s)
            mid = (first + lastt) // 2

            def filtered():
                where, params = q.branch_where(s, q.BranchFilter(cpus="2", time_ranges=f"{mid}-{mid + 10_000_000}"))
                return q.branches_page(s, where, params, evsel_id=ev)
            fp = timed("branches: first filtered page (cpu 2, a time range)", filtered, results, LIMIT_S)
            print(f"    ({len(page.rows)} and {len(fp.rows)} rows)")
            timed("table browser: first page of samples_view", lambda: q.table_page(s, "samples_view"), results, LIMIT_S)
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
        m = timed("Qt: call graph model, first level in the model", first_level, results, LIMIT_S)

        def expand_thread():
            comm = m.index(0, 0)
            m.fetchMore(comm)
            until(lambda: m.rowCount(comm) > 0)
            th = m.index(0, 0, comm)
            m.fetchMore(th)
            until(lambda: m.rowCount(th) > 0)
        timed("Qt: expand comm and thread (two round trips)", expand_thread, results, LIMIT_S)
        with db.session() as s:
            ev = q.branch_events(s)[0][0]

        def first_page():
            pm = PagedTableModel(db, branch_fetcher("", {}, ev))
            pm.fetch_rows(1)
            until(lambda: len(pm.rows) > 0)
            return pm
        timed("Qt: branches model, first page in the model", first_page, results, LIMIT_S)
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--db", help="keep the generated database here (default: a temporary file)")
    ap.add_argument("--postgres", metavar="URL",
                    help="measure on PostgreSQL: the database URL names (postgresql://user@host/NAME) is written "
                         "and kept (refused if it exists unless --force; --reuse measures it as it is)")
    ap.add_argument("--reuse", action="store_true", help="measure --db as it is if it exists (no generation)")
    add_options(ap)
    args = parse(ap, argv, tiny={"samples": 20_000},
                 outputs=lambda a: [] if a.reuse else [a.db])
    if args.samples < 1000:
        ap.error("--samples must be at least 1000")
    if args.postgres and args.db:
        ap.error("--db and --postgres exclude each other")
    with one_line_errors(ap), workdir(None, "bench_viewer.") as tmp:
        if args.postgres:
            try:
                exists = pg_exists(args.postgres)
            except Exception as e:  # noqa: BLE001 - any failure: one line
                ap.exit(2, f"{ap.prog}: error: --postgres {args.postgres}: {str(e).strip().splitlines()[0]}\n")
            if exists and not args.reuse and not args.force:
                ap.exit(2, f"{ap.prog}: error: {args.postgres} already exists (use --force to replace it)\n")
            return run(args, args.postgres, tmp)
        return run(args, Path(args.db) if args.db else tmp / "big.db", tmp)


def run(args: argparse.Namespace, path: Path | str, tmp: Path) -> int:
    from ptexport_viewer.db import Database

    pg = isinstance(path, str)
    results: dict = {"slow": [], "measures": {}}
    report: dict = {"results": results, "limit_s": LIMIT_S, "dialect": "postgresql" if pg else "sqlite"}
    if args.reuse and (pg_exists(path) if pg else Path(path).exists()):
        print(f"measuring {path} as it is (--reuse)")
    else:
        dt = generate(path, args.samples)
        report["generate_s"] = dt
        size = "" if pg else f" ({Path(path).stat().st_size / 1e6:.0f} MB)"
        print(f"generated {args.samples:,} samples in {dt:.1f} s: {path}{size}")
    db = Database(str(path))
    try:
        with db.session() as s:
            n_s = s.scalar("SELECT COUNT(*) FROM samples WHERE id > 0")
            n_c = s.scalar("SELECT COUNT(*) FROM calls WHERE id > 0")
            n_cs = s.scalar("SELECT COUNT(*) FROM context_switches")
    finally:
        db.close()
    report.update(db=str(path), samples=n_s, calls=n_c, context_switches=n_cs)
    print(f"database: {n_s:,} samples, {n_c:,} calls, {n_cs:,} context switches")
    print("ptexport schema and indexes, query functions:")
    results["current"] = "queries"
    results["measures"]["queries"] = {}
    bench_queries(str(path), results)
    print("ptexport schema and indexes, through the Qt models (worker thread, signals):")
    results["current"] = "qt"
    results["measures"]["qt"] = {}
    bench_qt(str(path), results)
    if pg:
        copy = f"{_pg_name(path)}_perf_indexes"
        try:
            dt = pg_perf_indexes_copy(path, copy)
            print(f"perf's two indexes only (a copy, made in {dt:.1f} s):")
            results["current"] = "perf_indexes"
            results["measures"]["perf_indexes"] = {}
            bench_queries(_pg_url(path, copy), results)
        finally:
            pg_drop(path, copy)
    else:
        perf_path = tmp / "perf_indexes.db"
        dt = perf_indexes_copy(Path(path), perf_path)
        print(f"perf's two indexes only (a copy, made in {dt:.1f} s):")
        results["current"] = "perf_indexes"
        results["measures"]["perf_indexes"] = {}
        bench_queries(str(perf_path), results)
    del results["current"]
    print("RESULT:", "all first levels and first pages under 1 s" if not results["slow"]
          else "some first level or first page took 1 s or more")
    write_json(args.json, report)
    return 1 if results["slow"] else 0


if __name__ == "__main__":
    sys.exit(main())
