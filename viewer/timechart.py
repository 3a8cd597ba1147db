"""Time chart by CPU: who ran where, from context switches; host and guest (VCPU) lanes;
power events and ptwrite payloads; zoom, drag-select, back/forward; 'show call tree
for this thread at this time'."""

from __future__ import annotations

import bisect
import zlib
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QAction, QColor, QMouseEvent, QPainter, QPen, QWheelEvent
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QMenu, QPushButton, QSplitter,
                               QToolTip, QVBoxLayout, QWidget)

from . import queries as q
from .db import Database, Session
from .views import Report

LABEL_W = 250
AXIS_H = 26
LANE_H = 22
LANE_GAP = 3
EVENTS_H = 46


@dataclass
class Lane:
    label: str
    machine_id: int
    cpu: int                 # CPU (host), VCPU (guest), -1 for a host thread lane
    guest: bool
    intervals: list[q.Interval] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)      # interval starts, for bisect

    def __post_init__(self) -> None:
        self.starts = [iv.start for iv in self.intervals]


@dataclass
class ChartData:
    start: int
    end: int
    lanes: list[Lane]
    events: list[q.PointEvent]


def load_chart(s: Session) -> ChartData:
    """Everything the chart draws, queried once (context switches are few next to samples)."""
    start, end = q.time_bounds(s)
    machines = {m.id: m for m in q.machines(s)}
    vcpu_host = {(v.machine_id, v.vcpu): v for v in q.vcpus(s)}
    host_lanes: list[Lane] = []
    guest_lanes: list[Lane] = []
    for mid, cpu in q.switch_cpus(s):
        m = machines.get(mid)
        guest = m is not None and m.pid != -1
        if guest:
            label = f"guest {m.pid} VCPU {cpu}"
            guest_lanes.append(Lane(label, mid, cpu, True, q.cpu_intervals(s, mid, cpu, start, end)))
        else:
            label = f"CPU {cpu}" if len(machines) <= 1 else f"host CPU {cpu}"
            host_lanes.append(Lane(label, mid, cpu, False, q.cpu_intervals(s, mid, cpu, start, end)))
    # VCPU lanes go under their host threads: a lane of when the host thread ran (on any CPU),
    # then the guest's own view of that VCPU.
    lanes = list(host_lanes)
    placed = set()
    for (mid, vcpu), v in sorted(vcpu_host.items()):
        glane = next((g for g in guest_lanes if (g.machine_id, g.cpu) == (mid, vcpu)), None)
        if v.thread_id > 0:
            runs = sorted((iv for lane in host_lanes for iv in lane.intervals if iv.thread_id == v.thread_id),
                          key=lambda iv: iv.start)
            comm = runs[0].comm if runs else ""
            lanes.append(Lane(f"host {v.host_pid}:{v.host_tid} {comm}".rstrip(), 0, -1, False, runs))
            if glane is not None:
                glane.label = f"  \u2514 guest {machines[mid].pid if mid in machines else '?'} VCPU {vcpu}"
        if glane is not None:
            lanes.append(glane)
            placed.add(id(glane))
    lanes += [g for g in guest_lanes if id(g) not in placed]
    return ChartData(start, end, lanes, q.point_events(s))


PALETTE = [QColor.fromHsv(h, s, v) for h, s, v in (
    (150, 140, 230), (330, 150, 235), (210, 150, 240), (35, 170, 245), (270, 120, 230), (95, 150, 215),
    (0, 150, 235), (185, 160, 215), (55, 170, 230), (300, 110, 220), (120, 110, 200), (20, 110, 240))]
IDLE = QColor(215, 215, 215)
_colours: dict[int, QColor] = {}


def thread_color(thread_id: int, tid: int) -> QColor:
    """Idle (tid 0) and unknown threads grey; others from a palette in order of appearance."""
    if tid <= 0 or thread_id <= 0:
        return IDLE
    c = _colours.get(thread_id)
    if c is None:
        c = PALETTE[len(_colours) % len(PALETTE)] if len(_colours) < len(PALETTE) else \
            QColor.fromHsv(zlib.crc32(str(thread_id).encode()) % 360, 140, 225)
        _colours[thread_id] = c
    return c


