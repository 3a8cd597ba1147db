"""Issue #4 item 4: transactions (``--itrace=x``, the "in-tx"/"tx abrt" flags) against perf 6.1.

The generator makes no TSX traces, so nothing else compares our transaction samples with perf's.  Here
libipt's TSX corpus traces (raw .pt plus the code .bin at its org address) are wrapped into per-thread
perf.data files (the code as a static ELF mapped by MMAP2, the trace as one AUXTRACE buffer), and
``dump branches`` must equal ``perf script`` for --itrace=be, x, bex and cr (where perf prints anything).
The corpus traces carry no timing packets, and perf 6.1 segfaults decoding these files unless timeless
(``Z``), so both decode with Z and the lines are compared without cpu and time (perf cannot print time
with Z; the per-thread files have no cpu).
"""

from __future__ import annotations

import io
import subprocess

import pytest

from ptxtest import LIBIPT, needs_perf
from ptexport.cli import main
from ptexport.perfdata.constants import RecordType
from ptexport.synth import generate as G
from ptexport.synth.perfwrite import (
    PerfDataWriter,
    aux_body,
    auxtrace_info_record,
    comm_body,
    finished_round,
    itrace_start_body,
    mmap2_body,
    time_conv_record,
)
from ptexport.synth.sideband import _Records, auxtrace_priv, make_attrs
from ptexport.synth.vm import _common_features
from ptexport.synth.vm_code import Code, write_static_elf

TESTS = ["tsx-abort", "tsx-commit", "tsx-no_spurious_commit", "tip_pge-tsx_abort-tip_pgd",
         "psb-tsx_abort-tip-fup-tip_pgd", "psb-tsx_abort-tip_pgd", "tip_pgd-tsx", "skd010-mode_tsx-fup"]
PID = 1000
MISC_USER, MISC_COMM_EXEC = 2, 0x2000


def _org(test: str) -> int:
    for line in (LIBIPT / "manifest.tsv").read_text().splitlines()[1:]:
        cols = line.split("\t")
        if cols[1] == test:
            return int(cols[2], 16)
    raise KeyError(test)


def wrap(test: str, out) -> str:
    """A per-thread perf.data of libipt's ``test`` (its trace and code); returns its path."""
    pt_bytes = (LIBIPT / "ptt" / f"{test}.pt").read_bytes()
    code = (LIBIPT / "ptt" / f"{test}.bin").read_bytes()
    org = _org(test)
    elf = out / "prog"
    write_static_elf(elf, Code(base=org, data=code, insns={}, labels={}))
    opts = G.SynthOptions(per_thread=True, timing="tsc", cpus=1)
    pt, dummy = make_attrs(opts, 1)
    recs = _Records(pt, dummy, lambda cpu, tid: 0)
    t0 = 1_000_000
    start = org & ~0xFFF
    end = (org + len(code) + 0xFFF) & ~0xFFF
    recs.add(t0, RecordType.COMM, MISC_COMM_EXEC, comm_body(PID, PID, "prog"), pid=PID, tid=PID, cpu=0)
    recs.add(t0 + 100, RecordType.MMAP2, MISC_USER, mmap2_body(PID, PID, start, end - start, 0x1000 - (org - start),
                                                                str(elf), ino=4242), pid=PID, tid=PID, cpu=0)
    recs.add(t0 + 200, RecordType.ITRACE_START, 0, itrace_start_body(PID, PID), pid=PID, tid=PID, cpu=0,
             pt_event=True)
    recs.add_raw(t0 + 300, ("AUXTRACE", pt_bytes, 0, t0 + 500, 0, PID, -1))
    recs.add(t0 + 400, RecordType.AUX, 0, aux_body(0, len(pt_bytes), 0), pid=PID, tid=PID, cpu=0, pt_event=True)
    recs.items.sort(key=lambda x: (x[0], x[1]))
    path = out / "perf.data"
    with open(path, "wb") as f:
        w = PerfDataWriter(f, [pt, dummy])
        w.write(auxtrace_info_record(auxtrace_priv(opts, pt)))
        w.write(time_conv_record(G.TIME_SHIFT, G.TIME_MULT, G.TIME_ZERO))
        for _ns, _n, data in recs.items:
            if isinstance(data, tuple):
                _tag, chunk, off, ref, idx, tid, cpu = data
                w.write_auxtrace(chunk, offset=off, reference=ref, idx=idx, tid=tid, cpu=cpu)
            else:
                w.write(data)
        w.write(finished_round())
        w.close(_common_features(1, ["/usr/bin/perf", "record", "--per-thread", "-e", "intel_pt//u", str(elf)],
                                 [pt, dummy]))
    return str(path)


def _drop_cpu_time(line: str) -> str:
    if line.startswith("instruction trace error"):
        return line
    parts = line.split(" ")
    return " ".join(parts[:1] + parts[3:])  # pid/tid [cpu] time: ...


def _collapse(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@needs_perf
@pytest.mark.parametrize("test", TESTS)
def test_libipt_tsx_traces_equal_perf(tmp_path, test):
    if not (LIBIPT / "ptt" / f"{test}.pt").exists():
        pytest.skip(f"libipt corpus file {test}.pt not found")
    path = wrap(test, tmp_path)
    printed, text = 0, []
    for itrace in ("beZ", "xZ", "bexZ", "crZ"):
        r = subprocess.run(["perf", "script", "-i", path, f"--itrace={itrace}", "-F", "pid,tid,ip,addr,flags"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-1000:]
        theirs = _collapse(r.stdout)
        out = io.StringIO()
        assert main(["dump", "branches", path, f"--itrace={itrace}"], out=out) == 0
        mine = [_drop_cpu_time(line) for line in _collapse(out.getvalue())]
        assert mine == theirs, (itrace, mine, theirs)
        printed += len(theirs)
        text += theirs
    assert printed > 0
    if "abort" in test:
        assert any("tx abrt" in line for line in text)  # perf's abort flag, and ours
