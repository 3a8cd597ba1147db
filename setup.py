"""Package discovery that pyproject.toml alone cannot express.

The viewer lives in ``viewer/`` at the top of the repository (it reads the
database only and imports no decoder module) and installs as the package
``ptexport_viewer``; the schema migrations in ``migrations/`` install as
``ptexport_migrations`` (``ptexport upgrade`` finds them there); everything
else is the ``ptexport`` package.
"""

from setuptools import find_packages, setup

core = find_packages(include=["ptexport", "ptexport.*"])
viewer = ["ptexport_viewer"] + [f"ptexport_viewer.{p}" for p in find_packages(where="viewer")]

setup(
    packages=core + viewer + ["ptexport_migrations"],
    package_dir={"ptexport_viewer": "viewer", "ptexport_migrations": "migrations"},
)
