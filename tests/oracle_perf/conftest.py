"""The comparison suites against perf 6.1 (perf script, perf report, perf inject, export-to-sqlite.py,
exported-sql-viewer.py): every test in this folder carries the ``perf`` mark (``-m "not perf"`` leaves
them out)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection sees the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.perf)
