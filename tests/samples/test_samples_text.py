"""Branch sample text (ptexport.samples.text, what dump branches prints): perf script's line format, checked
line by line against perf 6.1, and the --csv rows."""

from __future__ import annotations

import os
import sqlite3
import subprocess

import numpy as np

from ptexport.samples.columns import EV_BRANCH, SampleColumns
from ptexport.samples.flags import IpFlag
from ptexport.samples.text import csv_header, csv_rows, error_line, sample_lines, usec_time
from ptxtest import needs_perf

EXPORT = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
PERF_ENV = dict(os.environ, PATH="/usr/local/bin:/usr/bin:/bin")  # perf's embedded Python finds its prefix via PATH
SCRIPT_FIELDS = frozenset(("time", "cpu", "pid", "tid", "ip", "addr", "flags"))  # perf script -F, without --ns


def branch_columns(cols: dict) -> SampleColumns:
    """Branch samples with these columns (the others 0)."""
    n = len(cols["time"])
    zeros = np.zeros(n, np.int64)
    rest = {c: zeros for c in ("tsc", "insn_cnt", "cyc_cnt", "period", "code", "payload", "queue", "offset", "nr",
                               "insn_len", "trace_nr")}
    return SampleColumns(kind=np.full(n, EV_BRANCH), **rest, **cols)


def perf_script_lines(cols: dict) -> list[str]:
    """``perf script -F time,cpu,pid,tid,ip,addr,flags`` lines (no newline) as dump branches' formatter prints them."""
    return sample_lines(branch_columns(cols), SCRIPT_FIELDS, nsec=False).splitlines()


def test_line_format_by_hand():
    cols = {"time": np.array([641256845844, 641257183253]), "cpu": np.array([3, -1]),
            "pid": np.array([3174, 1760]), "tid": np.array([3174, 1760]),
            "ip": np.array([0, 0xFFFFFFFFB960D300], dtype=np.uint64),
            "addr": np.array([0xFFFFFFFFB960D302, 0], dtype=np.uint64),
            "flags": np.array([int(IpFlag.BRANCH | IpFlag.TRACE_BEGIN),
                               int(IpFlag.BRANCH | IpFlag.ASYNC | IpFlag.TRACE_END)])}
    assert perf_script_lines(cols) == [
        " 3174/3174  [003]   641.256845:   tr strt                               0 => ffffffffb960d302",
        " 1760/1760  [-01]   641.257183:   tr end  async          ffffffffb960d300 =>                0",
    ]
    # dump branches --csv: numbers in decimal, then the event and the error message
    assert [csv_header()] + list(csv_rows(branch_columns(cols))) == [
        ["time", "cpu", "pid", "tid", "ip", "addr", "flags", "event", "error"],
        [641256845844, 3, 3174, 3174, 0x0, 0xffffffffb960d302, 257, "branches", ""],
        [641257183253, -1, 1760, 1760, 0xffffffffb960d300, 0x0, 545, "branches", ""],
    ]
    assert usec_time(999) == "0.000000" and usec_time(1_000_001_999) == "1.000001"


def test_error_line_like_perf():
    assert error_line(type=1, time=641256845844, cpu=3, pid=3174, tid=3174, ip=0xFFFFFFFFB960D302, code=5,
                      msg="Failed to get instruction") == (
        " instruction trace error type 1 time 641.256845844 cpu 3 pid 3174 tid 3174 ip 0xffffffffb960d302"
        " code 5: Failed to get instruction")
    assert error_line(type=1, time=0, cpu=0, pid=1, tid=1, ip=0, code=6, msg="x").endswith("time 0 cpu 0 pid 1 tid 1 ip 0 code 6: x")


@needs_perf
def test_lines_match_perf_script(quipper, tmp_path):
    db = tmp_path / "q.db"
    subprocess.run(["perf", "script", "--itrace=be", "-i", str(quipper), "-s", EXPORT, str(db), "branches"],
                   capture_output=True, check=True, cwd=tmp_path, env=PERF_ENV)
    out = subprocess.run(["perf", "script", "--itrace=be", "-F", "time,cpu,pid,tid,ip,addr,flags", "-i", str(quipper)],
                         capture_output=True, text=True, check=True, env=PERF_ENV).stdout
    perf_lines = [ln for ln in out.splitlines() if " => " in ln]
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT time, cpu, pid, tid, ip, to_ip, branch_type FROM samples JOIN threads ON thread_id = threads.id"
            " JOIN selected_events ON evsel_id = selected_events.id WHERE selected_events.name = 'branches'"
            " ORDER BY samples.id").fetchall()
    a = np.array([[int(v) & ((1 << 64) - 1) for v in r] for r in rows], dtype=np.uint64)
    cols = {"time": a[:, 0].astype(np.int64), "cpu": a[:, 1].astype(np.int64), "pid": a[:, 2].astype(np.int64),
            "tid": a[:, 3].astype(np.int64), "ip": a[:, 4], "addr": a[:, 5], "flags": a[:, 6].astype(np.int64)}
    ours = perf_script_lines(cols)
    assert len(ours) == len(perf_lines) == 619
    assert ours == perf_lines
