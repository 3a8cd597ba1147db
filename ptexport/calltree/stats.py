"""Aggregates of the ``calls`` rows, kept as the call tree makes them (both twins use this module).

The call tree knows, when a call returns, the durations of the calls it made (they returned
before it): it hands each ``calls`` row over with its self time (duration minus the summed
durations of its direct callees, the calls whose ``parent_id`` is its id) and :class:`CallStats`
folds them, batch after batch in the order the rows are taken, into one row per (thread, call
path).  The per-symbol sums follow from those rows and the call paths' symbols
(:func:`symbol_stats`).  :class:`GroupStats` is the running group-by both use (and the export's
per-CPU time buckets): integer sums, minima and maxima per int64 key, exact (no floats).  With numba
it folds each batch into an open-addressing table in one pass (a VM's guest stacks make hundreds of
thousands of call paths, and merging every batch's groups into sorted arrays cost a sort of them
all per batch); without it, the numpy form sorts each batch.  Both give the same groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ptexport.jit import numba

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


_SUM, _MIN, _MAX = 0, 1, 2
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: the key times 2**64 / phi, its top bits

if numba is not None:

    @numba.njit(cache=True, nogil=True)
    def _fold(keys, vals, ops, table, shift, gkeys, gcols, ngroups, i, limit):  # pragma: no cover - compiled
        """Fold rows ``i``, ``i + 1``, ... into the groups: ``keys[i]`` with ``vals[:, i]``, by ``ops``
        (sum, min, max); ``table`` (slot + 1, 0 = free; a power of two), ``gkeys`` and ``gcols`` (row 0:
        the count) hold the groups.  Stops before a row that would make group ``limit`` (the room
        left).  Returns (groups, the first row not folded)."""
        mask = table.shape[0] - 1
        m = vals.shape[0]
        n = keys.shape[0]
        while i < n:
            k = keys[i]
            j = np.int64((np.uint64(k) * np.uint64(_GOLDEN)) >> shift)
            while True:
                s = table[j]
                if s == 0:
                    if ngroups == limit:
                        return ngroups, i
                    s = ngroups + 1
                    table[j] = s
                    gkeys[ngroups] = k
                    gcols[0, ngroups] = 1
                    for c in range(m):
                        gcols[c + 1, ngroups] = vals[c, i]
                    ngroups += 1
                    break
                if gkeys[s - 1] == k:
                    g = s - 1
                    gcols[0, g] += 1
                    for c in range(m):
                        v = vals[c, i]
                        op = ops[c]
                        if op == _SUM:
                            gcols[c + 1, g] += v
                        elif op == _MIN:
                            if v < gcols[c + 1, g]:
                                gcols[c + 1, g] = v
                        elif v > gcols[c + 1, g]:
                            gcols[c + 1, g] = v
                    break
                j = (j + 1) & mask
            i += 1
        return ngroups, i

    @numba.njit(cache=True, nogil=True)
    def _rehash(table, shift, gkeys, ngroups):  # pragma: no cover - compiled
        """Enter the first ``ngroups`` keys (distinct) into the empty ``table``."""
        mask = table.shape[0] - 1
        for g in range(ngroups):
            j = np.int64((np.uint64(gkeys[g]) * np.uint64(_GOLDEN)) >> shift)
            while table[j] != 0:
                j = (j + 1) & mask
            table[j] = g + 1


class GroupStats:
    """Running ``COUNT(*)``, ``SUM``, ``MIN`` and ``MAX`` of int64 columns grouped by an int64 key.

    :meth:`add` folds one batch (compiled: one pass through a hash table of the groups; numpy:
    sorted once, reduced with ``reduceat``, merged into the running groups by binary search);
    :meth:`result` gives the groups in key order.  Sums wrap at 64 bits in both forms.
    """

    def __init__(self, sums: Sequence[str] = (), mins: Sequence[str] = (), maxs: Sequence[str] = (),
                 count: str = "count") -> None:
        self.sums, self.mins, self.maxs, self.count = tuple(sums), tuple(mins), tuple(maxs), count
        self.names = (count, *self.sums, *self.mins, *self.maxs)
        self._ops = np.array([_SUM] * len(self.sums) + [_MIN] * len(self.mins) + [_MAX] * len(self.maxs),
                             dtype=np.int64)
        self._reset()

    def _reset(self) -> None:
        self._n = 0  # groups, compiled form: unordered in _gkeys[:_n] and _gcols[:, :_n]
        self._gkeys = np.zeros(0, dtype=np.int64)
        self._gcols = np.zeros((len(self.names), 0), dtype=np.int64)
        self._table = np.zeros(0, dtype=np.int64)
        self._shift = np.uint64(64)
        self._keys = np.zeros(0, dtype=np.int64)  # numpy form: ascending, with their columns
        self._cols: dict[str, np.ndarray] = {name: np.zeros(0, dtype=np.int64) for name in self.names}

    def __len__(self) -> int:
        return self._n if numba is not None else len(self._keys)

    def add(self, keys: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Fold rows: ``keys`` (int64) and one int64 array per summed / min / max column."""
        if len(keys) == 0:
            return
        if numba is None:
            self._add_sorted(keys, values)
            return
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        n = len(keys)
        vals = np.empty((len(self.names) - 1, n), dtype=np.int64)
        for c, name in enumerate(self.names[1:]):
            vals[c] = values[name]
        if not len(self._table):
            self._grow()
        i = 0
        while True:
            room = min(len(self._gkeys), len(self._table) // 2)  # the table at most half full
            self._n, i = _fold(keys, vals, self._ops, self._table, self._shift, self._gkeys, self._gcols,
                               self._n, i, room)
            if i == n:
                return
            self._grow()

    def _grow(self) -> None:
        """Room for half as many groups again (at least 1024): the arrays, and the table at least
        twice that (memory follows the groups, not the batches)."""
        cap = max(1024, self._n + self._n // 2)
        if cap > len(self._gkeys):
            gkeys = np.zeros(cap, dtype=np.int64)
            gkeys[:self._n] = self._gkeys[:self._n]
            gcols = np.zeros((len(self.names), cap), dtype=np.int64)
            gcols[:, :self._n] = self._gcols[:, :self._n]
            self._gkeys, self._gcols = gkeys, gcols
        if 2 * len(self._gkeys) > len(self._table):
            bits = max(int(2 * len(self._gkeys) - 1).bit_length(), 11)
            self._table = np.zeros(1 << bits, dtype=np.int64)
            self._shift = np.uint64(64 - bits)
            _rehash(self._table, self._shift, self._gkeys, self._n)

    def _add_sorted(self, keys: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        n = len(keys)
        order = np.argsort(keys, kind="stable")
        k = np.asarray(keys, dtype=np.int64)[order]
        start = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
        uniq = k[start]
        part = {self.count: np.diff(np.append(start, n)).astype(np.int64)}
        for name in self.sums:
            part[name] = np.add.reduceat(np.asarray(values[name], dtype=np.int64)[order], start)
        for name in self.mins:
            part[name] = np.minimum.reduceat(np.asarray(values[name], dtype=np.int64)[order], start)
        for name in self.maxs:
            part[name] = np.maximum.reduceat(np.asarray(values[name], dtype=np.int64)[order], start)
        pos = np.searchsorted(self._keys, uniq)
        found = pos < len(self._keys)
        found[found] = self._keys[pos[found]] == uniq[found]
        at = pos[found]
        if len(at):
            for name in (self.count, *self.sums):
                self._cols[name][at] += part[name][found]
            for name in self.mins:
                self._cols[name][at] = np.minimum(self._cols[name][at], part[name][found])
            for name in self.maxs:
                self._cols[name][at] = np.maximum(self._cols[name][at], part[name][found])
        new = ~found
        if new.any():
            keys_all = np.concatenate([self._keys, uniq[new]])
            o = np.argsort(keys_all, kind="stable")
            self._keys = keys_all[o]
            for name, col in self._cols.items():
                self._cols[name] = np.concatenate([col, part[name][new]])[o]

    def result(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The keys (ascending) and the columns of their groups."""
        if numba is None:
            return self._keys.copy(), {name: col.copy() for name, col in self._cols.items()}
        order = np.argsort(self._gkeys[:self._n], kind="stable")
        return self._gkeys[order], {name: self._gcols[c, order] for c, name in enumerate(self.names)}

    def take(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """:meth:`result`, the groups given away (they restart empty): put in key order where they
        are, a column at a time, not copied whole (a VM trace's 650 K call paths: 50 MB less at the
        export's end)."""
        if numba is None:
            keys, cols = self._keys, self._cols
        else:
            n = self._n
            order = np.argsort(self._gkeys[:n], kind="stable")
            keys = self._gkeys[:n][order]
            for c in range(len(self.names)):
                row = self._gcols[c, :n]
                row[:] = row[order]
            cols = {name: self._gcols[c, :n] for c, name in enumerate(self.names)}
        self._reset()
        return keys, cols


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
        """The ``call_path_stats`` columns, ordered by thread id then call path id (ids from 1): the
        rows folded so far, taken (the next :meth:`add` starts anew)."""
        keys, cols = self.groups.take()
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
    keys, cols = groups.take()
    out = {"id": np.arange(1, len(keys) + 1, dtype=np.int64), "symbol_id": keys}
    out.update(cols)
    return {name: out[name] for name in SYMBOL_STATS_COLUMNS}
