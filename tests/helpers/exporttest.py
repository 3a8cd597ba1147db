"""Helpers of the export tests (imported by name: see tests/ptxtest.py)."""

from __future__ import annotations

import os
from pathlib import Path

PG_BASE = os.environ.get("PTEXPORT_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
PERF_SCRIPTS = Path("/usr/lib/perf-core/scripts/python")


SYSTEM_PYTHON = "/usr/bin/python3"

#: Generator variants the export equality tests share (id -> synth options; the same arguments give
#: the same cached traces): threads on CPUs with preemption, per-thread with truncation, fork/exec with
#: corruption, MTC with overflows, power events with PTWRITE, pipe mode with faults, the kcore form.
EXPORT_VARIANTS = {
    "threads-2cpus-cyc": ("--program", "threads", "--cpus", "2", "--timing", "cyc", "--preempt", "200"),
    "threads-per-thread-truncated": ("--program", "threads", "--per-thread", "--truncate", "2", "--psb-period", "1024"),
    "forkexec-corrupt": ("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--timing", "cyc",
                         "--psb-period", "1024"),
    "calls-mtc-ovf": ("--program", "calls", "--timing", "mtc", "--mtc-period", "5", "--ovf", "2"),
    "events-power-ptwrite": ("--program", "events", "--power", "--timing", "cyc", "--cbr", "18", "--ptwrite", "fup"),
    "threads-pipe-faults": ("--program", "threads", "--cpus", "2", "--pipe", "--ovf", "2", "--truncate", "1",
                            "--psb-period", "1024"),
    "threads-kcore": ("--program", "threads", "--cpus", "2", "--kcore"),
}


def have_system_pyside2() -> bool:
    """perf's embedded Python is Debian's: PySide2 must import there, not in this venv."""
    import subprocess

    if not Path(SYSTEM_PYTHON).exists():
        return False
    r = subprocess.run([SYSTEM_PYTHON, "-c", "import PySide2.QtSql, PySide2.QtWidgets"], capture_output=True)
    return r.returncode == 0


def system_python_env() -> dict[str, str]:
    """Environment for perf's embedded (Debian) Python and Debian's python3.

    Embedded Python finds its prefix through the first ``python3`` on PATH; with a
    virtualenv/pyenv first it would pick that one's library, which has no PySide2.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    return env


def make_perf_db(out: Path, quipper: Path, *args: str) -> Path:
    """Run perf 6.1's export-to-sqlite.py on the quipper trace (skip if perf or PySide2 is missing)."""
    import shutil
    import subprocess

    import pytest

    script = PERF_SCRIPTS / "export-to-sqlite.py"
    if shutil.which("perf") is None or not script.exists():
        pytest.skip("perf (Debian linux-perf) with its export scripts is not installed")
    if not have_system_pyside2():
        pytest.skip("perf's export-to-sqlite.py needs Debian's python3-pyside2.qtsql")
    r = subprocess.run(["perf", "script", "-i", str(quipper), "--itrace=bep", "-s", str(script), str(out), *args],
                       capture_output=True, text=True, timeout=120, env=system_python_env())
    if r.returncode != 0 or not out.exists():
        pytest.fail(f"perf's export failed: {r.stderr[-2000:]}")
    return out
