"""The compiled perf-script line writer equals the f-string reference on every value class."""

from __future__ import annotations

import numpy as np
import pytest

from ptexport.samples import text, text_compiled as textfast
from ptexport.samples.columns import EV_BRANCH, EV_ERROR, SampleColumns
pytestmark = pytest.mark.skipif(textfast.numba is None, reason="the compiled writer needs numba")


def _columns(n: int, seed: int, error_share: float, vm: bool) -> SampleColumns:
    rng = np.random.default_rng(seed)
    zeros = np.zeros(n, np.int64)
    kinds = np.where(rng.random(n) < error_share, EV_ERROR, rng.choice([EV_BRANCH, EV_BRANCH, 3, 5, 7], n))

    def u64():  # the whole range: user, kernel (top bit set), zero, one
        wide = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) * np.uint64(2)
        edge = rng.choice(np.array([0, 1, 0xffffffff81000000, 2**64 - 1], np.uint64), n)
        return np.where(rng.random(n) < 0.7, wide, edge)

    return SampleColumns(
        kind=kinds, tsc=zeros, time=rng.choice([0, 1, 999_999_999, 10**9, 123_456_789_012_345_678, 2**62], n),
        cpu=rng.choice([-1, 0, 3, 12, 999, 1000], n), pid=rng.choice([-1, 0, 1, 12345, 99999, 123456, -12345], n),
        tid=rng.choice([-1, 0, 7, 123456], n), ip=u64(), addr=u64(),
        flags=rng.choice([0, 0x2, 0x6, 0x10, 0x41, 0x202, 0x1000, 0x4002], n), insn_cnt=zeros, cyc_cnt=zeros,
        period=zeros, code=rng.choice([1, 5, 7, 99], n), payload=zeros, queue=zeros, offset=zeros, nr=zeros,
        insn_len=zeros, trace_nr=zeros,
        machine_pid=rng.choice([0, 0, 5, 123456, -3], n) if vm else None,
        vcpu=rng.choice([-1, 0, 3, 1000], n) if vm else None)


@pytest.mark.parametrize("seed,error_share,vm", [(1, 0.0, False), (2, 0.001, False), (3, 0.3, True),
                                                 (4, 1.0, True), (5, 0.01, True)])
def test_compiled_lines_equal_the_reference(seed, error_share, vm):
    cols = _columns(5000, seed, error_share, vm)
    fast, ref = textfast.sample_lines(cols), text.sample_lines(cols)
    assert fast == ref
    assert fast.count("\n") == 5000


def test_an_empty_batch_writes_nothing():
    assert textfast.sample_lines(_columns(0, 1, 0.0, False)) == ""
