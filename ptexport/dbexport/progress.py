"""How far an export is: samples written and bytes of trace decoded, for a progress line.

Batches come in time order, so the trace decoded so far is, on every cpu, the
AUX data the kernel had written by the time of the last sample exported: the
PERF_RECORD_AUX records (time, size) of each cpu say how much that is.  The
total is all the AUX data the records announce.  Without AUX records (or
without time: timeless traces) the byte count is unknown (total 0).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import numpy as np

#: progress(samples written, bytes decoded, bytes in the trace (0: unknown))
ProgressFn = Callable[[int, int, int], None]


class AuxPosition:
    """Bytes of AUX data written by a perf time, over all cpus (from the PERF_RECORD_AUX records)."""

    def __init__(self, aux_events: dict[int, list[Any]] | None, timeless: bool = False) -> None:
        self._times: list[np.ndarray] = []
        self._cum: list[np.ndarray] = []
        self.total = 0
        if timeless or not aux_events:
            return
        for evs in aux_events.values():
            if not evs:
                continue
            evs = sorted(evs, key=lambda e: e.time)
            self._times.append(np.array([e.time for e in evs], np.int64))
            cum = np.cumsum(np.array([e.aux_size for e in evs], np.int64))
            self._cum.append(cum)
            self.total += int(cum[-1])

    def bytes_at(self, time: int) -> int:
        """AUX bytes of every cpu written at or before ``time`` (an AUX record comes after its data)."""
        done = 0
        for t, cum in zip(self._times, self._cum):
            k = int(np.searchsorted(t, time, side="right"))
            # the record after ``time`` covers data written up to it: count it in proportion
            if k < len(t):
                prev_t = int(t[k - 1]) if k else 0
                prev_c = int(cum[k - 1]) if k else 0
                span = int(t[k]) - prev_t
                part = (int(cum[k]) - prev_c) * (time - prev_t) // span if span > 0 and time > prev_t else 0
                done += prev_c + part
            else:
                done += int(cum[-1])
        return done


class ProgressBatches:
    """The sample batches of an export, reporting progress as each one is asked for (the one before it
    is then written)."""

    def __init__(self, batches: Iterable[Any], count: Callable[[], int], pos: AuxPosition, fn: ProgressFn) -> None:
        self._it = iter(batches)
        self._count = count
        self._pos = pos
        self._fn = fn
        self._time = 0
        self._done = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._pos.total:
            self._done = max(self._done, min(self._pos.bytes_at(self._time), self._pos.total))
        self._fn(self._count(), self._done, self._pos.total)
        cols = next(self._it)
        if len(cols):
            self._time = max(self._time, int(cols.time.max()))
        return cols

    def finish(self) -> None:
        """Everything decoded."""
        self._fn(self._count(), self._pos.total, self._pos.total)
