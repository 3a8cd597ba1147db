"""Issue #4 bad input on perf.data: seeded corruption of the AUX data, decoded by ptexport and by perf 6.1.

tests/decoder/test_perffast.py damages AUX buffers in memory and compares our two decoders; here the damage is
written into the perf.data file (bytes flipped, PAD runs, short runs of garbage, all inside AUXTRACE
payloads, so the file stays well formed) and ``dump branches --itrace=be`` must equal perf's output line
for line (perf's recovery: error records at the same offsets, decoding resumed at the next IP packet), with
no traceback and within a time limit (no hang); a wrong CPU model in the header (other errata) too.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys

import pytest

from ptxtest import first_difference as _diff, damage_aux as _damage, collapse_lines as _collapse, needs_perf
from ptexport.cli import main
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import RecordType as RT

_FIELDS = ["-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"]
# Several seeds leave the decoder's estimated TSC apart from its last timestamp after an error: perf dates the
# next "tr strt" (from nowhere into user space) by the estimate (est_tsc, on for every timed session).
SEEDS = range(12)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("base")
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--branches", "15000",
                 "--timing", "cyc", "--psb-period", "2048", "--seed", "17"], out=io.StringIO()) == 0
    data = (d / "perf.data").read_bytes()
    with open_perf_data(d / "perf.data") as pd:
        spans = [(r.data_offset, r.size) for r in pd.records(types=(RT.AUXTRACE,))]
    assert spans
    return d, data, spans


def _perf(path) -> list[str]:
    r = subprocess.run(["perf", "script", "-i", str(path), "--itrace=be", *_FIELDS], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        pytest.skip(f"perf itself fails on this damage ({r.returncode}): {r.stderr[-300:]}")
    return _collapse(r.stdout)


def _ours(path) -> list[str]:
    r = subprocess.run([sys.executable, "-c", "from ptexport.cli import entry; entry()", "dump", "branches",
                        str(path), "--itrace=be"], capture_output=True, text=True, timeout=300)  # no hang
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return _collapse(r.stdout)


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("seed", SEEDS)
def test_damaged_aux_equals_perf(base, tmp_path, seed):
    d, data, spans = base
    path = tmp_path / "perf.data"
    path.write_bytes(_damage(data, spans, random.Random(seed)))
    theirs = _perf(path)
    mine = _ours(path)
    assert mine == theirs, _diff(mine, theirs)


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("cpuid", ["GenuineIntel,6,92,9", "GenuineIntel,6,133,0", "AuthenticAMD,23,49,0"])
def test_wrong_cpu_model_in_the_header_equals_perf(base, tmp_path, cpuid):
    """perf.data's CPUID feature names the CPU whose errata perf's decoder applies: a different model."""
    d, data, _ = base
    with open_perf_data(d / "perf.data") as pd:
        old = pd.features["cpuid"]
    assert old.encode() in data
    new = cpuid.ljust(len(old), "\0")[: len(old)] if len(cpuid) <= len(old) else None
    if new is None:
        pytest.skip("the replacement CPUID string must fit in place")
    path = tmp_path / "perf.data"
    path.write_bytes(data.replace(old.encode(), new.encode(), 1))
    with open_perf_data(path) as pd:
        assert pd.features["cpuid"].rstrip("\0") == cpuid
    theirs = _perf(path)
    mine = _ours(path)
    assert theirs
    assert mine == theirs, _diff(mine, theirs)
