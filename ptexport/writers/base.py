"""The writer interface (:func:`ptexport.writers.open_writer` picks the writer of a target).

A writer is a context manager.  It writes into a temporary SQLite file (or
a temporary PostgreSQL database) and only when the ``with`` block ends
without an exception does it finish the database (branch_types, has_calls,
primary keys, indexes, the ``schema_version`` row) and atomically rename it
to the target.  On an exception or Ctrl-C the temporary is removed, so the
target is either absent/unchanged or complete.

Rows go in two shapes:

* ``write_rows(table, rows)``: tuples in the table's column order, for the
  small tables (machines, threads, comms, dsos, symbols...);
* ``write_columns(table, {column: ndarray})``: columnar batches for the big
  ones (samples, calls, call_paths, context_switches, power/ptwrite/event
  payloads).  ``id`` is required; missing columns take their default (0,
  ``-1`` for ``samples.vcpu``/``machine_pid``, ``''`` for text).

``write_samples``/``write_calls``/``write_call_paths`` are shorthands.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ptexport import __version__
from ptexport.errors import ExportError
from ptexport.writers._blocks import block_extents
from ptexport.writers.branch_types import branch_type_rows
from ptexport.writers.migrate import load_migrations
from ptexport.writers.schema import SCHEMA_VERSION, Schema, load_schema, utc_now

#: Defaults of columns a batch leaves out (others: 0, text '').
COLUMN_DEFAULTS: dict[tuple[str, str], Any] = {
    ("samples", "vcpu"): -1,
    ("samples", "machine_pid"): -1,
    ("samples", "cpu"): -1,
    ("decode_errors", "cpu"): -1,
    ("stats", "cpu"): -1,
    ("evt", "vector"): -1,
}

#: Rows per block of the *_time_blocks zone maps: block = id >> TIME_BLOCK_SHIFT.
TIME_BLOCK_SHIFT = 10
#: Each table's list is (A, min), (A, max) and, for calls, (B, max): the shape
#: ``_blocks.block_extents`` computes.
TIME_BLOCK_COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "samples": [("time", np.minimum), ("time", np.maximum)],
    "calls": [("call_time", np.minimum), ("call_time", np.maximum), ("return_time", np.maximum)],
}

#: perf's id-0 "unknown" rows (and ours), written when a database is created.
UNKNOWN_ROWS: dict[str, tuple[Any, ...]] = {
    "selected_events": (0, "unknown"),
    "machines": (0, 0, "unknown"),
    "threads": (0, 0, 0, -1, -1),
    "comms": (0, "unknown", 0, 0, False, None),
    "dsos": (0, 0, "unknown", "unknown", ""),
    "symbols": (0, 0, 0, 0, 0, "unknown"),
    "samples": (0,) * 21 + (-1, 0),
    "call_paths": (0, 0, 0, 0),
    "calls": (0,) * 14,
    "vcpus": (0, 0, -1, 0, 0, 0, 0, "none"),
}


def _signed(v: Any) -> Any:
    """Unsigned 64-bit values (addresses) in two's complement, as perf stores them."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0x7FFFFFFFFFFFFFFF:
        return int(v) - (1 << 64)
    return v


#: Exports of this process that have put (or are, in one atomic step, putting) their database in
#: place at its target: the CLI, seeing it grow during a run, lets a signal that comes after (while
#: the SQLite writer releases its lock, the PostgreSQL one drops the database it replaced) end
#: nothing, the run having succeeded.
_placed = 0


def databases_placed() -> int:
    """How many exports of this process have put their database in place at the target."""
    return _placed


#: A stop (SIGINT, SIGTERM, SIGHUP: the CLI's KeyboardInterrupt) raised where Python swallowed it: in
#: a weakref callback or a ``__del__`` that the collector ran, it only printed "Exception ignored", and
#: the run went on.  Raised again by :func:`_mark_placed`: the database is not put in place.
_lost_stop: BaseException | None = None


def stop_lost(exc: BaseException | None) -> None:
    """Record a stop that was raised where Python swallowed it (None: forget it)."""
    global _lost_stop
    _lost_stop = exc


def _mark_placed() -> None:
    """Called by a writer right before the atomic step (a rename, a commit) that puts its database in
    place; raises a stop that was swallowed on its way (:func:`stop_lost`) instead."""
    global _placed, _lost_stop
    if _lost_stop is not None:
        exc, _lost_stop = _lost_stop, None
        raise exc
    _placed += 1


