"""The streamed merge (``parallel.StreamMerge``) against the whole-queue order (``queues_compiled.perf_order``)
with sideband events: the merge's kernel runs past the events itself and stops only where an event
reports lost data (its row goes there), where a queue needs items, or where its turns are full.

Random queues (error items, timestamps that tie and step back), random events (some reporting lost
data, some at TSC 0, which run nothing, some past int64, which limit nothing), chunks of a few items
each (a turn's rows then span chunks), and a small turn buffer: every row must come out where the
whole-queue order puts it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import pytest

from ptexport.session import parallel
from ptexport.session import queues_compiled as QC
from ptexport.session.parallel import StreamMerge, _Source

COLS = ("kind", "step", "id")


@dataclass
class _Part:
    cols: dict
    items_err: np.ndarray
    items_ts: np.ndarray
    setup_failures: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.cols["kind"])


@dataclass
class _Stats:
    max_source_rows: int = 0


def _case(rng: random.Random):
    """Queues of (items, rows), events, lost rows; row ids count through the queues, then the lost rows."""
    queues = []
    next_id = 0
    for _ in range(rng.randint(1, 5)):
        n = rng.randint(0, 60)
        err = [rng.random() < 0.1 for _ in range(n)]
        ts, t = [], rng.randint(1, 20)
        for _ in range(n):
            t = max(1, t + rng.choice((-2, 0, 0, 1, 1, 2, 3, 5)))
            ts.append(t)
        steps = sorted(rng.choice(range(n + 1)) for _ in range(rng.randint(0, 3 * n + 2))) if n else []
        ids = list(range(next_id, next_id + len(steps)))
        next_id += len(steps)
        queues.append((err, ts, steps, ids))
    events = sorted(rng.randint(0, 150) for _ in range(rng.randint(0, 25)))
    events = [(0 if rng.random() < 0.15 else t, rng.random() < 0.3) for t in events]
    if events and rng.random() < 0.2:  # a damaged record's time: a TSC past int64 (no limit)
        events.insert(rng.randrange(len(events)), ((1 << 64) - 4096, rng.random() < 0.5))
    n_lost = rng.randint(0, 5)
    lost_ids = list(range(next_id, next_id + n_lost))
    return queues, events, lost_ids


def _parts(rng: random.Random, err, ts, steps, ids):
    """The queue in chunks of a few items, each with the rows of its items (the rows past the last
    item in the last chunk)."""
    a = 0
    r = 0
    while True:
        b = min(len(ts), a + rng.randint(1, 8))
        last = b >= len(ts)
        s = r
        while s < len(steps) and (last or steps[s] < b):
            s += 1
        yield _Part({"kind": np.zeros(s - r, np.int64), "step": np.array(steps[r:s], np.int64),
                     "id": np.array(ids[r:s], np.int64)},
                    np.array(err[a:b], bool), np.array(ts[a:b], np.int64))
        a, r = b, s
        if last:
            return


def _streamed(rng, queues, events, lost_ids, batch_rows):
    sources = [_Source(_parts(rng, *q), COLS, _Stats()) for q in queues]
    lost = {"kind": np.zeros(len(lost_ids), np.int64), "step": np.zeros(len(lost_ids), np.int64),
            "id": np.array(lost_ids, np.int64)}
    merge = StreamMerge(sources, events, lost, batch_rows)
    merge.start()
    out = [b["id"] for b in merge.batches()]
    return np.concatenate(out).tolist() if out else []


def _whole(queues, events, lost_ids):
    queue = [q for q, (_, _, steps, _) in enumerate(queues) for _ in steps] + [-1] * len(lost_ids)
    step = [s for _, _, steps, _ in queues for s in steps] + [0] * len(lost_ids)
    ids = [i for _, _, _, ids in queues for i in ids] + lost_ids
    lost_base = len(ids) - len(lost_ids)
    order = QC.perf_order([(e, t) for e, t, _, _ in queues], events, len(lost_ids), np.array(queue, np.int64),
                          np.array(step, np.int64), lost_base)
    return [ids[i] for i in order.tolist()]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_streamed_rows_come_in_the_whole_queue_order_around_events(compiled, monkeypatch):
    if not compiled:
        monkeypatch.setattr(QC, "merge_turns", getattr(QC.merge_turns, "py_func", QC.merge_turns))
    rng = random.Random(11)
    for case in range(300 if compiled else 80):
        queues, events, lost_ids = _case(rng)
        monkeypatch.setattr(parallel, "MERGE_TURNS", rng.choice((1, 2, 3, 4096)))  # full turn buffers too
        want = _whole(queues, events, lost_ids)
        got = _streamed(rng, queues, events, lost_ids, rng.choice((1, 7, 64, 1 << 16)))
        assert got == want, f"case {case}: {queues=} {events=} {lost_ids=}"


def test_a_lost_event_past_the_last_item_still_places_its_row():
    """Events after every queue ended: the kernel walks them all, stopping at each lost one."""
    queues = [([False, False], [5, 9], [0, 1, 2], [0, 1, 2])]
    events = [(3, True), (20, False), (30, True), (0, True), (40, False)]
    lost_ids = [3, 4]
    got = _streamed(random.Random(1), queues, events, lost_ids, 1 << 16)
    assert got == _whole(queues, events, lost_ids)
    assert got.index(3) == 0  # the first lost row before any item's (its event's TSC is below them)
