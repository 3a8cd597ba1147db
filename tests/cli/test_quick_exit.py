"""The CLI's quick exit (``cli._exit``): no interpreter teardown, but everything an exit owes is done."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "loops" / "perf.data"
RUN = ("import atexit, sys\n"
       "atexit.register(lambda: print('exit handler ran', file=sys.stderr))\n"
       "{pre}"
       "from ptexport.cli import entry\n"
       "entry()\n")


def _run(*argv: str, pre: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN.format(pre=pre), *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_output_exit_handlers_and_status_survive_the_quick_exit():
    full = _run("dump", "branches", str(SAMPLE))
    assert full.returncode == 0, full.stderr
    count = _run("dump", "branches", str(SAMPLE), "--count")
    n = int(count.stdout.split()[0])
    assert n > 1000 and len(full.stdout.splitlines()) == n  # the last buffered lines are flushed
    assert full.stderr.strip().endswith("exit handler ran"), full.stderr
    bad = _run("dump", "branches", str(ROOT / "no-such.data"))
    assert bad.returncode != 0 and "no-such.data" in bad.stderr and "exit handler ran" in bad.stderr


def test_a_profiler_gets_the_normal_exit(tmp_path):
    """Under cProfile (or a tracer, a debugger) the interpreter finishes as usual: the profile is written."""
    out = tmp_path / "p.prof"
    script = tmp_path / "run.py"
    script.write_text("from ptexport.cli import entry\nentry()\n")
    r = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), str(script), "dump", "branches",
                        str(SAMPLE), "--count"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
