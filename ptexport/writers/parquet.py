"""Parquet writer: a directory of Parquet files, one per table, samples partitioned by CPU.

``ptexport TRACE --parquet DIR`` writes::

    DIR/schema.json                       tables (perf's column order, types, docs), views, row counts
    DIR/samples/cpu=N/part-0.parquet      samples of cpu N (hive partitioning: no cpu column in the file)
    DIR/TABLE.parquet                     every other table of ptexport/schema.sql, empty ones included

Every file holds its rows in id order (so each samples file is in time order, and row groups'
min/max statistics of id and time prune ranges); Spark, Trino, DuckDB, polars and pyarrow read
the samples directory as one table with a ``cpu`` partition column.  :func:`open_parquet`
gives a DuckDB connection with a view per table (perf's columns in perf's order) and perf's
views over them, so SQL written for the database runs on the directory unchanged.

The rows are the DuckDB writer's (:mod:`ptexport.writers.duckdb`), staged in a DuckDB database
inside the temporary directory ``.DIR.ptexport-tmp-PID`` and copied out table by table at the
end (DuckDB's Parquet writer: zstd, row groups of 122 880 rows); the staging database is then
removed and the directory renamed to DIR (with ``--force``, exchanged with the previous DIR in
one ``renameat2(RENAME_EXCHANGE)``, the previous one then removed).  An interrupted export
leaves no DIR; a killed one leaves the temporary directory, which the next export to DIR or
``ptexport clean`` removes.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb

from ptexport import __version__
from ptexport.errors import DatabaseExistsError, ExportError
from ptexport.writers.base import _mark_placed
from ptexport.writers.duckdb import DuckdbWriter, arrow_type, fsync_path, sql_string
from ptexport.writers.schema import SCHEMA_VERSION, Schema, load_schema, utc_now

FORMAT = "ptexport-parquet"
#: Tables split into hive partitions, and by which column.
PARTITIONS = {"samples": "cpu"}
SCHEMA_FILE = "schema.json"
_STAGE = "_ptexport_stage.duckdb"


def table_location(table: str) -> str:
    """Where a table's rows are, relative to DIR: a file, or the directory of its partitions."""
    return table if table in PARTITIONS else f"{table}.parquet"


