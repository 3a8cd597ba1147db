"""``few_distinct`` is ``np.unique`` (values, order, dtype), however many values turn up."""

from __future__ import annotations

import numpy as np
import pytest

from ptexport.samples.columns import few_distinct


@pytest.mark.parametrize("k", [1, 2, 3, 16, 17, 100])
@pytest.mark.parametrize("n", [0, 1, 5, 70_000])
def test_few_distinct_is_np_unique(k, n):
    rng = np.random.default_rng(k * 1000 + n)
    for dtype in (np.int64, np.int32, np.uint64):
        a = (rng.integers(0, k, n) * 1000 + 7).astype(dtype)
        got, want = few_distinct(a), np.unique(a)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(few_distinct(np.full(9, -3)), [-3])
