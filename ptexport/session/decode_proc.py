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
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any, Callable, Iterator

import numpy as np

from ptexport.errors import PtExportError
from ptexport.samples.columns import SampleColumns
from ptexport.session.parallel import die_with_parent, ignore_stop_signals

_FIELDS = [f.name for f in dataclasses.fields(SampleColumns)]


def available() -> bool:
    """Forking is possible here (Linux, macOS): else decode in-process."""
    return "fork" in multiprocessing.get_all_start_methods()


#: The shared-memory ring the child writes batches into: SLOTS slots of SLOT_BYTES (a batch of 64 K
#: rows is at most ~13 MB of columns).  The child fills a free slot and says which over the pipe; the
#: parent's columns are views of the slot (no copy), and the slot goes back to the child when the last
#: of them is gone (a finalizer; the columns may outlive the loop, in the writer's queue).  With no
#: slot free (the parent still holds them all) or a batch bigger than a slot, the batch goes through
#: the pipe itself: the child never waits for a slot, so nothing the parent keeps can stall it.
#: Measured (10 M branches, decoding only): through the pipe alone, 6.2 s wall against 3.8 s
#: in-process (each byte written and read through a kernel buffer by both processes, in lock step).
SLOTS = 4
SLOT_BYTES = 16 << 20


def _aligned(n: int) -> int:
    return (n + 63) & ~63


