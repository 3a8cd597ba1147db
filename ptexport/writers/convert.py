"""``ptexport convert DB OUT``: an existing export (SQLite, PostgreSQL or DuckDB) written again into
another target (typically DuckDB or Parquet), with the rows it holds.

The source must have the current schema (``ptexport upgrade DB`` brings a perf-made or older one
there).  Every table is read in id order in chunks of :data:`CHUNK_ROWS` rows, turned into
columns (numpy where a column has no NULL) and handed to the target's writer
(:func:`ptexport.writers.open_writer`) as an export hands its batches, so the target's rules hold:
a temporary renamed into place when complete, nothing left on an error or Ctrl-C, ``force`` to
replace.  What the writer derives from the rows is not read but made again, the same way as by
an export: the id-0 "unknown" rows, ``branch_types``, the ``*_time_blocks`` zone maps,
``comms.has_calls``, ``schema_version`` and ``ptexport_migrations`` (the target is a new database).
``cbr.mhz``/``percent`` that a SQLite export holds as REAL (export-to-sqlite.py's 2000.5) become
the integers export-to-postgresql.py writes (2000) in a DuckDB or PostgreSQL target.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ptexport.errors import ExportError, UsageError

# the factory, in the package's __init__ (which does not import this module)
from ptexport.writers import open_writer
from ptexport.writers.aggregates import AGGREGATE_TABLES, aggregate_sql
from ptexport.writers.base import TIME_BLOCK_COLUMNS, UNKNOWN_ROWS, Writer
from ptexport.writers.schema import SCHEMA_VERSION, load_schema
from ptexport.writers.source import CHUNK_ROWS, DbSource  # noqa: F401 - CHUNK_ROWS: the docstring's, as before
from ptexport.writers.targets import target_path

#: Tables the writer makes itself from the rows of the others (and a new database's own rows).
DERIVED = {"branch_types", "schema_version", "ptexport_migrations", *(f"{t}_time_blocks" for t in TIME_BLOCK_COLUMNS)}


@dataclass
class ConvertSummary:
    target: str
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _columns(rows: list[tuple[Any, ...]], cols: list[str], types: list[str]) -> dict[str, Any]:
    """Rows as columns: numpy arrays for integer columns without NULLs, lists otherwise."""
    out: dict[str, Any] = {}
    for name, typ, values in zip(cols, types, zip(*rows)):
        if typ in ("bigint", "integer", "boolean") and None not in values:
            a = np.asarray(values)
            if a.dtype.kind in "iufb":
                out[name] = a
                continue
        out[name] = list(values)
    return out


def convert(source: str, target: str, *, force: bool = False,
            progress: Callable[[str, int], None] | None = None) -> ConvertSummary:
    """Write the export at ``source`` into ``target`` (any target :func:`open_writer` takes).
    ``progress(table, rows so far)`` is called after each chunk."""
    t0 = time.perf_counter()
    if os.path.abspath(target_path(source)) == os.path.abspath(target_path(target)):
        raise UsageError(f"{source}: the source and the target are the same")
    src = DbSource(source, reader="convert")
    try:
        version = src.version()
        if version != SCHEMA_VERSION:
            raise ExportError(f"{source}: schema version {version}, this ptexport writes {SCHEMA_VERSION}: "
                              f"run `ptexport upgrade {source}` first")
        have = src.tables()
        summary = ConvertSummary(target)
        with open_writer(target, force=force) as w:
            summary.target = getattr(w, "target", target)
            for table, cdefs in load_schema("sqlite").tables.items():
                if table in DERIVED:
                    continue
                if table not in have and table in AGGREGATE_TABLES:
                    # a source exported before the aggregates (a DuckDB file cannot be upgraded): computed
                    # from its calls and samples, as `ptexport upgrade` does
                    rows = src.query_rows(aggregate_sql(table, from_calls=True))
                    if rows:
                        w.write_columns(table, _columns(rows, [c.name for c in cdefs], [c.type for c in cdefs]))
                    continue
                if table not in have:
                    raise ExportError(f"{source}: no table {table}: run `ptexport upgrade {source}` first")
                _copy_table(src, w, table, [c.name for c in cdefs], [c.type for c in cdefs], progress)
            summary.rows = {t: n for t, n in w.row_counts.items() if n and t not in DERIVED}
    finally:
        src.close()
    summary.seconds = time.perf_counter() - t0
    return summary


def _copy_table(src: DbSource, w: Writer, table: str, cols: list[str], types: list[str],
                progress: Callable[[str, int], None] | None) -> None:
    n = 0
    # the writer wrote the id-0 "unknown" rows when it opened; a source's are the same rows
    for rows in src.chunks(table, cols, skip_unknown=table in UNKNOWN_ROWS):
        w.write_columns(table, _columns(rows, cols, types))
        n += len(rows)
        if progress is not None:
            progress(table, n)
