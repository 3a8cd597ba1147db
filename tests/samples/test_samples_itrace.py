"""--itrace parsing: perf 6.1's grammar, defaults and errors (checked against perf itself)."""

from __future__ import annotations

import subprocess

import pytest

from ptexport.errors import UsageError
from ptexport.samples.flags import IpFlag
from ptexport.samples.itrace import (
    DEFAULT_PERIOD,
    ItraceOptions,
    PeriodType,
    export_default,
    parse_itrace,
    perf_default,
)
from ptxtest import needs_perf

ACCEPTED = [
    "ce", "cewpxo", "be", "ibxwpe", "I", "Z", "A", "i10us", "i1i", "i100t", "i10ms", "e+o",
    "d+a", "qq", "g32", "l64", "s5", "i10", "ce,", "c,e", "c e", "r", "p", "e-l+o", "d",
    "i 10 us", "i,10,us", "g 8", "M", "f", "iZ", "e+z", "ii", "s0", "s-1", "s+3", "s 3", "g",
    "l1024", "G", "L8", "i0ns", "i0", "", "qqq", "d+e-o", "e+ o", "e +o", "e+o+l", "i10usi",
    "i10 us", "i99999999999999999999", "g4294967297", "cr", "bc", "x", "w", "o", "i0nss1000000",
]
REJECTED = [
    "y", "iy", "T", "i10n", "s", "g0", "g1025", "i10x", "e+", "e+O", "k", "i10 b", "i5i5i",
    "l1025", "i10u", "g-1", "l 0", "e-", "i10m", "d+1", "s x", "g18446744073709551616000",
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_accepts_what_perf_accepts(text):
    assert parse_itrace(text).set


@pytest.mark.parametrize("text", REJECTED)
def test_rejects_what_perf_rejects(text):
    with pytest.raises(UsageError, match=r"^Bad Instruction Tracing options '"):
        parse_itrace(text)


@needs_perf
def test_acceptance_matches_perf_61():
    # perf parses --itrace before it opens the input: 129 = bad option, 255 = no file.
    for text in ACCEPTED + REJECTED:
        rc = subprocess.run(
            ["perf", "script", f"--itrace={text}", "-i", "/nonexistent/perf.data"],
            capture_output=True,
        ).returncode
        try:
            parse_itrace(text)
            ours = 255
        except UsageError:
            ours = 129
        assert (text, ours) == (text, rc)


def test_letters_set_the_sample_kinds():
    o = parse_itrace("bxwpoIe")
    assert (o.branches, o.transactions, o.ptwrites, o.pwr_events, o.other_events, o.intr_events, o.errors) == (
        True,
    ) * 7
    assert not (o.instructions or o.calls or o.returns)
    c = parse_itrace("c")
    assert c.branches and c.calls and not c.returns
    r = parse_itrace("r")
    assert r.branches and r.returns


def test_periods_and_units():
    assert (parse_itrace("i").period, parse_itrace("i").period_type) == (DEFAULT_PERIOD, PeriodType.NANOSECS)
    assert (parse_itrace("i10us").period, parse_itrace("i10us").period_type) == (10_000, PeriodType.NANOSECS)
    assert parse_itrace("i10ms").period == 10_000_000
    assert parse_itrace("i3ns").period == 3
    assert (parse_itrace("i1i").period, parse_itrace("i1i").period_type) == (1, PeriodType.INSTRUCTIONS)
    assert parse_itrace("i100t").period_type == PeriodType.TICKS
    o = parse_itrace("i10")  # number without unit: period kept, default type
    assert (o.period, o.period_type) == (10, PeriodType.NANOSECS)
    o = parse_itrace("i0nss1000000")
    assert (o.period, o.initial_skip) == (0, 1_000_000)
    assert parse_itrace("i99999999999999999999").period == (1 << 64) - 1


def test_sizes_flags_skip_quick():
    assert parse_itrace("g").callchain_sz == 16 and parse_itrace("g").callchain
    assert parse_itrace("G32").add_callchain and parse_itrace("G32").callchain_sz == 32
    assert parse_itrace("l").last_branch_sz == 64
    assert parse_itrace("L8").add_last_branch and parse_itrace("L8").last_branch_sz == 8
    assert parse_itrace("g4294967297").callchain_sz == 1  # C truncates to unsigned int
    o = parse_itrace("e-o+l")
    assert o.errors and o.error_minus == {"o"} and o.error_plus == {"l"}
    d = parse_itrace("d+e-o")
    assert d.log and d.log_plus == {"e"} and d.log_minus == {"o"}
    assert parse_itrace("s-1").initial_skip == (1 << 64) - 1
    assert parse_itrace("s 7").initial_skip == 7
    assert parse_itrace("qqq").quick == 3
    assert parse_itrace("AZ").approx_ipc and parse_itrace("AZ").timeless_decoding


def test_error_message_says_where():
    with pytest.raises(UsageError) as e:
        parse_itrace("bey")
    assert str(e.value) == "Bad Instruction Tracing options 'bey' (at character 3: unknown option 'y')"
    with pytest.raises(UsageError, match="call chain size must be 1..1024"):
        parse_itrace("g0")
    assert UsageError.exit_code == 2


def test_defaults():
    d = perf_default()
    assert d == parse_itrace(None)
    assert d.branches and d.calls and d.errors and d.pwr_events and d.ptwrites and d.transactions
    assert not d.instructions and not d.returns
    assert (d.period, d.period_type) == (1, PeriodType.INSTRUCTIONS)
    r = perf_default(no_sample=False)
    assert r.instructions and not r.calls and (r.period, r.period_type) == (DEFAULT_PERIOD, PeriodType.NANOSECS)
    e = export_default()
    assert e.branches and e.errors and e.pwr_events and not e.calls and e.branches_filter == 0
    assert parse_itrace(None, unset=True).dont_decode
    assert ItraceOptions().set is False


def test_branches_filter_like_intel_pt():
    assert parse_itrace("b").branches_filter == 0
    assert parse_itrace("c").branches_filter == IpFlag.CALL | IpFlag.ASYNC | IpFlag.TRACE_END
    assert parse_itrace("r").branches_filter == IpFlag.RETURN | IpFlag.TRACE_BEGIN
    assert parse_itrace("bc").branches_filter == parse_itrace("c").branches_filter


def test_letters_round_trip():
    for text in ["bep", "ce", "i10usg8e+o", "rxwpoI", "cr", "d+as5qq", "ifmtaMAZ"]:
        o = parse_itrace(text)
        assert parse_itrace(o.letters()) == o


@pytest.mark.slow
@needs_perf
def test_random_strings_accepted_or_rejected_like_perf():
    import random

    alpha = list("ibcrxwpoIedfmtaMgGlLsqAZ0123456789 ,+-nusyTk")
    rng = random.Random(2026)
    for _ in range(150):
        text = "".join(rng.choice(alpha) for _ in range(rng.randint(1, 7)))
        rc = subprocess.run(["perf", "script", f"--itrace={text}", "-i", "/nonexistent/perf.data"],
                            capture_output=True).returncode
        try:
            parse_itrace(text)
            ours = 255
        except UsageError:
            ours = 129
        assert (text, ours) == (text, rc)
