"""``--pid``/``--tid``/``--time`` with the compiled decoder and with ``--jobs 2`` streaming, equal to perf 6.1.

``--pid``/``--tid`` filter the merged sample stream, so the compiled decoder
keeps serving them with PSB segments decoded ahead by worker processes;
``--time`` runs perf's decoder-side time filter in the compiled decoder too,
a queue from its start (no segments).  Segments and chunks are made tiny so
that every join is exercised.  ``--count`` counts what the text prints.
"""

from __future__ import annotations

import io
import subprocess

import pytest

from ptxtest import needs_perf, perf_python_env
from ptexport.cli import main
from ptexport import jit
from ptexport.decoder import backend
from ptexport.perfdata import open_perf_data
from ptexport.session import parallel
from ptexport.session.perfsession import DecodeConfig, open_session
from ptexport.samples.itrace import parse_itrace

_FIELDS = ["-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("jobs")
    assert main(["synth", "--out", str(d), "--branches", "12000", "--program", "threads", "--cpus", "2",
                 "--psb-period", "512", "--corrupt", "2", "--timing", "cyc", "--seed", "9"], out=io.StringIO()) == 0
    return str(d / "perf.data")


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_SEGMENT_BYTES", 1)
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 2048)
    monkeypatch.setattr(parallel, "STREAM_CHUNK", 64)


def _collapse(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _perf(path: str, extra: list[str]) -> list[str]:
    proc = subprocess.run(["perf", "script", "-i", path, "--itrace=be", *_FIELDS, *extra], capture_output=True,
                          text=True, timeout=300, env=perf_python_env())
    assert proc.returncode == 0, proc.stderr
    return _collapse(proc.stdout)


def _ours(path: str, extra: list[str]) -> tuple[list[str], str]:
    out, count = io.StringIO(), io.StringIO()
    assert main(["dump", "branches", path, "--itrace", "be", *extra], out=out) == 0
    assert main(["dump", "branches", path, "--itrace", "be", "--count", *extra], out=count) == 0
    return _collapse(out.getvalue()), count.getvalue().strip()


def _decoder(path: str, **filters) -> bool:
    with open_perf_data(path) as pd:
        return backend.compiled_for(open_session(pd, DecodeConfig(itrace=parse_itrace("be"), **filters)).decode_context())


def _window(lines: list[str]) -> str:
    times = sorted(int(w[:-1].replace(".", "")) for line in lines for w in line.split() if w.endswith(":"))
    lo, hi = times[len(times) // 3], times[2 * len(times) // 3]
    return ",".join(f"{t // 10**9}.{t % 10**9:09d}" for t in (lo, hi))


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_tid_and_time_with_jobs_equal_perf(trace, tiny, jobs):
    if jit.available():
        assert _decoder(trace, tids=frozenset({1002}))  # the compiled decoder serves the filters
        assert _decoder(trace, time="1,2")
    whole = _perf(trace, [])
    for extra in (["--tid", "1002"], ["--pid", "1000", "--tid", "1001,1003"], ["--time", _window(whole)],
                  ["--time", _window(whole), "--tid", "1003"]):
        theirs = _perf(trace, extra)
        ours, count = _ours(trace, [*extra, "--jobs", jobs])
        assert ours == theirs, extra
        n_err = sum(1 for line in theirs if line.startswith("instruction trace error"))
        assert count == f"{len(theirs) - n_err} samples, {n_err} errors"
        assert 0 < len(theirs) - n_err < len(whole)


@needs_perf
@pytest.mark.parametrize("itrace", ["bei1us", "i300t", "ei500ns"])
def test_time_period_instruction_samples_in_segments_equal_perf(trace, tiny, itrace, monkeypatch):
    """Instruction samples with a period in time (perf's ticks) are decoded in PSB segments like branches
    (decoder/compiled/decoder.py segmentable): with the workers (tiny segments, every join exercised) the
    text equals perf's and the serial decoder's, and ``--count`` counts it."""
    if not jit.available():
        pytest.skip("the compiled decoder is not available")
    with open_perf_data(trace) as pd:
        assert backend.segmentable(open_session(pd, DecodeConfig(itrace=parse_itrace(itrace))).decode_context())
    used = []
    real = parallel._segment_streams
    monkeypatch.setattr(parallel, "_segment_streams", lambda *a, **k: used.append(real(*a, **k)) or used[-1])
    monkeypatch.setenv("PTEXPORT_DECODE_PROCESS", "0")  # the workers under this process (the spy sees them)
    proc = subprocess.run(["perf", "script", "-i", trace, f"--itrace={itrace}", *_FIELDS], capture_output=True,
                          text=True, timeout=300, env=perf_python_env())
    assert proc.returncode == 0, proc.stderr
    theirs = _collapse(proc.stdout)
    serial, par, count = io.StringIO(), io.StringIO(), io.StringIO()
    assert main(["dump", "branches", trace, "--itrace", itrace, "--jobs", "1"], out=serial) == 0
    assert main(["dump", "branches", trace, "--itrace", itrace, "--jobs", "3"], out=par) == 0
    assert any(s is not None for s in used)  # PSB segments decoded by the workers
    assert main(["dump", "branches", trace, "--itrace", itrace, "--count", "--jobs", "3"], out=count) == 0
    assert _collapse(serial.getvalue()) == theirs
    assert _collapse(par.getvalue()) == theirs
    n_err = sum(1 for line in theirs if line.startswith("instruction trace error"))
    assert count.getvalue().strip() == f"{len(theirs) - n_err} samples, {n_err} errors"
    assert len(theirs) - n_err > 50
