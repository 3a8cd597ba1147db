"""An error in one of the exporting process's own threads (the aggregates', the call tree's) ends the
export as any error does: one line, exit 1, no database, no thread left behind."""

from __future__ import annotations

import threading

import pytest

from ptexport.cli import main
from ptexport.dbexport import exporter
from ptexport.errors import PtExportError


@pytest.fixture(scope="module")
def trace(synth_trace):
    return synth_trace("--program", "threads", "--cpus", "2", "--branches", "150000", "--seed", "3") / "perf.data"


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("ptexport-")}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_aggregates_error_ends_the_export_cleanly(trace, tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.setattr(exporter, "_THREAD_MAX", 0)  # every thread id past what sample_stats' key holds
    db = tmp_path / "x.sqlite"
    before = _threads()
    assert main([str(trace), "--db", str(db), "-q", "--jobs", jobs]) == 1
    err = capsys.readouterr().err
    assert "sample_stats: more threads" in err and "--no-aggregates" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    assert _threads() <= before
    # and the way out it names works
    assert main([str(trace), "--db", str(db), "-q", "--jobs", jobs, "--no-aggregates"]) == 0


def test_a_call_tree_error_ends_the_export_cleanly(trace, tmp_path, monkeypatch, capsys):
    from ptexport.calltree import threadstack_compiled

    def broken(self, tree):
        raise PtExportError("call tree: a stack deeper than it holds")

    monkeypatch.setattr(threadstack_compiled.CallTree, "process_batch", broken)
    db = tmp_path / "y.sqlite"
    before = _threads()
    assert main([str(trace), "--db", str(db), "-q", "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    assert "call tree: a stack deeper" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    assert _threads() <= before
