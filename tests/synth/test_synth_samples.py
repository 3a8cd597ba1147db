"""The shipped sample traces decode in perf with no errors, and the programs rebuild."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from ptxtest import REPO, needs_perf, slow_after
from ptexport.synth.emulate import Program, run_program
from ptexport.synth.verify import (compare_branches, compare_instructions, load_truth,
                                   parse_branches, perf_script)

SAMPLES = REPO / "sample_data"
NAMES = ["loops", "threads", "forkexec"]


def test_samples_are_small():
    total = 0
    for name in NAMES:
        size = sum(p.stat().st_size for p in (SAMPLES / name).iterdir())
        assert size < 700_000, name
        total += size
    assert total < 2_000_000


@needs_perf
@pytest.mark.perf
@pytest.mark.parametrize("name", slow_after(NAMES))
def test_sample_decodes_in_perf(name):
    d = SAMPLES / name
    proc = perf_script(d / "perf.data", "be")     # runs in the folder: ELFs by bare name
    assert proc.returncode == 0, proc.stderr
    perf = parse_branches(proc.stdout)
    assert perf.other == []                       # no decoder errors at all
    truth, meta = load_truth(d)
    cmp = compare_branches(truth, perf)
    assert cmp.mismatches == 0 and cmp.compared == meta["branches"], cmp.first_mismatch
    assert compare_instructions(d).mismatches == 0


def test_readme_commands_match_the_samples():
    text = (SAMPLES / "README.md").read_text()
    assert text.splitlines()[2].strip() == "ptexport sample_data/loops/perf.data --db loops.sqlite"
    for name in NAMES:
        opts = json.loads((SAMPLES / name / "truth.json").read_text())["options"]
        line = next(ln for ln in text.splitlines() if f"`{name}/`" in ln)
        assert f"--program {opts['program']}" in line
        assert f"--out sample_data/{name}" in line
        if opts["cpus"] > 1:
            assert f"--cpus {opts['cpus']}" in line


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                    reason="no gcc/make")
def test_programs_rebuild_and_run_the_same(tmp_path):
    src = SAMPLES / "src"
    for f in src.iterdir():
        if f.suffix in (".c", ".h") or f.name == "Makefile":
            shutil.copy(f, tmp_path / f.name)
    subprocess.run(["make", "-s", "-C", str(tmp_path)], check=True, capture_output=True)
    for name in ["loops", "calls", "threads", "events"]:
        new = run_program(Program.load(tmp_path / name), iterations=2)
        old = run_program(Program.load(src / name), iterations=2)
        # same behaviour (another gcc may lay the code out differently)
        assert new.output == old.output
        assert [s.sysno for s in new.slices] == [s.sysno for s in old.slices]
