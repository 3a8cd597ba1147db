"""perf's tables and views that perf dropped (empty) or was not asked for, and comms.has_calls."""

PERF_TABLES = ("selected_events", "machines", "threads", "comms", "comm_threads", "dsos", "symbols",
               "branch_types", "samples", "call_paths", "calls", "ptwrite", "cbr", "mwait", "pwre",
               "exstop", "pwrx", "context_switches")
PERF_VIEWS = ("machines_view", "dsos_view", "symbols_view", "threads_view", "comm_threads_view",
              "call_paths_view", "calls_view", "samples_view", "ptwrite_view", "cbr_view", "mwait_view",
              "pwre_view", "exstop_view", "pwrx_view", "power_events_view", "context_switches_view")
ZERO_ROWS = {"call_paths": (0, 0, 0, 0), "calls": (0,) * 14}


def migrate(db):
    have = db.tables()
    for t in PERF_TABLES:
        if t not in have:
            db.create_table(t)
            if t in ZERO_ROWS:
                row = ZERO_ROWS[t]
                db.execute(f"INSERT INTO {t} VALUES ({', '.join('?' * len(row))})", row)
    if db.add_column("comms", "has_calls"):
        true = "TRUE" if db.dialect == "postgresql" else "1"
        db.execute(f"UPDATE comms SET has_calls = {true} WHERE id IN (SELECT DISTINCT comm_id FROM calls)")
    db.create_missing_views(PERF_VIEWS)
