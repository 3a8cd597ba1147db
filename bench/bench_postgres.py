#!/usr/bin/env python3
"""PostgreSQL export at the server's ingest speed (issue #19): ptexport against perf and against psql's COPY.

    python3 bench/bench_postgres.py                         # 1 M and 10 M samples (perf takes minutes at 10 M)
    python3 bench/bench_postgres.py --sizes 1M --json pg.json
    python3 bench/bench_postgres.py --tiny                  # a quick check that it works

For each size, on one trace made here (``ptexport synth --program calls``, in a temporary directory
or ``--keep DIR``), in one run:

* **perf**: ``perf script --itrace=bep -s export-to-postgresql.py DB branches calls`` (perf 6.1; its
  libpq and Qt's QPSQL driver reach the server through PGHOST/PGPORT/PGUSER taken from ``--server``);
* **ptexport**: ``ptexport TRACE --db URL`` (a separate process, numba's cache warmed before);
* **ptexport, unlogged load**: the same with ``PTEXPORT_PG_UNLOGGED=1`` (tables loaded unlogged and
  set LOGGED at the end, the alternative the writer measured against: its cost is this row);
* **the ceiling**: the rows of ptexport's database, dumped to binary COPY files (untimed), loaded
  into an empty database with the same tables by psql: ``\\copy TABLE FROM FILE (FORMAT binary)``

  - one stream: every table in one psql session, one after the other (perf's way);
  - parallel: one psql per stream as ptexport splits them (the samples in two id ranges, the calls,
    all other tables), at once;
  - parallel + keys: the parallel load, then each table's primary key, indexes and ANALYZE, three
    psql sessions side by side, the largest tables first - what ptexport's finish runs.  This one
    (a finished database, as ptexport's) is the ceiling the ratio uses.

Prints wall seconds (and the CPU seconds of the client processes: the server's are not theirs),
samples/s, and the ratios: perf / ptexport (target >= 10x) and ptexport / ceiling (target <= 2x).
Every database this run creates is dropped at the end.  Exit status 1 when a check fails (sample
counts of perf's, ptexport's and the ceiling's databases differ); a missed target is a figure.
``--tiny`` is 20 k branches.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import bench_decode
from _common import (
    add_options,
    need_perf,
    one_line_errors,
    parse,
    parse_count,
    perf_env,
    ratio,
    workdir,
    write_json,
)
from _common import run_timed as _run_timed

# a checkout without ptexport installed works too (appended: an installed ptexport comes first)
sys.path.append(str(Path(__file__).resolve().parents[1]))

from ptexport.writers.postgres import SAMPLE_STREAMS
from ptexport.writers.schema import load_schema

PERF_PG_EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-postgresql.py"
QT_PSQL_DRIVER = "/usr/lib/*/qt5/plugins/sqldrivers/libqsqlpsql.so"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432"
WARM_BRANCHES = 2000
#: Sessions building keys and indexes in the ceiling's finish (as ptexport's FINISH_STREAMS).
KEY_SESSIONS = 3
TARGETS = {"perf": (10.0, ">= 10x perf"), "ceiling": (2.0, "<= 2x ceiling")}


def _conninfo(server: str) -> dict[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    return {k: str(v) for k, v in conninfo_to_dict(server).items()}


def _url(server: str, dbname: str) -> str:
    return f"{server.rstrip('/')}/{dbname}"


def _admin(server: str):
    import psycopg

    return psycopg.connect(_url(server, "postgres"), autocommit=True)


def _drop(server: str, *names: str) -> None:
    with _admin(server) as a:
        for n in names:
            a.execute(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)')


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + sys of the process and its waited-for children) of ``cmd``."""
    r = _run_timed(cmd, cwd, env)
    return r["wall_s"], r["cpu_s"]

