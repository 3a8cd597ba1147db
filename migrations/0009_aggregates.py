"""The aggregates call_path_stats, symbol_stats, sample_stats and cpu_time_stats, from calls and samples.

An export computes them as it goes (self time from the call tree); for an older database they are the
same GROUP BYs over perf's tables (ptexport/writers/aggregates.py).  A table that exists is left as it
is (filled by an export or an earlier upgrade).
"""

from ptexport.writers.aggregates import AGGREGATE_TABLES, aggregate_sql


def migrate(db):
    have = db.tables()
    calls = db.columns("calls") if "calls" in have else []
    samples = db.columns("samples")
    for table in AGGREGATE_TABLES:
        if table not in have:
            db.create_table(table)
            db.execute(f"INSERT INTO {table} " + aggregate_sql(table, calls, samples))
