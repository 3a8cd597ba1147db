"""A VM batch's runs asked a thread at a time (samples_compiled._VmRuns) against the run-by-run walk
through ThreadMemo: the same asks of the machine model, in the same order, and the same answers, also
where an ask creates a thread or a row mid-segment, a thread's pid is still unknown, or records and
errors cut the runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from ptexport.dbexport.samples_compiled import _VmRuns
from ptexport.dbexport.vm import ThreadMemo


@dataclass
class _Ids:
    next_id: int = 1


@dataclass
class _Model:
    threads: _Ids = field(default_factory=_Ids)
    comms: _Ids = field(default_factory=_Ids)
    comm_threads: _Ids = field(default_factory=_Ids)


@dataclass
class _Thread:
    pid: int
    db_id: int
    comm: int


class _Threads:
    def __init__(self) -> None:
        self.all: list[_Thread] = []
        self.by_tid: dict[int, _Thread] = {}
        self.pid_fixes = 0


class _Machine:
    """MachineState.threads as the memo sees it: creates threads (and their comm rows) on first ask;
    a thread first asked with pid -1 keeps it until asked with a pid; every ask is logged."""

    def __init__(self, model: _Model, mi: int, log: list, comm_every: int) -> None:
        self.m, self.mi, self.log, self.comm_every = model, mi, log, comm_every
        self.pt = _Threads()
        self.asks = 0

    def threads(self, pid: int, tid: int) -> tuple[int, int]:
        self.log.append((self.mi, pid, tid))
        self.asks += 1
        th = self.pt.by_tid.get(tid)
        if th is None:
            th = _Thread(pid, self.m.threads.next_id, self.m.comms.next_id)
            self.m.threads.next_id += 1
            self.m.comms.next_id += 1
            self.pt.all.append(th)
            self.pt.by_tid[tid] = th
        elif th.pid == -1 and pid != -1:
            th.pid = pid
            self.pt.pid_fixes += 1
        if self.comm_every and self.asks % self.comm_every == 0:
            self.m.comm_threads.next_id += 1  # a row made by an ask of a known thread
        return th.db_id, th.comm


def _walk(keys, err, cuts, fast, comm_every):
    """(asks, thread ids, comm ids) of walking the runs ``keys`` ((mi, pid, tid) each) in order."""
    model, log = _Model(), []
    machines = [_Machine(model, 0, log, comm_every), _Machine(model, 1, log, comm_every)]
    n = len(keys)
    mi, pid, tid = (np.array([k[j] for k in keys], np.int64) for j in range(3))
    starts = np.arange(n, dtype=np.int64) * 3
    err = np.array(err, bool)
    memo = ThreadMemo(model)
    runs = _VmRuns(memo, starts, mi, pid, tid, err, starts[cuts])
    th, comm = np.zeros(n, np.int64), np.zeros(n, np.int64)
    cut_set = set(cuts)
    k = 0
    while k < n:
        if k in cut_set:
            memo.clear()
        if err[k]:
            k += 1
            continue
        if fast and runs.next_stop[k] - k > 1:
            k = runs.walk(machines, k, th, comm)
            continue
        th[k], comm[k] = memo.threads(machines[keys[k][0]], *keys[k])
        k += 1
    return log, th.tolist(), comm.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_thread_at_a_time_equals_run_by_run(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    pool = [(int(rng.integers(0, 2)), int(rng.choice([-1, 10, 20])), int(t)) for t in rng.integers(1, 12, 8)]
    keys = [pool[i] for i in rng.integers(0, len(pool), n)]  # new threads appear mid-batch
    err = (rng.random(n) < rng.choice([0.0, 0.02, 0.2])).tolist()
    cuts = sorted(set(rng.integers(0, n, int(rng.integers(0, 6))).tolist()))
    comm_every = int(rng.choice([0, 0, 7, 50]))
    want = _walk(keys, err, cuts, False, comm_every)
    assert _walk(keys, err, cuts, True, comm_every) == want


def test_steady_threads_are_asked_once_per_segment():
    """Two threads alternating for 1000 runs, known before: one ask each per segment, not per run."""
    keys = [(1, 10, 11), (0, 20, 21)] * 500
    model = _Model()
    log: list = []
    machines = [_Machine(model, 0, log, 0), _Machine(model, 1, log, 0)]
    memo = ThreadMemo(model)
    for mi, p, t in keys[:3]:  # the second ask of the first thread: after the other's creation
        memo.threads(machines[mi], mi, p, t)
    log.clear()
    n = len(keys)
    arr = np.array(keys, np.int64)
    runs = _VmRuns(memo, np.arange(n, dtype=np.int64), arr[:, 0], arr[:, 1], arr[:, 2], np.zeros(n, bool),
                   np.array([400], np.int64))
    th, comm = np.zeros(n, np.int64), np.zeros(n, np.int64)
    assert runs.walk(machines, 0, th, comm) == 400
    memo.clear()
    assert runs.walk(machines, 400, th, comm) == n
    assert log == [(1, 10, 11), (0, 20, 21)]  # the memo answered the first segment; the record cleared it
    assert th.tolist() == [1, 2] * 500


@pytest.mark.parametrize("n", [1, 2, 7, 300, 5000])
def test_key_ids_number_the_distinct_tuples_as_np_unique(n):
    from ptexport.dbexport.samples_compiled import _key_ids

    rng = np.random.default_rng(n)
    cols = (rng.integers(0, 2, n), rng.integers(-1, 3, n), rng.integers(0, 1 << 40, n) % 5)
    want = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)[1].reshape(-1)
    assert _key_ids(*cols).tolist() == want.tolist()
