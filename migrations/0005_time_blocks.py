"""The time-range zone maps samples_time_blocks and calls_time_blocks (1024 ids per block)."""


def migrate(db):
    have = db.tables()
    if "samples_time_blocks" not in have:
        db.create_table("samples_time_blocks")
        db.execute("INSERT INTO samples_time_blocks (id, min_time, max_time)"
                   " SELECT id / 1024, MIN(time), MAX(time) FROM samples WHERE id > 0 GROUP BY id / 1024")
    if "calls_time_blocks" not in have:
        db.create_table("calls_time_blocks")
        db.execute("INSERT INTO calls_time_blocks (id, min_call_time, max_call_time, max_return_time)"
                   " SELECT id / 1024, MIN(call_time), MAX(call_time), MAX(return_time)"
                   " FROM calls WHERE id > 0 GROUP BY id / 1024")
