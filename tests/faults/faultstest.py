"""Helpers of the fault tests: running ``ptexport`` as a process, its files, PostgreSQL."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptexport.cli import main

PTEXPORT = [sys.executable, "-c", "from ptexport.cli import entry; entry()"]
PG_BASE = os.environ.get("PTEXPORT_TEST_PG", "postgresql://postgres@127.0.0.1:5432")


def synth(d: Path, branches: str) -> Path:
    assert main(["synth", "--out", str(d), "--program", "calls", "--cpus", "2", "--branches", branches,
                 "--replay", "on", "--seed", "5"], out=io.StringIO()) == 0
    return d / "perf.data"


def start(argv: list[str], **kw) -> subprocess.Popen:
    """``ptexport ARGV`` in a session of its own (its workers in its process group)."""
    return subprocess.Popen([*PTEXPORT, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


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
