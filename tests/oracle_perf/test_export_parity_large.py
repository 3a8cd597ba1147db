"""Export parity at scale: ``ptexport TRACE --db DB`` equals perf 6.1's export-to-sqlite.py at >= 1 M branches.

Issue #5's acceptance.  Generated traces of a million branches and more, made once per module:

* ``calls-cyc`` (single thread, timing): deep calls and returns, CYC timing (insn/cyc counts, IPC), CBR;
* ``threads-switches`` (multi-thread, multi-CPU): threads on three CPUs with migrations and
  timer preemption (``out preempt`` switches, async trace ends), MTC timing;
* ``forkexec-errors`` (errors): fork and exec on two CPUs, CYC timing, preemption, corrupted bytes,
  truncated AUX areas and OVF packets (perf's exporter keeps no errors: its samples and calls around
  them must match);
* ``events-power`` (beyond the four kinds, 300 K branches): PTWRITE/TPAUSE rounds on two CPUs with
  power events, so perf's power tables and views (mwait, pwre, exstop, pwrx, power_events_view).

perf's exporter (``--itrace=bep ... branches calls``) and ours run on each; every table
perf's database has must hold the same rows with the same ids (so samples and calls come
in the same order), every view perf defines must return the same rows, and every call's
call path spelled as symbol names must be the same.  The comparison runs inside SQLite
(perf's database attached to ours, rows joined by id), so 1 M rows cost seconds, not minutes.

Tables must hold the same values with the same SQLite types.  In views, perf's SQLite
``power_events_view`` gives '' (``ELSE ""``) where its PostgreSQL one gives NULL; ptexport's
gives NULL in both, so views are compared reading '' as NULL.

The PostgreSQL export of one variant is checked against the SQLite one too (issue #5: "the
same export into PostgreSQL gives the same rows as the SQLite one").

The perf-quipper recording goes through the same comparison here; its particulars are checked in
tests/oracle_perf/test_export_quipper.py.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import time
import uuid

import pytest

from oracle_perf.test_export_parity import EXPORTER, needs_exporter
from ptxtest import needs_perf, perf_python_env
from ptexport.cli import main

# id -> (ptexport synth options, branches)
VARIANTS = {
    "calls-cyc": ("--program calls --timing cyc --cbr 18 --ip-compression mixed", "1M"),
    # (threads --corrupt/--truncate places no fault perf notices: forkexec does, and adds exec comms)
    # faults lose some branches: the errors variant is made a little longer
    "forkexec-errors": ("--program forkexec --cpus 2 --timing cyc --preempt 3000 --ovf 3 --corrupt 3 --truncate 2 "
                        "--psb-period 1024", "1050k"),
    # three CPUs: queues tie at one timestamp where perf's heap pop breaks the tie to the right
    # (test_queue_heap_ties.py)
    "threads-switches": ("--program threads --cpus 3 --timing mtc --preempt 1000", "1M"),
    # beyond the acceptance's four kinds, smaller: power events (--itrace=p: cbr, mwait, pwre, exstop,
    # pwrx, psb samples and perf's power tables and views)
    "events-power": ("--program events --cpus 2 --timing cyc --preempt 4000 --power", "300k"),
}
MIN_SAMPLES = {"events-power": 300_000}
PG_VARIANT = "forkexec-errors"

# A call's call path as symbol names, root first ({s}: the schema, main or perf).
_PATHS = """
CREATE TEMP TABLE paths_{s} AS
WITH RECURSIVE names(id, path) AS (
    SELECT id, '' FROM {s}.call_paths WHERE id = parent_id
    UNION ALL
    SELECT c.id, names.path || '/' ||
           COALESCE((SELECT name FROM {s}.symbols WHERE id = c.symbol_id), printf('%x', c.ip))
    FROM {s}.call_paths c JOIN names ON c.parent_id = names.id WHERE c.id != c.parent_id
)
SELECT id, path FROM names
"""


def _wanted(request) -> list[str]:
    """The variants the selected tests of this module use, in VARIANTS order."""
    want = set()
    for item in request.session.items:
        if getattr(item, "module", None) is request.module:
            cs = getattr(item, "callspec", None)
            want.add(cs.params["variant"] if cs and "variant" in cs.params else PG_VARIANT)
    return [v for v in VARIANTS if v in want]


@pytest.fixture(scope="module")
def exported(request, tmp_path_factory):
    """variant -> (trace, perf's database, ours, seconds ptexport took), made once for all selected variants.

    perf's exporter is the slow part (~1 core-minute per million branches): up to two run in the
    background while the next traces are generated and ptexport exports the previous ones.
    """
    made: dict[str, tuple] = {}
    procs: dict[str, subprocess.Popen] = {}
    dirs = {}

    def ours(v: str) -> None:
        d = dirs[v]
        t0 = time.monotonic()
        assert main([str(d / "trace" / "perf.data"), "--db", str(d / "ours.db"), "-q"], out=io.StringIO()) == 0
        made[v] = (d / "trace" / "perf.data", d / "perf.db", d / "ours.db", time.monotonic() - t0)

    def running() -> list[str]:
        return [v for v, p in procs.items() if p.poll() is None]

    try:
        todo: list[str] = []
        for v in _wanted(request):
            d = dirs[v] = tmp_path_factory.mktemp(v)
            opts, branches = VARIANTS[v]
            assert main(["synth", "--out", str(d / "trace"), "--branches", branches, "--seed", "3", *opts.split()],
                        out=io.StringIO()) == 0
            while len(running()) >= 2:
                if todo:
                    ours(todo.pop(0))
                else:
                    procs[running()[0]].wait(timeout=900)
            with open(d / "perf.err", "wb") as err:
                procs[v] = subprocess.Popen(
                    ["perf", "script", "-i", str(d / "trace" / "perf.data"), "--itrace=bep", "-s", EXPORTER,
                     str(d / "perf.db"), "branches", "calls"],
                    stdout=subprocess.DEVNULL, stderr=err, env=perf_python_env())
            todo.append(v)
        for v in todo:
            ours(v)
    except BaseException:
        for p in procs.values():
            p.kill()
        raise

    def get(variant: str):
        p = procs[variant]
        rc = p.wait(timeout=900)
        assert rc == 0, f"perf's exporter failed on {variant}: {(dirs[variant] / 'perf.err').read_text()[-2000:]}"
        return made[variant]

    yield get
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def _val(col: str, side: str, view: bool) -> str:
    return f"NULLIF({side}.\"{col}\", '')" if view else f'{side}."{col}"'


def _first_difference(con, rel: str, cols: list[str], view: bool) -> str | None:
    """main.rel and perf.rel joined by id: the first id whose rows differ, as a message."""
    diff = " OR ".join(f"{_val(c, 'a', view)} IS NOT {_val(c, 'b', view)}" for c in cols)
    if not view:  # the same SQLite types too (2000 is not 2000.0, 7 is not '7')
        diff += " OR " + " OR ".join(f'typeof(a."{c}") != typeof(b."{c}")' for c in cols)
    bad = con.execute(f"SELECT a.id FROM main.{rel} a LEFT JOIN perf.{rel} b ON b.id = a.id "
                      f"WHERE b.id IS NULL OR {diff} ORDER BY a.id LIMIT 1").fetchone()
    if bad is None:
        return None
    sel = ",".join(f'"{c}"' for c in cols)
    a = con.execute(f"SELECT {sel} FROM main.{rel} WHERE id = ?", bad).fetchall()
    b = con.execute(f"SELECT {sel} FROM perf.{rel} WHERE id = ?", bad).fetchall()
    return f"{rel}: id {bad[0]} differs:\n  ours: {a}\n  perf: {b}\n  columns: {cols}"


def _same_rows(con, rel: str, cols: list[str], view: bool) -> int:
    """main.rel and perf.rel hold the same rows (by id when the first column is id); returns the count.

    Tables must hold the same values and types (perf's '' included); views may give NULL for perf's ''.
    """
    n = con.execute(f"SELECT count(*) FROM main.{rel}").fetchone()[0]
    m = con.execute(f"SELECT count(*) FROM perf.{rel}").fetchone()[0]
    assert n == m, f"{rel}: {n} rows here, {m} in perf's database"
    if cols[0] == "id":
        # ids unique in perf's (tables: primary key; views: checked), counts equal and each of our rows
        # equal to perf's row of its id: the same rows, and in id order the same order.
        assert con.execute(f"SELECT count(DISTINCT id) FROM perf.{rel}").fetchone()[0] == m, f"{rel}: ids repeat"
        msg = _first_difference(con, rel, cols, view)
        assert msg is None, msg
    else:  # small tables and views without an id (comm_threads_view)
        sel = ",".join(_val(c, rel, view) for c in cols)
        order = ",".join(str(i + 1) for i in range(len(cols)))
        ours = con.execute(f"SELECT {sel} FROM main.{rel} ORDER BY {order}").fetchall()
        theirs = con.execute(f"SELECT {sel} FROM perf.{rel} ORDER BY {order}").fetchall()
        assert [tuple(map(type, r)) for r in ours] == [tuple(map(type, r)) for r in theirs], f"{rel}: types"
        assert ours == theirs, rel
    return n


def compare_with_perf(theirs, ours) -> dict[str, int]:
    """Every table and view of perf's database ``theirs`` has the same rows in ``ours``; row counts."""
    con = sqlite3.connect(ours)
    counts: dict[str, int] = {}
    try:
        con.execute("ATTACH DATABASE ? AS perf", (str(theirs),))
        con.execute("PRAGMA temp_store = MEMORY")
        kinds = dict(con.execute("SELECT name, type FROM perf.sqlite_master WHERE type IN ('table', 'view')"))
        ours_kinds = dict(con.execute("SELECT name, type FROM main.sqlite_master WHERE type IN ('table', 'view')"))
        for name in sorted(kinds, key=lambda n: (kinds[n], n)):  # tables first
            cols = [r[1] for r in con.execute(f"PRAGMA perf.table_info({name})")]
            assert ours_kinds.get(name) == kinds[name], f"{name}: a {kinds[name]} in perf's database, not in ours"
            assert [r[1] for r in con.execute(f"PRAGMA main.table_info({name})")][: len(cols)] == cols, \
                f"{name}: column order"
            counts[name] = _same_rows(con, name, cols, kinds[name] == "view")
        # perf's exporter drops the tables (and views) it left empty: ours has no rows there
        for name, kind in ours_kinds.items():
            if kind == "table" and name not in kinds and name in _PERF_TABLES:
                assert con.execute(f"SELECT count(*) FROM main.{name}").fetchone()[0] == 0, name
        # Each call's call path spelled as symbol names (implied by equal ids, checked by name anyway).
        for s in ("main", "perf"):
            con.execute(_PATHS.format(s=s))
        bad = con.execute("SELECT a.id, pa.path, pb.path FROM main.calls a JOIN perf.calls b ON b.id = a.id "
                          "JOIN temp.paths_main pa ON pa.id = a.call_path_id "
                          "JOIN temp.paths_perf pb ON pb.id = b.call_path_id "
                          "WHERE pa.path IS NOT pb.path LIMIT 1").fetchone()
        assert bad is None, f"call {bad[0]}: call path {bad[1]} here, {bad[2]} in perf's database"
        counts["call paths by name"] = con.execute(
            "SELECT count(*) FROM main.calls a JOIN temp.paths_main pa ON pa.id = a.call_path_id").fetchone()[0]
        assert counts["call paths by name"] == counts["calls"]
    finally:
        con.close()
    return counts


_PERF_TABLES = ("selected_events", "machines", "threads", "comms", "comm_threads", "dsos", "symbols",
                "branch_types", "samples", "call_paths", "calls", "ptwrite", "cbr", "mwait", "pwre", "exstop",
                "pwrx", "context_switches")


@needs_perf
@needs_exporter
@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_export_equals_perf_at_one_million_branches(exported, variant):
    _, theirs, ours, t_ours = exported(variant)
    counts = compare_with_perf(theirs, ours)
    print(f"\n{variant}: ptexport {t_ours:.1f} s, rows compared: {counts}")
    # The traces are what the test claims: >= 1 M branch samples, calls with returns, and per variant
    # context switches on several CPUs, CYC-derived insn/cyc counts, decoder errors.
    assert counts["samples"] >= MIN_SAMPLES.get(variant, 1_000_000), counts
    assert counts["calls"] > 10_000, counts
    for view in ("samples_view", "calls_view", "call_paths_view", "comm_threads_view", "context_switches_view"):
        assert view in counts, f"perf defines {view}"
    con = sqlite3.connect(ours)
    try:
        one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        if variant == "calls-cyc":
            assert one("SELECT count(DISTINCT thread_id) FROM samples WHERE id > 0") == 1
            # calls three deep and more
            assert one("SELECT count(*) FROM calls c JOIN calls p ON p.id = c.parent_id WHERE p.parent_id > 0") > 1000
        else:
            assert one("SELECT count(DISTINCT cpu) FROM samples WHERE id > 0") >= 2
        if variant in ("threads-switches", "forkexec-errors"):
            assert one("SELECT count(DISTINCT thread_id) FROM samples WHERE id > 0") >= 2
        if variant == "threads-switches":
            assert counts["context_switches"] > 1000, counts
            assert one("SELECT count(*) FROM context_switches WHERE flags = 3") > 100  # out preempt
            assert one("SELECT count(DISTINCT cpu) FROM context_switches") == 3
        if variant in ("calls-cyc", "forkexec-errors"):  # CYC timing: insn/cyc counts on samples and calls
            assert one("SELECT count(*) FROM samples WHERE cyc_count > 0 AND insn_count > 0") > 10_000
            assert one("SELECT count(*) FROM calls WHERE cyc_count > 0 AND insn_count > 0") > 1000
        if variant == "events-power":
            for table in ("cbr", "mwait", "pwre", "exstop", "pwrx", "power_events_view"):
                assert counts.get(table, 0) > (1 if table == "cbr" else 1000), (table, counts)
        if variant == "forkexec-errors":
            # perf's exporter stores no errors; ours has them (and they do not disturb the perf tables).
            kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM decode_errors")}
            assert len(kinds) >= 2, kinds
            assert one("SELECT count(*) FROM comms") > 3  # exec
    finally:
        con.close()


@pytest.mark.slow
@needs_perf
@needs_exporter
def test_quipper_equals_perf_export_with_types_and_every_view(quipper, tmp_path):
    """The real recording through the same comparison (tests/oracle_perf/test_export_quipper.py checks
    its particulars): every table with SQLite types, every view, samples_view included."""
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    subprocess.run(["perf", "script", "-i", str(quipper), "--itrace=bep", "-s", EXPORTER, str(theirs), "branches",
                    "calls"], check=True, capture_output=True, timeout=600, env=perf_python_env())
    assert main([str(quipper), "--db", str(ours), "-q"], out=io.StringIO()) == 0
    counts = compare_with_perf(theirs, ours)
    assert counts["samples"] == 647 and counts["context_switches"] == 60 and counts["calls"] > 0, counts
    assert "samples_view" in counts and "calls_view" in counts


# ----------------------------------------------------------------------------- PostgreSQL

PG = os.environ.get("PTEXPORT_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
_BIG = 50_000  # tables above this many rows are compared by checksums computed by each server


def _norm(v):
    if isinstance(v, bool):
        return int(v)
    return None if v == "" else v


def _checksums(cols: list[str], types: dict[str, str]) -> str:
    """Order-sensitive sums over integer columns, the same numbers in SQLite and PostgreSQL."""
    out = ["count(*)"]
    for c in cols:
        v = f'"{c}"'
        if types.get(c) == "boolean":
            v = f"CASE WHEN {v} THEN 1 WHEN {v} IS NULL THEN NULL ELSE 0 END"
        v = f"COALESCE({v}, -7)"
        out.append(f"sum(({v} % 1000003) * (id % 1009 + 1))")
        out.append(f"sum(({v} % 999983) * (id % 997 + 3))")
    return ", ".join(out)


@needs_perf
@needs_exporter
@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_export_has_the_sqlite_rows_at_one_million_branches(pg_admin, exported):
    """Every table of the PostgreSQL export holds the SQLite export's rows (tables above 50 K rows by
    two order-sensitive checksums per column, the rest row by row)."""
    import psycopg

    trace, _, lite, _ = exported(PG_VARIANT)
    name = f"ptx_test_{uuid.uuid4().hex[:10]}"
    try:
        assert main([str(trace), "--db", f"{PG}/{name}", "-q"], out=io.StringIO()) == 0
        con = sqlite3.connect(lite)
        with psycopg.connect(f"{PG}/{name}") as pg:
            tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
            pg_tables = {t for (t,) in pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
            assert set(tables) == pg_tables
            compared = {}
            for table in tables:
                cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
                types = dict(pg.execute("SELECT column_name, data_type FROM information_schema.columns "
                                        "WHERE table_name = %s", (table,)).fetchall())
                n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                if n > _BIG:
                    assert all(types[c] in ("bigint", "integer", "boolean", "smallint") for c in cols), table
                    sql = f"SELECT {_checksums(cols, types)} FROM {table}"
                    assert pg.execute(sql).fetchone() == con.execute(sql).fetchone(), table
                else:
                    quoted = ",".join(f'"{c}"' for c in cols)
                    q = f"SELECT {quoted} FROM {table} ORDER BY {','.join(str(i + 1) for i in range(len(cols)))}"
                    mine = [tuple(_norm(v) for v in r) for r in con.execute(q)]
                    theirs = [tuple(_norm(v) for v in r) for r in pg.execute(q)]
                    if table in ("schema_version", "ptexport_migrations"):  # when it was written
                        mine, theirs = [r[:-1] for r in mine], [r[:-1] for r in theirs]
                    if table == "cbr":
                        # perf's exporters differ: SQLite keeps Python's true division (1800.5 MHz), PostgreSQL
                        # packs int() of it; ptexport does as each (docs/export.md)
                        mine = [r[:2] + tuple(int(v) for v in r[2:]) for r in mine]
                    assert theirs == mine, table
                compared[table] = n
        con.close()
        print(f"\n{PG_VARIANT} PostgreSQL rows compared: {compared}")
        assert compared["samples"] >= 1_000_000
    finally:
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
