"""Where decode work units run: the one interface the process pool (``--jobs N``) and a Dask cluster
(``--scheduler``) implement.

A *work unit* is a call of a module-level function with small picklable arguments (a PSB segment
of one queue: :func:`ptexport.session.parallel._segment_job` with the recording's path, the decode
options, the queue number and the segment's start and stop positions); its result is a dict of
numpy arrays.  An executor runs units somewhere else and hands back future-like handles
(``result()``, ``done()``, ``cancel()``: what :class:`concurrent.futures.Future` and
``distributed.Future`` both have).  :func:`ordered` is the consumer's side: results in submission
order with at most ``window`` units submitted and not yet taken, so the rows waiting for the merge do
not grow with the trace whatever runs the units.

Implementations: :class:`ptexport.session.parallel.ProcessUnits` (a forked process pool on this
machine) and :class:`ptexport.session.cluster.DaskUnits` (the workers of a dask.distributed
scheduler; dask is imported only there, only with ``--scheduler``).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable, Iterator, Protocol


class UnitFuture(Protocol):
    def result(self) -> Any: ...

    def done(self) -> bool: ...

    def cancel(self) -> Any: ...


class UnitExecutor(Protocol):
    """Runs work units elsewhere.  ``width``: units it runs at once (workers x threads); ``window``:
    units a stream keeps submitted ahead of its consumer (``width``, more where a result takes a
    while to come back); ``submit(fn, *args)``: a :class:`UnitFuture`; ``release()``: this user is
    done with it (the owner closes it when the last one is).

    ``budget``: the units all streams together may have submitted and not yet taken (a queue's
    stream may always have one, its next), or None; ``in_flight`` counts them (:func:`ordered` keeps
    it).  Without a budget each stream has its ``window`` (the process pool: ``jobs`` per queue, as
    before); a cluster sets one, so a trace of 128 CPU queues on 128 workers holds ``budget`` + 128
    results, not 128 x 256."""

    width: int
    window: int
    budget: int | None
    in_flight: int

    def submit(self, fn: Callable[..., Any], *args: Any) -> UnitFuture: ...

    def release(self) -> None: ...


def ordered(executor: UnitExecutor, calls: Iterable[tuple[Callable[..., Any], tuple]], window: int,
            on_result: Callable[[Any, deque], None] | None = None) -> Iterator[Any]:
    """Results of ``calls`` ((fn, args) pairs) run on ``executor``, in order, with at most ``window``
    submitted ahead of the one being taken (and within the executor's ``budget``, if it has one).
    ``on_result(result, pending futures)`` sees each result as it is taken (memory counters).
    Closing the generator cancels what is still pending."""
    it = iter(calls)
    futs: deque = deque()
    more = True
    window = max(1, window)
    budget = executor.budget
    try:
        while True:
            while more and len(futs) < window:
                if futs and budget is not None and executor.in_flight >= budget:
                    break  # others hold the budget: this stream's next only
                nxt = next(it, None)
                if nxt is None:
                    more = False
                    break
                fn, args = nxt
                futs.append(executor.submit(fn, *args))
                if budget is not None:
                    executor.in_flight += 1
            if not futs:
                return
            fut = futs.popleft()
            if budget is not None:
                executor.in_flight -= 1
            res = fut.result()
            if on_result is not None:
                on_result(res, futs)
            yield res
    finally:
        for f in futs:
            f.cancel()
        if budget is not None:
            executor.in_flight -= len(futs)
