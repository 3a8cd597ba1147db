"""numba, the engine of the compiled path: whether it loads, where its cache lives, compiling ahead.

Every module with compiled kernels takes ``numba`` from here (``None`` when it
cannot be imported; :func:`unavailable_reason` says why, :func:`available` is
the one test of "is numba here") so that, before the first kernel
is declared, ptexport's cache locator is in place:

- ``pip install .`` compiles the kernels while it builds (``setup.py`` runs
  ``python -m ptexport.cli.precompile`` over the shipped sample recordings), and their numba cache
  files travel with the package in each module's ``__pycache__``.  numba keys
  them by the source's content hash, the Python and numba versions and the CPU,
  so the first run after installing on the machine that built the package
  loads them instead of compiling (tens of seconds of CPU).
- Where the package's folder is read-only (a system or container install) numba
  would otherwise skip the in-tree cache and compile into the user's cache
  directory on every first run: the locator copies the prepared files there
  first, then lets numba use that directory.

Nothing here changes what is computed: a cache miss compiles as before.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

PROBLEM = ""  # why the compiled path is unavailable ("" when numba loaded)
numba: Any
try:
    import numba
except ImportError as e:  # pragma: no cover - exercised where numba is missing
    numba = None
    PROBLEM = f"numba cannot be imported ({e})"

_PACKAGE = Path(__file__).resolve().parent


def unavailable_reason() -> str:
    """Why the compiled paths cannot run here ("" when numba loaded): the one test of "is numba here"."""
    return (PROBLEM or "numba is not loaded") if numba is None else ""


def available() -> bool:
    """Whether numba loaded (the compiled paths can run)."""
    return not unavailable_reason()


def _writable(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def _make_locator(caching: Any) -> Any:
    base = caching.UserWideCacheLocator

    class PackagedCacheLocator(base):  # type: ignore[misc, valid-type]
        """ptexport's kernels in a read-only install: the user's cache, seeded from the package's."""

        _seeded: set[str] = set()

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            try:
                path = Path(py_file).resolve()
            except OSError:
                return None
            if _PACKAGE not in path.parents or os.environ.get("NUMBA_CACHE_DIR"):
                return None  # not ours, or the user chose a cache directory: numba's own order
            in_tree = str(path.parent / "__pycache__")
            if _writable(in_tree):
                return None  # numba's in-tree locator reads and writes it
            self = super().from_function(py_func, py_file)
            if self is not None:
                cls._seed(path, in_tree, self.get_cache_path())
            return self

        @classmethod
        def _seed(cls, path: Path, in_tree: str, dest: str) -> None:
            if str(path) in cls._seeded:
                return
            cls._seeded.add(str(path))
            prefix = path.stem + "."
            try:
                names = [n for n in os.listdir(in_tree) if n.startswith(prefix) and n.endswith((".nbi", ".nbc"))]
            except OSError:
                return
            for name in names:
                target = os.path.join(dest, name)
                if not os.path.exists(target):
                    try:  # copy then rename: a concurrent process never reads half a file
                        tmp = f"{target}.{os.getpid()}.tmp"
                        shutil.copyfile(os.path.join(in_tree, name), tmp)
                        os.replace(tmp, target)
                    except OSError:
                        pass

    return PackagedCacheLocator


def _install_locator() -> None:
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")
    classes = impl._locator_classes
    if not any(getattr(c, "__name__", "") == "PackagedCacheLocator" for c in classes):
        impl._locator_classes = [_make_locator(caching), *classes]


class _SkipBlasProbe:
    """Report scipy absent to numba's one BLAS probe per process: a quarter second of start-up saved.

    The first kernel a process loads makes numba import ``numba.np.arraymath``, whose module body
    asks whether scipy's BLAS is there (``_check_blas``: ``import scipy.linalg.cython_blas``) for
    ``np.dot`` and its kin, which no ptexport kernel calls.  Where scipy is installed that import
    costs ~0.25 s in every process (the CLI, the decoding child, each worker).  This finder, first
    on ``sys.meta_path``, answers "no scipy" only while that module body runs (the module is in
    ``sys.modules`` without its ``_HAVE_BLAS`` yet) and leaves the path once it has run; a scipy
    imported before or after is untouched.
    """

    _PROBER = "numba.np.arraymath"

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        prober = sys.modules.get(self._PROBER)
        if prober is not None and hasattr(prober, "_HAVE_BLAS"):
            self.remove()
        elif prober is not None and (name == "scipy" or name.startswith("scipy.")):
            raise ModuleNotFoundError(f"{name}: not offered to numba's BLAS probe (ptexport.jit)", name=name)
        return None

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    @classmethod
    def install(cls) -> None:
        if cls._PROBER in sys.modules or "scipy.linalg" in sys.modules:
            return  # probed already, or scipy's BLAS is loaded (then the probe is cheap)
        if not any(isinstance(f, cls) for f in sys.meta_path):
            sys.meta_path.insert(0, cls())


