"""perf parity of the perf-mode decoder: our samples equal perf 6.1's, line for line.

Generated traces come from ``ptexport synth`` (real programs emulated, encoded
as Intel PT); perf decodes the same file.  The quipper recording is a real
Skylake trace whose binaries are missing, so it checks the packet-level state
machine, error recovery, timestamps and thread attribution.
"""

from __future__ import annotations

import io
import re
import subprocess

import pytest

from ptxtest import needs_perf
from ptexport.cli import main

_ERR = re.compile(r"instruction trace error type 1 time (\S+) cpu (-?\d+) pid (-?\d+) tid (-?\d+) ip (\S+) code (\d+): (.*)")
_BR = re.compile(r"(-?\d+)/(-?\d+)\s+\[(-?\d+)\]\s+(\S+):\s+(.*?)\s+([0-9a-f]+) =>\s+([0-9a-f]+)$")


def parse_script(text: str) -> list[tuple]:
    """perf script -F pid,tid,cpu,time,ip,addr,flags --ns lines -> comparable tuples."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _ERR.match(line)
        if m:
            out.append(("error", m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5], 16), int(m[6])))
            continue
        m = _BR.match(line)
        if m:
            out.append(("branch", m[4], int(m[3]), int(m[1]), int(m[2]), " ".join(m[5].split()),
                        int(m[6], 16), int(m[7], 16)))
    return out


def perf_script(path, itrace: str = "be") -> list[tuple]:
    proc = subprocess.run(
        ["perf", "script", "-i", str(path), f"--itrace={itrace}", "-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"],
        capture_output=True, text=True, check=True,
    )
    return parse_script(proc.stdout)


def ours(path, itrace: str = "be") -> list[tuple]:
    out = io.StringIO()
    assert main(["dump", "branches", str(path), f"--itrace={itrace}"], out=out) == 0
    return parse_script(out.getvalue())


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    made = {}

    def make(program: str, *extra: str):
        key = (program, extra)
        if key not in made:
            d = tmp_path_factory.mktemp(f"synth-{program}")
            assert main(["synth", "--out", str(d), "--program", program, "--branches", "20000", *extra],
                        out=io.StringIO()) == 0
            made[key] = d / "perf.data"
        return made[key]

    return make


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("program", ["loops", "calls", "threads"])
def test_generated_branches_equal_perf(generated, program):
    path = generated(program)
    theirs = perf_script(path)
    assert len(theirs) > 20000
    assert ours(path) == theirs


@needs_perf
def test_quipper_branches_and_errors(quipper):
    theirs = perf_script(quipper)
    mine = ours(quipper)
    # The real recording also has 'cycles' samples perf prints with cpu -1; ours lists
    # only what the trace decoder synthesizes.
    theirs = [t for t in theirs if not (t[0] == "branch" and t[2] == -1)]
    assert [t for t in mine if t[0] == "branch"] == [t for t in theirs if t[0] == "branch"]
    assert len([t for t in theirs if t[0] == "branch"]) == 619
    perf_errors = [t for t in theirs if t[0] == "error"]
    our_errors = [t for t in mine if t[0] == "error"]
    assert len(perf_errors) == 114
    # perf reports an unreadable object's first two failed reads, but only one for
    # the kernel (its 'cycles' samples made perf script fetch an instruction there
    # first), ld.so and the main binary (the [vdso] mmap probed their ELF class).
    assert our_errors == perf_errors
    assert mine == theirs


def test_quipper_count_matches_lines(quipper):
    out = io.StringIO()
    assert main(["dump", "branches", str(quipper), "--count"], out=out) == 0
    assert out.getvalue().strip() == "619 samples, 114 errors"


def test_bad_trace_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "perf.data"
    bad.write_bytes(b"PERFILE2" + b"\x00" * 20)
    assert main(["dump", "branches", str(bad)]) != 0
    err = capsys.readouterr().err
    assert "ptexport: error:" in err and "Traceback" not in err


def _collapse(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("itrace", ["cr", "i1i", "p", "bep"])
@pytest.mark.parametrize("program", ["calls", "threads"])
def test_generated_itrace_kinds_equal_perf_text(generated, program, itrace):
    """Whole output of each --itrace kind, line for line (runs of blanks aside)."""
    path = generated(program)
    proc = subprocess.run(
        ["perf", "script", "-i", str(path), f"--itrace={itrace}", "-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"],
        capture_output=True, text=True, check=True,
    )
    out = io.StringIO()
    assert main(["dump", "branches", str(path), f"--itrace={itrace}"], out=out) == 0
    theirs, mine = _collapse(proc.stdout), _collapse(out.getvalue())
    assert len(theirs) > 0
    assert mine == theirs
