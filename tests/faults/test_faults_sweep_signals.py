"""SIGINT, SIGTERM and SIGKILL at a random moment of an export, 10 seeds each, into SQLite and
into PostgreSQL (issue #18).

Each seed draws, from its own random generator: the moment (a fraction of the export's duration,
measured once per session from main() installing its signal handlers to the exit), ``--jobs 1``
or ``2`` (by the seed's parity), whether a previous database is there (replaced with
``--force``) and whether the signal goes to the export alone or to its whole process group.
After the signal: exit 128 + N and one line (SIGKILL: killed by it), no complete-looking
database (the target absent, or the previous one byte-identical / with its content), nothing
temporary left by a SIGINT or SIGTERM.  Then a rerun (``--force`` only if there was a previous
database) succeeds, removes what a SIGKILL left (files beside the target, the lock file,
``NAME__ptexport_tmp_PID`` databases) and writes a complete database.

Should the export end before the signal (a faster machine than the measure), the run must be
complete and the seed is tried again at half the delay.  By default the first seed of each
signal runs into SQLite and into PostgreSQL; all ten of each run with ``-m soak``.
"""

from __future__ import annotations

import random
import shutil
import signal
import time

import pytest

from faultstest import (PTEXPORT, PTEXPORT_SMALL_RUNS, catches, digest, finish, looks_complete, main_captured,
                        pg_check_precious, pg_databases, pg_precious, pg_samples, pg_url, pg_wait_released, seeds,
                        sqlite_samples, start, tmp_files, wait_for)

LINES = {signal.SIGINT: "ptexport: interrupted", signal.SIGTERM: "ptexport: terminated"}
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
TRIES = 4


class Case:
    """What one seed draws."""

    def __init__(self, target: str, sig: signal.Signals, seed: int) -> None:
        rng = random.Random(f"faults/signal/{target}/{sig.name}/{seed}")
        self.sig = sig
        self.seed = seed
        self.jobs = 1 + seed % 2
        self.previous = rng.random() < 0.5
        self.group = rng.random() < 0.5
        self.fraction = rng.random()

    def __repr__(self) -> str:
        return (f"seed {self.seed}: {self.sig.name} at {self.fraction:.3f} of the export, --jobs {self.jobs}, "
                f"{'a previous database (--force)' if self.previous else 'no previous database'}, "
                f"to {'the process group' if self.group else 'the process'}")


def _signal_at(argv: list[str], case: Case, delay: float, prog: list[str] = PTEXPORT):
    """Start ``ptexport ARGV``, signal it ``delay`` s after main() installed its handlers; its
    result and whether the signal was sent before it ended."""
    p = start(argv, prog)
    assert wait_for(p, lambda: catches(p.pid, signal.SIGTERM)), finish(p).stderr[-2000:]
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.002)
    sent = p.poll() is None
    if sent:
        try:
            if case.group:
                import os

                os.killpg(p.pid, case.sig)
            else:
                p.send_signal(case.sig)
        except ProcessLookupError:  # pragma: no cover - it ended in between
            sent = False
    return finish(p), sent


def _check_signalled(r, case: Case) -> None:
    if case.sig == signal.SIGKILL:
        assert r.returncode == -signal.SIGKILL, (case, r.returncode, r.stderr[-2000:])
        return
    assert r.returncode == 128 + case.sig, (case, r.returncode, r.stderr[-3000:])
    assert r.stderr.splitlines() == [LINES[case.sig]], (case, r.stderr[-3000:])
    assert r.stdout == "", case


# ------------------------------------------------------------ SQLite
@pytest.mark.slow
@pytest.mark.parametrize("seed", seeds(1))
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_sqlite_signal_at_a_random_moment(small_trace, sqlite_calibration, tmp_path, capsys, sig, seed):
    case = Case("sqlite", sig, seed)
    cal = sqlite_calibration
    target = tmp_path / "t.db"
    delay = case.fraction * cal.seconds
    for _ in range(TRIES):
        for x in tmp_path.iterdir():
            x.unlink()
        before = None
        if case.previous:
            shutil.copyfile(cal.db, target)
            before = digest(target)
        argv = [str(small_trace), "--db", str(target), "--jobs", str(case.jobs)]
        argv += ["--force"] if case.previous else []
        r, sent = _signal_at(argv, case, delay, PTEXPORT_SMALL_RUNS)
        if sent and not (looks_complete(target) and digest(target) != before):
            break
        # it finished (renamed the database into place) first: complete; again, earlier
        assert r.returncode in (0, -case.sig), (case, r.returncode, r.stderr[-2000:])
        assert sqlite_samples(target) == cal.samples, case
        assert tmp_files(tmp_path, "t.db") == [], case
        delay /= 2
    else:
        pytest.fail(f"{case}: the export ended before the signal {TRIES} times (the last delay {delay:.3f} s)")
    _check_signalled(r, case)
    if case.previous:
        assert digest(target) == before, f"{case}: the previous database is untouched"
    else:
        assert not target.exists(), f"{case}: no database at the target"
    left = tmp_files(tmp_path, "t.db")
    if case.sig != signal.SIGKILL:
        assert left == [], f"{case}: temporaries and the lock file removed"

    rc, out, err = main_captured([str(small_trace), "--db", str(target)] + (["--force"] if case.previous else []),
                                 capsys)
    assert rc == 0, (case, err)
    files = [n for n in left if not n.endswith(".ptexport-lock")]  # the lock file is taken over, not counted
    if files:
        assert err.startswith(f"ptexport: removed {len(files)} temporary file"), (case, left, err)
        assert err.endswith(f" of exports to {target} that died\n") and err.count("\n") == 1, (case, err)
    else:
        assert err == "", (case, err)
    assert f"samples {cal.samples - 1}," in out, (case, out)  # the summary leaves out the id-0 row
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.db"], case
    assert sqlite_samples(target) == cal.samples, case


