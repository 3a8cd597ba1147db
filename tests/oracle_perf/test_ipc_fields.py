"""``ptexport dump branches -F FIELDS`` equals ``perf script -F FIELDS --ns`` (issue #14: the ipc field).

perf 6.1 appends `` \\t IPC: I.FF (insns/cycles) `` to a branch sample with both counts non-zero,
I.FF being insns*100/cycles in whole hundredths (cut, not rounded).  On CYC-timed traces (a CYC
threshold, a CBR below the max non-turbo ratio so IPCs vary) ours equals perf's line for line for
the full field list with ipc, for the default fields (no -F), for subsets in any order, with
``--jobs`` 1 and 2, errors included.  An unknown field name is one usage line and exit 2.
"""

from __future__ import annotations

import io
import re
import subprocess

import pytest

from oracle_perf.test_ipc_cyc_threshold import synth
from ptexport.cli import main
from ptxtest import needs_perf, slow_after

pytestmark = needs_perf

DEFAULT = "pid,tid,cpu,time,ip,addr,flags"
IPC = DEFAULT + ",ipc"
TRACES = {  # id -> ptexport synth options (all CYC-timed), branches
    "calls": ("--program calls --cyc-thresh 2 --mtc-period 3 --psb-period 4096 --cbr 18", "80k"),
    # two CPUs, preemption and overflow errors: error lines between the samples
    "threads-ovf": ("--program threads --cpus 2 --preempt 500 --cyc-thresh 2 --cbr 30 --ovf 3", "50k"),
}
_IPC = re.compile(r" \t IPC: (\d+)\.(\d\d) \((\d+)/(\d+)\) $")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = {}
    for name, (opts, branches) in TRACES.items():
        d = tmp_path_factory.mktemp(name)
        synth(d, opts, branches)
        out[name] = str(d / "perf.data")
    return out


def _perf(data: str, fields: str) -> list[str]:
    r = subprocess.run(["perf", "script", "--itrace=be", "-F", fields, "--ns", "-i", data],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-500:]
    return r.stdout.splitlines()


def _ours(data: str, *opts: str) -> list[str]:
    out = io.StringIO()
    assert main(["dump", "branches", "--itrace=be", *opts, data], out=out) == 0
    return out.getvalue().splitlines()


def _first_diff(got: list[str], want: list[str]) -> str:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"line {i}: ours {a!r} perf {b!r}"
    return f"lengths: ours {len(got)} perf {len(want)}"


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("trace", list(TRACES))
def test_ipc_field_equals_perf(traces, trace, jobs):
    want = _perf(traces[trace], IPC)
    got = _ours(traces[trace], "-F", IPC, "--jobs", jobs)
    assert got == want, _first_diff(got, want)
    ipcs = [m for m in map(_IPC.search, want) if m]
    errors = sum("instruction trace error" in line for line in want)
    cut = sum(f"{int(m[3]) / int(m[4]):.2f}" != f"{m[1]}.{m[2]}" for m in ipcs)  # rounding would differ
    print(f"\n{trace} jobs {jobs}: {len(want)} lines, {len(ipcs)} with IPC, {cut} cut not rounded, "
          f"{errors} errors")
    assert len(want) >= 50_000
    assert len(ipcs) > 1500 and cut > 100
    assert len({m[1] + m[2] for m in ipcs}) > 5  # IPCs vary (not all 1.00)
    assert errors > 0 if trace == "threads-ovf" else errors == 0


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_default_fields_unchanged(traces, jobs):
    data = traces["calls"]
    want = _perf(data, DEFAULT)
    got = _ours(data, "--jobs", jobs)
    assert got == want, _first_diff(got, want)
    assert not any("IPC" in line for line in got)
    assert _ours(data, "-F", DEFAULT, "--jobs", jobs) == got


@pytest.mark.parametrize("fields", slow_after(["tid,pid,ip,addr,flags,ipc,time,cpu", "tid,time,ip", "ip,addr", "time,addr",
                                    "cpu,ip,flags,ipc", "tid,flags,addr", "time,ipc", "ipc", "flags,ipc",
                                    "flags", "pid,tid"]))
def test_field_subsets_equal_perf(traces, fields):
    data = traces["threads-ovf"]
    want = _perf(data, fields)
    got = _ours(data, "-F", fields)
    assert got == want, _first_diff(got, want)
    assert any("instruction trace error" in line for line in got)


@pytest.mark.parametrize("fields", ["pid,bogus", "", "pid,,tid", "sym"])
def test_unknown_field_is_a_usage_error(traces, capsys, fields):
    assert main(["dump", "branches", "-F", fields, traces["calls"]], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ptexport: error: -F") and "Traceback" not in err


def test_fields_with_csv_is_a_usage_error(traces, capsys):
    assert main(["dump", "branches", "-F", IPC, "--csv", traces["calls"]], out=io.StringIO()) == 2
    assert "not allowed with" in capsys.readouterr().err
