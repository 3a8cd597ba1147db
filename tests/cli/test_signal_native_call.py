"""A stop signal that comes while the main thread runs llvmlite's Python inside a call from LLVM (numba
loading a cached function calls back through ctypes) is raised when the call has returned: raised in
the callback it was dropped by ctypes and LLVM crashed the process (SIGSEGV, seen in the signal tests)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from ptexport.cli import Terminated, _SignalGuard

#: A function whose code says it is llvmlite's, as its object-cache callbacks are.
_CALLBACK = compile("def callback(stop, done):\n    stop()\n    done.append('callback returned')\n    return 42\n",
                    os.path.join(os.sep, "venv", "site-packages", "llvmlite", "binding", "cb.py"), "exec")


def test_the_signal_waits_for_the_native_call_and_then_ends_the_run():
    ns: dict = {}
    exec(_CALLBACK, ns)  # noqa: S102 - a function with llvmlite's file name
    done: list[str] = []
    guard = _SignalGuard()
    before = sys.gettrace()

    def caller() -> None:
        r = ns["callback"](lambda: guard._handle(signal.SIGTERM, sys._getframe(1)), done)
        done.append(f"caller went on with {r}")  # the signal is raised here, before this line runs

    with guard, pytest.raises(Terminated):
        caller()
    assert done == ["callback returned"]
    assert guard.signum == signal.SIGTERM
    assert sys.gettrace() is before  # the hooks are gone again


def test_outside_a_native_call_the_signal_is_raised_at_once():
    guard = _SignalGuard()
    with guard, pytest.raises(KeyboardInterrupt):
        guard._handle(signal.SIGINT, sys._getframe())
