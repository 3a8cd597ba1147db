"""The viewer's queries: plain functions from a :class:`~ptexport_viewer.db.Session` to rows.

No Qt here; every report's data comes from one of these functions, which
the tests call directly against the fixture database.  The SQL works on
perf's export schema (SQLite or PostgreSQL) and uses ptexport's additions
(``vcpus``, ``samples.vcpu``, ``samples.machine_pid``) only when the schema
has them (see :class:`~ptexport_viewer.db.Capabilities`).

Large tables are read page by page by key (``WHERE id > :after ORDER BY id
LIMIT :n``), never with OFFSET and never whole.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

from .branchnames import FLAG_NAMES, branch_type_name  # noqa: F401 - the reports' vocabulary, read here too
from .db import QueryError, Session, quote_ident

PAGE_SIZE = 1000
MIN_ID = "_min_id"      # branch_where's hint: no row of the filter has a smaller sample id
U64 = (1 << 64) - 1   # addresses are stored as signed 64-bit integers

def dso_name(name: str | None) -> str:
    if name == "[kernel.kallsyms]":
        return "[kernel]"
    return name or ""


def percent(part: int, whole: int) -> str:
    """perf's one-decimal percentage (Decimal, round half up); "0.0" when the whole is zero."""
    if not whole:
        return "0.0"
    return str((Decimal(part) * 100 / Decimal(whole)).quantize(Decimal(".1"), rounding=ROUND_HALF_UP))


def ipc(insn: int | None, cyc: int | None) -> str:
    """perf's instructions per cycle, two decimals, "0" without counts."""
    if not insn or not cyc:
        return "0"
    return str(Decimal(float(insn) / cyc).quantize(Decimal(".01"), rounding=ROUND_HALF_UP))


# ----------------------------------------------------------------------------
# Machines, comms, threads, VCPUs


class MachineRow(NamedTuple):
    id: int
    pid: int
    root_dir: str
    label: str


def machines(s: Session, with_calls: bool = False) -> list[MachineRow]:
    """Real machines (id > 0): host first, then guests by hypervisor pid."""
    sql = "SELECT id, pid, root_dir FROM machines WHERE id > 0"
    if with_calls and s.db.caps.has_calls:
        if s.db.caps.has_column("comms", "has_calls"):   # no scan of calls
            sql += (" AND id IN (SELECT t.machine_id FROM threads t JOIN comm_threads ct ON ct.thread_id = t.id "
                    "JOIN comms c ON c.id = ct.comm_id WHERE c.has_calls AND c.id <> 0)")
        else:
            sql += " AND id IN (SELECT DISTINCT machine_id FROM threads WHERE id IN (SELECT thread_id FROM calls))"
    rows = s.rows(sql + " ORDER BY CASE WHEN pid = -1 THEN 0 ELSE 1 END, pid, id")
    out = []
    for mid, pid, root in rows:
        label = "host" if pid == -1 else f"guest (hypervisor pid {pid})"
        if root and pid != -1:
            label += f" {root}"
        out.append(MachineRow(mid, pid, root or "", label))
    return out


def use_machine_level(s: Session) -> bool:
    """A machine level is shown when there is a guest machine or a VCPU."""
    return len(machines(s)) > 1 or bool(vcpus(s))


class VcpuRow(NamedTuple):
    machine_id: int
    vcpu: int
    thread_id: int
    host_pid: int
    host_tid: int


def vcpus(s: Session, machine_id: int | None = None) -> list[VcpuRow]:
    caps = s.db.caps
    if not caps.has_vcpus:
        return []
    cols = caps.columns("vcpus")
    vcol = "vcpu" if "vcpu" in cols else ("cpu" if "cpu" in cols else None)
    tcol = "thread_id" if "thread_id" in cols else None
    if vcol is None or "machine_id" not in cols:
        return []
    sql = (f"SELECT v.machine_id, v.{vcol}, {'v.' + tcol if tcol else '0'}, COALESCE(t.pid, -1), COALESCE(t.tid, -1) "
           f"FROM vcpus v LEFT JOIN threads t ON t.id = {'v.' + tcol if tcol else '0'}")
    params: dict[str, Any] = {}
    sql += f" WHERE v.machine_id > 0 AND v.{vcol} >= 0"
    if machine_id is not None:
        sql += " AND v.machine_id = :m"
        params["m"] = machine_id
    return [VcpuRow(*r) for r in s.rows(sql + f" ORDER BY v.machine_id, v.{vcol}", params)]


def comms_with_calls(s: Session, machine_id: int | None = None, vcpu: int | None = None) -> list[tuple[int, str]]:
    """(comm_id, comm) of the comms that have calls (perf's call graph first level)."""
    caps = s.db.caps
    where = ["c.id <> 0"]
    params: dict[str, Any] = {}
    if caps.has_column("comms", "has_calls"):
        where.append("c.has_calls")
    else:
        where.append("c.id IN (SELECT DISTINCT comm_id FROM calls)")
    if machine_id is not None:
        where.append("EXISTS (SELECT 1 FROM comm_threads ct JOIN threads t ON t.id = ct.thread_id "
                     "WHERE ct.comm_id = c.id AND t.machine_id = :m)")
        params["m"] = machine_id
    if vcpu is not None and caps.samples_vcpu:
        where.append("c.id IN (SELECT calls.comm_id FROM calls JOIN samples ON samples.id = calls.call_id "
                     "WHERE samples.vcpu = :v)")
        params["v"] = vcpu
    return s.rows(f"SELECT c.id, c.comm FROM comms c WHERE {' AND '.join(where)} ORDER BY c.id", params)


