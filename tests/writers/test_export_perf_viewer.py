"""perf's own exported-sql-viewer.py (Debian python3-pyside2, offscreen) on ptexport databases."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from exporttest import PERF_SCRIPTS, SYSTEM_PYTHON, have_system_pyside2, system_python_env

from ptexport.cli import main

VIEWER = PERF_SCRIPTS / "exported-sql-viewer.py"
PROBE = Path(__file__).resolve().parents[1] / "helpers" / "perf_viewer_probe.py"

pytestmark = pytest.mark.perf  # perf's exported-sql-viewer.py, perf's export


@pytest.fixture(scope="module")
def probe():
    if not VIEWER.exists():
        pytest.skip(f"perf's viewer not found at {VIEWER} (Debian linux-perf)")
    if not have_system_pyside2():
        pytest.skip("perf's viewer needs Debian's python3-pyside2 (QtSql, QtWidgets)")

    def run(db: Path) -> dict:
        env = dict(system_python_env(), QT_QPA_PLATFORM="offscreen")
        r = subprocess.run([SYSTEM_PYTHON, str(PROBE), str(VIEWER), str(db)], capture_output=True, text=True,
                           timeout=120, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout)

    return run


def _labels(nodes, depth):
    """(path of labels) for every node down to ``depth`` levels."""
    out = []

    def rec(ns, prefix):
        for data, children in ns:
            p = (*prefix, data[0])
            out.append((p, data))
            if len(p) < depth:
                rec(children, p)

    rec(nodes, ())
    return out


def test_perf_viewer_call_graph_and_call_tree_on_a_ptexport_database(probe, fixture_sqlite):
    path, expected = fixture_sqlite
    res = probe(path)
    assert res["title"].endswith(str(path))
    graph = dict(_labels(res["graph"], 6))
    # comm -> pid:tid -> call path levels, with perf's aggregation (count, time)
    assert set(graph) >= {("app",), ("gapp",), ("app", "100:100"), ("app", "100:101"), ("gapp", "50:50")}
    main_ = graph[("app", "100:100", "main")]
    assert main_[1:4] == ["app", "1", "1000"]
    assert graph[("app", "100:100", "main", "foo", "bar")][2:4] == ["2", "200"]
    assert graph[("app", "100:100", "main", "baz", "bar")][2:4] == ["1", "50"]
    assert graph[("app", "100:101", "worker", "bar")][2:4] == ["1", "400"]
    assert graph[("gapp", "50:50", "gmain", "gwork")][2:4] == ["1", "600"]
    # IPC columns are present (calls has insn_count/cyc_count): main = 620 insns / 530 cycles
    assert main_[9] == "1.17"
    # call tree: one node per call, in call order
    tree = [p for p, _ in _labels(res["tree"], 6) if len(p) == 5]
    assert tree == [("app", "100:100", "main", "foo", "bar"), ("app", "100:100", "main", "foo", "bar"),
                    ("app", "100:100", "main", "baz", "bar")]


def test_perf_viewer_on_an_upgraded_perf_database(probe, perf_db, tmp_path):
    db = tmp_path / "perf.db"
    shutil.copy(perf_db, db)
    before = probe(db)
    assert main(["upgrade", str(db)]) == 0
    after = probe(db)
    assert after["graph"] == before["graph"]
    assert after["tree"] == before["tree"]
