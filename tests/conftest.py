"""Session fixtures shared by every test folder (helpers live in ptxtest.py and helpers/).

The folders mirror the package (tests/perfdata ... tests/writers); the comparison suites against perf 6.1
are in oracle_perf/, against libipt's outputs in oracle_libipt/.  Helper modules used by several folders
are in helpers/, imported by name (``from exporttest import ...``): that folder is put on sys.path here.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))

from ptxtest import (  # noqa: F401 - re-exported for tests that import them from here
    HAVE_PERF,
    LIBIPT,
    QUIPPER,
    REPO,
    SHARED,
    TESTDATA,
    needs_perf,
    perf_python_env,
)

# Every SQLite database a test writes through ptexport (its writer, `ptexport upgrade`), in this
# process or in a child process (which inherits the environment), must pass PRAGMA integrity_check
# and the header check before it is renamed into place; else the export fails with
# CorruptDatabaseError (ptexport.writers.verify).  PTEXPORT_VERIFY_DB=0 in the caller's environment
# switches it off (e.g. to time the suite without it).
os.environ.setdefault("PTEXPORT_VERIFY_DB", "1")


@pytest.fixture(scope="session")
def quipper() -> Path:
    if not QUIPPER.exists():
        pytest.skip(f"shared test data not found at {QUIPPER}")
    return QUIPPER


@pytest.fixture(scope="session")
def libipt_dir() -> Path:
    if not LIBIPT.exists():
        pytest.skip(f"shared libipt corpus not found at {LIBIPT}")
    return LIBIPT


@pytest.fixture(scope="session")
def synth_trace(tmp_path_factory):
    """``ptexport synth`` once per session for each argument list: ``synth_trace("--branches", "15000", ...)``
    gives the output folder (perf.data, the programs, the ground truth), made on the first call with those
    arguments (in that order) and shared by every later one, in any test file.  The folder is shared: a test
    must not write into it or change its files (copy what it damages or patches)."""
    from ptexport.cli import main  # not at import: the CLI loads every subcommand

    made: dict[tuple[str, ...], Path] = {}

    def make(*args: str) -> Path:
        key = tuple(str(a) for a in args)
        if key not in made:
            d = tmp_path_factory.mktemp("synth")
            out = io.StringIO()
            assert main(["synth", "--out", str(d), *key], out=out) == 0, out.getvalue()[-2000:]
            made[key] = d
        return made[key]

    return make

@pytest.fixture(scope="session")
def mixed(tmp_path_factory):
    """One generated VM recording (guest kernel and user space, two VCPUs on two host CPUs) run through
    perf's workflow, exported by perf and by ptexport (tests/dbexport, tests/oracle_perf)."""
    from ptexport.cli import main  # not at import: the CLI loads every subcommand
    from vmexporttest import have_exporter, make_vm_trace, perf_export

    if shutil.which("perf") is None:
        pytest.skip("perf (Debian linux-perf) is not installed: perf inject makes the VM recording")
    base = tmp_path_factory.mktemp("vm_mixed")
    vm = make_vm_trace(base, guest="mixed", seed=3, branches=4000)
    theirs, ours = base / "perf.db", base / "ours.db"
    if have_exporter():
        perf_export(vm.data, theirs)
    out = io.StringIO()
    assert main([str(vm.data), "--db", str(ours), "-q"], out=out) == 0, out.getvalue()
    return vm, theirs, ours


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection sees the marks
def pytest_collection_modifyitems(config, items):
    """A test guarded by ``needs_perf`` runs perf: it carries the ``perf`` mark (tests/oracle_perf/conftest.py
    marks that whole folder; other tests that run perf without the guard carry the mark by hand).  A ``soak``
    test is ``slow`` too."""
    for item in items:
        if any(m == needs_perf.mark for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.perf)
        if item.get_closest_marker("soak"):  # soak tests are slow ones too: -m "not slow" (which replaces the
            item.add_marker(pytest.mark.slow)  # default -m 'not soak') leaves them out


#: The most worker processes ``-n auto`` starts (pyproject's addopts): each makes the session fixtures
#: (generated traces, the VM recording) again, and every test's exports use the machine's cores themselves.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: the cores this process may run on, at most :data:`MAX_WORKERS` (pytest-xdist's hook)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


@pytest.fixture(scope="session")
def pg_admin():
    """An autocommit connection to the PostgreSQL server's ``postgres`` database (PTEXPORT_TEST_PG, default
    the local server), for creating and dropping test databases; the test is skipped without a server."""
    from exporttest import PG_BASE

    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(f"{PG_BASE}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL server reachable at {PG_BASE}: {str(e).strip().splitlines()[0]}")
    yield conn
    conn.close()
