"""ptexport's extensions: samples.vcpu/machine_pid, vcpus, decode_errors, stats, event payload tables."""

TABLES = ("vcpus", "decode_errors", "stats", "psb", "evt", "evd", "iflag", "schema_version")
VIEWS = ("vcpus_view", "decode_errors_view", "psb_view", "evt_view", "iflag_view")


def migrate(db):
    db.add_column("samples", "vcpu", -1)
    if db.add_column("samples", "machine_pid", -1):
        db.execute("UPDATE samples SET machine_pid = (SELECT pid FROM machines WHERE machines.id = samples.machine_id)"
                   " WHERE machine_id IN (SELECT id FROM machines WHERE pid <> -1)")
    have = db.tables()
    for t in TABLES:
        if t not in have:
            db.create_table(t)
    if not db.execute("SELECT 1 FROM vcpus WHERE id = 0"):
        db.execute("INSERT INTO vcpus VALUES (0, 0, -1, 0, 0, 0, 0, 'none')")
    db.create_missing_views(VIEWS)
