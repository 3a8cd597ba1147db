"""Decode in a second process while the export runs: the two halves of ``ptexport TRACE --db`` on two cores.

The compiled decoder holds the GIL, so a thread would not overlap it with the
export; a forked child does.  The child inherits the opened session (fork:
nothing is pickled but the batches), iterates
:meth:`~ptexport.session.perfsession.PerfSession.iter_batches` and sends each
:class:`SampleColumns` as raw column bytes through a pipe; the parent rebuilds
the arrays.  The pipe's small buffer is the back-pressure: the child decodes
batch k+1 while the parent exports batch k, never further ahead, so memory
stays bounded.  An error in the child (a typed :class:`PtExportError`) is sent
over and raised in the parent; closing the iterator early ends the child.

Off by default (``ExportConfig(decode_process=True)`` or ``PTEXPORT_DECODE_PROCESS=1``
turn it on): measured on the shared 2-core machine (load 6), a 10 M-branch
export took 43 s with it against 34 s without (14.7 vs 14.0 CPU seconds): with
both cores busy anyway, the hand-off of each batch between two processes costs
more than the overlap gains.  On an idle multi-core machine it is worth trying.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from typing import Any, Iterator

import numpy as np

from ptexport.errors import PtExportError
from ptexport.samples.columns import SampleColumns
from ptexport.session.parallel import ignore_stop_signals

_FIELDS = [f.name for f in dataclasses.fields(SampleColumns)]


def available() -> bool:
    """Forking is possible here (Linux, macOS): else decode in-process."""
    return "fork" in multiprocessing.get_all_start_methods()


def _child(session: Any, conn: Any, batch_rows: int) -> None:
    ignore_stop_signals()
    try:
        t0 = time.perf_counter()
        for cols in session.iter_batches(batch_rows=batch_rows):
            parts = [(name, np.ascontiguousarray(a)) for name in _FIELDS
                     if (a := getattr(cols, name)) is not None]
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


class DecodeProcess:
    """The session's sample batches, decoded by a forked child; ``seconds`` = the child's decode time."""

    def __init__(self, session: Any, batch_rows: int = 1 << 16) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child_conn = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(session, child_conn, batch_rows), daemon=True,
                                 name="ptexport-decode")
        self._proc.start()
        child_conn.close()
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
        self._proc.join()
        self._proc = None

    def __del__(self) -> None:  # pragma: no cover - a safety net; close() is the way
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def maybe_process(session: Any, enabled: bool) -> Any:
    """A :class:`DecodeProcess` when wanted and possible, else None (decode in-process)."""
    enabled = enabled or os.environ.get("PTEXPORT_DECODE_PROCESS", "") not in ("", "0")
    if not enabled or not available() or getattr(session.pd, "is_pipe", False):
        return None
    return DecodeProcess(session)
