"""mypy over the public interfaces: the files and settings of pyproject.toml's [tool.mypy] type-check clean.

The list (decoder backends, session, samples contract, db export, writers, PT packet layers and
their compiled twins, call trees, ptxed's walker) is in pyproject.toml; this runs ``python3 -m mypy``
from the repository root exactly as a developer would.  The cache lives outside the work tree.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from ptxtest import REPO

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed (pip install '.[test]')")


def test_configured_files_exist():
    """A file moved or renamed must be moved in the list too, or mypy would stop checking it."""
    files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert len(files) >= 20
    assert [f for f in files if not (REPO / f).is_file()] == []


@pytest.mark.slow  # ~40 s of CPU with a cold cache, a few seconds after
def test_public_interfaces_type_check():
    cache = Path(tempfile.gettempdir()) / "ptexport-mypy-cache"
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout
