"""Report dialogs: perf's 'Selected branches' and 'Top calls by elapsed time' filters."""

from __future__ import annotations

from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QSpinBox, QVBoxLayout,
                               QWidget)

from . import queries as q


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str, what: str) -> list[int]:
    out = []
    for t in _names(text):
        try:
            out.append(int(t))
        except ValueError:
            raise q.FilterError(f"{what}: '{t}' is not a number") from None
    return out


class _FilterDialog(QDialog):
    fields: tuple[tuple[str, str, str], ...] = ()

    def __init__(self, title: str, default_name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setMinimumWidth(560)
        form = QFormLayout()
        self.name = QLineEdit(default_name)
        form.addRow("Report name:", self.name)
        self.edits: dict[str, QLineEdit] = {}
        for key, label, hint in self.fields:
            e = QLineEdit()
            e.setPlaceholderText(hint)
            self.edits[key] = e
            form.addRow(label, e)
        self.extra(form)
        self.status = QLabel()
        self.status.setStyleSheet("color: #c00")
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.accepted.connect(self.try_accept)
        self.buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.status)
        lay.addWidget(self.buttons)
        self.result_filter = None

    def extra(self, form: QFormLayout) -> None:
        pass

    def text(self, key: str) -> str:
        return self.edits[key].text()

    def try_accept(self) -> None:
        if not self.name.text().strip():
            self.status.setText("Report name is required")
            return
        try:
            self.result_filter = self.make_filter()
        except q.FilterError as e:
            self.status.setText(str(e))
            return
        self.accept()


class SelectedBranchesDialog(_FilterDialog):
    fields = (
        ("time", "Time ranges:", "e.g. 1000-2000, 10ms-20ms (from the start), -1ms- (the last ms)"),
        ("cpus", "CPUs:", "CPUs or ranges, e.g. 0,5-6"),
        ("comms", "Commands:", "comma-separated command names"),
        ("pids", "PIDs:", "comma-separated process ids"),
        ("tids", "TIDs:", "comma-separated thread ids"),
        ("dsos", "DSOs:", "comma-separated short names (from or to)"),
        ("symbols", "Symbols:", "comma-separated symbol names (from or to)"),
        ("sql", "Raw SQL clause:", "a raw SQL WHERE condition, e.g. samples.cpu = 2"),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Selected Branches", "Selected Branches", parent)

    def make_filter(self) -> q.BranchFilter:
        f = q.BranchFilter(time_ranges=self.text("time"), cpus=self.text("cpus"), comms=_names(self.text("comms")),
                           pids=_ints(self.text("pids"), "PIDs"), tids=_ints(self.text("tids"), "TIDs"),
                           dsos=_names(self.text("dsos")), symbols=_names(self.text("symbols")),
                           sql=self.text("sql"))
        q.parse_ranges(f.cpus)
        if f.time_ranges.strip():
            q.parse_time_ranges(f.time_ranges, 0, 1 << 62)
        return f


class TopCallsDialog(_FilterDialog):
    fields = (
        ("comms", "Commands:", "comma-separated command names"),
        ("pids", "PIDs:", "comma-separated process ids"),
        ("tids", "TIDs:", "comma-separated thread ids"),
        ("dsos", "DSOs:", "comma-separated short names"),
        ("symbols", "Symbols:", "comma-separated symbol names"),
        ("sql", "Raw SQL clause:", "a raw SQL WHERE condition, e.g. calls.branch_count > 100"),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Top Calls by Elapsed Time", "Top Calls", parent)

    def extra(self, form: QFormLayout) -> None:
        self.limit = QSpinBox()
        self.limit.setRange(1, 10_000_000)
        self.limit.setValue(100)
        form.addRow("Record limit:", self.limit)

    def make_filter(self) -> q.CallFilter:
        return q.CallFilter(comms=_names(self.text("comms")), pids=_ints(self.text("pids"), "PIDs"),
                            tids=_ints(self.text("tids"), "TIDs"), dsos=_names(self.text("dsos")),
                            symbols=_names(self.text("symbols")), sql=self.text("sql"), limit=self.limit.value())
