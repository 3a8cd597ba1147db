"""A write or a sync failing at a random point of an export (ENOSPC, EIO, EDQUOT), 10 seeds each for
SQLite (any of its writes) and PostgreSQL (any COPY chunk) (issue #18).

SQLite: the export runs with fault_inject.c preloaded, which counts every write of any kind
(Python's file objects, numpy, SQLite's own pages, copy_file_range) and every fsync to the
export's temporaries; a counting run (the session's calibration) gives their number, and each
seed fails one drawn at random, over the whole export: the Nth write (ENOSPC and EDQUOT stay:
every later write fails too, as a disk that stays full; EIO fails that one) or the final fsync.
PostgreSQL: the Nth chunk sent by COPY (binary chunks and text rows, counted in this process)
fails as the server's disk full (SQLSTATE 53100) or I/O error (58030) would.

Each time: exit 74, one line naming the target and the cause, nothing temporary left (no file
beside the target, no lock file, no ``NAME__ptexport_tmp_PID`` database), and a database an
export with ``--force`` was replacing untouched.
"""

from __future__ import annotations

import errno
import itertools
import random
import shutil
import threading

import pytest

from faultstest import (PTEXPORT_SMALL_RUNS, digest, finish, injector_env, main_captured, pg_check_precious,
                        pg_databases, pg_precious, pg_url, read_report, seeds, start)

#: The cause a failing write of each errno is reported with: the OS's (Python's own writes) or
#: SQLite's, which knows ENOSPC as SQLITE_FULL and any other failing write as SQLITE_IOERR.
CAUSES = {
    errno.ENOSPC: ("no space left on device (ENOSPC)", "no space left on device (SQLITE_FULL)"),
    errno.EIO: ("input/output error (EIO)", "I/O error (disk I/O error)"),
    errno.EDQUOT: ("disk quota exceeded (EDQUOT)", "I/O error (disk I/O error)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", seeds(2))
def test_sqlite_write_fails_at_a_random_point(small_trace, sqlite_calibration, injector, tmp_path, seed):
    cal = sqlite_calibration
    rng = random.Random(f"faults/write/sqlite/{seed}")
    kind = "sync" if rng.random() < 0.15 else "write"
    nth = rng.randint(1, cal.syncs if kind == "sync" else cal.writes)
    err = rng.choice(sorted(CAUSES))
    sticky = err != errno.EIO
    jobs = 1 + seed % 2
    previous = rng.random() < 0.5
    case = (f"seed {seed}: {kind} {nth} of {cal.syncs if kind == 'sync' else cal.writes} fails with "
            f"{errno.errorcode[err]}{' from then on' if sticky else ''}, --jobs {jobs}, "
            f"{'a previous database (--force)' if previous else 'no previous database'}")
    d = tmp_path.resolve() / "out"
    d.mkdir()
    target, report = d / "t.db", tmp_path / "report"
    before = None
    if previous:
        shutil.copyfile(cal.db, target)
        before = digest(target)
    env = injector_env(injector, f"{d}/.t.db.ptexport-tmp-", kind=kind, nth=nth, err=err, sticky=sticky,
                       report=report)
    argv = [str(small_trace), "--db", str(target), "--jobs", str(jobs), "-q"] + (["--force"] if previous else [])
    r = finish(start(argv, PTEXPORT_SMALL_RUNS, env=env))
    counted = read_report(report)
    assert counted["fired"] >= 1, (case, counted, r.stderr[-2000:])
    case += f" ({counted['op']})"
    assert r.returncode == 74, (case, r.returncode, r.stderr[-3000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ptexport: error: {target}: "), (case, r.stderr[-3000:])
    assert lines[0].endswith(tuple(f": {c}" for c in CAUSES[err])), (case, lines[0])
    assert sorted(x.name for x in d.iterdir()) == (["t.db"] if previous else []), f"{case}: nothing left"
    if previous:
        assert digest(target) == before, f"{case}: the previous database is untouched"


# ------------------------------------------------------------ PostgreSQL: COPY chunks
def _count_copy(monkeypatch, fail_at: int = 0, error=None) -> list[int]:
    """Count every chunk COPY sends (``Copy.write``, ``Copy.write_row``); with ``fail_at``, that
    one raises ``error`` instead.  Returns [chunks counted, times it failed]."""
    import psycopg

    count = itertools.count(1)
    lock = threading.Lock()  # COPY runs in the writer's background thread
    seen = [0, 0]

    def wrap(orig):
        def f(self, data):
            with lock:
                k = seen[0] = next(count)
            if k == fail_at:
                seen[1] += 1
                raise error
            return orig(self, data)
        return f

    monkeypatch.setattr(psycopg.Copy, "write", wrap(psycopg.Copy.write))
    monkeypatch.setattr(psycopg.Copy, "write_row", wrap(psycopg.Copy.write_row))
    return seen


@pytest.fixture(scope="module")
def copy_chunks(tiny_trace, pg_admin):
    """COPY chunks of an export of the tiny trace (counted in this process)."""
    mp = pytest.MonkeyPatch()
    name = "ptx_faults_copy_chunks"
    try:
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        seen = _count_copy(mp)
        import io

        from ptexport.cli import main

        assert main([str(tiny_trace), "--db", pg_url(name), "-q"], out=io.StringIO()) == 0
    finally:
        mp.undo()
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert seen[0] > 20, seen
    return seen[0]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("seed", seeds(1))
def test_postgres_copy_chunk_fails_at_a_random_point(tiny_trace, copy_chunks, pg_admin, pg_name, monkeypatch, capsys,
                                                      seed):
    import psycopg.errors

    rng = random.Random(f"faults/write/postgres/{seed}")
    nth = rng.randint(1, copy_chunks)
    disk = rng.random() < 0.6
    previous = rng.random() < 0.5
    case = (f"seed {seed}: COPY chunk {nth} of {copy_chunks} fails with "
            f"{'DiskFull' if disk else 'IoError'}, {'a previous database (--force)' if previous else 'none before'}")
    error = (psycopg.errors.DiskFull('could not extend file "base/1/2": No space left on device') if disk
             else psycopg.errors.IoError('could not write to file "base/1/2": Input/output error'))
    if previous:
        pg_precious(pg_admin, pg_name)
    seen = _count_copy(monkeypatch, nth, error)
    url = pg_url(pg_name)
    rc, out, err = main_captured([str(tiny_trace), "--db", url] + (["--force"] if previous else []), capsys)
    assert seen[1] == 1, (case, seen)
    assert rc == 74, (case, rc, err)
    cause = "the server's disk is full" if disk else "I/O error on the server"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ptexport: error: {url}: writing "), (case, err)
    assert lines[0].endswith(f": {cause} ({error})"), (case, err)
    assert pg_databases(pg_admin, pg_name) == ([pg_name] if previous else []), f"{case}: nothing left"
    if previous:
        pg_check_precious(pg_name)
