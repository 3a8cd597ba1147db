"""``dump branches``' text writer: batches formatted by a thread of their own, written in order."""

from __future__ import annotations

import io
import threading
import time

import pytest

from ptexport.cli.dump_branches import FORMAT_AHEAD, _write_formatted


def test_batches_are_written_in_order_whatever_each_takes():
    out = io.BytesIO()

    def fmt(i: int) -> bytes:
        time.sleep(0.002 * (i % 3))  # later batches may finish first
        return f"{i}\n".encode()

    _write_formatted(out, iter(range(50)), fmt)
    assert out.getvalue().decode().split() == [str(i) for i in range(50)]


def test_formatting_runs_beside_the_producer_and_only_a_few_batches_ahead():
    made = []
    formatter_threads = set()

    def batches():
        for i in range(20):
            made.append(i)
            yield i

    class Sink(io.BytesIO):
        def write(self, b):  # what was produced when batch i is written: at most a few ahead of it
            i = int(b)
            assert len(made) - 1 - i <= FORMAT_AHEAD + 1
            return super().write(b)

    def fmt(i: int) -> bytes:
        formatter_threads.add(threading.current_thread().name)
        return b"%d\n" % i

    _write_formatted(Sink(), batches(), fmt)
    assert formatter_threads and threading.current_thread().name not in formatter_threads


def test_a_formatting_error_reaches_the_caller_and_stops_the_output():
    out = io.BytesIO()

    def fmt(i: int) -> bytes:
        if i == 5:
            raise ValueError("bad batch 5")
        return b"%d\n" % i

    with pytest.raises(ValueError, match="bad batch 5"):
        _write_formatted(out, iter(range(100)), fmt)
    assert out.getvalue().split() == [b"%d" % i for i in range(5)]


def test_a_closed_pipe_stops_the_producer():
    taken = []

    def batches():
        for i in range(1000):
            taken.append(i)
            yield i

    class Closed(io.BytesIO):
        def write(self, b):
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        _write_formatted(Closed(), batches(), lambda i: b"x\n")
    assert len(taken) <= FORMAT_AHEAD + 2