def threads_of_comm(s: Session, comm_id: int, machine_id: int | None = None) -> list[tuple[int, int, int]]:
    """(thread_id, pid, tid) of the threads that had ``comm_id``."""
    sql = ("SELECT t.id, t.pid, t.tid FROM comm_threads ct JOIN threads t ON t.id = ct.thread_id "
           "WHERE ct.comm_id = :c")
    params: dict[str, Any] = {"c": comm_id}
    if machine_id is not None:
        sql += " AND t.machine_id = :m"
        params["m"] = machine_id
    return s.rows(sql + " ORDER BY ct.id", params)


# ----------------------------------------------------------------------------
# Call graph (context-sensitive, aggregated by call path) and call tree


class CallNode(NamedTuple):
    id: int            # call_path_id (call graph) or calls.id (call tree)
    name: str
    dso: str
    count: int         # number of calls (call graph) / call_time (call tree)
    time: int
    insn: int
    cyc: int
    branches: int


def root_call_path(s: Session) -> int:
    """perf's root call path (parent 0, symbol 0, ip 0): id 1 in every perf export."""
    return int(s.scalar("SELECT MIN(id) FROM call_paths WHERE id > 0 AND parent_id = 0 AND symbol_id = 0",
                        default=1))


def _vcpu_filter(s: Session, vcpu: int | None, params: dict[str, Any]) -> str:
    if vcpu is None or not s.db.caps.samples_vcpu:
        return ""
    params["v"] = vcpu
    return " AND calls.call_id IN (SELECT id FROM samples WHERE vcpu = :v)"


def call_graph_children(s: Session, comm_id: int, thread_id: int, parent_call_path_id: int,
                        vcpu: int | None = None, window: tuple[int, int] | None = None) -> list[CallNode]:
    """Children of a call path for one comm and thread, aggregated (perf's call graph level 3+).

    With ``window`` = (start, end) only calls overlapping it count, and their time is clipped to it
    (instruction, cycle and branch counts are the calls' own: they cannot be clipped).
    """
    caps = s.db.caps
    ipc_cols = "SUM(calls.insn_count), SUM(calls.cyc_count)" if caps.calls_ipc else "0, 0"
    params: dict[str, Any] = {"p": parent_call_path_id, "c": comm_id, "t": thread_id}
    extra = _vcpu_filter(s, vcpu, params)
    elapsed = "calls.return_time - calls.call_time"
    if window is not None:
        params["wa"], params["wb"] = window
        extra += " AND calls.return_time > :wa AND calls.call_time < :wb"
        elapsed = ("(CASE WHEN calls.return_time > :wb THEN :wb ELSE calls.return_time END) - "
                   "(CASE WHEN calls.call_time < :wa THEN :wa ELSE calls.call_time END)")
    rows = s.rows(
        f"SELECT calls.call_path_id, COALESCE(symbols.name, ''), COALESCE(dsos.short_name, ''), COUNT(calls.id), "
        f"SUM({elapsed}), {ipc_cols}, SUM(calls.branch_count) "
        "FROM calls JOIN call_paths ON calls.call_path_id = call_paths.id "
        "LEFT JOIN symbols ON call_paths.symbol_id = symbols.id "
        "LEFT JOIN dsos ON symbols.dso_id = dsos.id "
        "WHERE calls.parent_call_path_id = :p AND calls.comm_id = :c AND calls.thread_id = :t AND calls.id <> 0"
        + extra +
        " GROUP BY calls.call_path_id, symbols.name, dsos.short_name ORDER BY calls.call_path_id", params)
    return [CallNode(r[0], r[1], dso_name(r[2]), int(r[3]), int(r[4] or 0), int(r[5] or 0), int(r[6] or 0),
                     int(r[7] or 0)) for r in rows]


def call_tree_children(s: Session, comm_id: int, thread_id: int, parent_call_id: int,
                       vcpu: int | None = None) -> list[CallNode]:
    """Individual calls under ``parent_call_id`` (0 = the thread's top level) in time order.

    ``CallNode.count`` holds the call time.
    """
    caps = s.db.caps
    ipc_cols = "calls.insn_count, calls.cyc_count" if caps.calls_ipc else "0, 0"
    params: dict[str, Any] = {"p": parent_call_id}
    where = "calls.parent_id = :p AND calls.id <> 0"
    if parent_call_id == 0:
        where += " AND calls.comm_id = :c AND calls.thread_id = :t"
        params.update(c=comm_id, t=thread_id)
    where += _vcpu_filter(s, vcpu, params)
    rows = s.rows(
        f"SELECT calls.id, COALESCE(symbols.name, ''), COALESCE(dsos.short_name, ''), calls.call_time, "
        f"calls.return_time - calls.call_time, {ipc_cols}, calls.branch_count "
        "FROM calls JOIN call_paths ON calls.call_path_id = call_paths.id "
        "LEFT JOIN symbols ON call_paths.symbol_id = symbols.id "
        "LEFT JOIN dsos ON symbols.dso_id = dsos.id "
        f"WHERE {where} ORDER BY calls.call_time, calls.id", params)
    return [CallNode(r[0], r[1], dso_name(r[2]), int(r[3] or 0), int(r[4] or 0), int(r[5] or 0), int(r[6] or 0),
                     int(r[7] or 0)) for r in rows]


