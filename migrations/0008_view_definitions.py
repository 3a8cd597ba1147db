"""ptexport's views as the current schema defines them, in databases ptexport has written or upgraded.

Views hold no data, so an older definition is simply replaced: older ptexport versions wrote, for example,
calls_view / context_switches_view flags as text where perf's export-to-sqlite.py views give integers.
A database only perf wrote (no schema_version row yet) keeps perf's own views; the missing ones are
created by the earlier migrations.
"""


def migrate(db):
    if "schema_version" not in db.tables() or not db.execute("SELECT COUNT(*) FROM schema_version")[0][0]:
        return
    have = db.views()
    # dependents come later in schema.sql: drop in reverse order (no CASCADE: a user's own view on one of
    # ours makes PostgreSQL refuse, and the upgrade rolls back, rather than losing that view)
    for name in reversed(list(db.schema.view_sql)):
        if name in have:
            db.execute(f"DROP VIEW {name}")
    db.create_missing_views()
