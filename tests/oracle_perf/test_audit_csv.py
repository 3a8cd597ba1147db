"""Issue #4 item 4: ``dump branches --csv`` (header, then time,cpu,pid,tid,ip,addr,flags with time in perf's
nanoseconds and flags as perf's bit values) row for row against perf 6.1's own text output.

The other CSV tests check the VM columns and the event-trace kinds; here every row of traces with two CPUs,
threads, returns/calls and decoder errors is parsed from ``perf script --itrace=be|cr -F
pid,tid,cpu,time,ip,addr,flags --ns`` and compared with the CSV row: numbers equal, and the flag bits
spelled by perf's flag names are perf's text.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess

import pytest

from ptxtest import needs_perf
from ptexport.cli import main
from ptexport.samples.flags import format_flags

SAMPLE = re.compile(r"^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d{9}):\s+(.*?)\s*([0-9a-f]+) =>\s+([0-9a-f]+)\s*$")
ERROR = re.compile(r"^\s*instruction trace error type \d+ time (\d+)\.(\d{9}) cpu (-?\d+) pid (-?\d+) tid (-?\d+) "
                   r"ip (0x[0-9a-f]+) code \d+: (.*?)\s*$")

TRACES = {
    "threads-2cpus-ovf": ("--program", "threads", "--cpus", "2", "--ovf", "3", "--timing", "cyc"),
    "forkexec-corrupt": ("--program", "forkexec", "--cpus", "2", "--corrupt", "2", "--psb-period", "1024"),
}


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("itrace", ["be", "cr"])
@pytest.mark.parametrize("trace", sorted(TRACES))
def test_csv_rows_equal_perf_text(tmp_path, trace, itrace):
    assert main(["synth", "--out", str(tmp_path), "--branches", "20000", "--seed", "13", *TRACES[trace]],
                out=io.StringIO()) == 0
    data = str(tmp_path / "perf.data")
    perf = subprocess.run(["perf", "script", "-i", data, f"--itrace={itrace}", "-F", "pid,tid,cpu,time,ip,addr,flags",
                           "--ns"], capture_output=True, text=True, check=True).stdout.splitlines()
    out = io.StringIO()
    assert main(["dump", "branches", data, f"--itrace={itrace}", "--csv"], out=out) == 0
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0][:7] == ["time", "cpu", "pid", "tid", "ip", "addr", "flags"]
    rows = rows[1:]
    lines = [line for line in perf if line.strip()]
    assert len(rows) == len(lines)
    errors = 0
    for row, line in zip(rows, lines):
        t, cpu, pid, tid, ip, addr, flags = (int(v) for v in row[:7])
        m = SAMPLE.match(line)
        if m is None:
            e = ERROR.match(line)
            assert e, line
            errors += 1
            assert (t, cpu, pid, tid, ip) == (int(e[1]) * 10**9 + int(e[2]), int(e[3]), int(e[4]), int(e[5]),
                                              int(e[6], 16)), (row, line)
            assert row[-1] == e[7], (row, line)
            continue
        assert (pid, tid, cpu) == (int(m[1]), int(m[2]), int(m[3])), (row, line)
        assert t == int(m[4]) * 10**9 + int(m[5]), (row, line)  # perf's nanoseconds, exactly
        assert (ip, addr) == (int(m[7], 16), int(m[8], 16)), (row, line)
        assert " ".join(format_flags(flags).split()) == " ".join(m[6].split()), (row, line)
    if itrace == "be":
        assert errors > 0  # the trace's faults show as error rows
