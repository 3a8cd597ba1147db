"""Issue #20: the DuckDB (``--db NAME.duckdb``) and Parquet (``--parquet DIR``) targets and
``ptexport convert``.

The same export into SQLite, DuckDB and Parquet (read back through DuckDB, pyarrow and polars)
gives the same rows in every table and view (helpers/duckdbtest.py lists what differs by
design), on every kind of trace the generator makes that the writer tests use (the variants
of tests/dbexport/test_export_fast_vs_ref.py, shared through the session's trace cache, and a
virtual machine recording); rows are stored in id order; the safety rules of the SQLite
target hold (a temporary renamed into place, nothing left on an error or a signal, the lock,
stale temporaries removed); duckdb and pyarrow are imported only for these targets.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from duckdbtest import assert_id_order, compare_with_sqlite
from exporttest import EXPORT_VARIANTS
from ptxtest import REPO, slow_after

from ptexport.cli import main
from ptexport.errors import DatabaseExistsError, TargetBusyError
from ptexport.writers import branch_type_name, clean, open_writer
from ptexport.writers.schema import load_schema

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")

_BRANCHES = "3000"
TRACES = EXPORT_VARIANTS  # tests/helpers/exporttest.py
#: (trace, --itrace or None for the export's default)
CASES = [(t, None) for t in TRACES] + [("events-power-ptwrite", "bepwx"), ("forkexec-corrupt", "bepi100")]
#: tables whose rows have an id (all but the version rows)
ID_TABLES = [t for t, cols in load_schema("duckdb").tables.items() if cols[0].name == "id"]


def _trace(synth_trace, name: str) -> str:
    opts = TRACES[name]
    d = synth_trace("--branches", _BRANCHES, "--seed", "11", *opts)
    return str(d) if "--kcore" in opts else str(d / "perf.data")


def _export(trace: str, where: list[str], extra=()) -> None:
    out = io.StringIO()
    assert main([trace, *where, "-q", *extra], out=out) == 0, out.getvalue()


def _parquet_files_in_id_order(d: Path) -> None:
    import pyarrow.parquet as pq

    for f in d.rglob("*.parquet"):
        t = pq.read_table(f)
        if "id" in t.column_names:
            ids = t.column("id").to_numpy()
            assert ids.size == 0 or bool(np.all(ids[1:] > ids[:-1])), f"{f}: not in id order"
        if "time" in t.column_names and f.parent.parent.name == "samples":
            tm = t.column("time").to_numpy()[1:] if f.parent.name == "cpu=0" else t.column("time").to_numpy()
            assert bool(np.all(tm[1:] >= tm[:-1])), f"{f}: samples of a cpu not in time order"


def _check_exports(lite: Path, duck: Path, pq: Path) -> dict[str, int]:
    from ptexport.writers.parquet import open_parquet

    con = duckdb.connect(str(duck), read_only=True)
    try:
        counts = compare_with_sqlite(lite, con)
        assert_id_order(con, ID_TABLES)
        cpus = sorted(r[0] for r in con.execute("SELECT DISTINCT cpu FROM samples").fetchall())
    finally:
        con.close()
    assert compare_with_sqlite(lite, open_parquet(pq), what="Parquet") == counts
    assert sorted(p.name for p in (pq / "samples").iterdir()) == sorted(f"cpu={c}" for c in cpus)
    _parquet_files_in_id_order(pq)
    return counts


@pytest.mark.parametrize("name,itrace", slow_after(CASES, unpack=True),
                         ids=[f"{t}-{i or 'default'}" for t, i in CASES])
def test_duckdb_and_parquet_equal_sqlite(synth_trace, tmp_path, name, itrace):
    trace = _trace(synth_trace, name)
    extra = ("--itrace", itrace) if itrace else ()
    lite, duck, pq = tmp_path / "x.db", tmp_path / "x.duckdb", tmp_path / "pq"
    _export(trace, ["--db", str(lite)], extra)
    _export(trace, ["--db", str(duck)], extra)
    _export(trace, ["--parquet", str(pq)], extra)
    counts = _check_exports(lite, duck, pq)
    assert counts["samples"] > 1000
    if name == "forkexec-corrupt":
        assert counts["decode_errors"] > 0
    if name == "events-power-ptwrite":
        assert counts["ptwrite"] if itrace else (counts["cbr"] and counts["pwre"] and counts["power_events_view"])
    if name != "events-power-ptwrite" or not itrace:
        assert counts["calls"] > 10
    assert sorted(os.listdir(tmp_path)) == ["pq", "x.db", "x.duckdb"], "no temporaries or lock files left"


@pytest.mark.slow
def test_vm_export_equal_in_duckdb_and_parquet(mixed, tmp_path):
    """The generated VM recording (guest kernel and user, two VCPUs; perf inject's output): guest machines,
    vcpus, vm_exits, timeline_view."""
    vm, _theirs, ours = mixed
    duck, pq = tmp_path / "vm.duckdb", tmp_path / "vm-pq"
    _export(str(vm.data), ["--db", str(duck)])
    _export(str(vm.data), ["--parquet", str(pq)])
    counts = _check_exports(ours, duck, pq)
    assert counts["vcpus"] >= 3 and counts["vm_exits"] > 0 and counts["machines"] >= 3


def test_parquet_directory_layout_and_schema_json(synth_trace, tmp_path):
    trace = _trace(synth_trace, "threads-2cpus-cyc")
    pq = tmp_path / "pq"
    _export(trace, ["--parquet", str(pq)])
    doc = json.loads((pq / "schema.json").read_text())
    sch = load_schema("sqlite")
    assert doc["format"] == "ptexport-parquet" and doc["schema_version"] == 1
    assert list(doc["tables"]) == list(sch.tables)
    for table, entry in doc["tables"].items():
        assert [c["name"] for c in entry["columns"]] == sch.columns(table)  # perf's names, in perf's order
        assert all(c["doc"] for c in entry["columns"] if table not in ("schema_version", "ptexport_migrations"))
        assert (pq / entry["path"]).exists()
    assert doc["tables"]["samples"]["partitioning"] == {"style": "hive", "columns": ["cpu"]}
    assert set(doc["views"]) == set(sch.view_sql)
    assert sorted(p.name for p in pq.iterdir() if p.suffix != ".parquet") == ["samples", "schema.json"]
    assert sorted(p.name for p in (pq / "samples").iterdir()) == ["cpu=0", "cpu=1"]
    # the partition column is the directory's: not in the files
    import pyarrow.parquet as papq

    f = papq.read_table(pq / "samples" / "cpu=1" / "part-0.parquet")
    assert f.column_names == [c for c in sch.columns("samples") if c != "cpu"]
    assert f.schema.field("ip").type == pa.int64() and f.schema.field("branch_type").type == pa.int32()
    assert doc["tables"]["samples"]["rows"] == sum(
        papq.read_metadata(p).num_rows for p in (pq / "samples").rglob("*.parquet"))


def test_parquet_readable_by_pyarrow_polars_and_duckdb(synth_trace, tmp_path):
    import pyarrow.dataset as ds

    trace = _trace(synth_trace, "threads-2cpus-cyc")
    lite, pq = tmp_path / "x.db", tmp_path / "pq"
    _export(trace, ["--db", str(lite)])
    _export(trace, ["--parquet", str(pq)])
    import sqlite3

    con = sqlite3.connect(lite)
    want = con.execute("SELECT cpu, COUNT(*), SUM(time), MIN(id), MAX(id) FROM samples GROUP BY cpu ORDER BY cpu").fetchall()
    calls = con.execute("SELECT COUNT(*), SUM(return_time - call_time) FROM calls").fetchone()
    # pyarrow: the samples directory as one dataset, cpu from the partition directories
    d = ds.dataset(pq / "samples", format="parquet", partitioning="hive")
    t = d.to_table()
    cpu, tm, ids = (t.column(c).to_numpy() for c in ("cpu", "time", "id"))
    got = [(int(c), int((cpu == c).sum()), int(tm[cpu == c].sum()), int(ids[cpu == c].min()), int(ids[cpu == c].max()))
           for c in sorted(set(cpu.tolist()))]
    assert got == want
    one = d.to_table(filter=ds.field("cpu") == 1)  # pruned to cpu=1's files
    assert one.num_rows == {r[0]: r[1] for r in want}[1]
    assert len(list(d.get_fragments(filter=ds.field("cpu") == 1))) == 1
    c = ds.dataset(pq / "calls.parquet").to_table()
    assert (c.num_rows, int((c.column("return_time").to_numpy() - c.column("call_time").to_numpy()).sum())) == calls
    # DuckDB, straight from the files
    q = duckdb.sql(f"SELECT cpu, COUNT(*), SUM(time), MIN(id), MAX(id) FROM read_parquet('{pq}/samples/*/*.parquet', "
                   "hive_partitioning = true) GROUP BY cpu ORDER BY cpu").fetchall()
    assert [tuple(int(v) for v in r) for r in q] == want
    # polars
    pl = pytest.importorskip("polars")
    df = pl.read_parquet(str(pq / "samples" / "**" / "*.parquet"), hive_partitioning=True)
    g = df.group_by("cpu").agg(pl.len(), pl.col("time").sum(), pl.col("id").min().alias("lo"), pl.col("id").max().alias("hi")).sort("cpu")
    assert [tuple(int(v) for v in r) for r in g.iter_rows()] == want
    assert pl.read_parquet(pq / "calls.parquet").height == calls[0]


# ------------------------------------------------------------------ convert

def test_convert_sqlite_to_duckdb_and_parquet(synth_trace, tmp_path):
    trace = _trace(synth_trace, "events-power-ptwrite")
    lite, duck, pq = tmp_path / "x.db", tmp_path / "c.duckdb", tmp_path / "cpq"
    _export(trace, ["--db", str(lite)])
    out = io.StringIO()
    assert main(["convert", str(lite), str(duck)], out=out) == 0
    assert "samples" in out.getvalue()
    assert main(["convert", str(lite), "--parquet", str(pq), "-q"], out=io.StringIO()) == 0
    counts = _check_exports(lite, duck, pq)
    assert counts["cbr"] and counts["calls"] > 10
    # the target exists: refused without --force, replaced with it
    assert main(["convert", str(lite), str(duck), "-q"], out=io.StringIO()) == 2
    assert main(["convert", str(lite), str(duck), "-q", "--force"], out=io.StringIO()) == 0
    assert sorted(os.listdir(tmp_path)) == ["c.duckdb", "cpq", "x.db"]


def test_convert_duckdb_to_sqlite_round_trip(synth_trace, tmp_path):
    trace = _trace(synth_trace, "threads-2cpus-cyc")
    lite, duck, back = tmp_path / "x.db", tmp_path / "x.duckdb", tmp_path / "back.db"
    _export(trace, ["--db", str(lite)])
    _export(trace, ["--db", str(duck)])
    assert main(["convert", str(duck), str(back), "-q"], out=io.StringIO()) == 0
    from dbdump import sqlite_dump

    a, b = sqlite_dump(lite), sqlite_dump(back)
    # cbr.mhz/percent: DuckDB holds export-to-postgresql.py's int() of what SQLite holds as REAL
    a["cbr"] = [(i, cbr, int(mhz), int(pct)) for i, cbr, mhz, pct in a["cbr"]]
    assert a["cbr"] and a == b


@pytest.mark.postgres
def test_convert_postgres_to_duckdb(synth_trace, tmp_path, pg_url):
    trace = _trace(synth_trace, "forkexec-corrupt")
    lite, duck, url = tmp_path / "x.db", tmp_path / "pg.duckdb", pg_url("ptx_convert")
    _export(trace, ["--db", str(lite)])
    _export(trace, ["--db", url])
    assert main(["convert", url, str(duck), "-q"], out=io.StringIO()) == 0
    con = duckdb.connect(str(duck), read_only=True)
    counts = compare_with_sqlite(lite, con)
    assert_id_order(con, ID_TABLES)
    assert counts["decode_errors"] > 0


def test_upgrade_refuses_duckdb_and_parquet(tmp_path, capsys):
    for target in (str(tmp_path / "x.duckdb"), f"parquet:{tmp_path / 'pq'}"):
        assert main(["upgrade", target], out=io.StringIO()) == 2
        assert "written with the current schema" in capsys.readouterr().err


def test_convert_refuses_an_old_schema_and_parquet_sources(tmp_path):
    import sqlite3

    old = tmp_path / "old.db"
    sqlite3.connect(old).execute("CREATE TABLE samples (id integer)").connection.commit()
    assert main(["convert", str(old), str(tmp_path / "o.duckdb"), "-q"], out=io.StringIO()) == 1
    assert main(["convert", "parquet:" + str(tmp_path), str(tmp_path / "o.duckdb"), "-q"], out=io.StringIO()) == 2
    assert sorted(os.listdir(tmp_path)) == ["old.db"]


@pytest.mark.parametrize("target", ["o.duckdb", "o.db", "parquet"])
def test_convert_names_a_missing_column_rather_than_reading_its_name(synth_trace, tmp_path, capsys, target):
    # SQLite reads a double-quoted name it does not know as a string: the column's name became its values
    import sqlite3

    lite = tmp_path / "x.db"
    _export(_trace(synth_trace, "threads-2cpus-cyc"), ["--db", str(lite)])
    con = sqlite3.connect(lite)
    con.execute("ALTER TABLE threads RENAME COLUMN process_id TO process")
    con.commit()
    con.close()
    out = ["--parquet", str(tmp_path / "pq")] if target == "parquet" else [str(tmp_path / target)]
    assert main(["convert", str(lite), *out, "-q"], out=io.StringIO()) == 1
    assert f"{lite}: table threads has no column process_id" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["x.db"]


# ------------------------------------------------------------------ the writer: rows, types, safety

def _write(target, n=5000, fail=False, **kw):
    with open_writer(str(target), **kw) as w:
        ids = np.arange(1, n + 1)
        w.write_samples({"id": ids, "time": ids * 10, "cpu": ids % 3, "ip": ids.astype(np.uint64) + (1 << 63),
                         "branch_type": np.full(n, 2), "in_tx": ids % 2})
        w.write_calls({"id": ids[::-1].copy(), "call_time": ids, "return_time": ids + 5, "comm_id": np.zeros(n)})
        w.write_rows("comms", [(1, "x", 0, 0, True, False)])
        if fail:
            raise RuntimeError("boom")
    return w


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_writer_values_types_and_order(tmp_path, kind):
    target = tmp_path / ("t.duckdb" if kind == "duckdb" else "pq")
    _write(f"parquet:{target}" if kind == "parquet" else target)
    if kind == "parquet":
        from ptexport.writers.parquet import open_parquet

        con = open_parquet(target)
    else:
        con = duckdb.connect(str(target), read_only=True)
    assert con.execute("SELECT ip, typeof(ip), typeof(cpu), in_tx FROM samples WHERE id = 3").fetchall() == \
        [(-(1 << 63) + 3, "BIGINT", "INTEGER", True)]
    assert con.execute("SELECT ip_hex FROM samples_view WHERE id = 3").fetchall() == [("8000000000000003",)]
    assert con.execute("SELECT COUNT(*), MIN(id), MAX(id) FROM calls").fetchall() == [(5001, 0, 5000)]
    assert_id_order(con, ["calls"] if kind == "parquet" else ["samples", "calls"])  # Parquet: per cpu's file
    if kind == "parquet":
        _parquet_files_in_id_order(target)
    assert con.execute("SELECT name FROM branch_types WHERE id = 2").fetchall() == [(branch_type_name(2),)]
    assert con.execute("SELECT COUNT(*) FROM samples_time_blocks").fetchall() == [(5,)]
    assert con.execute("SELECT id, has_calls FROM comms ORDER BY id").fetchall() == [(0, True), (1, False)]
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(1,)]


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_a_table_out_of_id_order_is_stored_in_order(tmp_path, kind):
    target = tmp_path / ("t.duckdb" if kind == "duckdb" else "pq")
    with open_writer(f"parquet:{target}" if kind == "parquet" else str(target)) as w:
        for lo in (501, 1, 1001):
            ids = np.arange(lo, lo + 500)
            w.write_samples({"id": ids, "time": ids * 10, "cpu": np.zeros(500, np.int32)})
            w.write_columns("context_switches", {"id": ids[::-1].copy(), "time": ids})
    if kind == "parquet":
        from ptexport.writers.parquet import open_parquet

        con = open_parquet(target)
        _parquet_files_in_id_order(target)
    else:
        con = duckdb.connect(str(target), read_only=True)
    assert_id_order(con, ["samples", "context_switches"])
    assert con.execute("SELECT COUNT(*), SUM(time) FROM context_switches").fetchone() == (1500, 1500 * 1501 // 2)
    assert con.execute("SELECT * FROM samples_time_blocks ORDER BY id").fetchall() == [(0, 10, 10230), (1, 10240, 15000)]


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_load_in_several_transactions(tmp_path, monkeypatch, kind):
    """The load commits every COMMIT_ROWS rows (bounded memory), the staged calls' session too."""
    import ptexport.writers.duckdb as duckdb_writer

    monkeypatch.setattr(duckdb_writer, "COMMIT_ROWS", 700)
    target = tmp_path / ("t.duckdb" if kind == "duckdb" else "pq")
    with open_writer(f"parquet:{target}" if kind == "parquet" else str(target)) as w:
        for lo in range(1, 5001, 500):
            ids = np.arange(lo, lo + 500)
            w.write_samples({"id": ids, "time": ids * 10, "cpu": ids % 2})
            w.write_calls({"id": ids[::-1].copy(), "call_time": ids, "return_time": ids + 5})
        w._drain()  # the batches are appended (and committed) by the writer's thread: all done first
        assert w._uncommitted["main"] < 700 and w._uncommitted["stage"] < 700
    if kind == "parquet":
        from ptexport.writers.parquet import open_parquet

        con = open_parquet(target)
        _parquet_files_in_id_order(target)
    else:
        con = duckdb.connect(str(target), read_only=True)
        assert_id_order(con, ["samples", "calls"])
    assert con.execute("SELECT COUNT(*), SUM(time) FROM samples").fetchone() == (5001, 10 * 5000 * 5001 // 2)
    assert con.execute("SELECT COUNT(*), SUM(return_time - call_time) FROM calls").fetchone() == (5001, 5 * 5000)


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_error_leaves_nothing_and_existing_targets_need_force(tmp_path, kind):
    target = tmp_path / ("t.duckdb" if kind == "duckdb" else "pq")
    name = f"parquet:{target}" if kind == "parquet" else str(target)
    with pytest.raises(RuntimeError):
        _write(name, fail=True)
    assert os.listdir(tmp_path) == []
    _write(name, n=10)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(DatabaseExistsError):
        _write(name)
    with pytest.raises(RuntimeError):
        _write(name, fail=True, force=True)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "a failed --force export leaves the old one"
    _write(name, n=20, force=True)
    if kind == "parquet":
        from ptexport.writers.parquet import open_parquet

        con = open_parquet(target)
    else:
        con = duckdb.connect(str(target), read_only=True)
    assert con.execute("SELECT COUNT(*) FROM samples").fetchone() == (21,)
    assert os.listdir(tmp_path) == [target.name]


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_lock_and_stale_temporaries(tmp_path, kind):
    target = tmp_path / ("t.duckdb" if kind == "duckdb" else "pq")
    name = f"parquet:{target}" if kind == "parquet" else str(target)
    dead = 4_000_000  # above pid_max's default: no such process
    stale = tmp_path / f".{target.name}.ptexport-tmp-{dead}"
    if kind == "parquet":
        (stale / "samples").mkdir(parents=True)
        (stale / "samples" / "x.parquet").write_bytes(b"x" * 100)
    else:
        stale.write_bytes(b"x" * 100)
        (tmp_path / f"{stale.name}.wal").write_bytes(b"x")
    report = clean(name, dry_run=True)
    assert sorted(Path(x.what).name for x in report.leftovers) == sorted(p.name for p in tmp_path.iterdir())
    w = open_writer(name)
    try:
        assert [Path(x.what).name for x in w.removed_leftovers] == sorted(
            p for p in [stale.name, f"{stale.name}.wal"] if kind == "duckdb" or p == stale.name)
        with pytest.raises(TargetBusyError):
            open_writer(name)
        assert clean(name).busy == [str(target)]
    finally:
        w.abort()
    assert os.listdir(tmp_path) == []


_SLOW_WRITER = r"""
import sys, numpy as np
from ptexport.cli import _SignalGuard
from ptexport.writers import open_writer
target, batches = sys.argv[1], int(sys.argv[2])
n = 50000
with _SignalGuard(), open_writer(target) as w:  # as the CLI runs an export (tests/writers/test_export_interrupt.py)
    for b in range(batches):
        ids = np.arange(b * n + 1, (b + 1) * n + 1)
        w.write_samples({"id": ids, "time": ids * 10, "ip": ids, "cpu": ids % 4, "branch_type": np.full(n, 3)})
        w.write_calls({"id": ids, "call_time": ids, "return_time": ids + 5})
        if b == 0:
            print("started", flush=True)
print("done", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_signal_mid_export(tmp_path, kind, sig):
    target = tmp_path / ("t.duckdb" if kind == "duckdb" else "pq")
    name = f"parquet:{target}" if kind == "parquet" else str(target)
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    p = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, name, "400"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None and p.stdout.readline().strip() == "started"
    time.sleep(0.5)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert "done" not in out, "the export finished before the signal; make it longer"
    assert not target.exists()
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in err
        assert os.listdir(tmp_path) == [], "the temporaries go on Ctrl-C"
    else:  # killed outright: its temporaries stay, and the next export removes them
        assert os.listdir(tmp_path)
        w = open_writer(name)
        assert w.removed_leftovers
        w.abort()
        assert os.listdir(tmp_path) == []


def test_duckdb_and_pyarrow_imported_only_for_their_targets(tmp_path):
    code = ("import sys\n"
            "from ptexport.cli import main\n"
            "import ptexport.writers, ptexport.session.export, ptexport.cli.export, ptexport.cli.convert\n"
            "from ptexport.writers import open_writer\n"
            f"with open_writer({str(tmp_path / 'x.db')!r}, fast=False) as w: pass\n"
            "bad = [m for m in ('duckdb', 'pyarrow') if m in sys.modules]\n"
            "assert not bad, bad\n")
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert r.returncode == 0, r.stderr


def test_duckdb_schema_has_sqlites_tables_columns_and_views():
    lite, duck = load_schema("sqlite"), load_schema("duckdb")
    assert {t: lite.columns(t) for t in lite.tables} == {t: duck.columns(t) for t in duck.tables}
    assert list(duck.view_sql) == list(lite.view_sql)
    assert not any("printf(" in v or "@" in v for v in duck.view_sql.values())
    con = duckdb.connect()
    for sql in [*duck.table_sql.values(), *duck.view_sql.values(), *duck.comment_sql]:
        con.execute(sql)
    assert con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'samples' AND column_name = 'vcpu'"
                       ).fetchone()[0].startswith("ptexport: guest VCPU")


# ------------------------------------------------------------------ the cookbook (issue #20 item 4)

def test_cookbook_same_rows_on_sqlite_duckdb_and_parquet(synth_trace, tmp_path):
    """docs/cookbook.md's queries on the exports of one generated trace (two CPUs, CYC timing, overflows):
    the same rows from SQLite, DuckDB and the Parquet directory (tests/writers/test_export_cookbook.py checks
    their answers on the fixture database)."""
    import sqlite3

    from test_audit_cookbook_real import NON_EMPTY, _norm, queries

    from ptexport.writers.parquet import open_parquet

    d = synth_trace("--program", "threads", "--cpus", "2", "--timing", "cyc", "--ovf", "2", "--branches", "20000",
                    "--seed", "6")
    lite, duck, pq = tmp_path / "x.db", tmp_path / "x.duckdb", tmp_path / "pq"
    for where in (["--db", str(lite)], ["--db", str(duck)], ["--parquet", str(pq)]):
        _export(str(d / "perf.data"), where)
    qs = queries()
    with sqlite3.connect(lite) as c, duckdb.connect(str(duck), read_only=True) as dk:
        p = open_parquet(pq)
        for q, sql in sorted(qs.items()):
            mine = _norm(c.execute(sql).fetchall())
            assert _norm(dk.execute(sql).fetchall()) == mine, f"{q}: DuckDB"
            assert _norm(p.execute(sql).fetchall()) == mine, f"{q}: Parquet"
            if q in NON_EMPTY:
                assert mine, f"{q} answers nothing on a real export"
