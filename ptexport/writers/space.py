"""How much room an export to a SQLite file needs, from the trace's size, and how much there is.

Measured on generated traces (``ptexport synth --cpus 2 --replay on``, 300 K to 1 M branches,
the default --itrace, calls built): the database holds 50-70 bytes per sample and the trace
0.4-1.1 bytes per sample, so 65 (program ``calls``) to 133 (``loops``) bytes of database per
byte of perf.data; while it is written the spooled pages and index runs sit beside it, and the
file system's use peaked at 1.7-2.0 times the final database (statvfs sampled every 2 ms).
The estimate is for a warning before the export starts: a full disk during the export is an
error that removes everything temporary (:class:`~ptexport.errors.StorageError`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ptexport.writers.targets import is_postgres_target, target_path

#: Bytes of database per byte of perf.data (the middle of the measured 65-133).
DB_BYTES_PER_TRACE_BYTE = 100
#: Peak use of the file system while writing, per byte of the final database.
PEAK_FACTOR = 1.8
#: An empty database (schema, indexes, the id-0 rows).
BASE_BYTES = 1 << 20


@dataclass(frozen=True)
class SpaceEstimate:
    trace_bytes: int
    database: int  # estimated bytes of the finished database
    peak: int  # estimated bytes in use at once while writing (database, pages, index runs)
    free: int  # bytes free to this user on the target's file system
    directory: str

    @property
    def short(self) -> bool:
        return self.free < self.peak


def trace_bytes(trace: str) -> int:
    """Bytes of a perf.data file or directory (0 for a pipe or stdin)."""
    if trace == "-":
        return 0
    p = Path(trace)
    try:
        if p.is_dir():
            return sum(f.stat().st_size for f in p.iterdir() if f.is_file())
        if p.is_file():
            return p.stat().st_size
    except OSError:
        pass
    return 0


def estimate(trace: str, target: str) -> SpaceEstimate | None:
    """The room a SQLite export of ``trace`` to ``target`` needs and the room there is, or None
    (a PostgreSQL target, a stream, a directory that does not exist)."""
    if not target or is_postgres_target(target):
        return None
    size = trace_bytes(trace)
    if not size:
        return None
    directory = os.path.dirname(os.path.abspath(target_path(target)))
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    database = BASE_BYTES + size * DB_BYTES_PER_TRACE_BYTE
    return SpaceEstimate(size, database, int(database * PEAK_FACTOR), st.f_bavail * st.f_frsize, directory)
