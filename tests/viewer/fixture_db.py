"""A small perf-schema database with known rows, for the viewer's tests.

Tables, columns and views follow perf 6.1's export-to-sqlite.py (same names,
same column order, id 0 = unknown rows, call path 1 = root), plus ptexport's
additions when ``extensions=True`` (``vcpus`` table, trailing
``samples.vcpu`` / ``samples.machine_pid`` columns).  The rows describe:

* machine 1 = host (pid -1), machine 2 = a guest run by qemu pid 1000
* host process ``app`` (pid 100, threads 100 and 101), ``qemu`` (pid 1000,
  thread ``CPU 0/KVM`` tid 1001 = VCPU 0 of the guest), guest ``gapp`` (pid 50)
* calls of thread 100:100 (times in ns)::

      main     1000..2000  (100 branches, 10000 insn, 5000 cyc)
        foo    1100..1300  (20 br)
          printf 1150..1250 (5 br)
        bar    1400..1900  (50 br)
          do_syscall_64 1500..1800 (30 br)
        foo    1920..1980  (10 br)

  thread 100:101: ``bar`` 2100..2600 (40 br); guest 50:50: ``gmain``
  1200..2400 > ``gwork`` 1300..2000; qemu's VCPU thread 1000:1001:
  ``kvm_vcpu_ioctl`` 1100..1600 (5 br)
* 30 branch samples (20 on cpu 0 for 100:100 at 1000..1950 step 50, 6 on
  cpu 1 for 100:101 at 2100..2600 step 100, 4 guest samples on VCPU 0 at
  1200..2100 step 300), 2 cbr samples, 1 ptwrite sample; ids in time order
* context switches: cpu 0 runs 100:100 from 900 to 2050; cpu 1 runs qemu's
  VCPU thread 1000:1001 from 1100 to 2050, then 100:101 until 2700; the
  guest's cpu 0 (VCPU 0) runs gapp from 1150 to 2050.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

# The PostgreSQL server the tests use (a uniquely named database is created and dropped there).
PG_ADMIN = os.environ.get("PTEXPORT_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")

TABLES = {
    "selected_events": "id integer NOT NULL PRIMARY KEY, name varchar(80)",
    "machines": "id integer NOT NULL PRIMARY KEY, pid integer, root_dir varchar(4096)",
    "threads": "id integer NOT NULL PRIMARY KEY, machine_id bigint, process_id bigint, pid integer, tid integer",
    "comms": "id integer NOT NULL PRIMARY KEY, comm varchar(16), c_thread_id bigint, c_time bigint, exec_flag boolean",
    "comm_threads": "id integer NOT NULL PRIMARY KEY, comm_id bigint, thread_id bigint",
    "dsos": "id integer NOT NULL PRIMARY KEY, machine_id bigint, short_name varchar(256), long_name varchar(4096), "
            "build_id varchar(64)",
    "symbols": "id integer NOT NULL PRIMARY KEY, dso_id bigint, sym_start bigint, sym_end bigint, binding integer, "
               "name varchar(2048)",
    "branch_types": "id integer NOT NULL PRIMARY KEY, name varchar(80)",
    "samples": "id integer NOT NULL PRIMARY KEY, evsel_id bigint, machine_id bigint, thread_id bigint, "
               "comm_id bigint, dso_id bigint, symbol_id bigint, sym_offset bigint, ip bigint, time bigint, "
               "cpu integer, to_dso_id bigint, to_symbol_id bigint, to_sym_offset bigint, to_ip bigint, "
               "branch_type integer, in_tx boolean, call_path_id bigint, insn_count bigint, cyc_count bigint, "
               "flags integer",
    "call_paths": "id integer NOT NULL PRIMARY KEY, parent_id bigint, symbol_id bigint, ip bigint",
    "calls": "id integer NOT NULL PRIMARY KEY, thread_id bigint, comm_id bigint, call_path_id bigint, "
             "call_time bigint, return_time bigint, branch_count bigint, call_id bigint, return_id bigint, "
             "parent_call_path_id bigint, flags integer, parent_id bigint, insn_count bigint, cyc_count bigint",
    "ptwrite": "id integer NOT NULL PRIMARY KEY, payload bigint, exact_ip integer",
    "cbr": "id integer NOT NULL PRIMARY KEY, cbr integer, mhz integer, percent integer",
    "context_switches": "id integer NOT NULL PRIMARY KEY, machine_id bigint, time bigint, cpu integer, "
                        "thread_out_id bigint, comm_out_id bigint, thread_in_id bigint, comm_in_id bigint, "
                        "flags integer",
}
EXT_SAMPLE_COLUMNS = ("vcpu integer", "machine_pid integer")
EXT_TABLES = {
    "vcpus": "id integer NOT NULL PRIMARY KEY, machine_id bigint, vcpu integer, thread_id bigint, "
             "vmcs bigint, tsc_offset bigint",
    "decode_errors": "id integer NOT NULL PRIMARY KEY, cpu integer, time bigint, ip bigint, "
                     "offset_ bigint, code integer, message varchar(256)",
    "stats": "id integer NOT NULL PRIMARY KEY, name varchar(64), cpu integer, value bigint, "
             "severity varchar(16), description varchar(256)",
}

# Portable (SQLite and PostgreSQL) versions of perf's views.
VIEWS = {
    "machines_view": "SELECT id, pid, root_dir, CASE WHEN id=0 THEN 'unknown' WHEN pid=-1 THEN 'host' "
                     "ELSE 'guest' END AS host_or_guest FROM machines",
    "threads_view": "SELECT id, machine_id, (SELECT host_or_guest FROM machines_view WHERE id = machine_id) "
                    "AS host_or_guest, process_id, pid, tid FROM threads",
    "comm_threads_view": "SELECT comm_id, (SELECT comm FROM comms WHERE id = comm_id) AS command, thread_id, "
                         "(SELECT pid FROM threads WHERE id = thread_id) AS pid, "
                         "(SELECT tid FROM threads WHERE id = thread_id) AS tid FROM comm_threads",
    "calls_view": "SELECT calls.id, thread_id, (SELECT pid FROM threads WHERE id = thread_id) AS pid, "
                  "(SELECT tid FROM threads WHERE id = thread_id) AS tid, "
                  "(SELECT comm FROM comms WHERE id = comm_id) AS command, call_path_id, ip, symbol_id, "
                  "(SELECT name FROM symbols WHERE id = symbol_id) AS symbol, call_time, return_time, "
                  "return_time - call_time AS elapsed_time, branch_count, insn_count, cyc_count, call_id, "
                  "return_id, flags, parent_call_path_id, calls.parent_id "
                  "FROM calls INNER JOIN call_paths ON call_paths.id = call_path_id",
    "samples_view": "SELECT id, time, cpu, (SELECT pid FROM threads WHERE id = thread_id) AS pid, "
                    "(SELECT tid FROM threads WHERE id = thread_id) AS tid, "
                    "(SELECT comm FROM comms WHERE id = comm_id) AS command, "
                    "(SELECT name FROM selected_events WHERE id = evsel_id) AS event, ip, "
                    "(SELECT name FROM symbols WHERE id = symbol_id) AS symbol, sym_offset, "
                    "(SELECT name FROM branch_types WHERE id = branch_type) AS branch_type_name, "
                    "insn_count, cyc_count, flags FROM samples",
    "cbr_view": "SELECT cbr.id, time, cpu, cbr, mhz, percent FROM cbr INNER JOIN samples ON samples.id = cbr.id",
    "context_switches_view": (
        "SELECT context_switches.id, context_switches.machine_id, context_switches.time, context_switches.cpu, "
        "th_out.pid AS pid_out, th_out.tid AS tid_out, comm_out.comm AS comm_out, th_in.pid AS pid_in, "
        "th_in.tid AS tid_in, comm_in.comm AS comm_in, CASE WHEN context_switches.flags = 0 THEN 'in' "
        "WHEN context_switches.flags = 1 THEN 'out' WHEN context_switches.flags = 3 THEN 'out preempt' "
        "ELSE 'other' END AS flags FROM context_switches "
        "INNER JOIN threads AS th_out ON th_out.id = context_switches.thread_out_id "
        "INNER JOIN threads AS th_in ON th_in.id = context_switches.thread_in_id "
        "INNER JOIN comms AS comm_out ON comm_out.id = context_switches.comm_out_id "
        "INNER JOIN comms AS comm_in ON comm_in.id = context_switches.comm_in_id"),
}

SELECTED_EVENTS = [(0, "unknown"), (1, "branches"), (2, "cbr"), (3, "ptwrite")]
MACHINES = [(0, 0, "unknown"), (1, -1, ""), (2, 1000, "/guests/vm1")]
THREADS = [
    (0, 0, 0, -1, -1),
    (1, 1, 1, 0, 0),          # host swapper
    (2, 1, 2, 100, 100),      # app main thread
    (3, 1, 2, 100, 101),      # app second thread
    (4, 1, 4, 1000, 1000),    # qemu
    (5, 1, 4, 1000, 1001),    # qemu VCPU thread "CPU 0/KVM"
    (6, 2, 6, 50, 50),        # guest gapp
    (7, 2, 7, 0, 0),          # guest swapper
]
COMMS = [
    (0, "unknown", 0, 0, 0),
    (1, "swapper", 1, 0, 0),
    (2, "app", 2, 500, 1),
    (3, "qemu", 4, 0, 0),
    (4, "CPU 0/KVM", 5, 0, 0),
    (5, "gapp", 6, 0, 1),
    (6, "swapper", 7, 0, 0),
]
COMM_THREADS = [(1, 1, 1), (2, 2, 2), (3, 2, 3), (4, 3, 4), (5, 4, 5), (6, 5, 6), (7, 6, 7)]
DSOS = [
    (0, 0, "unknown", "unknown", ""),
    (1, 1, "[kernel.kallsyms]", "[kernel.kallsyms]", "aa" * 20),
    (2, 1, "app", "/usr/bin/app", "bb" * 20),
    (3, 1, "libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "cc" * 20),
    (4, 2, "[kernel.kallsyms]", "[guest.kernel.kallsyms]", ""),
    (5, 2, "gapp", "/usr/bin/gapp", "dd" * 20),
]
SYMBOLS = [
    (0, 0, 0, 0, 0, "unknown"),
    (1, 2, 0x1000, 0x1100, 1, "main"),
    (2, 2, 0x1100, 0x1200, 1, "foo"),
    (3, 2, 0x1200, 0x1300, 0, "bar"),
    (4, 3, 0x5000, 0x5100, 1, "printf"),
    (5, 1, 0xffffffff81000000 - 2**64, 0xffffffff81000100 - 2**64, 1, "do_syscall_64"),  # signed 64-bit
    (6, 5, 0x2000, 0x2100, 1, "gmain"),
    (7, 5, 0x2100, 0x2200, 1, "gwork"),
    (8, 1, 0xffffffff81200000 - 2**64, 0xffffffff81200400 - 2**64, 1, "kvm_vcpu_ioctl"),
]
BRANCH_TYPES = [(0, "no branch"), (1, "unconditional jump"), (3, "call"), (5, "return"),
                (9, "conditional jump"), (19, "system call"), (21, "return from system call"),
                (257, "trace begin"), (513, "trace end"), (2051, "vm entry"), (4099, "vm exit")]
CALL_PATHS = [
    (0, 0, 0, 0), (1, 0, 0, 0),
    (2, 1, 1, 0),   # main
    (3, 2, 2, 0),   # main > foo
    (4, 2, 3, 0),   # main > bar
    (5, 3, 4, 0),   # main > foo > printf
    (6, 4, 5, 0),   # main > bar > do_syscall_64
    (7, 1, 6, 0),   # gmain
    (8, 7, 7, 0),   # gmain > gwork
    (9, 1, 3, 0),   # bar (thread 101)
    (10, 1, 8, 0),  # kvm_vcpu_ioctl (qemu's VCPU thread)
]
# id, thread, comm, call_path, call_time, return_time, branches, call_id, return_id,
# parent_call_path, flags, parent_id, insn, cyc
CALLS = [
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (1, 2, 2, 2, 1000, 2000, 100, 1, 20, 1, 0, 0, 10000, 5000),
    (2, 2, 2, 3, 1100, 1300, 20, 3, 6, 2, 0, 1, 2000, 1000),
    (3, 2, 2, 5, 1150, 1250, 5, 4, 5, 3, 0, 2, 500, 250),
    (4, 2, 2, 4, 1400, 1900, 50, 9, 18, 2, 0, 1, 5000, 2000),
    (5, 2, 2, 6, 1500, 1800, 30, 11, 16, 4, 0, 4, 3000, 1000),
    (6, 2, 2, 3, 1920, 1980, 10, 19, 0, 2, 2, 1, 1000, 500),
    (7, 3, 2, 9, 2100, 2600, 40, 27, 33, 1, 0, 0, 4000, 4000),
    (8, 6, 5, 7, 1200, 2400, 60, 7, 28, 1, 0, 0, 6000, 3000),
    (9, 6, 5, 8, 1300, 2000, 30, 14, 22, 7, 0, 8, 3000, 1000),
    (10, 5, 4, 10, 1100, 1600, 5, 0, 0, 1, 0, 0, 500, 1000),
]
BRANCH_CYCLE = [3, 5, 9, 1]


def _samples(extensions: bool) -> list[tuple]:
    """Sample rows with ids in time order (as every exporter writes them)."""
    ext = (-1, -1) if extensions else ()
    rows = []
    # evsel machine thread comm dso sym off ip time cpu to_dso to_sym to_off to_ip type in_tx cp insn cyc flags
    for i in range(1, 21):        # app 100:100 on cpu 0, 1000..1950
        sym = (1, 2, 3)[i % 3]
        to_sym = (2, 3, 1)[i % 3]
        start = {1: 0x1000, 2: 0x1100, 3: 0x1200}
        rows.append((1, 1, 2, 2, 2, sym, i, start[sym] + i, 1000 + 50 * (i - 1), 0, 2, to_sym, 0x10,
                     start[to_sym] + 0x10, BRANCH_CYCLE[(i - 1) % 4], 0, 2, 10 * i, 5 * i, 0) + ext)
    for i in range(6):            # app 100:101 on cpu 1, 2100..2600
        rows.append((1, 1, 3, 2, 2, 3, 4, 0x1204, 2100 + 100 * i, 1, 3, 4, 0, 0x5000, 3, 0, 9,
                     100, 50, 0) + ext)
    for i in range(4):            # guest gapp 50:50 on VCPU 0, 1200..2100
        rows.append((1, 2, 6, 5, 5, 6, 8, 0x2008, 1200 + 300 * i, 0, 5, 7, 0, 0x2100, 3, 0, 7,
                     40, 40, 0) + ((0, 1000) if extensions else ()))
    rows.append((2, 1, 2, 2, 2, 1, 0, 0x1001, 1000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + ext)   # cbr
    rows.append((2, 1, 2, 2, 2, 1, 0, 0x1001, 1800, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + ext)   # cbr
    rows.append((3, 1, 2, 2, 2, 2, 4, 0x1104, 1600, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + ext)   # ptwrite
    order = sorted(range(len(rows)), key=lambda k: (rows[k][8], k))
    out = [(0,) * (21 + len(ext))]
    for new_id, k in enumerate(order, 1):
        out.append((new_id,) + rows[k])
    return out


def sample_id(kind: str, time: int) -> int:
    """Id of the cbr/ptwrite sample at ``time`` (ids are assigned in time order)."""
    evsel = {"cbr": 2, "ptwrite": 3}[kind]
    return next(r[0] for r in _samples(False) if r[1] == evsel and r[9] == time)


CBR = [(sample_id("cbr", 1000), 20, 2000, 50), (sample_id("cbr", 1800), 30, 3000, 75)]
PTWRITE = [(sample_id("ptwrite", 1600), 0xDEADBEEF, 1)]
# id machine time cpu thread_out comm_out thread_in comm_in flags
CONTEXT_SWITCHES = [
    (1, 1, 900, 0, 1, 1, 2, 2, 1),      # cpu 0: swapper out
    (2, 1, 900, 0, 1, 1, 2, 2, 0),      # cpu 0: app 100:100 in
    (3, 1, 2050, 0, 2, 2, 1, 1, 3),     # cpu 0: app out (preempt)
    (4, 1, 2050, 0, 2, 2, 1, 1, 0),     # cpu 0: swapper in
    (5, 1, 1100, 1, 1, 1, 5, 4, 1),     # cpu 1: swapper out
    (6, 1, 1100, 1, 1, 1, 5, 4, 0),     # cpu 1: qemu's VCPU thread 1000:1001 in (runs guest VCPU 0)
    (7, 1, 2050, 1, 5, 4, 3, 2, 3),     # cpu 1: VCPU thread out (preempt)
    (8, 1, 2050, 1, 5, 4, 3, 2, 0),     # cpu 1: app 100:101 in
    (9, 1, 2700, 1, 3, 2, 1, 1, 1),     # cpu 1: app out
    (10, 1, 2700, 1, 3, 2, 1, 1, 0),    # cpu 1: swapper in
    (11, 2, 1150, 0, 7, 6, 6, 5, 0),    # guest cpu 0: gapp in
    (12, 2, 2050, 0, 6, 5, 7, 6, 0),    # guest cpu 0: swapper in
]
VCPUS = [(1, 2, 0, 5, 0x1234000, 1_000_000)]


def table_rows(extensions: bool = True) -> dict[str, list[tuple]]:
    rows = {
        "selected_events": SELECTED_EVENTS, "machines": MACHINES, "threads": THREADS, "comms": COMMS,
        "comm_threads": COMM_THREADS, "dsos": DSOS, "symbols": SYMBOLS, "branch_types": BRANCH_TYPES,
        "samples": _samples(extensions), "call_paths": CALL_PATHS, "calls": CALLS, "ptwrite": PTWRITE,
        "cbr": CBR, "context_switches": CONTEXT_SWITCHES,
    }
    if extensions:
        rows["vcpus"] = VCPUS
        rows["decode_errors"] = [(1, 0, 1500, 0x1234, 0x400, 3, "bad packet")]
        rows["stats"] = [(1, "lost_data", 0, 4096, "data_loss", "bytes of trace lost (AUX truncated)"),
                         (2, "samples", -1, 30, "info", "branch samples")]
    return rows


def table_ddl(extensions: bool = True) -> dict[str, str]:
    ddl = dict(TABLES)
    if extensions:
        ddl["samples"] = ddl["samples"] + ", " + ", ".join(EXT_SAMPLE_COLUMNS)
        ddl.update(EXT_TABLES)
    return ddl


def build(path: str | Path, *, extensions: bool = True, has_calls_column: bool = True) -> Path:
    """Write the fixture database at ``path`` (SQLite) and return the path."""
    path = Path(path)
    con = sqlite3.connect(path)
    rows = table_rows(extensions)
    for name, cols in table_ddl(extensions).items():
        con.execute(f"CREATE TABLE {name} ({cols})")
        data = rows.get(name, [])
        if data:
            marks = ",".join("?" * len(data[0]))
            con.executemany(f"INSERT INTO {name} VALUES ({marks})", data)
    for name, sql in VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql}")
    con.execute("CREATE INDEX pcpid_idx ON calls (parent_call_path_id)")
    con.execute("CREATE INDEX pid_idx ON calls (parent_id)")
    if has_calls_column:
        con.execute("ALTER TABLE comms ADD has_calls boolean")
        con.execute("UPDATE comms SET has_calls = 1 WHERE comms.id IN (SELECT DISTINCT comm_id FROM calls)")
    con.commit()
    con.close()
    return path


def copy_to_postgres(url: str, *, extensions: bool = True) -> None:
    """Create the fixture's tables, rows and views in the (empty) PostgreSQL database at ``url``."""
    import psycopg

    rows = table_rows(extensions)
    bools = {"comms": {4}, "samples": {16}}
    with psycopg.connect(url, autocommit=False) as con:
        for name, cols in table_ddl(extensions).items():
            con.execute(f"CREATE TABLE {name} ({cols})")
            data = rows.get(name, [])
            if data:
                fix = bools.get(name, set())
                data = [tuple(bool(v) if i in fix else v for i, v in enumerate(r)) for r in data]
                marks = ",".join(["%s"] * len(data[0]))
                with con.cursor() as cur:
                    cur.executemany(f"INSERT INTO {name} VALUES ({marks})", data)
        for name, sql in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {sql}")
        con.execute("CREATE INDEX pcpid_idx ON calls (parent_call_path_id)")
        con.execute("CREATE INDEX pid_idx ON calls (parent_id)")
        con.execute("ALTER TABLE comms ADD has_calls boolean")
        con.execute("UPDATE comms SET has_calls = TRUE WHERE comms.id IN (SELECT DISTINCT comm_id FROM calls)")
        con.commit()


def copy_to_duckdb(path: str | Path, *, extensions: bool = True) -> Path:
    """The fixture's tables, rows and views in a new DuckDB file at ``path`` (as ``--db X.duckdb`` writes
    one: 64-bit integers, booleans, no indexes)."""
    import re

    import duckdb

    path = Path(path)
    rows = table_rows(extensions)
    bools = {"comms": {4}, "samples": {16}}
    con = duckdb.connect(str(path))
    try:
        for name, cols in table_ddl(extensions).items():
            wide = re.sub(r"(?i)\binteger\b", "bigint", cols)  # DuckDB's integer is 32-bit
            con.execute(f"CREATE TABLE {name} ({wide})")
            data = rows.get(name, [])
            if data:
                fix = bools.get(name, set())
                data = [tuple(bool(v) if i in fix else v for i, v in enumerate(r)) for r in data]
                marks = ",".join("?" * len(data[0]))
                con.executemany(f"INSERT INTO {name} VALUES ({marks})", data)
        for name, sql in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {sql}")
        con.execute("ALTER TABLE comms ADD has_calls boolean")
        con.execute("UPDATE comms SET has_calls = TRUE WHERE comms.id IN (SELECT DISTINCT comm_id FROM calls)")
    finally:
        con.close()
    return path
