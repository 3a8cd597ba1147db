"""The pipe-mode twin of the perf 4.14 quipper recording, against perf 6.1 reading it through a real pipe.

perf 6.1 reads a pipe-mode file correctly only from a pipe (``cat FILE | perf script -i -``); ptexport
reads the file by its path and from standard input (``-``), and gives the same lines and the same export as
perf does. The file-mode quipper recording is another run of the same command (other pids and times).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ptexport.cli import main
from ptxtest import TESTDATA, first_difference, perf_python_env

PIPED = TESTDATA / "perf-quipper" / "perf.data.piped.intel_pt-4.14"
FILE_MODE = TESTDATA / "perf-quipper" / "perf.data.intel_pt-4.14"

pytestmark = [
    pytest.mark.skipif(not PIPED.exists(), reason="the quipper pipe-mode recording is not in shared/"),
    pytest.mark.skipif(shutil.which("perf") is None, reason="perf 6.1 (linux-perf) is not installed"),
]


def _through_a_pipe(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """``cat PIPED | ARGV``: a real pipe (perf reads a redirected file as a file, wrongly)."""
    cat = subprocess.Popen(["cat", str(PIPED)], stdout=subprocess.PIPE)
    try:
        return subprocess.run(argv, stdin=cat.stdout, capture_output=True, text=True, timeout=300, env=env)
    finally:
        cat.stdout.close()
        cat.wait()


def _perf_through_pipe(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return _through_a_pipe(["perf", "script", "-i", "-", *args], env=env)


_ERR = re.compile(r"instruction trace error type 1 time (\S+) cpu (-?\d+) pid (-?\d+) tid (-?\d+) ip (\S+) "
                  r"code (\d+): (.*)")
_BR = re.compile(r"(-?\d+)/(-?\d+)\s+\[(-?\d+)\]\s+(\S+):\s+(.*?)\s+([0-9a-f]+) =>\s+([0-9a-f]+)$")


def _error(line: str) -> list | None:
    """An instruction trace error line as a tuple (the same from perf and from us)."""
    m = _ERR.fullmatch(line)
    return ["error", m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5], 16), int(m[6]), m[7]] if m else None


def _tuples(text: str) -> list[list]:
    """``dump branches`` lines (perf's -F pid,tid,cpu,time,ip,addr,flags --ns layout) as perf_branch_tuples.py
    writes them; any other line is kept whole so that it shows up as a difference."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        err = _error(line)
        if err:
            out.append(err)
            continue
        m = _BR.fullmatch(line)
        out.append(["branch", m[4], int(m[3]), int(m[1]), int(m[2]), " ".join(m[5].split()), int(m[6], 16),
                    int(m[7], 16)] if m else line)
    return out


_HW = re.compile(r"(-?\d+)/(-?\d+)\s+(\S+):\s+(.*?)\s*([0-9a-f]+)$")


def _perf_lines(itrace: str) -> list:
    """perf's branch samples and errors read through the pipe, as :func:`_tuples` gives ours.

    ``-F hw:pid,tid,cpu,time,ip,addr,flags`` prints every sample and error in perf's order but drops cpu and
    addr (its first hardware event, 'cycles', has neither); perf_branch_tuples.py gives the same samples, in
    the same order, with them: the two runs are checked against each other and merged."""
    text = _perf_through_pipe(f"--itrace={itrace}", "-F", "hw:pid,tid,cpu,time,ip,addr,flags", "--ns")
    assert text.returncode == 0, text.stderr[-500:]
    dicts = _perf_through_pipe(f"--itrace={itrace}", "-s", str(Path(__file__).with_name("perf_branch_tuples.py")),
                               env=perf_python_env())
    assert dicts.returncode == 0, dicts.stderr[-500:]
    samples = iter([json.loads(line) for line in dicts.stdout.splitlines() if line.startswith("[")])
    out = []
    for line in text.stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        err = _error(line)
        if err:
            out.append(err)
            continue
        m = _HW.fullmatch(line)
        assert m, line
        ev, time, cpu, pid, tid, flags, ip, addr = next(samples)
        assert (time, pid, tid, flags, ip) == (m[3], int(m[1]), int(m[2]), " ".join(m[4].split()), int(m[5], 16))
        if ev == "branches":
            out.append(["branch", time, cpu, pid, tid, flags, ip, addr])
    assert next(samples, None) is None
    return out


@pytest.mark.slow
@pytest.mark.parametrize("itrace", ["be", pytest.param("cr", marks=pytest.mark.slow)])
def test_branches_equal_perf_through_a_pipe(itrace):
    """perf's branch samples and errors equal ``dump branches``, by path and on standard input (a real pipe)."""
    want = _perf_lines(itrace)
    kinds = Counter(t[0] for t in want)
    assert kinds["branch"] > 100 and (kinds["error"] > 10 if "e" in itrace else not kinds["error"]), kinds
    for source in (str(PIPED), "-"):
        if source == "-":
            proc = _through_a_pipe([sys.executable, "-c", "from ptexport.cli import entry; entry()", "dump",
                                    "branches", "-", f"--itrace={itrace}"])
            assert proc.returncode == 0, proc.stderr[-500:]
            got = _tuples(proc.stdout)
        else:
            out = io.StringIO()
            assert main(["dump", "branches", source, f"--itrace={itrace}"], out) == 0
            got = _tuples(out.getvalue())
        assert got == want, first_difference([str(t) for t in got], [str(t) for t in want])


def test_not_the_file_mode_recording():
    """The twins are two runs of the same command, not one recording in two layouts: other processes and
    a clock that does not overlap, so their lines are not comparable with each other (only with perf)."""
    runs = []
    for path in (PIPED, FILE_MODE):
        out = io.StringIO()
        assert main(["dump", "branches", str(path), "--itrace=be"], out) == 0
        runs.append(_tuples(out.getvalue()))
    assert all(isinstance(t, list) for run in runs for t in run)
    pipe, filed = runs
    assert len(pipe) > 500 and len(filed) > 500
    assert {t[3] for t in pipe} - {t[3] for t in filed} and {t[3] for t in filed} - {t[3] for t in pipe}
    assert max(float(t[1]) for t in filed) < min(float(t[1]) for t in pipe)


@pytest.mark.slow
def test_export_equals_perfs_export_through_a_pipe(tmp_path):
    """Every table perf 6.1's export-to-sqlite.py writes from the pipe has the same rows in ours, exported by
    path and from standard input (a real pipe); 'cycles' is named as perf names the nameless attr."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
    from exporttest import PERF_SCRIPTS, have_system_pyside2, system_python_env

    if not have_system_pyside2():
        pytest.skip("perf's export-to-sqlite.py needs Debian's python3-pyside2.qtsql")
    perf_db = tmp_path / "perf.db"
    r = _perf_through_pipe("--itrace=bep", "-s", str(PERF_SCRIPTS / "export-to-sqlite.py"), str(perf_db),
                           "branches", "calls", env=system_python_env())
    assert r.returncode == 0 and perf_db.exists(), r.stderr[-2000:]
    by_path, from_stdin = tmp_path / "ours.db", tmp_path / "stdin.db"
    assert main([str(PIPED), "--db", str(by_path), "-q"], io.StringIO()) == 0
    proc = _through_a_pipe([sys.executable, "-c", "from ptexport.cli import entry; entry()", "export", "-", "--db",
                            str(from_stdin), "-q"])
    assert proc.returncode == 0, proc.stderr[-500:]
    p = sqlite3.connect(perf_db)
    tables = [t for (t,) in p.execute("select name from sqlite_master where type='table'")]
    assert p.execute("select count(*) from samples").fetchone()[0] > 500
    assert "cycles" in {n for (n,) in p.execute("select name from selected_events")}
    for ours in (by_path, from_stdin):
        o = sqlite3.connect(ours)
        for t in tables:
            cols = [c[1] for c in p.execute(f"pragma table_info({t})")]
            sql = f"select {','.join(cols)} from {t} order by {cols[0]}"
            assert o.execute(sql).fetchall() == p.execute(sql).fetchall(), (ours.name, t)
        o.close()
