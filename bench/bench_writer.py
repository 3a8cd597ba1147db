#!/usr/bin/env python3
"""Writer benchmark: rows/s into SQLite and PostgreSQL from synthetic numpy columns.

    python3 bench/bench_writer.py [--samples 2000000] [--batch 250000] [--pg postgresql://postgres@127.0.0.1]
                                  [--json report.json]

The columns look like a real Intel PT branch export (small ids, user-space
and kernel addresses, increasing times, one call row per ~3 branch samples).
Prints rows/s per backend, DB bytes per sample and the ratio to perf's
export-to-sqlite.py as measured here (DESIGN.md section 6: 84 K samples/s,
69 MB for 1 M samples with "branches calls"), and the peak RSS.  The SQLite
files live in a temporary directory (inside ``--dir``) that is removed, the
PostgreSQL database is a new one, dropped at the end; ``--json`` refuses an
existing file unless ``--force``; ``--tiny`` is a quick check (5000 samples).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

# a checkout without ptexport installed works too (appended: an installed ptexport comes first)
sys.path.append(str(Path(__file__).resolve().parents[1]))

from _common import add_options, one_line_errors, parse, ratio, write_json  # noqa: E402
from ptexport.writers import open_writer  # noqa: E402

PERF_SAMPLES_PER_S = 84_000
PERF_BYTES_PER_SAMPLE = 69e6 / 1e6


def synth_batches(n: int, batch: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    t0 = 641_256_820_833
    for start in range(0, n, batch):
        k = min(batch, n - start)
        ids = np.arange(start + 1, start + k + 1, dtype=np.int64)
        kernel = rng.random(k) < 0.3
        ip = np.where(kernel, np.int64(-0x7EFFFFF0) + rng.integers(0, 1 << 22, k),
                      0x5555_5555_4000 + rng.integers(0, 1 << 20, k))
        sym = rng.integers(1, 3000, k)
        bt = rng.choice(np.array([9, 3, 5, 1, 257, 4131]), k, p=[0.6, 0.15, 0.15, 0.08, 0.01, 0.01])
        samples = {
            "id": ids, "evsel_id": np.ones(k, np.int64), "machine_id": np.ones(k, np.int64),
            "thread_id": rng.integers(1, 40, k), "comm_id": rng.integers(1, 20, k),
            "dso_id": rng.integers(1, 30, k), "symbol_id": sym, "sym_offset": rng.integers(0, 400, k),
            "ip": ip, "time": t0 + ids * 37, "cpu": rng.integers(0, 8, k),
            "to_dso_id": rng.integers(1, 30, k), "to_symbol_id": sym, "to_sym_offset": rng.integers(0, 400, k),
            "to_ip": ip + rng.integers(-200, 200, k), "branch_type": bt, "in_tx": np.zeros(k, np.int64),
            "call_path_id": rng.integers(1, 20000, k), "insn_count": np.zeros(k, np.int64),
            "cyc_count": np.zeros(k, np.int64), "flags": bt, "vcpu": np.full(k, -1), "machine_pid": np.full(k, -1),
        }
        m = k // 3
        cid = np.arange(start // 3 + 1, start // 3 + m + 1, dtype=np.int64)
        ct = t0 + (start + np.arange(m) * 3) * 37
        calls = {
            "id": cid, "thread_id": rng.integers(1, 40, m), "comm_id": rng.integers(1, 20, m),
            "call_path_id": rng.integers(1, 20000, m), "call_time": ct, "return_time": ct + rng.integers(37, 5000, m),
            "branch_count": rng.integers(1, 50, m), "call_id": ids[:m], "return_id": ids[:m] + 2,
            "parent_call_path_id": rng.integers(1, 20000, m), "flags": np.zeros(m, np.int64),
            "parent_id": np.maximum(cid - rng.integers(1, 5, m), 0),
            "insn_count": np.zeros(m, np.int64), "cyc_count": np.zeros(m, np.int64),
        }
        yield samples, calls


def run(target: str, n: int, batch: int, **kw) -> dict:
    # pre-generate so the timing is the writer only
    batches = list(synth_batches(n, batch))
    t, c0 = time.perf_counter(), time.process_time()
    with open_writer(target, force=True, **kw) as w:
        t_open = time.perf_counter() - t
        for s, c in batches:
            w.write_samples(s)
            w.write_calls(c)
        t_load, c_load = time.perf_counter() - t, time.process_time() - c0
    return {"wall": time.perf_counter() - t, "cpu": time.process_time() - c0, "load": t_load - t_open,
            "load_cpu": c_load, "calls": sum(len(c["id"]) for _, c in batches)}


def perf_layout_size(db: str, out: str) -> int:
    """Bytes of the same samples/calls rows in perf's exact layout (21-column samples, perf's 2 indexes)."""
    import sqlite3

    from ptexport.writers.schema import load_schema

    sch = load_schema("sqlite")
    c = sqlite3.connect(db, isolation_level=None)
    c.execute(f"ATTACH '{out}' AS perf")
    c.execute("PRAGMA perf.journal_mode = OFF")
    c.execute("BEGIN")
    for t, ncol in (("samples", 21), ("calls", 14)):
        cols = sch.tables[t][:ncol]
        ddl = ", ".join(f'"{x.name}" {x.type}' + (" NOT NULL PRIMARY KEY" if x.name == "id" else "") for x in cols)
        c.execute(f"CREATE TABLE perf.{t} ({ddl})")
        names = ", ".join(f'"{x.name}"' for x in cols)
        c.execute(f"INSERT INTO perf.{t} ({names}) SELECT {names} FROM main.{t}")
    c.execute("CREATE INDEX perf.pcpid_idx ON calls (parent_call_path_id)")
    c.execute("CREATE INDEX perf.pid_idx ON calls (parent_id)")
    c.execute("COMMIT")
    c.close()
    return os.path.getsize(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=250_000)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432", help="server URL ('' to skip)")
    ap.add_argument("--dir", default=None, help="directory for the SQLite file (default: a temp dir)")
    ap.add_argument("--modes", default="btree,bind", help="SQLite writer modes to run (btree,bind,executemany)")
    ap.add_argument("--rss", action="store_true", help="also measure the writer's peak RSS at two sizes")
    ap.add_argument("--child-rss", type=int, default=0, help=argparse.SUPPRESS)
    add_options(ap)
    args = parse(ap, argv, tiny={"samples": 5000, "batch": 2000})
    if args.child_rss:
        return child_rss(args.child_rss, args.batch, args.dir)
    if args.samples < 3 or args.batch < 3:
        ap.error("--samples and --batch must be at least 3 (one call row per 3 samples)")
    if args.dir is not None and not os.path.isdir(args.dir):
        ap.error(f"--dir {args.dir}: no such directory")
    modes = [m for m in args.modes.split(",") if m]
    from ptexport.writers.sqlite import MODES

    if not modes or set(modes) - set(MODES):
        ap.error(f"--modes: one or more of {','.join(MODES)}")
    with one_line_errors(ap):
        return run_all(args, modes)


def run_all(args: argparse.Namespace, modes: list[str]) -> int:
    n = args.samples
    report: dict = {"samples": n, "batch": args.batch, "sqlite": {},
                    "perf": {"samples_per_s": PERF_SAMPLES_PER_S, "bytes_per_sample": PERF_BYTES_PER_SAMPLE}}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for mode in modes:
            run(os.path.join(d, f"warmup-{mode}.db"), 5000, 5000, mode=mode)  # numba JIT/cache load, once
            db = os.path.join(d, f"bench-{mode}.db")
            r = run(db, n, args.batch, mode=mode)
            rows = n + r["calls"]
            print(f"sqlite[{mode}]: {n} samples + {r['calls']} calls: wall {r['wall']:.2f} s, cpu {r['cpu']:.2f} s "
                  f"(load: wall {r['load']:.2f} s, cpu {r['load_cpu']:.2f} s)")
            print(f"  end to end: {n / r['wall'] / 1e6:.2f} M samples/s wall ({rows / r['wall'] / 1e6:.2f} M rows/s), "
                  f"{n / r['cpu'] / 1e6:.2f} M samples/s per CPU second; "
                  f"{n / r['wall'] / PERF_SAMPLES_PER_S:.1f}x perf's export-to-sqlite.py (84 K samples/s)")
            print(f"  load only (before keys/indexes): {n / r['load'] / 1e6:.2f} M samples/s wall, "
                  f"{rows / r['load_cpu'] / 1e6:.2f} M rows/s per CPU second")
            size = os.path.getsize(db)
            psize = perf_layout_size(db, os.path.join(d, f"perf-layout-{mode}.db"))
            print(f"  {size / n:.1f} DB bytes/sample; the same rows in perf's layout: {psize / n:.1f} "
                  f"({size / psize:.2f}x; DESIGN.md's perf run: {PERF_BYTES_PER_SAMPLE:.0f} bytes/sample)")
            report["sqlite"][mode] = {
                "calls": r["calls"], "wall_s": r["wall"], "cpu_s": r["cpu"], "load_wall_s": r["load"],
                "load_cpu_s": r["load_cpu"], "samples_per_s": n / r["wall"], "rows_per_s": rows / r["wall"],
                "ratio_to_perf": n / r["wall"] / PERF_SAMPLES_PER_S, "db_bytes_per_sample": size / n,
                "perf_layout_bytes_per_sample": psize / n, "size_ratio_to_perf_layout": ratio(size, psize)}
    if args.pg:
        name = f"ptx_bench_{uuid.uuid4().hex[:8]}"
        url = f"{args.pg.rstrip('/')}/{name}"
        try:
            r = run(url, n, args.batch)
        except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
            print(f"postgresql: skipped: {e}")
            report["postgresql"] = {"skipped": str(e)}
        else:
            total, load, ncalls = r["wall"], r["load"], r["calls"]
            import psycopg

            with psycopg.connect(f"{args.pg.rstrip('/')}/postgres", autocommit=True) as admin:
                size = admin.execute("SELECT pg_database_size(%s)", (name,)).fetchone()[0]
                admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            print(f"postgresql: {n} samples + {ncalls} calls in {total:.2f} s "
                  f"(load {load:.2f} s, keys/indexes {total - load:.2f} s): {n / total / 1e6:.2f} M samples/s, "
                  f"{size / n:.1f} DB bytes/sample (client cpu {r['cpu']:.2f} s; the server's is not counted)")
            report["postgresql"] = {"calls": ncalls, "wall_s": total, "load_wall_s": load, "client_cpu_s": r["cpu"],
                                    "samples_per_s": n / total, "db_bytes_per_sample": size / n,
                                    "ratio_to_perf": n / total / PERF_SAMPLES_PER_S}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:.0f} MiB (includes the pre-generated input columns)")
    report["peak_rss_mib"] = rss
    if args.rss:
        import subprocess

        for k in (args.samples // 4, args.samples):
            with tempfile.TemporaryDirectory(dir=args.dir) as d:
                out = subprocess.run([sys.executable, __file__, "--child-rss", str(k), "--batch", str(args.batch),
                                      "--dir", d], capture_output=True, text=True, check=True).stdout
            print(f"writer-only peak RSS, {k} samples generated batch by batch: {out.strip()} MiB")
            report.setdefault("writer_peak_rss_mib", {})[str(k)] = float(out)
    write_json(args.json, report)
    return 0


def child_rss(n: int, batch: int, directory: str) -> int:
    """Export with batches made on the fly: the peak RSS is the writer's plus one batch."""
    with open_writer(os.path.join(directory, "rss.db"), force=True) as w:
        for s, c in synth_batches(n, batch):
            w.write_samples(s)
            w.write_calls(c)
    # VmHWM: this address space's peak (ru_maxrss would carry the parent's over fork+exec)
    hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(f"{hwm / 1024:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
