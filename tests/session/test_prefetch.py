"""Batches made ahead on a thread (``--jobs 1`` exports, the decoding child): the same items in the
same order, errors where they happened, the source closed in its thread however the stream ends."""

from __future__ import annotations

import threading
import time

import pytest

from ptexport.errors import InputError
from ptexport.session.prefetch import Prefetched


class _Source:
    """A generator's shape: items, an optional error after ``fail_at`` items, a close that records
    which thread ran it (the generator's cleanup: its files and workers)."""

    def __init__(self, n: int, fail_at: int | None = None, delay: float = 0.0) -> None:
        self.n, self.fail_at, self.delay = n, fail_at, delay
        self.made = 0
        self.closed_in: str | None = None
        self.threads: set[str] = set()

    def __iter__(self):
        return self

    def __next__(self):
        self.threads.add(threading.current_thread().name)
        if self.fail_at is not None and self.made == self.fail_at:
            raise InputError("bad packet", source="trace.data", offset=4096)
        if self.made == self.n:
            raise StopIteration
        time.sleep(self.delay)
        self.made += 1
        return self.made

    def close(self) -> None:
        self.closed_in = threading.current_thread().name


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_the_same_items_in_order_made_on_their_own_thread(depth):
    src = _Source(50)
    got = list(Prefetched(src, depth=depth))
    assert got == list(range(1, 51))
    assert src.threads == {"ptexport-decode"} and src.closed_in == "ptexport-decode"


def test_an_error_comes_after_the_items_before_it():
    src = _Source(10, fail_at=4)
    it = Prefetched(src)
    assert [next(it) for _ in range(4)] == [1, 2, 3, 4]
    with pytest.raises(InputError, match="bad packet") as e:
        next(it)
    assert e.value.offset == 4096
    with pytest.raises(StopIteration):
        next(it)
    assert src.closed_in == "ptexport-decode"


def test_close_stops_the_thread_at_most_one_item_ahead_and_closes_the_source():
    src = _Source(10_000, delay=0.001)
    it = Prefetched(src, depth=2)
    assert next(it) == 1
    it.close()
    assert not it._thread.is_alive()
    assert src.closed_in == "ptexport-decode"
    assert src.made <= 1 + 2 + 1  # the one in use, the queue, the one being made
    with pytest.raises(StopIteration):
        next(it)


def test_seconds_add_the_time_spent_making_the_items():
    it = Prefetched(_Source(5, delay=0.02), seconds=1.0)
    assert list(it) == [1, 2, 3, 4, 5]
    assert 1.09 <= it.seconds < 3


def test_a_consumer_error_before_the_end_leaves_no_thread(tmp_path):
    """The export fails (a full disk, a signal): the caller's finally closes the stream, which must
    not leave a thread decoding from a recording about to be unmapped."""
    src = _Source(1000, delay=0.001)
    it = Prefetched(src)
    with pytest.raises(OSError):
        try:
            for x in it:
                if x == 3:
                    raise OSError(28, "No space left on device")
        finally:
            it.close()
    assert not it._thread.is_alive() and src.closed_in == "ptexport-decode"
