#!/usr/bin/env python3
"""Every docs/cookbook.md query, timed on each backend: SQLite, DuckDB, Parquet (through DuckDB), PostgreSQL.

    python3 bench/bench_cookbook.py [--branches 1M] [--program threads] [--postgres URL] [--runs 3] [--keep DIR]
                                    [--compare-export]
    python3 bench/bench_cookbook.py --file DIR/perf.data [--json report.json]

Generates one trace with ``ptexport synth`` (two CPUs, CYC timing; in a temporary directory, or in
``--keep DIR`` to be reused with ``--file``), exports it with ``ptexport TRACE --db`` into SQLite
and DuckDB and with ``--parquet`` into a Parquet directory (and into PostgreSQL with
``--postgres URL``, a database created and dropped here), then runs each cookbook query
``--runs`` times on each (the best time counts) and checks that every backend gives the rows
SQLite gives.  Prints one line per query (seconds per backend) and the export times and sizes.
The windowed queries (``WITH w (lo, hi) AS (SELECT ...)``: slow calls, samples in a range, the VM
timeline) are asked of a window in the data: a thousandth of the trace's time, in its middle.  With
``--raw`` the raw forms of docs/cookbook-raw.md follow (the queries over the aggregates asked of
``calls`` / ``samples``: the line ``*_raw`` is what the question cost before the aggregates).  ``--compare-export`` also exports to
SQLite with ``--no-aggregates`` and prints what the aggregates cost at export time.
Issue #20's target is a >= 40 M-sample trace with the issue's shape (48 M samples, 17 M calls:
``--program calls``, which the generator replays, fast)::

    python3 bench/bench_cookbook.py --branches 48M --program calls --runs 1 --compare-export \
        --postgres postgresql://postgres@127.0.0.1:5432 --keep /var/tmp/cb48 --json cb48.json  Nothing here is a test: it measures.  Output paths (``--keep``,
``--json``) that exist are refused unless ``--force``; ``--tiny`` is a quick check (2000 branches).
"""

from __future__ import annotations

import argparse
import io
import re
import sqlite3
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

# a checkout without ptexport installed works too (appended: an installed ptexport comes first)
sys.path.append(str(Path(__file__).resolve().parents[1]))

