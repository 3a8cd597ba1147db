"""Export: schema, ids, SQLite and PostgreSQL writers.

Public API::

    from ptexport.writers import open_writer, ExportModel, branch_type_name

    model = ExportModel()                      # ids for machines, threads, comms, dsos, symbols, call paths
    with open_writer("trace.db", force=False) as w:   # or "postgresql://user@host/dbname"
        host = model.machine(-1)
        ...
        model.flush(w)                         # new small-table rows
        w.write_samples({"id": ids, "time": t, "ip": ip, ...})   # numpy columns, ids increasing
        w.write_calls({...}); w.write_columns("decode_errors", {...})
    # complete and renamed into place here; on an exception or Ctrl-C nothing is left

``ptexport/schema.sql`` is the schema (a superset of perf's export scripts);
:mod:`ptexport.writers.migrate` upgrades older and perf-made databases;
:mod:`ptexport.writers.fixture` writes a small database with known answers.
"""

from ptexport.writers.branch_types import PERF_BRANCH_TYPES, branch_type_name, branch_type_rows
from ptexport.writers.model import ExportModel, IdTable
from ptexport.writers.base import Writer, open_writer

__all__ = ["ExportModel", "IdTable", "PERF_BRANCH_TYPES", "Writer", "branch_type_name", "branch_type_rows",
           "open_writer"]
