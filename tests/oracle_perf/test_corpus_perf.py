"""The corpus in perf mode: every ``@perf`` case as a perf.data, decoded by ptexport and by perf 6.1.

Each case marked ``@perf`` (64-bit user-level code) is built as in test_corpus.py, then wrapped into a
per-thread perf.data (corpuslib.wrap_perf: its code as a static ELF mapped by MMAP2, its PT stream as one
AUXTRACE buffer).  ``ptexport dump branches --itrace=be`` and ``--itrace=i1i`` must print what ``perf
script`` prints for the same itrace, and both must equal the samples the emulator's executed flow
implies (corpuslib.perf_samples on Truth.flow: the taken branches (from, to) for ``be``, every traced
instruction with its branch target for ``i1i``) -- so neither decoder is the other's only oracle.

perf 6.1 and these files:

* perf segfaults decoding these timeless per-thread files unless ``Z`` (timeless) is in --itrace, so
  both decode with ``beZ``/``i1iZ`` (what perf can run; without Z ptexport prints no sample at all for
  these files, perf crashes).  perf prints neither cpu nor time then (a per-thread file has no cpu; Z
  has no time): both columns are dropped from ptexport's lines.
* How samples are labelled is perf's rule (perf mode follows perf where it and a ptxed-style reading
  could differ); the truth encodes these rules, checked here against perf 6.1:
  the PSB+ that starts the trace is no sample; TIP.PGE is ``tr strt`` from 0; the FUP after an
  overflow is also ``tr strt`` from 0, and the overflow an error at the IP where packets were lost;
  TIP.PGD after a branch is ``tr end KIND`` to the TIP.PGD's IP (0 when suppressed); FUP+TIP.PGD is
  ``tr end async`` to 0 and carries no ``(x)`` even inside a transaction; an asynchronous interrupt is
  ``hw int``; a not-taken Jcc is an ``i1i`` sample with flags ``jcc`` and address 0.
* perf binds a TIP.PGD only to an indirect or far branch: after a direct jmp/call/Jcc that leaves the
  traced region (IP filtering cases) it walks on and reports "Trace doesn't match instruction" or
  binds the TIP.PGD to a later return.  libipt and ptexport follow the SDM there; such cases are not
  ``@perf``.
* perf clears its return-compression stack at every PSB (the SDM: only RETs whose CALLs were seen since
  the last PSB may be compressed).  The corpus encoder did compress a return across a PSB (psb-mid);
  perf reported "Trace doesn't match instruction" there, which found that encoder bug (fixed in
  Truth.psb_plus).
"""

from __future__ import annotations

import difflib
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracle_libipt" / "corpus"))
import corpuslib as C  # noqa: E402

from ptxtest import needs_perf, slow_after  # noqa: E402

pytestmark = [needs_perf,
              pytest.mark.skipif(shutil.which("as") is None or shutil.which("ld") is None,
                                 reason="binutils (as, ld) not installed; .ci/run installs them")]

PERF_CASES = [case for case in C.all_cases() if case.perf]

# What the perf-mode corpus must cover: some @perf case's @covers names each of these.
REQUIRED_PERF = ["call_direct", "call_indirect", "ret_compressed", "ret_uncompressed", "interrupt", "int", "iret",
                 "ovf-fup", "psb", "tip_pgd_noip", "tip_pge", "fup-tip_pgd", "ip-compression",
                 "tsx-begin", "tsx-commit", "tsx-abort"]

_wrapped: dict[str, tuple[C.Built, Path]] = {}


def wrapped(case: C.Case, tmp_path_factory) -> tuple[C.Built, Path]:
    if case.name not in _wrapped:
        work = tmp_path_factory.mktemp(f"perf-{case.name}")
        b = C.build_perf(case, work)
        _wrapped[case.name] = (b, C.wrap_perf(b, work / "perf"))
    return _wrapped[case.name]


def _diff(a: list[str], b: list[str], na: str, nb: str) -> str:
    return "\n".join(difflib.unified_diff(a, b, na, nb, lineterm="", n=2))


@pytest.mark.parametrize("itrace", ["be", "i1i"])
@pytest.mark.parametrize("case", slow_after(PERF_CASES, keep=4), ids=[c.name for c in PERF_CASES])
def test_corpus_perf_mode(case, itrace, tmp_path_factory):
    b, path = wrapped(case, tmp_path_factory)
    truth = C.perf_samples(b, itrace)
    theirs = C.perf_script_lines(path, itrace + "Z")
    mine = C.ptexport_branch_lines(path, itrace + "Z")
    assert theirs == truth, f"{case.name}: perf script --itrace={itrace}Z differs from the emulator's flow\n" + \
        _diff(truth, theirs, "emulator", "perf")
    assert mine == theirs, f"{case.name}: ptexport dump branches --itrace={itrace}Z differs from perf\n" + \
        _diff(theirs, mine, "perf", "ptexport")


@pytest.mark.parametrize("case", PERF_CASES, ids=[c.name for c in PERF_CASES])
def test_corpus_perf_truth_matches_flow(case, tmp_path_factory):
    """The perf-mode truth and the ptxed-mode expectation come from the same run: one ``i1i`` sample per
    instruction line, at the same IPs, in transaction exactly where ptxed's lines carry ``?``."""
    b, _path = wrapped(case, tmp_path_factory)
    insns = [line for line in b.expected if not line.startswith("[")]
    samples = C.perf_samples(b, "i1i")
    assert [int(line.rsplit(" ", 1)[1], 16) for line in samples] == [int(x.split()[-1], 16) for x in insns]
    assert [("x" in line.split()[1:-2]) or "(x)" in line for line in samples] == [x.startswith("?") for x in insns]


def test_corpus_perf_covers():
    assert PERF_CASES, "no @perf corpus case"
    covered = {c for case in PERF_CASES for c in case.covers}
    missing = [r for r in REQUIRED_PERF if r not in covered]
    assert not missing, f"no @perf corpus case covers {missing}"
