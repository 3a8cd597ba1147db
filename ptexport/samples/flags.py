"""perf's sample flag bits (``PERF_IP_FLAG_*``) and the names perf gives them.

Two renderings of the same 32-bit value live here:

* :func:`format_flags` - the text ``perf script -F flags`` prints (perf 6.1's
  ``perf_sample__sprintf_flags``): a short name for known branch kinds
  (``call``, ``jcc``, ``hw int``, ``tr strt``...), ``tr strt``/``tr end``
  prefixes for trace begin/end combined with a known kind, the additional
  state ``(x)``/``(D)``/``(t)`` right-aligned in 6 columns, and otherwise one
  character per bit from ``PERF_IP_FLAG_CHARS`` (``?`` for unknown bits).
  :func:`format_flags_field` adds the padding perf puts around the field.
* :data:`PERF_BRANCH_TYPES` - the ``branch_types`` rows perf 6.1's db-export
  writes (``export-to-sqlite.py``), checked against perf.  Names for the
  values perf has no row for (VM exit 4131...) are made by the exporter,
  :mod:`ptexport.writers.branch_types`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import numpy as np

__all__ = [
    "IpFlag",
    "PERF_IP_FLAG_CHARS",
    "PERF_BRANCH_MASK",
    "ADDITIONAL_STATE_MASK",
    "SCRIPT_FLAG_NAMES",
    "PERF_BRANCH_TYPES",
    "FLAGS_FIELD_WIDTH",
    "format_flags",
    "format_flags_field",
    "format_flags_array",
    "flag_chars",
]


class IpFlag(enum.IntFlag):
    """``PERF_IP_FLAG_*`` from perf 6.1 tools/perf/util/event.h (bit values are ABI)."""

    BRANCH = 1 << 0
    CALL = 1 << 1
    RETURN = 1 << 2
    CONDITIONAL = 1 << 3
    SYSCALLRET = 1 << 4
    ASYNC = 1 << 5
    INTERRUPT = 1 << 6
    TX_ABORT = 1 << 7
    TRACE_BEGIN = 1 << 8
    TRACE_END = 1 << 9
    IN_TX = 1 << 10
    VMENTRY = 1 << 11
    VMEXIT = 1 << 12
    INTR_DISABLE = 1 << 13
    INTR_TOGGLE = 1 << 14


B = IpFlag.BRANCH
#: One character per bit, lowest bit first (perf's ``PERF_IP_FLAG_CHARS``).
PERF_IP_FLAG_CHARS = "bcrosyiABExghDt"

#: perf's ``PERF_BRANCH_MASK``: the bits that make the branch kind.
PERF_BRANCH_MASK = int(
    IpFlag.BRANCH
    | IpFlag.CALL
    | IpFlag.RETURN
    | IpFlag.CONDITIONAL
    | IpFlag.SYSCALLRET
    | IpFlag.ASYNC
    | IpFlag.INTERRUPT
    | IpFlag.TX_ABORT
    | IpFlag.TRACE_BEGIN
    | IpFlag.TRACE_END
    | IpFlag.VMENTRY
    | IpFlag.VMEXIT
)

#: State bits perf script prints apart, in parentheses: in-transaction, interrupts.
ADDITIONAL_STATE_MASK = int(IpFlag.IN_TX | IpFlag.INTR_DISABLE | IpFlag.INTR_TOGGLE)

#: perf script's names for exact flag values (builtin-script.c ``sample_flags``).
SCRIPT_FLAG_NAMES: dict[int, str] = {
    int(B | IpFlag.CALL): "call",
    int(B | IpFlag.RETURN): "return",
    int(B | IpFlag.CONDITIONAL): "jcc",
    int(B): "jmp",
    int(B | IpFlag.CALL | IpFlag.INTERRUPT): "int",
    int(B | IpFlag.RETURN | IpFlag.INTERRUPT): "iret",
    int(B | IpFlag.CALL | IpFlag.SYSCALLRET): "syscall",
    int(B | IpFlag.RETURN | IpFlag.SYSCALLRET): "sysret",
    int(B | IpFlag.ASYNC): "async",
    int(B | IpFlag.CALL | IpFlag.ASYNC | IpFlag.INTERRUPT): "hw int",
    int(B | IpFlag.TX_ABORT): "tx abrt",
    int(B | IpFlag.TRACE_BEGIN): "tr strt",
    int(B | IpFlag.TRACE_END): "tr end",
    int(B | IpFlag.CALL | IpFlag.VMENTRY): "vmentry",
    int(B | IpFlag.CALL | IpFlag.VMEXIT): "vmexit",
}

_PERF_BASE_BRANCH_TYPES: tuple[tuple[int, str], ...] = (
    (0, "no branch"),
    (int(B | IpFlag.CALL), "call"),
    (int(B | IpFlag.RETURN), "return"),
    (int(B | IpFlag.CONDITIONAL), "conditional jump"),
    (int(B), "unconditional jump"),
    (int(B | IpFlag.CALL | IpFlag.INTERRUPT), "software interrupt"),
    (int(B | IpFlag.RETURN | IpFlag.INTERRUPT), "return from interrupt"),
    (int(B | IpFlag.CALL | IpFlag.SYSCALLRET), "system call"),
    (int(B | IpFlag.RETURN | IpFlag.SYSCALLRET), "return from system call"),
    (int(B | IpFlag.ASYNC), "asynchronous branch"),
    (int(B | IpFlag.CALL | IpFlag.ASYNC | IpFlag.INTERRUPT), "hardware interrupt"),
    (int(B | IpFlag.TX_ABORT), "transaction abort"),
    (int(B | IpFlag.TRACE_BEGIN), "trace begin"),
    (int(B | IpFlag.TRACE_END), "trace end"),
    (int(B | IpFlag.CALL | IpFlag.VMENTRY), "vm entry"),
    (int(B | IpFlag.CALL | IpFlag.VMEXIT), "vm exit"),
)


def _with_trace_variants(base: tuple[tuple[int, str], ...]) -> tuple[tuple[int, str], ...]:
    rows = list(base)
    for value, name in base:
        if value == B or value & (IpFlag.TRACE_BEGIN | IpFlag.TRACE_END):
            continue
        rows.append((int(value | IpFlag.TRACE_BEGIN), f"trace begin / {name}"))
        rows.append((int(value | IpFlag.TRACE_END), f"{name} / trace end"))
    return tuple(rows)


#: The ``branch_types`` rows perf 6.1's db-export writes (db_export__branch_types):
#: 16 kinds, then a "trace begin / X" and an "X / trace end" variant of each kind
#: except the plain jump and trace begin/end themselves: 42 rows.
PERF_BRANCH_TYPES: tuple[tuple[int, str], ...] = _with_trace_variants(_PERF_BASE_BRANCH_TYPES)

#: Width of the field perf script pads flags to (``"  %-21s "`` in perf 6.1).
FLAGS_FIELD_WIDTH = 21


def flag_chars(flags: int) -> str:
    """perf's fallback rendering: one character per set bit, ``?`` past the known ones."""
    flags &= 0xFFFFFFFF
    out = []
    for i in range(32):
        if flags >> i & 1:
            out.append(PERF_IP_FLAG_CHARS[i] if i < len(PERF_IP_FLAG_CHARS) else "?")
    return "".join(out)


