"""A stop signal that comes while LLVM runs Python (llvmlite's ctypes callbacks, as when numba loads a
cached kernel) is raised where the native call returns, never inside it: ctypes drops an exception
raised in a callback ("Exception ignored on calling ctypes callback function") and LLVM, left
without what it asked for, crashed the process (SIGSEGV instead of 128 + SIGHUP, seen in CI when a
SIGHUP came while the finish loaded the index runs' kernels)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ptexport import cli
from ptexport.cli import Terminated


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_numba(tmp_path, name, source):
    """A stand-in module of numba (under a directory named numba: the guard's test of numba's code)."""
    (tmp_path / "numba").mkdir(exist_ok=True)
    (tmp_path / "numba" / name).write_text(source)
    return _load(f"fake_numba_{name[:-3]}", tmp_path / "numba" / name)


@pytest.fixture
def native(tmp_path):
    """A stand-in for llvmlite (a module under a directory named llvmlite) whose entry calls back
    into Python and, as ctypes does, drops what the callback raises; and a helper module (the
    standard library's or ptexport's code that such a callback runs)."""
    (tmp_path / "llvmlite").mkdir()
    (tmp_path / "llvmlite" / "fake.py").write_text(
        "def call_from_llvm(cb):\n"
        "    try:\n"
        "        cb()\n"
        "    except BaseException as e:  # ctypes: printed and dropped\n"
        "        return e\n"
        "    return None\n")
    (tmp_path / "helper.py").write_text(
        "import sys\n"
        "def callback(signal_here):\n"
        "    signal_here(sys._getframe())\n"
        "    x = 1\n"
        "    y = x + 1\n"
        "    return inner(y)\n"
        "def inner(v):\n"
        "    w = v * 2\n"
        "    return w\n")
    return _load("fake_llvmlite", tmp_path / "llvmlite" / "fake.py"), _load("fake_helper", tmp_path / "helper.py")


def test_a_signal_inside_an_llvm_callback_is_raised_where_the_native_call_returns(native):
    fake, helper = native
    exc = Terminated(1)
    dropped = "not called"
    reached = []
    try:
        with pytest.raises(Terminated):
            dropped = fake.call_from_llvm(lambda: helper.callback(lambda f: cli._raise_when_back(f, exc)))
            reached.append("the line after the native call")  # raised before this line runs
    finally:
        sys.settrace(None)
    assert dropped is None  # nothing was raised inside the callback (ctypes would have dropped it)
    assert reached == []
    assert sys.gettrace() is None


def test_the_signal_frame_outside_native_code_raises_at_its_next_line(native):
    """The common case: the signal came in Python that LLVM does not run (no llvmlite frame)."""
    _, helper = native
    exc = Terminated(1)
    with pytest.raises(Terminated):
        helper.callback(lambda f: cli._raise_when_back(f, exc))
    assert sys.gettrace() is None


def test_a_signal_inside_numba_called_from_compiled_code_is_raised_where_it_returns(tmp_path):
    """Compiled code calls numba's Python (``_numba_unpickle`` while a kernel boxes its result) and
    turns an exception raised there into "SystemError: CPUDispatcher(...) returned a result with an
    exception set": the guard's handler raises the signal at the caller's next line instead."""
    fake = _fake_numba(tmp_path, "serialize.py",
        "import sys\n"
        "def _numba_unpickle(signal_here):\n"
        "    signal_here(sys._getframe())\n"
        "    return 5\n"
        "def compiled(signal_here):  # as the dispatcher: what the callback raises becomes a SystemError\n"
        "    try:\n"
        "        return _numba_unpickle(signal_here)\n"
        "    except BaseException as e:\n"
        "        raise SystemError('returned a result with an exception set') from e\n")
    guard = cli._SignalGuard()
    got, reached = [], []
    try:
        with pytest.raises(KeyboardInterrupt):
            got.append(fake.compiled(lambda f: guard._handle(2, f)))
            reached.append("the line after the call")
    finally:
        sys.settrace(None)
    assert got == [5] and reached == []  # the kernel's result came back; the next line raised
    assert guard.signum == 2
    assert sys.gettrace() is None


