"""CPU errata of the corpus (cases/<erratum>-*.s) at packet level and in timing.

test_corpus.py checks the flow of every errata case.  The checks here look at what the flow cannot
show: how ``dump packets --cpu`` reads the packets an affected CPU writes (SKD007, SKZ84) and the time
calibration across a PSB+ that lost a CYC and its MTC (SKL168).
"""

from __future__ import annotations

import io
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpuslib as C  # noqa: E402

from ptexport.cli import main  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("as") is None or shutil.which("ld") is None,
                                reason="binutils (as, ld) not installed; .ci/run installs them")


def _build(name: str, tmp_path_factory, extra_ptxed=()) -> C.Built:
    case = C.parse_case(C.CASES / f"{name}.s")
    case.ptxed += list(extra_ptxed)
    return C.build(case, tmp_path_factory.mktemp(name))


def _run(argv) -> list[str]:
    out = io.StringIO()
    assert main(argv, out) == 0
    return out.getvalue().splitlines()


def _packets(b: C.Built, cpu: str, *opts) -> list[str]:
    return _run(["dump", "packets", "--raw", str(b.pt_path), "--cpu", cpu, *opts])


@pytest.mark.parametrize("cpu", C.parse_case(C.CASES / "skd007-cyc-ovf.s").cpus)
def test_skd007_ovf_inside_cyc(cpu, tmp_path_factory):
    """The CYC header byte and the OVF after it read as one 3-byte OVF where the encoder put the CYC."""
    b = _build("skd007-cyc-ovf", tmp_path_factory)
    pt = b.pt_path.read_bytes()
    at = pt.index(bytes([C._SKD007_CYC_BYTE, 0x02, 0xF3]))
    lines = _packets(b, cpu)
    ovf = [ln for ln in lines if ln.split()[1:2] == ["ovf"]]
    assert [int(ln.split()[0], 16) for ln in ovf] == [at]
    assert not any(ln.split()[1:2] == ["cyc"] for ln in lines)
    nxt = [ln for ln in lines if int(ln.split()[0], 16) > at][0]
    assert int(nxt.split()[0], 16) == at + 3 and nxt.split()[1] == "fup"


@pytest.mark.parametrize("cpu", C.parse_case(C.CASES / "skz84-tma-corrupt.s").cpus)
def test_skz84_corrupt_tma_is_skipped(cpu, tmp_path_factory):
    """The corrupted TMA and its bogus byte are one 8-byte invalid packet; the next packet follows."""
    b = _build("skz84-tma-corrupt", tmp_path_factory)
    pt = b.pt_path.read_bytes()
    at = pt.index(bytes([0x02, 0x73]))
    lines = [ln for ln in _packets(b, cpu) if not ln.startswith("[")]
    offs = [int(ln.split()[0], 16) for ln in lines]
    i = offs.index(at)
    assert lines[i].split()[1] == "<invalid>"
    assert offs[i + 1] == at + 8
    assert lines[-1].split()[1] == "tip.pgd"


SKL168 = "skl168-psb-drops-cyc-mtc"
_TRUE_FCR = f"{C.SKL168_TSC_PER_CYC:.3f}"


@pytest.mark.parametrize("cpu", C.parse_case(C.CASES / f"{SKL168}.s").cpus)
def test_skl168_calibration_across_psb(cpu, tmp_path_factory):
    """Every calibrated MTC, including the first after the PSB+ (two periods, one period's cycles),
    shows the true TSC/cycle ratio: the decoder does not calibrate across the lost CYC and MTC."""
    b = _build(SKL168, tmp_path_factory)
    lines = _packets(b, cpu, "--tcal", *C.SKL168_PTXED)
    mtc = [ln for ln in lines if ln.split()[1:2] == ["mtc"]]
    psb = max(int(ln.split()[0], 16) for ln in lines if ln.split()[1:2] == ["psb"])
    fcrs = [re.search(r"fcr\s+(\S+)", ln).group(1) for ln in mtc]
    assert fcrs[0] == "<unavailable>"
    assert fcrs[1:] == [_TRUE_FCR] * (len(mtc) - 1)
    assert any(int(ln.split()[0], 16) > psb for ln in mtc)


@pytest.mark.parametrize("cpu", C.parse_case(C.CASES / f"{SKL168}.s").cpus)
def test_skl168_event_time(cpu, tmp_path_factory):
    """ptxed --event:time: the [disabled] event after the PSB+ has its true time."""
    b = _build(SKL168, tmp_path_factory, ["--event:time"])
    for block in (False, True):
        got = C.normalize("\n".join(_run(C.dump_argv(b, block=block, cpu=cpu))))
        assert got == C.normalize("\n".join(b.expected))


def _errata_cases():
    from ptexport.pt.errata import Errata

    names = [f for f in Errata.__dataclass_fields__ if f != "skl168"]  # skl168: timing only, above
    out = []
    for case in C.all_cases():
        flag = case.name.split("-")[0]
        if flag in names and case.cpus:
            out.append(pytest.param(case, flag, id=case.name))
    return out


@pytest.mark.parametrize("case,flag", _errata_cases())
def test_errata_case_needs_its_workaround(case, flag, monkeypatch, tmp_path_factory):
    """Each erratum case decodes to the emulator's flow only with that erratum's workaround: with the
    flag switched off for the case's first CPU (everything else unchanged) the output differs."""
    import dataclasses

    import ptexport.pt.errata as E

    b = C.build(case, tmp_path_factory.mktemp(case.name))
    exp = C.normalize("\n".join(b.expected))
    cpu = case.cpus[0]
    orig = E.errata_for_cpu
    assert getattr(orig(*[int(x) for x in cpu.split("/")]), flag), f"{cpu} lacks {flag}"
    monkeypatch.setattr(E, "errata_for_cpu", lambda *a: dataclasses.replace(orig(*a), **{flag: False}))
    for block in (False, True):
        got = C.normalize("\n".join(_run(C.dump_argv(b, block=block, cpu=cpu))))
        assert got != exp, f"{case.name} decodes the same without {flag} ({'block' if block else 'insn'})"
