"""Fixtures of the fault tests: generated traces, PostgreSQL (helpers in faultstest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from faultstest import (PTEXPORT_SMALL_RUNS, Calibration, injector_env, pg_url, read_report, synth,
                        timed_run)


@pytest.fixture(scope="session")
def big_trace(tmp_path_factory) -> Path:
    """A 2 M-branch trace: its export runs about 3 s on an idle machine here (1 s to the writer, 2 s of
    pages, 0.2 s of splice and indexes; a 140 MB database)."""
    return synth(tmp_path_factory.mktemp("big"), "2M")


@pytest.fixture(scope="session")
def small_trace(tmp_path_factory) -> Path:
    """A 200 K-branch trace (a 14 MB database)."""
    return synth(tmp_path_factory.mktemp("small"), "200k")


@pytest.fixture(scope="session")
def tiny_trace(tmp_path_factory) -> Path:
    """A 50 K-branch trace (a 4 MB database): for PostgreSQL, whose fixed costs (CREATE and DROP
    DATABASE, ANALYZE) dominate its exports anyway."""
    return synth(tmp_path_factory.mktemp("tiny"), "50k")


@pytest.fixture
def small_tmpfs(tmp_path):
    """Mount a tmpfs of the asked size at a fresh directory (root only); unmounted afterwards."""
    mounted = []

    def mount(size: str):
        d = tmp_path / f"fs{len(mounted)}"
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True,
                           text=True, check=False)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
        mounted.append(d)
        return d

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)


@pytest.fixture(scope="session")
def injector(tmp_path_factory) -> Path:
    """fault_inject.c built as an LD_PRELOAD library."""
    out = tmp_path_factory.mktemp("inject") / "fault_inject.so"
    src = Path(__file__).with_name("fault_inject.c")
    try:
        r = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-pthread", "-o", str(out), str(src), "-ldl"],
                           capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no gcc to build the fault injector")
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def sqlite_calibration(small_trace, injector, tmp_path_factory) -> Calibration:
    from faultstest import sqlite_samples, tmp_files

    d = tmp_path_factory.mktemp("calibration").resolve()
    target, report = d / "t.db", d / "report"
    r, seconds = timed_run([str(small_trace), "--db", str(target), "-q"], prog=PTEXPORT_SMALL_RUNS,
                           env=injector_env(injector, f"{d}/.t.db.ptexport-tmp-", report=report))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert tmp_files(d, "t.db") == []
    counts = read_report(report)
    assert counts["writes"] > 100 and counts["syncs"] >= 1 and counts["fired"] == 0, counts
    return Calibration(seconds, sqlite_samples(target), target, counts["writes"], counts["syncs"])


@pytest.fixture(scope="session")
def pg_calibration(tiny_trace, pg_admin) -> Calibration:
    from faultstest import pg_samples

    name = "ptx_faults_calibration"
    pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    r, seconds = timed_run([str(tiny_trace), "--db", pg_url(name), "-q"])
    assert r.returncode == 0 and r.stderr == "", r.stderr
    try:
        return Calibration(seconds, pg_samples(name))
    finally:
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_name(pg_admin):
    """A unique database name; it and its temporaries are dropped afterwards."""
    import uuid

    name = f"ptx_faults_{uuid.uuid4().hex[:10]}"
    yield name
    for (db,) in pg_admin.execute("SELECT datname FROM pg_database WHERE datname = %s OR left(datname, %s) = %s",
                                  (name, len(name) + 15, f"{name}__ptexport_tmp_")).fetchall():
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


