"""When ``dump insns --raw`` uses the compiled walker (:mod:`ptexport.raw.insn_compiled`).

The compiled walker gives the reference decoder's output, only faster; but
loading numba and its kernels costs about a second of CPU, more than the
reference needs for a small trace.  :class:`LazyWalker` therefore lets the
reference start, watches its progress through the trace and switches to the
compiled walker once the rest is estimated to take the reference longer than
that price (``SWITCH_AFTER_S``).  The switch is only a question of speed: the
output is the same either way.

``PTEXPORT_RAW_COMPILED=1`` (or ``eager=True``) uses the compiled walker from
the first instruction; ``--reference`` / ``PTEXPORT_RAW_REFERENCE=1`` never.
"""

from __future__ import annotations

import os
import time

from ptexport.raw.ptxed import BlockView, Walker

SWITCH_AFTER_S = 1.5     # estimated remaining reference CPU time that pays for loading numba
_CHECK_EVERY = 32        # walk steps between two looks at the clock
_MIN_ELAPSED_S = 0.05    # measure this long before estimating


def _applies(dec, opts) -> bool:
    return not (opts.print_offset or dec.config.enable_tick_events
                or (opts.show_blocks and not opts.quiet))


def _make(dec, opts, buf, sideband: bool) -> Walker | None:
    from ptexport.raw import insn_compiled as rawfast  # lazy: loads numba, only once it pays
    if rawfast._run_kernel is None:
        return None
    return rawfast.Walker(buf, dec.config.errata, record=not opts.quiet,
                          end_on_call=opts.end_on_call, end_on_jump=opts.end_on_jump,
                          keep_time=opts.event_time or sideband)


def compiled_walker(dec, opts, buf, sideband: bool = False, eager: bool | None = None) -> Walker | None:
    """The walker ``ptxed_lines(..., fast=)`` takes for ``opts``, or None where the compiled one does
    not apply (offsets or block lines printed, tick events, no numba).  ``sideband``: events go to a
    sideband session (which reads their time).  ``eager``: compiled from the start (default: the
    PTEXPORT_RAW_COMPILED environment variable), else a :class:`LazyWalker`."""
    if not _applies(dec, opts):
        return None
    if eager is None:
        eager = os.environ.get("PTEXPORT_RAW_COMPILED", "") not in ("", "0")
    if eager:
        return _make(dec, opts, buf, sideband)
    return LazyWalker(dec, opts, buf, sideband)


class LazyWalker:
    """The reference first; the compiled walker once it pays (see the module docstring).

    A :class:`ptexport.raw.ptxed.Walker`, as the compiled one it hands over to."""

    def __init__(self, dec, opts, buf, sideband: bool) -> None:
        self._args = (dec, opts, buf, sideband)
        self.fast: Walker | None = None
        self.blocks: BlockView | None = None
        self._calls = 0
        self._t0: float | None = None
        self._done = False   # decided (switched, or the compiled walker is unavailable)

    @property
    def ninsn(self) -> int:
        return self.fast.ninsn if self.fast is not None else 0

    def _worth_it(self, dec) -> bool:
        now = time.process_time()
        if self._t0 is None:
            self._t0 = now
            return False
        elapsed = now - self._t0
        if elapsed < _MIN_ELAPSED_S:
            return False
        size = len(self._args[2]) or 1
        done = min(max(dec.offset, 1), size) / size
        return elapsed * (1.0 - done) / done > SWITCH_AFTER_S

    def step(self, dec):
        fast = self.fast
        if fast is None:
            if self._done:
                return None
            self._calls += 1
            if (self._calls - 1) % _CHECK_EVERY or not self._worth_it(dec):
                return None
            self._done = True
            fast = self.fast = _make(*self._args)
            if fast is None:
                return None
        fast.blocks = self.blocks
        return fast.step(dec)

    def format_ips(self, ips, speculative: bool) -> str:
        assert self.fast is not None    # FAST items come from it only
        return self.fast.format_ips(ips, speculative)
