"""Which perf decoder backend decodes a session, and why: the one place that decides.

Two backends give the same rows for a queue (``tests/decoder/test_perffast.py``
holds them equal): the reference (:mod:`ptexport.decoder.reference.queue`,
plain Python, the oracle) and the compiled one
(:mod:`ptexport.decoder.compiled.decoder`, numba).  Both have the same entry
points, taking a :class:`~ptexport.decoder.context.DecodeContext`:

- ``supported(ctx) -> str | None``: None when the backend decodes this
  session, else why not;
- ``decode_queue(ctx, qnum, key, bufs, count_only=False)``: one queue, whole.

:func:`choose` takes the compiled backend unless ``PTEXPORT_REFERENCE=1`` is
set or it says why not (numba missing, a mode it does not compile yet); the
:class:`Choice` carries that reason.  The session's orchestration
(:mod:`ptexport.session.parallel`) asks here and nowhere else.  See
docs/architecture.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ptexport import jit
from ptexport.decoder.compiled import decoder as compiled
from ptexport.decoder.context import DecodeContext
from ptexport.decoder.reference import queue as reference

REFERENCE_ENV = "PTEXPORT_REFERENCE"  # set (not "" or "0"): always the reference backend


@dataclass(frozen=True)
class Choice:
    """The backend picked for a session: ``compiled`` or not, and ``reason`` why the reference."""

    compiled: bool
    reason: str = ""  # "" with the compiled backend

    @property
    def name(self) -> str:
        return "compiled" if self.compiled else "reference"

    @property
    def module(self) -> Any:
        return compiled if self.compiled else reference


def forced_reference() -> str:
    """Why the reference is forced ("" when it is not)."""
    if os.environ.get(REFERENCE_ENV, "") not in ("", "0"):
        return f"forced by {REFERENCE_ENV}={os.environ[REFERENCE_ENV]}"
    return ""


def choose(ctx: DecodeContext) -> Choice:
    """The backend that decodes a session with context ``ctx``, and why when it is the reference."""
    why = forced_reference() or compiled.supported(ctx)
    return Choice(False, why) if why else Choice(True)


def compiled_for(ctx: DecodeContext) -> bool:
    """True when the compiled backend decodes the session (:func:`choose`)."""
    return choose(ctx).compiled


def segmentable(ctx: DecodeContext) -> bool:
    """True when the session's queues may be decoded in PSB segments joined by state (the compiled
    backend only, see :func:`ptexport.decoder.compiled.decoder.segmentable`)."""
    return compiled_for(ctx) and compiled.segmentable(ctx)


def decode_queue(ctx: DecodeContext, qnum: int, key: tuple[str, int], bufs: list[Any], count_only: bool = False) -> Any:
    """One queue decoded whole by the chosen backend (``count_only``: the compiled backend counts
    branch samples instead of keeping them)."""
    return choose(ctx).module.decode_queue(ctx, qnum, key, bufs, count_only=count_only)


def unavailable_reason() -> str:
    """Why the compiled backend cannot run on this machine at all ("" when it can)."""
    return jit.unavailable_reason()
