"""What every ``bench/`` and ``scripts/`` tool shares: its outputs are never overwritten by surprise.

* :func:`add_options` gives a parser ``--force``, ``--tiny`` and, on request, ``--json FILE`` (the
  figures as one JSON object) and ``--keep DIR`` (keep the generated inputs there);
* :func:`parse` parses, applies the ``--tiny`` preset, then refuses, before anything is written,
  every output path the user named that already exists: one line on stderr, exit status 2,
  unless ``--force``;
* :func:`workdir` is where a run's generated files go: ``--keep DIR`` (made if missing) or a
  temporary directory that is removed at the end, whatever happens;
* :func:`write_json` writes the report atomically (a temporary beside it, then a rename);
* :func:`one_line_errors` turns a failure the user can act on into one line and exit status 1.

A bench tool runs as ``python3 bench/NAME.py``, so this folder is first on ``sys.path`` and it
imports ``from _common import ...``; ``scripts/`` tools put this folder there first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Exit status of a refused or mistaken command line (argparse's own).
USAGE_EXIT = 2
#: perf 6.1's exporter (Debian linux-perf).
PERF_EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"


def add_options(ap: argparse.ArgumentParser, *, keep: bool = False, report: bool = True, tiny: bool = True) -> None:
    """``--force`` always; ``--tiny``, ``--keep DIR`` and ``--json FILE`` as asked for."""
    ap.add_argument("--force", action="store_true", help="replace output files that already exist")
    if tiny:
        ap.add_argument("--tiny", action="store_true",
                        help="smallest sizes and one run of each: a quick check that the tool works (its "
                             "figures measure start-up, not throughput); overrides the size options")
    if keep:
        ap.add_argument("--keep", metavar="DIR",
                        help="keep the generated inputs in DIR (default: a temporary directory, removed at the "
                             "end); DIR must not exist, or with --force the run's files in it are replaced "
                             "(others are left alone)")
    if report:
        ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE as one JSON object")


def parse(ap: argparse.ArgumentParser, argv: list[str] | None, *, tiny: dict[str, Any] | None = None,
          outputs: Callable[[argparse.Namespace], Iterable[str | os.PathLike[str] | None]] | None = None,
          ) -> argparse.Namespace:
    """Parse ``argv``; with ``--tiny`` set the ``tiny`` values; refuse existing outputs without ``--force``.

    ``outputs(args)`` names the paths the run will write (``None`` entries are skipped); ``--json``
    and ``--keep`` are added to them here.
    """
    args = ap.parse_args(argv)
    if tiny and getattr(args, "tiny", False):
        for name, value in tiny.items():
            setattr(args, name, value)
    paths: list[str | os.PathLike[str] | None] = [getattr(args, "json", None), getattr(args, "keep", None)]
    if outputs is not None:
        paths += list(outputs(args))
    report = getattr(args, "json", None)
    if report is not None and not Path(report).resolve().parent.is_dir():
        ap.exit(USAGE_EXIT, f"{ap.prog}: error: --json {report}: no such directory {Path(report).parent}\n")
    if not getattr(args, "force", False):
        for p in paths:
            if p is not None and os.path.lexists(p):
                ap.exit(USAGE_EXIT, f"{ap.prog}: error: {os.fspath(p)} already exists (use --force to replace it)\n")
    compile_bytecode()
    return args


def compile_bytecode() -> None:
    """The bytecode of the ptexport that the timed commands import, written as ``pip install .``
    writes it at install time.  A checkout run in place under ``PYTHONDONTWRITEBYTECODE`` (as this
    machine's environment sets it) would otherwise compile every module from source in every timed
    process: ~0.15 s of start-up no user pays."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("ptexport")
    if spec is None or not spec.submodule_search_locations:
        return
    for where in spec.submodule_search_locations:
        # (compileall writes .pyc files whatever PYTHONDONTWRITEBYTECODE says; only stale ones are rewritten)
        compileall.compile_dir(where, quiet=1, workers=1)


def need_file(ap: argparse.ArgumentParser, path: str | os.PathLike[str] | None, what: str = "input") -> None:
    """Exit 2 with one line when an input file the user named is not there."""
    if path is not None and not os.path.isfile(path):
        ap.exit(USAGE_EXIT, f"{ap.prog}: error: {what} {os.fspath(path)}: no such file\n")


def need_perf(ap: argparse.ArgumentParser, *, exporter: bool = False) -> None:
    """Exit 2 with one line when perf 6.1 (and, with ``exporter``, its export-to-sqlite.py) is missing."""
    if shutil.which("perf") is None or (exporter and not os.path.isfile(PERF_EXPORTER)):
        what = "perf and its export-to-sqlite.py are" if exporter else "perf is"
        ap.exit(USAGE_EXIT, f"{ap.prog}: error: {what} needed (Debian: linux-perf python3-pyside2.qtsql)\n")


def perf_env() -> dict[str, str]:
    """Environment for perf's embedded (Debian) Python: /usr/bin first on PATH, no virtualenv or pyenv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    return env


@contextmanager
def one_line_errors(ap: argparse.ArgumentParser) -> Iterator[None]:
    """A failure the user can act on (a file, a database, a command that failed) as one line on
    stderr and exit status 1, not a traceback."""
    import sqlite3
    import subprocess

    try:
        from ptexport.errors import PtExportError
    except ImportError:  # pragma: no cover - ptexport not importable: nothing of its to catch
        PtExportError = OSError  # noqa: N806
    try:
        yield
    except (PtExportError, sqlite3.Error, OSError) as e:
        ap.exit(1, f"{ap.prog}: error: {e}\n")
    except subprocess.CalledProcessError as e:
        cmd = " ".join(map(str, e.cmd)) if isinstance(e.cmd, (list, tuple)) else str(e.cmd)
        ap.exit(1, f"{ap.prog}: error: {cmd} failed with exit status {e.returncode}\n")


@contextmanager
def workdir(keep: str | os.PathLike[str] | None, prefix: str) -> Iterator[Path]:
    """``keep`` (made if missing) or a temporary directory removed when the block ends."""
    if keep is not None:
        path = Path(keep)
        path.mkdir(parents=True, exist_ok=True)
        yield path.resolve()
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp).resolve()


def write_json(path: str | os.PathLike[str] | None, data: dict[str, Any]) -> None:
    """``data`` as indented JSON at ``path`` (nothing when ``path`` is None), replacing it atomically."""
    if path is None:
        return
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def parse_count(text: str) -> int:
    """``2000``, ``20k``, ``1.5M`` -> an int (the size options' suffixes)."""
    t = str(text).strip().lower()
    mult = {"k": 1000, "m": 1000_000}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (e.g. 2000, 20k, 1M)") from None


def ratio(a: float, b: float) -> float | None:
    """``a / b``, or None when ``b`` is 0 (JSON has no infinity)."""
    return a / b if b else None


#: Set by bench_matrix once it has made the README's venv: the ``ptexport`` every later row measures.
EXE_ENV = "PTEXPORT_BENCH_EXE"


def measured(cmd: list[str]) -> list[str]:
    """``cmd`` with ``ptexport`` as the install measured: the README venv's console script when
    bench_matrix made one (``PTEXPORT_BENCH_EXE``: what the README's first command installs), else the
    one beside this Python - not a version manager's shim found on PATH first (pyenv's runs two shell
    scripts, 0.05-0.1 s, before ptexport starts).  ``ptexport synth`` (the generator, an extra) and
    other commands are left as they are."""
    if not cmd or cmd[0] != "ptexport" or cmd[1:2] == ["synth"]:
        return cmd
    exe = os.environ.get(EXE_ENV)
    if not exe:
        beside = Path(sys.executable).parent / "ptexport"
        exe = str(beside) if beside.exists() else "ptexport"
    return [exe, *cmd[1:]]


def run_timed(cmd: list[str], cwd: str | os.PathLike[str] | None = None,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """One process, stdout discarded: wall s, CPU s (user+sys of it and its waited-for children), peak
    RSS KiB, stderr.  A failure is one line (exit 1) with the command and the end of its stderr."""
    cmd = measured(cmd)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None  # stderr=PIPE
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc:
        tail = " | ".join(err.strip().splitlines()[-3:])
        raise SystemExit(f"{Path(sys.argv[0]).stem}: {' '.join(cmd)} failed with exit status {rc}: {tail}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_kib": ru.ru_maxrss, "stderr": err}
