"""Issue #4 item 4: transactions (``--itrace=x``, the "in-tx"/"tx abrt" flags) against perf 6.1.

The generator makes no TSX traces, so nothing else compares our transaction samples with perf's.  Here
the project's own TSX corpus cases (tests/corpus/cases/tsx-*.s: commit, XABORT, an abort by an
asynchronous event, nested calls in a transaction, a PSB+ with MODE.TSX inside one, TIP.PGD and
FUP+TIP.PGD inside one) are built by the corpus (assembled, run in the emulator, encoded as Intel PT)
and wrapped into per-thread perf.data files (corpuslib.wrap_perf: the code as a static ELF mapped by
MMAP2, the trace as one AUXTRACE buffer).  ``dump branches`` must equal ``perf script`` for --itrace=be,
x, bex and cr, and both must equal the samples the emulator's flow implies (corpuslib.perf_samples):
the transaction flags are checked against the ground truth, not only against perf.

The corpus traces carry no timing packets, and perf 6.1 segfaults decoding these files unless timeless
(``Z``), so both decode with Z and the lines are compared without cpu and time (perf cannot print time
with Z; the per-thread files have no cpu).  perf's rule, which the truth follows: the trace end of an
asynchronous disable (FUP+TIP.PGD) inside a transaction carries no ``(x)``.
"""

from __future__ import annotations

import difflib
import shutil
import sys
from pathlib import Path

import pytest

from ptxtest import needs_perf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "oracle_libipt" / "corpus"))
import corpuslib as C  # noqa: E402

pytestmark = [needs_perf,
              pytest.mark.skipif(shutil.which("as") is None or shutil.which("ld") is None,
                                 reason="binutils (as, ld) not installed; .ci/run installs them")]

TESTS = ["tsx-commit", "tsx-abort", "tsx-abort-async", "tsx-nested-calls", "tsx-psb", "tsx-psb-abort",
         "tsx-tip_pgd", "tsx-fup-tip_pgd"]
ITRACES = ("beZ", "xZ", "bexZ", "crZ")


def _built(test: str, out: Path) -> tuple[C.Built, Path]:
    case = C.parse_case(C.CASES / f"{test}.s")
    b = C.build_perf(case, out)
    return b, C.wrap_perf(b, out / "perf")


def _count(flow, kind: str) -> int:
    return sum(1 for s in flow if s.kind == kind and s.traced)


@pytest.mark.parametrize("test", TESTS)
def test_own_tsx_traces_equal_perf(tmp_path, test):
    b, path = _built(test, tmp_path)
    printed, by_itrace = 0, {}
    for itrace in ITRACES:
        theirs = C.perf_script_lines(path, itrace)
        mine = C.ptexport_branch_lines(path, itrace)
        assert mine == theirs, (itrace, "\n".join(difflib.unified_diff(theirs, mine, "perf", "ptexport", lineterm="")))
        truth = C.perf_samples(b, itrace)
        assert theirs == truth, (itrace, "\n".join(difflib.unified_diff(truth, theirs, "emulator", "perf",
                                                                        lineterm="")))
        printed += len(theirs)
        by_itrace[itrace] = theirs
    assert printed > 0

    # The transaction flags, counted from the emulator's flow.
    flow = b.flow
    begins, commits, aborts = _count(flow, "tx-begin"), _count(flow, "tx-commit"), _count(flow, "abort")
    assert begins > 0, f"{test}: no traced XBEGIN"
    x = by_itrace["xZ"]
    assert sum(1 for line in x if line.split()[1] == "x") == begins            # begin: in-tx sample
    assert sum(1 for line in x if "tx abrt" in line) == aborts                 # abort: tx abrt to the fallback
    assert len(x) == begins + commits + aborts                                  # commit: a sample without flags
    be = by_itrace["beZ"]
    assert sum(1 for line in be if "tx abrt" in line) == aborts
    in_tx_branches = sum(1 for s in flow if isinstance(s.kind, int) and s.traced and s.in_tx
                         and C.perf_samples([s], "be"))
    assert sum(1 for line in be if "(x)" in line) == in_tx_branches
    if "abort" in test:
        assert aborts > 0 and any("tx abrt" in line for line in by_itrace["bexZ"])  # perf's abort flag, and ours
    if test in ("tsx-nested-calls", "tsx-psb", "tsx-tip_pgd", "tsx-commit"):
        assert in_tx_branches > 0, f"{test}: no branch inside the transaction"
