"""Names of perf's branch flag values as the viewer shows them (any value, perf's name where perf has one).

Used by the reports (:mod:`.queries`) and by :mod:`.db` when it completes a perf-made database's
``branch_types`` in its in-memory copy; it imports neither.
"""

from __future__ import annotations

# perf's sample flag bits (tools/perf/util/event.h PERF_IP_FLAG_*).
FLAG_NAMES = (
    (1 << 0, "branch"), (1 << 1, "call"), (1 << 2, "return"), (1 << 3, "conditional"),
    (1 << 4, "syscallret"), (1 << 5, "async"), (1 << 6, "interrupt"), (1 << 7, "tx abort"),
    (1 << 8, "trace begin"), (1 << 9, "trace end"), (1 << 10, "in tx"), (1 << 11, "vm entry"),
    (1 << 12, "vm exit"), (1 << 13, "intr disable"), (1 << 14, "intr toggle"),
)
_BASE_NAMES = {
    0: "no branch", 1: "unconditional jump", 3: "call", 5: "return", 9: "conditional jump",
    19: "system call", 21: "return from system call", 33: "asynchronous branch",
    67: "software interrupt", 69: "return from interrupt", 99: "hardware interrupt",
    129: "transaction abort", 2051: "vm entry", 4099: "vm exit",
}


def branch_type_name(flags: int) -> str:
    """A name for any branch flag value, perf's where perf has one (e.g. 4131 = async vm exit)."""
    if flags in _BASE_NAMES:
        return _BASE_NAMES[flags]
    core = flags & ~((1 << 8) | (1 << 9) | (1 << 10) | (1 << 13) | (1 << 14))
    parts = []
    if flags & (1 << 8):
        parts.append("trace begin")
    if core in _BASE_NAMES:
        if core or not parts:
            parts.append(_BASE_NAMES[core])
    elif core & (1 << 12):
        parts.append("vm exit" + (" (asynchronous)" if core & (1 << 5) else ""))
    elif core & (1 << 11):
        parts.append("vm entry")
    else:
        parts.append("+".join(n for bit, n in FLAG_NAMES if core & bit) or "no branch")
    name = " / ".join(parts)
    if flags & (1 << 9):
        name += " / trace end"
    if flags & (1 << 10):
        name += " (in tx)"
    return name
