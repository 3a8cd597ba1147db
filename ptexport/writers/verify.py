"""Check a finished SQLite database: the header against the file, then ``PRAGMA integrity_check``.

ptexport lays most of its pages down itself (:mod:`ptexport.writers._btree`), so
a bug there would make a file that SQLite reads wrongly or calls malformed.
:func:`check_database` lists what is wrong with a file (nothing: it is sound):

* the header (https://www.sqlite.org/fileformat2.html, section 1.3): the
  magic string, a page size that is a power of two in 512..65536, and - when
  the in-header page count is valid (its version-valid-for number equals the
  change counter) - a page count times page size equal to the file's size;
* SQLite's full ``PRAGMA integrity_check`` (not ``quick_check``): every page
  of every B-tree, cell order and bounds, the freelist, pages used twice or
  never, and every index entry against its table row.

:func:`require_sound` raises :class:`~ptexport.errors.CorruptDatabaseError`
(a bug in ptexport, never the user's input) if anything is listed.  The SQLite
writer runs it on its temporary file before the rename, and ``ptexport
upgrade`` on its copy before the replace, when asked (``verify=True``) or
when ``$PTEXPORT_VERIFY_DB`` is set to anything but ``0`` (the test suite sets
it, so every database a test writes, in-process or in a child process, is
checked).  The check is O(file size) (index entries cost a B-tree lookup
each) and gives way to Ctrl-C/SIGTERM like the rest of an export.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading
from pathlib import Path

from ptexport.errors import CorruptDatabaseError, InputError

#: The environment switch: set (to anything but "" or "0") to check every SQLite database written.
VERIFY_ENV = "PTEXPORT_VERIFY_DB"
MAGIC = b"SQLite format 3\x00"
#: Problems integrity_check reports at most (SQLite's own default is 100).
MAX_ERRORS = 100


def verify_requested(verify: bool | None = None) -> bool:
    """``verify`` if given, else whether ``$PTEXPORT_VERIFY_DB`` asks for the check."""
    if verify is not None:
        return verify
    return os.environ.get(VERIFY_ENV, "").strip() not in ("", "0")


def header_problems(path: str | os.PathLike[str]) -> list[str]:
    """What is wrong with the 100-byte header as seen against the file's size."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        hdr = f.read(100)
    if len(hdr) < 100 or hdr[:16] != MAGIC:
        return ["not a SQLite database (no 'SQLite format 3' header)"]
    (raw,) = struct.unpack_from(">H", hdr, 16)
    page_size = 65536 if raw == 1 else raw
    if page_size < 512 or page_size & (page_size - 1):
        return [f"header: page size {raw} is not a power of two in 512..65536"]
    counter, npages = struct.unpack_from(">II", hdr, 24)
    (valid_for,) = struct.unpack_from(">I", hdr, 92)
    out = []
    if size % page_size:
        out.append(f"file size {size} is not a multiple of the page size {page_size}")
    if valid_for == counter and npages * page_size != size:
        out.append(f"header: page count {npages} ({npages * page_size} bytes) but the file has {size} bytes "
                   f"({size // page_size} pages)")
    return out


def check_database(path: str | os.PathLike[str], *, max_errors: int = MAX_ERRORS) -> list[str]:
    """The problems of the SQLite database at ``path`` (an empty list: it is sound).

    Opened read-only; a file SQLite cannot open as a database is one problem.  The check runs
    in a thread of its own while this one waits: a signal (Ctrl-C, SIGTERM) is handled at once,
    the check is interrupted (``sqlite3_interrupt``) and the handler's exception goes on.
    """
    out = header_problems(path)
    if out and out[0].startswith("not a SQLite"):
        return out
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as e:
        return [*out, f"cannot open: {e}"]
    rows: list[tuple[str]] = []
    errors: list[sqlite3.Error] = []

    def work() -> None:  # owns the connection from here on: closes it however the check ends
        try:
            conn.execute("PRAGMA cache_size = -65536")  # index entries are looked up in their table
            rows.extend(conn.execute(f"PRAGMA integrity_check({int(max_errors)})").fetchall())
        except sqlite3.Error as e:  # "file is not a database", "database disk image is malformed"
            errors.append(e)
        finally:
            conn.close()

    t = threading.Thread(target=work, name="ptexport-integrity-check", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(0.05)
    except BaseException:
        conn.interrupt()  # the thread ends (and closes) on its own; the file may go meanwhile
        raise
    if errors:
        out.append(f"integrity_check failed: {errors[0]}")
    elif rows != [("ok",)]:  # one message a line (SQLite joins several in one row)
        out.extend(line for r in rows for line in str(r[0]).splitlines() if line.strip())
    return out


def require_sound(path: str | os.PathLike[str], target: str, what: str = "the database written", *,
                  source: str | os.PathLike[str] | None = None) -> None:
    """Raise :class:`CorruptDatabaseError` naming ``target`` if :func:`check_database` finds anything.

    ``source``: the database ``path`` was made from (``ptexport upgrade``'s original); if that one
    fails the check too, the input is to blame: :class:`~ptexport.errors.InputError` instead.
    """
    problems = check_database(path)
    if not problems:
        return
    if source is not None:
        theirs = check_database(source)
        if theirs:
            raise InputError(f"not a sound SQLite database: {_summary(theirs)}", source=target)
    raise CorruptDatabaseError(f"{target}: {what} fails its check (a bug in ptexport): {_summary(problems)}")


def _summary(problems: list[str]) -> str:
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(problems[:3]) + more
