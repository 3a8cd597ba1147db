#!/usr/bin/env python3
"""Make the user guide's screenshots (docs/viewer/*.png) of ptexport-viewer.

    python3 scripts/screenshots.py [--db DB] [--out docs/viewer] [--perf] [--force]

Without --db it builds the viewer's test fixture database (host + guest,
known call trees, context switches, power events) in a temporary directory.
With --perf it also exports perf's own recording of the shared test data
with perf's export-to-sqlite.py and shoots the time chart and call graph of
that real trace.  Runs offscreen (QT_QPA_PLATFORM=offscreen); every window
is shot only after its queries have finished.  A picture that already exists
in --out is not replaced without --force (the default --out holds the user
guide's: refreshing them is ``python3 scripts/screenshots.py --force``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))  # _common, shared with the bench tools
sys.path.insert(0, str(REPO / "tests" / "viewer"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from _common import PERF_EXPORTER, add_options, need_file, one_line_errors, parse, perf_env  # noqa: E402

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

    from ptexport_viewer.app import MainWindow

QUIPPER = REPO.parent / "shared" / "testdata" / "perf-quipper" / "perf.data.intel_pt-4.14"
PERF_EXPORT = Path(PERF_EXPORTER)
#: The pictures written into --out (NAME.png), of the fixture database and of perf's export.
FIXTURE_SHOTS = ("call_graph", "call_tree", "selected_branches_dialog", "branches", "time_chart", "flame_graph",
                 "top_calls", "sql_console", "tables")
PERF_SHOTS = ("perf_time_chart", "perf_call_graph")


def settle(app: QApplication, win: MainWindow, extra: float = 0.2) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        app.processEvents()
        if not any(r.busy() for r in win.reports()):
            break
        time.sleep(0.01)
    t1 = time.monotonic()
    while time.monotonic() - t1 < extra:
        app.processEvents()
        time.sleep(0.01)


def expand_all(app: QApplication, win: MainWindow, rep, depth: int) -> None:
    from PySide6.QtCore import QModelIndex

    model, view = rep.model, rep.view

    def walk(parent: QModelIndex, d: int) -> None:
        if d > depth:
            return
        view.expand(parent) if parent.isValid() else None
        settle(app, win, 0)
        for r in range(model.rowCount(parent)):
            walk(model.index(r, 0, parent), d + 1)
    walk(QModelIndex(), 0)


def save(widget, out: Path, name: str) -> Path:
    """``widget`` as ``out/NAME.png`` (NAME one of the declared shots: --out was checked for them)."""
    if name not in FIXTURE_SHOTS + PERF_SHOTS:
        raise ValueError(f"undeclared screenshot {name!r}")
    path = out / f"{name}.png"
    if not widget.grab().save(str(path)):
        raise SystemExit(f"screenshots.py: error: could not write {path}")
    print(f"{path} ({path.stat().st_size // 1024} KB)")
    return path


def shoot(app: QApplication, win: MainWindow, out: Path, name: str) -> Path:
    settle(app, win)
    return save(win, out, name)


def fixture_shots(app: QApplication, db_path: Path, out: Path) -> None:
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtTest import QTest

    from ptexport_viewer.app import MainWindow
    from ptexport_viewer.db import Database

    db = Database(db_path)
    win = MainWindow(db)
    win.resize(1100, 620)
    win.show()

    cg = win.open_call_graph()
    expand_all(app, win, cg, 5)
    cg.view.setCurrentIndex(cg.model.index(0, 0))
    shoot(app, win, out, "call_graph")

    ct = win.open_call_tree()
    expand_all(app, win, ct, 5)
    shoot(app, win, out, "call_tree")

    d = win.ask_selected_branches()
    d.name.setText("CPU 0, 1000-1400")
    d.edits["cpus"].setText("0")
    d.edits["time"].setText("1000-1400")
    settle(app, win)
    save(d, out, "selected_branches_dialog")
    d.buttons.button(d.buttons.StandardButton.Ok).click()
    br = win.tabs.currentWidget()
    settle(app, win)
    br.view.selectRow(3)
    shoot(app, win, out, "branches")

    tc = win.open_time_chart()
    settle(app, win)
    chart = tc.chart
    y = 26 + 5
    # Drag-select the middle fifth of what the chart shows (any database's times).
    lo = chart.t0 + (chart.t1 - chart.t0) * 2 // 5
    hi = chart.t0 + (chart.t1 - chart.t0) * 3 // 5
    QTest.mousePress(chart, Qt.LeftButton, Qt.NoModifier, QPoint(int(chart.x_of(lo)), y))
    QTest.mouseMove(chart, QPoint(int(chart.x_of(hi)), y))
    QTest.mouseRelease(chart, Qt.LeftButton, Qt.NoModifier, QPoint(int(chart.x_of(hi)), y))
    shoot(app, win, out, "time_chart")

    fg = win.open_flame_graph(thread_id=2)
    fg.follow_box.setChecked(False)
    shoot(app, win, out, "flame_graph")

    tcalls = win.open_top_calls()
    shoot(app, win, out, "top_calls")

    sql = win.open_sql_console()
    sql.editor.setPlainText("SELECT symbols.name, COUNT(*) AS calls, SUM(return_time - call_time) AS total_ns\n"
                            "FROM calls JOIN call_paths ON call_paths.id = calls.call_path_id\n"
                            "JOIN symbols ON symbols.id = call_paths.symbol_id\n"
                            "WHERE calls.id > 0 GROUP BY symbols.name ORDER BY total_ns DESC")
    sql.execute()
    shoot(app, win, out, "sql_console")

    tb = win.open_table("context_switches_view")
    shoot(app, win, out, "tables")
    for r in win.reports():
        r.shutdown()
    win.close()
    db.close()


def perf_shots(app: QApplication, out: Path, tmp: Path) -> None:
    from ptexport_viewer.app import MainWindow
    from ptexport_viewer.db import Database

    if shutil.which("perf") is None or not QUIPPER.exists() or not PERF_EXPORT.exists():
        print("perf, its export script or the shared recording is missing: no perf screenshots")
        return
    env = perf_env()
    db_path = tmp / "perf.db"
    r = subprocess.run(["perf", "script", "-i", str(QUIPPER), "--itrace=bep", "-s", str(PERF_EXPORT), str(db_path),
                        "branches", "calls"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print("perf export failed:", r.stderr[-500:])
        return
    db = Database(db_path)
    win = MainWindow(db)
    win.resize(1100, 560)
    win.show()
    win.open_time_chart()
    shoot(app, win, out, "perf_time_chart")
    cg = win.open_call_graph()
    expand_all(app, win, cg, 3)
    shoot(app, win, out, "perf_call_graph")
    for r in win.reports():
        r.shutdown()
    win.close()
    db.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", help="database to shoot (default: the test fixture)")
    ap.add_argument("--out", default=str(REPO / "docs" / "viewer"), help="folder of the pictures (made if missing)")
    ap.add_argument("--perf", action="store_true", help="also shoot perf's export of the shared recording")
    add_options(ap, tiny=False, report=False)
    args = parse(ap, argv, outputs=lambda a: [Path(a.out) / f"{n}.png"
                                              for n in FIXTURE_SHOTS + (PERF_SHOTS if a.perf else ())])
    if args.db and "://" not in args.db:  # a PostgreSQL URL is checked when it is opened
        need_file(ap, args.db, "database")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        ap.exit(2, f"{ap.prog}: error: --out {args.out} is not a directory\n")

    with one_line_errors(ap):
        return shoot_all(args)


def shoot_all(args: argparse.Namespace) -> int:
    from PySide6.QtGui import QFont
    from PySide6.QtWidgets import QApplication

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication.instance() or QApplication([sys.argv[0]])
    f = QFont(app.font())
    f.setPointSize(9)
    app.setFont(f)
    with tempfile.TemporaryDirectory(prefix="ptv_shots_") as tmp:
        if args.db:
            db_path = Path(args.db)
        else:
            import fixture_db
            db_path = fixture_db.build(Path(tmp) / "fixture.db")
        fixture_shots(app, db_path, out)
        if args.perf:
            perf_shots(app, out, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
