"""A branch_types row for every samples.branch_type value (perf has none for e.g. VM exit 4131)."""

from ptexport.writers.branch_types import branch_type_name


def migrate(db):
    missing = db.execute("SELECT DISTINCT branch_type FROM samples"
                         " WHERE branch_type NOT IN (SELECT id FROM branch_types)")
    rows = [(int(v), branch_type_name(int(v))) for (v,) in missing if v is not None]
    if rows:
        db.executemany("INSERT INTO branch_types (id, name) VALUES (?, ?)", rows)
