"""Issue #5 item 2: progress on a terminal (tqdm), silent when not a TTY, and a summary at the end.

The export runs as a process whose stderr is a pseudo-terminal (with a window size: tqdm draws nothing
in a 0-column terminal) or a pipe.  The two xfail tests name what the issue asks and the export does not
do yet (see the audit report): bytes decoded and an ETA in the progress line, and a summary with the
rows of every table and the lost data.
"""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import sqlite3
import struct
import subprocess
import sys
import termios

import pytest

from ptexport.cli import main

PTEXPORT = [sys.executable, "-c", "from ptexport.cli import entry; entry()"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--branches", "200000",
                 "--seed", "8", "--ovf", "2"], out=io.StringIO()) == 0
    return d / "perf.data"


def _on_a_terminal(argv: list[str]) -> tuple[int, str, str]:
    """Run with stderr on a 120x40 pseudo-terminal: (exit code, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    shown = b""
    while True:
        r, _, _ = select.select([master], [], [], 300)
        if not r:
            p.kill()
            pytest.fail("no output for 300 s")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    out, _ = p.communicate(timeout=300)
    os.close(master)
    return p.returncode, out.decode(), shown.decode(errors="replace")


def _samples(db) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT COUNT(*) FROM samples WHERE id > 0").fetchone()[0]  # id 0: perf's unknown row


def test_progress_on_a_terminal(trace, tmp_path):
    db = tmp_path / "t.db"
    rc, out, shown = _on_a_terminal([*PTEXPORT, str(trace), "--db", str(db)])
    assert rc == 0, shown[-2000:]
    updates = [u for u in shown.split("\r") if "samples/s" in u]
    assert len(updates) >= 2, shown[-2000:]  # redrawn as it goes, with the rate
    last = re.search(r"([\d.]+)(k?) samples \[", updates[-1])
    assert last, updates[-1]
    n = _samples(db)
    shown_n = float(last.group(1)) * (1000 if last.group(2) else 1)
    assert abs(shown_n - n) <= max(0.01 * n, 1), (updates[-1], n)  # the bar ends at the samples written
    assert f"samples {n}" in out


def test_silent_when_not_a_tty_and_summary_at_the_end(trace, tmp_path):
    db = tmp_path / "t.db"
    r = subprocess.run([*PTEXPORT, str(trace), "--db", str(db)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0
    assert r.stderr == ""  # no progress on a pipe
    n = _samples(db)
    with sqlite3.connect(db) as c:
        errors = c.execute("SELECT COUNT(*) FROM decode_errors WHERE id > 0").fetchone()[0]
    assert errors > 0  # the overflows
    line = r.stdout.strip()
    assert line.startswith(f"{db}: ")
    assert f"samples {n}" in line and f"; {errors} decode errors;" in line
    assert re.search(r"; [\d.]+ s \(decode [\d.]+ s\)$", line), line  # wall time


def test_quiet_is_silent_even_on_a_terminal(trace, tmp_path):
    rc, out, shown = _on_a_terminal([*PTEXPORT, str(trace), "--db", str(tmp_path / "t.db"), "-q"])
    assert rc == 0
    assert out == "" and shown.strip() == ""


@pytest.mark.xfail(reason="gap: the summary lists samples, context_switches, decode_errors, threads, symbols, dsos "
                          "only (not calls, call_paths, comms, machines) and not the lost data "
                          "(ExportSummary.lost is never set or printed)", strict=False)
def test_summary_names_every_table_and_the_lost_data(trace, tmp_path):
    db = tmp_path / "t.db"
    r = subprocess.run([*PTEXPORT, str(trace), "--db", str(db)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0
    with sqlite3.connect(db) as c:
        calls = c.execute("SELECT COUNT(*) FROM calls WHERE id > 0").fetchone()[0]
    assert calls > 0
    assert f"calls {calls}" in r.stdout and "call_paths" in r.stdout and "comms" in r.stdout
    assert "lost" in r.stdout


@pytest.mark.xfail(reason="gap: the progress line counts samples with no total (tqdm total=0): no bytes decoded "
                          "and no ETA, which the issue asks for", strict=False)
def test_progress_shows_bytes_and_eta(trace, tmp_path):
    rc, _, shown = _on_a_terminal([*PTEXPORT, str(trace), "--db", str(tmp_path / "t.db")])
    assert rc == 0
    updates = [u for u in shown.split("\r") if u.strip()]
    assert any(re.search(r"\d[kMG]?B\b", u) for u in updates), updates[-3:]
    assert any(re.search(r"<\d\d:\d\d", u) for u in updates), updates[-3:]  # tqdm's remaining time


@pytest.mark.xfail(reason="gap: the stats table (issue #5 item 1: lost data, overflows, truncated AUX, skipped "
                          "records, with severity) is written only for VM guest-data warnings (export_vm.py)",
                   strict=False)
def test_stats_count_the_overflows(trace, tmp_path):
    db = tmp_path / "t.db"
    assert main([str(trace), "--db", str(db), "-q"], out=io.StringIO()) == 0
    with sqlite3.connect(db) as c:
        overflows = c.execute("SELECT COUNT(*) FROM decode_errors WHERE message LIKE '%Overflow%'").fetchone()[0]
        stats = dict(c.execute("SELECT name, SUM(value) FROM stats GROUP BY name").fetchall())
    assert overflows > 0
    assert stats.get("overflows") == overflows
