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
from ptxtest import needs_perf

pytestmark = pytest.mark.skipif(not decode_proc.available(), reason="no fork on this platform")


def _synth(tmp_path_factory, branches: int) -> str:
    d = tmp_path_factory.mktemp(f"decproc{branches}")
    assert main(["synth", "--out", str(d), "--branches", str(branches), "--seed", "5", "--program", "threads",
                 "--cpus", "2"], out=io.StringIO()) == 0
    return str(d / "perf.data")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return _synth(tmp_path_factory, 3000)


def test_child_decoding_gives_the_in_process_database(trace, tmp_path):
    dbs = []
    for child in (True, False):
        db = tmp_path / f"{child}.sqlite"
        s = export_trace(trace, str(db), ExportConfig(itrace=export_default(), decode_process=child))
        assert s.rows["samples"] > 3000
        dbs.append(dump(db))
    assert dbs[0] == dbs[1]


@pytest.mark.parametrize("ring", [True, False])
def test_batches_cross_the_pipe_intact(trace, monkeypatch, ring):
    """Through the shared-memory ring, or (a batch bigger than a slot) the pipe."""
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session

    if not ring:
        monkeypatch.setattr(decode_proc, "SLOT_BYTES", 1 << 10)  # the forked child inherits it
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
                assert x.flags.aligned and x.flags.writeable, name  # as numpy's own (the kernels want aligned)


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


def test_the_child_does_its_tail_after_the_last_batch(trace):
    """``tail`` runs in the child once it has decoded everything; its result is the future ``proc.tail``,
    set once the child has done it, after the iteration has ended (the VM export's VMCS measurement
    goes there: this process finishes its export meanwhile); a close before that cancels it."""
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session

    with open_perf_data(trace) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default()))
        proc = decode_proc.DecodeProcess(session, batch_rows=500, tail=lambda: (os.getpid(), len(session.queues())))
        assert not proc.tail.done()
        n = sum(len(b) for b in proc)
        pid, queues = proc.tail.result(timeout=60)
        assert n > 3000 and pid != os.getpid() and queues == len(session.queues()) == 2
        early = decode_proc.DecodeProcess(session, batch_rows=100, tail=lambda: 1)
        it = iter(early)
        next(it)
        it.close()
        assert early.tail.cancelled()


def test_the_iteration_ends_before_the_tail_and_a_close_meanwhile_ends_the_child(trace):
    """The last batch ends the iteration at once, while the child still runs its tail; a tail that fails
    is the future's error; a close while the tail runs ends the child (nothing waits for it)."""
    import time

    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session

    def slow():
        time.sleep(1.5)
        return "measured"

    def failing():
        raise ValueError("no VMCS")

    with open_perf_data(trace) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default()))
        proc = decode_proc.DecodeProcess(session, batch_rows=500, tail=slow)
        assert sum(len(b) for b in proc) > 3000
        assert not proc.tail.done()  # the iteration did not wait for it
        assert proc.tail.result(timeout=60) == "measured"
        proc.close()
        bad = decode_proc.DecodeProcess(session, batch_rows=500, tail=failing)
        for _ in bad:
            pass
        with pytest.raises(ValueError, match="no VMCS"):
            bad.tail.result(timeout=60)
        bad.close()
        gone = decode_proc.DecodeProcess(session, batch_rows=500, tail=lambda: time.sleep(60))
        for _ in gone:
            pass
        child = gone._proc
        t = time.perf_counter()
        gone.close()
        assert time.perf_counter() - t < 20 and not child.is_alive()
        assert gone._proc is None and (gone.tail.cancelled() or gone.tail.exception() is not None)


def test_a_vm_export_measures_its_vmcss_in_the_decoding_child(tmp_path):
    """The vcpus rows (VMCS, TSC offset, source) are the same whether the decoding child measures them
    or the export's own thread does."""
    import sqlite3

    d = tmp_path / "vm"
    assert main(["synth", "--out", str(d), "--branches", "6000", "--seed", "3", "--vm", "mixed"],
                out=io.StringIO()) == 0
    rows = []
    for child in (True, False):
        db = tmp_path / f"{child}.sqlite"
        export_trace(str(d / "host.data"), str(db), ExportConfig(itrace=export_default(), decode_process=child))
        with sqlite3.connect(db) as c:
            rows.append(c.execute("SELECT * FROM vcpus ORDER BY id").fetchall())
    assert rows[0] == rows[1] and len(rows[0]) >= 3 and any(r[4] for r in rows[0])  # VMCS values measured


