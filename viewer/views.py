"""Report widgets: trees (call graph, call tree), paged tables (branches, any table),
top calls, the SQL console, and the bars they share (find, fetch more)."""

from __future__ import annotations

import fnmatch
import time
from typing import Any, Callable, Sequence

from PySide6.QtCore import QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QFont, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QFileDialog, QHBoxLayout, QHeaderView, QLabel,
                               QLineEdit, QPlainTextEdit, QProgressBar, QPushButton, QSpinBox, QSplitter,
                               QTableView, QToolButton, QTreeView, QVBoxLayout, QWidget)

from . import queries as q
from .db import Database, csv_lines
from .disasm import disassemble_branch
from .models import (CallGraphModel, CallTreeModel, LazyTreeModel, PagedTableModel, RowsModel, branch_fetcher,
                     table_fetcher)
from .workers import Job, start


class TimeSelection(QObject):
    """The one time range every open view can follow (None = no selection)."""

    changed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.range: tuple[int, int] | None = None

    def set(self, r: tuple[int, int] | None) -> None:
        if r is not None:
            r = (int(min(r)), int(max(r)))
        if r != self.range:
            self.range = r
            self.changed.emit(r)


# ----------------------------------------------------------------------------
# Copy helpers


def selected_table(view: QAbstractItemView, with_header: bool = True) -> tuple[list[str], list[list[str]]]:
    model = view.model()
    idx = view.selectionModel().selectedIndexes() if view.selectionModel() else []
    if not idx and view.currentIndex().isValid():
        idx = [view.currentIndex()]
    if not idx:
        return [], []
    cols = sorted({i.column() for i in idx})
    rows: dict[tuple, dict[int, str]] = {}
    for i in idx:
        path = []
        p = i
        while p.isValid():
            path.insert(0, p.row())
            p = p.parent()
        rows.setdefault(tuple(path), {})[i.column()] = str(model.data(i) or "")
    header = [str(model.headerData(c, Qt.Horizontal) or "") for c in cols] if with_header else []
    body = []
    for key in sorted(rows):
        depth = len(key) - 1
        r = [rows[key].get(c, "") for c in cols]
        if depth and isinstance(view, QTreeView) and r and cols[0] == 0:
            r[0] = "  " * depth + r[0]
        body.append(r)
    return header, body


def copy_text(view: QAbstractItemView) -> str:
    header, body = selected_table(view)
    if not body:
        return ""
    return "\n".join("\t".join(r) for r in [header] + body) + "\n"


def copy_csv(view: QAbstractItemView) -> str:
    header, body = selected_table(view)
    if not body:
        return ""
    return csv_lines(header, body)


# ----------------------------------------------------------------------------
# Bars


class FindBar(QWidget):
    """Find: a value, exact or pattern (``*`` and ``?``), next / previous."""

    find = Signal(str, bool, int)      # value, pattern, direction (0 = new search, 1 next, -1 previous)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(QLabel("Find:"))
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("symbol name (exact) or pattern with * and ?")
        self.pattern = QCheckBox("Pattern")
        self.prev_button = QToolButton(text="\u25b2")
        self.next_button = QToolButton(text="\u25bc")
        self.status = QLabel()
        close = QToolButton(text="\u2715")
        for w in (self.edit, self.pattern, self.prev_button, self.next_button, self.status):
            lay.addWidget(w)
        lay.addStretch(1)
        lay.addWidget(close)
        self.edit.returnPressed.connect(lambda: self._go(1))
        self.next_button.clicked.connect(lambda: self._go(1))
        self.prev_button.clicked.connect(lambda: self._go(-1))
        close.clicked.connect(self.hide)
        self.last: tuple[str, bool] | None = None

    def activate(self) -> None:
        self.show()
        self.edit.setFocus()
        self.edit.selectAll()

    def _go(self, direction: int) -> None:
        value = self.edit.text().strip()
        if not value:
            return
        key = (value, self.pattern.isChecked())
        if key != self.last:
            self.last = key
            direction = 0
        self.find.emit(value, key[1], direction)

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet("color: #c00" if error else "")


