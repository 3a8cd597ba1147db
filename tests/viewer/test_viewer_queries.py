"""The viewer's query functions against the fixture database, without Qt.

Each test runs on the fixture in SQLite (with ptexport's additions), in perf's
plain schema, and in PostgreSQL (a copy made on the local server)."""

from __future__ import annotations

import sqlite3

import pytest

from ptexport_viewer import queries as q
from ptexport_viewer.db import Database, QueryCancelled, QueryError, ViewerError


@pytest.fixture(params=["sqlite", "plain", "postgres", "duckdb"])
def db(request):
    if request.param == "sqlite":
        target = request.getfixturevalue("fixture_path")
    elif request.param == "plain":
        target = request.getfixturevalue("plain_fixture_path")
    elif request.param == "duckdb":
        target = request.getfixturevalue("duckdb_path")
    else:
        target = request.getfixturevalue("pg_url")
    d = Database(target)
    yield d
    d.close()


def test_capabilities(db):
    caps = db.caps
    assert caps.has_calls and caps.calls_ipc and caps.samples_ipc and caps.has_context_switches
    if db.is_sqlite and db.target.endswith("plain.db"):
        assert not caps.ptexport and not caps.samples_vcpu and not caps.has_vcpus
    else:
        assert caps.ptexport and caps.samples_vcpu and caps.has_vcpus


def test_call_graph_levels(db):
    with db.session() as s:
        assert q.comms_with_calls(s) == [(2, "app"), (4, "CPU 0/KVM"), (5, "gapp")]
        assert q.threads_of_comm(s, 2) == [(2, 100, 100), (3, 100, 101)]
        root = q.root_call_path(s)
        assert root == 1
        top = q.call_graph_children(s, 2, 2, root)
        assert [(n.id, n.name, n.dso, n.count, n.time, n.branches) for n in top] == [(2, "main", "app", 1, 1000, 100)]
        kids = q.call_graph_children(s, 2, 2, 2)
        assert [(n.name, n.count, n.time, n.insn, n.cyc, n.branches) for n in kids] == [
            ("foo", 2, 260, 3000, 1500, 30), ("bar", 1, 500, 5000, 2000, 50)]
        assert [n.name for n in q.call_graph_children(s, 2, 2, 4)] == ["do_syscall_64"]
        assert q.call_graph_children(s, 2, 2, 6) == []
        # the other thread of the same comm has its own context
        assert [(n.name, n.time) for n in q.call_graph_children(s, 2, 3, root)] == [("bar", 500)]


def test_call_tree_levels(db):
    with db.session() as s:
        top = q.call_tree_children(s, 2, 2, 0)
        assert [(n.id, n.name, n.count, n.time) for n in top] == [(1, "main", 1000, 1000)]
        kids = q.call_tree_children(s, 2, 2, 1)
        assert [(n.id, n.name, n.count, n.time, n.branches) for n in kids] == [
            (2, "foo", 1100, 200, 20), (4, "bar", 1400, 500, 50), (6, "foo", 1920, 60, 10)]
        assert [(n.name, n.dso) for n in q.call_tree_children(s, 2, 2, 4)] == [("do_syscall_64", "[kernel]")]


def test_percent_and_ipc_follow_perf():
    assert q.percent(260, 1000) == "26.0"
    assert q.percent(1, 3) == "33.3"
    assert q.percent(1, 8) == "12.5"
    assert q.percent(5, 0) == "0.0"
    assert q.percent(1, 16) == "6.3"       # 6.25 rounds half up
    assert q.ipc(3000, 1500) == "2.00"
    assert q.ipc(0, 10) == "0"


def test_find(db):
    with db.session() as s:
        assert q.find_in_call_graph(s, "printf") == [[2, 2, 2, 3, 5]]
        assert q.find_in_call_graph(s, "g*", pattern=True) == [[5, 6, 7], [5, 6, 7, 8]]
        assert q.find_in_call_tree(s, "foo") == [[2, 2, 1, 2], [2, 2, 1, 6]]
        assert q.find_in_call_tree(s, "do_sys?all_64", pattern=True) == [[2, 2, 1, 4, 5]]
        assert q.find_in_call_tree(s, "nothing") == []


