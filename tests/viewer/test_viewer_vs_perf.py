"""The call graph and call tree against perf's own viewer (exported-sql-viewer.py, PySide2):
every row, every column, on perf's export of a real recording and on the fixture database."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ptexport_viewer.db import Database
from ptexport_viewer.models import CallGraphModel, CallTreeModel, Node

HERE = Path(__file__).resolve().parent
SYSTEM_PYTHON = "/usr/bin/python3"
PERF_VIEWER = Path("/usr/lib/perf-core/scripts/python/exported-sql-viewer.py")


def perf_rows(db_path: Path) -> dict:
    if not PERF_VIEWER.exists() or not Path(SYSTEM_PYTHON).exists():
        pytest.skip("perf's exported-sql-viewer.py (Debian linux-perf) is not installed")
    env = dict(os.environ, DB=str(db_path), QT_QPA_PLATFORM="offscreen", PATH="/usr/bin:/bin")
    env.pop("PYTHONHOME", None)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([SYSTEM_PYTHON, str(HERE / "perf_viewer_dump.py")], capture_output=True, text=True,
                       env=env, timeout=120)
    if r.returncode != 0 and "PySide2" in r.stderr:
        pytest.skip("perf's viewer needs python3-pyside2 (Debian), which is not installed")
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def our_rows(db: Database, model_class) -> dict:
    """Every row of our model, expanded fully; machine and VCPU levels (which perf has not) left out."""
    model = model_class(db)
    rows = []
    with db.session() as s:
        def walk(node: Node, depth: int) -> None:
            for child in model.query_children(s, node):
                if child.kind == "vcpu" and node.kind == "thread":
                    continue            # a guest VCPU under its host thread: ours only
                if child.kind in ("machine", "vcpu"):
                    walk(child, depth)
                    continue
                rows.append([depth] + child.data)
                walk(child, depth + 1)
        walk(model.nodes[0], 0)
    return {"headers": list(model.headers), "rows": rows}


def with_calls_only(rows: list[list]) -> list[list]:
    out, group = [], []
    for r in rows + [[0]]:
        if r[0] == 0:
            if any(g[0] >= 2 for g in group):
                out += group
            group = []
        group.append(r)
    # drop thread rows without calls under them inside kept comms
    kept = []
    for i, r in enumerate(out):
        if r[0] == 1 and not (i + 1 < len(out) and out[i + 1][0] >= 2):
            continue
        kept.append(r)
    return kept


@pytest.mark.parametrize("source", [pytest.param("perf", marks=pytest.mark.perf), "fixture", "plain"])
def test_same_rows_as_perfs_viewer(request, source, qapp):
    path = {"perf": "perf_export_path", "fixture": "fixture_path", "plain": "plain_fixture_path"}[source]
    db_path = request.getfixturevalue(path)
    want = perf_rows(db_path)
    if source == "plain":
        # Without comms.has_calls perf lists every comm, with its threads and nothing under them;
        # the viewer lists only the comms that made calls.  Compare on those.
        for kind in want:
            want[kind]["rows"] = with_calls_only(want[kind]["rows"])
    db = Database(db_path)
    try:
        for kind, cls in (("call_graph", CallGraphModel), ("call_tree", CallTreeModel)):
            got = our_rows(db, cls)
            assert got["headers"] == want[kind]["headers"], kind
            assert len(got["rows"]) == len(want[kind]["rows"]) > 5, kind
            for g, w in zip(got["rows"], want[kind]["rows"]):
                assert g == w, kind
    finally:
        db.close()