class FetchMoreBar(QWidget):
    """Rows held, 'fetch N more' with progress, cancel."""

    def __init__(self, model: PagedTableModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        lay = QHBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        self.label = QLabel()
        self.count = QSpinBox()
        self.count.setRange(100, 10_000_000)
        self.count.setSingleStep(1000)
        self.count.setValue(10000)
        self.count.setSuffix(" rows")
        self.fetch_button = QPushButton("Fetch more")
        self.cancel_button = QPushButton("Cancel")
        self.bar = QProgressBar()
        self.bar.setMaximumWidth(200)
        self.bar.setTextVisible(True)
        self.error = QLabel()
        self.error.setStyleSheet("color: #c00")
        self.error.setWordWrap(True)
        for w in (self.label, self.count, self.fetch_button, self.cancel_button, self.bar, self.error):
            lay.addWidget(w)
        lay.addStretch(1)
        self.fetch_button.clicked.connect(self.fetch)
        self.cancel_button.clicked.connect(model.cancel)
        model.progress.connect(self.update_state)
        model.busy.connect(lambda b: self.update_state())
        model.failed.connect(self.error.setText)
        model.modelReset.connect(lambda: self.error.setText(""))
        self.target = 0
        self.update_state()

    def fetch(self) -> None:
        self.target = len(self.model.rows) + self.count.value()
        self.bar.setRange(0, self.count.value())
        self.model.fetch_rows(self.count.value())
        self.update_state()

    def update_state(self, *_: Any) -> None:
        n = len(self.model.rows)
        more = "all rows" if self.model.done else "more available"
        self.label.setText(f"{n} rows ({more})")
        busy = self.model.loading
        self.fetch_button.setEnabled(not self.model.done and not busy)
        self.cancel_button.setEnabled(busy)
        if busy and self.target:
            start_n = self.target - self.count.value()
            self.bar.setValue(max(0, min(self.count.value(), n - start_n)))
            self.bar.show()
        elif busy:
            self.bar.setRange(0, 0)
            self.bar.show()
        else:
            self.bar.hide()
            self.target = 0


# ----------------------------------------------------------------------------
# Report base


class Report(QWidget):
    """A tab: a title, a main item view, copy/CSV, font size, optional find."""

    title = "Report"

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.db = db
        self.view: QAbstractItemView | None = None
        self.find_bar: FindBar | None = None
        self.jobs: list[Job] = []
        self.font_size = QGuiApplication.font().pointSizeF()

    def run(self, fn: Callable, *args: Any, on_finished: Callable[[], None] | None = None, **kw: Any) -> Job:
        """Start ``fn(session, *args)`` in a worker; the job stays in ``self.jobs`` until it is over."""
        holder: list[Job] = []

        def finished() -> None:
            if holder and holder[0] in self.jobs:
                self.jobs.remove(holder[0])
            if on_finished is not None:
                on_finished()
        job = start(self.db, fn, *args, on_finished=finished, **kw)
        holder.append(job)
        self.jobs.append(job)
        return job

    def cancel(self) -> None:
        for j in list(self.jobs):
            j.cancel()
        m = self.view.model() if self.view is not None else None
        if hasattr(m, "cancel"):
            m.cancel()

    def busy(self) -> bool:
        m = self.view.model() if self.view is not None else None
        if isinstance(m, LazyTreeModel) and m.pending:
            return True
        if isinstance(m, PagedTableModel) and m.loading:
            return True
        return bool(self.jobs)     # a job leaves the list when its 'finished' reaches the GUI thread

    def copy(self, csv: bool = False) -> str:
        if self.view is None:
            return ""
        text = copy_csv(self.view) if csv else copy_text(self.view)
        if text:
            QGuiApplication.clipboard().setText(text)
        return text

    def change_font(self, delta: float) -> None:
        self.font_size = max(6.0, self.font_size + delta)
        for w in self.font_widgets():
            f = QFont(w.font())
            f.setPointSizeF(self.font_size)
            w.setFont(f)

    def font_widgets(self) -> list[QWidget]:
        return [self.view] if self.view is not None else []

    def activate_find(self) -> None:
        if self.find_bar is not None:
            self.find_bar.activate()

    def follow(self, r: tuple[int, int] | None) -> None:
        """Called when the shared time selection changes (views that follow override)."""

    def shutdown(self) -> None:
        self.cancel()


# ----------------------------------------------------------------------------
# Trees


class TreeReport(Report):
    model_class: type[LazyTreeModel] = CallGraphModel
    finder: Callable = staticmethod(q.find_in_call_graph)

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        self.model = self.model_class(db, self)
        self.view = QTreeView()
        self.view.setModel(self.model)
        self.view.setUniformRowHeights(True)
        self.view.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.view.setAlternatingRowColors(True)
        self.view.header().setSectionResizeMode(QHeaderView.Interactive)
        self.view.setColumnWidth(0, 260)
        self.view.setColumnWidth(1, 110)
        self.find_bar = FindBar()
        self.find_bar.find.connect(self.do_find)
        self.message = QLabel()
        self.message.setStyleSheet("color: #c00")
        self.message.hide()
        self.model.failed.connect(self.show_error)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.view)
        lay.addWidget(self.message)
        lay.addWidget(self.find_bar)
        self.find_bar.hide()
        self.hits: list[list[int]] = []
        self.hit = -1
        self.model.fetchMore(QModelIndex())

    def show_error(self, msg: str) -> None:
        self.message.setText(msg)
        self.message.show()

    def do_find(self, value: str, pattern: bool, direction: int) -> None:
        if direction == 0:
            self.find_bar.set_status("Searching...")
            self.run(self.finder, value, pattern, on_result=self._found,
                     on_error=lambda m: self.find_bar.set_status(m, True))
            return
        if not self.hits:
            return
        self.hit = (self.hit + direction) % len(self.hits)
        self.go_to(self.hits[self.hit])

    def _found(self, hits: list[list[int]]) -> None:
        self.hits = hits
        self.hit = 0
        if not hits:
            self.find_bar.set_status("Not found", True)
            return
        self.go_to(hits[0])

    def go_to(self, path: Sequence[int], then: Callable[[QModelIndex], None] | None = None) -> None:
        if self.hits:
            self.find_bar.set_status(f"{self.hit + 1} of {len(self.hits)}")

        def done(index: QModelIndex) -> None:
            p = index.parent()
            chain = []
            while p.isValid():
                chain.insert(0, p)
                p = p.parent()
            for c in chain:
                self.view.expand(c)
            self.view.setCurrentIndex(index)
            self.view.scrollTo(index)
            if then:
                then(index)
        self.model.expand_path(list(path), done)


