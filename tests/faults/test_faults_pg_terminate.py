"""The PostgreSQL server ends an export's backend (``pg_terminate_backend``, an administrator, a
crash of that backend) before a random statement, 10 seeds, and before each of the last
statements (issue #18).

The statements an export sends (every ``execute``/``executemany`` and each COPY, on its
maintenance connection and on the new database's) are counted in this process; each seed
draws one of them (a third each from the opening, the loading and the finishing statements),
and whether the backend ended is the one about to run it or the export's other one; a second
session terminates that backend and waits until it has gone.  Then: one line (exit 1, the
target and the server's message), no temporary database left (the export drops it, through a
new connection if its own was the one ended), the database ``--force`` was replacing there
with its content, and a rerun writes a complete database.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest

from faultstest import (main_captured, pg_check_precious, pg_databases, pg_precious, pg_samples, pg_url,
                        pg_wait_released, seeds)

pytestmark = pytest.mark.postgres


class _Statements:
    """Counts the statements of an export (and their connection); terminates a backend before one."""

    def __init__(self, monkeypatch, side=None, at: int = 0, other: bool = False) -> None:
        import psycopg

        self.side = side
        self.at = at
        self.other = other
        self.log: list[tuple[str, str]] = []  # (statement, "admin" or "data")
        self.conns: dict[str, object] = {}
        self.fired: list[str] = []
        self.fired_text = ""
        self._count = itertools.count(1)
        self._lock = threading.Lock()
        for name in ("execute", "executemany", "copy"):
            monkeypatch.setattr(psycopg.Cursor, name, self._wrap(getattr(psycopg.Cursor, name)))

    def _wrap(self, orig):
        def f(cur, query, *a, **kw):
            conn = cur.connection
            role = "admin" if conn.info.dbname == "postgres" else "data"
            self.conns[role] = conn
            text = query.as_string(conn) if hasattr(query, "as_string") else str(query)
            with self._lock:
                k = next(self._count)
                self.log.append((text, role))
            if k == self.at:
                victim = self.conns.get("data" if role == "admin" else "admin") if self.other else conn
                if victim is not None and not victim.closed:
                    self._terminate(victim.info.backend_pid)
                    self.fired.append(f"{'the other' if self.other else 'its'} backend before {text[:60]!r}")
                    self.fired_text = text
            return orig(cur, query, *a, **kw)
        return f

    def _terminate(self, pid: int) -> None:
        assert self.side.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        deadline = time.monotonic() + 10
        while self.side.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.005)


@pytest.fixture(scope="module")
def statements(tiny_trace, pg_admin):
    """The statements of an export of the tiny trace replacing a database, where each phase
    starts, its samples: (log, first loading statement, first finishing statement, samples)."""
    import io

    from ptexport.cli import main

    mp = pytest.MonkeyPatch()
    name = "ptx_faults_statements"
    try:
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        pg_precious(pg_admin, name)
        st = _Statements(mp)
        assert main([str(tiny_trace), "--db", pg_url(name), "--force", "-q"], out=io.StringIO()) == 0
        mp.undo()
        samples = pg_samples(name)
    finally:
        mp.undo()
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    log = st.log
    copies = [i for i, (s, _) in enumerate(log) if s.startswith("COPY ")]
    load, fin = copies[0] + 1, copies[-1] + 2  # 1-based: the first COPY, the statement after the last
    assert 1 < load < fin <= len(log), log
    assert log[-1][0].startswith("DROP DATABASE IF EXISTS"), log[-8:]  # the previous database, renamed
    return log, load, fin, samples


def _run(tiny_trace, pg_admin, pg_name, monkeypatch, capsys, at: int, other: bool, previous: bool, case: str,
         samples: int, rerun: bool = True):
    import psycopg

    if previous:
        pg_precious(pg_admin, pg_name)
    with psycopg.connect(pg_url("postgres"), autocommit=True) as side:
        st = _Statements(monkeypatch, side, at, other)
        url = pg_url(pg_name)
        rc, out, err = main_captured([str(tiny_trace), "--db", url] + (["--force"] if previous else []), capsys)
        monkeypatch.undo()
    case += f": {st.fired[0] if st.fired else 'nothing terminated'}"
    pg_wait_released(pg_admin, pg_name)
    dbs = pg_databases(pg_admin, pg_name)
    if rc == 0:
        # only the drop of what the temporary's name holds at the end (the previous database, or
        # nothing) may fail without failing the export: it is dropped through a new session
        renamed = [k for k, (text, _) in enumerate(st.log, 1) if " RENAME TO " in text]
        assert not st.fired or (st.fired_text.startswith("DROP DATABASE IF EXISTS") and renamed
                                and st.at > renamed[-1]), (case, err)
        assert err == "" and dbs == [pg_name], (case, err, dbs)
    else:
        assert st.fired, (case, rc, err)
        assert rc == 1, (case, rc, err)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ptexport: error: {url}: "), (case, err)
        assert "terminat" in lines[0] or "closed" in lines[0] or "connection" in lines[0], (case, lines[0])
        assert dbs == ([pg_name] if previous else []), f"{case}: no temporary database left"
        if previous:
            pg_check_precious(pg_name)
        if not rerun:
            return
        rc, out, err = main_captured([str(tiny_trace), "--db", url] + (["--force"] if previous else []), capsys)
        assert rc == 0 and err == "", (case, err)
        assert pg_databases(pg_admin, pg_name) == [pg_name]
    assert pg_samples(pg_name) == samples


@pytest.mark.slow
@pytest.mark.parametrize("seed", seeds(1))
def test_backend_terminated_before_a_random_statement(tiny_trace, statements, pg_admin, pg_name, monkeypatch, capsys,
                                                       seed):
    log, load, fin, samples = statements
    rng = random.Random(f"faults/terminate/{seed}")
    lo, hi = [(1, load - 1), (load, fin - 1), (fin, len(log))][rng.randrange(3)]
    at = rng.randint(lo, hi)
    other = rng.random() < 0.3
    previous = rng.random() < 0.5
    case = f"seed {seed}: statement {at} of {len(log)} ({log[at - 1][1]}: {log[at - 1][0][:60]!r})"
    _run(tiny_trace, pg_admin, pg_name, monkeypatch, capsys, at, other, previous, case, samples)


#: The last statements of an export replacing a database, from the check that it exists.
LAST = ["the check that the target exists", "ending the sessions on the previous database",
        "renaming the previous database aside", "renaming the new one to the target",
        "renaming the previous one to the temporary's name", "dropping the previous database"]


@pytest.mark.slow
@pytest.mark.parametrize("step", [pytest.param(k, id=LAST[k].replace(" ", "-"),
                                               marks=() if k in (3, 5) else pytest.mark.soak)
                                  for k in range(len(LAST))])
def test_backend_terminated_before_a_last_statement(tiny_trace, statements, pg_admin, pg_name, monkeypatch, capsys,
                                                    step):
    """The target is the previous database or the new one at every moment, never neither: the
    previous database is renamed aside, the new one renamed to the target and the previous one to
    the temporary's name in one transaction, dropped after the commit (through a new session if
    the server ended the export's)."""
    log, _, _, samples = statements
    first = max(i for i, (s, _) in enumerate(log) if s.startswith("SELECT 1 FROM pg_database")) + 1
    assert len(log) - first + 1 == len(LAST), log[first - 1:]
    at = first + step
    case = f"statement {at} of {len(log)}, {LAST[step]} ({log[at - 1][0][:60]!r})"
    _run(tiny_trace, pg_admin, pg_name, monkeypatch, capsys, at, False, True, case, samples, rerun=False)
