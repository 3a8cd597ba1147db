"""Session fixtures shared by every test folder (helpers live in ptxtest.py)."""

from __future__ import annotations

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