def _install_light_load() -> None:
    """Load ptexport's cached kernels without numba's registry refresh: a sixth of a second saved
    in every process (the CLI, the decoding child).

    Before it loads a cached function, numba refreshes its target context: it imports and installs
    every implementation registry (a hundred modules: arrays, dicts, random, linalg...) that only
    compiling needs, and compiling refreshes again on its own.  What a loaded function needs at run
    time is numba's runtime (NRT), which that refresh starts: it is started here.  A load that fails
    this way (any error) is taken again the normal way, refresh first; other packages' functions
    load the normal way.
    """
    from numba.core import caching
    from numba.core.runtime import rtsys

    cache = caching.Cache
    if getattr(cache.load_overload, "_ptexport", False):
        return
    normal = cache.load_overload

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        if not getattr(getattr(self, "_py_func", None), "__module__", "").startswith("ptexport."):
            return normal(self, sig, target_context)
        try:
            rtsys.initialize(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - e.g. a symbol a registry would have added: the normal way
            return normal(self, sig, target_context)

    load_overload._ptexport = True  # type: ignore[attr-defined]
    cache.load_overload = load_overload


class _LazyFunctionCache:
    """A kernel's numba cache made when it is first used (its first call or compile), not when the
    kernel is declared: ptexport declares ~130 kernels, and numba sets up each one's cache at once
    (its locator, the source file's stat, the index's name: ~0.2 ms), though most are never called
    from Python (they are compiled into their callers) and a run calls a few of the rest."""

    def __init__(self, py_func: Any) -> None:
        self._py_func = py_func
        self._real: Any = None

    def __getattr__(self, name: str) -> Any:
        real = self.__dict__["_real"]
        if real is None:
            from numba.core.caching import FunctionCache

            real = self._real = FunctionCache(self.__dict__["_py_func"])
        return getattr(real, name)


def _install_lazy_cache() -> None:
    """ptexport's kernels get :class:`_LazyFunctionCache` (other packages' functions numba's own)."""
    from numba.core import dispatcher

    cls = dispatcher.Dispatcher
    if getattr(cls.enable_caching, "_ptexport", False):
        return
    normal = cls.enable_caching

    def enable_caching(self: Any) -> None:
        if getattr(self.py_func, "__module__", "").startswith("ptexport."):
            self._cache = _LazyFunctionCache(self.py_func)
        else:
            normal(self)

    enable_caching._ptexport = True  # type: ignore[attr-defined]
    cls.enable_caching = enable_caching


if numba is not None:
    _SkipBlasProbe.install()
    try:
        _install_locator()
        _install_light_load()
        _install_lazy_cache()
    except Exception as e:  # pragma: no cover - a numba without the cache internals we know
        print(f"ptexport: numba's cache cannot be prepared ahead here ({e})", file=sys.stderr)


def skip_numba_extensions() -> None:
    """numba's extension entry points not loaded in this process (ptexport's command line, where
    nothing but ptexport's kernels run, and they use no other package's numba types).  numba loads
    them before the first kernel call of a process, cached or not (``entrypoints.init_all``: the
    metadata of every installed distribution read, 20-40 ms of each start-up here)."""
    if numba is None:
        return
    try:
        from numba.core import entrypoints

        entrypoints._already_initialized = True
    except (ImportError, AttributeError):  # pragma: no cover - another numba: its own way
        pass


def cache_prepared() -> bool:
    """Whether the decoder's kernels were compiled here before (numba then loads them in a second)."""
    if numba is None:
        return False
    from numba.core import caching, config

    kernel = _PACKAGE / "decoder" / "compiled" / "kernel.py"
    sub = caching.UserWideCacheLocator.get_suitable_cache_subpath(str(kernel))
    dirs = [kernel.parent / "__pycache__"]
    if config.CACHE_DIR:
        dirs.append(Path(config.CACHE_DIR) / sub)
    try:
        from numba.misc.appdirs import AppDirs

        dirs.append(Path(AppDirs(appname="numba", appauthor=False).user_cache_dir) / sub)
    except ImportError:  # pragma: no cover - numba moved it
        pass
    return any(any(d.glob(f"{kernel.stem}.*.nbi")) for d in dirs if d.is_dir())
