"""The viewer's windows through the UI (pytest-qt, offscreen): each report opened,
expanded and filtered with expected rows asserted; models checked with the model
tester; screenshots saved and checked to be non-blank."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QModelIndex, QPoint, Qt  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402

from ptexport_viewer import queries as q  # noqa: E402
from ptexport_viewer.app import MainWindow  # noqa: E402
from ptexport_viewer.db import Database  # noqa: E402
from ptexport_viewer.models import PagedTableModel  # noqa: E402
from ptexport_viewer.views import Report  # noqa: E402

TIMEOUT = 10000


def idle(qtbot, rep: Report) -> None:
    qtbot.waitUntil(lambda: not rep.busy(), timeout=TIMEOUT)


def non_blank(widget, path: Path) -> None:
    """Save a screenshot and check it holds a drawing, not a flat colour."""
    img = widget.grab().toImage()
    assert img.save(str(path)), path
    img = img.convertToFormat(QImage.Format_RGB32)
    w, h = img.width(), img.height()
    assert w > 100 and h > 100
    colours = set()
    step = max(1, (w * h) // 40000)
    lum = []
    for k in range(0, w * h, step):
        c = img.pixel(k % w, k // w)
        colours.add(c)
        lum.append(((c >> 16) & 255) * 0.3 + ((c >> 8) & 255) * 0.59 + (c & 255) * 0.11)
    mean = sum(lum) / len(lum)
    var = sum((v - mean) ** 2 for v in lum) / len(lum)
    assert len(colours) > 8 and var > 20, (path, len(colours), var)


def rows_of(model, parent=QModelIndex(), col=0):
    return [model.data(model.index(r, col, parent)) for r in range(model.rowCount(parent))]


def child(model, parent, text):
    for r in range(model.rowCount(parent)):
        i = model.index(r, 0, parent)
        if model.data(i) == text:
            return i
    raise AssertionError(f"{text!r} not in {rows_of(model, parent)}")


def expand(qtbot, view, index):
    view.expand(index)
    qtbot.waitUntil(lambda: view.model().rowCount(index) > 0 or
                    (view.model().node(index).children is not None), timeout=TIMEOUT)


@pytest.fixture
def window(qtbot, fixture_path):
    db = Database(fixture_path)
    win = MainWindow(db)
    qtbot.addWidget(win)
    win.show()
    yield win
    for rep in win.reports():
        rep.shutdown()
    win.close()
    db.close()


def test_call_graph_report(qtbot, qtmodeltester, window, tmp_path):
    rep = window.open_call_graph()
    model, view = rep.model, rep.view
    idle(qtbot, rep)
    assert rows_of(model) == ["host", "guest (hypervisor pid 1000) /guests/vm1"]
    host = child(model, QModelIndex(), "host")
    expand(qtbot, view, host)
    app = child(model, host, "app")
    expand(qtbot, view, app)
    assert rows_of(model, app) == ["100:100", "100:101"]
    th = child(model, app, "100:100")
    expand(qtbot, view, th)
    main = child(model, th, "main")
    expand(qtbot, view, main)
    cols = [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())]
    assert cols[:5] == ["Call Path", "Object", "Count", "Time (ns)", "Time (%)"] and cols[-1] == "Branch Count (%)"
    got = [[model.data(model.index(r, c, main)) for c in range(model.columnCount())] for r in range(2)]
    assert got == [["foo", "app", "2", "260", "26.0", "3000", "30.0", "1500", "30.0", "2.00", "30", "30.0"],
                   ["bar", "app", "1", "500", "50.0", "5000", "50.0", "2000", "40.0", "2.50", "50", "50.0"]]
    foo = child(model, main, "foo")
    expand(qtbot, view, foo)
    assert rows_of(model, foo) == ["printf"]
    # qemu's VCPU thread: its own calls, then the guest VCPU it runs, with the guest's call graph
    kvm = child(model, host, "CPU 0/KVM")
    expand(qtbot, view, kvm)
    vth = child(model, kvm, "1000:1001")
    expand(qtbot, view, vth)
    assert rows_of(model, vth) == ["kvm_vcpu_ioctl", "guest 1000 VCPU 0"]
    gv = child(model, vth, "guest 1000 VCPU 0")
    expand(qtbot, view, gv)
    assert rows_of(model, gv) == ["gapp"]
    gapp = child(model, gv, "gapp")
    expand(qtbot, view, gapp)
    gth = child(model, gapp, "50:50")
    expand(qtbot, view, gth)
    assert rows_of(model, gth) == ["gmain"]
    # the guest machine has a VCPU level
    guest = model.index(1, 0)
    expand(qtbot, view, guest)
    assert rows_of(model, guest) == ["VCPU 0 (host thread 1000:1001)"]
    qtmodeltester.check(model)
    # find (pattern) opens the tree at the hit
    rep.activate_find()
    rep.find_bar.edit.setText("do_sys*")
    rep.find_bar.pattern.setChecked(True)
    rep.find_bar.edit.returnPressed.emit()
    qtbot.waitUntil(lambda: view.currentIndex().isValid() and model.data(view.currentIndex()) == "do_syscall_64",
                    timeout=TIMEOUT)
    assert rep.find_bar.status.text() == "1 of 1"
    # copy
    view.setCurrentIndex(child(model, main, "bar"))
    text = rep.copy()
    assert text.splitlines()[0].startswith("Call Path\tObject") and text.splitlines()[1].strip().startswith("bar\tapp\t1\t500\t50.0")
    # ptexport's stats: data loss is reported in the status bar
    qtbot.waitUntil(lambda: window.loss_label.text() == "data loss: lost_data 4096", timeout=TIMEOUT)
    non_blank(window, tmp_path / "call_graph.png")


def test_call_tree_report(qtbot, qtmodeltester, window, tmp_path):
    rep = window.open_call_tree()
    model, view = rep.model, rep.view
    idle(qtbot, rep)
    host = child(model, QModelIndex(), "host")
    expand(qtbot, view, host)
    app = child(model, host, "app")
    expand(qtbot, view, app)
    th = child(model, app, "100:100")
    expand(qtbot, view, th)
    main = child(model, th, "main")
    expand(qtbot, view, main)
    got = [[model.data(model.index(r, c, main)) for c in range(5)] for r in range(model.rowCount(main))]
    assert got == [["foo", "app", "1100", "200", "20.0"], ["bar", "app", "1400", "500", "50.0"],
                   ["foo", "app", "1920", "60", "6.0"]]
    qtmodeltester.check(model)
    rep.activate_find()
    rep.find_bar.edit.setText("foo")
    rep.find_bar.edit.returnPressed.emit()
    qtbot.waitUntil(lambda: rep.find_bar.status.text() == "1 of 2", timeout=TIMEOUT)
    assert model.data(model.index(view.currentIndex().row(), 2, view.currentIndex().parent())) == "1100"
    rep.find_bar.next_button.click()
    qtbot.waitUntil(lambda: rep.find_bar.status.text() == "2 of 2", timeout=TIMEOUT)
    qtbot.waitUntil(lambda: model.data(model.index(view.currentIndex().row(), 2,
                                                   view.currentIndex().parent())) == "1920", timeout=TIMEOUT)
    # following the time selection: the selected thread's call running at the selection's start
    ct_follow = rep
    ct_follow.follow_box.setChecked(True)
    window.selection.set((1160, 1300))
    qtbot.waitUntil(lambda: model.data(view.currentIndex()) == "printf", timeout=TIMEOUT)
    window.selection.set((1700, 1800))
    qtbot.waitUntil(lambda: model.data(view.currentIndex()) == "do_syscall_64", timeout=TIMEOUT)
    non_blank(window, tmp_path / "call_tree.png")


def test_branches_report_pages_and_filters(qtbot, qtmodeltester, window, tmp_path):
    rep = window.open_branches()
    idle(qtbot, rep)
    model = rep.model
    assert isinstance(model, PagedTableModel)
    assert model.columns[:8] == ["Id", "Time", "CPU", "Command", "PID", "TID", "Branch Type", "In Tx"]
    assert len(model.rows) == 30 and model.done
    assert [r[1] for r in model.rows[:3]] == [1000, 1050, 1100]
    assert "all rows" in rep.fetch_bar.label.text()
    qtmodeltester.check(model)
    # selecting a row asks for the disassembly (the fixture's objects do not exist: a clear reason)
    row = [r[0] for r in model.rows].index(20)
    rep.view.selectRow(row)
    qtbot.waitUntil(lambda: rep.disasm.toPlainText().startswith("No disassembly"), timeout=TIMEOUT)
    assert "object file for /usr/bin/app" in rep.disasm.toPlainText()
    non_blank(window, tmp_path / "branches.png")

    # selected branches through the dialog
    d = window.ask_selected_branches(1)
    d.edits["cpus"].setText("1")
    d.edits["time"].setText("2100-2400")
    d.name.setText("cpu1")
    d.buttons.button(d.buttons.StandardButton.Ok).click()
    sel = window.tabs.currentWidget()
    assert sel.title == "cpu1"
    idle(qtbot, sel)
    assert [(r[1], r[5]) for r in sel.model.rows] == [(2100, 101), (2200, 101), (2300, 101), (2400, 101)]
    # a bad filter stays in the dialog with a message
    d = window.ask_selected_branches(1)
    d.edits["pids"].setText("abc")
    d.buttons.button(d.buttons.StandardButton.Ok).click()
    assert d.isVisible() and "PIDs" in d.status.text()
    d.reject()
    # a bad SQL clause shows the database's message in the window
    d = window.ask_selected_branches(1)
    d.edits["sql"].setText("samples.no_such_column = 1")
    d.buttons.button(d.buttons.StandardButton.Ok).click()
    bad = window.tabs.currentWidget()
    qtbot.waitUntil(lambda: "no_such_column" in bad.fetch_bar.error.text(), timeout=TIMEOUT)
    assert bad.model.rows == []


def test_paged_model_fetches_by_key(qtbot, qtmodeltester, fixture_database):
    from ptexport_viewer import models

    model = PagedTableModel(fixture_database, models.branch_fetcher("", {}, 1, page=7))
    pages = []
    model.page_loaded.connect(pages.append)
    model.fetch_rows(1)
    qtbot.waitUntil(lambda: not model.loading, timeout=TIMEOUT)
    assert len(model.rows) == 7 and not model.done and model.canFetchMore(QModelIndex())
    model.fetch_rows(10)                     # two more pages
    qtbot.waitUntil(lambda: not model.loading, timeout=TIMEOUT)
    assert len(model.rows) == 21 and pages == [7, 7, 7]
    qtmodeltester.check(model)
    model.fetch_rows(1000)
    qtbot.waitUntil(lambda: model.done, timeout=TIMEOUT)
    assert pages == [7, 7, 7, 7, 2] and len(model.rows) == 30
    assert [r[1] for r in model.rows] == sorted(r[1] for r in model.rows)


def test_branches_fetch_bar_and_find(qtbot, window):
    from ptexport_viewer import models

    rep = window.open_branches()
    rep.view.setFixedHeight(120)          # a short view does not pull every page by itself
    rep.model.restart(models.branch_fetcher("", {}, 1, page=5))
    idle(qtbot, rep)
    n = len(rep.model.rows)
    assert n < 30 and not rep.model.done and "more available" in rep.fetch_bar.label.text()
    rep.fetch_bar.count.setValue(100)
    rep.fetch_bar.fetch()
    qtbot.waitUntil(lambda: rep.model.done and not rep.model.loading, timeout=TIMEOUT)
    assert len(rep.model.rows) == 30 and "all rows" in rep.fetch_bar.label.text()
    # find in a table
    rep.activate_find()
    rep.find_bar.edit.setText("gapp")
    rep.find_bar.edit.returnPressed.emit()
    assert rep.model.rows[rep.view.currentIndex().row()][3] == "gapp"
    rep.find_bar.edit.setText("*do_sys*")
    rep.find_bar.pattern.setChecked(True)
    rep.find_bar.edit.returnPressed.emit()
    assert rep.find_bar.status.text() == "Not found"


def test_tables_browser(qtbot, qtmodeltester, window, tmp_path):
    for name in ("comm_threads_view", "samples_view", "context_switches_view", "vcpus"):
        rep = window.open_table(name)
        idle(qtbot, rep)
        assert rep.model.rows and rep.model.done, name
        qtmodeltester.check(rep.model)
    rep = window.open_table("comms")
    idle(qtbot, rep)
    assert [r[1] for r in rep.model.rows] == ["unknown", "swapper", "app", "qemu", "CPU 0/KVM", "gapp", "swapper"]
    rep.view.selectRow(2)
    text = rep.copy(csv=True)
    assert list(csv.reader(text.splitlines())) == [["id", "comm", "c_thread_id", "c_time", "exec_flag", "has_calls"],
                                                   ["2", "app", "2", "500", "1", "1"]]
    non_blank(window, tmp_path / "table.png")
    # every table and view is in the Tables menu
    menu = [m for m in window.menuBar().actions() if m.text() == "&Tables"][0].menu()
    assert {a.text() for a in menu.actions()} == set(window.db.table_names())


def test_top_calls_report(qtbot, qtmodeltester, window, tmp_path):
    d = window.ask_top_calls()
    d.edits["comms"].setText("app")
    d.limit.setValue(3)
    d.buttons.button(d.buttons.StandardButton.Ok).click()
    rep = window.tabs.currentWidget()
    idle(qtbot, rep)
    assert [(r[3], r[7]) for r in rep.model.rows] == [("main", 1000), ("bar", 500), ("bar", 500)]
    assert rep.model.columns[7] == "Elapsed Time (ns)"
    qtmodeltester.check(rep.model)
    non_blank(window, tmp_path / "top_calls.png")
    d = window.ask_top_calls()
    d.edits["sql"].setText("calls.nope > 1")
    d.buttons.button(d.buttons.StandardButton.Ok).click()
    rep = window.tabs.currentWidget()
    idle(qtbot, rep)
    assert "nope" in rep.message.text() and rep.model.rows == []


def test_sql_console(qtbot, qtmodeltester, window, tmp_path):
    rep = window.open_sql_console()
    rep.editor.setPlainText("SELECT id, comm FROM comms WHERE id BETWEEN 1 AND 3 ORDER BY id")
    rep.run_button.click()
    idle(qtbot, rep)
    assert rep.model.rows == [(1, "swapper"), (2, "app"), (3, "qemu")]
    assert rep.status.text().startswith("3 rows")
    qtmodeltester.check(rep.model)
    out = tmp_path / "out.csv"
    assert rep.export_csv(str(out)) == 3
    assert out.read_text().splitlines() == ["id,comm", "1,swapper", "2,app", "3,qemu"]
    non_blank(window, tmp_path / "sql_console.png")
    # writes are refused, bad SQL shows the database's message, the window survives
    rep.editor.setPlainText("DROP TABLE comms")
    rep.run_button.click()
    idle(qtbot, rep)
    assert "readonly" in rep.status.text().replace("-", "").replace(" ", "").lower()
    rep.editor.setPlainText("SELECT FROM WHERE")
    rep.run_button.click()
    idle(qtbot, rep)
    assert "syntax error" in rep.status.text()
    # a runaway statement is cancelled
    rep.editor.setPlainText("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r")
    rep.run_button.click()
    qtbot.wait(100)
    rep.cancel_button.click()
    idle(qtbot, rep)
    assert rep.status.text() == "Cancelled"
    with window.db.session() as s:
        assert s.scalar("SELECT COUNT(*) FROM comms") == 7


def test_time_chart_and_shared_selection(qtbot, window, tmp_path):
    rep = window.open_time_chart()
    idle(qtbot, rep)
    chart = rep.chart
    assert [lane.label for lane in chart.data.lanes] == ["host CPU 0", "host CPU 1", "host 1000:1001 CPU 0/KVM",
                                                         "  \u2514 guest 1000 VCPU 0"]
    # the VCPU's host thread lane: when qemu's VCPU thread ran (here on host CPU 1)
    assert [(iv.start, iv.end) for iv in chart.data.lanes[2].intervals] == [(1100, 2050)]
    assert [(iv.start, iv.end, iv.tid) for iv in chart.data.lanes[3].intervals if iv.tid] == [(1150, 2050, 50)]
    assert (chart.t0, chart.t1) == (900, 2700)
    assert [rep.legend.item(i).text() for i in range(rep.legend.count())] == [
        "CPU 0/KVM 1000:1001", "app 100:100", "app 100:101", "gapp 50:50 (guest)"]
    chart.resize(1000, 300)
    # a flame graph and a branches view that follow the selection
    flame = window.open_flame_graph()
    idle(qtbot, flame)
    branches = window.open_branches()
    branches.follow_box.setChecked(True)
    idle(qtbot, branches)
    window.tabs.setCurrentWidget(rep)
    qtbot.waitExposed(chart)
    # drag-select 1200..1600 on the chart
    x0, x1 = int(chart.x_of(1200)), int(chart.x_of(1600))
    y = 26 + 5
    qtbot.mousePress(chart, Qt.LeftButton, pos=QPoint(x0, y))
    qtbot.mouseMove(chart, QPoint(x1, y))
    qtbot.mouseRelease(chart, Qt.LeftButton, pos=QPoint(x1, y))
    a, b = window.selection.range
    assert abs(a - 1200) <= 3 and abs(b - 1600) <= 3
    idle(qtbot, flame)
    idle(qtbot, branches)
    assert all(a <= r[1] <= b for r in branches.model.rows) and len(branches.model.rows) >= 8
    assert 390 <= flame.flame.root.value <= 1600
    # zoom to selection, back, forward
    rep.buttons["Zoom to selection"].click()
    assert (chart.t0, chart.t1) == (a, b)
    rep.buttons["Back"].click()
    assert (chart.t0, chart.t1) == (900, 2700)
    rep.buttons["Forward"].click()
    assert (chart.t0, chart.t1) == (a, b)
    rep.buttons["Reset"].click()
    # the interval under a point, and 'show call tree for this thread at this time'
    lane, iv = chart.interval_at(chart.x_of(1600), 26 + 5)
    assert (lane.label, iv.tid) == ("host CPU 0", 100)
    tree = window.show_call_tree_at(iv.thread_id, 1600)
    qtbot.waitUntil(lambda: tree.view.currentIndex().isValid() and
                    tree.model.data(tree.view.currentIndex()) == "do_syscall_64", timeout=TIMEOUT)
    window.tabs.setCurrentWidget(rep)
    non_blank(window, tmp_path / "time_chart.png")
    window.tabs.setCurrentWidget(flame)
    non_blank(window, tmp_path / "flame_graph.png")


def test_flame_graph_thread(qtbot, window):
    rep = window.open_flame_graph()
    idle(qtbot, rep)
    assert rep.flame.root.value == 3200          # main 1000 + bar 500 + gmain 1200 + kvm_vcpu_ioctl 500
    rep.set_thread(2)
    idle(qtbot, rep)
    assert [(c.name, c.value) for c in rep.flame.root.children] == [("main", 1000)]


def test_font_size(qtbot, window):
    rep = window.open_call_graph()
    size = rep.view.font().pointSizeF()
    rep.change_font(2)
    assert rep.view.font().pointSizeF() == pytest.approx(size + 2)


@pytest.mark.parametrize("source", ["postgres", "duckdb", pytest.param("perf", marks=pytest.mark.perf)])
def test_reports_on_other_databases(qtbot, request, source, tmp_path):
    target = request.getfixturevalue({"postgres": "pg_url", "duckdb": "duckdb_path"}.get(source, "perf_export_path"))
    db = Database(target)
    assert db.kind == {"postgres": "postgresql", "duckdb": "duckdb"}.get(source, "sqlite")
    win = MainWindow(db)
    qtbot.addWidget(win)
    win.show()
    try:
        cg = win.open_call_graph()
        idle(qtbot, cg)
        top = rows_of(cg.model)
        if source != "perf":
            assert top == ["host", "guest (hypervisor pid 1000) /guests/vm1"]
            host = child(cg.model, QModelIndex(), "host")
            expand(qtbot, cg.view, host)
            app = child(cg.model, host, "app")
            expand(qtbot, cg.view, app)
            th = child(cg.model, app, "100:100")
            expand(qtbot, cg.view, th)
            assert rows_of(cg.model, th) == ["main"]
        else:
            assert top == ["perf", "echo", ":1760", ":28"]
            echo = child(cg.model, QModelIndex(), "echo")
            expand(qtbot, cg.view, echo)
            assert rows_of(cg.model, echo) == ["3174:3174"]
            th = cg.model.index(0, 0, echo)
            expand(qtbot, cg.view, th)
            assert cg.model.rowCount(th) >= 1
        ct = win.open_call_tree()
        idle(qtbot, ct)
        br = win.open_branches()
        idle(qtbot, br)
        assert len(br.model.rows) == (30 if source != "perf" else 619)   # perf: 619 branch samples
        tc = win.open_time_chart()
        idle(qtbot, tc)
        assert tc.chart.data.lanes
        sql = win.open_sql_console()
        sql.editor.setPlainText("SELECT COUNT(*) FROM samples")
        sql.run_button.click()
        idle(qtbot, sql)
        assert sql.model.rows[0][0] == (34 if source != "perf" else 647)
        tb = win.open_table("samples")
        idle(qtbot, tb)
        assert tb.model.rows
        top = win.open_top_calls(q.CallFilter(limit=3))
        idle(qtbot, top)
        assert len(top.model.rows) == 3 and top.model.rows[0][7] >= top.model.rows[2][7]
        fg = win.open_flame_graph()
        idle(qtbot, fg)
        assert fg.flame.root.value > 0 and fg.flame.root.children
        sel = win.open_branches(q.BranchFilter(cpus="1-3", tids=[3174 if source == "perf" else 101]), name="sel")
        idle(qtbot, sel)
        assert sel.model.rows and all(1 <= r[2] <= 3 and r[5] == (3174 if source == "perf" else 101)
                                      for r in sel.model.rows)
        win.tabs.setCurrentWidget(cg)
        non_blank(win, tmp_path / f"{source}.png")
    finally:
        for rep in win.reports():
            rep.shutdown()
        win.close()
        db.close()


def test_call_graph_and_top_calls_follow_the_selection(qtbot, window):
    cg = window.open_call_graph()
    cg.follow_box.setChecked(True)
    top = window.open_top_calls(q.CallFilter(limit=20))
    top.follow_box.setChecked(True)
    idle(qtbot, top)
    window.selection.set((1200, 1600))
    idle(qtbot, cg)
    idle(qtbot, top)
    assert cg.range_label.text().startswith("calls overlapping 1200 .. 1600")
    window.tabs.setCurrentWidget(cg)
    model, view = cg.model, cg.view
    host = child(model, QModelIndex(), "host")
    expand(qtbot, view, host)
    app = child(model, host, "app")
    expand(qtbot, view, app)
    th = child(model, app, "100:100")
    expand(qtbot, view, th)
    main = child(model, th, "main")
    assert model.data(model.index(main.row(), 3, th)) == "400"          # clipped to the selection
    expand(qtbot, view, main)
    assert [(model.data(model.index(r, 0, main)), model.data(model.index(r, 3, main)))
            for r in range(model.rowCount(main))] == [("foo", "100"), ("bar", "200")]
    # calls entirely outside (thread 101's bar at 2100..2600, foo at 1920) are gone from top calls
    assert sorted(r[3] for r in top.model.rows) == ["bar", "do_syscall_64", "foo", "gmain", "gwork",
                                                    "kvm_vcpu_ioctl", "main", "printf"]
    window.selection.set(None)
    idle(qtbot, top)
    assert len(top.model.rows) == 10


def test_entry_point(tmp_path, fixture_path, capsys, monkeypatch):
    from ptexport_viewer.app import main

    assert main([str(tmp_path / "missing.db")]) == 1
    assert "ptexport-viewer:" in capsys.readouterr().err
    monkeypatch.setenv("PTEXPORT_VIEWER_NO_LOOP", "1")
    assert main([str(fixture_path), "--in-memory", "--report", "call-graph", "--report", "time-chart"]) == 0


def test_cancel_from_the_gui_thread(qtbot, fixture_database):
    from ptexport_viewer import workers

    errors, results = [], []
    slow = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r"
    job = workers.start(fixture_database, q.run_sql, slow, on_result=results.append, on_error=errors.append)
    qtbot.wait(200)
    assert not job.done.is_set()
    job.cancel()
    qtbot.waitUntil(job.done.is_set, timeout=TIMEOUT)
    qtbot.wait(50)
    assert results == [] and errors == []          # a cancelled job reports nothing


def test_shared_fixture_through_the_ui(qtbot, tmp_path):
    """The database ptexport's own writer produces (engineer F's fixture), through the windows."""
    fixture = pytest.importorskip("known_db")
    path = tmp_path / "shared.db"
    fixture.build_fixture_db(str(path))
    db = Database(path)
    win = MainWindow(db)
    qtbot.addWidget(win)
    win.show()
    try:
        cg = win.open_call_graph()
        idle(qtbot, cg)
        model, view = cg.model, cg.view
        assert rows_of(model) == ["host", "guest (hypervisor pid 200) /var/lib/guests/vm0"]
        host = child(model, QModelIndex(), "host")
        expand(qtbot, view, host)
        app = child(model, host, "app")
        expand(qtbot, view, app)
        th = child(model, app, "100:100")
        expand(qtbot, view, th)
        main = child(model, th, "main")
        expand(qtbot, view, main)
        assert [(model.data(model.index(r, 0, main)), model.data(model.index(r, 3, main)))
                for r in range(model.rowCount(main))] == [("foo", "400"), ("baz", "300")]
        guest = model.index(1, 0)
        expand(qtbot, view, guest)
        assert rows_of(model, guest) == ["VCPU 0 (host thread 200:201)"]
        tc = win.open_time_chart()
        idle(qtbot, tc)
        assert [lane.label for lane in tc.chart.data.lanes] == ["host CPU 0", "host CPU 1", "host 200:201 CPU 0/KVM"]
        br = win.open_branches()
        idle(qtbot, br)
        assert "vm exit (asynchronous)" in {r[6] for r in br.model.rows}
        non_blank(win, tmp_path / "shared_branches.png")
    finally:
        for rep in win.reports():
            rep.shutdown()
        win.close()
        db.close()


def test_cancelled_tree_load_can_be_retried(qtbot, window, monkeypatch):
    import threading

    rep = window.open_call_graph()
    idle(qtbot, rep)
    model, view = rep.model, rep.view
    host = child(model, QModelIndex(), "host")
    gate = threading.Event()
    real = q.comms_with_calls

    def slow(*a, **kw):
        gate.wait(5)
        return real(*a, **kw)
    monkeypatch.setattr(q, "comms_with_calls", slow)
    view.expand(host)
    qtbot.waitUntil(lambda: model.pending == 1, timeout=TIMEOUT)
    window.tabs.setCurrentWidget(rep)
    rep.cancel()
    assert model.pending == 0 and not model.node(host).loading and model.rowCount(host) == 0
    gate.set()
    monkeypatch.setattr(q, "comms_with_calls", real)
    qtbot.wait(100)
    assert model.rowCount(host) == 0            # the cancelled answer was dropped
    view.collapse(host)
    expand(qtbot, view, host)
    assert rows_of(model, host) == ["app", "CPU 0/KVM"]
