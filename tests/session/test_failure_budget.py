"""perf's per-object budget of reported code-read failures (PerfSession._budget_keep).

perf 6.1 reads an object's code through its data cache: the first failed read marks the object
unreadable (DSO_DATA_STATUS_ERROR), the next one still reads (and is reported: the "seen" flag is set
then), later ones do not read and report nothing.  An object marked unreadable before its first PT
read - by perf script's instruction fetch at a sample it prints, or a [vdso] mmap's ELF-class probe -
so reports one failure.  Real recordings show both: perf-quipper's libselinux.so.1 (fetched at an
asynchronous 'hw int' sample before its first read: one report) and libpcre.so.1.2.8 (two).
"""

from __future__ import annotations

import numpy as np

from ptexport.samples.columns import EV_BRANCH, EV_ERROR
from ptexport.session.perfsession import PerfSession


def _cols(rows):
    """rows: (kind, obj) in perf's order."""
    kind = np.array([k for k, _ in rows], np.int64)
    return {"kind": kind, "obj": np.array([o for _, o in rows], np.int64), "tsc": np.zeros(len(rows), np.int64)}


def _kept_failures(rows, fetched=None, marks=None, when=None):
    cols = _cols(rows)
    f = None if fetched is None else np.array(fetched, np.int64)
    keep = PerfSession._perf_failure_budget(cols, [], marks, when, f)
    return [i for i, (k, o) in enumerate(rows) if o >= 0 and keep[i]]


def test_two_failures_reported_then_silence():
    rows = [(EV_ERROR, 7)] * 4
    assert _kept_failures(rows) == [0, 1]


def test_a_fetch_before_the_first_read_leaves_one_report():
    rows = [(EV_BRANCH, -1), (EV_ERROR, 7), (EV_ERROR, 7), (EV_ERROR, 3), (EV_ERROR, 3)]
    fetched = [7, -1, -1, -1, -1]  # the sample's instruction fetch marks object 7
    assert _kept_failures(rows, fetched) == [1, 3, 4]


def test_a_fetch_after_a_failure_changes_nothing():
    rows = [(EV_ERROR, 7), (EV_BRANCH, -1), (EV_ERROR, 7), (EV_ERROR, 7)]
    assert _kept_failures(rows, [-1, 7, -1, -1]) == [0, 2]


def test_fetches_carry_over_batches():
    seen: dict[int, int] = {}
    a = _cols([(EV_BRANCH, -1)])
    PerfSession._budget_keep(a, seen, None, None, np.array([5], np.int64))
    b = _cols([(EV_ERROR, 5), (EV_ERROR, 5)])
    keep = PerfSession._budget_keep(b, seen, None, None, None)
    assert keep.tolist() == [True, False]


def test_marks_compare_with_the_rows_decode_time():
    """A timeless session's rows carry no time: a mark counts for the rows of a queue decoded after it."""
    rows = [(EV_ERROR, 9), (EV_ERROR, 9)]
    assert _kept_failures(rows, marks={9: 50}, when=np.array([40, 40])) == [0, 1]
    assert _kept_failures(rows, marks={9: 50}, when=np.array([60, 60])) == [0]
