"""Issue #5 item 1: the payload tables of PSB and event-trace samples in a real export, against perf 6.1.

The fixture database fills psb/evt/evd/iflag by hand; here an export of a generated Event Trace recording
(two CPUs, timer interrupts) must hold one psb row per perf "psb" sample with its offset ("psb offs"), and
one evt / iflag row per perf "evt" / "iflag" sample when --itrace asks for them.
"""

from __future__ import annotations

import io
import re
import sqlite3
import subprocess
import sys

import pytest

from ptxtest import needs_perf
from ptexport.cli import main

_LINE = re.compile(r"^\s*\[(\d+)\]\s+(\d+)\.(\d{9}):\s+(\w+):\s+(.*)$")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("evt")
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--preempt", "700",
                 "--event-trace", "--branches", "20000", "--seed", "3"], out=io.StringIO()) == 0
    return d / "perf.data"


def perf_events(data, itrace: str) -> list[tuple[str, int, int, str]]:
    """(event, cpu, time ns, payload text) of perf's synthesized samples."""
    r = subprocess.run(["perf", "script", "-i", str(data), f"--itrace={itrace}", "-F", "cpu,time,event,synth",
                        "--ns"], capture_output=True, text=True, check=True)
    out = []
    for line in r.stdout.splitlines():
        m = _LINE.match(line)
        if m:
            out.append((m[4], int(m[1]), int(m[2]) * 10**9 + int(m[3]), m[5].strip()))
    return out


@pytest.mark.slow
@needs_perf
def test_psb_rows_carry_perfs_offsets(trace, tmp_path):
    db = tmp_path / "t.db"
    assert main([str(trace), "--db", str(db), "-q"], out=io.StringIO()) == 0  # default itrace: bep
    want = sorted((cpu, t, int(re.search(r"psb offs: (\S+)", text)[1], 0))
                  for ev, cpu, t, text in perf_events(trace, "p") if ev == "psb")
    assert len(want) >= 4 and {c for c, _, _ in want} == {0, 1}
    with sqlite3.connect(db) as c:
        got = sorted(c.execute('SELECT s.cpu, s.time, p."offset" FROM psb p JOIN samples s ON s.id = p.id'))
    assert got == want


_CFE_TYPES = {"INTR": 1, "IRET": 2, "SMI": 3, "RSM": 4, "SIPI": 5, "INIT": 6, "VMENTRY": 7, "VMEXIT": 8,
              "VMEXIT_INTR": 9, "SHUTDOWN": 10}
_EVT = re.compile(r"cfe: (\w+) IP: (\d) vector: (\d+)")
_IFLAG = re.compile(r"IFLAG: (\d)->(\d)( via branch)?")
_EVD = re.compile(r"\b(PFA|VMXQ|VMXR): (0x[0-9a-f]+)")
_EVD_TYPES = {"PFA": 0, "VMXQ": 1, "VMXR": 2}


@pytest.mark.slow
@needs_perf
def test_event_trace_rows_equal_perfs_samples(trace, tmp_path):
    """--itrace=bepI: one evt row per perf "evt" sample (CFE type, vector, IP bit, EVD count at its cpu and
    time), one evd row per EVD perf prints with it (type, payload), and one iflag row per "iflag" sample
    (new IF value, via a branch), no traceback."""
    db = tmp_path / "t.db"
    r = subprocess.run([sys.executable, "-c", "from ptexport.cli import entry; entry()", str(trace), "--db", str(db),
                        "-q", "--itrace=bepI"], capture_output=True, text=True, timeout=600)
    assert "Traceback" not in r.stderr, r.stderr[-1500:]
    assert r.returncode == 0, r.stderr[-1500:]
    perf = perf_events(trace, "I")
    want_evt, want_iflag, want_evd = [], [], []
    for ev, cpu, t, text in perf:
        if ev == "evt":
            m = _EVT.search(text)
            evds = _EVD.findall(text)
            want_evt.append((cpu, t, _CFE_TYPES[m[1]], int(m[3]), int(m[2]), len(evds)))
            want_evd += [(cpu, t, _EVD_TYPES[name], int(v, 16)) for name, v in evds]
        elif ev == "iflag":
            m = _IFLAG.search(text)
            want_iflag.append((cpu, t, int(m[2]), int(bool(m[3]))))
    assert len(want_evt) > 100 and want_iflag
    assert {e[2] for e in want_evt} == {1, 2}
    with sqlite3.connect(db) as c:
        got_evt = c.execute("SELECT s.cpu, s.time, e.type, e.vector, e.ip_flag, e.evd_count FROM evt e "
                            "JOIN samples s ON s.id = e.id ORDER BY e.id").fetchall()
        got_evd = [(cpu, t, ty, p & (1 << 64) - 1) for cpu, t, ty, p in c.execute(
            "SELECT s.cpu, s.time, d.evd_type, d.payload FROM evd d JOIN samples s ON s.id = d.evt_id ORDER BY d.id")]
        evd_ids = [i for (i,) in c.execute("SELECT id FROM evd ORDER BY id")]
        got_iflag = c.execute("SELECT s.cpu, s.time, i.iflag, i.via_branch FROM iflag i "
                              "JOIN samples s ON s.id = i.id ORDER BY i.id").fetchall()
        names = {n for (n,) in c.execute("SELECT e.name FROM samples s JOIN selected_events e "
                                         "ON e.id = s.evsel_id WHERE s.id IN (SELECT id FROM evt)")}
    assert sorted(got_evt) == sorted(want_evt)
    assert len(want_evd) > 10 and sorted(got_evd) == sorted(want_evd)  # the page faults' CR2 (EVD type 0)
    assert evd_ids == list(range(1, len(evd_ids) + 1))
    assert sorted(got_iflag) == sorted(want_iflag)
    assert names == {"evt"}


@pytest.mark.slow
def test_event_trace_rows_through_workers_and_the_decode_process(trace, tmp_path, monkeypatch):
    """The EVDs travel with their batches: a forked decode process and --jobs 2 give the same rows."""
    dbs = {}
    for name, args, env in (("plain", [], "0"), ("proc", [], "1"), ("jobs", ["--jobs", "2"], "0")):
        monkeypatch.setenv("PTEXPORT_DECODE_PROCESS", env)
        dbs[name] = tmp_path / f"{name}.db"
        assert main([str(trace), "--db", str(dbs[name]), "-q", "--itrace=bepI", *args], out=io.StringIO()) == 0
    got = {}
    for name, db in dbs.items():
        with sqlite3.connect(db) as c:
            got[name] = [c.execute(f"SELECT * FROM {t} ORDER BY id").fetchall() for t in ("evt", "evd", "iflag")]
    assert len(got["plain"][1]) > 10
    assert got["proc"] == got["plain"] and got["jobs"] == got["plain"]
