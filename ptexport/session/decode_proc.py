"""Decode in a second process while the export runs: the two halves of ``ptexport TRACE --db`` on two cores.

The compiled decoder holds the GIL, so a thread would not overlap it with the
export; a forked child does.  The child inherits the opened session (fork:
nothing is pickled but the batches), iterates
:meth:`~ptexport.session.perfsession.PerfSession.iter_batches` and writes each
:class:`SampleColumns` as raw column bytes into a slot of a shared-memory ring
(SLOTS below; the pipe says which, and carries a batch too big for a slot); the
parent copies the arrays out and hands the slot back.  The ring is the
back-pressure: the child decodes at most SLOTS batches ahead of the parent, so
memory stays bounded.  An error in the child (a typed :class:`PtExportError`) is sent
over and raised in the parent; closing the iterator early ends the child.

``--jobs N`` (N >= 2) turns it on (:func:`maybe_process`): the child decodes, with N - 1
processes of its own when N > 2 (PSB segments, :mod:`ptexport.session.parallel`), and this process
exports or formats.  ``--jobs 1`` is one process.  Measured on this 2-core machine, 10 M branches:
``ptexport TRACE --db`` 10.4 s with ``--jobs 1`` against 9.0 s with the decoding child; the
segment workers alone (the parent merging, joining and exporting) took 13.4 s.
"""

from __future__ import annotations

import dataclasses
import mmap
import multiprocessing
import os
import time
from typing import Any, Iterator

import numpy as np

from ptexport.errors import PtExportError
from ptexport.samples.columns import SampleColumns
from ptexport.session.parallel import die_with_parent, ignore_stop_signals

_FIELDS = [f.name for f in dataclasses.fields(SampleColumns)]


def available() -> bool:
    """Forking is possible here (Linux, macOS): else decode in-process."""
    return "fork" in multiprocessing.get_all_start_methods()


#: The shared-memory ring the child writes batches into: SLOTS slots of SLOT_BYTES (a batch of 64 K
#: rows is at most ~13 MB of columns; a bigger one goes through the pipe).  The child fills a free slot
#: and says which over the pipe; the parent copies the columns out and hands the slot back over a
#: second pipe.  Measured (10 M branches, decoding only): through the pipe alone, 6.2 s wall against
#: 3.8 s in-process (each byte written and read through a kernel buffer by both processes, in lock step).
SLOTS = 3
SLOT_BYTES = 16 << 20


def _child(session: Any, conn: Any, batch_rows: int, jobs: int, ring: Any = None, free: Any = None) -> None:
    ignore_stop_signals()
    die_with_parent()
    try:
        t0 = time.perf_counter()
        idle = list(range(SLOTS)) if ring is not None else []
        for cols in session.iter_batches(jobs, batch_rows=batch_rows):
            parts = [(name, np.ascontiguousarray(a)) for name in _FIELDS
                     if (a := getattr(cols, name)) is not None]
            size = sum(a.nbytes for _, a in parts)
            if ring is not None and size <= SLOT_BYTES:
                if not idle:
                    idle.append(free.recv())  # wait for the parent to hand one back
                slot = idle.pop()
                at = slot * SLOT_BYTES
                layout = []
                for name, a in parts:
                    ring[at:at + a.nbytes] = memoryview(a).cast("B")
                    layout.append((name, a.dtype.str, a.shape[0], at))
                    at += a.nbytes
                conn.send(("shm", (slot, layout)))
                continue
            conn.send(("batch", [(name, a.dtype.str, a.shape[0]) for name, a in parts]))
            for _, a in parts:
                conn.send_bytes(memoryview(a).cast("B"))
        conn.send(("end", time.perf_counter() - t0))
    except BaseException as e:  # noqa: BLE001 - everything goes to the parent, which raises it
        try:
            conn.send(("error", e))
        except Exception:  # noqa: BLE001 - not picklable: its text
            conn.send(("error", PtExportError(f"decoding: {type(e).__name__}: {e}")))
    finally:
        conn.close()