def _match(s: Session, value: str, pattern: bool) -> tuple[str, str]:
    """SQL operator and operand for an exact or glob (``*``, ``?``) match on both databases."""
    if not pattern:
        return "=", value
    if not s.db.is_postgres:  # SQLite and DuckDB have GLOB
        return "GLOB", value
    v = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return "LIKE", v.replace("*", "%").replace("?", "_")


def find_in_call_graph(s: Session, value: str, pattern: bool = False) -> list[list[int]]:
    """Paths [comm_id, thread_id, call_path_id...] to every call path whose symbol matches."""
    op, operand = _match(s, value, pattern)
    hits = s.rows(
        "SELECT calls.call_path_id, calls.comm_id, calls.thread_id FROM calls "
        "JOIN call_paths ON calls.call_path_id = call_paths.id JOIN symbols ON call_paths.symbol_id = symbols.id "
        f"WHERE calls.id <> 0 AND symbols.name {op} :v "
        "GROUP BY calls.comm_id, calls.thread_id, calls.call_path_id "
        "ORDER BY calls.comm_id, calls.thread_id, calls.call_path_id", {"v": operand})
    root = root_call_path(s)
    cache: dict[int, int] = {}
    out = []
    for cp, comm, thread in hits:
        chain = []
        cur = cp
        while cur and cur != root:
            chain.insert(0, cur)
            if cur not in cache:
                cache[cur] = int(s.scalar("SELECT parent_id FROM call_paths WHERE id = :i", {"i": cur}, default=0))
            cur = cache[cur]
        out.append([comm, thread] + chain)
    return out


def find_in_call_tree(s: Session, value: str, pattern: bool = False) -> list[list[int]]:
    """Paths [comm_id, thread_id, call_id...] to every call whose symbol matches, in time order."""
    op, operand = _match(s, value, pattern)
    hits = s.rows(
        "SELECT calls.id, calls.comm_id, calls.thread_id FROM calls "
        "JOIN call_paths ON calls.call_path_id = call_paths.id JOIN symbols ON call_paths.symbol_id = symbols.id "
        f"WHERE calls.id <> 0 AND symbols.name {op} :v "
        "ORDER BY calls.comm_id, calls.thread_id, calls.call_time, calls.id", {"v": operand})
    return [[comm, thread] + call_ancestry(s, cid) for cid, comm, thread in hits]


def call_ancestry(s: Session, call_id: int) -> list[int]:
    chain = []
    cur = call_id
    while cur:
        chain.insert(0, cur)
        cur = int(s.scalar("SELECT parent_id FROM calls WHERE id = :i", {"i": cur}, default=0))
    return chain


def call_at_time(s: Session, thread_id: int, time: int) -> list[int] | None:
    """Path [comm_id, thread_id, call_id...] to the innermost call of a thread running at ``time``."""
    path: list[int] = []
    parent = 0
    comm = None
    while True:
        params = {"t": thread_id, "p": parent, "time": time}
        rows = s.rows("SELECT id, comm_id, return_time FROM calls WHERE thread_id = :t AND parent_id = :p "
                      "AND id <> 0 AND call_time <= :time ORDER BY call_time DESC, id DESC LIMIT 1", params)
        if not rows:
            if not path:
                rows = s.rows("SELECT id, comm_id, return_time FROM calls WHERE thread_id = :t AND parent_id = 0 "
                              "AND id <> 0 ORDER BY call_time, id LIMIT 1", params)
                if not rows:
                    return None
                return [rows[0][1], thread_id, rows[0][0]]
            break
        cid, comm_id, ret = rows[0]
        if path and ret is not None and ret < time:
            break
        comm = comm_id if comm is None else comm
        path.append(cid)
        parent = cid
        if ret is not None and ret < time:
            break
    return [comm, thread_id] + path


# ----------------------------------------------------------------------------
# Top calls by elapsed time


@dataclass
class CallFilter:
    """Filters of perf's 'Top calls by elapsed time' report."""

    comms: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    dsos: list[str] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    sql: str = ""
    limit: int = 100
    time_window: tuple[int, int] | None = None   # a followed selection: calls overlapping it


TOP_CALLS_COLUMNS = ("Command", "PID", "TID", "Symbol", "Object", "Call Time", "Return Time",
                     "Elapsed Time (ns)", "Branch Count", "Flags")


def _in_list(col: str, values: Sequence[Any], prefix: str, params: dict[str, Any]) -> str:
    names = []
    for i, v in enumerate(values):
        key = f"{prefix}{i}"
        params[key] = v
        names.append(":" + key)
    return f"{col} IN ({', '.join(names)})"


