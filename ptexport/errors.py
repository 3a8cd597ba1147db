"""The one exception tree of ptexport.

Every error a user can cause (bad input, bad options, an existing database)
is a :class:`PtExportError`.  Input errors say *what*, *where* and *why*::

    perf.data+0x1f2c: record SAMPLE: size 4 is smaller than the 8-byte header

The CLI turns them into a one-line message and the exit code of the class;
anything else that escapes is a bug.  Third-party exceptions are wrapped at
the boundary with ``raise ... from e``.
"""

from __future__ import annotations


class PtExportError(Exception):
    """Root of every error ptexport raises on purpose."""

    exit_code = 1


class UsageError(PtExportError):
    """Options that do not fit together or name something that is not there."""

    exit_code = 2


class InputError(PtExportError):
    """Malformed or unreadable input: names the source, the byte offset and the cause.

    ``source`` is a file name or a stream name such as ``aux cpu 3``;
    ``offset`` is a byte offset in that source; ``what`` names the structure
    being read (``record MMAP2``, ``feature BUILD_ID``, ``packet TIP``).
    """

    def __init__(
        self,
        cause: str,
        *,
        source: str | None = None,
        offset: int | None = None,
        what: str | None = None,
    ) -> None:
        self.cause = cause
        self.source = source
        self.offset = offset
        self.what = what
        super().__init__(self._render())

    def __reduce__(self) -> tuple:
        # pickled whole (what, where, why), not as its message: raised again in the process that
        # waits for a worker's result (the --jobs pool, a dask cluster) it reads the same
        return (type(self)._restore, (self.cause, self.source, self.offset, self.what))

    @classmethod
    def _restore(cls, cause: str, source: str | None, offset: int | None, what: str | None) -> "InputError":
        return cls(cause, source=source, offset=offset, what=what)

    def _render(self) -> str:
        where = self.source or "<input>"
        if self.offset is not None:
            where = f"{where}+{self.offset:#x}"
        if self.what:
            return f"{where}: {self.what}: {self.cause}"
        return f"{where}: {self.cause}"

    def relocated(self, *, source: str | None = None, offset_base: int = 0) -> "InputError":
        """The same error seen from an enclosing source (e.g. a buffer inside a file)."""
        err = type(self).__new__(type(self))
        InputError.__init__(
            err,
            self.cause,
            source=source if source is not None else self.source,
            offset=None if self.offset is None else self.offset + offset_base,
            what=self.what,
        )
        return err


class PerfDataError(InputError):
    """A perf.data file (or pipe stream) that does not follow the format."""


class TruncatedError(PerfDataError):
    """The input ends in the middle of a structure."""


class PacketError(InputError):
    """An Intel PT packet stream that cannot be parsed at some offset."""


class ImageError(InputError):
    """A code image (ELF, kcore, raw binary) that cannot be loaded."""


class ExportError(PtExportError):
    """The database cannot be written."""


class DatabaseExistsError(ExportError):
    """The target database exists and --force was not given."""

    exit_code = 2


class StorageError(ExportError):
    """The target's storage failed while the database was written: no space left (ENOSPC), disk
    quota exceeded (EDQUOT), an I/O error (EIO), or the PostgreSQL server's disk full / I/O error.
    Everything temporary is removed and the previous database (``--force``) is untouched."""

    exit_code = 74  # EX_IOERR (sysexits.h)


class CorruptDatabaseError(ExportError):
    """A database ptexport has just written fails its check (``PRAGMA integrity_check``, the header
    against the file size): a bug in ptexport's writer, never the user's input.  Raised only when
    the check is asked for (``$PTEXPORT_VERIFY_DB``, ``verify=True``); the file is not renamed into place."""

    exit_code = 70  # EX_SOFTWARE (sysexits.h): an internal software error


class TargetBusyError(ExportError):
    """Another export is writing the same target (its lock is held)."""

    exit_code = 75  # EX_TEMPFAIL (sysexits.h): try again when the other export is done


class ClusterError(PtExportError):
    """The dask cluster of ``--scheduler`` cannot be reached, has no workers, cannot read the
    recording, or was lost while decoding (a task whose workers kept dying)."""

    exit_code = 69  # EX_UNAVAILABLE (sysexits.h): a service is unavailable


class SynthError(PtExportError):
    """The sample-trace generator cannot make the asked-for trace."""
