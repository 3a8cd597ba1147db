"""``--jobs N`` with N - 1 workers: the parent decodes about an N-th of the trace itself (its first segments
first: they start in the true state), never all of it; the rows stay the serial decoder's (test_perffast)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ptexport.decoder.compiled import kernel as K
from ptexport.session import parallel


def _tokens(*buffer_sizes: int) -> SimpleNamespace:
    bi = np.zeros((len(buffer_sizes), K.BI_SIZE), np.int64)
    bi[:, K.BI_DLEN] = buffer_sizes
    return SimpleNamespace(bi=bi)


def _bytes(queues, here) -> tuple[int, int]:
    """(bytes the parent decodes, bytes in all)."""
    mine = total = 0
    for q, (tokens, starts) in enumerate(queues):
        at = np.cumsum(np.concatenate([[0], tokens.bi[:, K.BI_DLEN]]))
        edges = [0] + [int(at[b]) + byte for b, byte in starts] + [int(at[-1])]
        for k in range(len(starts) + 1):
            n = edges[k + 1] - edges[k]
            total += n
            mine += n if (q, k) in here else 0
    return mine, total


def test_one_queue_in_two_halves_the_parent_takes_the_first():
    queues = [(_tokens(1000, 1000), [(1, 10)])]
    assert parallel._segments_here(queues, 2) == {(0, 0)}


@pytest.mark.parametrize("jobs", [2, 3, 4, 8])
def test_the_parent_takes_about_its_share_first_segments_first(jobs):
    rng = np.random.default_rng(jobs)
    queues = []
    for _ in range(6):
        sizes = rng.integers(100, 5000, rng.integers(1, 9)).tolist()
        starts = sorted({(int(b), int(rng.integers(0, sizes[b]))) for b in rng.integers(0, len(sizes), jobs - 1)})
        starts = [s for s in starts if s != (0, 0)]
        queues.append((_tokens(*sizes), starts))
    here = parallel._segments_here(queues, jobs)
    nseg = sum(len(s) + 1 for _, s in queues)
    assert 0 < len(here) < nseg
    firsts = {(q, 0) for q in range(len(queues))}
    assert not (here - firsts) or firsts <= here  # later segments only once every first one is here
    mine, total = _bytes(queues, here)
    biggest = max(_bytes(queues, {seg})[0] for seg in here)
    assert mine - biggest < total / jobs  # it stops once it has its share


def test_never_every_segment():
    queues = [(_tokens(10), []), (_tokens(10_000), [])]
    here = parallel._segments_here(queues, 2)
    assert len(here) == 1
    assert parallel._segments_here([(_tokens(10), [])], 2) == set()


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
