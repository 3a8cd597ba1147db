"""Temporaries of exports that died, and the lock that keeps two exports off one target.

An export writes ``.NAME.ptexport-tmp-PID`` (with ``.NAME.ptexport-tmp-PID.TABLE.pages``,
``.NAME.ptexport-tmp-PID.INDEX.runs`` and ``...-journal``) beside a SQLite target (a DuckDB
target: with ``...wal`` and ``....stage``; a Parquet target: a directory of that name), or the
database ``NAME[:30]__ptexport_tmp_PID`` on a PostgreSQL server (``ptexport upgrade`` writes
``.NAME.ptexport-upgrade-PID``), and removes them when it ends, also on an error, a full disk,
Ctrl-C, SIGTERM or SIGHUP.  A process killed outright (SIGKILL, the OOM killer, a power cut)
cannot: its temporaries stay.  They are *stale* when the PID in their name is no longer a
process here and no export holds the target's lock.  The next export to the same target
removes them (:meth:`SqliteWriter.__init__`, :meth:`PostgresWriter.__init__`), and so does
``ptexport clean`` (:func:`ptexport.writers.clean`).

The lock: ``.NAME.ptexport-lock`` beside a SQLite target, held with ``flock`` for the whole
export and released by the kernel however the process ends (an unlocked lock file is stale);
a PostgreSQL export holds session advisory locks keyed by the target's name and by its
temporary database's name (which tells a live temporary from a stale one whatever host the
export runs on).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import shutil
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptexport.errors import ExportError, StorageError, TargetBusyError
from ptexport.writers.targets import is_postgres_target, target_path

#: ``.NAME.ptexport-tmp-PID`` and the files named after it; ``.NAME.ptexport-upgrade-PID``.
_TMP_FILE = re.compile(r"^\.(?P<name>.+)\.ptexport-(?:tmp|upgrade)-(?P<pid>\d+)(?:[.-].*)?$")
_LOCK_FILE = re.compile(r"^\.(?P<name>.+)\.ptexport-lock$")
LOCK_SUFFIX = ".ptexport-lock"
PG_TMP_INFIX = "__ptexport_tmp_"
#: Characters of the target's name kept in a PostgreSQL temporary database's name.
PG_NAME_KEEP = 30

_STORAGE_CAUSES = {
    errno.ENOSPC: "no space left on device (ENOSPC)",
    errno.EDQUOT: "disk quota exceeded (EDQUOT)",
    errno.EIO: "input/output error (EIO)",
    errno.EFBIG: "file too large for the file system (EFBIG)",
}


def os_error(e: OSError, target: str, what: str) -> ExportError:
    """``e`` as the typed error of an export to ``target``: :class:`StorageError` for a full
    disk, an exceeded quota or an I/O error, else :class:`ExportError` with the system's cause."""
    cause = _STORAGE_CAUSES.get(e.errno or 0)
    if cause:
        return StorageError(f"{target}: {what}: {cause}")
    text = e.strerror or str(e) or type(e).__name__
    if e.filename:
        text = f"{e.filename}: {text}"
    return ExportError(f"{target}: {what}: {text}")


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a process here (also one of another user: EPERM)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # not a PID at all
        return False
    return True


@dataclass
class Leftover:
    """A temporary file, stale lock file or temporary database of an export that is not running."""

    what: str  # the path, or the PostgreSQL database's name
    target: str  # the database it was for (a SQLite file name, a PostgreSQL URL)
    pid: int
    size: int = 0  # bytes (0 when not known)
    removed: bool = False
    kind: str = "file"  # "file", "lock" (an unlocked lock file) or "database" (PostgreSQL)


@dataclass
class CleanReport:
    leftovers: list[Leftover] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # targets an export is writing now: left alone

    @property
    def size(self) -> int:
        return sum(x.size for x in self.leftovers)


# ------------------------------------------------------------ forked children of an export
_held: set["TargetLock"] = set()  # locks this process holds
_exports = 0  # exports running in this process (SQLite and PostgreSQL)


def export_started() -> None:
    global _exports
    _exports += 1


def export_ended() -> None:
    global _exports
    _exports = max(0, _exports - 1)


def _after_fork_in_child() -> None:
    """In a child forked during an export (a --jobs worker, the decoding process): it does not
    hold the target's lock (an orphan would keep a killed export's target locked), and it ends
    with its parent (orphaned pool workers otherwise wait for work forever)."""
    global _exports
    for lock in list(_held):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover
                pass
    _held.clear()
    if _exports and threading.current_thread() is threading.main_thread():
        _die_with_parent()
    _exports = 0


