"""``ptexport perfetto DB OUT`` and ``ptexport TRACE --perfetto OUT``: the trace read back with the perfetto
package's protos (tests/helpers/perfettotest.py) against the database it came from.

Every call row is one slice on its thread's track with the database's name and times, nested as the
calls are (the slice's parent is the call's parent_id), the filters keep exactly the calls the SQL says,
the other tables (context switches, CBR, power events, PTWRITE, decoder errors) appear as their rows,
guest machines and their VCPUs have tracks of their own, and bad input ends in one typed line.
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from exporttest import EXPORT_VARIANTS
from perfettotest import read_trace, slices

from ptexport.cli import main
from ptexport.writers import perfetto as P

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: (variant, export options): threads on two CPUs with preemption; fork/exec with corrupted trace (decoder
#: errors, calls that never return); power events with PTWRITE and CBR.
CASES = {
    "threads": ("threads-2cpus-cyc", ()),
    "forkexec": ("forkexec-corrupt", ()),
    "events": ("events-power-ptwrite", ("--itrace=bepw",)),
}


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main([str(a) for a in argv], out=out), out.getvalue()


@pytest.fixture(scope="module")
def dbs(synth_trace, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("perfetto")
    out = {}
    for name, (variant, extra) in CASES.items():
        trace = synth_trace(*EXPORT_VARIANTS[variant])
        db = base / f"{name}.db"
        code, text = run(trace / "perf.data", "--db", db, "-q", *extra)
        assert code == 0, text
        out[name] = db
    return out


def write(db: Path, out: Path, *opts: str) -> str:
    code, text = run("perfetto", db, out, *opts)
    assert code == 0, text
    return text


def query(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def db_calls(db: Path) -> dict[int, tuple]:
    """call id -> (thread_id, name as the writer makes it, call_time, return_time, flags, parent_id)."""
    rows = query(db, "SELECT c.id, c.thread_id, s.name, p.symbol_id, p.ip, c.call_time, c.return_time, c.flags, "
                     "c.parent_id FROM calls c JOIN call_paths p ON p.id = c.call_path_id "
                     "JOIN symbols s ON s.id = p.symbol_id WHERE c.id <> 0")
    out = {}
    for cid, tid, name, sym, ip, t0, t1, flags, parent in rows:
        if not sym or not name:
            name = f"[unknown] {ip & (2**64 - 1):#x}" if ip else "[unknown]"
        out[cid] = (tid, name, t0, t1, flags, parent)
    return out


def call_slices(path: Path) -> tuple[dict, dict[int, P.Pointer]]:
    """call id -> its slice, and the slices' tracks."""
    tr = read_trace(path)
    got = {}
    for track, ss in slices(tr).items():
        for s in ss:
            if "call" in s.categories:
                assert s.args["call_id"] not in got
                got[s.args["call_id"]] = s
    return got, tr


def thread_of(tr, track: int) -> int:
    """The thread id the writer put in the track's uuid."""
    kind, n = P.track_kind(track)
    assert kind == P.K_THREAD
    return n


@pytest.mark.parametrize("case", list(CASES))
def test_one_slice_per_call_nested_as_the_calls(dbs, tmp_path, case):
    db = dbs[case]
    out = tmp_path / "t.pftrace"
    text = write(db, out)
    calls = db_calls(db)
    got, tr = call_slices(out)
    assert set(got) == set(calls) and len(calls) > 1000
    assert f"{len(calls)} call slices" in text and "slices dropped: 0" in text
    for cid, s in got.items():
        tid, name, t0, t1, flags, parent = calls[cid]
        assert (thread_of(tr, s.track), s.name, s.ts, s.end) == (tid, name, t0, t1), cid
        assert s.args["flags"] == P.FLAG_NAMES.get(flags, str(flags)) if flags else "flags" not in s.args
        for c in s.children:  # nesting: within the parent, and the parent is the call's caller
            assert s.ts <= c.ts <= c.end <= s.end
            assert calls[c.args["call_id"]][5] == cid
        if parent:
            assert s.depth == got[parent].depth + 1
        else:
            assert s.depth == 0
    # the args: the dso, the call path, IPC where cycles are known
    row = query(db, "SELECT c.id, c.call_path_id, d.short_name, c.insn_count, c.cyc_count FROM calls c "
                    "JOIN call_paths p ON p.id = c.call_path_id JOIN symbols s ON s.id = p.symbol_id "
                    "JOIN dsos d ON d.id = s.dso_id WHERE c.id <> 0 ORDER BY c.cyc_count DESC LIMIT 1")[0]
    a = got[row[0]].args
    assert (a["call_path_id"], a["dso"]) == (row[1], row[2])
    if row[4]:
        assert (a["insn_count"], a["cyc_count"], a["IPC"]) == (row[3], row[4], round(row[3] / row[4], 2))


