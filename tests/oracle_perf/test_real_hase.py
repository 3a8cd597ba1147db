"""Real perf 4.14/4.15 recordings (HASE, Skylake and Broadwell, two in AUX snapshot mode) against
perf 6.1's output shipped beside them (perf.branches: `perf script --itrace=be` without binaries).

Their sideband has records at time 0 and one of them a TIME_CONV whose time_zero is a wrapped negative
u64: the compiled decoder's context ranges once overflowed its int64 state (a traceback) and then,
clamped wrongly, asked for the same context forever.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from ptxtest import TESTDATA, needs_perf
from ptexport.cli import main

REAL = TESTDATA / "real"
FOLDERS = sorted(p for p in REAL.glob("hase-*") if p.is_dir()) if REAL.exists() else []


def _recording(d: Path) -> Path:
    return next(iter(sorted(d.glob("*.perf"))), d / "perf.data")


def _norm(lines):
    out = []
    for line in lines:
        line = re.sub(r"^\s*\d+/(\d+) ", r"\1 ", line)  # perf.branches was printed without pid
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_branches_equal_perf(folder, jobs):
    out = io.StringIO()
    assert main(["dump", "branches", "--itrace", "be", "--jobs", jobs, str(_recording(folder))], out) == 0
    assert _norm(out.getvalue().splitlines()) == _norm((folder / "perf.branches").read_text().splitlines())


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_export_runs(folder, tmp_path):
    import sqlite3

    db = tmp_path / "x.sqlite"
    assert main([str(_recording(folder)), "--db", str(db)], io.StringIO()) == 0
    perf = (folder / "perf.branches").read_text().splitlines()
    errors = sum("instruction trace error" in ln for ln in perf)
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from decode_errors").fetchone()[0] == errors
    assert con.execute("select count(*) from samples").fetchone()[0] >= len(perf) - errors


def test_folders_present():
    assert len(FOLDERS) == 4, f"HASE recordings not found under {REAL}"


@pytest.mark.slow
@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_export_equals_perfs_export(folder, tmp_path):
    """Every table of perf 6.1's export-to-sqlite.py (branches calls) has the same rows in ours."""
    import sqlite3
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
    from exporttest import make_perf_db

    perf_db = make_perf_db(tmp_path / "perf.db", _recording(folder), "branches", "calls")
    ours = tmp_path / "ours.db"
    assert main([str(_recording(folder)), "--db", str(ours)], io.StringIO()) == 0
    p, o = sqlite3.connect(perf_db), sqlite3.connect(ours)
    tables = [r[0] for r in p.execute("select name from sqlite_master where type='table'")]
    assert {"samples", "calls", "call_paths", "symbols", "threads", "comms"} <= set(tables)
    for t in tables:
        cols = [r[1] for r in p.execute(f"pragma table_info({t})")]
        sql = f"select {','.join(cols)} from {t} order by {cols[0]}"
        assert o.execute(sql).fetchall() == p.execute(sql).fetchall(), t


@needs_perf
@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
@pytest.mark.parametrize("itrace", ["bZe", "crZ"])
def test_timeless_equals_perf(folder, itrace):
    """--itrace=Z on recordings of a workload (perf record -- PROGRAM: the CPU queue's buffers carry its pid).
    perf decodes the queue when the workload exits (the Skylake pair has the EXIT record, the Broadwell
    pair not: at the end), as the thread current on the CPU then, after every record before: the
    [vdso] mmap's probe of the program, whose file is not here, leaves perf one report of its failed
    reads (not two)."""
    import subprocess

    rec = str(_recording(folder))
    perf = subprocess.run(["perf", "script", "-i", rec, f"--itrace={itrace}", "-F", "pid,tid,cpu,ip,addr,flags"],
                          capture_output=True, text=True, check=True, cwd=str(folder)).stdout
    out = io.StringIO()
    assert main(["dump", "branches", f"--itrace={itrace}", rec], out) == 0
    ours = [re.sub(r"\s+0\.000000000:", ":", line) for line in out.getvalue().splitlines()]
    theirs = [re.sub(r"\] ", "]: ", line, count=1) if "instruction trace error" not in line else line
              for line in perf.splitlines()]
    assert [" ".join(x.split()) for x in ours if x.strip()] == [" ".join(x.split()) for x in theirs if x.strip()]
