"""Streaming decode (``PerfSession.iter_batches``): perf's order, bounded memory.

``iter_batches`` decodes each queue a chunk at a time and runs perf's queue
heap incrementally; its batches must concatenate to exactly what decoding
every queue whole and ordering afterwards gives (``_decode_whole``), with
tiny chunks and batches so every join is exercised.  Peak RSS of
``dump branches --count`` and of the text output must not grow with the
trace (1 M vs 4 M branches).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

from ptxtest import slow_after
from ptexport.cli import main
from ptexport.perfdata import open_perf_data
from ptexport.session import parallel
from ptexport.session.perfsession import DecodeConfig, open_session
from ptexport.samples.columns import OUT_COLUMNS as _OUT_COLUMNS, concat_columns
from ptexport.samples.itrace import parse_itrace

VARIANTS = {
    "calls-mtc": ("--program", "calls", "--timing", "mtc", "--mtc-period", "5"),
    "threads-2cpus-cyc": ("--program", "threads", "--cpus", "2", "--timing", "cyc"),
    "threads-per-thread": ("--program", "threads", "--per-thread"),
    "forkexec-2cpus": ("--program", "forkexec", "--cpus", "2"),
    "threads-ovf-cyc": ("--program", "threads", "--cpus", "2", "--ovf", "4", "--timing", "cyc"),
    "calls-truncated": ("--program", "calls", "--truncate", "2", "--psb-period", "1024"),
    "forkexec-corrupt": ("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--timing", "cyc",
                         "--psb-period", "1024"),
    "events-power": ("--program", "events", "--power"),
    "threads-pipe": ("--program", "threads", "--cpus", "2", "--pipe"),
}
KINDS = ("be", "cr", "bep", "i100")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    made = {}
    for name, opts in VARIANTS.items():
        d = tmp_path_factory.mktemp(name)
        assert main(["synth", "--out", str(d), "--branches", "6000", "--seed", "7", *opts], out=io.StringIO()) == 0
        made[name] = str(d / "perf.data")
    return made


def _same(a, b) -> None:
    assert len(a) == len(b)
    for c in _OUT_COLUMNS:
        assert np.array_equal(getattr(a, c), getattr(b, c)), c


def _check(path: str, itrace: str, monkeypatch) -> int:
    cfg = DecodeConfig(itrace=parse_itrace(itrace))
    with open_perf_data(path) as pd:
        whole = open_session(pd, cfg)._decode_whole(1)
    monkeypatch.setattr(parallel, "STREAM_CHUNK", 64)
    # (the merge's kernel also stopped every 3 queue turns: its state carried across calls)
    for batch_rows, turns in ((7, 3), (7, parallel.MERGE_TURNS), (1 << 16, parallel.MERGE_TURNS)):
        monkeypatch.setattr(parallel, "MERGE_TURNS", turns)
        with open_perf_data(path) as pd:
            batches = list(open_session(pd, cfg).iter_batches(1, batch_rows=batch_rows))
        assert all(0 < len(b) <= batch_rows for b in batches)
        _same(concat_columns(batches), whole)
    return len(whole)


@pytest.mark.parametrize("variant", slow_after(sorted(VARIANTS)))
def test_streamed_equals_whole(traces, variant, monkeypatch):
    n = 0
    for kind in KINDS:
        n += _check(traces[variant], kind, monkeypatch)
    assert n > 1000


@pytest.mark.parametrize("itrace", ["be", "cr", "bep"])
def test_streamed_equals_whole_quipper(quipper, itrace, monkeypatch):
    assert _check(str(quipper), itrace, monkeypatch) > 50


def test_streamed_equals_whole_sixteen_cpus(tmp_path, monkeypatch):
    """16 CPU queues taking turns, decoded 64 rows at a time: the merge's item regions (one per queue in
    shared arrays) shed what was read, move when full and are packed anew, and the order stays perf's."""
    assert main(["synth", "--out", str(tmp_path), "--branches", "20000", "--seed", "4", "--program", "threads",
                 "--cpus", "16"], out=io.StringIO()) == 0
    packs = []
    real = parallel._Items._pack

    def pack(self, q, room):
        packs.append(q)
        return real(self, q, room)

    monkeypatch.setattr(parallel._Items, "_pack", pack)
    assert _check(str(tmp_path / "perf.data"), "bep", monkeypatch) > 20000
    assert packs


