"""LOOP/LOOPE/LOOPNE/JrCXZ/JECXZ are conditional branches: one TNT bit each, like Jcc.

The generator once classified them by capstone's groups, where LOOP* is in no
"jump" group: their blocks ended in "no branch", their TNT bits were missing and
perf's decode of the trace went astray (``synth --check``: thousands of
mismatches).  The program (src/loop_branches.S) runs each of them taken and not
taken, with the 32-bit address size (ECX) too, and conditional branches to the
next instruction, which the generator can only tell taken from not taken by the
registers.  Checked: perf 6.1 decodes the trace to the generator's ground truth
(every taken branch and every instruction), ptexport's ``dump branches`` prints
perf's lines, and each labelled branch ran and was taken as often as the program
says.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ptxtest import first_difference, needs_perf, our_branch_lines, perf_branch_lines, slow_after
from ptexport.synth.generate import KIND_JCC, SynthOptions, synthesize
from ptexport.synth.verify import (compare_branches, compare_instructions, load_truth,
                                   parse_branches, perf_script)

pytestmark = [needs_perf, pytest.mark.perf,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")]

SRC = Path(__file__).resolve().parent / "src" / "loop_branches.S"


def _per_round(r: int) -> dict[str, tuple[int, int]]:
    """label -> (times taken, times run) in the round where r12 == r (see the source)."""
    even = r % 2 == 0
    bit1 = bool(r & 2)
    return {
        "t_loop": (3, 4), "t_loope_flag": (1, 2), "t_loopz_count": (2, 3),
        "t_loopne_flag": (3, 4), "t_loopnz_count": (1, 2),
        "t_jrcxz": (int(r % 4 == 0), 1), "t_jrcxz_hi": (0, 1), "t_jecxz_hi": (1, 1),
        "t_jecxz_odd": (0, 1),
        "t_loop32": (2, 3), "t_loope32": (1, 2), "t_loopne32": (3, 4),
        "t_loop_self": (4, 5), "t_loop_fwd": (1, 1),
        "t_jrcxz_next": (int(even), 1), "t_loop_next": (int(even), 1), "t_loop32_next": (0, 1),
        "t_jecxz_next": (1, 1), "t_jz_next": (int(not bit1), 1), "t_jnz_next": (int(bit1), 1),
        "t_loope_next": (1, 1),
    }


def _labels(prog: Path) -> dict[str, int]:
    from elftools.elf.elffile import ELFFile

    with open(prog, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: s["st_value"] for s in symtab.iter_symbols() if s.name.startswith("t_")}


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    prog = tmp_path_factory.mktemp("loopbr") / "loop_branches"
    subprocess.run(["gcc", "-nostdlib", "-static", "-o", str(prog), str(SRC)], check=True)
    return prog


@pytest.mark.parametrize("tnt,preempt", slow_after([("long", 0), ("short", 0), ("long", 53)], unpack=True))
def test_loop_jcxz_trace_matches_perf_and_truth(tmp_path, program, tnt, preempt):
    """``preempt``: timer interrupts every 53 instructions, some right after a branch to the
    next instruction (the emulator tells taken from the registers as it stops there)."""
    res = synthesize(tmp_path, SynthOptions(program=str(program), branches=6000, tnt=tnt,
                                            preempt=preempt))
    assert res.branches > 5000      # rounds differ in length: the count is an estimate
    # perf decodes the ground truth: every taken branch, then every instruction (not-taken
    # branches included) -- what `synth --check` does
    proc = perf_script(res.perf_data, "b")
    assert proc.returncode == 0, proc.stderr
    perf = parse_branches(proc.stdout)
    assert not perf.other, perf.other[:5]
    truth, meta = load_truth(tmp_path)
    cmp = compare_branches(truth, perf)
    assert cmp.mismatches == 0, cmp.first_mismatch
    assert cmp.compared == len(truth["kind"]) == res.branches
    insns = compare_instructions(tmp_path)
    assert insns.mismatches == 0, insns.first_mismatch
    assert insns.compared == meta["instructions"]

    # ptexport's decoder prints perf's lines
    mine, theirs = our_branch_lines(res.perf_data), perf_branch_lines(res.perf_data)
    assert mine == theirs, first_difference(mine, theirs)

    # each branch ran and was taken as often as the program says
    rounds = meta["iterations"]
    ips = np.load(tmp_path / "truth_insns.npz")["ip"]
    jcc_from = truth["from_ip"][truth["kind"] == KIND_JCC]
    labels = _labels(program)
    expected = {name: [0, 0] for name in _per_round(0)}
    for r in range(rounds, 0, -1):
        for name, (taken, ran) in _per_round(r).items():
            expected[name][0] += taken
            expected[name][1] += ran
    got = {name: [int((jcc_from == labels[name]).sum()), int((ips == labels[name]).sum())]
           for name in expected}
    assert got == expected
