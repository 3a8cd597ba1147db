"""Issue #5 item 2: progress on a terminal (tqdm), silent when not a TTY, and a summary at the end.

The export runs as a process whose stderr is a pseudo-terminal (with a window size: tqdm draws nothing
in a 0-column terminal) or a pipe: bytes decoded and an ETA in the progress line, samples and their rate
after it, a summary with the rows of every table and the lost data; the stats table.
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_quiet_is_silent_even_on_a_terminal(trace, tmp_path):
    rc, out, shown = _on_a_terminal([*PTEXPORT, str(trace), "--db", str(tmp_path / "t.db"), "-q"])
    assert rc == 0
    assert out == "" and shown.strip() == ""


@pytest.mark.slow
def test_summary_names_every_table_and_the_lost_data(trace, tmp_path):
    """The summary line: every non-empty table with its rows (id-0 rows not counted), the decode errors
    and what was lost (the OVF overflows here)."""
    db = tmp_path / "t.db"
    r = subprocess.run([*PTEXPORT, str(trace), "--db", str(db)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0
    line = r.stdout.strip()
    listed = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+)", line.split(": ", 1)[1].split(";")[0]))
    with sqlite3.connect(db) as c:
        tables = [t for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        counts = {}
        for t in tables:
            has_id = "id" in [x[1] for x in c.execute(f"PRAGMA table_info({t})")]
            counts[t] = c.execute(f"SELECT COUNT(*) FROM {t}" + (" WHERE id > 0" if has_id else "")).fetchone()[0]
        overflows = c.execute("SELECT COUNT(*) FROM decode_errors WHERE kind = 'overflow'").fetchone()[0]
    assert {"samples", "calls", "call_paths", "comms", "machines", "threads", "stats"} <= set(listed)
    assert overflows > 0
    for t, n in listed.items():
        assert counts[t] == n, (t, n, counts[t])
    for t in ("samples", "calls", "call_paths", "comms", "comm_threads", "threads", "dsos", "symbols",
              "context_switches", "decode_errors", "psb"):
        assert (t in listed) == (counts[t] > 0), t
    assert f"; lost: {overflows} overflows;" in line


@pytest.mark.slow
def test_progress_shows_bytes_and_eta(trace, tmp_path):
    """The bar counts bytes of trace decoded (of the AUX data the recording announces), with tqdm's ETA,
    and ends at all of them."""
    from ptexport.perfdata import open_perf_data
    from ptexport.perfdata.constants import RecordType

    with open_perf_data(str(trace)) as pd:
        total = sum(int(rec.aux_size) for rec in pd.records(types={RecordType.AUX}))
    rc, _, shown = _on_a_terminal([*PTEXPORT, str(trace), "--db", str(tmp_path / "t.db")])
    assert rc == 0
    updates = [u for u in shown.split("\r") if u.strip()]
    assert any(re.search(r"\d[kMG]?B\b", u) for u in updates), updates[-3:]
    assert any(re.search(r"<\d\d:\d\d", u) for u in updates), updates[-3:]  # tqdm's remaining time
    last = re.search(r"100%.*\| ([\d.]+)(k?)B/([\d.]+)(k?)B \[", updates[-1])
    assert last and last.group(1, 2) == last.group(3, 4), updates[-1]
    shown_total = float(last[3]) * (1000 if last[4] else 1)
    assert abs(shown_total - total) <= 0.01 * total, (updates[-1], total)
    assert len({re.search(r"\| ([\d.]+k?)B/", u)[1] for u in updates if re.search(r"\| ([\d.]+k?)B/", u)}) >= 2


@pytest.mark.slow
def test_stats_count_the_overflows(trace, tmp_path):
    db = tmp_path / "t.db"
    assert main([str(trace), "--db", str(db), "-q"], out=io.StringIO()) == 0
    with sqlite3.connect(db) as c:
        overflows = c.execute("SELECT COUNT(*) FROM decode_errors WHERE message LIKE '%Overflow%'").fetchone()[0]
        per_cpu = dict(c.execute("SELECT cpu, COUNT(*) FROM decode_errors WHERE message LIKE '%Overflow%' "
                                 "GROUP BY cpu").fetchall())
        errors = c.execute("SELECT COUNT(*) FROM decode_errors WHERE id > 0").fetchone()[0]
        stats = dict(c.execute("SELECT name, SUM(value) FROM stats GROUP BY name").fetchall())
        ovf_rows = dict(c.execute("SELECT cpu, value FROM stats WHERE name = 'overflows'").fetchall())
        sev = dict(c.execute("SELECT name, severity FROM stats").fetchall())
    assert overflows > 0
    assert stats.get("overflows") == overflows
    assert ovf_rows == per_cpu and sev["overflows"] == "data_loss"
    assert stats["decode_errors"] == errors and sev["decode_errors"] == "error"
    assert stats["decode_errors.overflow"] == overflows
    assert "truncated_aux" not in stats and "lost_records" not in stats  # nothing lost beyond the OVFs


def test_stats_count_truncated_aux_and_lost_data(tmp_path):
    """AUX records flagged TRUNCATED: one truncated_aux per record and cpu, and perf's "Lost trace data"
    errors as lost_data, both data_loss."""
    d = tmp_path / "trunc"
    assert main(["synth", "--out", str(d), "--program", "calls", "--cpus", "2", "--branches", "20000",
                 "--truncate", "2", "--psb-period", "1024"], out=io.StringIO()) == 0
    db = tmp_path / "t.db"
    assert main([str(d / "perf.data"), "--db", str(db), "-q"], out=io.StringIO()) == 0
    with sqlite3.connect(db) as c:
        lost = dict(c.execute("SELECT cpu, COUNT(*) FROM decode_errors WHERE message = 'Lost trace data' "
                              "GROUP BY cpu").fetchall())
        stats = {(n, cpu): (v, sev) for n, cpu, v, sev in c.execute("SELECT name, cpu, value, severity FROM stats")}
    from ptexport.perfdata import open_perf_data
    from ptexport.perfdata.constants import RecordType

    with open_perf_data(str(d / "perf.data")) as pd:
        trunc: dict[int, int] = {}
        for rec in pd.records(types={RecordType.AUX}):
            if rec.flags & 1:
                trunc[rec.cpu] = trunc.get(rec.cpu, 0) + 1
    assert sum(trunc.values()) >= 4 and len(trunc) == 2 and lost
    assert {cpu: v for (n, cpu), (v, _) in stats.items() if n == "truncated_aux"} == trunc
    assert {cpu: v for (n, cpu), (v, _) in stats.items() if n == "lost_data"} == lost
    assert {sev for (n, _), (_, sev) in stats.items() if n in ("truncated_aux", "lost_data")} == {"data_loss"}


def test_stats_rows_of_lost_records_and_aux_flags():
    """PERF_RECORD_LOST / LOST_SAMPLES summed per cpu, each PERF_AUX_FLAG counted per cpu, unknown
    record types and features as skipped (the generator makes none of these: a session stand-in)."""
    from types import SimpleNamespace as NS

    from ptexport.dbexport.stats import ExportStats
    from ptexport.sideband.model import AuxEvent, LostEvent

    sb = NS(lost=[LostEvent(10, 0, "LOST", 3), LostEvent(20, 0, "LOST", 2), LostEvent(30, 1, "LOST_SAMPLES", 7)],
            aux_events={0: [AuxEvent(1, 0, -1, 0, 10, 0x1), AuxEvent(2, 0, -1, 10, 10, 0x5)],
                        1: [AuxEvent(3, 1, -1, 0, 10, 0x8), AuxEvent(4, 1, -1, 0, 10, 0x2)]})
    pd = NS(stats=NS(unknown=4), unknown_features=[31])
    st = ExportStats()
    st.error(7, 0)  # Overflow packet
    st.error(7, 0)
    st.error(3, 1)  # Bad packet
    rows = {(n, cpu): (v, sev) for n, cpu, v, sev, _ in st.rows(NS(sb=sb, pd=pd))}
    assert rows == {
        ("lost_records", 0): (5, "data_loss"), ("lost_samples", 1): (7, "data_loss"),
        ("truncated_aux", 0): (2, "data_loss"), ("aux_partial", 0): (1, "warning"),
        ("aux_collision", 1): (1, "data_loss"), ("aux_overwrite", 1): (1, "info"),
        ("overflows", 0): (2, "data_loss"), ("decode_errors", -1): (3, "error"),
        ("decode_errors.overflow", 0): (2, "error"), ("decode_errors.bad_packet", 1): (1, "error"),
        ("skipped_records", -1): (4, "warning"), ("skipped_features", -1): (1, "warning")}
    assert ExportStats().rows(NS(sb=NS(lost=[], aux_events={}), pd=NS(stats=NS(unknown=0)))) == []