def top_calls(s: Session, f: CallFilter) -> tuple[tuple[str, ...], list[tuple]]:
    params: dict[str, Any] = {}
    where = ["calls.id <> 0"]
    if f.comms:
        where.append(_in_list("comms.comm", f.comms, "cm", params))
    if f.pids:
        where.append(_in_list("threads.pid", f.pids, "pi", params))
    if f.tids:
        where.append(_in_list("threads.tid", f.tids, "ti", params))
    if f.dsos:
        where.append(_in_list("dsos.short_name", f.dsos, "ds", params))
    if f.symbols:
        where.append(_in_list("symbols.name", f.symbols, "sy", params))
    if f.time_window is not None:
        where.append("calls.return_time > :wa AND calls.call_time < :wb")
        params["wa"], params["wb"] = f.time_window
    if f.sql.strip():
        where.append(f"({f.sql})")
    params["lim"] = int(f.limit) if f.limit else 100
    rows = s.rows(
        "SELECT comms.comm, threads.pid, threads.tid, COALESCE(symbols.name, ''), COALESCE(dsos.short_name, ''), "
        "calls.call_time, calls.return_time, calls.return_time - calls.call_time AS elapsed_time, "
        "calls.branch_count, calls.flags "
        "FROM calls JOIN call_paths ON calls.call_path_id = call_paths.id "
        "LEFT JOIN symbols ON call_paths.symbol_id = symbols.id LEFT JOIN dsos ON symbols.dso_id = dsos.id "
        "LEFT JOIN comms ON calls.comm_id = comms.id LEFT JOIN threads ON calls.thread_id = threads.id "
        f"WHERE {' AND '.join(where)} ORDER BY elapsed_time DESC, calls.id LIMIT :lim", params)
    flags = {1: "no call", 2: "no return", 3: "no call/return", 6: "jump"}
    out = [r[:4] + (dso_name(r[4]),) + tuple(r[5:9]) + (flags.get(int(r[9] or 0), str(r[9]) if r[9] else ""),)
           for r in rows]
    return TOP_CALLS_COLUMNS, out


# ----------------------------------------------------------------------------
# Branches (samples), keyset paged


@dataclass
class BranchFilter:
    """Filters of perf's 'Selected branches' report (empty = everything)."""

    time_ranges: str = ""      # "1000-2000, 10ms-20ms, -5ms-" (absolute ns, or relative with ns/us/ms)
    cpus: str = ""             # "0,5-6"
    comms: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    dsos: list[str] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    sql: str = ""
    time_window: tuple[int, int] | None = None   # a followed selection (absolute ns)


class FilterError(ValueError):
    """A filter field that does not parse; the message names the field."""


