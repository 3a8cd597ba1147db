"""The *_time_blocks zone maps of a batch, compiled (``Writer._note_time_blocks``).

A batch of samples or calls is split into its blocks (``id >> shift``) in two walks over its ids (the
range of its blocks, then each block's minimum and maximum of one time column and the maximum of
another, in a table of that range): what numpy does in a dozen passes and, for calls (their ids in
the order they return), a stable sort and a gather per column, which took 0.7 s of the exporting
thread at 10 M samples.  Without numba, or for blocks far apart, the writer keeps its numpy form
(same values).
"""

from __future__ import annotations

import numpy as np

from ptexport.jit import numba

if numba is not None:

    @numba.njit(cache=True, nogil=True)
    def _extents(ids, a, b, shift, max_span):  # pragma: no cover - compiled
        """(blocks, stats[k] = (min a, max a, max b), ok) of the ids > 0, in block order; ok False
        (nothing computed) when the blocks span more than ``max_span``."""
        n = ids.shape[0]
        lo = np.int64(-1)
        hi = np.int64(-1)
        for i in range(n):
            v = ids[i]
            if v > 0:
                blk = v >> shift
                if lo < 0 or blk < lo:
                    lo = blk
                if blk > hi:
                    hi = blk
        if lo < 0 or hi - lo + 1 > max_span:
            return np.empty(0, np.int64), np.empty((0, 3), np.int64), lo < 0
        span = hi - lo + 1
        seen = np.zeros(span, np.bool_)
        acc = np.empty((span, 3), np.int64)
        for i in range(n):
            v = ids[i]
            if v <= 0:
                continue  # the id-0 "unknown" row
            k = (v >> shift) - lo
            x = a[i]
            y = b[i]
            if not seen[k]:
                seen[k] = True
                acc[k, 0] = x
                acc[k, 1] = x
                acc[k, 2] = y
            else:
                if x < acc[k, 0]:
                    acc[k, 0] = x
                if x > acc[k, 1]:
                    acc[k, 1] = x
                if y > acc[k, 2]:
                    acc[k, 2] = y
        m = 0
        for k in range(span):
            if seen[k]:
                m += 1
        blocks = np.empty(m, np.int64)
        stats = np.empty((m, 3), np.int64)
        j = 0
        for k in range(span):
            if seen[k]:
                blocks[j] = lo + k
                stats[j, 0] = acc[k, 0]
                stats[j, 1] = acc[k, 1]
                stats[j, 2] = acc[k, 2]
                j += 1
        return blocks, stats, True


def block_extents(ids: np.ndarray, a: np.ndarray, b: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Per block (``id >> shift``) of the ids > 0, in block order: ``(blocks, stats)`` with
    ``stats[:, 0]`` = min of ``a``, ``stats[:, 1]`` = max of ``a``, ``stats[:, 2]`` = max of ``b``
    (``ids``, ``a``, ``b``: contiguous int64 columns of one length, ids in any order).  None without
    numba, or when the batch's blocks lie so far apart (calls taken late in a VM export) that a
    table of them all would be larger than the batch."""
    if numba is None:
        return None
    blocks, stats, ok = _extents(ids, a, b, shift, len(ids) + 64)
    return (blocks, stats) if ok else None
