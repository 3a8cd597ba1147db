"""Virtual machines: context_switches.vcpu, the vm_exits table and the vm_exits_view / timeline_view views."""

VIEWS = ("vm_exits_view", "timeline_view")


def migrate(db):
    db.add_column("context_switches", "vcpu", -1)
    if "vm_exits" not in db.tables():
        db.create_table("vm_exits")
    name = "vm_exits_reason_idx"
    db.execute(db.schema.index_sql[name].replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1))
    db.create_missing_views(VIEWS)