def parse_ranges(text: str) -> list[tuple[int, int]]:
    """'0,5-6' -> [(0,0), (5,6)]."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+))?", part)
        if not m:
            raise FilterError(f"CPUs: '{part}' is not a number or range like 5-6")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise FilterError(f"CPUs: range '{part}' is reversed")
        out.append((lo, hi))
    return out


_UNITS = {"ns": 1, "us": 1000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_time_ranges(text: str, first: int, last: int) -> list[tuple[int, int]]:
    """perf's time range syntax: 'A-B' absolute ns, 'Nms-Mms' relative to the start,
    negative relative values from the end, empty ends meaning first/last."""
    def value(tok: str, default: int) -> int:
        tok = tok.strip()
        if not tok:
            return default
        m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*(ns|us|ms|s)?", tok)
        if not m:
            raise FilterError(f"Time ranges: '{tok}' is not a time (ns, or with a ns/us/ms/s suffix)")
        if m.group(2) is None:
            return int(float(m.group(1)))
        v = int(float(m.group(1)) * _UNITS[m.group(2)])
        return first + v if v >= 0 and not m.group(1).startswith("-") else last + v

    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(-?[^-]*?)\s*-\s*(-?[^-]*)", part)
        if not m:
            raise FilterError(f"Time ranges: '{part}' is not a range like 1000-2000 or 1ms-2ms")
        lo, hi = value(m.group(1), first), value(m.group(2), last)
        if hi < lo:
            raise FilterError(f"Time ranges: '{part}' ends before it starts")
        out.append((max(lo, first), min(hi, last)))
    return out


def sample_time_bounds(s: Session) -> tuple[int, int]:
    """First and last non-zero sample time (by id, as perf does: ids follow time)."""
    first = s.scalar("SELECT time FROM samples WHERE id = (SELECT MIN(id) FROM samples WHERE id > 0 AND time <> 0)",
                     default=0)
    last = s.scalar("SELECT time FROM samples WHERE id = (SELECT MAX(id) FROM samples WHERE time <> 0)", default=0)
    return int(first), int(last)


def sample_id_at_time(s: Session, t: int, floor: bool) -> int:
    """Binary search over sample ids (ids are in time order) for the first id with time >= t
    (``floor``) or the last id with time <= t; uses only primary-key lookups."""
    lo = int(s.scalar("SELECT MIN(id) FROM samples WHERE id > 0", default=0))
    hi = int(s.scalar("SELECT MAX(id) FROM samples", default=0))
    if floor:
        # first id whose time >= t
        ans = hi + 1
        while lo <= hi:
            mid = (lo + hi) // 2
            row = s.rows("SELECT id, time FROM samples WHERE id >= :m ORDER BY id LIMIT 1", {"m": mid})
            if not row or row[0][0] > hi:
                hi = mid - 1
                continue
            rid, rt = row[0]
            if rt >= t:
                ans, hi = rid, mid - 1
            else:
                lo = rid + 1
        return ans
    ans = lo - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        row = s.rows("SELECT id, time FROM samples WHERE id <= :m ORDER BY id DESC LIMIT 1", {"m": mid})
        if not row or row[0][0] < lo:
            lo = mid + 1
            continue
        rid, rt = row[0]
        if rt <= t:
            ans, lo = rid, mid + 1
        else:
            hi = rid - 1
    return ans


def branch_where(s: Session, f: BranchFilter) -> tuple[str, dict[str, Any]]:
    """SQL conditions (to AND with the keyset condition) and their bound parameters."""
    params: dict[str, Any] = {}
    where: list[str] = []
    ranges = []
    if f.time_ranges.strip():
        first, last = sample_time_bounds(s)
        ranges = parse_time_ranges(f.time_ranges, first, last)
    if f.time_window is not None:
        ranges.append(f.time_window)
    if ranges:
        parts = []
        for i, (lo, hi) in enumerate(ranges):
            params[f"rlo{i}"] = sample_id_at_time(s, lo, True)
            params[f"rhi{i}"] = sample_id_at_time(s, hi, False)
            parts.append(f"(samples.id >= :rlo{i} AND samples.id <= :rhi{i})")
        where.append("(" + " OR ".join(parts) + ")")
        # SQLite takes one rowid lower bound (the keyset's): start the keyset at the first range
        params[MIN_ID] = min(params[f"rlo{i}"] for i in range(len(ranges))) - 1
    if f.cpus.strip():
        parts = []
        for i, (lo, hi) in enumerate(parse_ranges(f.cpus)):
            params[f"clo{i}"], params[f"chi{i}"] = lo, hi
            parts.append(f"(samples.cpu >= :clo{i} AND samples.cpu <= :chi{i})")
        where.append("(" + " OR ".join(parts) + ")")
    if f.comms:
        where.append(_in_list("comms.comm", f.comms, "cm", params))
    if f.pids:
        where.append(_in_list("threads.pid", f.pids, "pi", params))
    if f.tids:
        where.append(_in_list("threads.tid", f.tids, "ti", params))
    if f.dsos:
        a = _in_list("dsos.short_name", f.dsos, "ds", params)
        b = _in_list("to_dsos.short_name", f.dsos, "ds", params)
        where.append(f"({a} OR {b})")
    if f.symbols:
        a = _in_list("symbols.name", f.symbols, "sy", params)
        b = _in_list("to_symbols.name", f.symbols, "sy", params)
        where.append(f"({a} OR {b})")
    if f.sql.strip():
        where.append(f"({f.sql})")
    return " AND ".join(where), params


def branch_events(s: Session) -> list[tuple[int, str]]:
    """Events whose samples are branches (perf: events named 'branches')."""
    return s.rows("SELECT id, name FROM selected_events WHERE id > 0 AND name LIKE '%branches%' ORDER BY id")


def branch_columns(s: Session) -> list[str]:
    caps = s.db.caps
    cols = ["Time", "CPU", "Command", "PID", "TID", "Branch Type", "In Tx"]
    if caps.samples_ipc:
        cols += ["Insn Cnt", "Cyc Cnt", "IPC"]
    if caps.samples_vcpu:
        cols += ["Machine", "VCPU"]
    return cols + ["Branch"]


class BranchPage(NamedTuple):
    rows: list[tuple]      # display rows: (sample id, *columns)
    last_id: int           # key to pass as after_id for the next page
    done: bool             # True when no more rows follow


def branches_page(s: Session, where: str = "", params: dict[str, Any] | None = None, after_id: int = 0,
                  limit: int = PAGE_SIZE, evsel_id: int | None = None) -> BranchPage:
    """One page of branch samples after ``after_id``, in id (= time) order."""
    caps = s.db.caps
    p = dict(params or {})
    after_id = max(after_id, int(p.pop(MIN_ID, 0)))
    p.update(after=after_id, lim=limit)
    cond = "samples.id > :after"
    if evsel_id is not None:
        cond += " AND samples.evsel_id = :ev"
        p["ev"] = evsel_id
    if where:
        cond += f" AND ({where})"
    ipc_cols = ", samples.insn_count, samples.cyc_count" if caps.samples_ipc else ""
    vm_cols = ", samples.machine_pid, samples.vcpu" if caps.samples_vcpu else ""
    bt_join = "LEFT JOIN branch_types ON samples.branch_type = branch_types.id " if caps.has("branch_types") else ""
    bt_col = "branch_types.name" if bt_join else "NULL"
    rows = s.rows(
        f"SELECT samples.id, samples.time, samples.cpu, comms.comm, threads.pid, threads.tid, samples.branch_type, "
        f"{bt_col}, samples.in_tx, samples.ip, symbols.name, samples.sym_offset, dsos.short_name, samples.to_ip, "
        f"to_symbols.name, samples.to_sym_offset, to_dsos.short_name{ipc_cols}{vm_cols} "
        "FROM samples "
        "LEFT JOIN comms ON samples.comm_id = comms.id "
        "LEFT JOIN threads ON samples.thread_id = threads.id "
        f"{bt_join}"
        "LEFT JOIN symbols ON samples.symbol_id = symbols.id "
        "LEFT JOIN symbols AS to_symbols ON samples.to_symbol_id = to_symbols.id "
        "LEFT JOIN dsos ON samples.dso_id = dsos.id "
        "LEFT JOIN dsos AS to_dsos ON samples.to_dso_id = to_dsos.id "
        f"WHERE {cond} ORDER BY samples.id LIMIT :lim", p)
    out = []
    for r in rows:
        (sid, t, cpu, comm, pid, tid, btype, btname, in_tx, ip, sym, off, dso, to_ip, to_sym, to_off, to_dso) = r[:17]
        rest = list(r[17:])
        disp: list[Any] = [sid, t, cpu, comm or "", pid, tid,
                           btname if btname is not None else branch_type_name(int(btype or 0)),
                           "Yes" if in_tx and str(in_tx) not in ("0", "False") else "No"]
        if caps.samples_ipc:
            insn, cyc = rest[0], rest[1]
            rest = rest[2:]
            disp += [insn, cyc, ipc(insn, cyc)]
        if caps.samples_vcpu:
            mpid, vcpu = rest[0], rest[1]
            disp += ["host" if mpid in (None, -1) else f"guest {mpid}", "" if vcpu in (None, -1) else vcpu]
        disp.append(f"{int(ip or 0) & U64:>16x} {sym or 'unknown'}{_off(off, sym)} ({dso_name(dso) or 'unknown'}) -> "
                    f"{int(to_ip or 0) & U64:x} {to_sym or 'unknown'}{_off(to_off, to_sym)} ({dso_name(to_dso) or 'unknown'})")
        out.append(tuple(disp))
    last = out[-1][0] if out else after_id
    return BranchPage(out, last, len(out) < limit)


def _off(off: int | None, sym: str | None) -> str:
    return f"+0x{int(off):x}" if off and sym else ""


# ----------------------------------------------------------------------------
# Tables browser and SQL console


def table_key(s: Session, table: str) -> list[str]:
    """Columns used as the keyset for paging through a table or view."""
    cols = s.db.caps.columns(table)
    if "id" in cols:
        return ["id"]
    ids = [c for c in cols if c.endswith("_id")]
    return ids or cols


class TablePage(NamedTuple):
    columns: list[str]
    rows: list[tuple]
    last_key: tuple | None
    done: bool


def table_page(s: Session, table: str, after: tuple | None = None, limit: int = PAGE_SIZE) -> TablePage:
    """One page of any table or view, ordered by its key, after key value ``after``."""
    caps = s.db.caps
    if not caps.has(table):
        raise QueryError(f"no such table or view: {table}")
    key = table_key(s, table)
    qk = [quote_ident(k) for k in key]
    params: dict[str, Any] = {"lim": limit}
    where = ""
    if after is not None:
        for i, v in enumerate(after):
            params[f"k{i}"] = v
        if len(key) == 1:
            where = f" WHERE {qk[0]} > :k0"
        else:
            where = f" WHERE ({', '.join(qk)}) > ({', '.join(':k%d' % i for i in range(len(key)))})"
    cols, rows = s.execute(f"SELECT * FROM {quote_ident(table)}{where} ORDER BY {', '.join(qk)} LIMIT :lim", params)
    idx = [cols.index(k) for k in key]
    last = tuple(rows[-1][i] for i in idx) if rows else after
    return TablePage(cols, rows, last, len(rows) < limit)


def run_sql(s: Session, sql: str, limit: int = 10000) -> tuple[list[str], list[tuple], bool]:
    """Run the user's statement; return (columns, at most ``limit`` rows, truncated?)."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        return [], [], False
    cols, rows = s.execute_user(text, fetch=limit + 1)
    return cols, rows[:limit], len(rows) > limit


