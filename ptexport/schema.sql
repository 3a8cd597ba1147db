-- ptexport database schema: the one source of truth for SQLite and PostgreSQL.
--
-- A superset of what perf 6.1's export-to-sqlite.py / export-to-postgresql.py
-- create with "branches calls": the same tables, columns (names, order and
-- meaning), views and id conventions, so analysts' SQL and perf's
-- exported-sql-viewer.py keep working.  ptexport's additions are new tables
-- and new trailing columns only.
--
-- Conventions (perf's):
--   * every table's key is "id"; ids start at 1 and id 0 is the "unknown" row
--     of selected_events, machines, threads, comms, dsos, symbols, samples,
--     call_paths and calls, so joins need no NULL handling;
--   * addresses (ip, to_ip, sym_start...) are unsigned 64-bit values stored
--     as signed 64-bit integers (two's complement: kernel addresses are < 0);
--   * time is perf time in nanoseconds (perf's sample time, exactly);
--   * machines.pid is -1 for the host, the hypervisor's pid for a guest;
--   * threads.process_id is the id of the process's main thread;
--   * comm_id of samples/calls is the main thread's exec comm.
--
-- Loader syntax (ptexport/writers/schema.py): statements end with ";" at the
-- end of a line.  Lines between "-- @sqlite" and "-- @end" are used only for
-- SQLite, between "-- @postgresql" and "-- @end" only for PostgreSQL, between
-- "-- @duckdb" and "-- @end" only for DuckDB (the DuckDB and Parquet targets);
-- a marker may name several ("-- @postgresql @duckdb").
-- to_hex(x) is PostgreSQL's; for SQLite it becomes printf('%x', x), for DuckDB
-- lower(to_hex(CAST(x AS BIGINT))) (both 64-bit two's complement, lower case).
-- "id integer NOT NULL PRIMARY KEY" is SQLite's rowid alias; for PostgreSQL
-- it becomes "id bigint NOT NULL" and the primary key is added after loading;
-- for DuckDB "id bigint NOT NULL" (no key: rows are stored in id order).
-- The "-- " comment after a column is its documentation (PostgreSQL gets it as
-- COMMENT ON COLUMN).  A DEFAULT on trailing columns lets the SQLite bulk
-- writer leave those values out of a row's record when they equal the
-- default (SQLite reads missing trailing values as the default), so host
-- samples pay nothing for vcpu/machine_pid.

-- ---------------------------------------------------------------- perf's tables

CREATE TABLE selected_events (
    id              integer NOT NULL PRIMARY KEY, -- event id; 0 = unknown
    name            varchar(80)                   -- event name as perf shows it: branches, instructions, psb, cbr, pwrx, ...
);

CREATE TABLE machines (
    id              integer NOT NULL PRIMARY KEY, -- machine id; 0 = unknown
    pid             integer,                      -- -1 for the host; for a guest, the pid of its hypervisor process on the host
    root_dir        varchar(4096)                 -- guest root directory (guestmount) or '' for the host
);

CREATE TABLE threads (
    id              integer NOT NULL PRIMARY KEY, -- thread id (trace-unique, not the OS tid); 0 = unknown
    machine_id      bigint,                       -- machines.id the thread runs in
    process_id      bigint,                       -- threads.id of the process's main thread (pid == tid)
    pid             integer,                      -- OS process id (-1 unknown)
    tid             integer                       -- OS thread id (-1 unknown)
);

CREATE TABLE comms (
    id              integer NOT NULL PRIMARY KEY, -- comm id; 0 = unknown
    comm            varchar(16),                  -- command name (at most 15 characters, as the kernel keeps it)
    c_thread_id     bigint,                       -- threads.id of the thread that took this name
    c_time          bigint,                       -- perf time the name was taken (0 = before the trace)
    exec_flag       boolean,                      -- true if the name came from an exec
    has_calls       boolean                       -- true if calls has rows with this comm_id (perf adds this column at the end)
);

CREATE TABLE comm_threads (
    id              integer NOT NULL PRIMARY KEY, -- row id (no id 0 row, as in perf)
    comm_id         bigint,                       -- comms.id
    thread_id       bigint                        -- threads.id that used the comm
);

CREATE TABLE dsos (
    id              integer NOT NULL PRIMARY KEY, -- dso id; 0 = unknown
    machine_id      bigint,                       -- machines.id the object is mapped in
    short_name      varchar(256),                 -- base name ([kernel.kallsyms], libc.so.6, ...)
    long_name       varchar(4096),                -- full path
    build_id        varchar(64)                   -- build-id as hex, '' when unknown
);

CREATE TABLE symbols (
    id              integer NOT NULL PRIMARY KEY, -- symbol id; 0 = unknown
    dso_id          bigint,                       -- dsos.id
    sym_start       bigint,                       -- start address of the symbol (signed 64-bit storage)
    sym_end         bigint,                       -- end address (exclusive)
    binding         integer,                      -- 0 local, 1 global, 2 weak (ELF STB_*)
    name            varchar(2048)                 -- symbol name
);

CREATE TABLE branch_types (
    id              integer NOT NULL PRIMARY KEY, -- the branch flag bits (perf's PERF_IP_FLAG_* without in_tx)
    name            varchar(80)                   -- perf's name for its values, a name derived from the bits otherwise
);

CREATE TABLE samples (
    id              integer NOT NULL PRIMARY KEY, -- sample id, in time order; 0 = unknown
    evsel_id        bigint,                       -- selected_events.id
    machine_id      bigint,                       -- machines.id
    thread_id       bigint,                       -- threads.id
    comm_id         bigint,                       -- comms.id (the main thread's exec comm)
    dso_id          bigint,                       -- dsos.id of ip
    symbol_id       bigint,                       -- symbols.id of ip
    sym_offset      bigint,                       -- ip - sym_start
    ip              bigint,                       -- address of the branch (or event) instruction
    time            bigint,                       -- perf time, ns
    cpu             integer,                      -- cpu number (-1 unknown)
    to_dso_id       bigint,                       -- dsos.id of to_ip
    to_symbol_id    bigint,                       -- symbols.id of to_ip
    to_sym_offset   bigint,                       -- to_ip - sym_start of the target symbol
    to_ip           bigint,                       -- branch target (0 = none, e.g. trace end)
    branch_type     integer,                      -- branch_types.id
    in_tx           boolean,                      -- inside a TSX transaction
    call_path_id    bigint,                       -- call_paths.id of the stack when the sample was taken
    insn_count      bigint,                       -- instructions since the previous sample (with cycle-accurate mode)
    cyc_count       bigint,                       -- cycles since the previous sample (with CYC packets)
    flags           integer,                      -- all PERF_IP_FLAG_* bits of the sample
    vcpu            integer DEFAULT -1,           -- ptexport: guest VCPU number, -1 when not in a guest
    machine_pid     integer DEFAULT -1            -- ptexport: machines.pid of machine_id (-1 host), for filtering without a join
);

CREATE TABLE call_paths (
    id              integer NOT NULL PRIMARY KEY, -- call path id; 0 = unknown, 1 = the root
    parent_id       bigint,                       -- call_paths.id of the caller's path
    symbol_id       bigint,                       -- symbols.id of the function
    ip              bigint                        -- 0 when the symbol is known, else the address (keyed by parent, symbol, ip)
);

CREATE TABLE calls (
    id              integer NOT NULL PRIMARY KEY, -- call id; 0 = unknown
    thread_id       bigint,                       -- threads.id
    comm_id         bigint,                       -- comms.id
    call_path_id    bigint,                       -- call_paths.id of the called function
    call_time       bigint,                       -- perf time of the call, ns
    return_time     bigint,                       -- perf time of the return, ns
    branch_count    bigint,                       -- branches executed in the call, callees included
    call_id         bigint,                       -- samples.id of the call (0 if not seen)
    return_id       bigint,                       -- samples.id of the return (0 if not seen)
    parent_call_path_id bigint,                   -- call_paths.id of the caller
    flags           integer,                      -- 1 no call, 2 no return, 4 tail-call (6 = jump), as perf's thread-stack
    parent_id       bigint,                       -- calls.id of the caller's call (0 = none)
    insn_count      bigint DEFAULT 0,             -- instructions in the call, callees included
    cyc_count       bigint DEFAULT 0              -- cycles in the call, callees included
);

CREATE TABLE ptwrite (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the ptwrite sample
    payload         bigint,                       -- the PTWRITE operand
    exact_ip        boolean                       -- true if the sample's ip is exactly the PTWRITE instruction
);

CREATE TABLE cbr (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the cbr sample
    cbr             integer,                      -- core:bus ratio
    mhz             integer,                      -- core frequency, MHz
    percent         integer                       -- percent of the maximum non-turbo ratio
);

CREATE TABLE mwait (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the mwait sample
    hints           integer,                      -- MWAIT hints (EAX)
    extensions      integer                       -- MWAIT extensions (ECX)
);

CREATE TABLE pwre (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the pwre sample
    cstate          integer,                      -- requested C-state
    subcstate       integer,                      -- requested sub C-state
    hw              boolean                       -- true if the request came from hardware
);

CREATE TABLE exstop (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the exstop sample
    exact_ip        boolean                       -- true if the sample's ip is exact
);

CREATE TABLE pwrx (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the pwrx sample
    deepest_cstate  integer,                      -- deepest C-state reached
    last_cstate     integer,                      -- last C-state
    wake_reason     integer                       -- 1 interrupt, 2 timer deadline, 4 monitored address, 8 hardware
);

CREATE TABLE context_switches (
    id              integer NOT NULL PRIMARY KEY, -- row id (no id 0 row, as in perf)
    machine_id      bigint,                       -- machines.id
    time            bigint,                       -- perf time, ns
    cpu             integer,                      -- cpu number
    thread_out_id   bigint,                       -- threads.id switched out
    comm_out_id     bigint,                       -- comms.id switched out
    thread_in_id    bigint,                       -- threads.id switched in
    comm_in_id      bigint,                       -- comms.id switched in
    flags           integer,                      -- 0 in, 1 out, 3 out with preemption
    vcpu            integer DEFAULT -1            -- ptexport: the VCPU (guest CPU) of a guest machine's switch, -1 on the host
);

-- ---------------------------------------------------------------- ptexport's tables

CREATE TABLE vcpus (
    id              integer NOT NULL PRIMARY KEY, -- vcpu row id; 0 = unknown
    machine_id      bigint,                       -- machines.id of the guest
    vcpu            integer,                      -- VCPU number in the guest
    thread_id       bigint,                       -- threads.id of the host thread running it (CPU n/KVM)
    vmcs            bigint,                       -- VMCS address from the trace (0 unknown)
    tsc_offset      bigint,                       -- guest TSC = host TSC + tsc_offset
    tsc_multiplier  bigint,                       -- TSC scaling multiplier (0 = no scaling)
    tsc_offset_source varchar(16)                 -- where tsc_offset came from: option, sideband, measured, none
);

-- One row per VM exit of a VCPU thread (perf's host-side exit sample "0 => handler"),
-- paired with the next VM entry of the same host thread; entry_time - exit_time is the
-- time the VCPU spent in the host (exit handling, and being scheduled out).
CREATE TABLE vm_exits (
    id              integer NOT NULL PRIMARY KEY, -- exit id, in export (time) order
    machine_id      bigint,                       -- machines.id of the guest that exited
    vcpu            integer,                      -- VCPU number (-1 unknown)
    thread_id       bigint,                       -- threads.id of the host VCPU thread
    cpu             integer,                      -- host cpu of the exit
    exit_id         bigint,                       -- samples.id of the exit's host-side branch sample
    exit_time       bigint,                       -- perf time of the exit, ns
    guest_ip        bigint,                       -- guest ip at the exit (the FUP of the VM exit; 0 unknown)
    entry_id        bigint,                       -- samples.id of the thread's next VM entry (host side); 0: none in the trace
    entry_time      bigint,                       -- perf time of that entry, ns (0: none)
    reason          varchar(40),                  -- VMX exit reason (CPUID, HLT, IO_INSTRUCTION, MSR_READ, ...), 'external interrupt or other', 'unknown'
    reason_source   varchar(16)                   -- kvm_exit (a recorded kvm:kvm_exit tracepoint) or instruction (the guest instruction at guest_ip)
);

CREATE TABLE decode_errors (
    id              integer NOT NULL PRIMARY KEY, -- error id
    segment         bigint,                       -- index of the PSB segment of the AUX stream (0: from its first PSB; -1 before it, or no trace position: lost_data)
    "offset"        bigint,                       -- byte offset in the cpu's AUX stream
    kind            varchar(32),                  -- error kind: bad_packet, no_insn, mismatch, overflow, lost_data, never_ending_loop, no_data, internal, no_memory, unknown (perf's codes), nosync, ...
    message         varchar(512),                 -- the decoder's message, as perf or libipt would say it
    time            bigint,                       -- perf time of the last timing packet before the error, ns
    cpu             integer,                      -- cpu of the AUX stream (-1 per-thread mode)
    ip              bigint,                       -- last known ip (0 unknown)
    thread_id       bigint,                       -- threads.id running at the time (0 unknown)
    machine_id      bigint,                       -- machines.id (0 unknown)
    code            integer DEFAULT 0             -- perf's error code (INTEL_PT_ERR_*: 1 no_memory, 2 internal, 3 bad_packet, 4 no_data, 5 no_insn, 6 mismatch, 7 overflow, 8 lost_data, 9 unknown, 10 never_ending_loop; 0 none)
);

CREATE TABLE stats (
    id              integer NOT NULL PRIMARY KEY, -- row id
    name            varchar(64),                  -- lost_data, overflows, truncated_aux, skipped_records, lost_records, decode_errors, samples, ...
    cpu             integer,                      -- cpu it applies to, -1 for the whole trace
    value           bigint,                       -- count (or bytes for *_bytes names)
    severity        varchar(16),                  -- info, warning, data_loss, error
    description     varchar(256)                  -- what the number means
);

CREATE TABLE psb (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the psb sample
    "offset"        bigint                        -- byte offset of the PSB in the cpu's AUX stream
);

CREATE TABLE evt (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the event-trace sample
    type            integer,                      -- CFE type: 1 INTR, 2 IRET, 3 SMI, 4 RSM, 5 SIPI, 6 INIT, 7 VMENTRY, 8 VMEXIT, 9 VMEXIT_INTR, 10 SHUTDOWN, ...
    vector          integer,                      -- interrupt/exception vector (-1 none)
    ip_flag         boolean,                      -- the CFE packet's IP bit (an IP follows)
    evd_count       integer                       -- number of evd rows of this event
);

CREATE TABLE evd (
    id              integer NOT NULL PRIMARY KEY, -- row id
    evt_id          bigint,                       -- evt.id (= samples.id)
    evd_type        integer,                      -- EVD type: 0 PFA, 1 VMXQ, 2 VMXR, ...
    payload         bigint                        -- EVD payload
);

CREATE TABLE iflag (
    id              integer NOT NULL PRIMARY KEY, -- samples.id of the interrupt-flag sample
    iflag           boolean,                      -- new value of the interrupt flag
    via_branch      boolean                       -- changed by a branch (else by CLI/STI/POPF)
);

-- Time-range "zone maps" (block range indexes): rows are grouped by id >> 10
-- (1024 ids per block) with the time span of each block, so a time-range query
-- reads only the id ranges of the blocks that overlap it (see docs/cookbook.md).
-- Samples are in time order, so their blocks do not overlap.  A fraction of the
-- size of an index on time.
CREATE TABLE samples_time_blocks (
    id              integer NOT NULL PRIMARY KEY, -- block number: the samples with id / 1024 = this id
    min_time        bigint,                       -- smallest samples.time in the block
    max_time        bigint                        -- largest samples.time in the block
);

CREATE TABLE calls_time_blocks (
    id              integer NOT NULL PRIMARY KEY, -- block number: the calls with id / 1024 = this id
    min_call_time   bigint,                       -- smallest calls.call_time in the block
    max_call_time   bigint,                       -- largest calls.call_time in the block
    max_return_time bigint                        -- largest calls.return_time in the block
);

-- Aggregates written at export time, so the analysts' questions (hottest functions,
-- call paths, CPU load over time) read thousands of rows instead of every call or
-- sample.  Each equals a GROUP BY over perf's tables (see docs/export.md and the
-- cookbook); `ptexport upgrade` computes them that way for older databases.
-- Durations are return_time - call_time of the calls rows, in perf time (ns).
CREATE TABLE call_path_stats (
    id              integer NOT NULL PRIMARY KEY, -- row number (ordered by thread_id, call_path_id)
    thread_id       bigint,                       -- threads.id of the calls
    call_path_id    bigint,                       -- call_paths.id of the calls
    calls           bigint,                       -- number of calls rows of this thread on this path
    total_ns        bigint,                       -- sum of their durations (inclusive time)
    self_ns         bigint,                       -- sum of their self times: duration minus the durations of the calls whose parent_id is the call
    min_ns          bigint,                       -- shortest duration
    max_ns          bigint,                       -- longest duration
    branch_count    bigint,                       -- sum of calls.branch_count
    insn_count      bigint,                       -- sum of calls.insn_count (inclusive)
    cyc_count       bigint                        -- sum of calls.cyc_count (inclusive)
);

CREATE TABLE symbol_stats (
    id              integer NOT NULL PRIMARY KEY, -- row number (ordered by symbol_id)
    symbol_id       bigint,                       -- symbols.id (call_paths.symbol_id of the calls' paths)
    calls           bigint,                       -- number of calls of the symbol, on any path, in any thread
    total_ns        bigint,                       -- sum of their durations (a recursive function counts each level)
    self_ns         bigint,                       -- sum of their self times (call_path_stats.self_ns)
    min_ns          bigint,                       -- shortest duration
    max_ns          bigint,                       -- longest duration
    branch_count    bigint,                       -- sum of calls.branch_count
    insn_count      bigint,                       -- sum of calls.insn_count (inclusive)
    cyc_count       bigint                        -- sum of calls.cyc_count (inclusive)
);

CREATE TABLE sample_stats (
    id              integer NOT NULL PRIMARY KEY, -- row number (ordered by thread_id, evsel_id, symbol_id, branch_type)
    thread_id       bigint,                       -- samples.thread_id
    evsel_id        bigint,                       -- samples.evsel_id (selected_events.id)
    symbol_id       bigint,                       -- samples.symbol_id (the symbol of the sample's ip)
    branch_type     integer,                      -- samples.branch_type (branch_types.id)
    samples         bigint,                       -- number of samples
    insn_count      bigint,                       -- sum of samples.insn_count
    cyc_count       bigint,                       -- sum of samples.cyc_count
    cyc_insn_count  bigint                        -- sum of samples.insn_count over the samples with cyc_count > 0 (what IPC divides)
);

CREATE TABLE cpu_time_stats (
    id              integer NOT NULL PRIMARY KEY, -- row number (ordered by cpu, time)
    cpu             integer,                      -- samples.cpu (-1: per-thread trace)
    time            bigint,                       -- start of the bucket: samples.time rounded down to a multiple of 1000000 (1 ms)
    samples         bigint,                       -- number of samples (every event) of the CPU in [time, time + 1000000)
    insn_count      bigint,                       -- sum of samples.insn_count
    cyc_count       bigint                        -- sum of samples.cyc_count
);

CREATE TABLE schema_version (
    version         integer,                      -- schema version of this database (see migrations/)
    generator       varchar(64),                  -- what wrote it: ptexport X.Y or perf export-to-sqlite.py
    created         varchar(32)                   -- UTC time it was completed, ISO 8601
);

CREATE TABLE ptexport_migrations (
    name            varchar(128) NOT NULL,        -- migration name (migrations/NNNN_*.py)
    applied         varchar(32)                   -- UTC time it was applied, ISO 8601
);

-- ---------------------------------------------------------------- perf's views

CREATE VIEW machines_view AS
SELECT
    id,
    pid,
    root_dir,
    CASE WHEN id=0 THEN 'unknown' WHEN pid=-1 THEN 'host' ELSE 'guest' END AS host_or_guest
FROM machines;

CREATE VIEW dsos_view AS
SELECT
    id,
    machine_id,
    (SELECT host_or_guest FROM machines_view WHERE id = machine_id) AS host_or_guest,
    short_name,
    long_name,
    build_id
FROM dsos;

CREATE VIEW symbols_view AS
SELECT
    id,
    name,
    (SELECT short_name FROM dsos WHERE id=dso_id) AS dso,
    dso_id,
    sym_start,
    sym_end,
    CASE WHEN binding=0 THEN 'local' WHEN binding=1 THEN 'global' ELSE 'weak' END AS binding
FROM symbols;

CREATE VIEW threads_view AS
SELECT
    id,
    machine_id,
    (SELECT host_or_guest FROM machines_view WHERE id = machine_id) AS host_or_guest,
    process_id,
    pid,
    tid
FROM threads;

CREATE VIEW comm_threads_view AS
SELECT
    comm_id,
    (SELECT comm FROM comms WHERE id = comm_id) AS command,
    thread_id,
    (SELECT pid FROM threads WHERE id = thread_id) AS pid,
    (SELECT tid FROM threads WHERE id = thread_id) AS tid
FROM comm_threads;

CREATE VIEW call_paths_view AS
SELECT
    c.id,
    to_hex(c.ip) AS ip,
    c.symbol_id,
    (SELECT name FROM symbols WHERE id = c.symbol_id) AS symbol,
    (SELECT dso_id FROM symbols WHERE id = c.symbol_id) AS dso_id,
    (SELECT dso FROM symbols_view WHERE id = c.symbol_id) AS dso_short_name,
    c.parent_id,
    to_hex(p.ip) AS parent_ip,
    p.symbol_id AS parent_symbol_id,
    (SELECT name FROM symbols WHERE id = p.symbol_id) AS parent_symbol,
    (SELECT dso_id FROM symbols WHERE id = p.symbol_id) AS parent_dso_id,
    (SELECT dso FROM symbols_view WHERE id = p.symbol_id) AS parent_dso_short_name
FROM call_paths c INNER JOIN call_paths p ON p.id = c.parent_id;

CREATE VIEW calls_view AS
SELECT
    calls.id,
    thread_id,
    (SELECT pid FROM threads WHERE id = thread_id) AS pid,
    (SELECT tid FROM threads WHERE id = thread_id) AS tid,
    (SELECT comm FROM comms WHERE id = comm_id) AS command,
    call_path_id,
    to_hex(ip) AS ip,
    symbol_id,
    (SELECT name FROM symbols WHERE id = symbol_id) AS symbol,
    call_time,
    return_time,
    return_time - call_time AS elapsed_time,
    branch_count,
    insn_count,
    cyc_count,
-- @sqlite
    CASE WHEN cyc_count=0 THEN CAST(0 AS FLOAT) ELSE ROUND(CAST(insn_count AS FLOAT) / cyc_count, 2) END AS IPC,
-- @end
-- DuckDB: SQLite's REAL rounded as SQLite rounds (half away from zero on the decimal digits, not on the binary value)
-- @duckdb
    CASE WHEN cyc_count=0 THEN CAST(0 AS DOUBLE) ELSE CAST(ROUND(CAST(CAST(insn_count AS DOUBLE) / cyc_count AS DECIMAL(30, 12)), 2) AS DOUBLE) END AS IPC,
-- @end
-- @postgresql
    CASE WHEN cyc_count=0 THEN CAST(0 AS NUMERIC(20, 2)) ELSE CAST((CAST(insn_count AS FLOAT) / cyc_count) AS NUMERIC(20, 2)) END AS IPC,
-- @end
    call_id,
    return_id,
-- perf's SQLite view gives an unnamed value as the integer, its PostgreSQL view as text
-- @sqlite
    CASE WHEN flags=0 THEN '' WHEN flags=1 THEN 'no call' WHEN flags=2 THEN 'no return' WHEN flags=3 THEN 'no call/return' WHEN flags=6 THEN 'jump' ELSE flags END AS flags,
-- @end
-- @postgresql @duckdb
    CASE WHEN flags=0 THEN '' WHEN flags=1 THEN 'no call' WHEN flags=2 THEN 'no return' WHEN flags=3 THEN 'no call/return' WHEN flags=6 THEN 'jump' ELSE CAST(flags AS VARCHAR(11)) END AS flags,
-- @end
    parent_call_path_id,
    calls.parent_id
FROM calls INNER JOIN call_paths ON call_paths.id = call_path_id;

CREATE VIEW samples_view AS
SELECT
    id,
    time,
    cpu,
    (SELECT pid FROM threads WHERE id = thread_id) AS pid,
    (SELECT tid FROM threads WHERE id = thread_id) AS tid,
    (SELECT comm FROM comms WHERE id = comm_id) AS command,
    (SELECT name FROM selected_events WHERE id = evsel_id) AS event,
    to_hex(ip) AS ip_hex,
    (SELECT name FROM symbols WHERE id = symbol_id) AS symbol,
    sym_offset,
    (SELECT short_name FROM dsos WHERE id = dso_id) AS dso_short_name,
    to_hex(to_ip) AS to_ip_hex,
    (SELECT name FROM symbols WHERE id = to_symbol_id) AS to_symbol,
    to_sym_offset,
    (SELECT short_name FROM dsos WHERE id = to_dso_id) AS to_dso_short_name,
    (SELECT name FROM branch_types WHERE id = branch_type) AS branch_type_name,
    in_tx,
    insn_count,
    cyc_count,
-- @sqlite
    CASE WHEN cyc_count=0 THEN CAST(0 AS FLOAT) ELSE ROUND(CAST(insn_count AS FLOAT) / cyc_count, 2) END AS IPC,
-- @end
-- DuckDB: SQLite's REAL rounded as SQLite rounds (half away from zero on the decimal digits, not on the binary value)
-- @duckdb
    CASE WHEN cyc_count=0 THEN CAST(0 AS DOUBLE) ELSE CAST(ROUND(CAST(CAST(insn_count AS DOUBLE) / cyc_count AS DECIMAL(30, 12)), 2) AS DOUBLE) END AS IPC,
-- @end
-- @postgresql
    CASE WHEN cyc_count=0 THEN CAST(0 AS NUMERIC(20, 2)) ELSE CAST((CAST(insn_count AS FLOAT) / cyc_count) AS NUMERIC(20, 2)) END AS IPC,
-- @end
    flags
FROM samples;

CREATE VIEW ptwrite_view AS
SELECT
    ptwrite.id,
    time,
    cpu,
    to_hex(payload) AS payload_hex,
    CASE WHEN exact_ip=FALSE THEN 'False' ELSE 'True' END AS exact_ip
FROM ptwrite
INNER JOIN samples ON samples.id = ptwrite.id;

CREATE VIEW cbr_view AS
SELECT
    cbr.id,
    time,
    cpu,
    cbr,
    mhz,
    percent
FROM cbr
INNER JOIN samples ON samples.id = cbr.id;

CREATE VIEW mwait_view AS
SELECT
    mwait.id,
    time,
    cpu,
    to_hex(hints) AS hints_hex,
    to_hex(extensions) AS extensions_hex
FROM mwait
INNER JOIN samples ON samples.id = mwait.id;

CREATE VIEW pwre_view AS
SELECT
    pwre.id,
    time,
    cpu,
    cstate,
    subcstate,
    CASE WHEN hw=FALSE THEN 'False' ELSE 'True' END AS hw
FROM pwre
INNER JOIN samples ON samples.id = pwre.id;

CREATE VIEW exstop_view AS
SELECT
    exstop.id,
    time,
    cpu,
    CASE WHEN exact_ip=FALSE THEN 'False' ELSE 'True' END AS exact_ip
FROM exstop
INNER JOIN samples ON samples.id = exstop.id;

CREATE VIEW pwrx_view AS
SELECT
    pwrx.id,
    time,
    cpu,
    deepest_cstate,
    last_cstate,
    CASE WHEN wake_reason=1 THEN 'Interrupt'
         WHEN wake_reason=2 THEN 'Timer Deadline'
         WHEN wake_reason=4 THEN 'Monitored Address'
         WHEN wake_reason=8 THEN 'HW'
-- @sqlite
         ELSE wake_reason END AS wake_reason
-- @end
-- @postgresql @duckdb
         ELSE CAST(wake_reason AS VARCHAR(2)) END AS wake_reason
-- @end
FROM pwrx
INNER JOIN samples ON samples.id = pwrx.id;

-- One row per power event sample; the columns of the other kinds are empty.
CREATE VIEW power_events_view AS
SELECT
    samples.id,
    samples.time,
    samples.cpu,
    selected_events.name AS event,
    cbr.cbr AS cbr,
    cbr.mhz AS mhz,
    cbr.percent AS percent,
    CASE WHEN mwait.id IS NULL THEN NULL ELSE to_hex(mwait.hints) END AS hints_hex,
    CASE WHEN mwait.id IS NULL THEN NULL ELSE to_hex(mwait.extensions) END AS extensions_hex,
    pwre.cstate AS cstate,
    pwre.subcstate AS subcstate,
-- perf's SQLite view gives hw and exact_ip as stored (0/1), its PostgreSQL view as 'False'/'True'
-- @sqlite @duckdb
    pwre.hw AS hw,
    exstop.exact_ip AS exact_ip,
-- @end
-- @postgresql
    CASE WHEN pwre.hw=FALSE THEN 'False' WHEN pwre.hw=TRUE THEN 'True' ELSE NULL END AS hw,
    CASE WHEN exstop.exact_ip=FALSE THEN 'False' WHEN exstop.exact_ip=TRUE THEN 'True' ELSE NULL END AS exact_ip,
-- @end
    pwrx.deepest_cstate AS deepest_cstate,
    pwrx.last_cstate AS last_cstate,
    CASE WHEN pwrx.wake_reason=1 THEN 'Interrupt'
         WHEN pwrx.wake_reason=2 THEN 'Timer Deadline'
         WHEN pwrx.wake_reason=4 THEN 'Monitored Address'
         WHEN pwrx.wake_reason=8 THEN 'HW'
-- @sqlite
         ELSE pwrx.wake_reason END AS wake_reason
-- @end
-- @postgresql
         ELSE LPAD(CAST(pwrx.wake_reason AS VARCHAR(2)), 2) END AS wake_reason
-- @end
-- @duckdb
         ELSE LPAD(CAST(pwrx.wake_reason AS VARCHAR), 2, ' ') END AS wake_reason
-- @end
FROM samples
INNER JOIN selected_events ON selected_events.id = samples.evsel_id
LEFT JOIN cbr ON cbr.id = samples.id
LEFT JOIN mwait ON mwait.id = samples.id
LEFT JOIN pwre ON pwre.id = samples.id
LEFT JOIN exstop ON exstop.id = samples.id
LEFT JOIN pwrx ON pwrx.id = samples.id
WHERE selected_events.name IN ('cbr', 'mwait', 'exstop', 'pwre', 'pwrx');

CREATE VIEW context_switches_view AS
SELECT
    context_switches.id,
    context_switches.machine_id,
    context_switches.time,
    context_switches.cpu,
    th_out.pid AS pid_out,
    th_out.tid AS tid_out,
    comm_out.comm AS comm_out,
    th_in.pid AS pid_in,
    th_in.tid AS tid_in,
    comm_in.comm AS comm_in,
    CASE WHEN context_switches.flags = 0 THEN 'in'
         WHEN context_switches.flags = 1 THEN 'out'
         WHEN context_switches.flags = 3 THEN 'out preempt'
-- @sqlite
         ELSE context_switches.flags END AS flags
-- @end
-- @postgresql @duckdb
         ELSE CAST(context_switches.flags AS VARCHAR(11)) END AS flags
-- @end
FROM context_switches
INNER JOIN threads AS th_out ON th_out.id = context_switches.thread_out_id
INNER JOIN threads AS th_in ON th_in.id = context_switches.thread_in_id
INNER JOIN comms AS comm_out ON comm_out.id = context_switches.comm_out_id
INNER JOIN comms AS comm_in ON comm_in.id = context_switches.comm_in_id;

-- ---------------------------------------------------------------- ptexport's views

CREATE VIEW vcpus_view AS
SELECT
    vcpus.id,
    vcpus.machine_id,
    machines.pid AS machine_pid,
    vcpus.vcpu,
    threads.pid AS host_pid,
    threads.tid AS host_tid,
    to_hex(vcpus.vmcs) AS vmcs_hex,
    vcpus.tsc_offset,
    vcpus.tsc_multiplier,
    vcpus.tsc_offset_source
FROM vcpus
INNER JOIN machines ON machines.id = vcpus.machine_id
INNER JOIN threads ON threads.id = vcpus.thread_id;

CREATE VIEW vm_exits_view AS
SELECT
    vm_exits.id,
    vm_exits.machine_id,
    machines.pid AS machine_pid,
    vm_exits.vcpu,
    vm_exits.cpu,
    threads.pid AS host_pid,
    threads.tid AS host_tid,
    vm_exits.exit_time,
    vm_exits.entry_time,
    CASE WHEN vm_exits.entry_id = 0 THEN NULL ELSE vm_exits.entry_time - vm_exits.exit_time END AS host_ns,
    to_hex(vm_exits.guest_ip) AS guest_ip_hex,
    vm_exits.reason,
    vm_exits.reason_source
FROM vm_exits
INNER JOIN machines ON machines.id = vm_exits.machine_id
INNER JOIN threads ON threads.id = vm_exits.thread_id;

-- Host and guest events in one host-time line (what trace-cmd's merged host/guest report
-- shows): every sample and every context switch with its machine, VCPU, cpu and thread.
-- Switches show the thread switched in (kind 'switch in') or out ('switch out').
-- ORDER BY time, cpu to read it as one timeline.
CREATE VIEW timeline_view AS
SELECT
    samples.time,
    samples.cpu,
    samples.machine_id,
    samples.machine_pid,
    samples.vcpu,
    samples.thread_id,
    threads.pid,
    threads.tid,
    comms.comm AS command,
    'sample' AS source,
    samples.id AS source_id,
    selected_events.name AS event,
    branch_types.name AS kind,
    samples.ip,
    samples.to_ip,
    samples.symbol_id,
    samples.to_symbol_id
FROM samples
INNER JOIN threads ON threads.id = samples.thread_id
INNER JOIN comms ON comms.id = samples.comm_id
INNER JOIN selected_events ON selected_events.id = samples.evsel_id
LEFT JOIN branch_types ON branch_types.id = samples.branch_type
WHERE samples.id > 0
UNION ALL
SELECT
    context_switches.time,
    context_switches.cpu,
    context_switches.machine_id,
    machines.pid AS machine_pid,
    context_switches.vcpu,
    CASE WHEN context_switches.flags = 0 THEN context_switches.thread_in_id ELSE context_switches.thread_out_id END,
    threads.pid,
    threads.tid,
    comms.comm,
    'switch' AS source,
    context_switches.id,
    'context switch' AS event,
    CASE WHEN context_switches.flags = 0 THEN 'switch in' WHEN context_switches.flags = 3 THEN 'switch out preempt'
         ELSE 'switch out' END,
    0,
    0,
    0,
    0
FROM context_switches
INNER JOIN machines ON machines.id = context_switches.machine_id
INNER JOIN threads ON threads.id = CASE WHEN context_switches.flags = 0 THEN context_switches.thread_in_id ELSE context_switches.thread_out_id END
INNER JOIN comms ON comms.id = CASE WHEN context_switches.flags = 0 THEN context_switches.comm_in_id ELSE context_switches.comm_out_id END;

CREATE VIEW decode_errors_view AS
SELECT
    decode_errors.id,
    decode_errors.time,
    decode_errors.cpu,
    decode_errors.segment,
    to_hex(decode_errors."offset") AS offset_hex,
    decode_errors.kind,
    decode_errors.message,
    to_hex(decode_errors.ip) AS ip_hex,
    threads.pid,
    threads.tid
FROM decode_errors
LEFT JOIN threads ON threads.id = decode_errors.thread_id;

CREATE VIEW psb_view AS
SELECT
    psb.id,
    time,
    cpu,
    to_hex(psb."offset") AS offset_hex
FROM psb
INNER JOIN samples ON samples.id = psb.id;

CREATE VIEW evt_view AS
SELECT
    evt.id,
    time,
    cpu,
    CASE WHEN evt.type=1 THEN 'INTR' WHEN evt.type=2 THEN 'IRET' WHEN evt.type=3 THEN 'SMI'
         WHEN evt.type=4 THEN 'RSM' WHEN evt.type=5 THEN 'SIPI' WHEN evt.type=6 THEN 'INIT'
         WHEN evt.type=7 THEN 'VMENTRY' WHEN evt.type=8 THEN 'VMEXIT' WHEN evt.type=9 THEN 'VMEXIT_INTR'
         WHEN evt.type=10 THEN 'SHUTDOWN' ELSE CAST(evt.type AS VARCHAR(11)) END AS type,
    vector,
    ip_flag,
    evd_count
FROM evt
INNER JOIN samples ON samples.id = evt.id;

CREATE VIEW iflag_view AS
SELECT
    iflag.id,
    time,
    cpu,
    CASE WHEN iflag=FALSE THEN 'cleared' ELSE 'set' END AS iflag,
    CASE WHEN via_branch=FALSE THEN 'False' ELSE 'True' END AS via_branch
FROM iflag
INNER JOIN samples ON samples.id = iflag.id;

-- ---------------------------------------------------------------- indexes (created after loading)

-- perf's two (same names, so perf's databases and ours agree); pcpid_idx serves the
-- call graph (children of a call path), pid_idx the call tree (children of a call):
CREATE INDEX pcpid_idx ON calls (parent_call_path_id);
CREATE INDEX pid_idx ON calls (parent_id);
-- call_paths children and the (parent, symbol, ip) key
CREATE INDEX call_paths_parent_idx ON call_paths (parent_id, symbol_id, ip);
-- comm -> threads (viewer level 1)
CREATE INDEX comm_threads_comm_idx ON comm_threads (comm_id, thread_id);
-- context switches per cpu in time order (time chart)
CREATE INDEX context_switches_cpu_time_idx ON context_switches (cpu, time);
-- VM exits per reason and per VCPU thread
CREATE INDEX vm_exits_reason_idx ON vm_exits (reason);
