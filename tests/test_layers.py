"""The house's contracts (docs/architecture.md): layers checked by import-linter, and no import circle anywhere."""

import shutil
import subprocess
import sys
from pathlib import Path

from ptxtest import REPO


def _lint_imports() -> str:
    beside = Path(sys.executable).with_name("lint-imports")
    return str(beside) if beside.exists() else (shutil.which("lint-imports") or "lint-imports")


def test_import_contracts_hold():
    proc = subprocess.run([_lint_imports(), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def _circles(package: str) -> list[list[str]]:
    """Strongly connected groups of modules (Tarjan), counting imports inside functions too."""
    import grimp

    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    adj = {m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d.split(".")[0] == package)
           for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in sorted(adj):
        if m not in index:
            visit(m)
    return out


def test_no_import_circle_even_through_function_local_imports():
    """A function-local import may make start-up lazy, never hide a circle: the module graph is acyclic."""
    for package in ("ptexport", "ptexport_viewer"):
        assert _circles(package) == [], package
