"""Streaming with worker processes (``--jobs 2``), the reference decoder and timeless sessions.

``PerfSession.iter_batches`` must give exactly what decoding every queue whole
and ordering afterwards gives (``_decode_whole(1)``, serial), whichever way the
rows were produced: compiled decoder in PSB segments decoded ahead by a process
pool, reference decoder in worker processes handing back chunks, timeless
queue-after-queue order, ``--itrace=sN``.  Segments and chunks are made tiny so
every join is exercised.  Memory is checked by instrumented counters, not by
timing or RSS: the rows the parent holds stay a small fraction of the trace.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from ptxtest import slow_after
from ptexport.cli import main
from ptexport import jit
from ptexport.perfdata import open_perf_data
from ptexport.session import parallel
from ptexport.session.perfsession import DecodeConfig, open_session
from ptexport.samples.columns import OUT_COLUMNS as _OUT_COLUMNS, concat_columns
from ptexport.samples.itrace import parse_itrace

VARIANTS = {
    "calls-mtc": ("--program", "calls", "--timing", "mtc", "--mtc-period", "5", "--psb-period", "1024"),
    "threads-2cpus-cyc": ("--program", "threads", "--cpus", "2", "--timing", "cyc", "--psb-period", "1024"),
    "threads-per-thread": ("--program", "threads", "--per-thread", "--psb-period", "1024"),
    "forkexec-corrupt": ("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--timing", "cyc",
                         "--psb-period", "1024"),
    "calls-ovf-truncated": ("--program", "calls", "--ovf", "2", "--truncate", "1", "--psb-period", "1024"),
    "threads-event-trace": ("--program", "threads", "--cpus", "2", "--preempt", "400", "--event-trace",
                            "--psb-period", "1024"),
}
# (variant, itrace): compiled decoder (be, cr, bep; i10, every 10 ns, in PSB segments too; i10i: whole queues),
# reference (Ibe), timeless (beZ), skips (s5bep)
CASES = [("calls-mtc", "be"), ("calls-mtc", "i10"), ("calls-mtc", "i10i"), ("threads-2cpus-cyc", "cr"),
         ("threads-2cpus-cyc", "s5bep"), ("threads-per-thread", "be"), ("threads-per-thread", "beZ"), ("forkexec-corrupt", "be"),
         ("calls-ovf-truncated", "bep"), ("calls-ovf-truncated", "beZ"), ("threads-event-trace", "Ibe")]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    made = {}
    for name, opts in VARIANTS.items():
        d = tmp_path_factory.mktemp(name)
        assert main(["synth", "--out", str(d), "--branches", "6000", "--seed", "11", *opts], out=io.StringIO()) == 0
        made[name] = str(d / "perf.data")
    return made


@pytest.fixture
def tiny(monkeypatch):
    """Segments of 2 KB (a PSB each 1 KB), workers from 2 bytes of trace on, 64-row chunks."""
    monkeypatch.setattr(parallel, "MIN_SEGMENT_BYTES", 1)
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 2048)
    monkeypatch.setattr(parallel, "STREAM_CHUNK", 64)


def _whole(path: str, itrace: str):
    with open_perf_data(path) as pd:
        return open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))._decode_whole(1)


def _streamed(path: str, itrace: str, jobs: int, batch_rows: int = 1 << 16, stats: list | None = None):
    with open_perf_data(path) as pd:
        session = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))
        if stats is not None:
            stats.append(session.decode_stats)  # what the streaming held (DecodeStats)
        return list(session.iter_batches(jobs, batch_rows))


@pytest.mark.parametrize("variant,itrace", slow_after(CASES, unpack=True), ids=[f"{v}-{k}" for v, k in CASES])
def test_jobs2_equals_serial_whole(traces, variant, itrace, tiny):
    whole = _whole(traces[variant], itrace)
    batches = _streamed(traces[variant], itrace, 2, batch_rows=500)
    got = concat_columns(batches)
    assert len(whole) > 500
    assert all(0 < len(b) <= 500 for b in batches)
    assert len(got) == len(whole)
    for c in _OUT_COLUMNS:
        assert np.array_equal(getattr(got, c), getattr(whole, c)), c


def test_dump_text_jobs2_equals_jobs1(traces, tiny):
    """The CLI's text with --jobs 2 is byte for byte the --jobs 1 text (compiled and reference)."""
    for variant, itrace in (("threads-2cpus-cyc", "be"), ("calls-mtc", "i10")):
        out = {}
        for jobs in ("1", "2"):
            buf = io.StringIO()
            assert main(["dump", "branches", "--itrace", itrace, "--jobs", jobs, traces[variant]], out=buf) == 0
            out[jobs] = buf.getvalue()
        assert out["1"] == out["2"] and out["1"].count("\n") > 1000


@pytest.mark.slow
def test_parent_holds_few_rows(traces, tmp_path, tiny, monkeypatch):
    """With workers decoding ahead, the parent never holds more than a few segments' rows, and a
    queue's undelivered rows stay within a few chunks: far below the trace's rows."""
    if not jit.available():
        pytest.skip("segments need the compiled decoder (numba)")
    assert main(["synth", "--out", str(tmp_path), "--program", "calls", "--branches", "40000", "--psb-period", "256"],
                out=io.StringIO()) == 0
    path = str(tmp_path / "perf.data")
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 1024)
    got: list = []
    n = sum(len(b) for b in _streamed(path, "be", 2, stats=got))
    st = got[-1]
    assert st.max_held_rows > 0  # segments really went through workers
    assert st.max_held_rows * 8 < n, (st, n)
    assert st.max_source_rows * 8 < n, (st, n)
    n = sum(len(b) for b in _streamed(traces["calls-mtc"], "i10i", 2, stats=got))  # whole queues in workers (iNi)
    st = got[-1]
    assert 0 < st.max_source_rows <= 8 * 64, (st, n)
    assert n > 8 * st.max_source_rows
