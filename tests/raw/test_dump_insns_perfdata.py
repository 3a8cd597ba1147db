"""``ptexport dump insns PERF.DATA``: the libipt-style flow of each AUX queue of a recording.

The generated recordings in sample_data/ come with the emulator's ground truth
(every executed instruction with its CPU), so the flow must equal it exactly:
code found through the MMAP2 records, address spaces switched at
ITRACE_START/SWITCH_CPU_WIDE, fork and exec followed.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from ptxtest import REPO, slow_after
from ptexport.cli import main

SAMPLES = REPO / "sample_data"
IP_RE = re.compile(r"^(?:\? )?([0-9a-f]{16})$")


def _flow(perf_data) -> tuple[dict[int, list[int]], list[str]]:
    out = io.StringIO()
    assert main(["dump", "insns", str(perf_data)], out) == 0
    cur = None
    got: dict[int, list[int]] = {}
    errors = []
    for line in out.getvalue().splitlines():
        m = re.match(r"^\[cpu (\d+)\]$", line)
        if m:
            cur = int(m.group(1))
            got.setdefault(cur, [])
            continue
        m = IP_RE.match(line)
        if m:
            got[cur].append(int(m.group(1), 16))
        elif "error" in line:
            errors.append(line)
    return got, errors


@pytest.mark.parametrize("name", slow_after(["loops", "threads", "forkexec"]))
def test_flow_equals_ground_truth(name):
    d = SAMPLES / name
    if not (d / "perf.data").exists():
        pytest.skip(f"{d} not present")
    got, errors = _flow(d / "perf.data")
    assert errors == []
    truth = np.load(d / "truth_insns.npz")
    cpus = sorted(set(truth["cpu"].tolist()))
    assert sorted(got) == cpus
    for cpu in cpus:
        want = truth["ip"][truth["cpu"] == cpu].tolist()
        assert len(got[cpu]) == len(want)
        assert got[cpu] == want


def test_missing_objects_give_error_records(tmp_path):
    import shutil

    src = SAMPLES / "loops" / "perf.data"
    if not src.exists():
        pytest.skip("sample_data/loops not present")
    shutil.copy(src, tmp_path / "perf.data")          # without the ELF next to it
    out = io.StringIO()
    assert main(["dump", "insns", str(tmp_path / "perf.data"), "--buildid-dir",
                 str(tmp_path / "nocache")], out) == 0
    lines = out.getvalue().splitlines()
    assert any("error: no memory mapped at this address" in x for x in lines)
    assert not any(IP_RE.match(x) for x in lines)


def test_real_recording_without_binaries_reports_errors(quipper):
    """quipper's Skylake recording: its objects are not here, so every PSB+ ends in a
    'no memory mapped' record with its offset - and no traceback, every CPU listed."""
    out = io.StringIO()
    assert main(["dump", "insns", str(quipper), "--cpu", "6/78"], out) == 0
    lines = out.getvalue().splitlines()
    cpus = [x for x in lines if re.match(r"^\[cpu \d+\]$", x)]
    assert len(cpus) >= 2
    errors = [x for x in lines if ": error: " in x]
    assert errors and all(re.match(r"^\[[0-9a-f]+, [0-9a-f]+: error: ", x) for x in errors)
    assert all("no memory mapped" in x or "does not match" in x or "context" in x
               or "compressed return" in x for x in errors)


def test_objects_found_through_the_build_id_cache(tmp_path):
    """Without the ELF beside perf.data, perf's build-id cache layout still finds it."""
    import os
    import shutil

    from ptexport.images.lookup import elf_build_id

    d = SAMPLES / "loops"
    if not (d / "perf.data").exists():
        pytest.skip("sample_data/loops not present")
    shutil.copy(d / "perf.data", tmp_path / "perf.data")
    bid = elf_build_id(str(d / "loops"))
    entry = tmp_path / "cache" / "loops" / bid
    entry.mkdir(parents=True)
    shutil.copy(d / "loops", entry / "elf")
    (tmp_path / "cache" / ".build-id" / bid[:2]).mkdir(parents=True)
    os.symlink(entry, tmp_path / "cache" / ".build-id" / bid[:2] / bid[2:])
    out = io.StringIO()
    assert main(["dump", "insns", str(tmp_path / "perf.data"), "--buildid-dir",
                 str(tmp_path / "cache"), "--quiet", "--stat"], out) == 0
    truth = np.load(d / "truth_insns.npz")
    assert out.getvalue().splitlines() == ["[cpu 0]", f"insn: {len(truth['ip'])}."]
