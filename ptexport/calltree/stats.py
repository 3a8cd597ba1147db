"""Aggregates of the ``calls`` rows, kept as the call tree makes them (both twins use this module).

The call tree knows, when a call returns, the durations of the calls it made (they returned
before it): it hands each ``calls`` row over with its self time (duration minus the summed
durations of its direct callees, the calls whose ``parent_id`` is its id) and :class:`CallStats`
folds them, batch after batch in the order the rows are taken, into one row per (thread, call
path).  The per-symbol sums follow from those rows and the call paths' symbols
(:func:`symbol_stats`).  :class:`GroupStats` is the running group-by both use (and the export's
per-CPU time buckets): integer sums, minima and maxima per int64 key, exact (no floats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "CALL_PATH_STATS_COLUMNS",
    "SYMBOL_STATS_COLUMNS",
    "CallStats",
    "GroupStats",
    "symbol_stats",
]

#: ``call_path_stats`` columns (schema.sql), in order.
CALL_PATH_STATS_COLUMNS = ("id", "thread_id", "call_path_id", "calls", "total_ns", "self_ns", "min_ns", "max_ns",
                           "branch_count", "insn_count", "cyc_count")
#: ``symbol_stats`` columns (schema.sql), in order.
SYMBOL_STATS_COLUMNS = ("id", "symbol_id", "calls", "total_ns", "self_ns", "min_ns", "max_ns",
                        "branch_count", "insn_count", "cyc_count")

_SUMS = ("total_ns", "self_ns", "branch_count", "insn_count", "cyc_count")


class GroupStats:
    """Running ``COUNT(*)``, ``SUM``, ``MIN`` and ``MAX`` of int64 columns grouped by an int64 key.

    :meth:`add` folds one batch (sorted once, reduced with ``reduceat``, merged into the running
    groups by binary search); :meth:`result` gives the groups in key order.
    """

    def __init__(self, sums: Sequence[str] = (), mins: Sequence[str] = (), maxs: Sequence[str] = (),
                 count: str = "count") -> None:
        self.sums, self.mins, self.maxs, self.count = tuple(sums), tuple(mins), tuple(maxs), count
        self.keys = np.zeros(0, dtype=np.int64)
        self.cols: dict[str, np.ndarray] = {name: np.zeros(0, dtype=np.int64)
                                            for name in (count, *self.sums, *self.mins, *self.maxs)}

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, keys: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Fold rows: ``keys`` (int64) and one int64 array per summed / min / max column."""
        n = len(keys)
        if n == 0:
            return
        order = np.argsort(keys, kind="stable")
        k = keys[order]
        start = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        uniq = k[start]
        part = {self.count: np.diff(np.append(start, n)).astype(np.int64)}
        for name in self.sums:
            part[name] = np.add.reduceat(np.asarray(values[name], dtype=np.int64)[order], start)
        for name in self.mins:
            part[name] = np.minimum.reduceat(np.asarray(values[name], dtype=np.int64)[order], start)
        for name in self.maxs:
            part[name] = np.maximum.reduceat(np.asarray(values[name], dtype=np.int64)[order], start)
        pos = np.searchsorted(self.keys, uniq)
        found = pos < len(self.keys)
        found[found] = self.keys[pos[found]] == uniq[found]
        at = pos[found]
        if len(at):
            for name in (self.count, *self.sums):
                self.cols[name][at] += part[name][found]
            for name in self.mins:
                self.cols[name][at] = np.minimum(self.cols[name][at], part[name][found])
            for name in self.maxs:
                self.cols[name][at] = np.maximum(self.cols[name][at], part[name][found])
        new = ~found
        if new.any():
            keys_all = np.concatenate([self.keys, uniq[new]])
            o = np.argsort(keys_all, kind="stable")
            self.keys = keys_all[o]
            for name, col in self.cols.items():
                self.cols[name] = np.concatenate([col, part[name][new]])[o]

    def result(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The keys (ascending) and the columns of their groups."""
        return self.keys.copy(), {name: col.copy() for name, col in self.cols.items()}


class CallStats:
    """``call_path_stats`` rows of the ``calls`` rows given to :meth:`add`: one per (thread, call path)."""

    def __init__(self) -> None:
        self.groups = GroupStats(sums=_SUMS, mins=("min_ns",), maxs=("max_ns",), count="calls")

    def add(self, calls: Mapping[str, np.ndarray], self_ns: np.ndarray) -> None:
        """Fold ``calls`` rows (the columns of ``CALLS_COLUMNS``) with each call's self time."""
        if not len(calls["id"]):
            return
        dur = np.asarray(calls["return_time"], dtype=np.int64) - np.asarray(calls["call_time"], dtype=np.int64)
        key = (np.asarray(calls["thread_id"], dtype=np.int64) << 32) | np.asarray(calls["call_path_id"],
                                                                                  dtype=np.int64)
        self.groups.add(key, {"total_ns": dur, "self_ns": self_ns, "min_ns": dur, "max_ns": dur,
                              "branch_count": calls["branch_count"], "insn_count": calls["insn_count"],
                              "cyc_count": calls["cyc_count"]})

    def rows(self) -> dict[str, np.ndarray]:
        """The ``call_path_stats`` columns, ordered by thread id then call path id (ids from 1)."""
        keys, cols = self.groups.result()
        out = {"id": np.arange(1, len(keys) + 1, dtype=np.int64), "thread_id": keys >> 32,
               "call_path_id": keys & 0xFFFFFFFF}
        out.update(cols)
        return {name: out[name] for name in CALL_PATH_STATS_COLUMNS}


def symbol_stats(cp_stats: Mapping[str, np.ndarray], cp_symbol: np.ndarray) -> dict[str, np.ndarray]:
    """``symbol_stats`` rows from ``call_path_stats`` rows and ``cp_symbol`` (call path id -> symbol id),
    ordered by symbol id (ids from 1): the sums of every call of the symbol, whatever its path."""
    groups = GroupStats(sums=("calls", *_SUMS), mins=("min_ns",), maxs=("max_ns",), count="paths")
    cp = np.asarray(cp_stats["call_path_id"], dtype=np.int64)
    groups.add(np.asarray(cp_symbol, dtype=np.int64)[cp], cp_stats)
    keys, cols = groups.result()
    out = {"id": np.arange(1, len(keys) + 1, dtype=np.int64), "symbol_id": keys}
    out.update(cols)
    return {name: out[name] for name in SYMBOL_STATS_COLUMNS}