def test_call_at_time(db):
    with db.session() as s:
        assert q.call_at_time(s, 2, 1600) == [2, 2, 1, 4, 5]
        assert q.call_at_time(s, 2, 1350) == [2, 2, 1]       # between foo and bar: in main
        assert q.call_at_time(s, 3, 2300) == [2, 3, 7]
        assert q.call_at_time(s, 2, 10) == [2, 2, 1]         # before the first call: the first call
        assert q.call_at_time(s, 1, 1000) is None            # swapper has no calls


def test_top_calls(db):
    with db.session() as s:
        cols, rows = q.top_calls(s, q.CallFilter(limit=3))
        assert cols[0] == "Command" and len(rows) == 3
        assert [(r[3], r[7]) for r in rows] == [("gmain", 1200), ("main", 1000), ("gwork", 700)]
        _, rows = q.top_calls(s, q.CallFilter(comms=["app"], symbols=["foo"]))
        assert [(r[0], r[1], r[2], r[3], r[5], r[7], r[9]) for r in rows] == [
            ("app", 100, 100, "foo", 1100, 200, ""), ("app", 100, 100, "foo", 1920, 60, "no return")]
        _, rows = q.top_calls(s, q.CallFilter(tids=[101]))
        assert [r[3] for r in rows] == ["bar"]
        _, rows = q.top_calls(s, q.CallFilter(dsos=["[kernel.kallsyms]"]))
        assert [(r[3], r[4]) for r in rows] == [("kvm_vcpu_ioctl", "[kernel]"), ("do_syscall_64", "[kernel]")]
        _, rows = q.top_calls(s, q.CallFilter(limit=6))
        assert [(r[3], r[7]) for r in rows][3:] == [("bar", 500), ("bar", 500), ("kvm_vcpu_ioctl", 500)]
        _, rows = q.top_calls(s, q.CallFilter(sql="calls.branch_count >= 50", limit=10))
        assert sorted(r[3] for r in rows) == ["bar", "gmain", "main"]
        with pytest.raises(QueryError):
            q.top_calls(s, q.CallFilter(sql="no_such_column = 1"))


APP0 = [(1000 + 50 * i, 100) for i in range(20)]           # (time, tid) of the branch samples
APP1 = [(2100 + 100 * i, 101) for i in range(6)]
GUEST = [(1200 + 300 * i, 50) for i in range(4)]
ALL = sorted(APP0 + APP1 + GUEST, key=lambda r: (r[0], r[1] == 50))


def test_branches_keyset_pages(db):
    with db.session() as s:
        ev = q.branch_events(s)
        assert ev == [(1, "branches")]
        page = q.branches_page(s, after_id=0, limit=8, evsel_id=1)
        assert [r[0] for r in page.rows] == [1, 3, 4, 5, 6, 7, 8, 9]   # 2 is a cbr sample
        assert page.last_id == 9 and not page.done
        first = page.rows[0]
        assert first[1:8] == (1000, 0, "app", 100, 100, "call", "No")
        assert first[-1].strip() == "1101 foo+0x1 (app) -> 1210 bar+0x10 (app)"
        got = []
        after = 0
        while True:
            page = q.branches_page(s, after_id=after, limit=8, evsel_id=1)
            got += [(r[1], r[5]) for r in page.rows]
            after = page.last_id
            if page.done:
                break
        assert got == ALL
        if db.caps.samples_vcpu:
            guest = [r for r in q.branches_page(s, evsel_id=1).rows if r[5] == 50]
            assert [(r[11], r[12]) for r in guest] == [("guest 1000", 0)] * 4


