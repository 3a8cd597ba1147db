"""Golden test: ``ptexport dump insns`` against every libipt ptxed .exp file.

One test per expected file (ids are the .exp names), for every CPU model the
manifest lists, with the options ptxed was run with (including the perf_event
sideband files of the pevent tests).  Content is compared line by line with
runs of whitespace collapsed: IP sequences, events, errors (with their trace
offsets) and stats.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ptxed_corpus import normalize, ptxed_cases  # noqa: E402

from ptxtest import LIBIPT  # noqa: E402
from ptexport.cli import main  # noqa: E402

CASES = ptxed_cases(LIBIPT) if (LIBIPT / "manifest.tsv").exists() else []


@pytest.mark.parametrize("exp,argv,row", CASES, ids=[c[0].name for c in CASES])
def test_ptxed_exp(exp, argv, row):
    out = io.StringIO()
    rc = main(argv, out)
    assert rc == 0
    assert normalize(out.getvalue()) == normalize(exp.read_text())


def test_corpus_present():
    if not CASES:
        pytest.skip(f"shared libipt corpus not found at {LIBIPT}")
    assert len(CASES) == 406
