"""Batches made ahead by a thread of their own.

With ``--jobs 1`` one process decodes and exports.  The compiled decoder runs without the
interpreter lock, so when the decoding of batch N + 1 runs on a thread of its own while batch N is
exported, the two overlap on a second core: the 10 M-branch export took 5.4-5.6 s with the
decoding in line and 4.5-4.9 s with it on a thread (5 alternated runs each).  A cluster's
coordinator joins and merges the workers' segments the same way.  The decoding child of
``--jobs 2`` does not: batches it made faster than the exporting process freed its shared-memory
slots went through the pipe, a new buffer each there (100 M branches: 394 MB peak instead of 367).

The thread is the only one that touches the source: it makes every batch, and closes the source
(a generator: its files, its workers) when the stream ends, fails or is closed.  The consumer sees
the same batches in the same order, and an error where the batch it cut short would have come.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Iterable, Iterator

#: Batches made ahead of the one in use (each ~9 MB of columns at the default 64 K rows).
DEPTH = 2


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class Prefetched:
    """The items of ``source``, made by a thread up to ``depth`` ahead; ``seconds``: the time spent
    making them (``seconds`` given: time already spent, e.g. opening the recording).  ``close()``
    stops the thread and waits for it (it finishes the item it is making): call it before what the
    source reads from is released."""

    def __init__(self, source: Iterable[Any], seconds: float = 0.0, depth: int = DEPTH,
                 name: str = "ptexport-decode") -> None:
        self.seconds = seconds
        self._q: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(source,), name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._q.get()
        if item is _END or isinstance(item, _Failed):
            self._done = True
            self._thread.join()
            if item is _END:
                raise StopIteration
            raise item.error
        return item

    def close(self) -> None:
        """End the thread (the source closed in it); the items made ahead are dropped."""
        self._done = True
        self._stop.set()
        while self._thread.is_alive():
            try:  # make room: the thread may wait to put an item
                self._q.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, source: Iterable[Any]) -> None:
        it = iter(source)
        failure: BaseException | None = None
        try:
            while not self._stop.is_set():
                t = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    break
                finally:
                    self.seconds += time.perf_counter() - t
                if not self._put(item):
                    break
        except BaseException as e:  # noqa: BLE001 - the consumer raises it in its thread
            failure = e
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    close()
                except BaseException as e:  # noqa: BLE001 - as an error of the stream
                    failure = failure or e
        if not self._stop.is_set():
            self._put(_END if failure is None else _Failed(failure))
