"""ptexport-viewer: the main window and the console entry point.

    ptexport-viewer trace.sqlite
    ptexport-viewer postgresql://user@host/dbname
    ptexport-viewer trace.duckdb            (read-only, through duckdb_engine)
    ptexport-viewer --in-memory perf-export.db      # copy + index a perf export in memory
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QMessageBox, QTabWidget, QWidget

from . import queries as q
from .db import Database, ViewerError
from .dialogs import SelectedBranchesDialog, TopCallsDialog
from .flamegraph import FlameGraphReport
from .workers import start
from .timechart import TimeChartReport
from .views import (BranchesReport, CallGraphReport, CallTreeReport, Report, SqlConsole, TableReport, TimeSelection,
                    TopCallsReport)


class MainWindow(QMainWindow):
    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.db = db
        self.selection = TimeSelection()
        self.setWindowTitle(f"ptexport viewer - {db.display_name}")
        self.resize(1200, 760)
        self.tabs = QTabWidget()
        self.tabs.setTabsClosable(True)
        self.tabs.setMovable(True)
        self.tabs.setDocumentMode(True)
        self.tabs.tabCloseRequested.connect(self.close_tab)
        self.setCentralWidget(self.tabs)
        self.sel_label = QLabel("no time selection")
        self.statusBar().addPermanentWidget(self.sel_label)
        kind = "ptexport" if db.caps.ptexport else "perf export"
        self.db_label = QLabel(f"{db.display_name} ({kind}, read-only)")
        self.statusBar().addWidget(self.db_label)      # a widget, not a message: messages hide widgets
        self.selection.changed.connect(self._selection_changed)
        self.loss_label = QLabel()
        self.loss_label.setStyleSheet("color: #c00")
        self.statusBar().addWidget(self.loss_label)
        self._loss_job = start(db, q.data_loss, on_result=self._show_loss)
        self.dialog = None
        self.branch_events = db.caps.branch_events
        self._menus()

    def _show_loss(self, rows: list[tuple[str, int, str]]) -> None:
        if rows:
            self.loss_label.setText("data loss: " + ", ".join(f"{n} {v}" for n, v, _ in rows))
            self.loss_label.setToolTip("\n".join(f"{n}: {v} - {d}" for n, v, d in rows))

    # -- menus -----------------------------------------------------------------
    def _act(self, menu, text: str, slot: Callable, shortcut: QKeySequence | str | None = None) -> QAction:
        a = QAction(text, self)
        a.triggered.connect(lambda checked=False: slot())
        if shortcut is not None:
            a.setShortcut(QKeySequence(shortcut))
        menu.addAction(a)
        return a

    def _menus(self) -> None:
        caps = self.db.caps
        mb = self.menuBar()
        f = mb.addMenu("&File")
        self._act(f, "&Quit", self.close, QKeySequence.Quit)
        e = mb.addMenu("&Edit")
        self._act(e, "&Find...", lambda: self._current(lambda r: r.activate_find()), QKeySequence.Find)
        self._act(e, "&Copy", lambda: self._current(lambda r: r.copy(False)), QKeySequence.Copy)
        self._act(e, "Copy as CS&V", lambda: self._current(lambda r: r.copy(True)), "Ctrl+Shift+C")
        self._act(e, "Fetch &more records", self._fetch_more, "Ctrl+R")
        self._act(e, "Cancel running &queries", lambda: self._current(lambda r: r.cancel()), "Ctrl+.")
        v = mb.addMenu("&View")
        self._act(v, "&Larger font", lambda: self._current(lambda r: r.change_font(1)), QKeySequence.ZoomIn)
        self._act(v, "&Smaller font", lambda: self._current(lambda r: r.change_font(-1)), QKeySequence.ZoomOut)
        self._act(v, "Clear time selection", lambda: self.selection.set(None))
        r = mb.addMenu("&Reports")
        if caps.has_calls:
            self._act(r, "Context-Sensitive Call &Graph", self.open_call_graph)
            self._act(r, "Call &Tree", self.open_call_tree)
        if caps.has("samples"):
            events = self.branch_events or [(None, "branches")]
            for ev, name in events:
                suffix = "" if len(events) == 1 else f" ({name}, id={ev})"
                self._act(r, "All &branches" + suffix, lambda ev=ev: self.open_branches(evsel_id=ev))
                self._act(r, "&Selected branches..." + suffix, lambda ev=ev: self.ask_selected_branches(ev))
        if caps.has_calls:
            self._act(r, "Top calls by &elapsed time...", self.ask_top_calls)
            self._act(r, "&Flame graph", self.open_flame_graph)
        r.addSeparator()
        self._act(r, "S&QL console", self.open_sql_console)
        if caps.has_context_switches:
            c = mb.addMenu("&Charts")
            self._act(c, "&Time chart by CPU", self.open_time_chart)
        t = mb.addMenu("&Tables")
        for name in self.db.table_names():
            self._act(t, name, lambda n=name: self.open_table(n))
        h = mb.addMenu("&Help")
        self._act(h, "&About", self.about)

    def _current(self, fn: Callable[[Report], object]) -> None:
        w = self.tabs.currentWidget()
        if isinstance(w, Report):
            fn(w)

    def _fetch_more(self) -> None:
        w = self.tabs.currentWidget()
        if isinstance(w, TableReport):
            w.fetch_bar.fetch()

    # -- reports ------------------------------------------------------------------
    def add_report(self, rep: Report) -> Report:
        i = self.tabs.addTab(rep, rep.title)
        self.tabs.setCurrentIndex(i)
        rep.follow(self.selection.range) if self.selection.range is not None else None
        return rep

    def reports(self) -> list[Report]:
        return [self.tabs.widget(i) for i in range(self.tabs.count())]

    def open_call_graph(self) -> CallGraphReport:
        return self.add_report(CallGraphReport(self.db))

    def open_call_tree(self) -> CallTreeReport:
        return self.add_report(CallTreeReport(self.db))

    def open_branches(self, flt: q.BranchFilter | None = None, evsel_id: int | None = None,
                      name: str = "All Branches") -> BranchesReport:
        if evsel_id is None and self.branch_events:
            evsel_id = self.branch_events[0][0]
        return self.add_report(BranchesReport(self.db, flt, evsel_id, name))

    def ask_selected_branches(self, evsel_id: int | None = None) -> SelectedBranchesDialog:
        d = SelectedBranchesDialog(self)
        d.accepted.connect(lambda: self.open_branches(d.result_filter, evsel_id, d.name.text().strip()))
        self.dialog = d
        d.open()
        return d

    def ask_top_calls(self) -> TopCallsDialog:
        d = TopCallsDialog(self)
        d.accepted.connect(lambda: self.open_top_calls(d.result_filter, d.name.text().strip()))
        self.dialog = d
        d.open()
        return d

    def open_top_calls(self, flt: q.CallFilter | None = None, name: str = "Top Calls") -> TopCallsReport:
        return self.add_report(TopCallsReport(self.db, flt, name))

    def open_time_chart(self) -> TimeChartReport:
        rep = TimeChartReport(self.db)
        rep.chart.selection_changed.connect(self.selection.set)
        rep.call_tree_requested.connect(self.show_call_tree_at)
        return self.add_report(rep)

    def open_flame_graph(self, thread_id: int | None = None) -> FlameGraphReport:
        rep = FlameGraphReport(self.db)
        rep.range = self.selection.range
        if thread_id is not None:
            rep.set_thread(thread_id)
        return self.add_report(rep)

    def open_sql_console(self) -> SqlConsole:
        return self.add_report(SqlConsole(self.db))

    def open_table(self, name: str) -> TableReport:
        return self.add_report(TableReport(self.db, name))

    def show_call_tree_at(self, thread_id: int, t: int) -> CallTreeReport:
        rep = self.open_call_tree()
        rep.show_thread_at_time(thread_id, t)
        return rep

    def _selection_changed(self, r: tuple[int, int] | None) -> None:
        self.sel_label.setText("no time selection" if r is None else f"time selection {r[0]} .. {r[1]} "
                               f"({r[1] - r[0]:,} ns)")
        for rep in self.reports():
            rep.follow(r)

    def close_tab(self, i: int) -> None:
        w = self.tabs.widget(i)
        self.tabs.removeTab(i)
        if isinstance(w, Report):
            w.shutdown()
        w.deleteLater()

    def about(self) -> None:
        QMessageBox.about(self, "About ptexport viewer",
                          f"ptexport viewer\n\nDatabase: {self.db.display_name}\n{self.db.caps.server_version}\n"
                          f"Schema: {'ptexport' if self.db.caps.ptexport else 'perf export'}")

    def closeEvent(self, e) -> None:
        for rep in self.reports():
            rep.shutdown()
        super().closeEvent(e)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ptexport-viewer", description="Browse a ptexport or perf export database.")
    p.add_argument("database", help="SQLite file, DuckDB file (NAME.duckdb, or duckdb:PATH) or postgresql:// URL")
    p.add_argument("--in-memory", action="store_true",
                   help="copy an SQLite database into memory and add the viewer's indexes (the file is not changed)")
    p.add_argument("--timeout", type=float, default=30.0, help="statement timeout of the SQL console, seconds")
    p.add_argument("--report", choices=["call-graph", "call-tree", "branches", "time-chart", "flame-graph", "sql"],
                   action="append", default=[], help="report to open at start (repeatable)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        db = Database(args.database, in_memory=args.in_memory, user_timeout=args.timeout)
    except ViewerError as e:
        print(f"ptexport-viewer: {e}", file=sys.stderr)
        return 1
    app = QApplication.instance() or QApplication([sys.argv[0]])
    win = MainWindow(db)
    opens = {"call-graph": win.open_call_graph, "call-tree": win.open_call_tree, "branches": win.open_branches,
             "time-chart": win.open_time_chart, "flame-graph": win.open_flame_graph, "sql": win.open_sql_console}
    for r in args.report or (["call-graph"] if db.caps.has_calls else ["branches"]):
        opens[r]()
    win.show()
    rc = app.exec() if not os.environ.get("PTEXPORT_VIEWER_NO_LOOP") else 0
    db.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
