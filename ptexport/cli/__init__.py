"""Command line: ``ptexport [SUBCOMMAND] ...``; the only package that prints.

Each subcommand lives in its own module of this package, which defines

    NAME: str                      # the word on the command line
    HELP: str                      # one line for ``ptexport --help``
    def add_arguments(parser): ...
    def run(args, out) -> int: ... # ``out`` is a text stream (stdout in real use)

and is listed in ``SUBCOMMANDS``.  ``ptexport TRACE --db DB`` (no subcommand
word) is the export subcommand.  Library errors become one-line messages and
exit codes here, in one place.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from typing import IO, Sequence

from ptexport import __version__
from ptexport.errors import PtExportError

# Module names under ptexport.cli, in --help order.
SUBCOMMANDS: tuple[str, ...] = (
    "export",
    "dump",
    "upgrade",
    "info",
    "synth",
    "vm_time_correlation",
)

# The subcommand used when the first argument is not a subcommand word.
DEFAULT_SUBCOMMAND = "export"


def _load(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ptexport",
        description="Decode Intel PT recordings and export them into SQL databases.",
    )
    parser.add_argument("--version", action="version", version=f"ptexport {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    for name in SUBCOMMANDS:
        mod = _load(name)
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def _subcommand_words() -> set[str]:
    return {_load(name).NAME for name in SUBCOMMANDS}


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run ptexport with ``argv`` (without the program name); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = sys.stdout if out is None else out
    if (
        argv
        and not argv[0].startswith("-")
        and argv[0] not in _subcommand_words()
        and DEFAULT_SUBCOMMAND in SUBCOMMANDS
    ):
        argv.insert(0, _load(DEFAULT_SUBCOMMAND).NAME)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed the message
        return int(e.code or 0)
    if not getattr(args, "_run", None):
        parser.print_help(out)
        return 2
    _warn_reference_path(args)
    try:
        return int(args._run(args, out) or 0)
    except PtExportError as e:
        print(f"ptexport: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("ptexport: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # `ptexport dump ... | head`: the reader went away; not an error.
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0


_NO_DECODE = {"info", "upgrade", "synth", "vm-time-correlation"}
_warned = False


def _warn_reference_path(args) -> None:
    """One line on stderr when decoding cannot take the compiled path (numba missing or broken)."""
    global _warned
    if _warned or getattr(args, "subcommand", None) in _NO_DECODE:
        return
    from ptexport.flow.perffast import unavailable_reason

    reason = unavailable_reason()
    if reason:
        _warned = True
        print(f"ptexport: warning: {reason}: decoding on the slow reference path "
              "(reinstall ptexport to get numba)", file=sys.stderr)


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