class CallGraphReport(TreeReport):
    title = "Call Graph"
    model_class = CallGraphModel
    finder = staticmethod(q.find_in_call_graph)

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        self.follow_box = QCheckBox("Follow time selection")
        self.range_label = QLabel()
        bar = QHBoxLayout()
        bar.setContentsMargins(2, 2, 2, 0)
        bar.addWidget(self.follow_box)
        bar.addWidget(self.range_label, 1)
        self.layout().insertLayout(0, bar)
        self.time_window: tuple[int, int] | None = None
        self.follow_box.toggled.connect(lambda on: self._rebuild(self.time_window if on else None, force=True))

    def follow(self, r: tuple[int, int] | None) -> None:
        self.time_window = r
        if self.follow_box.isChecked():
            self._rebuild(r)

    def _rebuild(self, window: tuple[int, int] | None, force: bool = False) -> None:
        """A new model over the calls overlapping ``window`` (all calls when None)."""
        if not force and window == self.model.window:
            return
        self.model.cancel()
        old = self.model
        self.model = CallGraphModel(self.db, self, window)
        self.model.failed.connect(self.show_error)
        self.view.setModel(self.model)
        old.deleteLater()
        self.hits = []
        self.range_label.setText("" if window is None else
                                 f"calls overlapping {window[0]} .. {window[1]}, time clipped to it")
        self.model.fetchMore(QModelIndex())


