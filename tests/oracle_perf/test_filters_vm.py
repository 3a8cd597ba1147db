"""``--pid``/``--tid``/``--time`` on a virtual-machine recording, equal to perf 6.1.

perf filters a guest sample by its guest thread (the one ``perf inject --guest-data``
gives it), a host sample by its host thread: ``--pid 4000`` (the hypervisor) keeps
only host samples, ``--tid 700`` only a guest thread's.
"""

from __future__ import annotations

import io
import subprocess

import pytest

from ptxtest import needs_perf, perf_python_env
from ptexport.cli import main
from ptexport.synth.vm import VmOptions, synthesize_vm
from ptexport.synth.vm_verify import perf_pipeline

_FIELDS = "machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr"


@pytest.fixture(scope="module")
def injected(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("vm")
    synthesize_vm(tmp / "m", VmOptions(branches=4000, guest="mixed", seed=6))
    perf_pipeline(tmp / "m", tmp / "w", fields=_FIELDS)
    return str(tmp / "w" / "inj.data")


def _collapse(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@needs_perf
@pytest.mark.parametrize("extra", [["--tid", "700"], ["--pid", "50,51"], ["--pid", "4000"],
                                   ["--time", "3500.000010000,3500.000030000", "--tid", "51"]],
                         ids=["guest-tid", "guest-pids", "hypervisor-pid", "time-guest-tid"])
def test_vm_filters_equal_perf_script(injected, extra):
    proc = subprocess.run(["perf", "script", "-i", injected, "--itrace=be", "-F", _FIELDS, "--ns", *extra],
                          capture_output=True, text=True, timeout=300, env=perf_python_env())
    assert proc.returncode == 0, proc.stderr
    theirs = _collapse(proc.stdout)
    out = io.StringIO()
    assert main(["dump", "branches", injected, "--itrace", "be", *extra], out=out) == 0
    assert _collapse(out.getvalue()) == theirs
    guest = sum(1 for line in theirs if line.startswith("VM:"))
    assert len(theirs) > 100 and (guest == 0) == (extra == ["--pid", "4000"])