from _common import (  # noqa: E402
    add_options,
    need_file,
    one_line_errors,
    parse,
    parse_count,
    workdir,
    write_json,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
#: A query's time window, written once: ``WITH w (lo, hi) AS (SELECT LO, HI)``.
WINDOW = re.compile(r"WITH w \(lo, hi\) AS \(SELECT \d+, \d+\)")


def cookbook_queries(raw: bool = True) -> dict[str, str]:
    """docs/cookbook.md's queries, then (``raw``) docs/cookbook-raw.md's raw forms of the aggregate ones."""
    files = [DOCS / "cookbook.md"] + ([DOCS / "cookbook-raw.md"] if raw else [])
    return {name: sql for f in files
            for name, sql in re.findall(r"<!-- query: (\w+) -->\s*```sql\n(.*?)```", f.read_text(encoding="utf-8"),
                                        re.DOTALL)}


def in_the_data(sql: str, lo: int, hi: int) -> str:
    """A windowed query asked of [lo, hi) (the cookbook's windows fit its test database, not a benchmark's)."""
    return WINDOW.sub(f"WITH w (lo, hi) AS (SELECT {lo}, {hi})", sql)


def _norm(rows) -> list[tuple]:
    out = []
    for r in rows:
        t = []
        for v in r:
            if isinstance(v, Decimal):
                v = float(v)
            if isinstance(v, bool):
                v = int(v)
            if isinstance(v, float):
                v = round(v, 6)
            t.append(v)
        out.append(tuple(t))
    return out


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_cookbook.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", type=parse_count, default=1_000_000, help="branches to generate (default 1M)")
    ap.add_argument("--program", default="threads", help="the generator's program (default threads)")
    ap.add_argument("--replay", choices=("auto", "on", "off"), default=None,
                    help="the generator's --replay (default: off for threads and forkexec, whose rounds differ "
                         "and cannot be replayed; else auto)")
    ap.add_argument("--file", metavar="TRACE", help="time this perf.data instead of generating one")
    ap.add_argument("--postgres", metavar="URL", help="also PostgreSQL: postgresql://user@host (a database is "
                                                      "created and dropped)")
    ap.add_argument("--reuse-exports", action="store_true",
                    help="with --keep DIR --force: query the SQLite, DuckDB and Parquet exports an earlier run left in "
                         "DIR instead of exporting again (PostgreSQL is exported again)")
    ap.add_argument("--raw", action="store_true",
                    help="also the raw forms of docs/cookbook-raw.md (minutes on SQLite at tens of millions of rows)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each query (the best counts; default 3)")
    ap.add_argument("--jobs", type=int, default=2, help="ptexport --jobs for the exports (default 2)")
    ap.add_argument("--compare-export", action="store_true",
                    help="also export to SQLite with --no-aggregates (what the aggregates cost)")
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"branches": 2000, "runs": 1})
    need_file(ap, args.file, "trace")
    with one_line_errors(ap):
        import duckdb

        from ptexport.cli import main as ptexport
        from ptexport.writers.parquet import open_parquet

        def run(cli: list[str]) -> float:
            t0 = time.perf_counter()
            out = io.StringIO()
            if ptexport(cli, out=out) != 0:
                raise OSError(f"ptexport {' '.join(cli)} failed")
            return time.perf_counter() - t0

        with workdir(args.keep, "bench_cookbook_") as d:
            trace = Path(args.file) if args.file else d / "trace" / "perf.data"
            lite, duck, pq = d / "cookbook.sqlite", d / "cookbook.duckdb", d / "cookbook-parquet"
            reuse = args.reuse_exports and lite.exists() and duck.exists() and pq.exists()
            if not args.file and not (reuse and trace.exists()):
                if trace.exists() and args.force:
                    import shutil

                    shutil.rmtree(trace.parent)
                replay = args.replay or ("off" if args.program in ("threads", "forkexec") else "auto")
                t_synth = run(["synth", "--out", str(trace.parent), "--program", args.program, "--cpus", "2",
                               "--timing", "cyc", "--branches", str(args.branches), "--seed", "7",
                               "--replay", replay])
                print(f"generated {args.branches} branches in {t_synth:.1f} s", flush=True)
            base = [str(trace), "-q", "--force", "--jobs", str(args.jobs)]
            if reuse:
                exports: dict[str, float] = {}  # a --keep DIR's exports of an earlier run, as they are
            else:
                exports = {"sqlite": run([*base, "--db", str(lite)]),
                           "duckdb": run([*base, "--db", str(duck)]),
                           "parquet": run([*base, "--parquet", str(pq)])}
            sizes = {"sqlite": _size(lite), "duckdb": _size(duck), "parquet": _size(pq)}
            if args.compare_export:
                bare = d / "cookbook-noagg.sqlite"
                exports["sqlite_no_aggregates"] = run([*base, "--db", str(bare), "--no-aggregates"])
                bare.unlink()
            conns = {"sqlite": sqlite3.connect(lite), "duckdb": duckdb.connect(str(duck), read_only=True),
                     "parquet": open_parquet(pq)}
            pg_name = None
            admin = None
            if args.postgres:
                import psycopg

                pg_name = f"ptx_bench_cookbook_{uuid.uuid4().hex[:8]}"
                url = f"{args.postgres.rstrip('/')}/{pg_name}"
                admin = psycopg.connect(f"{args.postgres.rstrip('/')}/postgres", autocommit=True)
                exports["postgresql"] = run([*base, "--db", url])
                conns["postgresql"] = psycopg.connect(url)
            try:
                samples = conns["sqlite"].execute("SELECT COUNT(*) - 1 FROM samples").fetchone()[0]
                report: dict = {"samples": samples, "runs": args.runs, "export_s": exports, "bytes": sizes,
                                "queries": {}, "same_rows": {}, "same_as_raw": {}}
                all_rows: dict[str, dict[str, list]] = {}
                names = list(conns)
                print(f"{samples} samples; export seconds: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in exports.items())
                      + "; MB: " + ", ".join(f"{k} {v / 1e6:.1f}" for k, v in sizes.items()))
                first, last = conns["sqlite"].execute(
                    "SELECT MIN(min_time), MAX(max_time) FROM samples_time_blocks").fetchone()
                span = (last or 0) - (first or 0)
                lo = (first or 0) + span // 2
                hi = lo + max(span // 1000, 1000)
                report["window"] = [lo, hi]
                print(f"windowed queries (w): [{lo}, {hi}), a thousandth of the trace's {span} ns, in its middle")
                print(f"{'query':24s}" + "".join(f"{n:>12s}" for n in names) + "  same rows")
                for q, sql in cookbook_queries(args.raw).items():
                    sql = in_the_data(sql, lo, hi)
                    times, rows = {}, {}
                    for n, c in conns.items():
                        best = None
                        for _ in range(args.runs):
                            t0 = time.perf_counter()
                            got = c.execute(sql).fetchall()
                            dt = time.perf_counter() - t0
                            best = dt if best is None else min(best, dt)
                        times[n], rows[n] = best, _norm(got)
                    same = all(rows[n] == rows["sqlite"] for n in names)
                    all_rows[q] = rows
                    report["queries"][q] = times
                    report["same_rows"][q] = same
                    print(f"{q:24s}" + "".join(f"{times[n]:12.3f}" for n in names) + f"  {'yes' if same else 'NO'}")
                # a query over the aggregates and its raw form over calls / samples: the same rows everywhere
                for q in [q for q in all_rows if f"{q}_raw" in all_rows]:
                    report["same_as_raw"][q] = all(all_rows[q][n] == all_rows[f"{q}_raw"][n] for n in names)
                if args.raw:
                    print("aggregates == raw: " + ", ".join(f"{q} {'yes' if ok else 'NO'}"
                                                            for q, ok in report["same_as_raw"].items()))
            finally:
                for c in conns.values():
                    c.close()
                if admin is not None:
                    admin.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
                    admin.close()
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
