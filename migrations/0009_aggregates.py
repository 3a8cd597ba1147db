"""The aggregates call_path_stats, symbol_stats, sample_stats and cpu_time_stats, from calls and samples.

An export computes them as it goes (self time from the call tree); for an older database they are the
same GROUP BYs over perf's tables, written here as SQL that SQLite and PostgreSQL both run.  A table
that exists is left as it is (filled by an export or an earlier upgrade).
"""

BUCKET_NS = 1000000  # cpu_time_stats: 1 ms buckets (ptexport.dbexport.exporter.CPU_TIME_BUCKET_NS)


def call_path_stats_sql(insn: str = "c.insn_count", cyc: str = "c.cyc_count") -> str:
    """The call_path_stats rows from calls: self time = duration - the durations of the calls whose
    parent_id is the call."""
    return f"""
WITH child AS (
    SELECT parent_id, SUM(return_time - call_time) AS ns
    FROM calls WHERE parent_id > 0 GROUP BY parent_id
),
g AS (
    SELECT c.thread_id, c.call_path_id, COUNT(*) AS calls,
           SUM(c.return_time - c.call_time) AS total_ns,
           SUM(c.return_time - c.call_time - COALESCE(child.ns, 0)) AS self_ns,
           MIN(c.return_time - c.call_time) AS min_ns,
           MAX(c.return_time - c.call_time) AS max_ns,
           SUM(c.branch_count) AS branch_count, SUM({insn}) AS insn_count, SUM({cyc}) AS cyc_count
    FROM calls c LEFT JOIN child ON child.parent_id = c.id
    WHERE c.id > 0
    GROUP BY c.thread_id, c.call_path_id
)
SELECT ROW_NUMBER() OVER (ORDER BY thread_id, call_path_id), thread_id, call_path_id, calls, total_ns, self_ns,
       min_ns, max_ns, branch_count, insn_count, cyc_count
FROM g"""


SYMBOL_STATS_SQL = """
WITH g AS (
    SELECT p.symbol_id, SUM(st.calls) AS calls, SUM(st.total_ns) AS total_ns, SUM(st.self_ns) AS self_ns,
           MIN(st.min_ns) AS min_ns, MAX(st.max_ns) AS max_ns, SUM(st.branch_count) AS branch_count,
           SUM(st.insn_count) AS insn_count, SUM(st.cyc_count) AS cyc_count
    FROM call_path_stats st JOIN call_paths p ON p.id = st.call_path_id
    GROUP BY p.symbol_id
)
SELECT ROW_NUMBER() OVER (ORDER BY symbol_id), symbol_id, calls, total_ns, self_ns, min_ns, max_ns,
       branch_count, insn_count, cyc_count
FROM g"""


def cpu_time_stats_sql(insn: str = "insn_count", cyc: str = "cyc_count") -> str:
    """The cpu_time_stats rows from samples (integer division: SQLite and PostgreSQL; no '%', which psycopg
    would take for a placeholder)."""
    return f"""
WITH g AS (
    SELECT cpu, time / {BUCKET_NS} * {BUCKET_NS} AS bucket, COUNT(*) AS samples,
           SUM({insn}) AS insn_count, SUM({cyc}) AS cyc_count
    FROM samples WHERE id > 0
    GROUP BY cpu, time / {BUCKET_NS}
)
SELECT ROW_NUMBER() OVER (ORDER BY cpu, bucket), cpu, bucket, samples, insn_count, cyc_count
FROM g"""


def sample_stats_sql(insn: str = "insn_count", cyc: str = "cyc_count") -> str:
    """The sample_stats rows from samples."""
    return f"""
WITH g AS (
    SELECT thread_id, evsel_id, symbol_id, branch_type, COUNT(*) AS samples,
           SUM({insn}) AS insn_count, SUM({cyc}) AS cyc_count,
           SUM(CASE WHEN {cyc} > 0 THEN {insn} ELSE 0 END) AS cyc_insn_count
    FROM samples WHERE id > 0
    GROUP BY thread_id, evsel_id, symbol_id, branch_type
)
SELECT ROW_NUMBER() OVER (ORDER BY thread_id, evsel_id, symbol_id, branch_type), thread_id, evsel_id, symbol_id,
       branch_type, samples, insn_count, cyc_count, cyc_insn_count
FROM g"""


def migrate(db):
    have = db.tables()
    if "call_path_stats" not in have:
        db.create_table("call_path_stats")
        cols = db.columns("calls")
        db.execute("INSERT INTO call_path_stats " + call_path_stats_sql(
            "c.insn_count" if "insn_count" in cols else "0", "c.cyc_count" if "cyc_count" in cols else "0"))
    if "symbol_stats" not in have:
        db.create_table("symbol_stats")
        db.execute("INSERT INTO symbol_stats " + SYMBOL_STATS_SQL)
    cols = db.columns("samples")
    counts = ("insn_count" if "insn_count" in cols else "0", "cyc_count" if "cyc_count" in cols else "0")
    if "sample_stats" not in have:
        db.create_table("sample_stats")
        db.execute("INSERT INTO sample_stats " + sample_stats_sql(*counts))
    if "cpu_time_stats" not in have:
        db.create_table("cpu_time_stats")
        db.execute("INSERT INTO cpu_time_stats " + cpu_time_stats_sql(*counts))
