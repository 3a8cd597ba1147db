"""Flame graph (icicle: callers on top) of a thread's calls, optionally clipped to the
shared time selection.  Width = time spent in the call path (callees included)."""

from __future__ import annotations

import zlib
from typing import Any

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QPushButton, QToolTip, QVBoxLayout, QWidget

from . import queries as q
from .db import Database
from .views import Report

ROW_H = 20


class FlameWidget(QWidget):
    frame_clicked = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.root: q.FlameNode | None = None
        self.focus: q.FlameNode | None = None
        self.boxes: list[tuple[QRectF, q.FlameNode]] = []
        self.setMouseTracking(True)
        self.setMinimumHeight(150)

    def set_root(self, root: q.FlameNode | None) -> None:
        self.root = root
        self.focus = root
        self.update()

    def depth(self, n: q.FlameNode) -> int:
        return 1 + max((self.depth(c) for c in n.children), default=0)

    def paintEvent(self, event: Any) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(255, 255, 255))
        self.boxes = []
        if self.focus is None:
            p.drawText(self.rect(), Qt.AlignCenter, "Loading...")
            return
        if not self.focus.value:
            p.drawText(self.rect(), Qt.AlignCenter, "No calls in this thread and time range")
            return
        self._draw(p, self.focus, 0.0, float(self.width()), 0)

    def _draw(self, p: QPainter, n: q.FlameNode, x: float, w: float, level: int) -> None:
        r = QRectF(x, level * ROW_H, w, ROW_H - 1)
        self.boxes.append((r, n))
        if level == 0:
            color = QColor(200, 200, 200)
        else:
            h = zlib.crc32(n.name.encode()) % 40
            color = QColor.fromHsv(10 + h, 170 + h, 240)
        p.fillRect(r, color)
        if w > 30:
            p.setPen(QColor(0, 0, 0))
            label = n.name if level else f"all ({n.value:,} ns)"
            p.drawText(r.adjusted(3, 0, -3, 0), Qt.AlignVCenter | Qt.AlignLeft,
                       p.fontMetrics().elidedText(label, Qt.ElideRight, int(w - 6)))
        cx = x
        for c in n.children:
            cw = w * c.value / n.value if n.value else 0
            if cw >= 0.5:
                self._draw(p, c, cx, cw, level + 1)
            cx += cw

    def node_at(self, x: float, y: float) -> q.FlameNode | None:
        for r, n in self.boxes:
            if r.contains(x, y):
                return n
        return None

    def mouseMoveEvent(self, e: QMouseEvent) -> None:
        n = self.node_at(e.position().x(), e.position().y())
        if n is None or self.root is None:
            QToolTip.hideText()
            return
        pct = 100.0 * n.value / self.root.value if self.root.value else 0
        QToolTip.showText(e.globalPosition().toPoint(), f"{n.name} ({n.dso})\n{n.value:,} ns, {pct:.1f}% of all", self)

    def mousePressEvent(self, e: QMouseEvent) -> None:
        n = self.node_at(e.position().x(), e.position().y())
        if n is not None:
            self.focus = n if n is not self.focus else self.root
            self.update()
            self.frame_clicked.emit(n)


class FlameGraphReport(Report):
    title = "Flame Graph"

    def __init__(self, db: Database, parent: QWidget | None = None, follow_selection: bool = True) -> None:
        super().__init__(db, parent)
        self.flame = FlameWidget()
        self.thread = QComboBox()
        self.thread.addItem("All threads", None)
        self.follow_box = QCheckBox("Follow time selection")
        self.follow_box.setChecked(follow_selection)
        reset = QPushButton("Reset zoom")
        reset.clicked.connect(lambda: self.flame.set_root(self.flame.root))
        self.status = QLabel()
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Thread:"))
        bar.addWidget(self.thread)
        bar.addWidget(self.follow_box)
        bar.addWidget(reset)
        bar.addWidget(self.status, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(self.flame, 1)
        self.range: tuple[int, int] | None = None
        self.thread.currentIndexChanged.connect(lambda _: self.reload())
        self.follow_box.toggled.connect(lambda _: self.reload())
        self.run(q.threads_with_calls, on_result=self._threads)

    def _threads(self, threads: list[tuple[int, str]]) -> None:
        self.thread.blockSignals(True)
        for tid, label in threads:
            self.thread.addItem(label, tid)
        self.thread.blockSignals(False)
        self.reload()

    def set_thread(self, thread_id: int | None) -> None:
        i = self.thread.findData(thread_id)
        if i >= 0:
            self.thread.setCurrentIndex(i)

    def follow(self, r: tuple[int, int] | None) -> None:
        self.range = r
        if self.follow_box.isChecked():
            self.reload()

    def reload(self) -> None:
        th = self.thread.currentData()
        a, b = (self.range if (self.range and self.follow_box.isChecked()) else (None, None))
        self.status.setText("Loading...")
        self.run(q.flame_graph, th, a, b, on_result=self._loaded, on_error=self.status.setText)

    def _loaded(self, root: q.FlameNode) -> None:
        self.flame.set_root(root)
        rng = f" in {self.range[0]}..{self.range[1]}" if self.range and self.follow_box.isChecked() else ""
        self.status.setText(f"{root.value:,} ns{rng}; click a frame to zoom, click it again to zoom out")
