"""Export: schema, ids, SQLite and PostgreSQL writers."""
