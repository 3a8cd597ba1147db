"""Which branch samples perf synthesizes (--itrace=c / r / s): ``ItraceOptions.branches_filter``, the one
rule the decoder backends apply (perf's ``branches_filter``), and the export against perf's own.

The VM split, the initial skip and IPC are synthesized by the decoder backends
(decoder/reference/queue.py, decoder/compiled/); their perf comparisons are the parity suites
(VM variants, --itrace=...sN, tests of IPC)."""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess

import numpy as np
import pytest

from ptexport.cli import main
from ptexport.samples.flags import IpFlag
from ptexport.samples.itrace import parse_itrace
from ptxtest import needs_perf

EXPORT = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
PERF_ENV = dict(os.environ, PATH="/usr/local/bin:/usr/bin:/bin")  # perf's embedded Python finds its prefix via PATH

B, C, R, O, Y, I = IpFlag.BRANCH, IpFlag.CALL, IpFlag.RETURN, IpFlag.CONDITIONAL, IpFlag.ASYNC, IpFlag.INTERRUPT
TB, TE, S = IpFlag.TRACE_BEGIN, IpFlag.TRACE_END, IpFlag.SYSCALLRET
VMEXIT = int(B | C | Y | IpFlag.VMEXIT)

FLAGS = np.array([B | TB, B | C, B | R, B | O, B, B | C | Y | I, B | Y | TE, B | C | S, B | R | S,
                  B | R | I, VMEXIT, B | C | IpFlag.VMENTRY], dtype=np.int64)


def branch_mask(flags: np.ndarray, opts) -> np.ndarray:
    """perf's intel_pt_synth_branch_sample test, over ``opts.branches_filter`` (what the backends read)."""
    flags = np.asarray(flags)
    if not opts.branches:
        return np.zeros(flags.shape, dtype=bool)
    f = opts.branches_filter
    return np.ones(flags.shape, dtype=bool) if not f else (flags & f) != 0


def kept(opts):
    return [int(f) for f in FLAGS[branch_mask(FLAGS, parse_itrace(opts))]]


def test_filters_like_perf_intel_pt():
    assert kept("b") == [int(f) for f in FLAGS]
    assert kept("e") == []
    # calls: anything with the call, async or trace-end bit
    assert kept("c") == [B | C, B | C | Y | I, B | Y | TE, B | C | S, VMEXIT, B | C | IpFlag.VMENTRY]
    # returns: anything with the return or trace-begin bit
    assert kept("r") == [B | TB, B | R, B | R | S, B | R | I]
    assert len(kept("cr")) == 10 and kept("bc") == kept("c")


def test_quipper_counts_from_perf():
    # perf 6.1 on the quipper trace: 614 "tr strt", 4 "hw int", 1 "tr end async";
    # --itrace=c gives 5 branches, r 614, cr and b 619 (tests/samples/test_samples_itrace.py runs perf).
    flags = np.array([B | TB] * 614 + [B | C | Y | I] * 4 + [B | Y | TE], dtype=np.int64)
    counts = {o: int(branch_mask(flags, parse_itrace(o)).sum()) for o in ("b", "c", "r", "cr", "ce")}
    assert counts == {"b": 619, "c": 5, "r": 614, "cr": 619, "ce": 5}


@pytest.mark.slow
@needs_perf
def test_filters_match_perf_on_generated_trace(tmp_path):
    """--itrace=c / r / cr are the --itrace=b samples that pass branches_filter, as perf itself synthesizes
    them; and ptexport's export of --itrace=c / r / cr / cs10 (the backends' rule and initial skip) equals perf's."""
    pytest.importorskip("unicorn")
    from ptexport.synth.generate import SynthOptions, synthesize

    res = synthesize(str(tmp_path / "syn"), SynthOptions(program="calls", branches=3000, seed=9))
    query = "SELECT time, ip, to_ip, branch_type FROM samples WHERE id != 0 ORDER BY id"

    def rows(db):
        with sqlite3.connect(db) as con:
            return np.array(con.execute(query).fetchall(), dtype=np.int64).reshape(-1, 4)

    def perf_samples(itrace):
        db = tmp_path / f"{itrace}.db"
        subprocess.run(["perf", "script", f"--itrace={itrace}", "-i", str(res.perf_data), "-s", EXPORT, str(db),
                        "branches"], capture_output=True, check=True, cwd=tmp_path, env=PERF_ENV)
        return rows(db)

    def our_samples(itrace):
        db = tmp_path / f"ours-{itrace}.db"
        assert main([str(res.perf_data), "--db", str(db), "-q", f"--itrace={itrace}"], out=io.StringIO()) == 0
        return rows(db)

    all_b = perf_samples("b")
    assert len(all_b) > 2000
    for itrace in ("c", "r", "cr"):
        mask = branch_mask(all_b[:, 3], parse_itrace(itrace))
        theirs = perf_samples(itrace)
        assert all_b[mask].tolist() == theirs.tolist(), itrace
        assert our_samples(itrace).tolist() == theirs.tolist(), itrace
    calls = all_b[branch_mask(all_b[:, 3], parse_itrace("c"))]
    theirs = perf_samples("cs10")
    assert calls[10:, 0].tolist() == theirs[:, 0].tolist()
    assert our_samples("cs10").tolist() == theirs.tolist()