# ----------------------------------------------------------------------------
# Time chart: context switches, power events, ptwrite


class Interval(NamedTuple):
    start: int
    end: int
    thread_id: int
    comm_id: int
    pid: int
    tid: int
    comm: str


def time_bounds(s: Session, machine_id: int | None = None) -> tuple[int, int]:
    """Start and end time of the whole trace (samples, calls, context switches)."""
    lo, hi = [], []
    caps = s.db.caps
    if caps.has("samples"):
        a, b = sample_time_bounds(s)
        if a:
            lo.append(a)
        if b:
            hi.append(b)
    if caps.has_context_switches:
        sql = "SELECT MIN(time), MAX(time) FROM context_switches WHERE time <> 0"
        params = {}
        if machine_id is not None:
            sql += " AND machine_id = :m"
            params["m"] = machine_id
        r = s.rows(sql, params)
        if r and r[0][0] is not None:
            lo.append(int(r[0][0]))
            hi.append(int(r[0][1]))
    if caps.has_calls:
        r = s.rows("SELECT MIN(call_time), MAX(return_time) FROM calls WHERE id <> 0 AND call_time <> 0")
        if r and r[0][0] is not None:
            lo.append(int(r[0][0]))
            hi.append(int(r[0][1]))
    if not lo:
        return 0, 0
    return min(lo), max(hi)