def format_flags(flags: int) -> str:
    """The flags text exactly as perf 6.1 ``perf script -F flags`` computes it (unpadded)."""
    flags = int(flags) & 0xFFFFFFFF
    xf = flags & ADDITIONAL_STATE_MASK
    xs = ""
    if xf:
        xs = "({}{}{})".format(
            "x" if flags & IpFlag.IN_TX else "",
            "D" if flags & IpFlag.INTR_DISABLE else "",
            "t" if flags & IpFlag.INTR_TOGGLE else "",
        )
    base = flags & ~ADDITIONAL_STATE_MASK
    name = SCRIPT_FLAG_NAMES.get(base)
    if name is not None:
        return f"{name:<15}{xs:>6}"
    if flags & IpFlag.TRACE_BEGIN:
        name = SCRIPT_FLAG_NAMES.get(base & ~IpFlag.TRACE_BEGIN)
        if name is not None:
            return f"tr strt {name:<7}{xs:>6}"
    if flags & IpFlag.TRACE_END:
        name = SCRIPT_FLAG_NAMES.get(base & ~IpFlag.TRACE_END)
        if name is not None:
            return f"tr end  {name:<7}{xs:>6}"
    return flag_chars(flags)


def format_flags_field(flags: int) -> str:
    """The flags field with perf script's surrounding padding: ``"  %-21s "``."""
    return f"  {format_flags(flags):<{FLAGS_FIELD_WIDTH}} "


#: Above this a flags column's distinct values are sorted out (np.unique), below it marked in a table.
_TABLE_MAX = 1 << 20


def distinct_flags(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(flags, return_inverse=True)`` (the inverse flat) for a column of perf's flags: a
    handful of small bit masks, marked in a table of every value up to the largest instead of sorted
    (a 64 K-row batch: 0.16 ms against np.unique's 1.9 ms, which took an eighth of ``dump branches``)."""
    arr = np.asarray(flags, dtype=np.int64).ravel()
    if arr.size == 0:
        return arr, np.zeros(0, np.intp)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= _TABLE_MAX:
        uniq, inv = np.unique(arr, return_inverse=True)
        return uniq, inv.ravel()
    present = np.zeros(hi + 1, bool)
    present[arr] = True
    rank = np.cumsum(present, dtype=np.intp) - 1
    return np.flatnonzero(present).astype(np.int64), rank[arr]


def format_flags_array(flags: np.ndarray | Iterable[int]) -> list[str]:
    """:func:`format_flags` over a column, formatting each distinct value once."""
    arr = np.asarray(flags, dtype=np.int64)
    if arr.size == 0:
        return []
    uniq, inv = distinct_flags(arr)
    names = [format_flags(int(v)) for v in uniq]
    return [names[i] for i in inv.ravel()]
