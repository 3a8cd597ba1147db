"""Branch sample selection: --itrace filters, VM split, initial skip and IPC counts (perf's rules)."""

from __future__ import annotations

import os
import sqlite3
import subprocess

import numpy as np
import pytest

from ptexport.samples.flags import IpFlag
from ptexport.samples.itrace import parse_itrace
from ptexport.samples.select import BranchIpc, InitialSkip, branch_mask, select_branches, split_vm_branches
from ptxtest import needs_perf

EXPORT = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
PERF_ENV = dict(os.environ, PATH="/usr/local/bin:/usr/bin:/bin")  # perf's embedded Python finds its prefix via PATH

B, C, R, O, Y, I = IpFlag.BRANCH, IpFlag.CALL, IpFlag.RETURN, IpFlag.CONDITIONAL, IpFlag.ASYNC, IpFlag.INTERRUPT
TB, TE, S = IpFlag.TRACE_BEGIN, IpFlag.TRACE_END, IpFlag.SYSCALLRET
VMEXIT = int(B | C | Y | IpFlag.VMEXIT)

FLAGS = np.array([B | TB, B | C, B | R, B | O, B, B | C | Y | I, B | Y | TE, B | C | S, B | R | S,
                  B | R | I, VMEXIT, B | C | IpFlag.VMENTRY], dtype=np.int64)


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


def test_vm_branch_becomes_two_samples():
    cols = {"ip": np.array([0x10, 0xFFFF0000, 0x30, 0x40], dtype=np.uint64),
            "addr": np.array([0x20, 0x5000, 0, 0x50], dtype=np.uint64),
            "flags": np.array([3, VMEXIT, 545, 2051]),
            "time": np.array([1, 2, 3, 4])}
    from_nr = np.array([0, 1, 1, 0])
    to_nr = np.array([0, 0, 0, 1])  # row 1: guest -> host (VM exit); row 2: addr 0, not split; row 3: VM entry
    out, src = split_vm_branches(cols, from_nr, to_nr)
    assert src.tolist() == [0, 1, 1, 2, 3, 3]
    assert [(int(a), int(b)) for a, b in zip(out["ip"], out["addr"])] == [
        (0x10, 0x20), (0xFFFF0000, 0), (0, 0x5000), (0x30, 0), (0x40, 0), (0, 0x50)]
    assert out["flags"].tolist() == [3, VMEXIT, VMEXIT, 545, 2051, 2051]
    assert cols["addr"][1] == 0x5000  # input untouched


def test_initial_skip_counts_across_batches():
    skip = InitialSkip(3)
    assert skip.apply(np.array([True, False, True])).tolist() == [False, False, False]
    assert skip.apply(np.array([False, True, True, True])).tolist() == [False, False, True, True]
    assert skip.apply(np.array([True])).tolist() == [True]


def test_select_branches_filter_then_skip():
    cols = {"flags": FLAGS, "time": np.arange(len(FLAGS))}
    out, src = select_branches(cols, parse_itrace("cs2"), skip=InitialSkip(2))
    assert src.tolist() == [6, 7, 10, 11]  # calls are rows 1,5,6,7,10,11; the first two are skipped
    assert out["time"].tolist() == [6, 7, 10, 11]


def test_branch_ipc_matches_perf_rule():
    ipc = BranchIpc()
    kept_ = np.array([1, 1, 1, 0, 1, 1, 1], dtype=bool)
    exact = np.array([1, 0, 1, 1, 1, 1, 1], dtype=bool)
    insn = np.array([10, 12, 15, 20, 22, 22, 30], dtype=np.uint64)
    cyc = np.array([100, 110, 130, 140, 150, 150, 170], dtype=np.uint64)
    i, c = ipc.apply(kept_, exact, insn, cyc)
    # row0: 100-0 cycles, 10-0 insns; row1 not exact; row2: 130-100, 15-10; row3 not kept;
    # row4: 150-130, 22-15; row5: no new cycles -> 0, 0; row6: 170-150, 30-22
    assert c.tolist() == [100, 0, 30, 0, 20, 0, 20]
    assert i.tolist() == [10, 0, 5, 0, 7, 0, 8]
    # the state carries to the next batch of the same queue
    i2, c2 = ipc.apply(np.array([True]), np.array([True]), np.array([31], dtype=np.uint64),
                       np.array([175], dtype=np.uint64))
    assert (i2.tolist(), c2.tolist()) == ([1], [5])


def test_branch_ipc_reference_loop_agrees():
    rng = np.random.default_rng(7)
    n = 500
    kept_ = rng.random(n) < 0.6
    exact = rng.random(n) < 0.5
    insn = np.cumsum(rng.integers(0, 5, n)).astype(np.uint64)
    cyc = np.cumsum(rng.integers(0, 3, n)).astype(np.uint64)  # often unchanged: cyc delta 0
    got_i, got_c = BranchIpc().apply(kept_, exact, insn, cyc)
    last_i = last_c = 0
    exp_i, exp_c = [], []
    for k in range(n):  # perf's intel_pt_synth_branch_sample, literally
        ci = cc = 0
        if kept_[k]:
            if exact[k]:
                cc = int(cyc[k]) - last_c
            if cc:
                ci = int(insn[k]) - last_i
                last_i, last_c = int(insn[k]), int(cyc[k])
        exp_i.append(ci)
        exp_c.append(cc)
    assert got_i.tolist() == exp_i and got_c.tolist() == exp_c


@pytest.mark.slow
@needs_perf
def test_filters_match_perf_on_generated_trace(tmp_path):
    """--itrace=c / r / cr from the --itrace=b samples equal what perf itself synthesizes."""
    pytest.importorskip("unicorn")
    from ptexport.synth.generate import SynthOptions, synthesize

    res = synthesize(str(tmp_path / "syn"), SynthOptions(program="calls", branches=3000, seed=9))

    def perf_samples(itrace):
        db = tmp_path / f"{itrace}.db"
        subprocess.run(["perf", "script", f"--itrace={itrace}", "-i", str(res.perf_data), "-s", EXPORT, str(db),
                        "branches"], capture_output=True, check=True, cwd=tmp_path, env=PERF_ENV)
        with sqlite3.connect(db) as con:
            return np.array(con.execute("SELECT time, ip, to_ip, branch_type FROM samples WHERE id != 0 ORDER BY id")
                            .fetchall(), dtype=np.int64).reshape(-1, 4)

    all_b = perf_samples("b")
    assert len(all_b) > 2000
    for itrace in ("c", "r", "cr"):
        mask = branch_mask(all_b[:, 3], parse_itrace(itrace))
        assert all_b[mask].tolist() == perf_samples(itrace).tolist(), itrace
    skipped, _ = select_branches({"t": all_b[:, 0], "flags": all_b[:, 3]}, parse_itrace("cs10"),
                                 skip=InitialSkip(10))
    assert skipped["t"].tolist() == perf_samples("cs10")[:, 0].tolist()