# ------------------------------------------------------------ PostgreSQL
@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("seed", seeds(1))
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_postgres_signal_at_a_random_moment(tiny_trace, pg_calibration, pg_admin, pg_name, capsys, sig, seed):
    case = Case("postgres", sig, seed)
    cal = pg_calibration
    url = pg_url(pg_name)
    delay = case.fraction * cal.seconds
    for _ in range(TRIES):
        for db in pg_databases(pg_admin, pg_name):
            pg_admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')
        if case.previous:
            pg_precious(pg_admin, pg_name)
        argv = [str(tiny_trace), "--db", url, "--jobs", str(case.jobs)] + (["--force"] if case.previous else [])
        r, sent = _signal_at(argv, case, delay)
        pg_wait_released(pg_admin, pg_name)
        dbs = pg_databases(pg_admin, pg_name)
        if sent and not (pg_name in dbs and _complete(pg_name)):
            break
        assert r.returncode in (0, -case.sig), (case, r.returncode, r.stderr[-2000:])
        assert pg_samples(pg_name) == cal.samples, case
        delay /= 2
    else:
        pytest.fail(f"{case}: the export ended before the signal {TRIES} times (the last delay {delay:.3f} s)")
    _check_signalled(r, case)
    tmps = [d for d in dbs if d != pg_name]
    if case.previous:
        assert pg_name in dbs, f"{case}: the previous database is there"
        pg_check_precious(pg_name)
    else:
        assert pg_name not in dbs, f"{case}: no database at the target"
    if case.sig != signal.SIGKILL:
        assert tmps == [], f"{case}: the temporary database is dropped"

    rc, out, err = main_captured([str(tiny_trace), "--db", url] + (["--force"] if case.previous else []), capsys)
    assert rc == 0, (case, err)
    if tmps:
        assert err.startswith(f"ptexport: removed {len(tmps)} temporary database"), (case, tmps, err)
        assert err.count("\n") == 1, (case, err)
    else:
        assert err == "", (case, err)
    assert pg_databases(pg_admin, pg_name) == [pg_name], case
    assert pg_samples(pg_name) == cal.samples, case


def _complete(name: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(pg_url(name), autocommit=True) as c:
            return bool(c.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'schema_version'").fetchone()[0]
                        and c.execute("SELECT count(*) FROM schema_version").fetchone()[0])
    except psycopg.Error:
        return False


# ------------------------------------------------------------ after the database is in place
@pytest.mark.slow
def test_sqlite_signal_once_the_rename_is_decided_ends_nothing(small_trace, sqlite_calibration, tmp_path, monkeypatch,
                                                               capsys):
    """SIGTERM as the temporary is renamed over the previous database: the run has succeeded (exit
    0, its summary, the new database in place, nothing temporary left), the signal ends nothing."""
    import os

    target = tmp_path / "t.db"
    shutil.copyfile(sqlite_calibration.db, target)
    real = os.replace
    sent = []

    def replace(src, dst):
        if str(dst) == str(target):
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    rc, out, err = main_captured([str(small_trace), "--db", str(target), "--force"], capsys)
    assert sent and rc == 0 and err == "", (rc, err)
    assert f"samples {sqlite_calibration.samples - 1}," in out
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.db"]
    assert sqlite_samples(target) == sqlite_calibration.samples


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_signal_while_the_replaced_database_is_dropped_ends_nothing(tiny_trace, pg_calibration, pg_admin,
                                                                             pg_name, monkeypatch, capsys):
    """SIGINT while the database --force replaced is dropped (a checkpoint: seconds): the new one
    is in place, the run has succeeded (exit 0, its summary), the previous one is dropped all the same."""
    import os

    import psycopg

    pg_precious(pg_admin, pg_name)
    real = psycopg.Cursor.execute
    sent = []

    def execute(cur, query, *a, **kw):
        text = query.as_string(cur.connection) if hasattr(query, "as_string") else str(query)
        if text.startswith("DROP DATABASE IF EXISTS") and any(" RENAME TO " in q for q in seen):
            sent.append(text)
            os.kill(os.getpid(), signal.SIGINT)
        seen.append(text)
        return real(cur, query, *a, **kw)

    seen: list[str] = []
    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    rc, out, err = main_captured([str(tiny_trace), "--db", pg_url(pg_name), "--force"], capsys)
    monkeypatch.undo()
    assert sent and rc == 0 and err == "", (rc, err)
    assert f"samples {pg_calibration.samples - 1}," in out
    assert pg_databases(pg_admin, pg_name) == [pg_name]
    assert pg_samples(pg_name) == pg_calibration.samples
