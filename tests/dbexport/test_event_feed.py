"""The export's sideband feed (``exporter._EventFeed``): ``take_upto(tsc)`` hands out the records due at
or before ``tsc`` in delivery order, a record whose TSC is later holding back the ones after it (perf's
ordered queue delivers in order); records without a time (TSC 0) go with whatever comes before them.

Checked against a step-per-record model on random feeds that span several of its chunks: TSCs that step
back, ties, records at time 0, limits that go back, limits past every TSC and limits asked per sample.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from ptexport.dbexport import exporter
from ptexport.dbexport.exporter import _EventFeed


@dataclass
class _Rec:
    time: int
    n: int


class _SameClock:
    """perf time == TSC."""

    @staticmethod
    def perf_time_to_tsc_array(times: np.ndarray) -> np.ndarray:
        return np.asarray(times, np.uint64)


def _model(recs: list[_Rec], limits: list[int]) -> list[list[int]]:
    out, pos = [], 0
    for lim in limits:
        got = []
        while pos < len(recs) and recs[pos].time <= lim:
            got.append(recs[pos].n)
            pos += 1
        out.append(got)
    return out + [[r.n for r in recs[pos:]]]


@pytest.mark.parametrize("seed", range(6))
def test_feed_hands_out_what_a_step_per_record_would(seed, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(exporter._EventFeed, "_CHUNK", rng.choice((1, 3, 64, 4096)))
    t, recs = 100, []
    for i in range(rng.randint(0, 600)):
        t = max(1, t + rng.choice((-30, -1, 0, 0, 1, 5, 20)))
        recs.append(_Rec(0 if rng.random() < 0.05 else t, i))
    limits = sorted(rng.randint(0, t + 50) for _ in range(rng.randint(1, 80)))
    if rng.random() < 0.5:  # limits that go back now and then (a batch's latest TSC below the one before)
        limits = [max(0, x - rng.choice((0, 0, 40))) for x in limits]
    limits.append(rng.choice((t + 1000, (1 << 64) - 1, 1 << 70)))
    feed = _EventFeed(iter(recs), _SameClock(), timeless=False)
    got = []
    for lim in limits:
        tscs, rs = feed.take_upto(lim)
        assert tscs == [r.time for r in rs]
        got.append([r.n for r in rs])
    got.append([r.n for r in feed.rest()])
    assert got == _model(recs, limits)
