"""The compiled bulk decoder gives exactly the pure-Python decoder's columns and errors."""

from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import LIBIPT
from ptexport.pt.errata import Errata
from ptexport.pt.fastdecode import decode_columns_fast
from ptexport.pt.packets import decode_columns


def _same(buf: bytes, errata=None, sync=True):
    a, ea = decode_columns(buf, errata, sync=sync)
    b, eb = decode_columns_fast(buf, errata, sync=sync)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert [(e.offset, e.reason) for e in ea] == [(e.offset, e.reason) for e in eb]
    return len(a["offset"])


def test_corpus_buffers_identical(libipt_dir):
    total = 0
    for f in sorted((libipt_dir / "ptt").glob("*.pt")):
        buf = f.read_bytes()
        total += _same(buf)
        total += _same(buf, Errata(skd007=True, skz84=True), sync=False)
    assert total > 3000


def test_mutated_buffers_identical():
    rng = random.Random(7)
    files = sorted((LIBIPT / "ptt").glob("*.pt"))
    if not files:
        pytest.skip("no corpus")
    for i in range(300):
        b = bytearray(rng.choice(files).read_bytes())
        for _ in range(rng.randint(1, 5)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        b += bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
        _same(bytes(b), Errata(skd007=bool(i & 1), skz84=bool(i & 2)), sync=bool(i & 4))
