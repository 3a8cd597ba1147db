"""Helpers of the fault tests: running ``ptexport`` as a process, its files, PostgreSQL."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ptexport.cli import main

PTEXPORT = [sys.executable, "-c", "from ptexport.cli import entry; entry()"]
#: ptexport whose index runs spill to their file every 16 K entries (as an export of millions of
#: calls does every 256 K): the sweeps' 200 K-branch trace then writes every kind of file.
PTEXPORT_SMALL_RUNS = [sys.executable, "-c", "import ptexport.writers.sqlite as w; w.INDEX_RUN_ROWS = 1 << 14; "
                       "from ptexport.cli import entry; entry()"]
PG_BASE = os.environ.get("PTEXPORT_TEST_PG", "postgresql://postgres@127.0.0.1:5432")


def synth(d: Path, branches: str) -> Path:
    assert main(["synth", "--out", str(d), "--program", "calls", "--cpus", "2", "--branches", branches,
                 "--replay", "on", "--seed", "5"], out=io.StringIO()) == 0
    return d / "perf.data"


def _default_stop_signals() -> None:
    # as a shell on a terminal starts a command: a suite run under nohup (SIGHUP ignored, which
    # ptexport leaves as it is, by design) must not make the export deaf to the signals it is sent
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def start(argv: list[str], prog: list[str] = PTEXPORT, **kw) -> subprocess.Popen:
    """``ptexport ARGV`` in a session of its own (its workers in its process group), with the default
    dispositions of SIGINT, SIGTERM and SIGHUP."""
    return subprocess.Popen([*prog, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_stop_signals, **kw)


def wait_for(p: subprocess.Popen, pred, timeout: float = 180.0) -> bool:
    """Poll ``pred()`` every 5 ms until true (True) or the process ends first (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        if p.poll() is not None:
            return False
        time.sleep(0.005)
    raise AssertionError("timed out")


def finish(p: subprocess.Popen, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Its output once it ended, after checking nothing of its process group outlives it."""
    out, err = p.communicate(timeout=timeout)
    deadline = time.monotonic() + 10
    while True:
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            pytest.fail("processes of the export are still running 10 s after it exited")
        time.sleep(0.05)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def run(argv: list[str], timeout: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run([*PTEXPORT, *argv], capture_output=True, text=True, timeout=timeout)


def tmp_files(directory: Path, name: str) -> list[str]:
    """The temporaries (and lock file) of target ``name`` in ``directory``."""
    return sorted(p.name for p in directory.iterdir()
                  if p.name.startswith(f".{name}.ptexport-tmp-") or p.name == f".{name}.ptexport-lock")


def looks_complete(path: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
            return bool(c.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0])
    except sqlite3.Error:
        return False


def dead_pid() -> int:
    """A PID no process has: above the kernel's pid_max."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    except OSError:  # pragma: no cover
        return 4194304 + 1


def pg_databases(pg_admin, name: str) -> list[str]:
    return sorted(r[0] for r in pg_admin.execute("SELECT datname FROM pg_database WHERE left(datname, %s) = %s",
                                                 (len(name), name)).fetchall())


# ------------------------------------------------------------ the seeded sweeps
#: Seeds of every sweep: the first DEFAULT_SEEDS run by default, all of them with ``-m soak``.
SEEDS = 10
DEFAULT_SEEDS = 2


def seeds(default: int = DEFAULT_SEEDS) -> list:
    """``0..SEEDS-1`` as pytest params, those from ``default`` on marked soak (``pytest -m soak``)."""
    return [s if s < default else pytest.param(s, marks=pytest.mark.soak) for s in range(SEEDS)]


def catches(pid: int, sig: int) -> bool:
    """The process has a handler for ``sig`` (SigCgt of /proc/PID/status): main() has installed its own."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (FileNotFoundError, ProcessLookupError):
        pass
    return False


def timed_run(argv: list[str], env: dict | None = None,
              prog: list[str] = PTEXPORT) -> tuple[subprocess.CompletedProcess, float]:
    """``ptexport ARGV`` to its end; the seconds from main() installing its signal handlers to the exit."""
    p = start(argv, prog, env=env)
    if not wait_for(p, lambda: catches(p.pid, signal.SIGTERM)):
        r = finish(p)
        raise AssertionError(f"the export ended before main() ran: {r.returncode} {r.stderr[-2000:]}")
    t0 = time.monotonic()
    r = finish(p)
    return r, time.monotonic() - t0


def digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def sqlite_samples(path: Path) -> int:
    """The samples of a complete database (it passes quick_check and has its schema_version row)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        assert c.execute("PRAGMA quick_check").fetchone() == ("ok",)
        assert c.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1
        n = c.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    c.close()
    return n


def pg_url(name: str, query: str = "") -> str:
    return f"{PG_BASE}/{name}" + (f"?{query}" if query else "")


def pg_precious(pg_admin, name: str) -> None:
    import psycopg

    pg_admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(pg_url(name), autocommit=True) as c:
        c.execute("CREATE TABLE precious (x int)")
        c.execute("INSERT INTO precious VALUES (42)")


def pg_check_precious(name: str) -> None:
    """The previous database ``name`` is as pg_precious() made it: its table, no export's tables."""
    import psycopg

    with psycopg.connect(pg_url(name), autocommit=True) as c:
        assert c.execute("SELECT x FROM precious").fetchall() == [(42,)]
        assert c.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (1,)


def pg_samples(name: str) -> int:
    """The samples of a complete PostgreSQL export ``name`` (its schema_version row is there)."""
    import psycopg

    with psycopg.connect(pg_url(name), autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM schema_version").fetchone() == (1,)
        return c.execute("SELECT count(*) FROM samples").fetchone()[0]


def pg_wait_released(pg_admin, name: str, timeout: float = 15.0) -> None:
    """Wait until no session holds the export lock of target ``name``: the server has seen the
    client of an export that ended (or was killed) go away (it notices a closed socket when its
    backend next reads from it; a backend busy in a statement finishes that first)."""
    from ptexport.writers.leftovers import advisory_key

    key = advisory_key("target", name)
    deadline = time.monotonic() + timeout
    while True:
        if pg_admin.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
            pg_admin.execute("SELECT pg_advisory_unlock(%s)", (key,))
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the lock of {name} is still held {timeout} s after its export ended")
        time.sleep(0.02)


def main_captured(argv: list[str], capsys) -> tuple[int, str, str]:
    """``main(argv)`` in this process: its exit code, stdout and stderr."""
    capsys.readouterr()
    out = io.StringIO()
    rc = main(argv, out=out)
    return rc, out.getvalue(), capsys.readouterr().err


def run_here(argv: list[str], capsys) -> subprocess.CompletedProcess:
    """As :func:`run`, in this process (no interpreter and numba to load: seconds less)."""
    rc, out, err = main_captured(argv, capsys)
    return subprocess.CompletedProcess(["ptexport", *argv], rc, out, err)


# ------------------------------------------------------------ the write-fault injector (fault_inject.c)
def injector_env(lib: Path, match: str, *, kind: str = "write", nth: int = 0, err: int = 0, sticky: bool = False,
                 report: Path | None = None) -> dict:
    env = dict(os.environ, LD_PRELOAD=str(lib), PTX_FAULT_MATCH=match, PTX_FAULT_KIND=kind, PTX_FAULT_NTH=str(nth),
               PTX_FAULT_ERRNO=str(err), PTX_FAULT_STICKY="1" if sticky else "0")
    if report is not None:
        env["PTX_FAULT_REPORT"] = str(report)
    return env


def read_report(path: Path) -> dict:
    """The injector's counts (of the export's process: the one that counted anything), ``op`` the call failed."""
    lines = path.read_text().splitlines()
    assert len(lines) == 1, lines
    return {k: (v if k == "op" else int(v)) for k, v in (x.split("=") for x in lines[0].split())}


@dataclass(frozen=True)
class Calibration:
    """One export run to its end, as the sweeps' measure."""

    seconds: float  # from main() installing its signal handlers to the exit
    samples: int  # rows of samples in the database
    db: Path | None = None  # the database (SQLite): a previous database for --force
    writes: int = 0  # writes to its temporaries (counted by the injector)
    syncs: int = 0
