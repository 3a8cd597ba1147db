"""Compiling ahead: the commands that reach every compiled kernel, run by ``setup.py`` at install.

``python -m ptexport.cli.precompile SAMPLE_DIR`` runs them over the shipped
sample recordings with the package being built on ``PYTHONPATH``, so numba's
cache files land beside the built modules and travel in the wheel (see
:mod:`ptexport.jit`).  A command that fails compiles nothing, silently: the
tests run each.
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from pathlib import Path

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


def warm(samples: Path) -> int:
    """Run :func:`warm_commands` (what ``setup.py`` does at install); returns the number that failed."""
    if numba is None:
        print(f"ptexport: not compiling ahead: {PROBLEM}", file=sys.stderr)
        return 0
    from ptexport.cli import main

    failed = 0
    t0 = time.monotonic()
    try:
        from ptexport.raw import insn_compiled as rawfast
        rawfast.warm()      # dump insns --raw's walker (no raw sample is shipped)
    except Exception as e:  # noqa: BLE001 - a warm-up failure must not fail the install
        print(f"ptexport: compiling ahead: the raw walker: {e}", file=sys.stderr)
        failed += 1
    try:
        from ptexport.dbexport.vm import VmExits
        VmExits.warm()  # the VM exits' pairing (no VM sample is shipped)
    except Exception as e:  # noqa: BLE001 - a warm-up failure must not fail the install
        print(f"ptexport: compiling ahead: the VM exits: {e}", file=sys.stderr)
        failed += 1
    try:
        from ptexport.decoder import guest
        guest.warm()  # the guest samples' machine, VCPU and thread (no VM sample is shipped)
    except Exception as e:  # noqa: BLE001 - a warm-up failure must not fail the install
        print(f"ptexport: compiling ahead: the guest attribution: {e}", file=sys.stderr)
        failed += 1
    try:
        from ptexport.pt import vmtime
        vmtime.warm()  # the VM time correlation's walk (a VM export measures its VMCSs with it)
    except Exception as e:  # noqa: BLE001 - a warm-up failure must not fail the install
        print(f"ptexport: compiling ahead: the VM time correlation: {e}", file=sys.stderr)
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
