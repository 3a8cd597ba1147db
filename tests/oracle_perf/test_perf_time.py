"""perf's timestamp semantics (PerfTime) against perf's own decoder log on the quipper recording.

``perf script --itrace=bd`` writes intel_pt.log with every packet (offset in
its AUX buffer) and a "Setting timestamp to 0x..." line for each TSC/MTC
that moves the time; every one of those must equal PerfTime's value.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from ptxtest import needs_perf
from ptexport.pt.packets import PacketKind as K, iter_packets
from ptexport.pt.time import PerfTime, tsc_8b

try:
    from ptexport.perfdata import AuxtraceRecord, open_perf_data
except ImportError:  # pragma: no cover
    pytest.skip("ptexport.perfdata is not available yet", allow_module_level=True)


def perf_log_timestamps(trace, tmp_path) -> dict[tuple[int, int], int]:
    subprocess.run(["perf", "script", "-i", str(trace), "--itrace=bd"], cwd=tmp_path,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=True)
    ref: dict[tuple[int, int], int] = {}
    queue = last = None
    with open(tmp_path / "intel_pt.log") as f:
        for line in f:
            m = re.match(r"queue (\d+) (?:decoding|getting)", line)
            if m:
                queue = int(m.group(1))
                continue
            m = re.match(r"  ([0-9a-f]{8}):  .*?(TSC|MTC) 0x", line)
            if m:
                last = (queue, int(m.group(1), 16))
                continue
            m = re.match(r"Setting timestamp to (0x[0-9a-f]+)", line)
            if m and last is not None:
                ref[last] = int(m.group(1), 16)
            last = None
    return ref


@needs_perf
def test_perf_timestamps_match_perf_decoder_log(quipper, tmp_path):
    want = perf_log_timestamps(quipper, tmp_path)
    assert len(want) == 2826  # 24 TSC + 2802 MTC
    got = {}
    with open_perf_data(quipper) as pd:
        info = pd.auxtrace_info
        shift = next(info.config_terms(a.config)["mtc_period"] for a in pd.attrs
                     if a.type == info.pmu_type)
        for rec in pd.records():
            if not isinstance(rec, AuxtraceRecord):
                continue
            t = PerfTime(info.tsc_ctc_ratio_n, info.tsc_ctc_ratio_d, shift, rec.reference)
            for p in iter_packets(pd.aux_data(rec)):
                if p.kind == K.TSC:
                    got[(rec.cpu, p.offset)] = t.update_tsc(p.p0)
                elif p.kind == K.TMA:
                    t.update_tma(p.p0, p.p1)
                elif p.kind == K.MTC:
                    got[(rec.cpu, p.offset)] = t.update_mtc(p.p0)
    assert got == want


def test_perf_time_units():
    t = PerfTime(100, 2, 3, ref_timestamp=0xBC4CD519A6)
    assert t.update_tsc(0xBC4CD2CFE8) == 0xBC4CD2CFE8
    t.update_tma(0xB23C, 0x30)
    assert t.ctc_timestamp == 0xBC4CD2CEF0 and t.last_mtc == 0x47
    assert t.update_mtc(0x48) == 0xBC4CD2D080
    assert t.update_mtc(0x47) == 0xBC4CD2D080 + 255 * 8 * 50  # wraps: 255 MTC periods on
    # a TSC a little behind is suppressed; far behind is a 56-bit wraparound
    assert t.update_tsc(0xBC4CD2D080 + 255 * 400 - 5) == 0xBC4CD2D080 + 255 * 400
    assert tsc_8b(0x10, 0x00FF_FFFF_FFFF_FFF0) == 0x0100_0000_0000_0010
    # without a TMA an MTC does not move time
    u = PerfTime(3, 2, 0)
    u.update_tsc(1000)
    assert u.update_mtc(5) == 1000