class CallTreeReport(TreeReport):
    title = "Call Tree"
    model_class = CallTreeModel
    finder = staticmethod(q.find_in_call_tree)

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        self.follow_box = QCheckBox("Follow time selection (go to the selected thread's call at its start)")
        bar = QHBoxLayout()
        bar.setContentsMargins(2, 2, 2, 0)
        bar.addWidget(self.follow_box)
        bar.addStretch(1)
        self.layout().insertLayout(0, bar)

    def follow(self, r: tuple[int, int] | None) -> None:
        if r is None or not self.follow_box.isChecked():
            return
        cur = self.view.currentIndex()
        thread_id = self.model.node(cur).ctx.get("thread_id") if cur.isValid() else None
        if thread_id is not None:
            self.show_thread_at_time(int(thread_id), r[0])

    def show_thread_at_time(self, thread_id: int, t: int) -> None:
        """Open the tree at the innermost call of ``thread_id`` running at time ``t``."""
        self.run(q.call_at_time, thread_id, t, on_result=lambda p: self.go_to(p) if p else
                 self.show_error(f"no calls for this thread at {t}"), on_error=self.show_error)


# ----------------------------------------------------------------------------
# Paged tables


class TableReport(Report):
    """Any table or view, a page at a time by key."""

    def __init__(self, db: Database, table: str | None = None, fetch: Callable | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        if table is not None:
            self.title = table
        self.model = PagedTableModel(db, fetch or table_fetcher(table), parent=self)
        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().setDefaultSectionSize(20)
        self.view.horizontalHeader().setStretchLastSection(True)
        self.view.horizontalHeader().setResizeContentsPrecision(50)
        self.fetch_bar = FetchMoreBar(self.model)
        self.find_bar = FindBar()
        self.find_bar.edit.setPlaceholderText("text in any cell (exact) or pattern with * and ?")
        self.find_bar.find.connect(self.do_find)
        self.find_bar.hide()
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 0)
        self.body = self.view
        self.lay.addWidget(self.view, 1)
        self.lay.addWidget(self.find_bar)
        self.lay.addWidget(self.fetch_bar)
        self._sized = False
        self.model.page_loaded.connect(self._first_page)
        self.model.fetch_rows(1)
        self.find_state: tuple[str, bool, int, int] | None = None

    def _first_page(self, n: int) -> None:
        if not self._sized and self.model.rows:
            self._sized = True
            self.view.resizeColumnsToContents()
            for c in range(self.model.columnCount()):
                if self.view.columnWidth(c) > 500:
                    self.view.setColumnWidth(c, 500)

    def do_find(self, value: str, pattern: bool, direction: int) -> None:
        """Search the fetched rows; fetch more pages (with progress) while nothing matches."""
        cur = self.view.currentIndex().row()
        step = -1 if direction < 0 else 1
        start_row = cur + step if direction else max(cur, 0)
        if pattern:
            match = lambda text: fnmatch.fnmatchcase(text, value)  # noqa: E731
        else:
            match = lambda text: value in text  # noqa: E731
        rows = self.model.rows
        rng = range(start_row, len(rows)) if step > 0 else range(min(start_row, len(rows) - 1), -1, -1)
        for r in rng:
            if any(match(str(v)) for v in rows[r]):
                self.view.setCurrentIndex(self.model.index(r, 0))
                self.view.scrollTo(self.model.index(r, 0))
                self.find_bar.set_status(f"row {r + 1}")
                return
        if step > 0 and not self.model.done:
            self.find_bar.set_status(f"searching... {len(rows)} rows")
            self.model.fetch_rows(q.PAGE_SIZE * 10)

            def again(_: int = 0) -> None:
                if self.model.loading:
                    return
                try:
                    self.model.busy.disconnect(again)
                except (RuntimeError, TypeError):
                    pass
                self.do_find(value, pattern, 1 if direction else 0)
            self.model.busy.connect(again)
            return
        self.find_bar.set_status("Not found", True)

    def cancel(self) -> None:
        super().cancel()