def _die_with_parent() -> None:
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # pragma: no cover - the parent died before prctl
        os._exit(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ------------------------------------------------------------ the SQLite target's lock
def lock_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{LOCK_SUFFIX}")


def _read_pid(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class TargetLock:
    """``flock`` on ``.NAME.ptexport-lock`` beside ``target``, holding the owner's PID.

    The file is removed when the lock is released (while it is still held); an acquirer that
    opened a file just removed by its previous holder sees another inode at the path and tries
    again, so two processes never both hold a lock on the current file.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, target: Path, display: str | None = None) -> "TargetLock":
        path = lock_path(target)
        display = display or str(target)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise os_error(e, display, f"cannot create the lock file {path.name}") from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                raise _busy(display, pid, path) from None
            except OSError as e:  # e.g. ENOLCK: a file system without locks
                os.close(fd)
                raise os_error(e, display, f"cannot lock {path.name}") from e
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:  # removed (or replaced) by its previous holder after our open: again
                os.close(fd)
                continue
            try:  # the holder's PID, for the message of a refused export (best effort: the disk may be full)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError:
                pass
            lock = cls(path, fd)
            _held.add(lock)
            export_started()
            return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _held.discard(self)
        export_ended()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError:  # pragma: no cover - e.g. the directory became read-only: the file stays, unlocked
            pass
        os.close(fd)


def _lock_held(path: Path) -> bool:
    """True if an export holds the lock file ``path`` now (nothing is changed: for --dry-run)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: leave the target alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True
    finally:
        os.close(fd)  # also drops a lock we took
    return False


def refuse_if_busy(target: str) -> None:
    """Raise :class:`TargetBusyError` now if an export holds the SQLite target's lock (a quick
    check before the trace is opened; the writer takes the lock itself when it opens)."""
    if not target or is_postgres_target(target):
        return
    target = target_path(target)
    path = lock_path(Path(target))
    if _lock_held(path):
        raise _busy(target, _read_lock_pid(path), path)


def _busy(target: str, pid: int, path: Path) -> TargetBusyError:
    who = f"pid {pid}" if pid else "another process"
    return TargetBusyError(f"{target}: another export ({who}) is writing it (lock {path}); "
                           "try again when it has finished")


# ------------------------------------------------------------ SQLite temporaries
def _file_size(p: Path) -> int:
    """Bytes of a file, or of the files in a directory (a Parquet target's temporary)."""
    try:
        if p.is_dir() and not p.is_symlink():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size
    except OSError:
        return 0


def sqlite_leftovers(directory: Path, name: str | None = None, *, own: bool = False) -> list[Leftover]:
    """Temporary files in ``directory`` (of target ``name`` only, if given) whose PID is gone
    (with ``own``, also those named with this process's PID: an earlier process of the same PID,
    as in a container that starts ptexport as the same PID each time).  The target's lock is
    not checked here: the caller holds it, or checks it."""
    out = []
    me = os.getpid()
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    for entry in entries:
        m = _TMP_FILE.match(entry)
        if not m or (name is not None and m.group("name") != name):
            continue
        pid = int(m.group("pid"))
        if (pid == me and not own) or (pid != me and pid_alive(pid)):
            continue
        p = directory / entry
        out.append(Leftover(str(p), m.group("name"), pid, _file_size(p)))
    return out


def remove_temporary(tmp_path: Path, target: str) -> None:
    """An export's temporary ``tmp_path`` and every file named after it (``NAME.x``, ``NAME-x``: pages,
    index runs, journals, WAL, staging files)."""
    base = tmp_path.name
    try:
        names = os.listdir(tmp_path.parent)
    except OSError:  # pragma: no cover - the directory went away
        return
    remove_files([Leftover(str(tmp_path.parent / name), target, os.getpid()) for name in names
                  if name == base or (name.startswith(base) and name[len(base)] in ".-")])


def remove_files(items: list[Leftover]) -> None:
    for x in items:
        try:
            if os.path.isdir(x.what) and not os.path.islink(x.what):  # a Parquet target's temporary directory
                shutil.rmtree(x.what)
            else:
                os.unlink(x.what)
            x.removed = True
        except FileNotFoundError:
            x.removed = True
        except OSError:  # e.g. another user's file: listed, not removed
            pass


def clean_sqlite(path: Path, dry_run: bool = False, *, as_target: bool = False) -> CleanReport:
    """Stale temporaries (and unlocked lock files) in directory ``path``, or of the SQLite (DuckDB)
    target ``path`` (with ``as_target``, also a directory: a Parquet target); removed unless
    ``dry_run``.  A target whose lock is held is left alone."""
    report = CleanReport()
    if path.is_dir() and not as_target:
        directory, only = path, None
    else:
        directory = path.parent if str(path.parent) else Path(".")
        only = path.name
        if not directory.is_dir():
            raise ExportError(f"{path}: directory {directory} does not exist")
    names = set()
    for entry in os.listdir(directory):
        m = _TMP_FILE.match(entry) or _LOCK_FILE.match(entry)
        if m and (only is None or m.group("name") == only):
            names.add(m.group("name"))
    for name in sorted(names):
        target = directory / name
        lock = lock_path(target)
        if dry_run:
            if _lock_held(lock):
                report.busy.append(str(target))
                continue
            found = sqlite_leftovers(directory, name)
            if lock.exists():
                found.append(Leftover(str(lock), name, _read_lock_pid(lock), _file_size(lock), kind="lock"))
            report.leftovers.extend(found)
            continue
        had_lock = lock.exists()
        lock_pid = _read_lock_pid(lock) if had_lock else 0
        try:
            held = TargetLock.acquire(target)
        except TargetBusyError:
            report.busy.append(str(target))
            continue
        try:
            found = sqlite_leftovers(directory, name)
            remove_files(found)
            report.leftovers.extend(found)
        finally:
            held.release()  # removes the lock file (a stale one included)
        if had_lock:
            report.leftovers.append(Leftover(str(lock), name, lock_pid, 0, removed=not lock.exists(), kind="lock"))
    return report


def _read_lock_pid(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        return _read_pid(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------ PostgreSQL temporaries
def pg_tmp_name(dbname: str, pid: int) -> str:
    return f"{dbname[:PG_NAME_KEEP]}{PG_TMP_INFIX}{pid}"


def advisory_key(kind: str, name: str) -> int:
    """A signed 64-bit key for ``pg_try_advisory_lock`` (the same in every ptexport process)."""
    return int.from_bytes(hashlib.blake2b(f"ptexport {kind}:{name}".encode(), digest_size=8).digest(), "big",
                          signed=True)


def pg_try_lock(admin: Any, kind: str, name: str) -> bool:
    return bool(admin.execute("SELECT pg_try_advisory_lock(%s)", (advisory_key(kind, name),)).fetchone()[0])


def pg_unlock(admin: Any, kind: str, name: str) -> None:
    admin.execute("SELECT pg_advisory_unlock(%s)", (advisory_key(kind, name),))


def pg_leftovers(admin: Any, dbname: str, *, own: bool = False) -> list[Leftover]:
    """Temporary databases of exports to ``dbname`` whose export is gone: the PID in the name is
    not a process here (or, with ``own``, is this process) and no session holds the temporary's
    advisory lock (an export on another host holds it).  ``admin`` is connected to the
    maintenance database with autocommit."""
    prefix = dbname[:PG_NAME_KEEP] + PG_TMP_INFIX
    pat = re.compile(re.escape(prefix) + r"(\d+)$")
    rows = admin.execute("SELECT datname, pg_database_size(oid) FROM pg_database WHERE left(datname, %s) = %s",
                         (len(prefix), prefix)).fetchall()
    me = os.getpid()
    out = []
    for name, size in rows:
        m = pat.match(name)
        if not m:
            continue
        pid = int(m.group(1))
        if (pid == me and not own) or (pid != me and pid_alive(pid)):
            continue
        out.append(Leftover(name, dbname, pid, int(size or 0), kind="database"))
    return out


def pg_drop_leftovers(admin: Any, items: list[Leftover], dry_run: bool = False) -> list[Leftover]:
    """Drop (unless ``dry_run``) those of ``items`` whose advisory lock is free; returns them."""
    from psycopg import sql as pgsql  # ~0.6 s to import: only for a PostgreSQL target

    stale = []
    for x in items:
        if not pg_try_lock(admin, "tmp", x.what):
            continue  # a live export (maybe on another host) owns it
        try:
            if not dry_run:
                admin.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(x.what)))
                x.removed = True
            stale.append(x)
        finally:
            pg_unlock(admin, "tmp", x.what)
    return stale