def run_parallel(cmds: list[list[str]], cwd: Path) -> tuple[float, float]:
    """The commands at once: wall until the last ends, CPU seconds of all of them."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    cpu, failed = 0.0, []
    for c, p in zip(cmds, procs):
        err = p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        cpu += ru.ru_utime + ru.ru_stime
        if os.waitstatus_to_exitcode(status):
            failed.append(f"{' '.join(c[:3])}...: {err.strip()[-300:]}")
    if failed:
        raise SystemExit(f"bench_postgres: {'; '.join(failed)}")
    return time.perf_counter() - t0, cpu


def count_samples(server: str, dbname: str) -> int:
    import psycopg

    with psycopg.connect(_url(server, dbname)) as c:
        return int(c.execute("SELECT count(*) FROM samples WHERE id > 0").fetchone()[0])


# ---------------------------------------------------------------- the ceiling: psql loading the same rows


def dump_tables(server: str, dbname: str, out: Path) -> list[tuple[str, Path, int]]:
    """Every non-empty table of ``dbname`` as binary COPY files: (table, file, rows); the samples
    in SAMPLE_STREAMS id ranges (one file each), the others whole."""
    import psycopg

    out.mkdir(parents=True, exist_ok=True)
    files = []
    with psycopg.connect(_url(server, dbname)) as c:
        tables = [r[0] for r in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                          "ORDER BY tablename")]
        for t in tables:
            n = int(c.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0])
            if not n:
                continue
            parts = [f'SELECT * FROM "{t}"']
            if t == "samples" and SAMPLE_STREAMS > 1:
                hi = int(c.execute("SELECT max(id) FROM samples").fetchone()[0]) + 1
                cuts = [hi * k // SAMPLE_STREAMS for k in range(SAMPLE_STREAMS + 1)]
                parts = [f"SELECT * FROM samples WHERE id >= {a} AND id < {b}" for a, b in pairwise(cuts)]
            for k, q in enumerate(parts):
                path = out / f"{t}.{k}.bin"
                with open(path, "wb") as f, c.cursor().copy(f"COPY ({q}) TO STDOUT (FORMAT binary)") as cp:
                    f.writelines(cp)
                files.append((t, path, n // len(parts)))
    return files


def _psql(server: str, dbname: str, commands: list[str]) -> list[str]:
    cmd = ["psql", _url(server, dbname), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
    for s in commands:
        cmd += ["-c", s]
    return cmd


def key_sessions(tables: dict[str, int]) -> list[list[str]]:
    """Each table's key, indexes and ANALYZE (in that order, in one session), the tables spread over
    KEY_SESSIONS sessions, the largest first (ptexport's finish, with psql)."""
    sch = load_schema("postgresql")
    chains = []
    for t in sch.tables:
        stmts = ["SET maintenance_work_mem TO '256MB'"]
        key = sch.primary_key_of(t)
        if key:
            stmts.append(key)
        idx = [s for name, s in sch.index_sql.items() if sch.index_table[name] == t]
        chains.append((tables.get(t, 0) * (1 + len(idx)), stmts + idx + [f"ANALYZE {t}"]))
    chains.sort(key=lambda c: -c[0])
    sessions: list[tuple[int, list[str]]] = [(0, []) for _ in range(KEY_SESSIONS)]
    for cost, stmts in chains:  # the least loaded session takes the next chain
        i = min(range(KEY_SESSIONS), key=lambda k: sessions[k][0])
        sessions[i] = (sessions[i][0] + cost, sessions[i][1] + stmts)
    return [s for _, s in sessions if s]


def ceiling(server: str, files: list[tuple[str, Path, int]], work: Path, name: str) -> dict:
    """psql loading ``files`` into fresh databases: one stream; parallel streams; parallel + keys."""
    sch = load_schema("postgresql")
    rep: dict = {}
    rows: dict[str, int] = {}
    for t, _, n in files:
        rows[t] = rows.get(t, 0) + n
    for mode in ("one stream", "parallel", "parallel + keys"):
        db = f"{name}_{mode.replace(' ', '').replace('+', '_')}"
        _drop(server, db)
        with _admin(server) as a:
            a.execute(f'CREATE DATABASE "{db}"')
        run_timed(_psql(server, db, [";".join(sch.table_sql.values())]), work)  # untimed: the empty tables
        try:
            if mode == "one stream":
                wall, cpu = run_timed(_psql(server, db, ["SET synchronous_commit TO OFF"] + [
                    f"\\copy {t} FROM '{p}' (FORMAT binary)" for t, p, _ in files]), work)
            else:
                big = [[f"\\copy {t} FROM '{p}' (FORMAT binary)"] for t, p, _ in files if t in ("samples", "calls")]
                rest = [f"\\copy {t} FROM '{p}' (FORMAT binary)" for t, p, _ in files
                        if t not in ("samples", "calls")]
                cmds = [_psql(server, db, ["SET synchronous_commit TO OFF", *c]) for c in [*big, rest] if c]
                wall, cpu = run_parallel(cmds, work)
                if mode == "parallel + keys":
                    w2, c2 = run_parallel([_psql(server, db, s) for s in key_sessions(rows)], work)
                    rep["keys_s"] = w2
                    wall, cpu = wall + w2, cpu + c2
            rep[mode] = {"wall_s": wall, "cpu_s": cpu, "samples": count_samples(server, db)}
        finally:
            _drop(server, db)
    return rep


# ---------------------------------------------------------------- one size


def one_size(args: argparse.Namespace, work: Path, branches: int, problems: list[str]) -> dict:
    server = args.server
    tag = f"bench_pg_{os.getpid()}_{branches}"
    names = {"ptexport": f"{tag}_ptx", "unlogged": f"{tag}_unlogged", "perf": f"{tag}_perf", "ceiling": f"{tag}_ceil"}
    trace = bench_decode.generate(work / f"trace-{branches}", branches, "calls")
    rep: dict = {"branches_asked": branches, "runs": {}}
    runs = rep["runs"]
    try:
        _drop(server, *names.values())
        ci = _conninfo(server)
        env = perf_env()
        for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"), ("password", "PGPASSWORD")):
            if ci.get(key):
                env[var] = ci[key]
        if not args.skip_perf:
            shutil.rmtree(trace.parent / f"{names['perf']}-perf-data", ignore_errors=True)
            wall, cpu = run_timed(["perf", "script", "-i", str(trace), "--itrace=bep", "-s", PERF_PG_EXPORTER,
                                   names["perf"], "branches", "calls"], trace.parent, env)
            runs["perf export-to-postgresql.py"] = {"wall_s": wall, "cpu_s": cpu,
                                                    "samples": count_samples(server, names["perf"])}
            _drop(server, names["perf"])
        wall, cpu = run_timed(["ptexport", str(trace), "--db", _url(server, names["ptexport"]), "-q"], trace.parent)
        runs["ptexport"] = {"wall_s": wall, "cpu_s": cpu, "samples": count_samples(server, names["ptexport"])}
        if not args.skip_unlogged:
            wall, cpu = run_timed(["ptexport", str(trace), "--db", _url(server, names["unlogged"]), "-q"],
                                  trace.parent, dict(os.environ, PTEXPORT_PG_UNLOGGED="1"))
            runs["ptexport, unlogged load + SET LOGGED"] = {"wall_s": wall, "cpu_s": cpu,
                                                           "samples": count_samples(server, names["unlogged"])}
            _drop(server, names["unlogged"])
        files = dump_tables(server, names["ptexport"], work / f"copy-{branches}")
        rep["copy_file_bytes"] = sum(p.stat().st_size for _, p, _ in files)
        _drop(server, names["ptexport"])
        for mode, r in ceiling(server, files, work, names["ceiling"]).items():
            if mode == "keys_s":
                rep["ceiling_keys_s"] = r
            else:
                runs[f"ceiling: psql COPY, {mode}"] = r
        for _, p, _ in files:
            p.unlink()
    finally:
        _drop(server, *names.values())
    counts = {k: r["samples"] for k, r in runs.items()}
    n = runs["ptexport"]["samples"]
    if len(set(counts.values())) != 1:
        problems.append(f"{branches} branches: the databases' sample counts differ: {counts}")
    rep["samples"] = n
    ours = runs["ptexport"]["wall_s"]
    ceil = runs["ceiling: psql COPY, parallel + keys"]["wall_s"]
    rep["ratios"] = {"ceiling_over_ptexport": ratio(ceil, ours), "ptexport_over_ceiling": ratio(ours, ceil)}
    perf = runs.get("perf export-to-postgresql.py")
    if perf:
        rep["ratios"]["perf_over_ptexport"] = ratio(perf["wall_s"], ours)
        rep["ratios"]["perf_over_ceiling"] = ratio(perf["wall_s"], ceil)
    return rep


def print_size(rep: dict) -> None:
    n = rep["samples"]
    print(f"\n{n:,} samples ({rep['branches_asked']:,} branches asked; COPY files {rep['copy_file_bytes'] / 1e6:.0f} MB)")
    print(f"  {'':44} {'wall s':>8} {'client CPU s':>13} {'K samples/s':>12}")
    for name, r in rep["runs"].items():
        print(f"  {name:44} {r['wall_s']:8.2f} {r['cpu_s']:13.2f} {n / r['wall_s'] / 1e3:12.0f}")
    print(f"  (the ceiling's keys, indexes and ANALYZE: {rep['ceiling_keys_s']:.2f} s of its parallel + keys)")
    rt = rep["ratios"]
    if "perf_over_ptexport" in rt:
        met = "met" if rt["perf_over_ptexport"] >= TARGETS["perf"][0] else "NOT met"
        print(f"  ptexport vs perf:    {rt['perf_over_ptexport']:6.2f}x faster (target {TARGETS['perf'][1]}: {met}; "
              f"the ceiling itself is {rt['perf_over_ceiling']:.2f}x perf)")
    met = "met" if rt["ptexport_over_ceiling"] <= TARGETS["ceiling"][0] else "NOT met"
    print(f"  ptexport vs ceiling: {rt['ptexport_over_ceiling']:6.2f}x the ceiling's time "
          f"(target {TARGETS['ceiling'][1]}: {met})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="See the module docstring (python3 -m pydoc bench/bench_postgres.py).")
    ap.add_argument("--sizes", default="1M,10M",
                    help="branches of the generated traces, comma-separated (default 1M,10M; k/M suffixes)")
    ap.add_argument("--server", default=DEFAULT_SERVER,
                    help=f"the PostgreSQL server, a URL without a database name (default {DEFAULT_SERVER})")
    ap.add_argument("--skip-perf", action="store_true", help="no perf run (its exporter takes minutes at 10 M)")
    ap.add_argument("--skip-unlogged", action="store_true", help="no unlogged-load run")
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"sizes": "20k"})
    try:
        args.size_list = [parse_count(s) for s in args.sizes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as e:
        ap.error(f"--sizes: {e}")
    if not args.skip_perf:
        need_perf(ap)
        if not os.path.isfile(PERF_PG_EXPORTER):
            ap.exit(2, f"{ap.prog}: error: {PERF_PG_EXPORTER} is needed (Debian: linux-perf)\n")
        if not glob.glob(QT_PSQL_DRIVER):
            ap.exit(2, f"{ap.prog}: error: perf's exporter needs Qt's PostgreSQL driver (Debian: libqt5sql5-psql "
                       "python3-pyside2.qtsql)\n")
    if shutil.which("psql") is None:
        ap.exit(2, f"{ap.prog}: error: psql is needed (Debian: postgresql-client)\n")
    try:
        import psycopg
    except ImportError:
        ap.exit(2, f"{ap.prog}: error: psycopg is needed (pip install 'psycopg[binary]')\n")
    try:
        _admin(args.server).close()
    except psycopg.Error as e:
        ap.exit(2, f"{ap.prog}: error: no PostgreSQL server at {args.server}: {str(e).strip().splitlines()[0]}\n")
    sys.stdout.reconfigure(line_buffering=True)
    with one_line_errors(ap), workdir(args.keep, "bench_postgres.") as work:
        return run(args, work)


def run(args: argparse.Namespace, work: Path) -> int:
    t0 = time.perf_counter()
    load = [os.getloadavg()[0]]
    # numba's cache (filled or checked) and the server warmed: a tiny export first, untimed
    warm = bench_decode.generate(work / "warm", WARM_BRANCHES, "calls")
    name = f"bench_pg_{os.getpid()}_warm"
    try:
        run_timed(["ptexport", str(warm), "--db", _url(args.server, name), "-q"], warm.parent)
    finally:
        _drop(args.server, name)
    problems: list[str] = []
    sizes = {}
    for branches in args.size_list:
        rep = one_size(args, work, branches, problems)
        sizes[str(branches)] = rep
        print_size(rep)
    load.append(os.getloadavg()[0])
    print(f"\n{os.cpu_count()} CPUs, load average {load[0]:.1f} at the start and {load[1]:.1f} at the end, "
          f"{time.perf_counter() - t0:.0f} s in all; the server on {args.server}")
    for p in problems:
        print(f"PROBLEM: {p}")
    write_json(args.json, {"sizes": sizes, "cores": os.cpu_count(), "load_average": load, "problems": problems,
                           "tiny": bool(getattr(args, "tiny", False)), "server": args.server})
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
