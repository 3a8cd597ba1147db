"""Ctrl-C (SIGINT) or a kill at a random moment never leaves a database that looks complete."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

WRITER = r"""
import faulthandler, signal, sys, numpy as np
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the stacks, should it not end
from ptexport.cli import _SignalGuard
from ptexport.writers import open_writer
target, batches = sys.argv[1], int(sys.argv[2])
n = 20000
# as the CLI runs an export: the guard raises a signal that comes inside numba's own Python (its
# compiler lock's wrapper, a kernel boxing its result) where that returns, not inside it
with _SignalGuard(), open_writer(target) as w:
    for b in range(batches):
        ids = np.arange(b * n + 1, (b + 1) * n + 1)
        w.write_samples({"id": ids, "time": ids * 10, "ip": ids, "branch_type": np.full(n, 3)})
        w.write_calls({"id": ids, "call_time": ids, "return_time": ids + 5})
        if b == 0:
            print("started", flush=True)
print("done", flush=True)
"""


def _run_and_signal(target: str, sig: int, delay: float) -> subprocess.CompletedProcess:
    p = subprocess.Popen([sys.executable, "-c", WRITER, target, "400"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.strip() == "started", p.stderr.read() if p.stderr else ""
    time.sleep(delay)
    p.send_signal(sig)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGUSR1)
        time.sleep(2)
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the writer did not end in 120 s after signal {sig} ({delay:.2f} s in); its threads:\n{err}")
    return subprocess.CompletedProcess(p.args, p.returncode, line + out, err)


def _looks_complete(path) -> bool:
    if not os.path.exists(path):
        return False
    try:
        c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        return bool(c.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0])
    except sqlite3.Error:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_sigint_mid_export_leaves_nothing_and_rerun_succeeds(tmp_path, seed):
    target = tmp_path / "trace.db"
    r = _run_and_signal(str(target), signal.SIGINT, random.Random(seed).uniform(0.0, 0.8))
    assert "done" not in r.stdout, "the export finished before the signal; make it longer"
    assert r.returncode != 0
    assert "KeyboardInterrupt" in r.stderr
    assert not target.exists()
    assert list(tmp_path.iterdir()) == [], "the temporary file is removed on Ctrl-C"
    # rerunning succeeds (no --force needed: nothing was left behind)
    ok = subprocess.run([sys.executable, "-c", WRITER, str(target), "2"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert _looks_complete(target)
    assert sqlite3.connect(target).execute("SELECT COUNT(*) FROM samples").fetchone() == (40001,)


def test_sigkill_mid_export_leaves_no_database_at_the_target(tmp_path):
    target = tmp_path / "trace.db"
    r = _run_and_signal(str(target), signal.SIGKILL, 0.3)
    assert r.returncode == -signal.SIGKILL
    assert not target.exists()
    leftovers = [p.name for p in tmp_path.iterdir()]
    # the temporaries and the (now unlocked) lock file; the next export removes them (tests/faults)
    assert all(n.startswith(".trace.db.ptexport-tmp-") or n == ".trace.db.ptexport-lock" for n in leftovers)
    assert not any(_looks_complete(tmp_path / n) for n in leftovers)


@pytest.mark.postgres
def test_sigint_mid_postgres_export_drops_the_temporary_database(pg_url, pg_admin):
    url = pg_url()
    name = url.rsplit("/", 1)[1]
    r = _run_and_signal(url, signal.SIGINT, 0.3)
    assert "done" not in r.stdout
    assert r.returncode != 0
    left = pg_admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (name[:30] + "%",)).fetchall()
    assert left == []