def test_threads_and_processes_are_named_tracks(dbs, tmp_path):
    out = tmp_path / "t.pftrace"
    write(dbs["threads"], out)
    tr = read_trace(out)
    threads = {t.tid: t for t in tr.tracks.values() if t.tid is not None}
    want = query(dbs["threads"], "SELECT DISTINCT t.pid, t.tid FROM calls c JOIN threads t ON t.id = c.thread_id "
                                 "WHERE c.id <> 0")
    assert {(t.pid, t.tid) for t in threads.values()} == set(want)
    for t in threads.values():
        proc = tr.tracks[t.parent]
        assert proc.pid == t.pid and proc.tid is None and proc.name == "threads" and t.name == "threads"


def test_cpu_tracks_show_who_ran(dbs, tmp_path):
    out = tmp_path / "t.pftrace"
    write(dbs["threads"], out)
    tr = read_trace(out)
    cpus = {u: t for u, t in tr.tracks.items() if t.name.startswith("CPU ")}
    assert {t.name for t in cpus.values()} == {"CPU 0", "CPU 1"}
    sl = slices(tr)
    labels = {f"threads {tid}" for (tid,) in query(dbs["threads"], "SELECT tid FROM threads WHERE pid = 1000")}
    labels.add("swapper 0")
    n = 0
    for u in cpus:
        ss = sorted(sl[u], key=lambda s: s.ts)
        assert all(s.depth == 0 and s.name in labels for s in ss)
        assert all(a.end <= b.ts for a, b in zip(ss, ss[1:]))  # one thread at a time
        n += len(ss)
    ins = query(dbs["threads"], "SELECT COUNT(*) FROM context_switches WHERE flags = 0")[0][0]
    assert n >= ins > 100


def test_power_ptwrite_cbr_and_errors_are_their_rows(dbs, tmp_path):
    out = tmp_path / "t.pftrace"
    write(dbs["events"], out)
    tr = read_trace(out)
    kinds = {}
    for e in tr.events:
        for c in e.categories:
            kinds.setdefault(c, []).append(e)
    db = dbs["events"]
    power = {t: query(db, f"SELECT COUNT(*) FROM {t}")[0][0] for t in ("mwait", "pwre", "exstop", "pwrx")}
    assert sum(power.values()) > 0
    assert {t: sum(1 for e in kinds.get("power", []) if e.name == t) for t in power} == power
    ptw = query(db, "SELECT s.time, x.payload FROM ptwrite x JOIN samples s ON s.id = x.id ORDER BY s.time")
    assert len(ptw) > 0
    got = sorted((e.ts, e.args["payload"]) for e in kinds["ptwrite"])
    assert got == sorted((t, p & (2**64 - 1)) for t, p in ptw)
    cbr = query(db, "SELECT s.time, x.mhz FROM cbr x JOIN samples s ON s.id = x.id ORDER BY s.time")
    counters = sorted((e.ts, e.value) for e in tr.events if e.value is not None)
    assert counters == [(t, float(m)) for t, m in cbr] and cbr
    # the forkexec variant's corrupted trace: each decoder error an instant on "Trace errors"
    write(dbs["forkexec"], tmp_path / "f.pftrace")
    tr = read_trace(tmp_path / "f.pftrace")
    errs = [e for e in tr.events if "error" in e.categories]
    want = query(dbs["forkexec"], "SELECT kind, message FROM decode_errors ORDER BY id")
    assert [(e.name, e.args["message"]) for e in errs] == [(f"decode error: {k}", m) for k, m in want] and want
    assert {tr.tracks[e.track].name for e in errs} == {"Trace errors"}


def _depths(calls: dict[int, tuple]) -> dict[int, int]:
    depth: dict[int, int] = {}

    def d(cid: int) -> int:
        if cid not in depth:
            p = calls[cid][5]
            depth[cid] = 0 if not p else d(p) + 1
        return depth[cid]

    for cid in sorted(calls, key=lambda c: calls[c][2]):
        d(cid)
    return depth


