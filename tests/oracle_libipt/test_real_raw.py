"""Real raw Intel PT dumps from other tools, against the reference output shipped beside them.

- libxdc-* (kAFL/Nyx inside VMs: VMCS/PIP, 32-bit code, an Ice Lake kernel trace): `dump packets --raw
  --no-pad --lastip` equals libipt's ptdump output line for line; `dump insns --raw` (no code images
  are carried) runs to the end with errors as lines.
- simplept-adl (2 MiB Alder Lake ring buffer): the packet histogram of its PROVENANCE.md; the
  instruction flow runs to the end.
- dynamorio-drpt2trace (raw AUX + perf_event sideband files): with its sideband options and a `hello`
  of our own at the recorded address (the original binary is not carried), the flow is the 8
  instructions of the expected drpt2trace output (+0 .. +37 from 0x401000).  This exercises the
  pevent reader on perf tool records (no sample_id), MMAP2 file names and --pevent:sysroot.
"""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
from collections import Counter

import pytest

from ptxtest import TESTDATA
from ptexport.cli import main

REAL = TESTDATA / "real"
XDC = sorted(p for p in REAL.glob("libxdc-*") if p.is_dir()) if REAL.exists() else []
# the biggest dumps (more than 3 s each): only in the default run, not in the quick loop (-m "not slow")
XDC_CASES = [pytest.param(d, marks=pytest.mark.slow) if d.name in ("libxdc-qemu", "libxdc-mruby") else d for d in XDC]


def _trace(d):
    return next(p for p in sorted(d.iterdir()) if p.name not in ("SOURCE.txt", "ptdump.counts", "ptdump.txt.gz"))


def _run(argv) -> list[str]:
    out = io.StringIO()
    assert main(argv, out) == 0
    return out.getvalue().splitlines()


def _norm(lines):
    return [" ".join(ln.split()) for ln in lines if ln.strip()]


@pytest.mark.parametrize("folder", XDC_CASES, ids=[d.name for d in XDC])
def test_libxdc_packets_equal_ptdump(folder):
    got = _run(["dump", "packets", "--raw", str(_trace(folder)), "--no-pad", "--lastip"])
    with gzip.open(folder / "ptdump.txt.gz", "rt") as f:
        exp = f.read().splitlines()
    assert _norm(got) == _norm(exp)


@pytest.mark.parametrize("folder", XDC_CASES, ids=[d.name for d in XDC])
def test_libxdc_insns_run_to_the_end(folder):
    lines = _run(["dump", "insns", "--raw", str(_trace(folder)), "--quiet", "--stat"])
    assert lines[-1].startswith("insn: ")
    assert all(ln.startswith("[") or ln.startswith("insn:") for ln in lines)


@pytest.mark.slow
def test_simplept_adl_packets_and_flow():
    raw = REAL / "simplept-adl" / "ptout.0"
    if not raw.exists():
        pytest.skip("simplept-adl not in shared/")
    kinds = Counter(ln.split()[1] for ln in _run(["dump", "packets", "--raw", str(raw), "--no-pad"])
                    if len(ln.split()) > 1)
    # PROVENANCE.md: ptdump --no-pad ptout.0
    assert kinds["tnt.8"] == 2_002_824 and kinds["tip"] == 3018 and kinds["fup"] == 1131
    assert kinds["cbr"] == 1038 and kinds["tsc"] == 1025 and kinds["tip.pgd"] == 1
    for k in ("psb", "psbend", "pip", "mode.exec", "mode.tsx"):
        assert kinds[k] == 1024, k
    lines = _run(["dump", "insns", "--raw", str(raw), "--cpu", "6/151/2", "--quiet", "--stat"])
    assert lines[-1].startswith("insn: ")


HELLO = """
    .intel_syntax noprefix
    .text
    .globl _start
_start:
    mov eax, 1
    mov edi, 1
    movabs rsi, 0x402000
    mov edx, 14
    syscall
    mov eax, 60
    mov edi, 0
    syscall
"""


@pytest.mark.skipif(shutil.which("as") is None or shutil.which("ld") is None, reason="binutils missing")
def test_dynamorio_drpt2trace_flow(tmp_path):
    d = REAL / "dynamorio-drpt2trace"
    if not d.exists():
        pytest.skip("dynamorio-drpt2trace not in shared/")
    (tmp_path / "hello.s").write_text(HELLO)
    subprocess.run(["as", "--64", "-o", str(tmp_path / "hello.o"), str(tmp_path / "hello.s")], check=True)
    subprocess.run(["ld", "-static", "-nostdlib", "-Ttext", "0x401000", "-o", str(tmp_path / "hello"),
                    str(tmp_path / "hello.o")], check=True)
    # suite/tests/CMakeLists.txt's decode parameters (PROVENANCE.md)
    argv = ["dump", "insns", "--raw", str(d / "pt.bin"), "--cpu", "6/85/4", "--mtc-freq", "3",
            "--nom-freq", "37", "--cpuid-0x15.eax", "2", "--cpuid-0x15.ebx", "308",
            "--pevent:sample-type", "0x10086", "--pevent:time-shift", "31",
            "--pevent:time-mult", "581029125", "--pevent:time-zero", "18444502336406842448",
            "--pevent:sysroot", str(tmp_path), "--pevent:primary", str(d / "primary.sideband.pevent"),
            "--pevent:secondary", str(d / "secondary.sideband.pevent")]
    ips = [int(ln, 16) for ln in _run(argv) if not ln.startswith("[")]
    assert [ip - 0x401000 for ip in ips] == [0, 5, 10, 20, 25, 27, 32, 37]
    # without the binary: tracing reaches the code and reports it unmapped, no traceback
    argv[argv.index("--pevent:sysroot") + 1] = str(tmp_path / "empty")
    lines = _run(argv)
    assert any("401000: error: no memory mapped" in ln for ln in lines)
    # the perf tool records (types >= 64) are "bad configuration" sideband errors with --sb:warn
    warn = _run(argv + ["--sb:warn"])
    assert sum("sideband error: bad configuration" in ln for ln in warn) >= 4
