"""Golden test: ``ptexport dump packets --raw`` against every ptdump .exp of libipt's corpus.

One test per expected file (ids = the .exp file names), run with the
options and CPU that produced it (manifest.tsv); compared line by line with
runs of whitespace collapsed.
"""

from __future__ import annotations

import io
import re
import shlex

import pytest

from ptxtest import LIBIPT
from ptexport.cli import main

_CPU = re.compile(r"-ptdump(?:-cpu_(\d+)_(\d+)(?:_(\d+))?)?\.exp$")


def _cases():
    manifest = LIBIPT / "manifest.tsv"
    if not manifest.exists():
        return []
    cases = []
    lines = manifest.read_text().splitlines()
    head = lines[0].split("\t")
    for line in lines[1:]:
        row = dict(zip(head, line.split("\t")))
        for exp in row["exp_files"].split():
            m = _CPU.search(exp)
            if not m or "-ptdump" not in exp:
                continue
            cases.append(pytest.param(row, exp, m.groups(), id=exp))
    return cases


CASES = _cases()


def normalize(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def run_case(row, exp, cpu):
    d = LIBIPT / row["dir"]
    argv = ["dump", "packets", "--raw", str(d / f"{row['test']}.pt")]
    opts = shlex.split(row["ptdump_opts"])
    if cpu[0] is not None:
        argv += ["--cpu", "/".join(x for x in cpu if x is not None)]
    argv += opts
    for sb in row.get("sb_files", "").split():
        kind = "secondary" if "-pevent-secondary," in sb else "primary"
        argv += [f"--pevent:{kind}", str(d / sb)]
    out = io.StringIO()
    rc = main(argv, out)
    return rc, out.getvalue(), (d / exp).read_text()


def test_corpus_is_there(libipt_dir):
    assert len(CASES) >= 400


@pytest.mark.parametrize("row,exp,cpu", CASES)
def test_ptdump_exp(row, exp, cpu):
    rc, got, want = run_case(row, exp, cpu)
    assert rc == 0
    assert normalize(got) == normalize(want)
