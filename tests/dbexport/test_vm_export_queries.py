"""docs/cookbook.md's VM queries on a generated VM recording, in SQLite and PostgreSQL, against the
generator's ground truth, perf script's own lines and perf's exported database:

* which VCPU of which guest ran on host CPU c at time t (and whether in the guest);
* the call graph of each guest;
* the time spent in the host between each VM exit and the next VM entry, per exit reason;
* the merged host/guest timeline.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter, defaultdict
from decimal import Decimal

import numpy as np
import pytest

from ptexport.perfdata import open_perf_data
from ptexport.sideband.builder import build_sideband
from ptexport.synth.vm import K_CALL, K_SYSCALL, K_TR_STRT

from cookbook import cookbook_queries
from vmexporttest import OTHER, PG_BASE, export_db, perf_branches, truth_exits

QUERIES = {k: v for k, v in cookbook_queries().items() if k.startswith("vm_")}
_Q_LINE = "WITH q AS (SELECT 0 AS cpu, 3500000010000 AS t),"


def _norm(rows):
    return [tuple(int(v) if isinstance(v, Decimal) else v for v in r) for r in rows]


class _Db:
    def __init__(self, kind: str, target) -> None:
        self.kind = kind
        self.target = target

    def run(self, sql: str) -> list[tuple]:
        if self.kind == "sqlite":
            with sqlite3.connect(self.target) as c:
                return _norm(c.execute(sql).fetchall())
        import psycopg

        with psycopg.connect(self.target) as c:
            return _norm(c.execute(sql).fetchall())


@pytest.fixture(scope="session")
def vm_pg(mixed, pg_admin):
    vm, _theirs, _ours = mixed
    name = f"ptx_vmq_{uuid.uuid4().hex[:10]}"
    url = f"{PG_BASE}/{name}"
    export_db(vm.data, url)
    yield url
    pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, mixed):
    if request.param == "sqlite":
        return _Db("sqlite", mixed[2])
    return _Db("postgresql", request.getfixturevalue("vm_pg"))


def test_cookbook_has_the_vm_queries():
    assert set(QUERIES) == {"vm_vcpu_on_cpu", "vm_guest_call_graph", "vm_guest_call_graph_raw", "vm_exit_host_time",
                            "vm_timeline"}
    assert _Q_LINE in QUERIES["vm_vcpu_on_cpu"]


def _host_switch_ins(vm) -> dict[int, list[int]]:
    with open_perf_data(str(vm.data)) as pd:
        sb = build_sideband(pd.records(), time_conv=pd.time_conv, auxtrace_info=pd.auxtrace_info)
    return {c: sorted(int(s) for s, _e, _p, _t in tl.intervals()) for c, tl in sb.host.cpus.items()}


@pytest.mark.perf  # perf inject makes the VM recording (mixed)
def test_which_vcpu_ran_on_a_cpu(db, mixed):
    """(a): at the time of generated branches (VCPU known from the truth, tracing starts after the
    VCPU thread was switched in), the VCPU and its host thread; guest or host mode as perf's own
    lines say (the last VM entry/exit of the CPU at or before t, after the CPU's last switch)."""
    vm, _theirs, _ours = mixed
    truth = vm.truth
    host_tid = {v["vcpu"]: v["host_tid"] for v in vm.meta["vcpus"]}
    vcpu_of = {t: v for v, t in host_tid.items()}
    perf = perf_branches(vm.data)
    switches = _host_switch_ins(vm)
    P = vm.meta["machine_pid"]
    picks = [i for i in range(0, len(truth["time"]), len(truth["time"]) // 25) if truth["kind"][i] != K_TR_STRT]
    modes = Counter()
    for i in picks:
        cpu, t = int(truth["cpu"][i]), int(truth["time"][i])
        vcpu = int(truth["vcpu"][i]) if truth["machine_pid"][i] != -1 else vcpu_of[int(truth["tid"][i])]
        sel = (perf.cpu == cpu) & (perf.time <= t) & (perf.machine_pid == -1) & (
            [f in ("vmentry", "bcyh") for f in perf.flags])
        entry = np.array([f == "vmentry" for f in perf.flags])
        last = np.flatnonzero(sel)
        sw = [s for s in switches[cpu] if s <= t]
        in_guest = bool(len(last)) and entry[last[-1]] and perf.time[last[-1]] >= (sw[-1] if sw else 0)
        mode = "guest" if in_guest else "host"
        modes[mode] += 1
        sql = QUERIES["vm_vcpu_on_cpu"].replace(_Q_LINE, f"WITH q AS (SELECT {cpu} AS cpu, {t} AS t),")
        assert db.run(sql) == [(P, vcpu, P, host_tid[vcpu], mode)], (cpu, t)
    assert modes["guest"] and modes["host"]
    # before the first switch on the CPU no VCPU ran there
    sql = QUERIES["vm_vcpu_on_cpu"].replace(_Q_LINE, "WITH q AS (SELECT 0 AS cpu, 1000 AS t),")
    assert db.run(sql) == []


@pytest.mark.perf  # perf inject makes the VM recording (mixed)
def test_guest_call_graph(db, mixed):
    """(b): every guest call path; the guest kernel's calls per function equal the generator's calls
    (and system calls) into it; the whole graph equals the same query on perf's exported database."""
    vm, theirs, _ours = mixed
    rows = db.run(QUERIES["vm_guest_call_graph"])
    P = vm.meta["machine_pid"]
    assert rows and {r[0] for r in rows} == {P}
    assert rows == db.run(QUERIES["vm_guest_call_graph_raw"])  # the aggregates answer as the calls do
    if theirs.exists():  # perf's database has no aggregates: its calls
        with sqlite3.connect(theirs) as c:
            assert rows == _norm(c.execute(QUERIES["vm_guest_call_graph_raw"]).fetchall())
    # every guest kernel function is in the graph, and its calls made by a call instruction (or a
    # system call) are the generator's: a VM entry (0 => guest ip) is not a call for perf's thread-stack
    leaf = {path.rsplit("/", 1)[-1] for _mp, path, _calls, _ns in rows}
    truth = vm.truth
    syms = sorted((int(a, 16), n) for a, _t, n in (line.split() for line in
                  (vm.out / "guest.data" / "kcore_dir" / "kallsyms").read_text().splitlines()) if n.startswith("gk_"))
    starts = [a for a, _ in syms]
    want = Counter()
    g = (truth["machine_pid"] == P) & np.isin(truth["kind"], (K_CALL, K_SYSCALL))
    for to in truth["to_ip"][g].tolist():
        j = int(np.searchsorted(starts, to, side="right")) - 1
        if j >= 0 and starts[j] == to:
            want[syms[j][1]] += 1
    assert set(want) <= leaf
    got = db.run("SELECT s.name, COUNT(*) FROM calls c JOIN samples sm ON sm.id = c.call_id "
                 "JOIN call_paths p ON p.id = c.call_path_id JOIN symbols s ON s.id = p.symbol_id "
                 f"WHERE c.id > 0 AND sm.machine_pid = {P} AND sm.ip <> 0 AND s.name LIKE 'gk%' GROUP BY s.name")
    assert dict(got) == dict(want)


@pytest.mark.perf  # perf inject makes the VM recording (mixed)
def test_vm_exit_host_time_per_reason(db, mixed):
    """(c): exits per reason equal the truth's (reasons placed by the test: hlt/out/in, the rest
    asynchronous), host time per reason equals perf's own lines (host-side exit to the VCPU thread's
    next host-side VM entry, perf times)."""
    vm, _theirs, _ours = mixed
    rows = db.run(QUERIES["vm_exit_host_time"])
    P = vm.meta["machine_pid"]
    want_n = Counter(e["reason"] for e in truth_exits(vm) if e["entry_tsc"] is not None)
    assert {r[1]: r[2] for r in rows} == dict(want_n)
    assert {r[0] for r in rows} == {P}
    perf = perf_branches(vm.data)
    last_guest_ip: dict[int, int] = {}
    open_: dict[int, tuple[int, str]] = {}
    ns: dict[str, int] = defaultdict(int)
    mx: dict[str, int] = defaultdict(int)
    for i in range(len(perf.time)):
        f, cpu, tid = perf.flags[i], int(perf.cpu[i]), int(perf.tid[i])
        if f == "bcyh" and perf.machine_pid[i] != -1:
            last_guest_ip[cpu] = int(perf.from_ip[i])
        elif f == "bcyh":
            open_[tid] = (int(perf.time[i]), vm.reasons.get(last_guest_ip.pop(cpu, 0), OTHER))
        elif f == "vmentry" and perf.machine_pid[i] == -1 and tid in open_:
            t0, reason = open_.pop(tid)
            ns[reason] += int(perf.time[i]) - t0
            mx[reason] = max(mx[reason], int(perf.time[i]) - t0)
    assert {r[1]: (r[3], r[4]) for r in rows} == {k: (ns[k], mx[k]) for k in ns}
    assert [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)


@pytest.mark.perf  # perf inject makes the VM recording (mixed)
def test_timeline_interleaves_host_and_guest(db, mixed):
    """The timeline of CPU 0 in a window: its samples in perf's order with machine and VCPU as perf
    script prints them, and the context switches of that CPU and window (host and guest)."""
    vm, _theirs, _ours = mixed
    perf = perf_branches(vm.data)
    sel = perf.cpu == 0
    times = perf.time[sel]
    lo, hi = int(times[len(times) // 4]), int(times[len(times) // 2])
    sql = QUERIES["vm_timeline"].replace("SELECT 3500000010000, 3500000011000", f"SELECT {lo}, {hi}")
    assert sql != QUERIES["vm_timeline"]
    rows = db.run(sql)
    branch = [(r[2], r[3], r[4], r[5]) for r in rows if r[1] == "sample" and r[7].startswith("branches")]
    w = sel & (perf.time >= lo) & (perf.time < hi)
    assert branch == list(zip(perf.machine_pid[w].tolist(), perf.vcpu[w].tolist(), perf.pid[w].tolist(),
                              perf.tid[w].tolist()))
    assert {r[2] for r in rows if r[1] == "sample"} == {-1, vm.meta["machine_pid"]}
    n_sw = db.run(f"SELECT COUNT(*) FROM context_switches WHERE cpu = 0 AND time >= {lo} AND time < {hi}")[0][0]
    assert sum(1 for r in rows if r[1] == "switch") == n_sw
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    # the whole-trace view gives the same rows (the query takes the samples through their time blocks)
    view = db.run("SELECT time, source, machine_pid, vcpu, pid, tid, command, event, kind, source_id FROM timeline_view"
                  f" WHERE cpu = 0 AND time >= {lo} AND time < {hi} ORDER BY time, source DESC, source_id")
    assert [tuple(r) for r in rows] == [tuple(r) for r in view]
