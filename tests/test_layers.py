"""The stage contracts of DESIGN.md section 2, checked by import-linter."""

import shutil
import subprocess
from pathlib import Path
import sys

from ptxtest import REPO


def _lint_imports() -> str:
    beside = Path(sys.executable).with_name("lint-imports")
    return str(beside) if beside.exists() else (shutil.which("lint-imports") or "lint-imports")


def test_import_contracts_hold():
    proc = subprocess.run([_lint_imports(), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