def test_dump_streams_same_text(traces):
    path = traces["threads-2cpus-cyc"]
    cfg = DecodeConfig(itrace=parse_itrace("be"))
    with open_perf_data(path) as pd:
        whole = open_session(pd, cfg)._decode_whole(1)
    out = io.StringIO()
    assert main(["dump", "branches", path], out=out) == 0
    assert len(out.getvalue().splitlines()) == len(whole)
    count = io.StringIO()
    assert main(["dump", "branches", "--count", "--jobs", "1", path], out=count) == 0
    n_err = int((whole.kind == 1).sum())
    assert count.getvalue() == f"{len(whole) - n_err} samples, {n_err} errors\n"


_RSS = """
import os, sys
from ptexport.cli import main
with open(os.devnull, "w") as out:
    rc = main(sys.argv[1:], out=out)
# VmHWM is this process's own peak (ru_maxrss would include the forking parent's).
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print(rc, hwm)
"""


def peak_rss_kb(args: list[str]) -> int:
    """Peak RSS (KB) of ``ptexport ARGS`` run in a fresh interpreter, output discarded."""
    r = subprocess.run([sys.executable, "-c", _RSS, *args], capture_output=True, text=True, check=True)
    rc, kb = r.stdout.split()[-2:]
    assert rc == "0", r.stderr
    return int(kb)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_peak_rss_does_not_grow_with_trace(tmp_path):
    from ptexport import jit
    if not jit.available():
        pytest.skip("bounded memory needs the compiled decoder (numba)")
    rss = {}
    for n in ("1M", "4M"):
        d = tmp_path / n
        assert main(["synth", "--out", str(d), "--program", "calls", "--branches", n, "--elf-path", "."],
                    out=io.StringIO()) == 0
        cwd = os.getcwd()
        os.chdir(d)
        try:
            rss[n] = (peak_rss_kb(["dump", "branches", "--count", "--jobs", "1", "perf.data"]),
                      peak_rss_kb(["dump", "branches", "perf.data"]))
        finally:
            os.chdir(cwd)
    print("peak RSS KB (count, text):", rss)
    for i in range(2):
        assert rss["4M"][i] - rss["1M"][i] < 64 * 1024, rss
        assert rss["4M"][i] < 1024 * 1024, rss


def _mapped_kb(path: str) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, cur = 0, None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:
                cur = parts[5] if len(parts) >= 6 else ""
            elif parts and parts[0] == "Rss:" and cur == path:
                total += int(parts[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_the_recording_does_not_stay_resident(tmp_path, monkeypatch):
    """Reading each record's header maps its neighbours (fault-around): one pass over the records left
    a 1 GB recording resident in the parent of a --jobs 2 export (105 of 107 MB on a 100 M-branch
    trace).  After the pass, and every RELEASE_BATCHES batches while streaming, the pages go."""
    from ptexport.session import perfsession

    d = tmp_path / "t"
    # bigger than the decoder's window over the trace (~1 MB): 3 M branches, 3.2 MB
    assert main(["synth", "--out", str(d), "--program", "calls", "--branches", "3M"], out=io.StringIO()) == 0
    path = os.path.realpath(d / "perf.data")
    size_kb = os.path.getsize(path) // 1024
    monkeypatch.setattr(perfsession, "RELEASE_BATCHES", 2)
    with open_perf_data(path) as pd:
        session = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        assert _mapped_kb(path) < size_kb // 8, (_mapped_kb(path), size_kb)
        peak = 0
        for _ in session.iter_batches(1, batch_rows=1 << 15):
            peak = max(peak, _mapped_kb(path))
        assert size_kb > 3000 and peak < size_kb // 2, (peak, size_kb)
        # db-export's own pass over the records (the export's parent) releases what it read as it goes
        from ptexport.perfdata import reader

        monkeypatch.setattr(reader, "RELEASE_BYTES", 1 << 20)
        calls = []
        real = reader._Source.release_pages
        monkeypatch.setattr(reader._Source, "release_pages", lambda self, upto=None: calls.append(upto) or real(self, upto))
        for _ in pd.records():
            pass
        assert _mapped_kb(path) < size_kb // 8, size_kb
        assert calls[-1] is None and len(calls) > 1  # as the pass goes (every RELEASE_BYTES), and at its end
