"""Run inside Debian's python3 (PySide2): load perf's exported-sql-viewer.py and walk its models.

Usage: python3 perf_viewer_probe.py VIEWER.py DATABASE
Prints JSON: the call graph and call tree as nested [label, columns..., children] lists,
and the main window's title after it was built offscreen.  Any query error raises.
"""

import importlib.util
import json
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
viewer_path, dbname = sys.argv[1], sys.argv[2]
sys.argv = [viewer_path, dbname]
sys.path.insert(0, os.path.dirname(os.path.abspath(viewer_path)))  # its libxed.py
spec = importlib.util.spec_from_file_location("perf_exported_sql_viewer", viewer_path)
v = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v)

from PySide2.QtWidgets import QApplication  # noqa: E402

app = QApplication([])
is_sqlite3 = open(dbname, "rb").read(15) == b"SQLite format 3" if os.path.exists(dbname) else False
dbref = v.DBRef(is_sqlite3, dbname)
db, dbname = dbref.Open("main")
glb = v.Glb(dbref, db, dbname)
glb.app = app


def walk(item, depth=0):
    out = []
    n = item.childCount()
    for i in range(max(n, 0)):
        ch = item.getChildItem(i)
        data = [str(ch.getData(c)) for c in range(len(ch.data))]
        out.append([data, walk(ch, depth + 1) if depth < 12 else []])
    return out


graph = walk(v.CallGraphModel(glb).root)
tree = walk(v.CallTreeModel(glb).root)
win = v.MainWindow(glb)
glb.mainwindow = win
win.show()
app.processEvents()
title = win.windowTitle()
win.close()
print(json.dumps({"graph": graph, "tree": tree, "title": title}))
