"""perf's --time / --pid / --tid syntax (tools/perf/util/time-utils.c, intlist) as ptexport parses it."""

from __future__ import annotations

import pytest

from ptexport.errors import UsageError
from ptexport.decoder.filters import TscRanges
from ptexport.samples.filters import TimeRange, parse_id_list, parse_time_ranges, time_mask
from ptexport.sideband.timeconv import TimeConversion


def test_parse_time_ranges_as_perf():
    assert parse_time_ranges("3500.5,3501") == [TimeRange(3_500_500_000_000, 3_501_000_000_000)]
    assert parse_time_ranges(",1.000000001") == [TimeRange(0, 1_000_000_001)]
    assert parse_time_ranges("2.25,") == [TimeRange(2_250_000_000, 0)]
    assert parse_time_ranges("1,2 3,4") == [TimeRange(10**9, 2 * 10**9), TimeRange(3 * 10**9, 4 * 10**9)]
    for bad in ("1.0000000001,2", "2,1", "1,2 2,3", "abc,1", "1", "1,2,3"):
        with pytest.raises(UsageError):
            parse_time_ranges(bad)
    # perf's percent slices of first..last sample time (set_percent_time: ends drop 1 ns unless at the last)
    st = (1000, 2000)
    assert parse_time_ranges("10%/2", st) == [TimeRange(1100, 1199)]
    assert parse_time_ranges("0%-10%,30%-40%", st) == [TimeRange(1000, 1099), TimeRange(1300, 1399)]
    assert parse_time_ranges("90%-100%", st) == [TimeRange(1900, 2000)]
    with pytest.raises(UsageError):
        parse_time_ranges("10%/2", None)  # no first/last sample time in the header
    with pytest.raises(UsageError):
        parse_time_ranges("50%", st)
    assert parse_id_list("1,2, 3", "pid") == frozenset({1, 2, 3})
    with pytest.raises(UsageError):
        parse_id_list("x", "tid")
    keep = time_mask([0, 5, 10, 15, 20, 25], [TimeRange(5, 10), TimeRange(20, 0)])
    assert keep.tolist() == [True, True, True, False, True, True]


def test_tsc_ranges_convert_back_to_the_same_perf_times():
    """perf's intel_pt_tsc_start/end: the first TSC at or after the start, the last at or before the end."""
    tc = TimeConversion(time_shift=31, time_mult=1789569706, time_zero=12345)
    r = TscRanges.from_ranges([TimeRange(10**9 + 7, 2 * 10**9 + 3)], tc)
    s, e = r.starts[0], r.ends[0]
    assert tc.tsc_to_perf_time(s) >= 10**9 + 7 > tc.tsc_to_perf_time(s - 1)
    assert tc.tsc_to_perf_time(e) <= 2 * 10**9 + 3 < tc.tsc_to_perf_time(e + 1)