def test_branch_filters(db):
    with db.session() as s:
        def rows(**kw):
            where, params = q.branch_where(s, q.BranchFilter(**kw))
            return [(r[1], r[5]) for r in q.branches_page(s, where, params, evsel_id=1).rows]

        assert rows(cpus="1") == APP1
        assert rows(cpus="0-0") == [r for r in ALL if r[1] != 101]
        assert rows(tids=[101]) == APP1
        assert rows(pids=[50]) == GUEST
        assert rows(comms=["gapp"]) == GUEST
        assert rows(symbols=["gwork"]) == GUEST              # to-symbol matches too
        assert rows(dsos=["libc.so.6"]) == APP1
        # absolute time range (ids are in time order, as perf assumes)
        assert rows(time_ranges="1000-1100") == [(1000, 100), (1050, 100), (1100, 100)]
        # relative: the first sample is at 1000, the last at 2600
        assert rows(time_ranges="100ns-150ns") == [(1100, 100), (1150, 100)]
        assert rows(time_ranges="1000-1050, 2500-") == [(1000, 100), (1050, 100), (2500, 101), (2600, 101)]
        assert rows(time_ranges="-100ns-") == [(2500, 101), (2600, 101)]
        assert rows(time_window=(1900, 1950)) == [(1900, 100), (1950, 100)]
        assert rows(sql="samples.ip = 4102") == [(1250, 100)]
        with pytest.raises(q.FilterError, match="CPUs"):
            rows(cpus="x")
        with pytest.raises(q.FilterError, match="Time ranges"):
            rows(time_ranges="abc-def")
        with pytest.raises(QueryError):
            rows(sql="samples.nope = 1")


def test_branch_type_names():
    assert q.branch_type_name(3) == "call"
    assert q.branch_type_name(259) == "trace begin / call"
    assert q.branch_type_name(517) == "return / trace end"
    assert q.branch_type_name(4131) == "vm exit (asynchronous)"
    assert q.branch_type_name(1024 + 9) == "conditional jump (in tx)"


def test_tables_browser_pages(db):
    names = db.table_names()
    for t in ("samples", "calls", "comm_threads_view", "samples_view", "context_switches_view"):
        assert t in names
    with db.session() as s:
        page = q.table_page(s, "samples", None, limit=10)
        assert page.columns[:3] == ["id", "evsel_id", "machine_id"]
        assert [r[0] for r in page.rows] == list(range(0, 10)) and page.last_key == (9,)
        page = q.table_page(s, "samples", page.last_key, limit=100)
        assert [r[0] for r in page.rows] == list(range(10, 34)) and page.done
        assert len(page.columns) == 23 if db.caps.samples_vcpu else 21
        # a view without an id column pages on its *_id columns
        assert q.table_key(s, "comm_threads_view") == ["comm_id", "thread_id"]
        p1 = q.table_page(s, "comm_threads_view", None, limit=4)
        p2 = q.table_page(s, "comm_threads_view", p1.last_key, limit=4)
        assert [(r[0], r[2]) for r in p1.rows + p2.rows] == [(1, 1), (2, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)]
        with pytest.raises(QueryError):
            q.table_page(s, "no_such_table")


def test_sql_console_is_read_only(db):
    with db.session() as s:
        cols, rows, more = q.run_sql(s, "SELECT comm FROM comms WHERE id > 0 ORDER BY id", limit=3)
        assert cols == ["comm"] and rows == [("swapper",), ("app",), ("qemu",)] and more
        with pytest.raises(QueryError) as e:
            q.run_sql(s, "DELETE FROM comms")
        assert "read" in str(e.value).lower()
        with pytest.raises(QueryError) as e:
            q.run_sql(s, "SELEC nonsense")
        assert "syntax" in str(e.value).lower()
        # no way out of read-only: one statement at a time, settings do not outlive the statement
        with pytest.raises(QueryError, match="one statement"):
            q.run_sql(s, "SELECT 1; DELETE FROM comms")
        if db.is_duckdb:  # opened read-only: the mode cannot change while it is open
            with pytest.raises(QueryError):
                q.run_sql(s, "SET access_mode = 'read_write'")
        else:
            q.run_sql(s, "PRAGMA query_only = OFF" if db.is_sqlite else "SET default_transaction_read_only = off")
        with pytest.raises(QueryError):
            q.run_sql(s, "DELETE FROM comms")
        assert q.run_sql(s, "SELECT 'a;b' AS x; -- trailing comment")[1] == [("a;b",)]
    with db.session() as s:
        assert s.scalar("SELECT COUNT(*) FROM comms") == 7


