"""--itrace=sN in the session (``PerfSession._initial_skip_keep``): the batch-at-a-time form equals the
row-at-a-time rule it replaced (perf's: the first N synthesized samples dropped, errors not counted, a CBR
held back while fewer than N - 4 were skipped and dropped when its ratio repeats the queue's last), on
random batches carried one into the next.  The rule itself is held against perf and the reference
decoder in tests/oracle_perf/test_perf_parity_variants.py and tests/decoder/test_perffast.py."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ptexport.samples.columns import EV_CBR, EV_ERROR
from ptexport.session.perfsession import PerfSession


def _one_row_at_a_time(cols, skip, state):
    kinds = cols["kind"].tolist()
    keep = np.ones(len(kinds), bool)
    seen = state.setdefault("cbr", {})
    n = state.get("n", 0)
    for i, k in enumerate(kinds):
        if k < 0 or k == EV_ERROR:
            continue
        if k == EV_CBR:
            q, cbr = int(cols["queue"][i]), int(cols["payload"][i]) & 0xFF
            if seen.get(q) == cbr or (cols["code"][i] and n + 4 < skip):
                keep[i] = False
            else:
                seen[q] = cbr
            continue
        if n < skip:
            keep[i] = False
            n += 1
    state["n"] = n
    cols["code"][cols["kind"] == EV_CBR] = 0
    return keep


@pytest.mark.parametrize("seed", range(30))
def test_batches_keep_what_rows_one_at_a_time_keep(seed):
    rng = random.Random(seed)
    skip = rng.choice([0, 1, 3, 5, 17, 100, 1000, (1 << 64) - 1])
    kinds_pool = [0, 1, 2, EV_ERROR, EV_CBR, EV_CBR, -1]
    states = ({}, {})
    for _ in range(rng.randrange(1, 8)):
        n = rng.randrange(0, 300)
        cols = {"kind": np.array([rng.choice(kinds_pool) for _ in range(n)], dtype=np.int64),
                "queue": np.array([rng.randrange(3) for _ in range(n)], dtype=np.int64),
                "payload": np.array([rng.choice([0x1510, 0x2020, 0x2a2a, 0x1520]) for _ in range(n)], dtype=np.int64),
                "code": np.array([rng.randrange(2) for _ in range(n)], dtype=np.int64)}
        theirs = {k: v.copy() for k, v in cols.items()}
        want = _one_row_at_a_time(theirs, skip, states[0])
        got = PerfSession._initial_skip_keep(cols, skip, states[1])
        assert got.tolist() == want.tolist()
        assert cols["code"].tolist() == theirs["code"].tolist()
        assert states[0] == states[1]
