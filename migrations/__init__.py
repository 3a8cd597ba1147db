"""ptexport schema migrations: NNNN_name.py modules, each with migrate(db) (see ptexport.writers.migrate)."""
