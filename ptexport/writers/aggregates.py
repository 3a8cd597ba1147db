"""The aggregate tables (call_path_stats, symbol_stats, sample_stats, cpu_time_stats) as SQL over perf's tables.

An export computes them as it goes (the call tree's self times, :mod:`ptexport.calltree.stats`); these
queries give the same rows from ``calls`` and ``samples`` in SQLite, PostgreSQL and DuckDB: what
``ptexport upgrade`` (migrations/0009_aggregates.py) and ``ptexport convert`` (a source without them)
write, and what the tests hold the export's rows equal to.  Each yields the table's columns in order.
"""

from __future__ import annotations

__all__ = ["AGGREGATE_TABLES", "BUCKET_NS", "SYMBOL_STATS_SQL", "aggregate_sql", "call_path_stats_sql",
           "cpu_time_stats_sql", "sample_stats_sql", "symbol_stats_from_calls_sql"]

#: The aggregate tables, in the order they are computed (symbol_stats reads call_path_stats).
AGGREGATE_TABLES = ("call_path_stats", "symbol_stats", "sample_stats", "cpu_time_stats")

BUCKET_NS = 1_000_000  # cpu_time_stats: 1 ms buckets of perf time (the export uses this constant too)


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
    """The cpu_time_stats rows from samples (``time - time % N``: DuckDB's ``/`` is not integer division)."""
    return f"""
WITH g AS (
    SELECT cpu, time - time % {BUCKET_NS} AS bucket, COUNT(*) AS samples,
           SUM({insn}) AS insn_count, SUM({cyc}) AS cyc_count
    FROM samples WHERE id > 0
    GROUP BY cpu, time - time % {BUCKET_NS}
)
SELECT ROW_NUMBER() OVER (ORDER BY cpu, bucket), cpu, bucket, samples, insn_count, cyc_count
FROM g"""


def symbol_stats_from_calls_sql(insn: str = "c.insn_count", cyc: str = "c.cyc_count") -> str:
    """The symbol_stats rows straight from calls (for a database without call_path_stats): the same sums."""
    return f"""
WITH child AS (
    SELECT parent_id, SUM(return_time - call_time) AS ns
    FROM calls WHERE parent_id > 0 GROUP BY parent_id
),
g AS (
    SELECT p.symbol_id, COUNT(*) AS calls,
           SUM(c.return_time - c.call_time) AS total_ns,
           SUM(c.return_time - c.call_time - COALESCE(child.ns, 0)) AS self_ns,
           MIN(c.return_time - c.call_time) AS min_ns,
           MAX(c.return_time - c.call_time) AS max_ns,
           SUM(c.branch_count) AS branch_count, SUM({insn}) AS insn_count, SUM({cyc}) AS cyc_count
    FROM calls c LEFT JOIN child ON child.parent_id = c.id
    JOIN call_paths p ON p.id = c.call_path_id
    WHERE c.id > 0
    GROUP BY p.symbol_id
)
SELECT ROW_NUMBER() OVER (ORDER BY symbol_id), symbol_id, calls, total_ns, self_ns, min_ns, max_ns,
       branch_count, insn_count, cyc_count
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


def aggregate_sql(table: str, calls_columns: list[str] | None = None, samples_columns: list[str] | None = None,
                  *, from_calls: bool = False) -> str:
    """The query of ``table``; a database whose ``calls`` / ``samples`` lack ``insn_count`` / ``cyc_count``
    (perf's older layout) counts 0 for them.  ``symbol_stats`` is grouped from ``call_path_stats`` unless
    ``from_calls`` (a database without that table)."""
    have = calls_columns
    insn = "c.insn_count" if have is None or "insn_count" in have else "0"
    cyc = "c.cyc_count" if have is None or "cyc_count" in have else "0"
    if table == "symbol_stats":
        return symbol_stats_from_calls_sql(insn, cyc) if from_calls else SYMBOL_STATS_SQL
    if table == "call_path_stats":
        return call_path_stats_sql(insn, cyc)
    have = samples_columns
    insn = "insn_count" if have is None or "insn_count" in have else "0"
    cyc = "cyc_count" if have is None or "cyc_count" in have else "0"
    if table == "sample_stats":
        return sample_stats_sql(insn, cyc)
    if table == "cpu_time_stats":
        return cpu_time_stats_sql(insn, cyc)
    raise KeyError(table)
