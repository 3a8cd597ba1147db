"""Export: schema, ids, SQLite, PostgreSQL, DuckDB and Parquet writers.

Public API::

    from ptexport.writers import open_writer, ExportModel, branch_type_name

    model = ExportModel()                      # ids for machines, threads, comms, dsos, symbols, call paths
    with open_writer("trace.db", force=False) as w:   # or "postgresql://user@host/dbname", "trace.duckdb",
                                                       # "parquet:DIR"
        host = model.machine(-1)
        ...
        model.flush(w)                         # new small-table rows
        w.write_samples({"id": ids, "time": t, "ip": ip, ...})   # numpy columns, ids increasing
        w.write_calls({...}); w.write_columns("decode_errors", {...})
    # complete and renamed into place here; on an exception or Ctrl-C nothing is left

``ptexport/schema.sql`` is the schema (a superset of perf's export scripts);
:mod:`ptexport.writers.migrate` upgrades older and perf-made databases.

The factory (:func:`open_writer`) and ``ptexport clean``'s dispatch (:func:`clean`) live here,
above the writers they pick; each module of the package imports only modules below it (from the
bottom: targets, schema, verify; migrate; base; leftovers; the SQLite, PostgreSQL and DuckDB writers;
the Parquet writer, which stages in DuckDB; source, a database read back; convert, which reads a
database into any writer; perfetto, which reads one into a Perfetto trace).
See docs/architecture.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ptexport.errors import UsageError
from ptexport.writers.base import Writer
from ptexport.writers.branch_types import PERF_BRANCH_TYPES, branch_type_name, branch_type_rows
from ptexport.writers.leftovers import CleanReport, clean_sqlite
from ptexport.writers.model import ExportModel, IdTable
from ptexport.writers.targets import is_postgres_target, target_kind, target_path

__all__ = ["ExportModel", "IdTable", "PERF_BRANCH_TYPES", "Writer", "branch_type_name", "branch_type_rows",
           "clean", "open_writer"]

# The SQLite writer needs numba (~0.8 s to import), the PostgreSQL one psycopg (~0.6 s), the DuckDB and
# Parquet ones duckdb and pyarrow (~0.5 s): each is imported when a target of its kind is opened, not
# with the package.


def open_writer(target: str | os.PathLike[str], *, force: bool = False, **options: Any) -> Writer:
    """A writer for ``target``: a SQLite file path, a ``postgresql://`` URL, a DuckDB file
    (``NAME.duckdb``, ``NAME.ddb``, ``duckdb:PATH``) or a Parquet directory (``parquet:DIR``).

    Raises :class:`~ptexport.errors.DatabaseExistsError` if the target exists
    and ``force`` is false (checked before anything is written).
    """
    target = os.fspath(target)
    if not target_path(target):
        raise UsageError("no database given")
    kind = target_kind(target)
    if kind == "postgresql":
        from ptexport.writers.postgres import PostgresWriter  # psycopg: see above

        return PostgresWriter(target, force=force, **options)
    if kind == "duckdb":
        from ptexport.writers.duckdb import DuckdbWriter  # duckdb, pyarrow: see above

        return DuckdbWriter(target, force=force, **options)
    if kind == "parquet":
        from ptexport.writers.parquet import ParquetWriter  # duckdb, pyarrow: see above

        return ParquetWriter(target, force=force, **options)
    from ptexport.writers.sqlite import SqliteWriter  # numba: see above

    return SqliteWriter(target, force=force, **options)


def clean(target: str, dry_run: bool = False) -> CleanReport:
    """``ptexport clean``: stale temporaries of a directory, a SQLite target or a PostgreSQL URL."""
    if is_postgres_target(target):
        from ptexport.writers.postgres import clean_postgres  # psycopg: see above

        return clean_postgres(target, dry_run)
    return clean_sqlite(Path(target_path(target)), dry_run, as_target=target_kind(target) == "parquet")
