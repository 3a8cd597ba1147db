"""A merged batch gathered from the pieces of several source chunks (a VM trace's queues take turns
every few dozen rows): the rows in order, each column's dtype kept, whatever the columns' widths."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ptexport.session import parallel
from ptexport.session import queues_compiled as QC


def _chunk(rng: random.Random, n: int, odd: bool) -> dict[str, np.ndarray]:
    cols = {
        "kind": np.array([rng.randrange(10) for _ in range(n)], np.int64),
        "ip": np.array([rng.randrange(1 << 64) for _ in range(n)], np.uint64),
        "time": np.arange(n, dtype=np.int64) * rng.randrange(1, 9),
    }
    if odd:  # another width, and a column that is a strided view
        cols["flag"] = np.array([rng.random() < 0.5 for _ in range(n)], np.bool_)
        cols["step"] = np.arange(2 * n, dtype=np.int64)[::2]
    return cols


def _pieces(rng: random.Random, chunks: list[dict[str, np.ndarray]]) -> list[tuple[dict, int, int]]:
    at = [0] * len(chunks)
    out = []
    while True:
        live = [i for i, c in enumerate(chunks) if at[i] < len(c["kind"])]
        if not live:
            return out
        i = rng.choice(live)
        m = min(rng.randrange(1, 90), len(chunks[i]["kind"]) - at[i])
        out.append((chunks[i], at[i], at[i] + m))
        at[i] += m


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("compiled", [True, False])
def test_gathered_rows_are_the_pieces_in_order(seed, compiled, monkeypatch):
    rng = random.Random(seed)
    odd = seed % 2 == 1
    chunks = [_chunk(rng, rng.randrange(1, 3000), odd) for _ in range(1 + seed % 4)]
    pieces = _pieces(rng, chunks)
    n = sum(b - a for _, a, b in pieces)
    if not compiled:
        monkeypatch.setattr(QC, "numba", None)  # every column by the fancy index
    got = parallel._gather(pieces, n)
    for k in chunks[0]:
        want = np.concatenate([c[k][a:b] for c, a, b in pieces])
        assert got[k].dtype == want.dtype and len(got[k]) == n
        assert np.array_equal(got[k], want), k


def test_copy_runs_copies_each_run():
    src = np.arange(100, dtype=np.int64)
    dst = np.full(12, -1, np.int64)
    QC.copy_runs(dst, src, np.array([5, 50, 90]), np.array([3, 0, 4]), np.array([0, 3, 3]))
    assert dst[:7].tolist() == [5, 6, 7, 90, 91, 92, 93] and (dst[7:] == -1).all()


def test_read_only_chunks_are_gathered_too():
    """A cluster worker's columns may arrive read-only (unpickled from bytes): the same rows."""
    rng = random.Random(9)
    chunks = [_chunk(rng, 500, False) for _ in range(2)]
    for c in chunks:
        for v in c.values():
            v.flags.writeable = False
    pieces = _pieces(rng, chunks)
    n = sum(b - a for _, a, b in pieces)
    got = parallel._gather(pieces, n)
    for k in chunks[0]:
        assert np.array_equal(got[k], np.concatenate([c[k][a:b] for c, a, b in pieces])), k
