"""Compiling ahead: the commands that reach every compiled kernel, run by ``setup.py`` at install.

``python -m ptexport.cli.precompile SAMPLE_DIR`` runs them over the shipped
sample recordings with the package being built on ``PYTHONPATH``, so numba's
cache files land beside the built modules and travel in the wheel (see
:mod:`ptexport.jit`).  A command that fails compiles nothing, silently: the
tests run each.
"""

from __future__ import annotations

import importlib
import io
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ptexport.jit import PROBLEM, numba


def warm_commands(samples: Path, scratch: Path) -> list[list[str]]:
    """The commands that reach every compiled kernel with the argument types production passes."""
    traces = sorted(str(p) for p in samples.glob("*/perf.data"))
    cmds: list[list[str]] = []
    for i, trace in enumerate(traces):
        db = str(scratch / f"warm{i}.sqlite")
        cmds += [
            [trace, "--db", db, "--force", "-q"],
            [trace, "--db", db, "--force", "-q", "--jobs", "2", "--callchains", "--itrace", "bepwxg"],
            ["dump", "branches", trace],
            ["dump", "branches", trace, "--csv", "--jobs", "2"],
            ["dump", "branches", trace, "-F", "pid,tid,cpu,time,ip,addr,flags,ipc"],
            ["dump", "branches", trace, "--itrace", "i100"],
            ["dump", "branches", trace, "--itrace", "cr"],
        ]
    return cmds


#: Kernels no warm-up command over the shipped samples reaches, each compiled by a warm-up of its own
#: ("module:function", what it is): each calls the kernel the way production does.
WARM_UPS = (
    ("ptexport.raw.insn_compiled:warm", "the raw walker"),  # dump insns --raw (no raw sample is shipped)
    ("ptexport.dbexport.vm:VmExits.warm", "the VM exits"),  # their pairing (no VM sample is shipped)
    ("ptexport.decoder.guest:warm", "the guest attribution"),  # guest samples' machine, VCPU, thread
    ("ptexport.pt.vmtime:warm", "the VM time correlation"),  # a VM export measures its VMCSs with it
    ("ptexport.calltree.threadstack_compiled:warm", "the call tree's growth"),  # the samples' trees are small
    ("ptexport.calltree.sharded:warm", "the call tree's shards"),  # a cluster's workers build the tree
    ("ptexport.session.queues_compiled:warm", "perf's order over whole queues"),  # session.decode()
    ("ptexport.writers._btree:warm", "the late rows' merge"),  # many calls still open at the end
    ("ptexport.decoder.codewalk_compiled:warm", "the instruction walk"),  # its one-instruction entry too
)


def warm(samples: Path) -> int:
    """Run :func:`warm_commands` (what ``setup.py`` does at install); returns the number that failed."""
    if numba is None:
        print(f"ptexport: not compiling ahead: {PROBLEM}", file=sys.stderr)
        return 0
    from ptexport.cli import main

    failed = 0
    t0 = time.monotonic()
    for name, what in WARM_UPS:
        module, _, attr = name.partition(":")
        try:
            fn: Any = importlib.import_module(module)
            for part in attr.split("."):
                fn = getattr(fn, part)
            fn()
        except Exception as e:  # noqa: BLE001 - a warm-up failure must not fail the install
            print(f"ptexport: compiling ahead: {what}: {e}", file=sys.stderr)
            failed += 1
    with tempfile.TemporaryDirectory(prefix="ptexport-warm-") as tmp:
        try:
            from ptexport.writers.sqlite import warm_index_runs
            warm_index_runs(Path(tmp))  # an index of more entries than the writer keeps in memory
        except Exception as e:  # noqa: BLE001 - a warm-up failure must not fail the install
            print(f"ptexport: compiling ahead: the index runs: {e}", file=sys.stderr)
            failed += 1
        for argv in warm_commands(samples, Path(tmp)):
            try:
                rc = main(argv, out=io.StringIO())
            except Exception as e:  # noqa: BLE001 - a warm-up failure must not fail the install
                print(f"ptexport: compiling ahead: {' '.join(argv)}: {e}", file=sys.stderr)
                rc = 1
            failed += rc != 0
    print(f"ptexport: compiled the decoder ahead in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return failed


if __name__ == "__main__":  # python -m ptexport.cli.precompile SAMPLE_DIR
    sys.exit(1 if warm(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_data")) else 0)