class BranchesReport(TableReport):
    """perf's 'All branches' / 'Selected branches', plus the target block's disassembly."""

    def __init__(self, db: Database, flt: q.BranchFilter | None = None, evsel_id: int | None = None,
                 name: str = "All Branches", follow_selection: bool = False, parent: QWidget | None = None) -> None:
        self.flt = flt or q.BranchFilter()
        self.evsel_id = evsel_id
        self.title = name
        self.following = follow_selection
        self.where_error: str | None = None
        super().__init__(db, fetch=self._make_fetch(), parent=parent)
        self.title = name
        self.disasm = QPlainTextEdit()
        self.disasm.setReadOnly(True)
        self.disasm.setFont(QFont("Monospace"))
        self.disasm.setPlaceholderText("Select a branch to disassemble the block at its target")
        split = QSplitter(Qt.Vertical)
        self.lay.removeWidget(self.view)
        split.addWidget(self.view)
        split.addWidget(self.disasm)
        split.setSizes([500, 160])
        self.lay.insertWidget(0, split, 1)
        self.follow_box = QCheckBox("Follow time selection")
        self.follow_box.setChecked(follow_selection)
        self.fetch_bar.layout().insertWidget(0, self.follow_box)
        self.view.selectionModel().currentRowChanged.connect(self._row_changed)
        self.disasm_roots: list[str] = []
        self.model.modelReset.connect(self._mono)
        self._mono()

    def _mono(self) -> None:
        if self.model.columns:
            self.model.mono_columns = {len(self.model.columns) - 1}

    def _make_fetch(self) -> Callable:
        flt = self.flt
        evsel = self.evsel_id

        def fetch(s, after):
            where, params = q.branch_where(s, flt)
            return branch_fetcher(where, params, evsel)(s, after)
        return fetch

    def set_filter(self, flt: q.BranchFilter) -> None:
        self.flt = flt
        self.model.restart(self._make_fetch())

    def follow(self, r: tuple[int, int] | None) -> None:
        if not self.follow_box.isChecked():
            return
        import dataclasses
        self.set_filter(dataclasses.replace(self.flt, time_window=r))

    def _row_changed(self, cur: QModelIndex, prev: QModelIndex) -> None:
        if not cur.isValid():
            return
        sample_id = self.model.rows[cur.row()][0]
        self.disasm.setPlainText("Disassembling...")
        self.run(disassemble_branch, int(sample_id), self.disasm_roots,
                 on_result=lambda lines: self.disasm.setPlainText("\n".join(lines)),
                 on_error=lambda m: self.disasm.setPlainText(m))

    def font_widgets(self) -> list[QWidget]:
        return [self.view, self.disasm]


# ----------------------------------------------------------------------------
# Top calls, SQL console


