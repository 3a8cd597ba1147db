"""Test fixture: a small but realistic database, written through the real writer, with known answers.

For the viewer, cookbook and writer tests (SQLite and PostgreSQL alike)::

    from known_db import build_fixture_db, EXPECTED   # tests/helpers/ is on sys.path (tests/conftest.py)
    build_fixture_db("/tmp/f.db")            # or "postgresql://postgres@127.0.0.1/name"

Contents: a host (pid -1) and a guest machine (hypervisor pid 200, VCPU 0 run
by host thread 201 "CPU 0/KVM"); threads app/100, app/101, qemu's VCPU
thread and the guest's gapp/50; a call tree with a known shape::

    tid 100: main [1000,2000] -> foo [1100,1500] -> bar [1200,1300], bar [1350,1450]
                               -> baz [1600,1900] -> bar [1650,1700]
    tid 101: worker [3000,3600] -> bar [3100,3500]
    guest tid 50: gmain [5000,5800] -> gwork [5100,5700]

branch samples for every call and return plus conditional jumps, a trace
begin, a VM exit/entry pair, power events (cbr, pwrx), a ptwrite, a PSB, an
event-trace and an iflag sample, context switches, decode errors, stats.
:data:`EXPECTED` holds the answers the cookbook queries must give, computed
here in Python from the same data (not by SQL).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptexport.calltree.stats import CallStats, GroupStats, symbol_stats
from ptexport.writers import Writer, open_writer
from ptexport.writers.branch_types import branch_type_name
from ptexport.writers.model import ExportModel
from ptexport.samples.flags import IpFlag

B = IpFlag.BRANCH
CALL = int(B | IpFlag.CALL)
RETURN = int(B | IpFlag.RETURN)
JCC = int(B | IpFlag.CONDITIONAL)
TRACE_BEGIN = int(B | IpFlag.TRACE_BEGIN)
VMEXIT = int(B | IpFlag.CALL | IpFlag.ASYNC | IpFlag.VMEXIT)  # 4131: no row in perf
VMENTRY = int(B | IpFlag.CALL | IpFlag.VMENTRY)

# (thread key, symbol, call time, return time, children...)
TREE: list[tuple[str, tuple[Any, ...]]] = [
    ("app100", ("main", 1000, 2000, [
        ("foo", 1100, 1500, [("bar", 1200, 1300, []), ("bar", 1350, 1450, [])]),
        ("baz", 1600, 1900, [("bar", 1650, 1700, [])]),
    ])),
    ("app101", ("worker", 3000, 3600, [("bar", 3100, 3500, [])])),
    ("gapp50", ("gmain", 5000, 5800, [("gwork", 5100, 5700, [])])),
]


@dataclass
class _Event:
    time: int
    thread: str
    symbol: str
    to_symbol: str
    branch_type: int
    evsel: str = "branches"
    payload: tuple[Any, ...] = ()


def _sym_start(name: str) -> int:
    base = {"main": 0x401000, "foo": 0x401100, "bar": 0x401200, "baz": 0x401300, "worker": 0x401400,
            "gmain": 0x555000, "gwork": 0x555100, "do_syscall_64": 0xFFFFFFFF81000000}
    return base[name]


def _walk(thread: str, node: tuple[Any, ...], parent: str, out: list[_Event], calls: list[dict[str, Any]],
          depth: int, parent_index: int) -> None:
    sym, t0, t1, children = node
    out.append(_Event(t0, thread, parent, sym, CALL))
    out.append(_Event(t0 + 10, thread, sym, sym, JCC))
    me = len(calls)
    calls.append(dict(thread=thread, symbol=sym, call_time=t0, return_time=t1, parent=parent_index,
                      path=None, depth=depth))
    for ch in children:
        _walk(thread, ch, sym, out, calls, depth + 1, me)
    out.append(_Event(t1, thread, sym, parent, RETURN))


def build_fixture_db(target: str, *, force: bool = False) -> dict[str, Any]:
    """Write the fixture database to ``target`` (SQLite path or PostgreSQL URL); returns EXPECTED."""
    with open_writer(target, force=force) as w:
        samples, tid_of, sym_name = _write(w)
    expected = dict(EXPECTED)
    br = samples["evsel_id"] == 1
    mix = Counter(zip((tid_of[t] for t in samples["thread_id"][br]),
                      (branch_type_name(b) for b in samples["branch_type"][br])))
    expected["branch_mix"] = sorted(((tid, name, n) for (tid, name), n in mix.items()),
                                    key=lambda r: (r[0], -r[2], r[1]))
    insn: Counter[str] = Counter()
    cyc: Counter[str] = Counter()
    for s, i, c in zip(samples["symbol_id"], samples["insn_count"], samples["cyc_count"]):
        if s and c:
            insn[sym_name[s]] += int(i)
            cyc[sym_name[s]] += int(c)
    expected["ipc"] = sorted(((n, round(insn[n] / cyc[n], 2)) for n in cyc), key=lambda r: (-r[1], r[0]))
    expected["samples"] = int(len(samples["id"]))
    in_range = (samples["time"] >= 1000) & (samples["time"] < 2000)
    per_tid = Counter(tid_of[t] for t in samples["thread_id"][in_range])
    expected["samples_in_range"] = sorted(per_tid.items())
    timeline: dict[tuple[int, int], list[int]] = {}
    for cpu, t, i, c in zip(samples["cpu"], samples["time"], samples["insn_count"], samples["cyc_count"]):
        row = timeline.setdefault((int(cpu), int(t) - int(t) % 1_000_000), [0, 0, 0])
        row[0] += 1
        row[1] += int(i)
        row[2] += int(c)
    expected["cpu_timeline"] = [(*k, *v) for k, v in sorted(timeline.items())]
    return expected


def _write(w: Writer) -> tuple[dict[str, np.ndarray], dict[int, int], dict[int, str]]:
    m = ExportModel()
    ev = {n: m.evsel(n) for n in ("branches", "cbr", "pwrx", "ptwrite", "psb", "evt", "iflag")}
    host = m.machine(-1, "")
    guest = m.machine(200, "/var/lib/guests/vm0")
    threads = {
        "app100": m.thread(host, 100, 100),
        "app101": m.thread(host, 100, 101),
        "kvm201": m.thread(host, 200, 201),
        "gapp50": m.thread(guest, 50, 50),
    }
    machine_of = {"app100": host, "app101": host, "kvm201": host, "gapp50": guest}
    comms = {
        "app100": m.comm("app", threads["app100"], 900, True),
        "kvm201": m.comm("CPU 0/KVM", threads["kvm201"], 0, False),
        "gapp50": m.comm("gapp", threads["gapp50"], 0, True),
    }
    comms["app101"] = comms["app100"]  # comm of the main thread's exec
    m.comm_thread(comms["app100"], threads["app101"])
    m.vcpu(guest, 0, threads["kvm201"], vmcs=0x1A2B000, tsc_offset=-123456789, tsc_offset_source="sideband")
    app = m.dso(host, "/usr/bin/app", build_id="00112233445566778899aabbccddeeff00112233")
    kernel = m.dso(host, "[kernel.kallsyms]")
    gbin = m.dso(guest, "/usr/bin/gapp")
    syms = {n: m.symbol(app, _sym_start(n), _sym_start(n) + 0x100, n) for n in ("main", "foo", "bar", "baz", "worker")}
    syms.update({n: m.symbol(gbin, _sym_start(n), _sym_start(n) + 0x100, n) for n in ("gmain", "gwork")})
    syms["do_syscall_64"] = m.symbol(kernel, _sym_start("do_syscall_64"), _sym_start("do_syscall_64") + 0x200,
                                     "do_syscall_64")
    dso_of = {n: (gbin if n.startswith("g") else kernel if n == "do_syscall_64" else app) for n in syms}

    events: list[_Event] = []
    calls: list[dict[str, Any]] = []
    for thread, node in TREE:
        _walk(thread, node, "", events, calls, 0, -1)
    events.append(_Event(900, "app100", "", "main", TRACE_BEGIN))
    events.append(_Event(4990, "kvm201", "do_syscall_64", "", VMEXIT))
    events.append(_Event(4995, "gapp50", "", "gmain", VMENTRY))
    events.append(_Event(1120, "app100", "foo", "", 0, "cbr", (30, 3000, 100)))
    events.append(_Event(1620, "app100", "baz", "", 0, "cbr", (20, 2000, 67)))
    events.append(_Event(3300, "app101", "bar", "", 0, "pwrx", (6, 2, 1)))
    events.append(_Event(1210, "app100", "bar", "", 0, "ptwrite", (0xDEADBEEF, True)))
    events.append(_Event(950, "app100", "main", "", 0, "psb", (0x4000,)))
    events.append(_Event(5110, "gapp50", "gwork", "", 0, "evt", (1, 32, True, 0)))
    events.append(_Event(5120, "gapp50", "gwork", "", 0, "iflag", (False, False)))
    events.sort(key=lambda e: (e.time, e.branch_type != RETURN))

    # call paths (perf's key) and sample rows
    paths: dict[tuple[int, int], int] = {}

    def path_of(i: int) -> int:
        c = calls[i]
        if c["path"] is None:
            parent = m.root_call_path if c["parent"] < 0 else path_of(c["parent"])
            c["path"] = m.call_path(parent, syms[c["symbol"]])
            paths[(parent, syms[c["symbol"]])] = c["path"]
        return c["path"]

    for i in range(len(calls)):
        path_of(i)
    m.flush(w)

    n = len(events)
    cols: dict[str, np.ndarray] = {k: np.zeros(n, dtype=np.int64) for k in w.columns("samples")}
    cols["id"] = np.arange(1, n + 1)
    cols["vcpu"][:] = -1
    sample_of: dict[tuple[str, int, int], int] = {}
    for i, e in enumerate(events):
        th = e.thread
        mid = machine_of[th]
        cols["evsel_id"][i] = ev[e.evsel]
        cols["machine_id"][i] = mid
        cols["thread_id"][i] = threads[th]
        cols["comm_id"][i] = comms[th]
        if e.symbol:
            cols["dso_id"][i] = dso_of[e.symbol]
            cols["symbol_id"][i] = syms[e.symbol]
            cols["sym_offset"][i] = 0x10 + i
            cols["ip"][i] = np.int64(np.uint64(_sym_start(e.symbol) + 0x10 + i))
        if e.to_symbol:
            cols["to_dso_id"][i] = dso_of[e.to_symbol]
            cols["to_symbol_id"][i] = syms[e.to_symbol]
            cols["to_ip"][i] = _sym_start(e.to_symbol) + (0 if e.branch_type == CALL else 0x20)
            cols["to_sym_offset"][i] = 0 if e.branch_type == CALL else 0x20
        cols["time"][i] = e.time
        cols["cpu"][i] = 1 if th == "app101" else 0
        cols["branch_type"][i] = e.branch_type
        cols["flags"][i] = e.branch_type
        cols["insn_count"][i] = 20 + (i % 7) * 5
        cols["cyc_count"][i] = 10 + (i % 5) * 10
        cols["machine_pid"][i] = 200 if mid == guest else -1
        if th == "gapp50":
            cols["vcpu"][i] = 0
        sample_of[(th, e.time, e.branch_type)] = i + 1
    # stack at each sample: deepest call of the thread open at that time
    for i, e in enumerate(events):
        best = None
        for c in calls:
            if c["thread"] == e.thread and c["call_time"] <= e.time <= c["return_time"]:
                if best is None or c["depth"] > best["depth"]:
                    best = c
        cols["call_path_id"][i] = best["path"] if best else m.root_call_path
    w.write_samples(cols)

    # payload tables
    def payload_ids(kind: str) -> list[tuple[int, _Event]]:
        return [(i + 1, e) for i, e in enumerate(events) if e.evsel == kind]

    w.write_columns("cbr", {"id": np.array([i for i, _ in payload_ids("cbr")]),
                            "cbr": np.array([e.payload[0] for _, e in payload_ids("cbr")]),
                            "mhz": np.array([e.payload[1] for _, e in payload_ids("cbr")]),
                            "percent": np.array([e.payload[2] for _, e in payload_ids("cbr")])})
    w.write_rows("pwrx", [(i, *e.payload) for i, e in payload_ids("pwrx")])
    w.write_rows("ptwrite", [(i, *e.payload) for i, e in payload_ids("ptwrite")])
    w.write_rows("psb", [(i, *e.payload) for i, e in payload_ids("psb")])
    w.write_rows("evt", [(i, *e.payload) for i, e in payload_ids("evt")])
    w.write_rows("iflag", [(i, *e.payload) for i, e in payload_ids("iflag")])

    # calls in return order (as perf's thread-stack emits them)
    order = sorted(range(len(calls)), key=lambda i: (calls[i]["return_time"], -calls[i]["depth"]))
    call_id = {ci: k + 1 for k, ci in enumerate(order)}
    k = len(order)
    ccols = {name: np.zeros(k, dtype=np.int64) for name in w.columns("calls")}
    for ci in order:
        c = calls[ci]
        j = call_id[ci] - 1
        th = c["thread"]
        ccols["id"][j] = call_id[ci]
        ccols["thread_id"][j] = threads[th]
        ccols["comm_id"][j] = comms[th]
        ccols["call_path_id"][j] = c["path"]
        ccols["call_time"][j] = c["call_time"]
        ccols["return_time"][j] = c["return_time"]
        inside = (cols["thread_id"] == threads[th]) & (cols["time"] >= c["call_time"]) & (cols["time"] <= c["return_time"]) \
            & (cols["evsel_id"] == ev["branches"])
        ccols["branch_count"][j] = int(inside.sum())
        ccols["call_id"][j] = sample_of[(th, c["call_time"], CALL)]
        ccols["return_id"][j] = sample_of[(th, c["return_time"], RETURN)]
        ccols["parent_call_path_id"][j] = m.root_call_path if c["parent"] < 0 else calls[c["parent"]]["path"]
        ccols["parent_id"][j] = 0 if c["parent"] < 0 else call_id[c["parent"]]
        ccols["insn_count"][j] = int(cols["insn_count"][inside].sum())
        ccols["cyc_count"][j] = int(cols["cyc_count"][inside].sum())
    w.write_calls(ccols)
    _write_aggregates(w, ccols, cols, {path: sym for (_, sym), path in paths.items()})

    cs = [  # time, cpu, out, in, flags
        (950, 0, "kvm201", "app100", 0),
        (2100, 0, "app100", "kvm201", 3),
        (2950, 1, "kvm201", "app101", 0),
        (3700, 1, "app101", "kvm201", 1),
    ]
    w.write_rows("context_switches", [
        (i + 1, host, t, cpu, threads[o], comms[o], threads[n_], comms[n_], f, -1)
        for i, (t, cpu, o, n_, f) in enumerate(cs)])
    w.write_rows("decode_errors", [
        (1, 3, 0x1F2C, "bad_packet", "bad packet: opcode 0xd3", 2500, 0, 0, threads["app100"], host),
        (2, 7, 0x8000, "nosync", "no PSB before the next packet", 5900, 0, 0, 0, 0),
    ])
    w.write_rows("stats", [
        (1, "lost_data", 0, 4096, "data_loss", "bytes of AUX data lost (truncated AUX records)"),
        (2, "overflows", 0, 1, "data_loss", "OVF packets: the CPU dropped trace"),
        (3, "decode_errors", -1, 2, "error", "rows in decode_errors"),
    ])
    tid_of = {threads["app100"]: 100, threads["app101"]: 101, threads["kvm201"]: 201, threads["gapp50"]: 50}
    return cols, tid_of, {v: k for k, v in syms.items()}


def _write_aggregates(w: Writer, calls: dict[str, np.ndarray], samples: dict[str, np.ndarray],
                      symbol_of_path: dict[int, int]) -> None:
    """call_path_stats, symbol_stats and cpu_time_stats, as an export writes them (self time: each call's
    duration minus its children's, from parent_id here; the call tree sums them as calls return)."""
    dur = calls["return_time"] - calls["call_time"]
    child = np.zeros(len(dur) + 1, dtype=np.int64)
    np.add.at(child, calls["parent_id"], dur)
    cs = CallStats()
    cs.add(calls, dur - child[calls["id"]])
    cps = cs.rows()
    cp_symbol = np.zeros(max(symbol_of_path) + 1, dtype=np.int64)
    for path, sym in symbol_of_path.items():
        cp_symbol[path] = sym
    w.write_columns("call_path_stats", cps)
    w.write_columns("symbol_stats", symbol_stats(cps, cp_symbol))
    rows: dict[tuple[int, int, int, int], list[int]] = {}
    for t, e, sym, bt, i, c in zip(samples["thread_id"].tolist(), samples["evsel_id"].tolist(),
                                   samples["symbol_id"].tolist(), samples["branch_type"].tolist(),
                                   samples["insn_count"].tolist(), samples["cyc_count"].tolist()):
        r = rows.setdefault((t, e, sym, bt), [0, 0, 0, 0])
        r[0] += 1
        r[1] += i
        r[2] += c
        r[3] += i if c > 0 else 0
    keys_ss = sorted(rows)
    w.write_columns("sample_stats", {
        "id": np.arange(1, len(keys_ss) + 1),
        **{name: np.array([k[j] for k in keys_ss]) for j, name in enumerate(
            ("thread_id", "evsel_id", "symbol_id", "branch_type"))},
        **{name: np.array([rows[k][j] for k in keys_ss]) for j, name in enumerate(
            ("samples", "insn_count", "cyc_count", "cyc_insn_count"))}})
    g = GroupStats(sums=("insn_count", "cyc_count"), count="samples")
    g.add(((samples["cpu"] + 1) << 44) | (samples["time"] // 1_000_000), samples)
    keys, agg = g.result()
    w.write_columns("cpu_time_stats", {"id": np.arange(1, len(keys) + 1), "cpu": (keys >> 44) - 1,
                                       "time": (keys & ((1 << 44) - 1)) * 1_000_000, **agg})


def _expected() -> dict[str, Any]:
    """The cookbook answers, from TREE alone (independent of SQL and of the writer)."""
    total: Counter[str] = Counter()
    self_t: Counter[str] = Counter()
    path_total: dict[str, int] = defaultdict(int)
    durations: dict[str, list[int]] = defaultdict(list)
    slow: list[tuple[str, int]] = []

    def walk(node: tuple[Any, ...], prefix: str) -> None:
        sym, t0, t1, children = node
        d = t1 - t0
        total[sym] += d
        durations[sym].append(d)
        self_t[sym] += d - sum(c[2] - c[1] for c in children)
        path = f"{prefix}/{sym}" if prefix else sym
        path_total[path] += d
        if d > 250 and 1000 <= t0 < 4000:
            slow.append((sym, d))
        for c in children:
            walk(c, path)

    for _, node in TREE:
        walk(node, "")
    return {
        "self_time": sorted(self_t.items(), key=lambda kv: (-kv[1], kv[0])),
        "total_time": sorted(total.items(), key=lambda kv: (-kv[1], kv[0])),
        "call_paths": sorted(path_total.items(), key=lambda kv: (-kv[1], kv[0])),
        "slow_calls": sorted(slow, key=lambda sd: (-sd[1], sd[0])),
        "latency": sorted(((sym, len(d), min(d), max(d)) for sym, d in durations.items()),
                          key=lambda r: (-r[3], r[0])),
    }


EXPECTED: dict[str, Any] = _expected()
