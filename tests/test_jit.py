"""The compiled path's engine: kernels compiled at install reach the first run, read-only installs included."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from ptexport import jit
from ptexport.cli import precompile

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(jit.numba is None, reason=f"numba: {jit.PROBLEM}")


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~ ]", req, maxsplit=1)[0].lower()


def test_the_build_has_what_compiling_ahead_runs():
    """setup.py runs ptexport in the isolated build environment: every run-time dependency must be there."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build = {_name(r) for r in meta["build-system"]["requires"]}
    run = {_name(r) for r in meta["project"]["dependencies"]}
    assert run <= build, run - build


@pytest.mark.slow
def test_every_warm_up_command_runs(tmp_path):
    """A command that fails at install compiles nothing, silently: each must succeed."""
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "loops").symlink_to(ROOT / "sample_data" / "loops")
    cmds = precompile.warm_commands(samples, tmp_path)
    assert len(cmds) >= 6 and any("--jobs" in c for c in cmds) and any(c[:2] == ["dump", "branches"] for c in cmds)
    assert precompile.warm(samples) == 0


KERNEL = """
from ptexport.jit import numba

@numba.njit(cache=True)
def twice(x):
    return 2 * x
"""


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[name]
    return mod


def test_a_read_only_install_loads_the_prepared_cache(tmp_path, monkeypatch):
    """The package's __pycache__ unwritable: its files are copied to the user's cache and loaded, not compiled."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    src = pkg / "kern.py"
    src.write_text(KERNEL)
    monkeypatch.setattr(jit, "_PACKAGE", pkg)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "usercache"))

    built = _load(src, "kern_build")  # "at install": the in-tree cache is written
    assert built.twice(21) == 42
    assert built.twice.stats.cache_misses and not built.twice.stats.cache_hits
    prepared = sorted(p.name for p in (pkg / "__pycache__").iterdir() if p.suffix in (".nbi", ".nbc"))
    assert prepared

    in_tree = str(pkg / "__pycache__")
    monkeypatch.setattr(jit, "_writable", lambda path: path != in_tree)  # "installed read-only"
    run = _load(src, "kern_run")
    assert run.twice(21) == 42
    assert run.twice.stats.cache_hits and not run.twice.stats.cache_misses
    seeded = sorted(p.name for p in (tmp_path / "usercache").rglob("*") if p.suffix in (".nbi", ".nbc"))
    assert seeded == prepared


def test_other_code_keeps_numbas_own_cache_order(tmp_path):
    """The locator claims ptexport's files only."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")
    ours = impl._locator_classes[0]
    assert ours.__name__ == "PackagedCacheLocator"
    other = tmp_path / "elsewhere.py"
    other.write_text("def f():\n    return 1\n")
    mod = _load(other, "elsewhere")
    assert ours.from_function(mod.f, str(other)) is None