class TopCallsReport(Report):
    title = "Top Calls"

    def __init__(self, db: Database, flt: q.CallFilter | None = None, name: str = "Top Calls",
                 parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        self.title = name
        self.flt = flt or q.CallFilter()
        self.model = RowsModel(parent=self, right_align=(1, 2, 5, 6, 7, 8))
        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().setDefaultSectionSize(20)
        self.view.horizontalHeader().setResizeContentsPrecision(50)
        self.message = QLabel("Loading...")
        self.message.setWordWrap(True)
        self.follow_box = QCheckBox("Follow time selection")
        self.follow_box.toggled.connect(lambda _: self.reload())
        bottom = QHBoxLayout()
        bottom.addWidget(self.follow_box)
        bottom.addWidget(self.message, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.view, 1)
        lay.addLayout(bottom)
        self.time_window: tuple[int, int] | None = None
        self.reload()

    def follow(self, r: tuple[int, int] | None) -> None:
        self.time_window = r
        if self.follow_box.isChecked():
            self.reload()

    def reload(self) -> None:
        import dataclasses
        flt = dataclasses.replace(self.flt, time_window=self.time_window if self.follow_box.isChecked() else None)
        self.run(q.top_calls, flt, on_result=self._loaded, on_error=self._error)

    def _loaded(self, result: tuple) -> None:
        cols, rows = result
        self.model.set_rows(cols, rows)
        self.view.resizeColumnsToContents()
        self.message.setStyleSheet("")
        self.message.setText(f"{len(rows)} calls")

    def _error(self, msg: str) -> None:
        self.message.setStyleSheet("color: #c00")
        self.message.setText(msg)


class SqlConsole(Report):
    """Any read-only statement; results in a table, CSV export, cancel, statement timeout."""

    title = "SQL Console"

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        self.editor = QPlainTextEdit()
        self.editor.setFont(QFont("Monospace"))
        self.editor.setPlaceholderText("SELECT ... (read-only; Ctrl+Return runs)")
        self.editor.setPlainText("SELECT * FROM comms")
        self.run_button = QPushButton("Run")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.csv_button = QPushButton("Export CSV...")
        self.limit = QSpinBox()
        self.limit.setRange(1, 10_000_000)
        self.limit.setValue(10000)
        self.limit.setPrefix("limit ")
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.model = RowsModel(parent=self)
        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().setDefaultSectionSize(20)
        self.view.horizontalHeader().setResizeContentsPrecision(50)
        bar = QHBoxLayout()
        for w in (self.run_button, self.cancel_button, self.limit, self.csv_button):
            bar.addWidget(w)
        bar.addWidget(self.status, 1)
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.editor)
        split.addWidget(self.view)
        split.setSizes([120, 400])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(split, 1)
        self.run_button.clicked.connect(self.execute)
        self.cancel_button.clicked.connect(self.cancel)
        self.csv_button.clicked.connect(self._ask_csv)
        QShortcut(QKeySequence("Ctrl+Return"), self.editor, activated=self.execute)
        self.job: Job | None = None
        self.t0 = 0.0

    def execute(self) -> None:
        if self.job is not None:
            return
        sql = self.editor.toPlainText()
        self.status.setStyleSheet("")
        self.status.setText("Running...")
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.t0 = time.monotonic()
        self.job = self.run(q.run_sql, sql, self.limit.value(), timeout=self.db.user_timeout,
                            on_result=self._done, on_error=self._error, on_finished=self._finished)

    def _finished(self) -> None:
        self.job = None
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.status.setStyleSheet("color: #c00")
            self.status.setText("Cancelled")

    def _done(self, result: tuple) -> None:
        cols, rows, more = result
        self.model.set_rows(cols, rows)
        self.view.resizeColumnsToContents()
        dt = time.monotonic() - self.t0
        self.status.setText(f"{len(rows)} rows{' (limit reached)' if more else ''} in {dt:.3f} s")

    def _error(self, msg: str) -> None:
        self.model.set_rows([], [])
        self.status.setStyleSheet("color: #c00")
        self.status.setText(msg)

    def export_csv(self, path: str) -> int:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(csv_lines(self.model.columns, self.model.rows))
        return len(self.model.rows)

    def _ask_csv(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export CSV", "query.csv", "CSV files (*.csv)")
        if path:
            n = self.export_csv(path)
            self.status.setText(f"{n} rows written to {path}")

    def font_widgets(self) -> list[QWidget]:
        return [self.view, self.editor]