def test_statement_splitting():
    from ptexport_viewer.db import has_two_statements as two

    assert not two("SELECT 1")
    assert not two("SELECT 1;")
    assert not two("SELECT ';' FROM t;  \n -- done")
    assert not two('SELECT "a;b" FROM t')
    assert not two("SELECT $$;$$, 'it''s; fine' /* ; */")
    assert two("SELECT 1; SELECT 2")
    assert two("SELECT ';'; DROP TABLE t")
    assert two("SELECT 1 -- x\n; COMMIT")


def _slow_sql(db, pg_seconds: int) -> str:
    """A statement that runs for long on each database."""
    if db.is_sqlite:
        return "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r"
    if db.is_duckdb:
        return "SELECT SUM(hash(i)) FROM range(1000000000000) t(i)"
    return f"SELECT pg_sleep({pg_seconds})"


def test_statement_timeout(db):
    db.user_timeout = 0.3
    slow = _slow_sql(db, 5)
    with db.session(timeout=0.3) as s:
        with pytest.raises(QueryCancelled, match="timeout"):
            q.run_sql(s, slow)
        # the session is still usable
        assert s.scalar("SELECT COUNT(*) FROM machines") == 3


def test_time_chart_data(db):
    with db.session() as s:
        assert q.time_bounds(s) == (900, 2700)
        assert q.switch_cpus(s) == [(1, 0), (1, 1), (2, 0)]
        iv = q.cpu_intervals(s, 1, 0, 900, 2700)
        assert [(i.start, i.end, i.pid, i.tid, i.comm) for i in iv] == [
            (900, 2050, 100, 100, "app"), (2050, 2700, 0, 0, "swapper")]
        iv = q.cpu_intervals(s, 1, 1, 900, 2700)
        assert [(i.start, i.end, i.tid, i.comm) for i in iv] == [
            (900, 1100, 0, "swapper"), (1100, 2050, 1001, "CPU 0/KVM"), (2050, 2700, 101, "app"),
            (2700, 2700, 0, "swapper")]
        iv = q.cpu_intervals(s, 2, 0, 900, 2700)
        assert [(i.start, i.end, i.tid, i.comm) for i in iv] == [
            (900, 1150, 0, "swapper"), (1150, 2050, 50, "gapp"), (2050, 2700, 0, "swapper")]
        ev = q.point_events(s)
        errors = [(1500, "error", "bad packet")] if db.caps.ptexport else []
        assert [(e.time, e.kind, e.value) for e in ev] == [
            (1000, "cbr", "2000 MHz (50%)")] + errors + [(1600, "ptwrite", "0xdeadbeef"),
                                                         (1800, "cbr", "3000 MHz (75%)")]
        assert q.data_loss(s) == ([("lost_data", 4096, "bytes of trace lost (AUX truncated)")]
                                  if db.caps.ptexport else [])


def test_machines_and_vcpus(db):
    with db.session() as s:
        ms = q.machines(s)
        assert [(m.id, m.pid, m.label) for m in ms] == [
            (1, -1, "host"), (2, 1000, "guest (hypervisor pid 1000) /guests/vm1")]
        assert q.use_machine_level(s)
        assert q.comms_with_calls(s, machine_id=2) == [(5, "gapp")]
        assert q.threads_of_comm(s, 5, machine_id=2) == [(6, 50, 50)]
        if db.caps.has_vcpus:
            assert q.vcpus(s) == [(2, 0, 5, 1000, 1001)]
            assert q.comms_with_calls(s, machine_id=2, vcpu=0) == [(5, "gapp")]
            assert [n.name for n in q.call_graph_children(s, 5, 6, 1, vcpu=0)] == ["gmain"]
            assert q.call_graph_children(s, 5, 6, 1, vcpu=1) == []
        else:
            assert q.vcpus(s) == []