def test_max_depth_and_min_duration_drop_what_they_say(dbs, tmp_path):
    db = dbs["forkexec"]
    calls = db_calls(db)
    depth = _depths(calls)
    out = tmp_path / "t.pftrace"
    text = write(db, out, "--max-depth", "3")
    got, _ = call_slices(out)
    want = {c for c, dd in depth.items() if dd < 3}
    assert set(got) == want and 0 < len(want) < len(calls)
    assert f"slices dropped: {len(calls) - len(want)} ({len(calls) - len(want)} by --max-depth)" in text
    text = write(db, out, "--min-duration", "0.5us", "-f")
    got, _ = call_slices(out)
    want = {c for c, v in calls.items() if v[3] - v[2] >= 500}
    assert set(got) == want and 0 < len(want) < len(calls)
    assert f"{len(calls) - len(want)} by --min-duration" in text
    assert os.path.getsize(out) < os.path.getsize(tmp_path / "t.pftrace") * 2


def test_time_pid_tid_filters(dbs, tmp_path):
    db = dbs["threads"]
    calls = db_calls(db)
    lo, hi = query(db, "SELECT MIN(call_time), MAX(return_time) FROM calls WHERE id <> 0")[0]
    a, b = lo + (hi - lo) // 3, lo + (hi - lo) // 2
    out = tmp_path / "t.pftrace"
    text = write(db, out, "--time", f"{a // 10**9}.{a % 10**9:09d},{b // 10**9}.{b % 10**9:09d}")
    got, tr = call_slices(out)
    want = {c for c, v in calls.items() if v[2] <= b and v[3] >= a}
    assert set(got) == want and 0 < len(want) < len(calls)
    assert f"{len(calls) - len(want)} outside --time" in text
    # every event of the other kinds lies in the range too
    assert all(a <= e.ts <= b or e.type == 2 for e in tr.events if "call" not in e.categories
               and "sched" not in e.categories)
    # two ranges: the database reads their envelope, each call is kept when it meets one of them
    def sec(t: int) -> str:
        return f"{t // 10**9}.{t % 10**9:09d}"

    r1, r2 = (lo + (hi - lo) // 10, lo + (hi - lo) // 8), (lo + (hi - lo) * 7 // 10, lo + (hi - lo) * 3 // 4)
    text = write(db, out, "-f", "--time", f"{sec(r1[0])},{sec(r1[1])} {sec(r2[0])},{sec(r2[1])}")
    got, _ = call_slices(out)
    want = {c for c, v in calls.items() if any(v[2] <= b and v[3] >= a for a, b in (r1, r2))}
    assert set(got) == want and 0 < len(want) < len(calls)
    assert f"slices dropped: {len(calls) - len(want)} ({len(calls) - len(want)} outside --time)" in text
    tid = query(db, "SELECT tid FROM threads WHERE pid = 1000 AND tid <> pid LIMIT 1")[0][0]
    write(db, out, "--tid", str(tid), "-f")
    got, tr = call_slices(out)
    thread_id = query(db, f"SELECT id FROM threads WHERE tid = {tid}")[0][0]
    want = {c for c, v in calls.items() if v[0] == thread_id}
    assert set(got) == want and want
    write(db, out, "--pid", "1000", "-f")
    got, tr = call_slices(out)
    assert set(got) == set(calls)
    write(db, out, "--pid", "4242", "-f")
    got, tr = call_slices(out)
    assert not got


def test_unreturned_calls_are_closed_at_the_threads_last_time_and_marked(dbs, tmp_path):
    src = tmp_path / "open.db"
    shutil.copy(dbs["forkexec"], src)
    con = sqlite3.connect(src)
    # perf closes them at the last time it saw (flags "no return"); a database without that end time
    # (return_time 0) leaves the writer to do it
    top = con.execute("SELECT id, thread_id FROM calls WHERE id <> 0 AND parent_id = 0 "
                      "ORDER BY return_time - call_time DESC LIMIT 1").fetchone()
    con.execute("UPDATE calls SET return_time = 0 WHERE id = ?", (top[0],))
    con.commit()
    last = con.execute("SELECT MAX(MAX(call_time, return_time)) FROM calls WHERE thread_id = ?", (top[1],)).fetchone()[0]
    no_return = {r[0] for r in con.execute("SELECT id FROM calls WHERE flags IN (2, 3)")}
    con.close()
    out = tmp_path / "t.pftrace"
    text = write(src, out)
    got, _ = call_slices(out)
    s = got[top[0]]
    assert s.end == last and s.args["closed_at_thread_end"] is True
    assert no_return and all(got[c].args["flags"] in ("no return", "no call/return") for c in no_return)
    assert f"({len(no_return | {top[0]})} never returned, closed and marked)" in text


def test_trace_from_the_recording_equals_the_one_from_its_database(synth_trace, dbs, tmp_path):
    trace = synth_trace(*EXPORT_VARIANTS["forkexec-corrupt"])
    out = tmp_path / "direct.pftrace"
    code, text = run(trace / "perf.data", "--perfetto", out, "--max-depth", "4")
    assert code == 0, text
    assert sorted(os.listdir(tmp_path)) == ["direct.pftrace"]  # the temporary database is gone
    write(dbs["forkexec"], tmp_path / "from_db.pftrace", "--max-depth", "4")
    assert out.read_bytes() == (tmp_path / "from_db.pftrace").read_bytes()
    # beside --db: the database stays, the trace is the same
    db = tmp_path / "both.db"
    code, text = run(trace / "perf.data", "--db", db, "--perfetto", tmp_path / "both.pftrace", "--max-depth", "4")
    assert code == 0 and db.exists() and "slices dropped" in text, text
    assert (tmp_path / "both.pftrace").read_bytes() == out.read_bytes()


def same_events(a: Path, b: Path) -> None:
    """The same tracks and events; a CBR value as an integer (SQLite's export holds perf's 2000.5 as REAL,
    DuckDB and PostgreSQL the integer export-to-postgresql.py writes: docs/export.md)."""
    ta, tb = read_trace(a), read_trace(b)
    assert ta.tracks == tb.tracks
    key = [(e.ts, e.type, e.track, e.name, e.categories, e.args, None if e.value is None else int(e.value))
           for e in ta.events]
    assert key == [(e.ts, e.type, e.track, e.name, e.categories, e.args, None if e.value is None else int(e.value))
                   for e in tb.events]


def test_duckdb_source_gives_the_same_trace(dbs, tmp_path):
    duck = tmp_path / "t.duckdb"
    code, text = run("convert", dbs["events"], duck, "-q")
    assert code == 0, text
    write(duck, tmp_path / "duck.pftrace")
    write(dbs["events"], tmp_path / "sqlite.pftrace")
    same_events(tmp_path / "duck.pftrace", tmp_path / "sqlite.pftrace")


@pytest.mark.postgres
def test_postgresql_source_gives_the_same_trace(dbs, tmp_path, pg_url):
    url = pg_url()
    code, text = run("convert", dbs["forkexec"], url, "-q")
    assert code == 0, text
    write(url, tmp_path / "pg.pftrace", "--min-duration", "100")
    write(dbs["forkexec"], tmp_path / "sqlite.pftrace", "--min-duration", "100")
    same_events(tmp_path / "pg.pftrace", tmp_path / "sqlite.pftrace")


def test_bad_input_and_options_are_one_line_errors(dbs, tmp_path, capsys):
    out = tmp_path / "t.pftrace"
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    cases = [
        (("perfetto", tmp_path / "missing.db", out), 1, "no such database"),
        (("perfetto", junk, out), 1, "junk.db"),
        (("perfetto", empty, out), 1, "no table calls"),
        (("perfetto", dbs["threads"], out, "--max-depth", "0"), 2, "--max-depth 0"),
        (("perfetto", dbs["threads"], out, "--min-duration", "soon"), 2, "--min-duration"),
        (("perfetto", dbs["threads"], out, "--time", "x,y"), 2, "--time"),
        (("perfetto", dbs["threads"], tmp_path), 2, "is a directory"),
        (("perfetto", dbs["threads"], tmp_path / "no" / "t.pftrace"), 2, "no such directory"),
        (("perfetto", f"parquet:{tmp_path}", out), 2, "not Parquet"),
        (("x.data", "--max-depth", "2", "--db", tmp_path / "x.db"), 2, "give --perfetto"),
        (("x.data", "--perfetto", out, "--parquet", tmp_path / "pq"), 2, "not --parquet"),
        (("x.data",), 2, "give --db"),
    ]
    for argv, code, msg in cases:
        got, _ = run(*argv)
        err = capsys.readouterr().err
        assert got == code and msg in err and "Traceback" not in err, (argv, err)
        assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["empty.db", "junk.db"]
    write(dbs["threads"], out)
    got, _ = run("perfetto", dbs["threads"], out)
    assert got == 2 and "exists" in capsys.readouterr().err


def test_interrupted_or_failed_write_leaves_nothing(dbs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.pftrace"
    out.write_bytes(b"the previous trace")

    def stop(self, w):
        w.flush()  # some of the trace is on disk already
        raise KeyboardInterrupt

    monkeypatch.setattr(P._Reader, "write_errors", stop)
    assert run("perfetto", dbs["threads"], out, "-f")[0] == 130
    assert sorted(os.listdir(tmp_path)) == ["t.pftrace"] and out.read_bytes() == b"the previous trace"

    def full(self, w):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(P._Reader, "write_errors", full)
    assert run("perfetto", dbs["threads"], out, "-f")[0] == 74
    assert "no space left" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["t.pftrace"] and out.read_bytes() == b"the previous trace"


def test_interned_names_keep_the_file_small(dbs, tmp_path):
    out = tmp_path / "t.pftrace"
    write(dbs["forkexec"], out)
    n = len(db_calls(dbs["forkexec"]))
    data = out.read_bytes()
    # each symbol's name and each argument's name once, not once per slice
    assert data.count(b"call_path_id") == 1 and data.count(b"branch_count") == 1
    assert len(data) < 120 * n


@pytest.mark.slow
def test_guest_machines_and_vcpus_have_tracks(tmp_path_factory):
    from ptxtest import HAVE_PERF

    if not HAVE_PERF:
        pytest.skip("perf (Debian linux-perf) is not installed: perf inject makes the VM recording")
    from vmexporttest import make_vm_trace

    base = tmp_path_factory.mktemp("perfetto_vm")
    vm = make_vm_trace(base, guest="mixed", seed=3, branches=4000)
    db, out = base / "vm.db", base / "vm.pftrace"
    code, text = run(vm.data, "--db", db, "--perfetto", out, "-q")
    assert code == 0, text
    calls = db_calls(db)
    got, tr = call_slices(out)
    assert set(got) == set(calls)
    machines = query(db, "SELECT id, pid FROM machines WHERE id <> 0 AND pid <> -1")
    assert len(machines) == 1
    mid, mpid = machines[0]
    groups = [u for u, t in tr.tracks.items() if t.name.startswith(f"guest machine {mpid}")]
    assert len(groups) == 1 and tr.tracks[groups[0]].parent is None
    group = groups[0]

    def under(u: int) -> bool:
        while u is not None:
            if u == group:
                return True
            u = tr.tracks[u].parent
        return False

    guest_threads = {r[0] for r in query(db, f"SELECT id FROM threads WHERE machine_id = {mid}")}
    for cid, s in got.items():  # a guest thread's calls under the guest, a host thread's not
        assert under(s.track) == (calls[cid][0] in guest_threads)
    assert any(calls[c][0] in guest_threads for c in got)
    vcpus = {t.name.split(" (")[0]: u for u, t in tr.tracks.items() if t.parent == group and t.name.startswith("VCPU")
             and "exits" not in t.name}
    assert set(vcpus) == {"VCPU 0", "VCPU 1"}
    sl = slices(tr)
    names = {f"{c} {t}" for c, t in query(db, "SELECT c.comm, t.tid FROM threads t JOIN comms c ON c.c_thread_id = t.id "
                                              f"WHERE t.machine_id = {mid}")}
    for u in vcpus.values():
        assert sl[u] and all(s.name in names for s in sl[u])
    exits = [s for u, ss in sl.items() for s in ss if "vm_exit" in s.categories]
    assert len(exits) == query(db, "SELECT COUNT(*) FROM vm_exits")[0][0] > 0


def test_interrupt_after_the_database_stops_the_trace_and_keeps_the_database(synth_trace, tmp_path, monkeypatch):
    """``TRACE --db DB --perfetto OUT``: the database is in place when the trace is written; a signal then
    still stops the run (exit 130), the database stays, no trace and no temporary is left.  Without
    --db the temporary database goes too."""
    import signal
    import time

    trace = synth_trace(*EXPORT_VARIANTS["forkexec-corrupt"])

    def stop(self, w):  # SIGTERM while the trace is written: the CLI's guard must not take it for the run's end
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)  # the handler raises here (ignored, the run would go on and write the trace)

    monkeypatch.setattr(P._Reader, "write_errors", stop)
    db, out = tmp_path / "x.db", tmp_path / "x.pftrace"
    assert run(trace / "perf.data", "--db", db, "--perfetto", out, "-q")[0] == 128 + signal.SIGTERM
    assert sorted(os.listdir(tmp_path)) == ["x.db"]
    assert query(db, "SELECT COUNT(*) FROM calls")[0][0] > 1
    assert run(trace / "perf.data", "--perfetto", tmp_path / "y.pftrace", "-q")[0] == 128 + signal.SIGTERM
    assert sorted(os.listdir(tmp_path)) == ["x.db"]


def test_a_database_perf_wrote(perf_db, tmp_path):
    """perf 6.1's export-to-sqlite.py ("branches calls"): no ptexport tables, the trace all the same."""
    out = tmp_path / "perf.pftrace"
    write(perf_db, out)
    calls = db_calls(perf_db)
    got, tr = call_slices(out)
    assert set(got) == set(calls) and calls
    for cid, s in got.items():
        assert (s.name, s.ts, s.end) == calls[cid][1:4]


@pytest.mark.parametrize("damage", [
    "UPDATE calls SET call_time = NULL WHERE id = 7",
    "UPDATE calls SET call_time = 'soon' WHERE id = 7",
    "UPDATE context_switches SET time = NULL WHERE id = 2",
    "UPDATE cbr SET mhz = 'fast'",
    "DROP TABLE call_paths",
    "truncate",
])
def test_a_damaged_database_is_one_line_error(dbs, tmp_path, capsys, damage):
    db = tmp_path / "bad.db"
    shutil.copy(dbs["threads"], db)
    if damage == "truncate":
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 3])
    else:
        con = sqlite3.connect(db)
        con.execute(damage)
        con.commit()
        con.close()
    out = tmp_path / "t.pftrace"
    code, _ = run("perfetto", db, out)
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"ptexport: error: {db}") and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == ["bad.db"]


