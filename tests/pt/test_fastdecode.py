"""The compiled bulk decoder gives exactly the pure-Python decoder's columns and errors."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ptxtest import LIBIPT
from ptexport.pt.errata import Errata
from ptexport.pt import packets_compiled
from ptexport.pt.packets import decode_columns


def _same(buf: bytes, errata=None, sync=True):
    a, ea = decode_columns(buf, errata, sync=sync)
    b, eb = packets_compiled.decode_columns(buf, errata, sync=sync)
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


def test_perf_timestamps_columns_equal_perftime(quipper):
    from ptexport.pt.packets_compiled import perf_timestamps
    from ptexport.pt.packets import PacketKind as K
    from ptexport.pt.time import PerfTime

    try:
        from ptexport.perfdata import AuxtraceRecord, open_perf_data
    except ImportError:  # pragma: no cover
        pytest.skip("perf.data reader not available")
    checked = 0
    with open_perf_data(quipper) as pd:
        for rec in pd.records():
            if not isinstance(rec, AuxtraceRecord):
                continue
            buf = bytes(pd.aux_data(rec))
            cols, _ = packets_compiled.decode_columns(buf)
            for n, d, shift in ((100, 2, 3), (7, 3, 3), (100, 2, 9)):
                t = PerfTime(n, d, shift, rec.reference)
                ts = perf_timestamps(cols, n, d, shift, rec.reference)
                tsl = ts.tolist()
                for i, (k, a, b) in enumerate(zip(cols["kind"].tolist(), cols["p0"].tolist(),
                                                  cols["p1"].tolist())):
                    if k == K.TSC:
                        t.update_tsc(a)
                    elif k == K.TMA:
                        t.update_tma(a, b)
                    elif k == K.MTC:
                        t.update_mtc(a)
                    assert tsl[i] == t.timestamp
                    checked += 1
    assert checked > 200000
