"""perf script's ``--time``, ``--pid`` and ``--tid`` in ``dump branches`` and the export, equal to perf 6.1.

Intel PT applies ``--time`` inside perf's decoder: it fast-forwards to the last
PSB before a range's start (errors between that PSB and the start are still
reported, earlier ones are never decoded), synthesizes nothing before the start
and stops a queue after the last end; perf script then drops samples whose
time is outside every range.  ``--pid``/``--tid`` drop samples of other
threads, never errors; perf's exporter still writes every context switch,
thread and comm (sideband is not filtered).  Each case runs perf and ptexport
on the same generated trace and compares the output line for line, or every
perf table and view row for row.
"""

from __future__ import annotations

import io
import sqlite3
import struct
import subprocess

import pytest

from oracle_perf.test_export_parity import PERF_TABLES, columns, needs_exporter, table_rows
from ptxtest import QUIPPER, needs_perf, perf_python_env, slow_after
from ptexport.cli import main
from ptexport.perfdata.constants import Feature

EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
_FIELDS = ["-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"]

# id -> synth options
TRACES = {
    "threads-faults-cyc": ("--program", "threads", "--cpus", "2", "--psb-period", "512", "--corrupt", "2", "--ovf", "2",
                           "--truncate", "1", "--timing", "cyc", "--seed", "7"),
    "forkexec-faults": ("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--truncate", "2", "--ovf", "3",
                        "--psb-period", "1024", "--seed", "3"),
    "calls-cyc-psb256": ("--program", "calls", "--timing", "cyc", "--psb-period", "256", "--seed", "5"),
    "threads-per-thread": ("--program", "threads", "--per-thread", "--psb-period", "1024", "--seed", "3"),
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    made: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in made:
            d = tmp_path_factory.mktemp(name)
            assert main(["synth", "--out", str(d), "--branches", "20000", *TRACES[name]], out=io.StringIO()) == 0
            made[name] = str(d / "perf.data")
        return made[name]

    return get


def _collapse(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _perf_lines(path: str, itrace: str, extra: list[str]) -> list[str]:
    proc = subprocess.run(["perf", "script", "-i", path, f"--itrace={itrace}", *_FIELDS, *extra],
                          capture_output=True, text=True, timeout=300, env=perf_python_env())
    assert proc.returncode == 0, proc.stderr
    return _collapse(proc.stdout)


def _ours_lines(path: str, itrace: str, extra: list[str]) -> list[str]:
    out = io.StringIO()
    assert main(["dump", "branches", path, "--itrace", itrace, *extra], out=out) == 0
    return _collapse(out.getvalue())


def _span(lines: list[str]) -> tuple[int, int]:
    times = [int(w[:-1].replace(".", "")) for line in lines for w in line.split() if w.endswith(":") and "." in w]
    return min(times), max(times)


def _sec(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def _time_arg(lines: list[str], form: str) -> str:
    """A --time value at fractions of the trace's span (so the edges fall inside decoded code)."""
    lo, hi = _span(lines)

    def at(f: float) -> str:
        return _sec(lo + int((hi - lo) * f))

    return {"middle": f"{at(0.3)},{at(0.7)}", "open-start": f",{at(0.45)}", "open-end": f"{at(0.55)},",
            "two-ranges": f"{at(0.1)},{at(0.3)} {at(0.62)},{at(0.81)}", "narrow": f"{at(0.5)},{at(0.5003)}"}[form]


# (trace, itrace, time form or None, extra options)
DUMP_CASES = [
    ("threads-faults-cyc", "be", "middle", []),
    ("threads-faults-cyc", "be", "two-ranges", []),
    ("threads-faults-cyc", "cr", "open-end", []),
    ("forkexec-faults", "bep", "middle", []),
    ("forkexec-faults", "be", "open-start", []),
    ("calls-cyc-psb256", "be", "narrow", []),
    ("calls-cyc-psb256", "bep", "two-ranges", []),
    ("threads-per-thread", "be", "middle", []),
    ("threads-faults-cyc", "be", None, ["--tid", "1001"]),
    ("threads-faults-cyc", "be", None, ["--tid", "1001,1003"]),
    ("forkexec-faults", "be", None, ["--pid", "1001"]),
    ("threads-faults-cyc", "be", "middle", ["--tid", "1002"]),
]


@needs_perf
@pytest.mark.parametrize("name,itrace,form,extra", slow_after(DUMP_CASES, unpack=True),
                         ids=[f"{n}-{i}-{f or ''}{'-'.join(e)}" for n, i, f, e in DUMP_CASES])
def test_dump_branches_filters_equal_perf_script(trace, name, itrace, form, extra):
    path = trace(name)
    args = list(extra)
    if form:
        args += ["--time", _time_arg(_perf_lines(path, itrace, []), form)]
    theirs = _perf_lines(path, itrace, args)
    ours = _ours_lines(path, itrace, args)
    assert ours == theirs
    assert any(":" in line for line in theirs)  # samples were kept: the case tests something
    whole = _perf_lines(path, itrace, [])
    assert len(theirs) < len(whole)  # and some were filtered


REFERENCE_CASES = [c for c in DUMP_CASES if c[2] in ("two-ranges", "open-start", "narrow")] + [DUMP_CASES[-1]]


@needs_perf
@pytest.mark.parametrize("name,itrace,form,extra", slow_after(REFERENCE_CASES, unpack=True),
                         ids=[f"{n}-{i}-{f or ''}{'-'.join(e)}" for n, i, f, e in REFERENCE_CASES])
def test_reference_decoder_filters_equal_perf_script(trace, monkeypatch, name, itrace, form, extra):
    """The time filter in the reference decoder (the compiled one's oracle) gives perf's lines too."""
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)
    path = trace(name)
    args = [*extra, "--time", _time_arg(_perf_lines(path, itrace, []), form)]
    assert _ours_lines(path, itrace, args) == _perf_lines(path, itrace, args)


@needs_perf
def test_time_fast_forward_drops_errors_before_the_psb(trace):
    """perf does not decode a queue before the last PSB ahead of --time's start: errors of that part
    are absent, errors after that PSB but before the start are reported (not a plain time filter)."""
    path = trace("threads-faults-cyc")
    whole = _perf_lines(path, "e", [])
    errors = [line for line in whole if "error" in line]
    times = sorted(int(line.split(" time ")[1].split()[0].replace(".", "")) for line in errors)
    assert len(times) >= 3
    start = times[-1] + 1  # after the last error: a plain filter would drop them all
    arg = f"{_sec(start)},"
    theirs = _perf_lines(path, "be", ["--time", arg])
    assert _ours_lines(path, "be", ["--time", arg]) == theirs


@needs_perf
def test_percent_time_needs_sample_time_like_perf(trace, capsys):
    """Generated traces carry no HEADER_SAMPLE_TIME: perf refuses percent ranges, and so do we."""
    path = trace("calls-cyc-psb256")
    proc = subprocess.run(["perf", "script", "-i", path, "--itrace=be", "--time", "10%/2"], capture_output=True,
                          text=True, timeout=120, env=perf_python_env())
    assert proc.returncode != 0 or not proc.stdout.strip()
    assert "first/last sample time" in proc.stderr
    assert main(["dump", "branches", path, "--time", "10%/2"], out=io.StringIO()) != 0
    assert "first/last sample time" in capsys.readouterr().err


def _with_sample_time(src: str, dst, first: int, last: int) -> None:
    """A copy of perf.data ``src`` whose header has HEADER_SAMPLE_TIME (what perf record writes with
    --timestamp-boundary): the feature table after the data section is rewritten with it."""
    buf = bytearray(open(src, "rb").read())
    d_off, d_size = struct.unpack_from("<QQ", buf, 40)
    bits = int.from_bytes(buf[72:104], "little")
    ids = [b for b in range(256) if bits >> b & 1]
    table = d_off + d_size
    contents = {}
    for k, fid in enumerate(ids):
        off, size = struct.unpack_from("<QQ", buf, table + 16 * k)
        contents[fid] = bytes(buf[off:off + size])
    contents[Feature.SAMPLE_TIME] = struct.pack("<QQ", first, last)
    out = buf[:table]
    out[72:104] = (bits | 1 << Feature.SAMPLE_TIME).to_bytes(32, "little")
    pos = table + 16 * len(contents)
    body = b""
    for fid in sorted(contents):
        out += struct.pack("<QQ", pos + len(body), len(contents[fid]))
        body += contents[fid]
    dst.write_bytes(bytes(out + body))


@needs_perf
@pytest.mark.parametrize("value", ["10%/4", "0%-10%,30%-45%", "90%-100%"])
def test_percent_time_with_sample_time_equal_perf(trace, tmp_path, value):
    """With the header's first/last sample time, perf takes percent slices of it, and so do we."""
    src = trace("threads-faults-cyc")
    lo, hi = _span(_perf_lines(src, "be", []))
    path = tmp_path / "perf.data"
    _with_sample_time(src, path, lo, hi)
    theirs = _perf_lines(str(path), "be", ["--time", value])
    assert _ours_lines(str(path), "be", ["--time", value]) == theirs
    assert 0 < sum(1 for line in theirs if "error" not in line) < len(_perf_lines(str(path), "be", [])) / 2


def _perf_export(path: str, db, extra: list[str]) -> None:
    subprocess.run(["perf", "script", *extra, "-i", path, "--itrace=bep", "-s", EXPORTER, str(db), "branches", "calls"],
                   check=True, capture_output=True, timeout=600, env=perf_python_env())


def _assert_same_db(theirs, ours) -> dict[str, int]:
    counts = {}
    for table in PERF_TABLES:
        cols = columns(theirs, table)
        if not cols:  # perf's exporter drops empty tables (cbr, context_switches...): ours holds no rows there
            con = sqlite3.connect(ours)
            assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
            con.close()
            continue
        rows = table_rows(theirs, table, cols)
        assert table_rows(ours, table, cols) == rows, table
        counts[table] = len(rows)
    ct, co = sqlite3.connect(theirs), sqlite3.connect(ours)
    for (view,) in ct.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        assert co.execute(f"SELECT * FROM {view}").fetchall() == ct.execute(f"SELECT * FROM {view}").fetchall(), view
    ct.close()
    co.close()
    return counts


EXPORT_CASES = [
    ("threads-faults-cyc", "--tid", "1001"),
    ("forkexec-faults", "--pid", "1001"),
    ("threads-faults-cyc", "--time", "middle"),
    ("forkexec-faults", "--time", "two-ranges"),
]


@needs_perf
@needs_exporter
@pytest.mark.parametrize("name,opt,value", slow_after(EXPORT_CASES, unpack=True), ids=[f"{n}{o}-{v}" for n, o, v in EXPORT_CASES])
def test_export_filters_equal_perf_export(trace, tmp_path, name, opt, value):
    path = trace(name)
    if opt == "--time":
        value = _time_arg(_perf_lines(path, "be", []), value)
    theirs, ours, whole = tmp_path / "perf.db", tmp_path / "ours.db", tmp_path / "whole.db"
    _perf_export(path, theirs, [opt, value])
    assert main([path, "--db", str(ours), "-q", opt, value], out=io.StringIO()) == 0
    counts = _assert_same_db(theirs, ours)
    assert main([path, "--db", str(whole), "-q"], out=io.StringIO()) == 0
    con = sqlite3.connect(whole)
    n_whole = con.execute("SELECT count(*) FROM samples").fetchone()[0]
    # sideband is not filtered: every context switch, thread and comm is still there
    assert counts["context_switches"] == con.execute("SELECT count(*) FROM context_switches").fetchone()[0]
    assert counts["threads"] == con.execute("SELECT count(*) FROM threads").fetchone()[0]
    con.close()
    assert 1 < counts["samples"] < n_whole


@pytest.mark.slow
@needs_perf
@needs_exporter
@pytest.mark.skipif(not QUIPPER.exists(), reason="shared quipper recording not found")
@pytest.mark.parametrize("opt,value", [("--pid", "3174"), ("--time", "641.257226151,641.257631470"),
                                       ("--time", "641.257428811,")])
def test_export_filters_real_recording(tmp_path, opt, value):
    """The quipper recording's non-PT cycles samples are filtered too (perf filters every sample)."""
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    _perf_export(str(QUIPPER), theirs, [opt, value])
    assert main([str(QUIPPER), "--db", str(ours), "-q", opt, value], out=io.StringIO()) == 0
    counts = _assert_same_db(theirs, ours)
    assert 100 < counts["samples"] < 647  # the whole export has 647 rows


@pytest.mark.slow
@needs_perf
@pytest.mark.skipif(not QUIPPER.exists(), reason="shared quipper recording not found")
@pytest.mark.parametrize("extra", [["--tid", "3174"], ["--time", "641.257226151,641.257631470"],
                                   ["--time", "641.257428811,", "--pid", "3174"]])
def test_dump_branches_filters_real_recording(extra):
    """Kernel and user code with perf's decode errors; perf script's non-PT cycles samples ([-01]) are
    not among dump branches' lines."""
    for itrace in ("be", "bep"):
        theirs = [line for line in _perf_lines(str(QUIPPER), itrace, extra) if "[-01]" not in line]
        assert _ours_lines(str(QUIPPER), itrace, extra) == theirs
        assert 100 < len(theirs) < 740