def test_a_first_compile_is_announced_on_a_terminal(monkeypatch, capsys, tmp_path):
    """Where nothing was compiled ahead (an editable install, another numba), one line says why it waits."""
    import io

    import ptexport.cli as cli

    trace = tmp_path / "t.pt"
    trace.write_bytes(bytes([0x02, 0x82] * 8) + b"\x02\x23")
    monkeypatch.setattr(jit, "cache_prepared", lambda: False)
    monkeypatch.setattr(cli, "_warned", False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    for _ in range(2):
        assert cli.main(["dump", "packets", "--raw", str(trace)], io.StringIO()) == 0
    assert capsys.readouterr().err.count("compiling the decoder (once") == 1
    monkeypatch.setattr(cli, "_warned", False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)  # logs and pipes: silent
    assert cli.main(["dump", "packets", "--raw", str(trace)], io.StringIO()) == 0
    assert "compiling" not in capsys.readouterr().err


@pytest.mark.slow
def test_the_installed_package_takes_the_compiled_path_with_its_cache_prepared(tmp_path):
    """What `pip install .` put in site-packages (CI installs so): numba loads and the kernels were compiled
    at install, so the first run loads them.  Skipped where ptexport is the checkout (editable installs)."""
    import json
    import subprocess

    probe = ("import json, ptexport, ptexport.jit as j; from ptexport.decoder import backend; "
             "from ptexport.synth.generate import find_program; "
             "print(json.dumps([ptexport.__file__, backend.unavailable_reason(), j.cache_prepared(), "
             "str(find_program('calls'))]))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr
    where, problem, prepared, calls = json.loads(proc.stdout)
    if Path(where).resolve().is_relative_to(ROOT):
        pytest.skip("ptexport is this checkout (an editable install): nothing was compiled at install")
    assert problem == ""
    assert prepared, f"no compiled kernels beside {where}: setup.py's compile-ahead did not run or failed"
    assert Path(calls).resolve().is_relative_to(Path(where).resolve().parent)  # synth's programs travel with it


_LIGHT_LOAD = r"""
import sys
import numpy as np
from numba.core import caching
import ptexport.jit  # installs the light load
from ptexport.writers._blocks import block_extents  # one of ptexport's kernels, loaded from its cache

if len(sys.argv) > 1:  # the light load failing (once): the normal way, refresh first, the same result
    real, failed = caching.Cache._load_overload, []

    def once(*a):
        if not failed:
            failed.append(1)
            raise RuntimeError("a symbol a registry adds")
        return real(*a)

    caching.Cache._load_overload = once
ids = np.arange(1, 5000, dtype=np.int64)
blocks, stats = block_extents(ids, ids * 3, ids * 5, 10)
assert blocks.tolist() == [0, 1, 2, 3, 4], blocks
assert stats[0].tolist() == [3, 1023 * 3, 1023 * 5], stats[0]
assert len(sys.argv) == 1 or failed
print("refreshed" if "numba.np.linalg" in sys.modules else "light")  # linalg: imported by the refresh only
"""


def test_ptexports_cached_kernels_load_without_the_registry_refresh(tmp_path):
    """A cached kernel of ptexport loads with numba's runtime started and no registry refresh (a
    sixth of a second of every start), and gives its results; when that load fails, the normal one
    (refresh first) is taken."""
    import subprocess

    warm = subprocess.run([sys.executable, "-c", _LIGHT_LOAD], capture_output=True, text=True, cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr  # the first run may compile (then it refreshes)
    light = subprocess.run([sys.executable, "-c", _LIGHT_LOAD], capture_output=True, text=True, cwd=tmp_path)
    assert light.returncode == 0 and light.stdout.strip() == "light", light.stderr
    fallback = subprocess.run([sys.executable, "-c", _LIGHT_LOAD, "fail"], capture_output=True, text=True, cwd=tmp_path)
    assert fallback.returncode == 0 and fallback.stdout.strip() == "refreshed", fallback.stderr


_INSTALLED = ("import json, sys, ptexport; from ptexport.jit import unavailable_reason; "
              "print(json.dumps([ptexport.__file__, unavailable_reason()]))")
_RUN = "import sys; from ptexport.cli import main; sys.exit(main(sys.argv[1:]))"


def _cache_files(package: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(package)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in package.rglob("__pycache__/*.nb[ic]")}


@pytest.mark.slow
def test_the_installed_package_compiled_what_a_vm_recording_reaches(tmp_path):
    """No shipped sample is a VM's, so every kernel only a VM recording reaches (the guest attribution, the
    VM exits, the VMCS walk) is compiled ahead by its own warm-up at install, and so is what only a bigger
    call tree than the samples' reaches (the call path table grown): exporting and dumping a generated VM
    recording with the installed package (the decoding child and workers included) writes no numba
    cache file, i.e. compiles nothing (a compile there costs a second at the first VM export).
    Skipped where ptexport is this checkout (an editable install)."""
    import json
    import subprocess

    from vmexporttest import make_vm_trace

    env = {k: v for k, v in __import__("os").environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
    proc = subprocess.run([sys.executable, "-c", _INSTALLED], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    where, problem = json.loads(proc.stdout)
    package = Path(where).resolve().parent
    if package.is_relative_to(ROOT):
        pytest.skip("ptexport is this checkout (an editable install): nothing was compiled at install")
    assert problem == ""
    # (20 K branches: some 2 K call paths, more than the call tree's first table holds: it grows)
    vm = make_vm_trace(tmp_path / "vm", guest="mixed", seed=5, branches=20000, patch=True)
    before = _cache_files(package)
    for argv in ([str(vm.data), "--db", str(tmp_path / "vm.sqlite"), "-q"],
                 [str(vm.data), "--db", str(tmp_path / "vm1.sqlite"), "-q", "--jobs", "1"],
                 ["dump", "branches", str(vm.data), "--jobs", "1"],
                 ["vm-time-correlation", str(vm.work / "host.data"), "--dry-run"]):
        run = subprocess.run([sys.executable, "-c", _RUN, *argv], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600, env=env)
        assert run.returncode == 0, (argv, run.stderr[-2000:])
    after = _cache_files(package)
    compiled = sorted(k for k, v in after.items() if before.get(k) != v)
    assert not compiled, f"compiled at run time (not ahead at install): {compiled}"


def test_a_kernels_cache_is_made_when_first_used(tmp_path):
    """ptexport's kernels get their numba cache on first use, not when declared (start-up: ~130 are
    declared, a run calls a few); the cache then is numba's own, and saves and loads as before."""
    src = "from ptexport.jit import numba\n\n@numba.njit(cache=True)\ndef add(a, b):\n    return a + b\n"
    (tmp_path / "kern.py").write_text(src)

    def load():
        spec = importlib.util.spec_from_file_location("ptexport._lazytest_kern", tmp_path / "kern.py")
        mod = importlib.util.module_from_spec(spec)  # a module named ptexport.*: the lazy cache
        sys.modules[spec.name] = mod
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.modules.pop(spec.name, None)
        return mod

    from numba.core.caching import FunctionCache

    mod = load()
    cache = mod.add._cache
    assert isinstance(cache, jit._LazyFunctionCache) and cache.__dict__["_real"] is None
    assert mod.add(2, 3) == 5
    assert isinstance(cache.__dict__["_real"], FunctionCache)
    assert list((tmp_path / "__pycache__").glob("kern.add-*.nbi")), "the compiled kernel was not cached"
    again = load()  # another process's declaration: loads what the first saved
    assert again.add(4, 5) == 9 and again.add._cache.__dict__["_real"] is not None
    assert again.add.stats.cache_hits and not again.add.stats.cache_misses

    def plain(a):
        return a

    plain.__module__ = "elsewhere"  # not ptexport's: numba's own cache, made at once
    assert isinstance(jit.numba.njit(cache=True)(plain)._cache, FunctionCache)


_EXTENSIONS_PROBE = """
import sys
from importlib import metadata
calls = []
real = metadata.entry_points
def counted(*a, **k):
    calls.append(1)
    return real(*a, **k)
metadata.entry_points = counted
from numba.core import entrypoints
entrypoints.importlib_metadata.entry_points = counted
if sys.argv[1] == "cli":
    from ptexport.cli import entry
    sys.argv = ["ptexport", "dump", "branches", "--count", "--jobs", "1", sys.argv[2]]
    import atexit
    atexit.register(lambda: print("entry points read", len(calls), entrypoints._already_initialized, file=sys.stderr))
    entry()
else:
    from ptexport.cli import main
    main(["dump", "branches", "--count", "--jobs", "1", sys.argv[2]])
    print("entry points read", len(calls), entrypoints._already_initialized, file=sys.stderr)
"""


@pytest.mark.parametrize("how", ["cli", "library"])
def test_the_command_line_skips_numbas_extension_scan(tmp_path, how):
    """The console script (entry) runs only ptexport's kernels: numba's extension entry points (every
    installed distribution's metadata, 20-40 ms) are not read; a program calling ptexport's main keeps
    numba's own way (they are read before its first kernel call)."""
    import subprocess

    sample = ROOT / "sample_data" / "loops" / "perf.data"
    r = subprocess.run([sys.executable, "-c", _EXTENSIONS_PROBE, how, str(sample)], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r"entry points read (\d+) (\w+)", r.stderr)
    assert found, r.stderr[-2000:]
    assert found[2] == "True"  # initialized: by numba (library) or marked so (cli)
    assert (int(found[1]) == 0) == (how == "cli")
