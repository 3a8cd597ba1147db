"""Session fixtures shared by every test folder (helpers live in ptxtest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
