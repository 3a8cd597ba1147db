"""The indexes of schema.sql: call graph, call tree and time-range queries."""


def migrate(db):
    tables = db.tables()
    for name, sql in db.schema.index_sql.items():
        if db.schema.index_table[name] in tables:
            db.execute(sql.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1))
