"""Bulk INSERT of int64 columns into SQLite without a Python loop per row.

Python's ``sqlite3.executemany`` spends most of its time converting each
value to a Python object and back (~0.25 M rows/s for a 23-column sample
row here).  This module binds the values straight from a numpy matrix with a
numba loop calling libsqlite3's ``sqlite3_bind_int64``/``sqlite3_step``
(the same library the ``sqlite3`` module is linked with, on the
``sqlite3.Connection``'s own handle, in the same transaction), and releases
the GIL while it runs so the caller's other threads go on.

Everything here is optional: :func:`available` says whether numba and a
usable handle are present, and the writer falls back to ``executemany``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sqlite3
import sys
from typing import Any

import numpy as np

SQLITE_DONE = 101
_lib: Any = None
_loader: Any = None
_reason = ""


def _init() -> bool:
    global _lib, _loader, _reason
    if _lib is not None:
        return _loader is not None
    try:
        import numba  # noqa: F401
    except ImportError:
        _lib, _reason = False, "numba is not installed"
        return False
    name = ctypes.util.find_library("sqlite3")
    if not name or sys.implementation.name != "cpython":
        _lib, _reason = False, "libsqlite3 not found"
        return False
    lib = ctypes.CDLL(name)
    lib.sqlite3_libversion.restype = ctypes.c_char_p
    if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
        _lib, _reason = False, "the sqlite3 module uses another libsqlite3"
        return False
    lib.sqlite3_bind_int64.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    lib.sqlite3_bind_int64.restype = ctypes.c_int
    lib.sqlite3_step.argtypes = [ctypes.c_void_p]
    lib.sqlite3_step.restype = ctypes.c_int
    lib.sqlite3_reset.argtypes = [ctypes.c_void_p]
    lib.sqlite3_reset.restype = ctypes.c_int
    lib.sqlite3_prepare_v2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    lib.sqlite3_prepare_v2.restype = ctypes.c_int
    lib.sqlite3_finalize.argtypes = [ctypes.c_void_p]
    lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.sqlite3_db_filename.restype = ctypes.c_char_p
    lib.sqlite3_errmsg.argtypes = [ctypes.c_void_p]
    lib.sqlite3_errmsg.restype = ctypes.c_char_p
    _lib = lib
    _loader = _make_loader(lib)
    return True


def _make_loader(lib: Any) -> Any:
    import numba

    bind = lib.sqlite3_bind_int64
    step = lib.sqlite3_step
    reset = lib.sqlite3_reset

    @numba.njit(nogil=True)
    def load(stmt: int, mat: np.ndarray) -> int:  # pragma: no cover - compiled
        n, k = mat.shape
        for i in range(n):
            for j in range(k):
                bind(stmt, j + 1, mat[i, j])
            rc = step(stmt)
            reset(stmt)
            if rc != SQLITE_DONE:
                return i
        return n

    return load


def available() -> tuple[bool, str]:
    return _init(), _reason


def connection_handle(conn: sqlite3.Connection, path: str) -> int | None:
    """The ``sqlite3*`` of a CPython ``sqlite3.Connection`` (first field after the object head).

    Checked by asking SQLite for the handle's file name; ``None`` if it does
    not match, so a different interpreter layout is never trusted.
    """
    if not _init():
        return None
    try:
        handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    except (ValueError, OSError):  # pragma: no cover
        return None
    if not handle:
        return None
    name = _lib.sqlite3_db_filename(handle, b"main")
    if name is None or name.decode(errors="replace") != path:
        return None
    return handle


class BulkInserter:
    """A prepared ``INSERT INTO table (cols) VALUES (?, ...)`` fed from int64 matrices."""

    def __init__(self, handle: int, sql: str) -> None:
        self.handle = handle
        stmt = ctypes.c_void_p()
        rc = _lib.sqlite3_prepare_v2(handle, sql.encode(), -1, ctypes.byref(stmt), None)
        if rc != 0:
            raise sqlite3.OperationalError(_lib.sqlite3_errmsg(handle).decode(errors="replace"))
        self.stmt = stmt.value

    def insert(self, mat: np.ndarray) -> None:
        mat = np.ascontiguousarray(mat, dtype=np.int64)
        done = _loader(self.stmt, mat)
        if done != mat.shape[0]:
            raise sqlite3.IntegrityError(
                f"row {done} of the batch: {_lib.sqlite3_errmsg(self.handle).decode(errors='replace')}")

    def close(self) -> None:
        if self.stmt:
            _lib.sqlite3_finalize(self.stmt)
            self.stmt = None