@pytest.fixture(scope="module")
def bigger(tmp_path_factory):
    """Big enough for PSB segments of 256 bytes (40 K branches, ~12 KB of trace per CPU)."""
    return _synth(tmp_path_factory, 40000)


def test_jobs_pick_the_decoding_child(trace, monkeypatch):
    """--jobs 1: one process; N >= 2: a decoding child (N - 1 workers of its own); the environment overrides."""
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session

    monkeypatch.delenv("PTEXPORT_DECODE_PROCESS", raising=False)
    with open_perf_data(trace) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default()))
        assert decode_proc.maybe_process(session, 1) is None
        for jobs, args in ((2, 1), (4, 3)):
            proc = decode_proc.maybe_process(session, jobs)
            assert proc is not None and proc.jobs == args and proc._proc.daemon == (args == 1)
            proc.close()
        assert decode_proc.maybe_process(session, 2, enabled=False) is None
        monkeypatch.setenv("PTEXPORT_DECODE_PROCESS", "0")
        assert decode_proc.maybe_process(session, 2) is None
        monkeypatch.setenv("PTEXPORT_DECODE_PROCESS", "1")
        proc = decode_proc.maybe_process(session, 1)
        assert proc is not None
        proc.close()


def _small_segments(monkeypatch):
    from ptexport.session import parallel

    monkeypatch.setattr(parallel, "MIN_SEGMENT_BYTES", 1 << 8)  # the forked child inherits these
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 1 << 8)


def test_a_decoding_child_with_workers_gives_the_same_database(bigger, tmp_path, monkeypatch):
    _small_segments(monkeypatch)
    dbs = []
    for jobs in (1, 3):
        db = tmp_path / f"j{jobs}.sqlite"
        export_trace(bigger, str(db), ExportConfig(itrace=export_default(), jobs=jobs))
        dbs.append(dump(db))
    assert dbs[0] == dbs[1]


def test_workers_end_with_the_decoding_child(bigger, monkeypatch):
    """The child is killed when the consumer stops; its workers (PR_SET_PDEATHSIG) end with it."""
    import time

    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session

    _small_segments(monkeypatch)

    def children(pid):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    with open_perf_data(bigger) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default()))
        proc = decode_proc.DecodeProcess(session, batch_rows=50, jobs=2)
        it = iter(proc)
        next(it)
        workers = children(proc._proc.pid)
        it.close()
    assert workers, "the child decodes with workers of its own"
    deadline = time.monotonic() + 10
    try:
        while any(_state(w) != "Z" for w in workers):
            assert time.monotonic() < deadline, "workers outlived the decoding child"
            time.sleep(0.05)
    finally:
        for w in workers:  # a failed check leaves no orphans (they ignore SIGTERM)
            try:
                os.kill(w, 9)
            except OSError:
                pass


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@needs_perf
def test_a_vms_batches_are_split_between_machines_in_the_decoding_child(tmp_path):
    """With guest sideband the child hands over batches split already (perf's VM split: machine_pid,
    vcpu, the guest's pid/tid): the same columns as splitting them here, and splitting them again
    changes nothing (a second split would look the guest tids up as host threads)."""
    import numpy as np

    from ptexport.perfdata import open_perf_data
    from ptexport.samples.columns import concat_columns
    from ptexport.session.perfsession import DecodeConfig, open_session
    from guestdatatest import make

    g = make(tmp_path, "mixed", branches=4000)
    with open_perf_data(str(g.inj)) as pd:
        session = open_session(pd, DecodeConfig(itrace=export_default()))
        assert session.sb.has_vms()
        here = [session.vcpu_columns(c) for c in session.iter_batches(batch_rows=700)]
        proc = decode_proc.DecodeProcess(session, batch_rows=700)
        got = list(proc)
        assert len(got) == len(here) > 2
        fields = ("machine_pid", "vcpu", "pid", "tid", "ip", "time")
        for a, b in zip(got, here):
            for name in fields:
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert any((b.machine_pid > 0).any() for b in here)  # guest samples, with their guest threads
        again = [session.vcpu_columns(c) for c in got]
        for a, b in zip(again, here):
            for name in fields:
                assert np.array_equal(getattr(a, name), getattr(b, name)), name
        whole = concat_columns(got)  # a concatenation keeps the split
        assert np.array_equal(whole.machine_pid, np.concatenate([b.machine_pid for b in here]))
        assert np.array_equal(session.vcpu_columns(whole).tid, np.concatenate([b.tid for b in here]))
