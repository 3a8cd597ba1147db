"""Run query functions off the GUI thread, with result/error/progress signals and cancel.

``start(db, fn, *args)`` runs ``fn(session, *args)`` on a QThreadPool thread
with its own read-only connection and returns a :class:`Job`.  ``fn`` may take
a ``progress`` keyword (a callable taking an int) to report progress.  The
job's signals are delivered in the GUI thread; ``Job.cancel()`` interrupts
the running statement (SQLite ``interrupt``/progress handler, PostgreSQL
cancel request) and suppresses the result.
"""

from __future__ import annotations

import inspect
import threading
import traceback
from typing import Any, Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

from .db import Database, QueryCancelled, ViewerError
from .queries import FilterError


class JobSignals(QObject):
    result = Signal(object)
    error = Signal(str)
    progress = Signal(int)
    finished = Signal()


class _Relay(QObject):
    """Lives in the GUI thread, so signals from the worker reach the callbacks queued there."""

    def __init__(self, on_result, on_error, on_progress, on_finished) -> None:
        super().__init__()
        self.cb = (on_result, on_error, on_progress, on_finished)

    def _call(self, i: int, *args: Any) -> None:
        if self.cb[i]:
            try:
                self.cb[i](*args)
            except RuntimeError as e:   # the widget that asked was closed meanwhile: drop the answer
                if "already deleted" not in str(e):
                    raise

    @Slot(object)
    def result(self, v: Any) -> None:
        self._call(0, v)

    @Slot(str)
    def error(self, v: str) -> None:
        self._call(1, v)

    @Slot(int)
    def progress(self, v: int) -> None:
        self._call(2, v)

    @Slot()
    def finished(self) -> None:
        try:
            self._call(3)
        finally:
            with Job._live_lock:
                Job._live.discard(self.job)
            self.job = None


class Job(QRunnable):
    """One query run on the pool.  Keep a reference until ``finished``."""

    _live: set["Job"] = set()
    _live_lock = threading.Lock()

    def __init__(self, db: Database, fn: Callable[..., Any], args: tuple, kwargs: dict,
                 timeout: float | None) -> None:
        super().__init__()
        self.setAutoDelete(False)
        self.db = db
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.timeout = timeout
        self.signals = JobSignals()
        self._session = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self.done = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            if self._session is not None:
                self._session.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def run(self) -> None:  # worker thread
        try:
            if self.cancelled:
                return
            with self.db.session(self.timeout) as s:
                with self._lock:
                    self._session = s
                if self.cancelled:
                    return
                kwargs = dict(self.kwargs)
                if "progress" in inspect.signature(self.fn).parameters:
                    kwargs["progress"] = self._progress
                value = self.fn(s, *self.args, **kwargs)
                with self._lock:
                    self._session = None
            if not self.cancelled:
                self.signals.result.emit(value)
        except QueryCancelled as e:
            if not self.cancelled:
                self.signals.error.emit(str(e))
        except (ViewerError, FilterError) as e:
            if not self.cancelled:
                self.signals.error.emit(str(e))
        except Exception as e:  # a bug in a query function: show it, never crash the GUI
            if not self.cancelled:
                self.signals.error.emit(f"internal error: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
        finally:
            self.done.set()
            self.signals.finished.emit()

    def _progress(self, n: int) -> None:
        if self.cancelled:
            raise QueryCancelled("cancelled")
        self.signals.progress.emit(int(n))


def start(db: Database, fn: Callable[..., Any], *args: Any, on_result: Callable[[Any], None] | None = None,
          on_error: Callable[[str], None] | None = None, on_progress: Callable[[int], None] | None = None,
          on_finished: Callable[[], None] | None = None, timeout: float | None = None,
          **kwargs: Any) -> Job:
    # Callbacks go through a relay QObject only: a lambda connected to the job's own signals
    # would be dropped when the job (and its signals object) is freed before the queued call runs.
    job = Job(db, fn, args, kwargs, timeout)
    relay = _Relay(on_result, on_error, on_progress, on_finished)
    job.relay = relay
    relay.job = job
    job.signals.result.connect(relay.result)
    job.signals.error.connect(relay.error)
    job.signals.progress.connect(relay.progress)
    job.signals.finished.connect(relay.finished)
    with Job._live_lock:
        Job._live.add(job)
    QThreadPool.globalInstance().start(job)
    return job


def active_jobs() -> int:
    with Job._live_lock:
        return len(Job._live)