#: Bytes a pipe holds (Linux's F_SETPIPE_SZ; 64 KiB by default, /proc/sys/fs/pipe-max-size is 1 MiB by
#: default): a batch is several MB of columns, and each pipe-full is a read and a write system call.
PIPE_BYTES = 1 << 20


def _widen(conn: Any) -> None:
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (OSError, ImportError):  # an unprivileged lower limit, not Linux: the default size
        pass


class DecodeProcess:
    """The session's sample batches, decoded by a forked child; ``seconds`` = the child's decode time.

    With ``jobs`` > 1 the child decodes with that many worker processes of its own (it is then not
    a daemon process, which multiprocessing forbids to have children; it and its workers end with
    this process: :func:`die_with_parent`)."""

    def __init__(self, session: Any, batch_rows: int = 1 << 16, jobs: int = 1) -> None:
        ctx = multiprocessing.get_context("fork")
        self.jobs = jobs
        self._conn, child_conn = ctx.Pipe(duplex=False)
        _widen(child_conn)
        try:
            self._ring: Any = mmap.mmap(-1, SLOTS * SLOT_BYTES)  # anonymous and shared: the child writes here
        except (OSError, ValueError):  # no room for it: the pipe alone
            self._ring = None
        free_r, self._free = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(session, child_conn, batch_rows, jobs, self._ring, free_r),
                                 daemon=jobs <= 1, name="ptexport-decode")
        self._proc.start()
        child_conn.close()
        free_r.close()
        self.seconds = 0.0
        self._done = False

    def __iter__(self) -> Iterator[SampleColumns]:
        try:
            while True:
                try:
                    kind, payload = self._conn.recv()
                except EOFError as e:
                    raise PtExportError("the decoding process ended unexpectedly") from e
                if kind == "end":
                    self.seconds = payload
                    self._done = True
                    return
                if kind == "error":
                    self._done = True
                    raise payload
                if kind == "shm":
                    slot, layout = payload
                    ring = self._ring
                    cols = {name: np.frombuffer(ring, dtype=dtype, count=n, offset=at).copy()
                            for name, dtype, n, at in layout}
                    try:
                        self._free.send(slot)
                    except OSError:  # the child is gone: the next receive says how
                        pass
                    yield SampleColumns(**cols)
                    continue
                cols = {}
                for name, dtype, n in payload:
                    buf = bytearray(n * np.dtype(dtype).itemsize)
                    if len(buf):
                        self._conn.recv_bytes_into(buf)
                    else:
                        self._conn.recv_bytes()
                    cols[name] = np.frombuffer(buf, dtype=dtype)
                yield SampleColumns(**cols)
        finally:
            self.close()

    def close(self) -> None:
        """End the child (at once if it is still decoding) and reap it."""
        if self._proc is None:
            return
        if not self._done and self._proc.is_alive():
            self._proc.kill()  # it ignores the stop signals (ignore_stop_signals)
        self._conn.close()
        self._free.close()
        self._proc.join()
        self._proc = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None

    def __del__(self) -> None:  # pragma: no cover - a safety net; close() is the way
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def maybe_process(session: Any, jobs: int, enabled: bool | None = None) -> Any:
    """A :class:`DecodeProcess` for ``--jobs jobs`` when possible, else None (decode in-process).

    ``enabled`` True or False overrides ``jobs`` >= 2 (as does ``PTEXPORT_DECODE_PROCESS=1`` or ``0``);
    a pipe-mode recording is decoded in-process (the child could not read on from the pipe)."""
    env = os.environ.get("PTEXPORT_DECODE_PROCESS", "")
    if enabled is None and env:
        enabled = env != "0"
    if enabled is None:
        enabled = jobs >= 2
    if not enabled or not available() or getattr(session.pd, "is_pipe", False):
        return None
    return DecodeProcess(session, jobs=max(1, jobs - 1))
