"""Issue #5 acceptance: perf's exported-sql-viewer.py (offscreen) on a database ptexport exported from a trace.

tests/writers/test_export_perf_viewer.py opens the hand-made fixture database and perf's own (upgraded)
export; here the database comes from ``ptexport TRACE --db`` on a generated multi-thread, two-CPU
recording, and the viewer's call graph and call tree must be exactly the ones it shows for perf's
export-to-sqlite.py database of the same recording.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ptxtest import REPO, needs_perf
from ptexport.cli import main

sys.path.insert(0, str(REPO / "tests" / "helpers"))
from exporttest import PERF_SCRIPTS, SYSTEM_PYTHON, have_system_pyside2, system_python_env  # noqa: E402

VIEWER = PERF_SCRIPTS / "exported-sql-viewer.py"
PROBE = REPO / "tests" / "helpers" / "perf_viewer_probe.py"


def _probe(db: Path) -> dict:
    env = dict(system_python_env(), QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([SYSTEM_PYTHON, str(PROBE), str(VIEWER), str(db)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _count(nodes) -> int:
    return sum(1 + _count(children) for _, children in nodes)


@pytest.mark.slow
@needs_perf
def test_perf_viewer_shows_the_same_call_graph_on_ptexport_and_perf_databases(tmp_path):
    if not VIEWER.exists() or not have_system_pyside2():
        pytest.skip("perf's viewer and Debian's python3-pyside2 are needed")
    d = tmp_path / "trace"
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--branches", "30000",
                 "--seed", "4"], out=io.StringIO()) == 0
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    r = subprocess.run(["perf", "script", "-i", str(d / "perf.data"), "--itrace=bep", "-s",
                        str(PERF_SCRIPTS / "export-to-sqlite.py"), str(theirs), "branches", "calls"],
                       capture_output=True, text=True, timeout=300, env=system_python_env())
    assert r.returncode == 0 and theirs.exists(), r.stderr[-2000:]
    assert main([str(d / "perf.data"), "--db", str(ours), "-q"], out=io.StringIO()) == 0

    mine, perfs = _probe(ours), _probe(theirs)
    assert mine["title"].endswith(str(ours))
    assert _count(mine["graph"]) > 20 and _count(mine["tree"]) > 20  # a real call graph: threads and call paths
    assert mine["graph"] == perfs["graph"]
    assert mine["tree"] == perfs["tree"]