def is_text_type(sql_type: str) -> bool:
    return sql_type.startswith("varchar") or sql_type == "text"



def _int_matrix(rows: list, ncol: int) -> np.ndarray | None:
    """``rows`` as an int64 matrix (uint64 values in two's complement) when every row has ``ncol``
    integer (or bool) values; else None."""
    try:
        mat = np.array(rows)
    except (ValueError, OverflowError, TypeError):
        return None
    if mat.ndim != 2 or mat.shape[1] != ncol or mat.dtype.kind not in "iu" or mat.dtype.itemsize != 8:
        return None
    return mat.view(np.int64) if mat.dtype.kind == "u" else mat


def distinct(v: np.ndarray) -> np.ndarray:
    """``np.unique(v)`` of an int64 array, by counting when the values are small non-negative ints."""
    if v.size and 0 <= int(v.min()) and int(v.max()) < 1 << 16:
        return np.flatnonzero(np.bincount(v))
    return np.unique(v)

class Writer:
    """Base of :class:`SqliteWriter` and :class:`PostgresWriter` (same rows either way)."""

    dialect = ""
    target = ""

    def __init__(self) -> None:
        self.schema: Schema = load_schema(self.dialect)
        self.branch_type_values: set[int] = set()
        self.row_counts: dict[str, int] = {}
        self._finished = False
        self._time_blocks: dict[str, dict[int, list[int]]] = {t: {} for t in TIME_BLOCK_COLUMNS}

    # ------------------------------------------------------------ public API
    def columns(self, table: str) -> list[str]:
        return self.schema.columns(table)

    def write_rows(self, table: str, rows: Iterable[tuple[Any, ...]]) -> None:
        rows = rows if isinstance(rows, list) else list(rows)
        if len(rows) >= 256 and self.dialect == "sqlite" and table not in TIME_BLOCK_COLUMNS and table != "samples":
            # many all-integer rows of full width (payload tables): as columns, without a Python
            # conversion per value (the same values: uint64 as two's complement, bools as 0/1)
            names = self.schema.columns(table)
            mat = _int_matrix(rows, len(names))
            if mat is not None and names[0] == "id":
                self.write_columns(table, {c: mat[:, j] for j, c in enumerate(names)})
                return
        rows = [tuple(_signed(v) for v in r) for r in rows]
        if not rows:
            return
        cols = self.schema.tables[table]
        ncol = len(cols)
        short = min(len(r) for r in rows)
        if short < ncol and all(c.default is not None for c in cols[short:]):
            # trailing columns with a DEFAULT (ptexport's additions to perf's tables) may be left out
            rows = [r + tuple(c.default for c in cols[len(r):]) for r in rows]
        for r in rows:
            if len(r) != ncol:
                raise ValueError(f"{table}: row has {len(r)} values, the table has {ncol} columns")
        if table == "samples":
            self.branch_type_values.update(int(r[15]) for r in rows)
        self._insert_rows(table, rows)
        self.row_counts[table] = self.row_counts.get(table, 0) + len(rows)

    def write_columns(self, table: str, cols: Mapping[str, Any]) -> None:
        if "id" not in cols:
            raise ValueError(f"{table}: a column batch needs 'id'")
        n = len(cols["id"])
        if n == 0:
            return
        unknown = set(cols) - set(self.schema.columns(table))
        if unknown:
            raise ValueError(f"{table}: no column(s) {', '.join(sorted(unknown))}")
        full: dict[str, Any] = {}
        for c in self.schema.tables[table]:
            v = cols.get(c.name)
            if v is None:
                default = COLUMN_DEFAULTS.get((table, c.name), "" if is_text_type(c.type) else 0)
                full[c.name] = default  # scalar: broadcast by the writer
            else:
                if len(v) != n:
                    raise ValueError(f"{table}.{c.name}: {len(v)} values, id has {n}")
                full[c.name] = v
        if table in TIME_BLOCK_COLUMNS:
            self._note_time_blocks(table, full, n)
        if table == "samples":
            # the column, or its default (a scalar, broadcast by the writer) as one value
            bt = np.asarray(full["branch_type"], dtype=np.int64).reshape(-1)
            self.branch_type_values.update(distinct(bt).tolist())
        self._insert_columns(table, full, n)
        self.row_counts[table] = self.row_counts.get(table, 0) + n

    def write_samples(self, cols: Mapping[str, Any]) -> None:
        self.write_columns("samples", cols)

    def write_calls(self, cols: Mapping[str, Any]) -> None:
        self.write_columns("calls", cols)

    def write_call_paths(self, cols: Mapping[str, Any]) -> None:
        self.write_columns("call_paths", cols)

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.finish()
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()

    def finish(self) -> None:
        """Complete the database and move it to the target (called by ``__exit__``)."""
        if self._finished:
            return
        self._insert_rows("branch_types", branch_type_rows(self.branch_type_values))
        for table, blocks in self._time_blocks.items():
            rows = [(b, *blocks[b]) for b in sorted(blocks)]
            if rows:
                self._insert_rows(f"{table}_time_blocks", rows)
        self._finish_database()
        self._finished = True

    def abort(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _note_time_blocks(self, table: str, cols: dict[str, Any], n: int) -> None:
        """Keep each block's (id >> 10) min/max of the time columns (the *_time_blocks tables)."""
        ids = np.asarray(cols["id"], dtype=np.int64)
        spec = TIME_BLOCK_COLUMNS[table]
        a, b = spec[0][0], spec[-1][0]  # min and max of a, then (calls) max of b
        va, vb = cols[a], cols[b]
        if not (np.isscalar(va) or np.isscalar(vb)):
            found = block_extents(np.ascontiguousarray(ids), np.ascontiguousarray(va, dtype=np.int64),
                                      np.ascontiguousarray(vb, dtype=np.int64), TIME_BLOCK_SHIFT)
            if found is not None:
                self._merge_time_blocks(table, found[0].tolist(), found[1][:, :len(spec)].tolist())
                return
        keep: Any = ids > 0  # not the id-0 "unknown" row
        if keep.all():
            keep = slice(None)
        blocks = ids[keep] >> TIME_BLOCK_SHIFT
        if blocks.size == 0:
            return
        order = None if np.all(blocks[1:] >= blocks[:-1]) else np.argsort(blocks, kind="stable")
        if order is not None:
            blocks = blocks[order]
        # first position of each block (= np.unique(blocks, return_index=True) of the sorted blocks)
        start = np.flatnonzero(np.concatenate(([True], blocks[1:] != blocks[:-1])))
        uniq = blocks[start]
        stats = []
        for name, func in TIME_BLOCK_COLUMNS[table]:
            v = cols[name]
            v = np.full(n, v, dtype=np.int64) if np.isscalar(v) else np.asarray(v, dtype=np.int64)
            v = v[keep] if order is None else v[keep][order]
            stats.append((func.reduceat(v, start), func))
        self._merge_time_blocks(table, uniq.tolist(), [[int(s[0][i]) for s in stats] for i in range(len(uniq))])

    def _merge_time_blocks(self, table: str, blocks: list[int], values: list[list[int]]) -> None:
        """Fold a batch's per-block statistics (in TIME_BLOCK_COLUMNS' order) into the table's."""
        have = self._time_blocks[table]
        funcs = [min if f is np.minimum else max for _, f in TIME_BLOCK_COLUMNS[table]]
        for blk, new in zip(blocks, values):
            old = have.get(blk)
            if old is None:
                have[blk] = new
            else:
                have[blk] = [f(o, x) for o, x, f in zip(old, new, funcs)]

    # ------------------------------------------------------------ helpers for subclasses
    def _write_unknown_rows(self) -> None:
        for table, row in UNKNOWN_ROWS.items():
            self._insert_rows(table, [row])

    def _migration_rows(self) -> list[tuple[str, str]]:
        """A fresh database is current: every known migration is recorded as applied."""
        try:
            return [(m.name, utc_now()) for m in load_migrations()]
        except ExportError:  # migrations not shipped with this install
            return []

    def _version_row(self) -> tuple[Any, ...]:
        return (SCHEMA_VERSION, f"ptexport {__version__}", utc_now())

    def _insert_rows(self, table: str, rows: list[tuple[Any, ...]]) -> None:  # pragma: no cover
        raise NotImplementedError

    def _insert_columns(self, table: str, cols: dict[str, Any], n: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def _finish_database(self) -> None:  # pragma: no cover
        raise NotImplementedError
