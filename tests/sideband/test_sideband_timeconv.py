"""TSC <-> perf time conversion against perf 6.1's own numbers for the quipper recording."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptexport.sideband.timeconv import TimeConversion

DATA = Path(__file__).parent / "data"

# perf script -D on perf.data.intel_pt-4.14: TIME_CONV and AUXTRACE_INFO carry the same clock.
QUIPPER_TC = TimeConversion(time_shift=31, time_mult=1789569706, time_zero=18446744041015200657)


def _perf_pairs():
    rows = []
    for line in (DATA / "quipper_time_tsc.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        rtype, cpu, time, tsc = line.split()
        rows.append((int(rtype), int(cpu), int(time), int(tsc, 16)))
    return rows


def test_perf_time_to_tsc_matches_perf_for_every_quipper_record():
    pairs = _perf_pairs()
    assert len(pairs) == 192  # all timed records perf logged (intel_pt.log, --itrace=d)
    for _type, _cpu, time, tsc in pairs:
        assert QUIPPER_TC.perf_time_to_tsc(time) == tsc, time


def test_vectorised_matches_scalar():
    pairs = _perf_pairs()
    times = np.array([p[2] for p in pairs], dtype=np.uint64)
    tscs = QUIPPER_TC.perf_time_to_tsc_array(times)
    assert tscs.tolist() == [p[3] for p in pairs]
    back = QUIPPER_TC.tsc_to_perf_time_array(tscs)
    assert back.tolist() == [QUIPPER_TC.tsc_to_perf_time(int(t)) for t in tscs]


def test_round_trip_loses_at_most_one_nanosecond():
    # TSC runs at 1.2 GHz here: perf time -> tsc truncates, tsc -> perf time truncates again.
    for _type, _cpu, time, tsc in _perf_pairs():
        back = QUIPPER_TC.tsc_to_perf_time(tsc)
        assert time - 1 <= back <= time
        # and the next TSC tick is past the time
        assert QUIPPER_TC.tsc_to_perf_time(tsc + 1) >= time


def test_auxtrace_reference_is_a_tsc():
    # AUXTRACE 'ref' is the rdtsc() value perf took when it copied the buffer; it falls
    # shortly after the last record on that CPU (AUX at 641258037956 on cpu 0).
    t = QUIPPER_TC.tsc_to_perf_time(0xBC4CD519A6)
    assert 641258037956 < t < 641258037956 + 10_000_000


def test_known_value_by_hand():
    # 0xbc4cacb751 = 808876963665: quot = 376, rem = 1432419153
    tsc = 0xBC4CACB751
    quot, rem = tsc >> 31, tsc & ((1 << 31) - 1)
    expect = (18446744041015200657 + quot * 1789569706 + ((rem * 1789569706) >> 31)) % 2**64
    assert QUIPPER_TC.tsc_to_perf_time(tsc) == expect == 641255848110


def test_cap_user_time_short_widens_the_counter():
    # A 32-bit counter (time_mask) that wrapped: time_cycles holds the full value at the
    # last update; a short value is widened relative to it before conversion.
    base = TimeConversion(time_shift=10, time_mult=1000, time_zero=0)
    short = TimeConversion(
        time_shift=10, time_mult=1000, time_zero=0,
        time_cycles=0x5_0000_0000, time_mask=0xFFFF_FFFF, cap_user_time_short=True,
    )
    full = 0x5_0000_1234
    assert short.tsc_to_perf_time(full & 0xFFFF_FFFF) == base.tsc_to_perf_time(full)
    assert short.tsc_to_perf_time(full) == base.tsc_to_perf_time(full)
    arr = short.tsc_to_perf_time_array(np.array([full & 0xFFFF_FFFF, full], dtype=np.uint64))
    assert arr.tolist() == [base.tsc_to_perf_time(full)] * 2


def test_wrapping_is_u64_like_c():
    tc = TimeConversion(time_shift=0, time_mult=3, time_zero=2**64 - 5)
    assert tc.tsc_to_perf_time(2) == 1  # -5 + 6 wraps to 1
    assert tc.perf_time_to_tsc(1) == 2


def test_from_records_and_validation():
    class Rec:
        time_shift, time_mult, time_zero = 31, 1789569706, -32694350959

    tc = TimeConversion.from_time_conv(Rec())
    assert tc.time_zero == 18446744041015200657 and not tc.cap_user_time_short
    assert TimeConversion.from_auxtrace_info(Rec()).source == "AUXTRACE_INFO"
    with pytest.raises(ValueError):
        TimeConversion(time_shift=31, time_mult=0, time_zero=0)
