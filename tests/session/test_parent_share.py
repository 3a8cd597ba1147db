"""``--jobs N`` with N - 1 workers: the parent decodes work units itself while the workers decode theirs
(its from the front - first segments first: they start in the true state - the workers' from the back,
each unit by whichever is free first), never none of them; the rows stay the serial decoder's
(test_perffast)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from ptexport.session import parallel


class _Pool:
    """A pool of ``width`` threads whose units take ``cost`` seconds each; counts what waits in it."""

    def __init__(self, width: int, cost: float = 0.0, fail_after: int | None = None) -> None:
        self.ex = ThreadPoolExecutor(max_workers=width)
        self.width = width
        self.cost = cost
        self.fail_after = fail_after
        self.lock = threading.Lock()
        self.out = 0  # submitted and not done
        self.most = 0
        self.took: list[int] = []

    def run(self, unit: int) -> tuple[str, int]:
        time.sleep(self.cost)
        with self.lock:
            self.out -= 1
        return "pool", unit

    def submit(self, unit: int) -> Future:
        if self.fail_after is not None and len(self.took) >= self.fail_after:
            raise RuntimeError("broken pool")
        with self.lock:
            self.out += 1
            self.most = max(self.most, self.out)
        self.took.append(unit)
        return self.ex.submit(self.run, unit)


def _here(cost: float):
    took = []

    def run(unit: int) -> tuple[str, int]:
        took.append(unit)
        time.sleep(cost)
        return "here", unit
    return took, run


def _results(got) -> dict:
    return {u: (r.result() if isinstance(r, Future) else r) for u, r in got.items()}


@pytest.mark.parametrize("width", [1, 2, 3])
def test_every_unit_once_this_process_from_the_front_the_pool_from_the_back(width):
    units = list(range(12))
    pool = _Pool(width, cost=0.01)
    took, run = _here(0.01)
    got = parallel.share_units(units, width, pool.submit, run)
    res = _results(got)
    assert sorted(res) == units
    assert sorted(took + pool.took) == units and not set(took) & set(pool.took)
    assert all(res[u] == ("here", u) for u in took) and all(res[u] == ("pool", u) for u in pool.took)
    assert took == units[:len(took)] and took  # the front, in order
    assert pool.took == units[::-1][:len(pool.took)] and pool.took  # the back, in order
    assert pool.most <= width  # never a unit waiting in the pool's queue (it could not be taken back)


def test_the_faster_side_takes_more_units():
    units = list(range(20))
    pool = _Pool(1, cost=0.03)
    took, run = _here(0.002)
    parallel.share_units(units, 1, pool.submit, run)
    assert len(took) > 3 * len(pool.took)
    pool = _Pool(1, cost=0.0)
    took, run = _here(0.03)
    parallel.share_units(units, 1, pool.submit, run)
    assert len(pool.took) > 3 * len(took)


def test_units_done_before_their_callback_is_added():
    """A future already done when its callback is added runs the callback at once, in the submitting
    thread (the lock is held there): no deadlock, every unit once."""
    def submit(unit: int) -> Future:
        f: Future = Future()
        f.set_result(("pool", unit))
        return f

    took, run = _here(0.0)
    res = _results(parallel.share_units(list(range(10)), 2, submit, run))
    assert sorted(res) == list(range(10)) and took == [0]  # the pool took the rest before this process's first


def test_a_pool_that_breaks_leaves_the_rest_here():
    pool = _Pool(1, cost=0.05, fail_after=1)
    took, run = _here(0.0)
    res = _results(parallel.share_units(list(range(6)), 1, pool.submit, run))
    assert sorted(res) == list(range(6)) and len(pool.took) == 1 and len(took) == 5


def test_an_error_here_stops_feeding_the_pool():
    pool = _Pool(1, cost=0.02)

    def run(unit: int):
        raise ValueError("bad unit")

    with pytest.raises(ValueError):
        parallel.share_units(list(range(50)), 1, pool.submit, run)
    time.sleep(0.1)
    assert len(pool.took) <= 2


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    import io

    from ptexport.cli import main

    made = {}
    for name, opts in {"calls": ("--program", "calls", "--psb-period", "1024"),
                       "2cpus": ("--program", "threads", "--cpus", "2", "--psb-period", "512")}.items():
        d = tmp_path_factory.mktemp(name)
        assert main(["synth", "--out", str(d), "--branches", "20000", "--seed", "7", *opts], out=io.StringIO()) == 0
        made[name] = str(d / "perf.data")
    return made


def _cols(parts):
    return [({c: np.asarray(v).tolist() for c, v in p.cols.items()}, np.asarray(p.items_err).tolist(),
             np.asarray(p.items_ts).tolist(), p.setup_failures) for p in parts]


@pytest.mark.parametrize("name, itrace", [("calls", "be"), ("2cpus", "bep"), ("2cpus", "bei50i")])
@pytest.mark.parametrize("jobs", [2, 3])
def test_the_parent_decodes_its_share_and_the_rows_are_serial(traces, monkeypatch, name, itrace, jobs):
    """The parent's share is decoded in the parent (segments: ``_decode_segment`` called here; whole queues,
    ``iNi``: ``_decode_one``), the rest in workers, and the queues equal serial decoding, counts included."""
    from ptexport.perfdata import open_perf_data
    from ptexport.samples.itrace import parse_itrace
    from ptexport.session.perfsession import DecodeConfig, open_session

    with open_perf_data(traces[name]) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))
        serial = parallel.decode_queues(s, 1)
        assert len(serial) == (2 if name == "2cpus" else 1)
        here = []  # what this process decoded (workers are forked: their calls are counted there)
        for fn in ("_decode_segment", "_decode_one"):
            real = getattr(parallel, fn)
            monkeypatch.setattr(parallel, fn, lambda *a, _real=real, _fn=fn, **k: here.append(_fn) or _real(*a, **k))
        pooled = parallel.decode_queues(s, jobs, min_segment_bytes=600)
        assert _cols(pooled) == _cols(serial)
        assert parallel.count_samples(s, jobs, min_segment_bytes=600) == parallel.count_samples(s, 1)
    segmented = "i50i" not in itrace
    assert here and set(here) == {"_decode_segment" if segmented else "_decode_one"}
    if segmented:
        assert s.decode_stats.matched > 0  # and workers decoded the rest: their segments were joined


@pytest.mark.parametrize("itrace", ["be", "bei50i"])
def test_forked_workers_use_the_parents_session(traces, monkeypatch, itrace):
    """A forked worker has the parent's session for the recording (``parallel._inherit``): it does not
    read the recording's records and sideband again."""
    from ptexport.perfdata import open_perf_data
    from ptexport.samples.itrace import parse_itrace
    from ptexport.session.perfsession import DecodeConfig, PerfSession, open_session

    with open_perf_data(traces["2cpus"]) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))
        serial = parallel.decode_queues(s, 1)

        def reopen(*a, **k):
            raise AssertionError("a worker opened the recording again")

        monkeypatch.setattr(PerfSession, "reopen", classmethod(reopen))  # (the workers are forked after)
        assert _cols(parallel.decode_queues(s, 3, min_segment_bytes=600)) == _cols(serial)