def switch_cpus(s: Session) -> list[tuple[int, int]]:
    """(machine_id, cpu) pairs that have context switches, host first."""
    if not s.db.caps.has_context_switches:
        return []
    rows = s.rows("SELECT DISTINCT cs.machine_id, cs.cpu, m.pid FROM context_switches cs "
                  "LEFT JOIN machines m ON m.id = cs.machine_id")
    rows.sort(key=lambda r: (0 if r[2] == -1 else 1, r[2] or 0, r[0], r[1]))
    return [(int(r[0]), int(r[1])) for r in rows]


def cpu_intervals(s: Session, machine_id: int, cpu: int, start: int, end: int) -> list[Interval]:
    """Who ran on one CPU of one machine: intervals from each switch-in to the next.

    Before the first switch-in the CPU runs the thread it switched out (from
    ``start``), after the last one until ``end`` (perf's time chart does the same).
    """
    rows = s.rows(
        "SELECT cs.time, cs.thread_out_id, cs.thread_in_id, cs.comm_out_id, cs.comm_in_id, cs.flags "
        "FROM context_switches cs WHERE cs.machine_id = :m AND cs.cpu = :c ORDER BY cs.time, cs.id",
        {"m": machine_id, "c": cpu})
    ins = [(int(t), int(tin), int(cin)) for t, tout, tin, cout, cin, fl in rows if not (int(fl or 0) & 1)]
    if not ins:
        return []
    first = rows[0]
    runs: list[tuple[int, int, int, int]] = []
    if start < ins[0][0]:
        runs.append((start, ins[0][0], int(first[1]), int(first[3])))
    for i, (t, tid, cid) in enumerate(ins):
        t_end = ins[i + 1][0] if i + 1 < len(ins) else max(end, t)
        if t_end > t or i + 1 == len(ins):
            runs.append((t, t_end, tid, cid))
    ids = sorted({r[2] for r in runs})
    cids = sorted({r[3] for r in runs})
    tinfo = {r[0]: (r[1], r[2]) for r in s.rows(
        f"SELECT id, pid, tid FROM threads WHERE id IN ({','.join(str(i) for i in ids)})")}
    cinfo = {r[0]: r[1] for r in s.rows(f"SELECT id, comm FROM comms WHERE id IN ({','.join(str(i) for i in cids)})")}
    out = []
    for a, b, th, cm in runs:
        pid, tid = tinfo.get(th, (-1, -1))
        out.append(Interval(a, b, th, cm, pid, tid, cinfo.get(cm, "")))
    return out


class PointEvent(NamedTuple):
    time: int
    cpu: int
    kind: str      # 'cbr', 'ptwrite', 'pwre', 'pwrx', 'error' (a decoder error)
    value: str
    amount: float = 0.0   # MHz for cbr


def point_events(s: Session, machine_id: int | None = None) -> list[PointEvent]:
    """Power events (cbr with MHz, C-state entry/exit) and ptwrite payloads, in time order."""
    caps = s.db.caps
    out: list[PointEvent] = []
    mfilter = ""
    params: dict[str, Any] = {}
    if machine_id is not None:
        mfilter = " AND samples.machine_id = :m"
        params["m"] = machine_id
    if caps.has("cbr"):
        for t, cpu, mhz, pct in s.rows("SELECT samples.time, samples.cpu, cbr.mhz, cbr.percent FROM cbr "
                                       f"JOIN samples ON samples.id = cbr.id WHERE 1=1{mfilter}", params):
            mhz_f = float(mhz or 0)
            out.append(PointEvent(int(t), int(cpu), "cbr", f"{mhz_f:g} MHz ({float(pct or 0):g}%)", mhz_f))
    if caps.has("ptwrite"):
        for t, cpu, payload, exact in s.rows("SELECT samples.time, samples.cpu, ptwrite.payload, ptwrite.exact_ip "
                                             f"FROM ptwrite JOIN samples ON samples.id = ptwrite.id WHERE 1=1{mfilter}",
                                             params):
            out.append(PointEvent(int(t), int(cpu), "ptwrite", f"{int(payload) & (2**64 - 1):#x}"))
    if caps.has("pwre"):
        for t, cpu, cst, sub in s.rows("SELECT samples.time, samples.cpu, pwre.cstate, pwre.subcstate FROM pwre "
                                       f"JOIN samples ON samples.id = pwre.id WHERE 1=1{mfilter}", params):
            out.append(PointEvent(int(t), int(cpu), "pwre", f"C{cst}.{sub}"))
    if caps.has("pwrx"):
        for t, cpu, deep, last in s.rows("SELECT samples.time, samples.cpu, pwrx.deepest_cstate, pwrx.last_cstate "
                                         f"FROM pwrx JOIN samples ON samples.id = pwrx.id WHERE 1=1{mfilter}", params):
            out.append(PointEvent(int(t), int(cpu), "pwrx", f"exit C{last} (deepest C{deep})"))
    if caps.has("decode_errors") and caps.has_column("decode_errors", "time"):
        cols = caps.columns("decode_errors")
        what = "COALESCE(kind, '') || ': ' || COALESCE(message, '')" if {"kind", "message"} <= set(cols) else (
            "COALESCE(message, '')" if "message" in cols else "''")
        emach = " AND machine_id = :m" if machine_id is not None and "machine_id" in cols else ""
        for t, cpu, msg in s.rows(f"SELECT time, cpu, {what} FROM decode_errors WHERE time IS NOT NULL AND time <> 0"
                                  f"{emach} ORDER BY time LIMIT 100000", params if emach else {}):
            out.append(PointEvent(int(t), int(cpu if cpu is not None else -1), "error", str(msg)))
    out.sort()
    return out