def _trace_processor() -> str | None:
    """A trace_processor_shell to run: $PTEXPORT_TRACE_PROCESSOR or one on PATH.  The perfetto package
    downloads its own from Perfetto's storage on first use; no package registry ships it, so on machines
    that reach only the registries (these) there is none and the test below is skipped."""
    return (os.environ.get("PTEXPORT_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")
            or shutil.which("trace_processor"))


@pytest.mark.skipif(_trace_processor() is None, reason="no trace_processor_shell (set PTEXPORT_TRACE_PROCESSOR): "
                    "no package registry ships one and its download site is not reachable here")
def test_trace_processor_reads_what_the_database_holds(dbs, tmp_path):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    db = dbs["forkexec"]
    out = tmp_path / "t.pftrace"
    write(db, out)
    tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=_trace_processor()))
    try:
        n = [r.n for r in tp.query("select count(*) as n from slice where category = 'call'")]
        per_thread = {(r.tid, r.n, r.dur, r.depth) for r in tp.query(
            "select t.tid as tid, count(*) as n, sum(s.dur) as dur, max(s.depth) as depth from slice s "
            "join thread_track tt on s.track_id = tt.id join thread t using (utid) "
            "where s.category = 'call' group by t.tid")}
        errors = [r.n for r in tp.query("select count(*) as n from slice where category = 'error'")]
    finally:
        tp.close()
    calls = db_calls(db)
    depth = _depths(calls)
    assert n == [len(calls)]
    want = {}
    tids = dict(query(db, "SELECT id, tid FROM threads"))
    for cid, (thread_id, _, t0, t1, _, _) in calls.items():
        k = tids[thread_id]
        cnt, dur, dep = want.get(k, (0, 0, 0))
        want[k] = (cnt + 1, dur + t1 - t0, max(dep, depth[cid]))
    assert per_thread == {(k, *v) for k, v in want.items()}
    assert errors == [query(db, "SELECT COUNT(*) FROM decode_errors")[0][0]]