class ChartWidget(QWidget):
    """The drawing: one lane per (machine, CPU), an events lane, a time axis."""

    selection_changed = Signal(object)          # (t0, t1) or None
    range_changed = Signal(object, object)
    call_tree_requested = Signal(object, object)   # thread_id, time (ns: wider than a C int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data: ChartData | None = None
        self.t0 = 0
        self.t1 = 1
        self.history: list[tuple[int, int]] = []
        self.pos = -1
        self.selection: tuple[int, int] | None = None
        self.drag_from: float | None = None
        self.setMouseTracking(True)
        self.setMinimumHeight(120)
        self.setContextMenuPolicy(Qt.DefaultContextMenu)

    # -- data and range --------------------------------------------------------
    def set_data(self, data: ChartData) -> None:
        self.data = data
        end = data.end if data.end > data.start else data.start + 1
        self.history = []
        self.pos = -1
        self.set_range(data.start, end)
        self.setMinimumHeight(AXIS_H + len(data.lanes) * (LANE_H + LANE_GAP) + EVENTS_H + 10)

    def set_range(self, t0: int, t1: int, record: bool = True) -> None:
        if t1 <= t0:
            t1 = t0 + 1
        self.t0, self.t1 = int(t0), int(t1)
        if record:
            del self.history[self.pos + 1:]
            self.history.append((self.t0, self.t1))
            self.pos = len(self.history) - 1
        self.range_changed.emit(self.t0, self.t1)
        self.update()

    def back(self) -> None:
        if self.pos > 0:
            self.pos -= 1
            self.set_range(*self.history[self.pos], record=False)

    def forward(self) -> None:
        if self.pos + 1 < len(self.history):
            self.pos += 1
            self.set_range(*self.history[self.pos], record=False)

    def zoom(self, factor: float, centre: int | None = None) -> None:
        c = (self.t0 + self.t1) // 2 if centre is None else centre
        half_lo = (c - self.t0) * factor
        half_hi = (self.t1 - c) * factor
        lo, hi = int(c - half_lo), int(c + half_hi)
        if self.data is not None:
            lo = max(lo, self.data.start)
            hi = min(hi, max(self.data.end, self.data.start + 1))
        if hi - lo >= 2:
            self.set_range(lo, hi)

    def zoom_to_selection(self) -> None:
        if self.selection is not None and self.selection[1] > self.selection[0]:
            self.set_range(*self.selection)

    def reset(self) -> None:
        if self.data is not None:
            self.set_range(self.data.start, max(self.data.end, self.data.start + 1))

    def select(self, r: tuple[int, int] | None, emit: bool = True) -> None:
        self.selection = r
        self.update()
        if emit:
            self.selection_changed.emit(r)

    # -- geometry ----------------------------------------------------------------
    def x_of(self, t: float) -> float:
        w = max(1, self.width() - LABEL_W - 10)
        return LABEL_W + (t - self.t0) * w / (self.t1 - self.t0)

    def t_of(self, x: float) -> int:
        w = max(1, self.width() - LABEL_W - 10)
        return int(self.t0 + (x - LABEL_W) * (self.t1 - self.t0) / w)

    def lane_at(self, y: float) -> int | None:
        if self.data is None or y < AXIS_H:
            return None
        i = int((y - AXIS_H) // (LANE_H + LANE_GAP))
        return i if 0 <= i < len(self.data.lanes) else None

    def interval_at(self, x: float, y: float) -> tuple[Lane, q.Interval] | None:
        i = self.lane_at(y)
        if i is None or x < LABEL_W:
            return None
        lane = self.data.lanes[i]
        t = self.t_of(x)
        k = bisect.bisect_right(lane.starts, t) - 1
        for iv in lane.intervals[max(0, k - 1):k + 1]:
            if iv.start <= t < iv.end or (iv.start == iv.end == t):
                return lane, iv
        return None

    # -- painting ----------------------------------------------------------------
    def paintEvent(self, event: Any) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(255, 255, 255))
        if self.data is None:
            p.drawText(self.rect(), Qt.AlignCenter, "Loading...")
            return
        self._axis(p)
        right = self.width() - 10
        for i, lane in enumerate(self.data.lanes):
            y = AXIS_H + i * (LANE_H + LANE_GAP)
            p.setPen(QColor(40, 40, 40) if not lane.guest else QColor(30, 80, 160))
            p.drawText(QRectF(4, y, LABEL_W - 8, LANE_H), Qt.AlignVCenter | Qt.AlignLeft, lane.label)
            p.fillRect(QRectF(LABEL_W, y, right - LABEL_W, LANE_H), QColor(246, 246, 246))
            first = max(0, bisect.bisect_right(lane.starts, self.t0) - 1)
            last = bisect.bisect_right(lane.starts, self.t1)
            prev_x1 = -1.0
            for iv in lane.intervals[first:last]:
                if iv.end < self.t0:
                    continue
                if self.x_of(iv.end) < prev_x1 + 1 and iv.end > iv.start and self.x_of(iv.start) >= prev_x1 - 1:
                    continue          # below a pixel and hidden by the previous one: skip (zoomed-out traces)
                x0 = max(LABEL_W, self.x_of(iv.start))
                x1 = min(right, self.x_of(iv.end))
                if x1 - x0 < 1:
                    x1 = x0 + 1
                p.fillRect(QRectF(x0, y + 1, x1 - x0, LANE_H - 2), thread_color(iv.thread_id, iv.tid))
                prev_x1 = x1
                if x1 - x0 > 60 and iv.tid > 0 and iv.thread_id > 0:
                    p.setPen(QColor(0, 0, 0))
                    p.drawText(QRectF(x0 + 3, y, x1 - x0 - 6, LANE_H), Qt.AlignVCenter | Qt.AlignLeft,
                               f"{iv.comm} {iv.pid}:{iv.tid}")
        self._events(p, AXIS_H + len(self.data.lanes) * (LANE_H + LANE_GAP))
        if self.selection is not None:
            a, b = self.selection
            x0, x1 = self.x_of(a), self.x_of(b)
            p.fillRect(QRectF(x0, AXIS_H, max(1.0, x1 - x0), self.height() - AXIS_H), QColor(60, 120, 255, 60))
            p.setPen(QPen(QColor(40, 90, 220), 1))
            p.drawLine(QPointF(x0, AXIS_H), QPointF(x0, self.height()))
            p.drawLine(QPointF(x1, AXIS_H), QPointF(x1, self.height()))

    def _axis(self, p: QPainter) -> None:
        p.setPen(QColor(0, 0, 0))
        right = self.width() - 10
        p.drawLine(QPointF(LABEL_W, AXIS_H - 4), QPointF(right, AXIS_H - 4))
        span = self.t1 - self.t0
        step = 1
        while span / step > 8:
            for m in (2, 5, 10):
                if span / (step * m) <= 8:
                    step *= m
                    break
            else:
                step *= 10
        base = self.data.start if self.data else 0
        t = base + -(-(self.t0 - base) // step) * step      # first tick at a round offset from the start
        while t <= self.t1:
            x = self.x_of(t)
            p.drawLine(QPointF(x, AXIS_H - 8), QPointF(x, AXIS_H - 4))
            if x < right - 60:
                p.drawText(QPointF(x + 2, AXIS_H - 10), f"+{t - base:,} ns")
            t += step
        p.drawText(QPointF(4, AXIS_H - 10), f"start {base}")

    def _events(self, p: QPainter, y: float) -> None:
        right = self.width() - 10
        p.setPen(QColor(60, 60, 60))
        p.drawText(QRectF(4, y, LABEL_W - 8, EVENTS_H), Qt.AlignVCenter | Qt.AlignLeft, "power / ptwrite / errors")
        p.fillRect(QRectF(LABEL_W, y, right - LABEL_W, EVENTS_H), QColor(250, 248, 240))
        ev = self.data.events
        cbr = [e for e in ev if e.kind == "cbr"]
        if cbr:
            mhz = [e.amount for e in cbr]
            top = max(mhz) or 1
            pen = QPen(QColor(220, 120, 0), 2)
            p.setPen(pen)
            prev = None
            for e, v in zip(cbr, mhz):
                x = min(right, max(LABEL_W, self.x_of(e.time)))
                yy = y + EVENTS_H - 4 - (EVENTS_H - 12) * v / top
                if prev is not None:
                    p.drawLine(QPointF(prev[0], prev[1]), QPointF(x, prev[1]))
                    p.drawLine(QPointF(x, prev[1]), QPointF(x, yy))
                prev = (x, yy)
            if prev is not None:
                p.drawLine(QPointF(prev[0], prev[1]), QPointF(right, prev[1]))
        for e in ev:
            if e.kind == "cbr" or not (self.t0 <= e.time <= self.t1):
                continue
            x = self.x_of(e.time)
            if e.kind == "error":
                p.setPen(QPen(QColor(210, 0, 0), 2))
                p.drawLine(QPointF(x - 4, y + EVENTS_H - 14), QPointF(x + 4, y + EVENTS_H - 6))
                p.drawLine(QPointF(x - 4, y + EVENTS_H - 6), QPointF(x + 4, y + EVENTS_H - 14))
                continue
            color = QColor(200, 0, 120) if e.kind == "ptwrite" else QColor(0, 140, 90)
            p.setPen(QPen(color, 2))
            p.setBrush(color)
            p.drawPolygon([QPointF(x, y + 6), QPointF(x + 5, y + 12), QPointF(x, y + 18), QPointF(x - 5, y + 12)])
        p.setBrush(Qt.NoBrush)

    def event_at(self, x: float, y: float) -> q.PointEvent | None:
        if self.data is None:
            return None
        top = AXIS_H + len(self.data.lanes) * (LANE_H + LANE_GAP)
        if not (top <= y <= top + EVENTS_H):
            return None
        best = None
        for e in self.data.events:
            d = abs(self.x_of(e.time) - x)
            if d <= 6 and (best is None or d < best[0]):
                best = (d, e)
        return best[1] if best else None

    # -- interaction --------------------------------------------------------------
    def wheelEvent(self, e: QWheelEvent) -> None:
        centre = self.t_of(e.position().x())
        self.zoom(0.8 if e.angleDelta().y() > 0 else 1.25, centre)

    def mousePressEvent(self, e: QMouseEvent) -> None:
        if e.button() == Qt.LeftButton and e.position().x() >= LABEL_W:
            self.drag_from = e.position().x()

    def mouseMoveEvent(self, e: QMouseEvent) -> None:
        x, y = e.position().x(), e.position().y()
        if self.drag_from is not None:
            a, b = sorted((self.t_of(self.drag_from), self.t_of(x)))
            self.select((a, b), emit=False)
            return
        hit = self.interval_at(x, y)
        ev = self.event_at(x, y)
        if ev is not None:
            QToolTip.showText(e.globalPosition().toPoint(), f"{ev.kind} at {ev.time} on CPU {ev.cpu}: {ev.value}", self)
        elif hit is not None:
            lane, iv = hit
            QToolTip.showText(e.globalPosition().toPoint(),
                              f"{lane.label}: {iv.comm} {iv.pid}:{iv.tid}\n{iv.start} .. {iv.end} "
                              f"({iv.end - iv.start} ns)\ntime here: {self.t_of(x)}", self)
        else:
            QToolTip.hideText()

    def mouseReleaseEvent(self, e: QMouseEvent) -> None:
        if e.button() != Qt.LeftButton or self.drag_from is None:
            return
        x0, x1 = sorted((self.drag_from, e.position().x()))
        self.drag_from = None
        if x1 - x0 < 3:
            self.select(None)
        else:
            self.select((self.t_of(x0), self.t_of(x1)))

    def contextMenuEvent(self, e: Any) -> None:
        x, y = e.pos().x(), e.pos().y()
        menu = QMenu(self)
        hit = self.interval_at(x, y)
        t = self.t_of(x)
        if hit is not None and hit[1].tid > 0:
            iv = hit[1]
            act = QAction(f"Show call tree for {iv.comm} {iv.pid}:{iv.tid} at {t}", menu)
            act.triggered.connect(lambda: self.call_tree_requested.emit(iv.thread_id, t))
            menu.addAction(act)
        if self.selection is not None:
            menu.addAction("Zoom to selection", self.zoom_to_selection)
        menu.addAction("Zoom out", lambda: self.zoom(2.0))
        menu.addAction("Back", self.back)
        menu.addAction("Forward", self.forward)
        menu.exec(e.globalPos())


class TimeChartReport(Report):
    title = "Time Chart by CPU"
    call_tree_requested = Signal(object, object)

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(db, parent)
        self.chart = ChartWidget()
        self.legend = QListWidget()
        self.legend.setMaximumWidth(230)
        bar = QHBoxLayout()
        self.buttons = {}
        for name, slot in (("Back", self.chart.back), ("Forward", self.chart.forward),
                           ("Zoom in", lambda: self.chart.zoom(0.5)), ("Zoom out", lambda: self.chart.zoom(2.0)),
                           ("Zoom to selection", self.chart.zoom_to_selection), ("Reset", self.chart.reset)):
            b = QPushButton(name)
            b.clicked.connect(slot)
            self.buttons[name] = b
            bar.addWidget(b)
        self.range_label = QLabel()
        bar.addWidget(self.range_label, 1)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.chart)
        split.addWidget(self.legend)
        split.setSizes([900, 200])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(split, 1)
        self.chart.range_changed.connect(self._range)
        self.chart.call_tree_requested.connect(self.call_tree_requested)
        self.run(load_chart, on_result=self._loaded, on_error=lambda m: self.range_label.setText(m))

    def _loaded(self, data: ChartData) -> None:
        self.chart.set_data(data)
        seen = {}
        for lane in data.lanes:
            for iv in lane.intervals:
                if iv.tid > 0 and iv.thread_id > 0:
                    seen[(iv.thread_id, iv.tid)] = f"{iv.comm} {iv.pid}:{iv.tid}" + (" (guest)" if lane.guest else "")
        self.legend.clear()
        for (th, tid), text in sorted(seen.items(), key=lambda kv: kv[1]):
            item = QListWidgetItem(text)
            c = thread_color(th, tid)
            item.setBackground(c)
            self.legend.addItem(item)

    def _range(self, t0: int, t1: int) -> None:
        base = self.chart.data.start if self.chart.data else 0
        self.range_label.setText(f"  {t0 - base:,} .. {t1 - base:,} ns from start ({t1 - t0:,} ns)")

    def follow(self, r: tuple[int, int] | None) -> None:
        if r != self.chart.selection:
            self.chart.select(r, emit=False)

    def font_widgets(self) -> list[QWidget]:
        return [self.chart, self.legend]