def data_loss(s: Session) -> list[tuple[str, int, str]]:
    """ptexport's ``stats`` rows that report lost data or errors: (name, value, description)."""
    caps = s.db.caps
    if not caps.has("stats") or not {"name", "value", "severity"} <= set(caps.columns("stats")):
        return []
    desc = "description" if caps.has_column("stats", "description") else "''"
    return [(n, int(v or 0), d or "") for n, v, d in s.rows(
        f"SELECT name, SUM(value), MAX({desc}) FROM stats WHERE severity IN ('data_loss', 'error') "
        "GROUP BY name HAVING SUM(value) > 0 ORDER BY name")]


# ----------------------------------------------------------------------------
# Flame graph


class FlameNode(NamedTuple):
    call_path_id: int
    parent_id: int
    name: str
    dso: str
    value: int           # time (ns) spent in this path inside the range, callees included
    children: tuple      # of FlameNode


def flame_graph(s: Session, thread_id: int | None = None, start: int | None = None,
                end: int | None = None) -> FlameNode:
    """Time per call path, clipped to [start, end], as a tree under the root call path."""
    params: dict[str, Any] = {}
    where = ["calls.id <> 0"]
    lo = "calls.call_time"
    hi = "calls.return_time"
    if thread_id is not None:
        where.append("calls.thread_id = :t")
        params["t"] = thread_id
    if start is not None:
        where.append("calls.return_time > :a")
        params["a"] = start
        lo = "CASE WHEN calls.call_time < :a THEN :a ELSE calls.call_time END"
    if end is not None:
        where.append("calls.call_time < :b")
        params["b"] = end
        hi = "CASE WHEN calls.return_time > :b THEN :b ELSE calls.return_time END"
    rows = s.rows(
        f"SELECT calls.call_path_id, call_paths.parent_id, COALESCE(symbols.name, ''), COALESCE(dsos.short_name, ''), "
        f"SUM({hi} - {lo}) FROM calls JOIN call_paths ON call_paths.id = calls.call_path_id "
        "LEFT JOIN symbols ON symbols.id = call_paths.symbol_id LEFT JOIN dsos ON dsos.id = symbols.dso_id "
        f"WHERE {' AND '.join(where)} GROUP BY calls.call_path_id, call_paths.parent_id, symbols.name, "
        "dsos.short_name", params)
    root_id = root_call_path(s)
    info = {int(r[0]): (int(r[1] or 0), r[2], dso_name(r[3]), int(r[4] or 0)) for r in rows}
    kids: dict[int, list[int]] = {}
    for cp, (parent, *_rest) in info.items():
        kids.setdefault(parent if parent in info else root_id, []).append(cp)

    def build(cp: int) -> FlameNode:
        parent, name, dso, value = info[cp]
        ch = tuple(sorted((build(k) for k in kids.get(cp, [])), key=lambda n: -n.value))
        return FlameNode(cp, parent, name, dso, max(value, sum(c.value for c in ch)), ch)

    top = tuple(sorted((build(k) for k in kids.get(root_id, []) if k != root_id), key=lambda n: -n.value))
    return FlameNode(root_id, 0, "all", "", sum(c.value for c in top), top)


def thread_label(s: Session, thread_id: int) -> str:
    r = s.rows("SELECT t.pid, t.tid, (SELECT c.comm FROM comm_threads ct JOIN comms c ON c.id = ct.comm_id "
               "WHERE ct.thread_id = t.id ORDER BY ct.id DESC LIMIT 1) FROM threads t WHERE t.id = :t",
               {"t": thread_id})
    if not r:
        return f"thread {thread_id}"
    pid, tid, comm = r[0]
    return f"{comm or '?'} {pid}:{tid}"


def threads_with_calls(s: Session) -> list[tuple[int, str]]:
    """(thread_id, label) of every thread that has calls, for pickers."""
    if not s.db.caps.has_calls:
        return []
    rows = s.rows("SELECT t.id, t.pid, t.tid, (SELECT c.comm FROM comm_threads ct JOIN comms c ON c.id = ct.comm_id "
                  "WHERE ct.thread_id = t.id ORDER BY ct.id DESC LIMIT 1), m.pid FROM threads t "
                  "LEFT JOIN machines m ON m.id = t.machine_id "
                  "WHERE t.id IN (SELECT DISTINCT thread_id FROM calls WHERE id <> 0) ORDER BY t.id")
    out = []
    for tid_, pid, tid, comm, mpid in rows:
        where = "" if mpid in (None, -1) else f" [guest {mpid}]"
        out.append((int(tid_), f"{comm or '?'} {pid}:{tid}{where}"))
    return out
