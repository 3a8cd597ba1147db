"""Command line: ``ptexport [SUBCOMMAND] ...``; the only package that prints.

Each subcommand lives in its own module of this package, which defines

    NAME: str                      # the word on the command line
    HELP: str                      # one line for ``ptexport --help``
    def add_arguments(parser): ...
    def run(args, out) -> int: ... # ``out`` is a text stream (stdout in real use)

and is listed in ``SUBCOMMANDS`` (word -> module; only the word given is imported).  ``ptexport TRACE --db DB`` (no subcommand
word) is the export subcommand.  Library errors become one-line messages and
exit codes here, in one place.

SIGINT, SIGTERM and SIGHUP end a run the same way (:class:`_SignalGuard`, installed
by :func:`main` for the run and restored after): the main thread unwinds as for
Ctrl-C (worker pools stop, writers remove their temporaries), then one line
(``ptexport: interrupted`` / ``terminated`` / ``hangup``) and exit 128 + N.  A signal that comes
while numba or llvmlite runs Python (or code they called) is raised where they return; one that
Python swallows (raised in a weakref callback or a ``__del__``) is raised again before a database
is put in place.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import IO, Any, Sequence

from ptexport import __version__
from ptexport.errors import PtExportError

#: The word on the command line -> its module under ptexport.cli, in --help order (each module's
#: NAME is its word: tests/cli/test_cli.py checks).  Only the module of the word given is imported:
#: some import much (the viewer's queries, the generator), and a run should not pay for them.
SUBCOMMANDS: dict[str, str] = {
    "export": "export",
    "dump": "dump",
    "upgrade": "upgrade",
    "convert": "convert",
    "perfetto": "perfetto",
    "info": "info",
    "synth": "synth",
    "vm-time-correlation": "vm_time_correlation",
    "clean": "clean",
    "check": "check",
}

# The subcommand used when the first argument is not a subcommand word.
DEFAULT_SUBCOMMAND = "export"


def _load(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every subcommand, or with ``only`` (a word) that one alone."""
    parser = argparse.ArgumentParser(
        prog="ptexport",
        description="Decode Intel PT recordings and export them into SQL databases.",
    )
    parser.add_argument("--version", action="version", version=f"ptexport {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    for word, name in SUBCOMMANDS.items():
        if only is not None and word != only:
            continue
        mod = _load(name)
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run ptexport with ``argv`` (without the program name); return the exit code."""
    guard = _SignalGuard()
    try:
        with guard:
            return _main(argv, out, guard)
    except KeyboardInterrupt as e:
        return _signalled(guard.signum or getattr(e, "signum", signal.SIGINT))
    except Exception:
        if guard.signum:  # what the unwinding raised on its way (a broken worker pool...): the signal ended it
            return _signalled(guard.signum)
        raise


def _main(argv: Sequence[str] | None, out: IO[str] | None, guard: "_SignalGuard") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out = sys.stdout if out is None else out
    if (
        argv
        and not argv[0].startswith("-")
        and argv[0] not in SUBCOMMANDS
        and DEFAULT_SUBCOMMAND in SUBCOMMANDS
    ):
        argv.insert(0, DEFAULT_SUBCOMMAND)
    parser = build_parser(argv[0] if argv and argv[0] in SUBCOMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed the message
        return int(e.code or 0)
    if not getattr(args, "_run", None):
        parser.print_help(out)
        return 2
    try:
        _warn_reference_path(args)  # imports numba: seconds, a signal may come
        _collect_from_here()
        return int(args._run(args, out) or 0)
    except PtExportError as e:
        if guard.signum:  # e.g. a worker ended by the same signal, seen first
            raise KeyboardInterrupt from e
        print(f"ptexport: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # `ptexport dump ... | head`: the reader went away; not an error.
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0


#: The signals that end a run as Ctrl-C does, and the line that says so.
FATAL_SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hangup"}


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM or SIGHUP: it unwinds like Ctrl-C (every ``finally``,
    every writer's abort), through handlers that catch KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _SignalGuard:
    """SIGINT, SIGTERM and SIGHUP handlers for one run (main thread only); the old ones come back after.

    The first signal raises KeyboardInterrupt (SIGINT) or :class:`Terminated` in the main thread;
    a second one while the run unwinds is ignored, so the cleanup is not cut short; a third ends
    the process at once.  Once an export has put its database in place the run has succeeded: a
    signal then raises nothing (the writer's last cleanup goes on, the run ends with exit 0).  A
    process forked from this one (a --jobs worker, the decoding process) that gets the signal
    behaves as it would have without the guard (the default: it ends), never unwinding into the
    parent's cleanup.  A signal disposition of SIG_IGN (nohup, a background job) is left as it is.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._count = 0
        self._owner = os.getpid()
        self._saved: dict[int, object] = {}
        self._closing = False
        self._placed = _databases_placed()  # a database put in place after this: the run has succeeded
        self._raised: BaseException | None = None
        self._hook: Any = None

    def __enter__(self) -> "_SignalGuard":
        global _active_guard
        _active_guard = self
        if threading.current_thread() is not threading.main_thread():
            return self
        self._hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        for sig in FATAL_SIGNALS:
            try:
                old = signal.getsignal(sig)
                if old == signal.SIG_IGN:
                    continue
                signal.signal(sig, self._handle)
            except (ValueError, OSError):  # pragma: no cover - not settable here
                continue
            self._saved[sig] = old
        return self

    def __exit__(self, *exc: object) -> None:
        global _active_guard
        if _active_guard is self:
            _active_guard = None
        self._closing = True
        if self._hook is not None:
            if sys.unraisablehook == self._unraisable:
                sys.unraisablehook = self._hook
            self._hook = None
            _lost_stop(None)
        for sig, old in self._saved.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._saved.clear()

    def _handle(self, signum: int, frame: object) -> None:
        if os.getpid() != self._owner:
            old = self._saved.get(signum, signal.SIG_DFL)
            if callable(old):
                old(signum, frame)
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._count += 1
        if self.signum is None:
            self.signum = signum
            if self._closing or _databases_placed() > self._placed:  # the run is over or has succeeded: nothing to stop
                return
            exc = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
            self._raised = exc
            if isinstance(frame, FrameType) and _under_native(frame):
                _raise_when_back(frame, exc)
                return
            raise exc
        if self._count >= 3:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _unraisable(self, unraisable: Any) -> None:
        """sys.unraisablehook while the guard is on: the signal's exception raised where Python swallows
        what is raised (a weakref callback, a ``__del__`` the collector ran) is a stop all the same,
        raised again before a database is put in place (:func:`_lost_stop`); the rest goes on to the
        hook there was."""
        if self._raised is not None and unraisable.exc_value is self._raised:
            _lost_stop(self._raised)
            return
        (self._hook or sys.__unraisablehook__)(unraisable)


#: Code that Python runs while LLVM waits for it (llvmlite's ctypes callbacks, as when numba loads a
#: cached function), and numba's own, which calls into LLVM.
_LLVMLITE = f"{os.sep}llvmlite{os.sep}"
_NATIVE_CODE = (_LLVMLITE, f"{os.sep}numba{os.sep}")


def _native(frame: FrameType) -> bool:
    """Code of llvmlite or numba.  A signal that comes while the main thread runs numba's Python
    is raised where it returns: compiled code calls back into it (``_numba_unpickle``, as a kernel
    boxes what it returns), and an exception raised there came out as "SystemError: CPUDispatcher(...)
    returned a result with an exception set" instead of the signal."""
    return any(p in frame.f_code.co_filename for p in _NATIVE_CODE)


def _lost_stop(exc: BaseException | None) -> None:
    """Tell the writers (if an export ran) of a stop Python swallowed (None: forget it)."""
    mod = sys.modules.get("ptexport.writers.base")  # not imported: no export ran, nothing to put in place
    if mod is not None:
        mod.stop_lost(exc)


def _under_native(frame: FrameType) -> bool:
    """The frame is llvmlite's or numba's, or runs inside a call from them.  An exception raised
    there is dropped by ctypes inside a call from LLVM ("Exception ignored on calling ctypes callback
    function") and leaves LLVM without what it asked for, which crashed the process (SIGSEGV); in the
    standard library's ``contextlib`` as numba's dispatcher takes its compiler lock, it left the lock
    taken and never given back: every other thread that then loaded a kernel waited for it for ever
    (an export's index builders, and the export waiting for them)."""
    f: FrameType | None = frame
    while f is not None:
        if _native(f):
            return True
        f = f.f_back
    return False


def _raise_when_back(frame: FrameType, exc: BaseException) -> None:
    """Raise ``exc`` at the next line this thread runs outside llvmlite and numba: in the frame the
    native call returns to (or any Python function it calls first), by the tracing hooks a debugger
    uses, which then are removed again."""
    marked: list[FrameType] = []

    def local(f: FrameType, event: str, arg: object) -> object:
        if event == "line":
            sys.settrace(None)
            for g in marked:
                g.f_trace = None
            raise exc
        return local

    def calls(f: FrameType, event: str, arg: object) -> object:
        # a frame that numba or LLVM's callback runs (the standard library's, ptexport's cache
        # locator) is inside the native call too: raising in it would be raising in the callback
        return None if _under_native(f) else local

    chain: list[FrameType] = []
    f: FrameType | None = frame
    while f is not None:
        chain.append(f)
        f = f.f_back
    # only the frames the outermost numba or llvmlite frame returns to
    outer = max((i for i, g in enumerate(chain) if _native(g)), default=-1)
    for g in chain[outer + 1:]:
        if not _native(g):
            g.f_trace = local
            g.f_trace_lines = True
            marked.append(g)
    sys.settrace(calls)


_active_guard: _SignalGuard | None = None


def run_goes_on() -> None:
    """A run that has put a database in place and goes on (``--perfetto`` writes a trace from it):
    a signal from now on stops it again (and removes what the rest wrote), as before the database."""
    if _active_guard is not None:
        _active_guard._placed = _databases_placed()


def _databases_placed() -> int:
    """Exports of this process that have put their database in place (:mod:`ptexport.writers.base`)."""
    mod = sys.modules.get("ptexport.writers.base")  # not imported: no export ran
    return mod.databases_placed() if mod else 0


def _signalled(signum: int) -> int:
    """The line and the exit code of a run ended by ``signum``.

    The signal may have cut a library in the middle of building an object (numba's LLVM binding
    while the kernels load): its ``__del__`` then fails when the object is collected, and Python
    prints that as "Exception ignored ... Traceback" at exit.  The run is over and its cleanup done,
    so those unraisable errors are the signal's echo, not news: they are not printed.
    """
    sys.unraisablehook = _quiet_unraisable
    try:
        print(f"ptexport: {FATAL_SIGNALS.get(signum, 'killed')}", file=sys.stderr)
    except (OSError, ValueError):  # SIGHUP: the terminal may be gone
        pass
    return 128 + signum


def _quiet_unraisable(unraisable: object) -> None:
    """sys.unraisablehook after a fatal signal: say nothing (see :func:`_signalled`)."""


_NO_DECODE = {"info", "upgrade", "synth", "vm-time-correlation", "clean", "perfetto"}
_warned = False


def _warn_reference_path(args) -> None:
    """One line on stderr when decoding cannot take the compiled path (numba missing or broken)."""
    global _warned
    if _warned or getattr(args, "subcommand", None) in _NO_DECODE:
        return
    from ptexport.jit import unavailable_reason

    reason = unavailable_reason()
    if _gc_held and not reason:  # the console script's own process (entry): nothing else runs numba here
        from ptexport.jit import skip_numba_extensions

        skip_numba_extensions()
    if reason:
        _warned = True
        print(f"ptexport: warning: {reason}: decoding on the slow reference path "
              "(reinstall ptexport to get numba)", file=sys.stderr)
        return
    if sys.stderr.isatty():  # a progress line, like the progress bar: not in logs and pipes
        from ptexport.jit import cache_prepared

        if not cache_prepared():
            _warned = True
            print("ptexport: compiling the decoder (once: later runs load it from numba's cache)", file=sys.stderr)


_gc_held = False  # entry() turned the garbage collector off for the start-up


def _collect_from_here() -> None:
    """The garbage collector back on after the start-up (see :func:`entry`), what the imports built frozen.

    numba's and numpy's imports make some 90 thousand objects the collector tracks, and the collector,
    running as they pile up, went over them 160-180 times: 45-65 ms of every run's half-second start-up.  Frozen
    (``gc.freeze``), they are never looked at again, by later collections here or in the processes
    forked from here (whose pages those visits would also copy).  What the imports leave as cyclic
    garbage stays: a start-up's worth, once.
    """
    global _gc_held
    if _gc_held:
        import gc

        _gc_held = False
        gc.freeze()
        gc.enable()


def entry() -> None:
    """Console-script entry point."""
    import gc

    global _gc_held
    if gc.isenabled():  # on again once the command's modules are loaded: _collect_from_here
        gc.disable()
        _gc_held = True
    # numpy's OpenBLAS starts a thread per core at import that spins for a while (0.08-0.1 s of CPU a
    # run here, taken from the cores the decoder and the writer use); ptexport makes no BLAS calls that
    # want threads.  Before numpy is first imported; a value the user set stands.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    code = main()
    if code > 128:  # ended by a signal: collect what it cut short while the quiet hook is in place
        import gc

        gc.collect()
        sys.exit(code)
    _exit(code)


def _exit(code: int) -> None:
    """End the process with ``code`` as ``sys.exit`` would, without tearing the interpreter down.

    Python's exit handlers run, the standard streams are flushed, and the C library's ``exit`` ends
    the process (its handlers and the libraries' destructors run: an LD_PRELOAD tool's report, for
    one); what is skipped is Python's finalization (every module's objects torn down one by one,
    numba's and llvmlite's among them), a fifth of a second after every command here (0.9 -> 0.7 s
    for ``dump branches --count`` of the small sample).  The normal exit is taken with a thread
    still running (it waits for the thread) and under a profiler, tracer or debugger (``python -m
    cProfile`` writes its statistics after the program returns).
    """
    import atexit
    import threading

    if threading.active_count() > 1 or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: Python's exit would report it (120)
            code = code or 120
    try:
        import ctypes

        ctypes.CDLL(None).exit(code)
    except (ImportError, OSError, AttributeError):  # no ctypes or no C library to call: no C handlers
        pass
    os._exit(code)