def test_flame_graph(db):
    with db.session() as s:
        fg = q.flame_graph(s, thread_id=2)
        assert fg.value == 1000
        (main,) = fg.children
        assert (main.name, main.value) == ("main", 1000)
        assert [(c.name, c.value) for c in main.children] == [("bar", 500), ("foo", 260)]
        clipped = q.flame_graph(s, thread_id=2, start=1200, end=1600)
        (main,) = clipped.children
        assert main.value == 400
        assert [(c.name, c.value) for c in main.children] == [("bar", 200), ("foo", 100)]
        whole = q.flame_graph(s)
        assert sorted((c.name, c.value) for c in whole.children) == [
            ("bar", 500), ("gmain", 1200), ("kvm_vcpu_ioctl", 500), ("main", 1000)]


def test_opening_errors(tmp_path):
    with pytest.raises(ViewerError, match="no such database"):
        Database(tmp_path / "missing.db")
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all")
    with pytest.raises(ViewerError, match="not an SQLite"):
        Database(bad)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE x (a)").connection.close()
    with pytest.raises(ViewerError, match="not a perf/ptexport export"):
        Database(empty)


def test_file_is_never_written(fixture_path):
    before = fixture_path.read_bytes()
    d = Database(fixture_path, in_memory=True)
    with d.session() as s:
        # the in-memory upgrade adds indexes to the copy only
        assert s.scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'ptv_samples_time'") == 1
        assert [n.name for n in q.call_graph_children(s, 2, 2, 2)] == ["foo", "bar"]
        with pytest.raises(QueryError):
            q.run_sql(s, "UPDATE comms SET comm = 'x'")
    d.close()
    assert fixture_path.read_bytes() == before


@pytest.mark.perf  # perf's export-to-sqlite.py makes the database
def test_perf_exported_database(perf_export_path):
    """perf's own export-to-sqlite.py output, read as it is."""
    d = Database(perf_export_path)
    try:
        assert not d.caps.ptexport
        with d.session() as s:
            comms = q.comms_with_calls(s)
            assert (2, "perf") in comms and (3, "echo") in comms
            assert q.threads_of_comm(s, 3) == [(2, 3174, 3174)]
            kids = q.call_graph_children(s, 3, 2, q.root_call_path(s))
            assert kids and all(k.count >= 1 for k in kids)
            page = q.branches_page(s, after_id=0, limit=50, evsel_id=q.branch_events(s)[0][0])
            assert len(page.rows) == 50 and [r[0] for r in page.rows] == sorted(r[0] for r in page.rows)
            assert q.switch_cpus(s) and q.cpu_intervals(s, *q.switch_cpus(s)[0], *q.time_bounds(s))
            assert [e.kind for e in q.point_events(s)] == ["cbr", "cbr"]
            _, rows = q.top_calls(s, q.CallFilter(limit=5))
            assert len(rows) == 5 and rows[0][7] >= rows[-1][7]
    finally:
        d.close()


def test_cancel_from_another_thread(db):
    import threading

    slow = _slow_sql(db, 30)
    with db.session() as s:
        threading.Timer(0.3, s.cancel).start()
        with pytest.raises(QueryCancelled, match="cancelled"):
            q.run_sql(s, slow)


def test_in_memory_upgrade_of_a_plain_perf_schema(plain_fixture_path, tmp_path):
    import shutil

    path = tmp_path / "plain.db"
    shutil.copy(plain_fixture_path, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE samples SET branch_type = 4131 WHERE id = 1")     # perf has no name for it
    con.commit()
    con.close()
    before = path.read_bytes()
    plain = Database(path)
    assert not plain.caps.has_column("comms", "has_calls")
    plain.close()
    d = Database(path, in_memory=True)
    try:
        assert d.caps.has_column("comms", "has_calls")
        with d.session() as s:
            assert q.comms_with_calls(s) == [(2, "app"), (4, "CPU 0/KVM"), (5, "gapp")]
            assert s.scalar("SELECT name FROM branch_types WHERE id = 4131") == "vm exit (asynchronous)"
            assert q.branches_page(s, limit=1, evsel_id=1).rows[0][6] == "vm exit (asynchronous)"
    finally:
        d.close()
    assert path.read_bytes() == before


def test_unreachable_postgres_database_is_a_clear_error(pg_url):
    bad = pg_url.rsplit("/", 1)[0] + "/ptv_no_such_database"
    with pytest.raises(ViewerError, match="cannot connect.*ptv_no_such_database"):
        Database(bad)
