"""perf's auxtrace queue heap on ties: which of two CPUs at the same timestamp perf decodes first.

Found by the parity test on three threads on three CPUs: perf 6.1's ``auxtrace_heap__pop``
(tools/perf/util/auxtrace.c) compares the two children of the hole with ``<`` and takes the
right one on a tie, also when the right one is the heap's last item; ptexport took the left
one there, so samples of two CPUs at one timestamp came out in the other order (and the
exported sample ids, call_id/return_id with them).
"""

from __future__ import annotations

import io
import random
import subprocess

import numpy as np

from ptxtest import needs_perf
from ptexport.cli import main
from ptexport.session.queues_compiled import _pop, _push
from ptexport.session.queues import PerfQueueHeap


def _model_pop(a: list[list[int]]) -> None:
    """perf's pop, step by step: the hole walks down (ties right), a lone left child fills it,
    else the last item is sifted up from the hole."""
    n = len(a)
    pos = 0
    while 2 * pos + 1 < n:
        left, right = 2 * pos + 1, 2 * pos + 2
        if right >= n:
            a[pos] = a[left]
            a.pop()
            return
        child = left if a[left][0] < a[right][0] else right
        a[pos] = a[child]
        pos = child
    last = a.pop()
    if pos < n - 1:
        while pos and a[(pos - 1) >> 1][0] > last[0]:
            a[pos] = a[(pos - 1) >> 1]
            pos = (pos - 1) >> 1
        a[pos] = last


def test_tie_with_the_last_item_goes_right():
    h = PerfQueueHeap()
    for q, ordinal in ((0, 5), (1, 9), (2, 9)):
        h.push(q, ordinal)
    h.pop_top()
    assert [q for _, q in h] == [2, 1]  # perf: queue 2 (the right child, last) runs first


def test_heaps_equal_perfs_on_random_ties():
    rng = random.Random(7)
    for _ in range(300):
        h, model = PerfQueueHeap(), []
        hord, hq, n = np.zeros(256, np.int64), np.zeros(256, np.int64), 0  # at most 200 items
        for _ in range(200):
            if n and rng.random() < 0.45:
                h.pop_top()
                n = _pop(hord, hq, n)
                _model_pop(model)
            else:
                q, ordinal = rng.randrange(16), rng.randrange(4)  # few ordinals: many ties
                h.push(q, ordinal)
                n = _push(hord, hq, n, q, ordinal)
                # the model's add is perf's heapify: up past strictly larger ordinals only
                model.append([ordinal, q])
                pos = len(model) - 1
                while pos and model[(pos - 1) >> 1][0] > ordinal:
                    model[pos] = model[(pos - 1) >> 1]
                    pos = (pos - 1) >> 1
                model[pos] = [ordinal, q]
            assert [list(x) for x in h] == model
            assert list(zip(hord[:n].tolist(), hq[:n].tolist())) == [tuple(x) for x in model]


@needs_perf
def test_three_cpus_same_timestamp_order_equals_perf_script(tmp_path):
    """Three threads starting on three CPUs: two CPUs reach one timestamp together."""
    d = tmp_path / "t"
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "3", "--timing", "mtc",
                 "--branches", "20k", "--seed", "5"], out=io.StringIO()) == 0
    perf = subprocess.run(["perf", "script", "-i", str(d / "perf.data"), "--itrace=b", "-F", "cpu,ip,addr"],
                          capture_output=True, text=True, check=True, timeout=300).stdout
    theirs = [(int(f[0].strip("[]")), int(f[1], 16), int(f[3], 16)) for f in (ln.split() for ln in perf.splitlines())]
    out = io.StringIO()
    assert main(["dump", "branches", "--itrace", "b", "--csv", str(d / "perf.data")], out=out) == 0
    ours = [(int(f[1]), int(f[4]), int(f[5])) for f in (ln.split(",") for ln in out.getvalue().splitlines()[1:])]
    assert len(theirs) > 10_000
    assert ours == theirs
    # the case is there: samples of two CPUs at one timestamp, interleaved by queue
    cpus = [c for c, _, _ in ours]
    assert sum(1 for a, b in zip(cpus, cpus[1:]) if a != b) > 10
