"""Decoding in a forked child (pipeline/decode_proc.py): same database as in-process, errors raised in the parent."""

from __future__ import annotations

import io
import os

import pytest

from ptexport.cli import main
from ptexport.errors import PtExportError
from ptexport.session import decode_proc
from ptexport.dbexport.exporter import ExportConfig
from ptexport.session.export import export_trace
from ptexport.session.perfsession import PerfSession
from ptexport.samples.itrace import export_default

from dbexport.test_export_fast_vs_ref import dump

pytestmark = pytest.mark.skipif(not decode_proc.available(), reason="no fork on this platform")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("decproc")
    assert main(["synth", "--out", str(d), "--branches", "3000", "--seed", "5", "--program", "threads", "--cpus", "2"],
                out=io.StringIO()) == 0
    return str(d / "perf.data")


def test_child_decoding_gives_the_in_process_database(trace, tmp_path):
    dbs = []
    for child in (True, False):
        db = tmp_path / f"{child}.sqlite"
        s = export_trace(trace, str(db), ExportConfig(itrace=export_default(), decode_process=child))
        assert s.rows["samples"] > 3000
        dbs.append(dump(db))
    assert dbs[0] == dbs[1]


def test_batches_cross_the_pipe_intact(trace):
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session

    with open_perf_data(trace) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default()))
        direct = list(session.iter_batches(batch_rows=1000))
        proc = decode_proc.DecodeProcess(session, batch_rows=1000)
        got = list(proc)
    assert len(got) == len(direct) > 2
    for a, b in zip(got, direct):
        for name in decode_proc._FIELDS:
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None) == (y is None), name
            if x is not None:
                assert x.dtype == y.dtype and (x == y).all(), name


def test_error_in_child_is_raised_in_parent_and_no_database_is_left(trace, tmp_path, monkeypatch):
    real = PerfSession.iter_batches

    def failing(self, *a, **k):
        it = real(self, *a, **k)
        yield next(it)
        raise PtExportError("bad packet at aux cpu 0+0x40: opcode 0xd3")

    monkeypatch.setattr(PerfSession, "iter_batches", failing)  # the forked child inherits it
    db = tmp_path / "x.sqlite"
    with pytest.raises(PtExportError, match="aux cpu 0"):
        export_trace(trace, str(db), ExportConfig(itrace=export_default(), decode_process=True))
    assert not db.exists()
    assert not [p for p in os.listdir(tmp_path) if "ptexport-tmp" in p]


def test_closing_early_ends_the_child(trace):
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session

    with open_perf_data(trace) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default()))
        proc = decode_proc.DecodeProcess(session, batch_rows=100)
        child = proc._proc
        it = iter(proc)
        next(it)
        it.close()  # the consumer stops (e.g. an export error)
    assert not child.is_alive()
    assert proc._proc is None
