"""``ptexport dump KIND ...``: print what one stage of the pipeline sees.

Each kind (packets, insns, branches, ...) is its own module ``dump_KIND`` in
this package with the same NAME/HELP/add_arguments/run contract as a
subcommand; this module only dispatches.
"""

from __future__ import annotations

import importlib

NAME = "dump"
HELP = "print packets, instructions or samples of a trace"

# Module names under ptexport.cli, in --help order.
DUMP_KINDS: tuple[str, ...] = ("dump_packets", "dump_insns", "dump_branches")


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="dump_kind", metavar="KIND", required=True)
    for name in DUMP_KINDS:
        mod = importlib.import_module(f"ptexport.cli.{name}")
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_dump_run=mod.run)


def run(args, out) -> int:
    return args._dump_run(args, out)
