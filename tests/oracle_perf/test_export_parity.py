"""``ptexport TRACE --db DB`` writes the rows perf's export-to-sqlite.py writes.

perf 6.1's exporter (Debian linux-perf + python3-pyside2.qtsql) runs on the same
generated trace; every perf table must hold the same rows with the same ids.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess

import pytest

from ptxtest import needs_perf, perf_python_env, slow_after
from ptexport.cli import main

EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
PERF_TABLES = ["machines", "threads", "comms", "comm_threads", "dsos", "symbols", "selected_events", "samples",
               "calls", "call_paths", "context_switches", "branch_types", "cbr"]


def _have_exporter() -> bool:
    if not os.path.exists(EXPORTER):
        return False
    proc = subprocess.run(["/usr/bin/python3", "-c", "import PySide2.QtSql"], capture_output=True)
    return proc.returncode == 0


needs_exporter = pytest.mark.skipif(not _have_exporter(), reason="perf's export-to-sqlite.py needs python3-pyside2.qtsql")


def perf_export(trace, db, itrace: str = "bep") -> None:
    subprocess.run(["perf", "script", "-i", str(trace), f"--itrace={itrace}", "-s", EXPORTER, str(db), "branches",
                    "calls"], check=True, capture_output=True, timeout=600, env=perf_python_env())


def table_rows(db, table: str, columns: list[str]) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute(f"SELECT {','.join(columns)} FROM {table} ORDER BY id").fetchall()
    finally:
        con.close()
    return [tuple(None if v == "" else v for v in r) for r in rows]


def columns(db, table: str) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


@pytest.mark.slow
@needs_perf
@needs_exporter
@pytest.mark.parametrize("program", slow_after(["calls", "threads", "bigcode", "names"]))
def test_export_equals_perf_export(tmp_path, program):
    """(bigcode: 45 K instructions of 3,000 functions, one with a GNU IFUNC alias perf keeps; names:
    C++, Rust, OCaml and Java names, which perf demangles)"""
    d = tmp_path / "trace"
    assert main(["synth", "--out", str(d), "--program", program, "--branches", "20000"], out=io.StringIO()) == 0
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    perf_export(d / "perf.data", theirs)
    assert main([str(d / "perf.data"), "--db", str(ours), "-q"], out=io.StringIO()) == 0
    for table in PERF_TABLES:
        cols = columns(theirs, table)
        assert columns(ours, table)[: len(cols)] == cols, f"{table}: column order"
        assert table_rows(ours, table, cols) == table_rows(theirs, table, cols), table
    con_t, con_o = sqlite3.connect(theirs), sqlite3.connect(ours)
    for (view,) in con_t.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        assert con_o.execute(f"SELECT * FROM {view}").fetchall() == con_t.execute(f"SELECT * FROM {view}").fetchall(), view
    # The extensions are there too, and the database says what wrote it.
    con = sqlite3.connect(ours)
    assert con.execute("SELECT count(*) FROM calls").fetchone()[0] > 100
    assert con.execute("SELECT count(*) FROM samples WHERE vcpu = -1").fetchone()[0] > 0


def test_pipe_mode_export_equals_file_mode(tmp_path):
    """A pipe-mode recording is read once: the sideband db-export needs is kept as the session reads it,
    so its rows are those of the same trace in file mode.  (perf itself warns that Intel PT in pipe mode
    "cannot be relied upon" and decodes it differently, so perf is not the reference here.)"""
    dbs = []
    for mode in ("file", "pipe"):
        d = tmp_path / mode
        argv = ["synth", "--out", str(d), "--program", "threads", "--branches", "5000"]
        assert main(argv + (["--pipe"] if mode == "pipe" else []), out=io.StringIO()) == 0
        db = tmp_path / f"{mode}.db"
        assert main([str(d / "perf.data"), "--db", str(db), "-q"], out=io.StringIO()) == 0
        dbs.append(db)
    for table in PERF_TABLES:
        if table == "dsos":
            continue  # the binaries' paths differ
        cols = columns(dbs[0], table)
        assert table_rows(dbs[1], table, cols) == table_rows(dbs[0], table, cols), table
    assert len(table_rows(dbs[1], "context_switches", ["id"])) > 10


def test_existing_database_needs_force(tmp_path, capsys):
    db = tmp_path / "x.db"
    db.write_bytes(b"not a database")
    assert main(["/nonexistent.data", "--db", str(db)]) != 0
    assert db.read_bytes() == b"not a database"


@needs_perf
@needs_exporter
@pytest.mark.parametrize("opts", slow_after([("--program", "threads", "--cpus", "2", "--workload"),
                                             ("--program", "threads", "--cpus", "2"),
                                             ("--program", "threads", "--per-thread"),
                                             ("--program", "forkexec", "--cpus", "2", "--workload")], keep=2),
                         ids=["threads-workload", "threads-2cpus", "threads-per-thread", "forkexec-workload"])
def test_timeless_export_equals_perf_export(tmp_path, opts):
    """--itrace=...Z: samples have no time, and perf resolves their dsos and symbols when it decodes their
    queue (at the end, or when the workload exits), with the maps of then - not those of time 0 (before
    every mmap: every symbol "unknown").  Each table holds perf's rows; branch_types may hold more (a
    row for each other flags value the samples have: forkexec's "trace begin / unconditional jump /
    trace end")."""
    d = tmp_path / "trace"
    assert main(["synth", "--out", str(d), *opts, "--branches", "4000", "--seed", "7"], out=io.StringIO()) == 0
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    perf_export(d / "perf.data", theirs, "bepZ")
    assert main([str(d / "perf.data"), "--db", str(ours), "-q", "--itrace", "bepZ"], out=io.StringIO()) == 0
    for table in PERF_TABLES:
        cols = columns(theirs, table)
        if not cols:  # (no switch events in a --per-thread recording: perf makes no context_switches table)
            assert not table_rows(ours, table, ["id"]), table
            continue
        mine, perf = table_rows(ours, table, cols), table_rows(theirs, table, cols)
        if table == "branch_types":
            used = {r[0] for r in sqlite3.connect(ours).execute("SELECT DISTINCT branch_type FROM samples")}
            assert set(perf) <= set(mine), table
            assert {r[0] for r in set(mine) - set(perf)} <= used, (sorted(set(mine) - set(perf)), used)
            continue
        assert mine == perf, table
    con = sqlite3.connect(ours)
    assert con.execute("SELECT count(*) FROM samples WHERE symbol_id > 0 AND time = 0").fetchone()[0] > 50


