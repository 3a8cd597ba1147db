"""Shared test helpers: corpus paths, perf availability, perf's Python environment.

Imported by name (``from ptxtest import ...``): a module called ``conftest`` would be
shadowed by the conftest.py files of sub-folders.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PTEXPORT_SHARED", REPO.parent / "shared"))
TESTDATA = SHARED / "testdata"
QUIPPER = TESTDATA / "perf-quipper" / "perf.data.intel_pt-4.14"
LIBIPT = TESTDATA / "libipt"

HAVE_PERF = shutil.which("perf") is not None

needs_perf = pytest.mark.skipif(not HAVE_PERF, reason="perf (Debian linux-perf) is not installed")


def perf_python_env() -> dict[str, str]:
    """Environment for perf's embedded (Debian) Python, e.g. for export-to-sqlite.py.

    perf's embedded interpreter finds its prefix through the first ``python3`` on
    PATH; with pyenv or a virtualenv first it would load that library, which has
    no PySide2.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    return env
