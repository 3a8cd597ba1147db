"""``branch_types`` rows: perf 6.1's names for its values, derived names for every other value.

perf's db-export writes a fixed table (checked against a database made by
perf 6.1's export-to-sqlite.py): 14 base kinds, each also combined with
"trace begin" (``trace begin / KIND``) and "trace end" (``KIND / trace end``),
with ``trace begin`` and ``trace end`` alone for the plain branch.  Intel PT
produces values outside that table (an asynchronous VM exit is 4131, bits
for interrupt state and transactions...); those are named here from their
bits so that every ``samples.branch_type`` has a row.
"""

from __future__ import annotations

from collections.abc import Iterable

from ptexport.samples.flags import IpFlag

B = IpFlag.BRANCH
TRACE_BEGIN = int(IpFlag.TRACE_BEGIN)
TRACE_END = int(IpFlag.TRACE_END)

#: perf's base kinds, in perf's order.
PERF_BASE_KINDS: tuple[tuple[int, str], ...] = (
    (0, "no branch"),
    (int(B), "unconditional jump"),
    (int(B | IpFlag.CALL), "call"),
    (int(B | IpFlag.RETURN), "return"),
    (int(B | IpFlag.CONDITIONAL), "conditional jump"),
    (int(B | IpFlag.CALL | IpFlag.SYSCALLRET), "system call"),
    (int(B | IpFlag.RETURN | IpFlag.SYSCALLRET), "return from system call"),
    (int(B | IpFlag.ASYNC), "asynchronous branch"),
    (int(B | IpFlag.CALL | IpFlag.INTERRUPT), "software interrupt"),
    (int(B | IpFlag.RETURN | IpFlag.INTERRUPT), "return from interrupt"),
    (int(B | IpFlag.CALL | IpFlag.ASYNC | IpFlag.INTERRUPT), "hardware interrupt"),
    (int(B | IpFlag.TX_ABORT), "transaction abort"),
    (int(B | IpFlag.CALL | IpFlag.VMENTRY), "vm entry"),
    (int(B | IpFlag.CALL | IpFlag.VMEXIT), "vm exit"),
)


def _perf_rows() -> dict[int, str]:
    rows: dict[int, str] = {}
    for value, name in PERF_BASE_KINDS:
        rows[value] = name
        rows[value | TRACE_BEGIN] = "trace begin" if value == int(B) else f"trace begin / {name}"
        rows[value | TRACE_END] = "trace end" if value == int(B) else f"{name} / trace end"
    return dict(sorted(rows.items()))


#: Every row perf 6.1's export writes (42 rows), by id.
PERF_BRANCH_TYPES: dict[int, str] = _perf_rows()
_BASE = dict(PERF_BASE_KINDS)
# Base kinds by number of bits, most first: the best-matching subset names a value.
_BY_BITS = sorted(((v, n) for v, n in PERF_BASE_KINDS if v), key=lambda vn: -bin(vn[0]).count("1"))

_BIT_WORDS = {
    int(IpFlag.BRANCH): "branch",
    int(IpFlag.CALL): "call",
    int(IpFlag.RETURN): "return",
    int(IpFlag.CONDITIONAL): "conditional",
    int(IpFlag.SYSCALLRET): "syscall",
    int(IpFlag.ASYNC): "asynchronous",
    int(IpFlag.INTERRUPT): "interrupt",
    int(IpFlag.TX_ABORT): "transaction abort",
    int(IpFlag.IN_TX): "in transaction",
    int(IpFlag.VMENTRY): "vm entry",
    int(IpFlag.VMEXIT): "vm exit",
    int(IpFlag.INTR_DISABLE): "interrupts disabled",
    int(IpFlag.INTR_TOGGLE): "interrupt toggle",
}


def _words(bits: int) -> str:
    out = []
    for i in range(32):
        b = 1 << i
        if bits & b:
            out.append(_BIT_WORDS.get(b, f"bit {i}"))
    return ", ".join(out)


def branch_type_name(flags: int) -> str:
    """The ``branch_types.name`` of a flags value: perf's where perf has one, else derived.

    Derived names keep perf's pattern: the base kind is the perf kind with
    the most bits contained in the value, the remaining bits follow in
    parentheses, and trace begin/end wrap it as perf does::

        4131 -> "vm exit (asynchronous)"
        1027 -> "call (in transaction)"
        4387 -> "trace begin / vm exit (asynchronous)"
    """
    flags = int(flags) & 0xFFFFFFFF
    name = PERF_BRANCH_TYPES.get(flags)
    if name is not None:
        return name
    core = flags & ~(TRACE_BEGIN | TRACE_END)
    base_name = _BASE.get(core)
    if base_name is None:
        for value, kind in _BY_BITS:
            if core & value == value:
                base_name = f"{kind} ({_words(core & ~value)})"
                break
        else:
            base_name = f"no branch ({_words(core)})" if core else "no branch"
    if flags & TRACE_BEGIN and flags & TRACE_END:
        return f"trace begin / {base_name} / trace end"
    if flags & TRACE_BEGIN:
        return f"trace begin / {base_name}"
    if flags & TRACE_END:
        return f"{base_name} / trace end"
    return base_name


def branch_type_rows(values: Iterable[int] = ()) -> list[tuple[int, str]]:
    """perf's 42 rows plus a derived row for every other value in ``values``, by id."""
    rows = dict(PERF_BRANCH_TYPES)
    for v in values:
        v = int(v) & 0xFFFFFFFF
        if v not in rows:
            rows[v] = branch_type_name(v)
    return sorted(rows.items())
