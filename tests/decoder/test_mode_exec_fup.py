"""MODE.Exec directly before an FUP outside PSB+: perf's set_fup_mode_exec (intel_pt_walk_trace).

perf 6.1 reads the packet after a MODE.Exec at once; when it is an FUP, that FUP is an event of its own
(intel_pt_fup_event: set_fup_mode_exec, and no TIP is bound to it, no_tip), with an instruction sample
at the FUP when one is due at the next instruction (intel_pt_sample_fup_insn).  So an interrupt's
``FUP, TIP.PGD`` preceded by MODE.Exec is no asynchronous trace end: the FUP is the event, the TIP.PGD
ends the trace at the next branch.  The reference decoder did this, the compiled kernel did not.

The input is made by hand from a generated trace (timer interrupts: ``FUP, TIP.PGD``; an MTC before
each FUP now and then): the 2-byte MTC directly before an FUP outside PSB+ is overwritten with a 2-byte
MODE.Exec (``99 01``, 64-bit), so the file keeps its layout and perf reads it as well.
"""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest

from ptxtest import needs_perf
from ptexport.cli import main
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import RecordType as RT
from ptexport.pt.perfpkt import Pkt, tokenize

_MODE_EXEC_64 = b"\x99\x01"
_FIELDS = ["-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"]


def _mode_exec_before_fups(data: bytearray, spans) -> int:
    """Overwrite each 2-byte MTC directly before an FUP outside PSB+ with MODE.Exec; how many."""
    n = 0
    for off, size in spans:
        pk = tokenize(bytes(data[off:off + size]))
        kinds, sizes, pos = pk.kind.tolist(), pk.size.tolist(), pk.pos.tolist()
        in_psb = False
        for j, k in enumerate(kinds):
            if k == Pkt.PSB:
                in_psb = True
            elif k == Pkt.PSBEND:
                in_psb = False
            elif k == Pkt.FUP and not in_psb and j and kinds[j - 1] == Pkt.MTC and sizes[j - 1] == 2:
                at = off + pos[j - 1]
                data[at:at + 2] = _MODE_EXEC_64
                n += 1
    return n


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """(original folder, folder with MODE.Exec before some FUPs)."""
    src = tmp_path_factory.mktemp("orig")
    assert main(["synth", "--out", str(src), "--branches", "3000", "--seed", "5", "--program", "calls",
                 "--preempt", "300", "--timing", "mtc", "--mtc-period", "0"], out=io.StringIO()) == 0
    dst = tmp_path_factory.mktemp("mode-exec")
    shutil.copytree(src, dst, dirs_exist_ok=True)
    data = bytearray((src / "perf.data").read_bytes())
    with open_perf_data(str(src / "perf.data")) as pd:
        spans = [(r.data_offset, r.size) for r in pd.records(types=(RT.AUXTRACE,))]
    assert _mode_exec_before_fups(data, spans) >= 3
    (dst / "perf.data").write_bytes(bytes(data))
    return src, dst


def _dump(path, itrace: str, monkeypatch, reference: bool) -> str:
    with monkeypatch.context() as m:
        if reference:
            m.setenv("PTEXPORT_REFERENCE", "1")
        else:
            m.delenv("PTEXPORT_REFERENCE", raising=False)
        out = io.StringIO()
        assert main(["dump", "branches", str(path), f"--itrace={itrace}"], out=out) == 0
        return out.getvalue()


@pytest.mark.parametrize("itrace", ["be", "i1", "cr"])
def test_compiled_equals_reference(traces, monkeypatch, itrace):
    from ptexport import jit

    if not jit.available():
        pytest.skip("numba (the 'fast' extra) is not installed")
    _, path = traces
    ref = _dump(path / "perf.data", itrace, monkeypatch, True)
    assert _dump(path / "perf.data", itrace, monkeypatch, False) == ref


def test_the_fup_after_mode_exec_is_no_async_trace_end(traces, monkeypatch):
    orig, path = traces
    before = _dump(orig / "perf.data", "be", monkeypatch, False).count("tr end  async")
    after = _dump(path / "perf.data", "be", monkeypatch, False).count("tr end  async")
    assert after <= before - 3


@needs_perf
@pytest.mark.parametrize("itrace", ["be", "i100", "i1", "cr"])
def test_both_decoders_equal_perf(traces, monkeypatch, itrace):
    _, path = traces
    perf = subprocess.run(["perf", "script", "-i", str(path / "perf.data"), f"--itrace={itrace}", *_FIELDS],
                          capture_output=True, text=True, check=True, cwd=str(path)).stdout
    assert perf.count("\n") > 100
    assert _dump(path / "perf.data", itrace, monkeypatch, True) == perf
    assert _dump(path / "perf.data", itrace, monkeypatch, False) == perf
