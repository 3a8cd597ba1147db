"""Run under Debian's /usr/bin/python3 (PySide2): load perf's exported-sql-viewer.py as a
module, build its call graph and call tree models over DB and print every row as JSON.

    DB=path.db /usr/bin/python3 tests/viewer/perf_viewer_dump.py

Used by test_viewer_vs_perf.py as the oracle for the viewer's reports.
"""

import importlib.util
import json
import os
import sys

SCRIPTS = "/usr/lib/perf-core/scripts/python"
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, SCRIPTS)
spec = importlib.util.spec_from_file_location("perf_exported_sql_viewer", SCRIPTS + "/exported-sql-viewer.py")
viewer = importlib.util.module_from_spec(spec)
sys.argv = [sys.argv[0]]
spec.loader.exec_module(viewer)

app = viewer.QApplication([sys.argv[0]])
dbref = viewer.DBRef(True, os.environ["DB"])
db, name = dbref.Open("main")
glb = viewer.Glb(dbref, db, name)
out = {}
for kind, cls in (("call_graph", viewer.CallGraphModel), ("call_tree", viewer.CallTreeModel)):
    model = cls(glb)
    rows = []

    def walk(item, depth):
        for r in range(max(item.childCount(), 0)):
            child = item.getChildItem(r)
            rows.append([depth] + [str(child.getData(c)) for c in range(model.columnCount())])
            walk(child, depth + 1)

    walk(model.root, 0)
    out[kind] = {"headers": [model.columnHeader(c).strip() for c in range(model.columnCount())], "rows": rows}
print(json.dumps(out))