def test_a_segment_tokenizes_from_its_own_buffer(tmp_path, monkeypatch):
    """A segment decoded from a PSB in buffer b > 0 tokenizes windows from b on (not buffer 0's first)."""
    import io

    from ptexport.cli import main
    from ptexport.decoder.compiled import decoder as D
    from ptexport.perfdata import open_perf_data
    from ptexport.samples.itrace import parse_itrace
    from ptexport.session.perfsession import DecodeConfig, open_session

    assert main(["synth", "--out", str(tmp_path), "--program", "calls", "--psb-period", "1024", "--branches",
                 "200000", "--seed", "7"], out=io.StringIO()) == 0
    with open_perf_data(str(tmp_path / "perf.data")) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        key, bufs = s.queues()[0]
        assert len(bufs) >= 3
        qd = D.QueueDecoder(s.decode_context(), 0, key, bufs, window=1)  # a buffer a window
        starts = parallel._segment_starts(qd.tokens, 3, 1)
        assert starts and starts[-1][0] >= 1
        firsts = []
        real = D._Tokens.load
        monkeypatch.setattr(D._Tokens, "load", lambda self, first, need=-1: firsts.append(first) or real(self, first, need))
        res = parallel._decode_segment(s, 0, starts[-1], None, True, window=1)
        assert firsts and min(firsts) == starts[-1][0], firsts
        assert res["nbranch"] > 0 and res["records"]


def test_a_decoder_tokenizes_nothing_before_its_setup(traces, monkeypatch):
    """The plan of PSB segments makes a decoder per queue before any worker starts (for the buffer sizes
    and the PSBs to cut at): none tokenizes a window until its setup, which tokenizes where it starts."""
    from ptexport.decoder.compiled import decoder as D
    from ptexport.perfdata import open_perf_data
    from ptexport.samples.itrace import parse_itrace
    from ptexport.session.perfsession import DecodeConfig, open_session

    calls = []
    real = D.tokenize_fast
    monkeypatch.setattr(D, "tokenize_fast", lambda data: calls.append(len(data)) or real(data))
    with open_perf_data(traces["2cpus"]) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        plans = [D.QueueDecoder(s.decode_context(), q, key, bufs) for q, (key, bufs) in enumerate(s.queues())]
        assert len(plans) == 2 and not calls
        assert all(parallel._segment_starts(qd.tokens, 2, 600) for qd in plans)
        assert not calls
        plans[0].setup()
        assert calls
        assert len(plans[0].run()) > 100