@needs_perf
@needs_exporter
@pytest.mark.parametrize("itrace", slow_after(["bs7ep", "i100is5e", "bs100e", "bs1epZ"], keep=2))
def test_skipped_samples_counts_go_on_as_perfs(tmp_path, itrace):
    """--itrace=sN: perf skips a sample before it takes its counts, so the next branch sample it delivers
    has the cycles and instructions since the last one delivered (IPC), and the next instruction sample
    its period: the samples' and the calls' insn_count and cyc_count equal perf's export (CYC timing)."""
    d = tmp_path / "trace"
    assert main(["synth", "--out", str(d), "--program", "calls", "--timing", "cyc", "--cbr", "18", "--branches", "4000",
                 "--seed", "7"], out=io.StringIO()) == 0
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    perf_export(d / "perf.data", theirs, itrace)
    assert main([str(d / "perf.data"), "--db", str(ours), "-q", "--itrace", itrace], out=io.StringIO()) == 0
    for table in ("samples", "calls", "call_paths"):
        cols = columns(theirs, table)
        assert table_rows(ours, table, cols) == table_rows(theirs, table, cols), table
    con = sqlite3.connect(ours)
    assert con.execute("SELECT count(*) FROM samples WHERE cyc_count > 0").fetchone()[0] > 10


@needs_perf
def test_skipped_samples_ipc_text_equals_perf(tmp_path):
    """The same in perf script's text: the ipc field of the first branch samples after --itrace=s7."""
    d = tmp_path / "trace"
    assert main(["synth", "--out", str(d), "--program", "calls", "--timing", "cyc", "--branches", "4000", "--seed", "7"],
                out=io.StringIO()) == 0
    fields = "pid,tid,cpu,time,ip,addr,flags,ipc"
    perf = subprocess.run(["perf", "script", "-i", str(d / "perf.data"), "--itrace=bs7", "-F", fields, "--ns"],
                          capture_output=True, text=True, check=True).stdout
    out = io.StringIO()
    assert main(["dump", "branches", "--itrace=bs7", "-F", fields, str(d / "perf.data")], out=out) == 0
    assert [" ".join(x.split()) for x in out.getvalue().splitlines() if x.strip()] == \
        [" ".join(x.split()) for x in perf.splitlines() if x.strip()]
    assert "IPC" in perf
