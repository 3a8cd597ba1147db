"""Package discovery that pyproject.toml alone cannot express, and compiling the decoder ahead.

The viewer lives in ``viewer/`` at the top of the repository (it reads the
database only and imports no decoder module) and installs as the package
``ptexport_viewer``; the schema migrations in ``migrations/`` install as
``ptexport_migrations`` (``ptexport upgrade`` finds them there); everything
else is the ``ptexport`` package.

Building the package also compiles its numba kernels over the shipped sample
recordings (``python -m ptexport.cli.precompile``, see ``ptexport/jit.py``), so that the
cache files go into the wheel and the first run after ``pip install .`` does
not spend its first tens of seconds compiling.  ``PTEXPORT_NO_PRECOMPILE=1``
skips it; a failure there only costs that time back at the first run.
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class build_py_precompiled(build_py):
    def run(self):
        super().run()
        self._programs()
        samples = HERE / "sample_data"
        if getattr(self, "editable_mode", False) or os.environ.get("PTEXPORT_NO_PRECOMPILE") or not samples.is_dir():
            return
        lib = os.path.abspath(self.build_lib)
        env = {**os.environ, "PYTHONPATH": lib + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("NUMBA_CACHE_DIR", None)  # the cache must land beside the built modules
        print("compiling ptexport's decoder ahead (once, at install)", file=sys.stderr)
        proc = subprocess.run([sys.executable, "-m", "ptexport.cli.precompile", str(samples)], env=env, cwd=lib)
        if proc.returncode:
            print("warning: compiling ahead failed; the first run will compile instead", file=sys.stderr)


    def _programs(self):
        """The sample programs (built here from sample_data/src, see its Makefile) for `synth --program NAME`."""
        src = HERE / "sample_data" / "src"
        if not src.is_dir():
            return
        dest = Path(self.build_lib) / "ptexport" / "synth" / "programs"
        dest.mkdir(parents=True, exist_ok=True)
        for prog in sorted(src.iterdir()):
            if prog.is_file() and os.access(prog, os.X_OK) and prog.read_bytes()[:4] == b"\x7fELF":
                self.copy_file(str(prog), str(dest / prog.name))


core = find_packages(include=["ptexport", "ptexport.*"])
viewer = ["ptexport_viewer"] + [f"ptexport_viewer.{p}" for p in find_packages(where="viewer")]

setup(
    packages=core + viewer + ["ptexport_migrations"],
    package_dir={"ptexport_viewer": "viewer", "ptexport_migrations": "migrations"},
    cmdclass={"build_py": build_py_precompiled},
)