def test_a_signal_while_numba_takes_its_compiler_lock_leaves_the_lock_free(tmp_path):
    """numba's dispatcher takes its compiler lock through the standard library
    (``ExitStack.enter_context``): a signal raised in that frame, after the lock was taken and before
    the stack holds its release, left the lock taken for ever (an export's index builders then
    waited for it, and the export for them: seen as a SIGTERM that hung the run).  The signal is
    raised where numba returns, the lock given back first."""
    import threading

    fake = _fake_numba(tmp_path, "dispatcher.py",
        "import contextlib\n"
        "def compile(lock):  # as Dispatcher.compile: the lock through an ExitStack\n"
        "    with contextlib.ExitStack() as scope:\n"
        "        scope.enter_context(lock)\n"
        "        x = 1\n"
        "    return x\n")
    guard = cli._SignalGuard()
    lock = threading.RLock()
    sent = []

    class Lock:  # the signal comes as the lock is taken, inside contextlib's frame
        def __enter__(self):
            lock.acquire()
            if not sent:
                sent.append(1)
                guard._handle(15, sys._getframe(1))
            return self

        def __exit__(self, *exc):
            lock.release()

    got, reached = [], []
    try:
        with pytest.raises(Terminated):
            got.append(fake.compile(Lock()))
            reached.append("the line after the call")
    finally:
        sys.settrace(None)
    assert got == [1] and reached == []  # numba's call came back whole; the next line raised
    freed = []
    t = threading.Thread(target=lambda: freed.append(lock.acquire(timeout=5)))
    t.start()
    t.join()
    assert freed == [True]  # another thread can take it: it was given back
    assert sys.gettrace() is None


def test_a_signal_swallowed_by_a_weakref_callback_still_keeps_the_database_out(tmp_path):
    """The guard's handler can run while the collector calls a weakref callback (or a ``__del__``):
    Python prints "Exception ignored" and drops what it raises, and the export went on to put its
    database in place and exit 0 (seen in a loop of SIGTERMs at the finish).  The stop is raised
    again where a writer would put its database in place; the export then removes its temporary."""
    import weakref

    from ptexport.writers import base

    guard = cli._SignalGuard()
    placed = base.databases_placed()
    with guard:
        class Thing:
            pass

        thing = Thing()
        ref = weakref.ref(thing, lambda _: guard._handle(15, sys._getframe()))
        del thing  # the callback runs the handler; its Terminated is swallowed (unraisable)
        assert ref() is None and guard.signum == 15
        with pytest.raises(Terminated):
            base._mark_placed()
        assert base.databases_placed() == placed
        base._mark_placed()  # raised once: a later export of the same process is not stopped by it
        assert base.databases_placed() == placed + 1
    assert sys.unraisablehook != guard._unraisable


def test_a_stop_swallowed_in_an_export_leaves_no_database(tmp_path, synth_trace):
    """End to end: the export's handler raises inside a callback that swallows it, at the start of the
    export; the export goes on, and stops before its database is put in place (no database, no
    temporary, the run's exit code a signal's)."""
    import weakref

    from ptexport.writers import sqlite as sqlite_writer

    trace = synth_trace("--program", "calls", "--branches", "3000") / "perf.data"
    guard_seen = []
    real_finish = sqlite_writer.SqliteWriter._finish_database

    def finish_after_a_swallowed_stop(self):
        guard = cli._active_guard
        guard_seen.append(guard)

        class Thing:
            pass

        thing = Thing()
        keep = weakref.ref(thing, lambda _: guard._handle(15, sys._getframe()))
        del thing  # its Terminated is swallowed: the finish goes on
        assert keep() is None
        return real_finish(self)

    sqlite_writer.SqliteWriter._finish_database = finish_after_a_swallowed_stop
    try:
        rc = cli.main([str(trace), "--db", str(tmp_path / "t.db"), "-q", "--jobs", "1"])
    finally:
        sqlite_writer.SqliteWriter._finish_database = real_finish
    assert guard_seen and guard_seen[0] is not None
    assert rc == 128 + 15
    assert not (tmp_path / "t.db").exists()
    assert [p.name for p in tmp_path.iterdir()] == []
