"""Queue decoding for :meth:`PerfSession.decode`: compiled when possible, in worker processes on request.

:func:`decode_queues` returns one rows object per queue (the session's
``_Rows`` or :class:`ptexport.flow.perffast.FastRows`), in queue order;
:func:`count_samples` is ``dump branches --count``: it decodes everything
and keeps only errors (what perf's failure budget needs) and counts.

With ``jobs`` > 1 queues are decoded in a process pool; each worker opens
the perf.data itself (a job is a small picklable tuple: path, options,
queue number) and returns its rows, so output equals serial decoding.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _decode_one(session: Any, qnum: int, key: tuple[str, int], bufs: list[Any], count_only: bool = False) -> Any:
    from ptexport.flow import perffast

    if perffast.supported(session):
        return perffast.decode_queue_fast(session, qnum, key, bufs, count_only=count_only)
    return session.decode_queue(qnum, key, bufs)


_WORKER: dict[tuple, Any] = {}


def _worker_job(path: str, config: Any, qnum: int, count_only: bool) -> Any:
    """In a worker: open (once per worker) and decode queue ``qnum``."""
    from ptexport.perfdata import open_perf_data
    from ptexport.pipeline.perfsession import open_session

    key = (path, repr(config))
    got = _WORKER.get(key)
    if got is None:
        pd = open_perf_data(path)
        got = _WORKER[key] = (pd, open_session(pd, config))
    session = got[1]
    qkey, bufs = session.queues()[qnum]
    rows = _decode_one(session, qnum, qkey, bufs, count_only)
    if not isinstance(rows.items_err, np.ndarray):
        rows.items_err = np.asarray(rows.items_err, dtype=bool)
        rows.items_ts = np.asarray(rows.items_ts, dtype=np.int64)
    return rows.cols, rows.setup_failures, rows.items_err, rows.items_ts, getattr(rows, "branch_count", 0), \
        _obj_names(session)


def _obj_names(session: Any) -> list[str]:
    names = [""] * len(session._obj_ids)
    for name, i in session._obj_ids.items():
        names[i] = name
    return names


def _decode_all(session: Any, jobs: int | None, count_only: bool) -> list[Any]:
    queues = session.queues()
    jobs = default_jobs() if jobs is None else max(1, jobs)
    path = getattr(session.pd, "path", None)
    if jobs == 1 or len(queues) < 2 or not path or not os.path.exists(str(path)):
        return [_decode_one(session, q, key, bufs, count_only) for q, (key, bufs) in enumerate(queues)]
    from concurrent.futures import ProcessPoolExecutor

    from ptexport.flow.perffast import FastRows

    out = []
    with ProcessPoolExecutor(max_workers=min(jobs, len(queues))) as pool:
        futs = [pool.submit(_worker_job, str(path), session.cfg, q, count_only) for q in range(len(queues))]
        for fut in futs:
            cols, setup, ierr, its, nbr, names = fut.result()
            # Object ids are per process: map them to this session's.
            remap = np.array([session._obj_id(n) for n in names] + [-1], dtype=np.int64)
            cols["obj"] = np.where(np.asarray(cols["obj"]) >= 0, remap[np.asarray(cols["obj"], dtype=np.int64)], -1)
            out.append(FastRows(cols, [int(remap[i]) for i in setup], ierr, its, nbr))
    return out


def decode_queues(session: Any, jobs: int | None = 1) -> list[Any]:
    """Every queue of ``session`` decoded, in queue order."""
    return _decode_all(session, jobs, False)


def count_samples(session: Any, jobs: int | None = 1) -> tuple[int, int]:
    """(samples, errors) that ``session.decode(jobs)`` would return, without keeping the samples."""
    from ptexport.flow import perffast
    from ptexport.flow.perffast_kernel import K_BUDGET
    from ptexport.pipeline.perfsession import EV_ERROR

    if not perffast.supported(session):
        cols = session.decode(jobs)
        n_err = int((cols.kind == EV_ERROR).sum())
        return len(cols) - n_err, n_err
    parts = _decode_all(session, jobs, True)
    kinds = [np.asarray(p.cols["kind"]) for p in parts]
    if any((k == K_BUDGET).any() for k in kinds):
        # Silent failures share perf's per-object budget with reported ones: order matters.
        cols = session.decode(jobs)
        n_err = int((cols.kind == EV_ERROR).sum())
        return len(cols) - n_err, n_err
    # perf reports an object's first two failures (setup failures included): order-free here.
    budget: dict[int, int] = {}
    for p in parts:
        for obj in p.setup_failures:
            budget[obj] = budget.get(obj, 0) + 1
    n_err = len(session.lost_data_rows())
    for p, k in zip(parts, kinds):
        objs = np.asarray(p.cols["obj"])[k == EV_ERROR]
        n_err += int((objs < 0).sum())
        for obj in objs[objs >= 0].tolist():
            n = budget.get(obj, 0) + 1
            budget[obj] = n
            if n <= 2:
                n_err += 1
    return sum(p.branch_count for p in parts), n_err