def _child(session: Any, conn: Any, batch_rows: int, jobs: int, ring: Any = None, free: Any = None,
           tail: Callable[[], Any] | None = None) -> None:
    ignore_stop_signals()
    die_with_parent()
    try:
        t0 = time.perf_counter()
        idle = list(range(SLOTS)) if ring is not None else []
        # not decoded ahead on a thread (as --jobs 1 does): batches made faster than the parent frees its
        # slots go through the pipe, each a new buffer there (100 M branches: peak RSS 367 -> 394 MB)
        # split between machines here (a VM's batches): the exporting process has less to do
        for cols in session.split_batches(session.iter_batches(jobs, batch_rows=batch_rows)):
            parts = [(name, np.ascontiguousarray(a)) for name in _FIELDS
                     if (a := getattr(cols, name)) is not None]
            size = sum(_aligned(a.nbytes) for _, a in parts)
            while ring is not None and free.poll():  # slots the parent handed back
                idle.append(free.recv())
            if idle and size <= SLOT_BYTES:
                slot = idle.pop()
                at = slot * SLOT_BYTES
                layout = []
                for name, a in parts:
                    ring[at:at + a.nbytes] = memoryview(a).cast("B")
                    layout.append((name, a.dtype.str, a.shape[0], at))
                    at += _aligned(a.nbytes)  # each column aligned, as numpy allocates (the kernels want it)
                conn.send(("shm", (slot, layout)))
                continue
            conn.send(("batch", [(name, a.dtype.str, a.shape[0]) for name, a in parts]))
            for _, a in parts:
                conn.send_bytes(memoryview(a).cast("B"))
        # the end of the batches first: the parent finishes its export while the tail runs here
        conn.send(("end", (time.perf_counter() - t0, None)))
        if tail is not None:
            conn.send(("tail", tail()))
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
    this process: :func:`die_with_parent`).

    ``tail``: work for the child once it has decoded the last batch, while this process still exports (a
    VM export's VMCS measurement, :func:`ptexport.session.export.measure_vmcs`): its result is
    ``self.tail``, a future set when the child has done it (the iteration ends before: this process
    finishes its export meanwhile; an error or an early close cancels it)."""

    def __init__(self, session: Any, batch_rows: int = 1 << 16, jobs: int = 1,
                 tail: Callable[[], Any] | None = None) -> None:
        ctx = multiprocessing.get_context("fork")
        self.jobs = jobs
        self._conn, child_conn = ctx.Pipe(duplex=False)
        _widen(child_conn)
        try:
            self._ring: Any = mmap.mmap(-1, SLOTS * SLOT_BYTES)  # anonymous and shared: the child writes here
        except (OSError, ValueError):  # no room for it: the pipe alone
            self._ring = None
        free_r, self._free = ctx.Pipe(duplex=False)
        self._lock = threading.RLock()  # a finalizer may run inside close(), in the same thread
        self.tail: Future[Any] | None = Future() if tail is not None else None
        self._proc = ctx.Process(target=_child, args=(session, child_conn, batch_rows, jobs, self._ring, free_r, tail),
                                 daemon=jobs <= 1, name="ptexport-decode")
        self._proc.start()
        child_conn.close()
        free_r.close()
        self.seconds = 0.0
        self._done = False
        self._tail_thread: threading.Thread | None = None

    def __iter__(self) -> Iterator[SampleColumns]:
        try:
            while True:
                try:
                    kind, payload = self._conn.recv()
                except EOFError as e:
                    raise PtExportError("the decoding process ended unexpectedly") from e
                if kind == "end":
                    self.seconds = payload[0]
                    self._done = True
                    if self.tail is not None:  # its result comes after: received on a thread of its own
                        self._tail_thread = threading.Thread(target=self._receive_tail, name="ptexport-decode-tail",
                                                             daemon=True)
                        self._tail_thread.start()
                    return
                if kind == "error":
                    self._done = True
                    raise payload
                if kind == "shm":
                    slot, layout = payload
                    base = np.frombuffer(self._ring, np.uint8, SLOT_BYTES, slot * SLOT_BYTES)
                    weakref.finalize(base, self._release, slot)  # when no column of the batch is left
                    at0 = slot * SLOT_BYTES
                    cols = {name: base[at - at0:at - at0 + n * np.dtype(dtype).itemsize].view(dtype)
                            for name, dtype, n, at in layout}
                    del base
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
            if self._tail_thread is None:  # (a tail under way: its future, then close(), end the child)
                self.close()

    def _receive_tail(self) -> None:
        """``self.tail`` set from the child's last message (its result, or the error it raised)."""
        fut = self.tail
        assert fut is not None  # (started only with a tail)
        if not fut.set_running_or_notify_cancel():
            return  # cancelled: close() ends the child
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError) as e:
            fut.set_exception(PtExportError(f"the decoding process ended before its last work ({e or 'EOF'})"))
            return
        if kind == "tail":
            fut.set_result(payload)
        else:
            fut.set_exception(payload if isinstance(payload, BaseException)
                              else PtExportError(f"the decoding process sent {kind!r}"))

    def _release(self, slot: int) -> None:
        """Hand ``slot`` back to the child (from whichever thread let go of the batch's last column)."""
        with self._lock:
            if self._free is None:
                return
            try:
                self._free.send(slot)
            except (OSError, ValueError):  # the child is gone or the pipe closed
                pass

    def close(self) -> None:
        """End the child (at once if it is still decoding) and reap it."""
        if self._proc is None:
            return
        waiting = self._tail_thread is not None and self._tail_thread.is_alive()
        if self.tail is not None:
            self.tail.cancel()  # (a no-op once running or set) nobody waits for what the child did not send
        if (not self._done or waiting) and self._proc.is_alive():
            self._proc.kill()  # it ignores the stop signals (ignore_stop_signals); a tail unread is not waited for
        if self._tail_thread is not None:
            self._tail_thread.join()  # (the child is gone or has sent its last message)
            self._tail_thread = None
        self._conn.close()
        with self._lock:
            self._free.close()
            self._free = None
        self._proc.join()
        self._proc = None
        if self._ring is not None:
            try:
                self._ring.close()
            except BufferError:  # batches still held: the mapping goes with the last of them
                pass
            self._ring = None

    def __del__(self) -> None:  # pragma: no cover - a safety net; close() is the way
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def maybe_process(session: Any, jobs: int, enabled: bool | None = None,
                  tail: Callable[[], Any] | None = None) -> Any:
    """A :class:`DecodeProcess` for ``--jobs jobs`` (and its ``tail``) when possible, else None (decode
    in-process).

    ``enabled`` True or False overrides ``jobs`` >= 2 (as does ``PTEXPORT_DECODE_PROCESS=1`` or ``0``);
    a pipe-mode recording is decoded in-process (the child could not read on from the pipe)."""
    env = os.environ.get("PTEXPORT_DECODE_PROCESS", "")
    if enabled is None and env:
        enabled = env != "0"
    if enabled is None:
        enabled = jobs >= 2
    if not enabled or not available() or getattr(session.pd, "is_pipe", False):
        return None
    return DecodeProcess(session, jobs=max(1, jobs - 1), tail=tail)