class ParquetWriter(DuckdbWriter):
    """``--parquet DIR`` (the target ``parquet:DIR``)."""

    kind = "directory"

    def _check_target(self) -> None:
        if os.path.lexists(self.path) and not self.force:
            raise DatabaseExistsError(f"{self.path} already exists (use --force to replace it)")

    def _database_path(self) -> Path:
        return self.tmp_path / _STAGE

    def _make_temporary(self) -> None:
        self.tmp_path.mkdir()

    def _complete(self) -> None:
        """The DuckDB writer's tables, copied out as Parquet files, schema.json; the staging database removed."""
        c = self.conn
        c.execute("SET enable_progress_bar = false")
        self._complete_tables()
        counts = {}
        for table, cols in self.schema.tables.items():
            counts[table] = int(c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            out = self.tmp_path / table_location(table)
            part = PARTITIONS.get(table)
            if part is None:
                c.execute(f"COPY {table} TO {sql_string(out)} (FORMAT parquet, COMPRESSION zstd)")
                continue
            # one COPY per value: DuckDB's PARTITION_BY does not keep the rows' order within a file
            rest = ", ".join(f'"{x.name}"' for x in cols if x.name != part)
            for (value,) in c.execute(f"SELECT DISTINCT {part} FROM {table} ORDER BY 1").fetchall():
                d = out / f"{part}={value}"
                d.mkdir(parents=True)
                c.execute(f"COPY (SELECT {rest} FROM {table} WHERE {part} = {int(value)}) "
                          f"TO {sql_string(d / 'part-0.parquet')} (FORMAT parquet, COMPRESSION zstd)")
        self._close()
        for p in self.tmp_path.iterdir():  # the staging database, its .wal, .stage and spill directory .tmp
            if p.name.startswith(_STAGE):
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
        (self.tmp_path / SCHEMA_FILE).write_text(json.dumps(schema_document(self.schema, counts), indent=1) + "\n",
                                                 encoding="utf-8")

    def _place(self) -> None:
        fsync_path(self.tmp_path)
        _mark_placed()  # one rename (or exchange): from here a signal stops nothing
        if os.path.lexists(self.path):  # --force: exchanged with the previous one, which then goes
            _exchange(self.tmp_path, self.path)
            if self.tmp_path.is_dir() and not self.tmp_path.is_symlink():
                shutil.rmtree(self.tmp_path, ignore_errors=True)
            else:
                self.tmp_path.unlink(missing_ok=True)
        else:
            os.rename(self.tmp_path, self.path)


def _exchange(a: Path, b: Path) -> None:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); where the file system cannot,
    ``b`` moves to ``a``'s place's name first and ``a`` to ``b`` (two renames)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        at_fdcwd, rename_exchange = -100, 2
        if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return
    aside = a.with_name(a.name + ".old")  # named as a temporary of this export: removed if we die here
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def schema_document(schema: Schema, counts: dict[str, int]) -> dict[str, Any]:
    """What schema.json says: every table's location, partitioning, rows and columns (perf's names and
    order, the SQL type, the Arrow type, the column's documentation), and perf's views in DuckDB's SQL."""
    tables = {}
    for table, cols in schema.tables.items():
        entry: dict[str, Any] = {"path": table_location(table), "rows": counts.get(table, 0)}
        if table in PARTITIONS:
            entry["partitioning"] = {"style": "hive", "columns": [PARTITIONS[table]]}
        entry["columns"] = [{"name": c.name, "type": c.type, "arrow": str(arrow_type(c.type)), "doc": c.doc}
                            for c in cols]
        tables[table] = entry
    return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "generator": f"ptexport {__version__}",
            "created": utc_now(), "tables": tables, "views": dict(schema.view_sql)}


def read_schema(directory: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(directory) / SCHEMA_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExportError(f"{directory}: not a ptexport Parquet directory: {e}") from e
    if doc.get("format") != FORMAT:
        raise ExportError(f"{directory}: not a ptexport Parquet directory ({SCHEMA_FILE} says {doc.get('format')!r})")
    return doc


def table_sql(directory: str | os.PathLike[str], table: str, entry: dict[str, Any]) -> str:
    """A SELECT of one table of a Parquet directory, its columns in perf's order and types."""
    loc = Path(directory) / entry["path"]
    names = ", ".join(f'CAST("{c["name"]}" AS {c["type"]}) AS "{c["name"]}"' for c in entry["columns"])
    part = entry.get("partitioning")
    if part:
        types = ", ".join(f"'{p}': {next(c['type'] for c in entry['columns'] if c['name'] == p)}"
                          for p in part["columns"])
        src = f"read_parquet({sql_string(f'{loc}/*/*.parquet')}, hive_partitioning = true, hive_types = {{{types}}})"
        return f"SELECT {names} FROM {src}"
    return f"SELECT {names} FROM read_parquet({sql_string(loc)})"


def open_parquet(directory: str | os.PathLike[str], conn: Any = None) -> Any:
    """A DuckDB connection (``conn``, or a new in-memory one) with a view per table of the Parquet
    directory and perf's views over them: the directory queried as the database."""
    doc = read_schema(directory)
    c = conn if conn is not None else duckdb.connect()
    c.execute("SET enable_progress_bar = false")
    for table, entry in doc["tables"].items():
        c.execute(f"CREATE OR REPLACE VIEW {table} AS {table_sql(directory, table, entry)}")
    sch = load_schema("duckdb")
    for sql in doc.get("views", sch.view_sql).values():
        c.execute(sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
    return c
