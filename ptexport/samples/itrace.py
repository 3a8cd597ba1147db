"""perf's ``--itrace`` option string, parsed as perf 6.1 parses it.

The grammar is perf's ``itrace_do_parse_synth_opts`` (tools/perf/util/auxtrace.c),
checked letter by letter against perf 6.1 itself (``tests/samples``):

* sample kinds: ``i`` instructions, ``b`` branches, ``c`` calls (implies ``b``),
  ``r`` returns (implies ``b``), ``x`` transactions, ``w`` ptwrite, ``p`` power
  events, ``o`` other (PEBS-via-PT) events, ``I`` event trace, ``e`` errors,
  ``f``/``m``/``t``/``a``/``M`` cache, TLB, remote-access and memory events;
* ``i`` takes an optional period: digits then a unit ``i`` (instructions),
  ``t`` (ticks), ``ms``/``us``/``ns`` (default ns); blanks and commas may sit
  between ``i``, the number and the unit;
* ``e`` and ``d`` take ``+x``/``-x`` flags (any lower-case letter: ``e`` knows
  ``o`` overflow and ``l`` lost data, ``d`` knows ``a``, ``e``, ``o``);
* ``g``/``G`` callchain and ``l``/``L`` last-branch, with an optional size
  1..1024 (perf keeps only the low 32 bits of the number, as C does);
* ``s`` skip count (``strtoul``: blanks, a sign and digits; at least one digit);
* ``q`` (repeatable), ``A`` approximate IPC, ``Z`` timeless decoding;
* blanks and commas between letters are ignored; anything else is an error.

perf 6.1 knows neither ``y`` (cycles) nor ``T``: both are errors here as there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from ptexport.errors import UsageError

__all__ = [
    "PeriodType",
    "ItraceOptions",
    "parse_itrace",
    "perf_default",
    "export_default",
    "DEFAULT_PERIOD",
    "DEFAULT_CALLCHAIN_SZ",
    "DEFAULT_LAST_BRANCH_SZ",
    "MAX_CALLCHAIN_SZ",
    "MAX_LAST_BRANCH_SZ",
    "ERR_FLAG_OVERFLOW",
    "ERR_FLAG_DATA_LOST",
]

ULONG_MAX = (1 << 64) - 1
UINT_MAX = (1 << 32) - 1

DEFAULT_PERIOD = 100000  # PERF_ITRACE_DEFAULT_PERIOD (nanoseconds)
DEFAULT_CALLCHAIN_SZ = 16
MAX_CALLCHAIN_SZ = 1024
DEFAULT_LAST_BRANCH_SZ = 64
MAX_LAST_BRANCH_SZ = 1024

#: ``e`` flag letters perf gives meaning to (``AUXTRACE_ERR_FLG_*``).
ERR_FLAG_OVERFLOW = "o"
ERR_FLAG_DATA_LOST = "l"


class PeriodType(enum.IntEnum):
    """``enum itrace_period_type``."""

    INSTRUCTIONS = 0
    TICKS = 1
    NANOSECS = 2


DEFAULT_PERIOD_TYPE = PeriodType.NANOSECS


@dataclass(frozen=True)
class ItraceOptions:
    """What to synthesize from the trace: perf's ``struct itrace_synth_opts``.

    Flag sets (``error_plus`` ...) hold the letters given after ``+``/``-``.
    ``dont_decode`` is ``--no-itrace``.
    """

    set: bool = False
    dont_decode: bool = False
    instructions: bool = False
    branches: bool = False
    calls: bool = False
    returns: bool = False
    transactions: bool = False
    ptwrites: bool = False
    pwr_events: bool = False
    other_events: bool = False
    intr_events: bool = False
    errors: bool = False
    error_plus: frozenset[str] = field(default_factory=frozenset)
    error_minus: frozenset[str] = field(default_factory=frozenset)
    log: bool = False
    log_plus: frozenset[str] = field(default_factory=frozenset)
    log_minus: frozenset[str] = field(default_factory=frozenset)
    callchain: bool = False
    add_callchain: bool = False
    callchain_sz: int = 0
    last_branch: bool = False
    add_last_branch: bool = False
    last_branch_sz: int = 0
    initial_skip: int = 0
    flc: bool = False
    llc: bool = False
    tlb: bool = False
    remote_access: bool = False
    mem: bool = False
    quick: int = 0
    approx_ipc: bool = False
    timeless_decoding: bool = False
    period: int = 0
    period_type: PeriodType = PeriodType.INSTRUCTIONS

    @property
    def branches_filter(self) -> int:
        """perf intel-pt's ``branches_filter``: 0 keeps every branch.

        ``c`` keeps calls, asynchronous branches and trace ends; ``r`` keeps
        returns and trace begins (so ``--itrace=cr`` keeps every trace begin/end).
        """
        from ptexport.samples.flags import IpFlag

        f = 0
        if self.calls:
            f |= IpFlag.CALL | IpFlag.ASYNC | IpFlag.TRACE_END
        if self.returns:
            f |= IpFlag.RETURN | IpFlag.TRACE_BEGIN
        return int(f)

    def letters(self) -> str:
        """A canonical ``--itrace`` string for these options (for logs and tests)."""
        out = []
        if self.instructions:
            unit = {PeriodType.INSTRUCTIONS: "i", PeriodType.TICKS: "t", PeriodType.NANOSECS: "ns"}
            out.append(f"i{self.period}{unit[self.period_type]}")
        if self.branches and not (self.calls or self.returns):
            out.append("b")
        for flag, ch in (
            (self.calls, "c"),
            (self.returns, "r"),
            (self.transactions, "x"),
            (self.ptwrites, "w"),
            (self.pwr_events, "p"),
            (self.other_events, "o"),
            (self.intr_events, "I"),
        ):
            if flag:
                out.append(ch)
        if self.errors:
            out.append("e" + "".join(f"+{c}" for c in sorted(self.error_plus))
                       + "".join(f"-{c}" for c in sorted(self.error_minus)))
        if self.log:
            out.append("d" + "".join(f"+{c}" for c in sorted(self.log_plus))
                       + "".join(f"-{c}" for c in sorted(self.log_minus)))
        if self.callchain:
            out.append(f"g{self.callchain_sz}")
        if self.add_callchain:
            out.append(f"G{self.callchain_sz}")
        if self.last_branch:
            out.append(f"l{self.last_branch_sz}")
        if self.add_last_branch:
            out.append(f"L{self.last_branch_sz}")
        for flag, ch in ((self.flc, "f"), (self.llc, "m"), (self.tlb, "t"),
                         (self.remote_access, "a"), (self.mem, "M")):
            if flag:
                out.append(ch)
        out.append("q" * self.quick)
        if self.approx_ipc:
            out.append("A")
        if self.timeless_decoding:
            out.append("Z")
        if self.initial_skip:
            out.append(f"s{self.initial_skip}")
        return "".join(out)


def perf_default(*, no_sample: bool = True) -> ItraceOptions:
    """perf's ``itrace_synth_opts__set_default``.

    ``no_sample=True`` is what ``perf script`` uses (``--itrace`` alone, or no
    option): calls (hence ``c`` filtering of branches), transactions, ptwrite,
    power, other, event-trace and error events, instruction period 1 instruction
    but no instructions events.  ``no_sample=False`` (perf report, perf inject)
    adds instructions events every 100000 ns instead of calls.
    """
    base = dict(
        set=True,
        branches=True,
        transactions=True,
        ptwrites=True,
        pwr_events=True,
        other_events=True,
        intr_events=True,
        errors=True,
        flc=True,
        llc=True,
        tlb=True,
        mem=True,
        remote_access=True,
        callchain_sz=DEFAULT_CALLCHAIN_SZ,
        last_branch_sz=DEFAULT_LAST_BRANCH_SZ,
    )
    if no_sample:
        return ItraceOptions(**base, calls=True, period=1, period_type=PeriodType.INSTRUCTIONS)
    return ItraceOptions(**base, instructions=True, period=DEFAULT_PERIOD, period_type=DEFAULT_PERIOD_TYPE)


def export_default() -> ItraceOptions:
    """ptexport's export default: every branch, errors and power events (``bep``).

    Unlike perf script's default (``c`` filtering), all branches reach the call
    tree, so ``calls`` gets returns (docs/architecture.md).
    """
    return parse_itrace("bep")


def parse_itrace(text: str | None, *, unset: bool = False, no_sample: bool = True) -> ItraceOptions:
    """Parse an ``--itrace`` value exactly as perf 6.1 does.

    ``None`` is ``--itrace`` without a value (perf's default, see
    :func:`perf_default`); ``unset`` is ``--no-itrace``.  A string perf rejects
    raises :class:`UsageError` with perf's message and where parsing stopped.
    """
    if unset:
        return ItraceOptions(set=True, dont_decode=True)
    if text is None:
        return perf_default(no_sample=no_sample)
    return _Parser(text).parse()


class _Bad(Exception):
    def __init__(self, pos: int, why: str) -> None:
        self.pos = pos
        self.why = why


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.p = 0
        self.o: dict = {"set": True}
        self.period_set = False
        self.period_type_set = False

    # -- character helpers (the string ends in an implicit NUL, as in C) --
    def peek(self) -> str:
        return self.s[self.p] if self.p < len(self.s) else "\0"

    def take(self) -> str:
        c = self.peek()
        self.p += 1
        return c

    def skip_blank_comma(self) -> None:
        while self.peek() in (" ", ","):
            self.p += 1

    def digits(self) -> int:
        start = self.p
        while self.peek().isdigit() and self.peek().isascii():
            self.p += 1
        return int(self.s[start:self.p])

    def parse(self) -> ItraceOptions:
        try:
            while self.p < len(self.s):
                self.letter(self.take())
        except _Bad as bad:
            where = f"at character {bad.pos + 1}" if bad.pos < len(self.s) else "at the end"
            raise UsageError(f"Bad Instruction Tracing options '{self.s}' ({where}: {bad.why})") from None
        o = self.o
        if o.get("instructions"):
            if not self.period_type_set:
                o["period_type"] = DEFAULT_PERIOD_TYPE
            if not self.period_set:
                o["period"] = DEFAULT_PERIOD
        for k in ("error_plus", "error_minus", "log_plus", "log_minus"):
            if k in o:
                o[k] = frozenset(o[k])
        return ItraceOptions(**o)

    def letter(self, c: str) -> None:
        o = self.o
        simple = {
            "b": ("branches",),
            "x": ("transactions",),
            "w": ("ptwrites",),
            "p": ("pwr_events",),
            "o": ("other_events",),
            "I": ("intr_events",),
            "c": ("branches", "calls"),
            "r": ("branches", "returns"),
            "f": ("flc",),
            "m": ("llc",),
            "t": ("tlb",),
            "a": ("remote_access",),
            "M": ("mem",),
            "A": ("approx_ipc",),
            "Z": ("timeless_decoding",),
        }
        if c in simple:
            for name in simple[c]:
                o[name] = True
        elif c == "i":
            o["instructions"] = True
            self.period()
        elif c == "e":
            o["errors"] = True
            self.flags("error_plus", "error_minus")
        elif c == "d":
            o["log"] = True
            self.flags("log_plus", "log_minus")
        elif c in ("g", "G"):
            o["add_callchain" if c == "G" else "callchain"] = True
            o["callchain_sz"] = self.size(DEFAULT_CALLCHAIN_SZ, MAX_CALLCHAIN_SZ, "call chain size")
        elif c in ("l", "L"):
            o["add_last_branch" if c == "L" else "last_branch"] = True
            o["last_branch_sz"] = self.size(DEFAULT_LAST_BRANCH_SZ, MAX_LAST_BRANCH_SZ, "last branch size")
        elif c == "s":
            o["initial_skip"] = self.strtoul()
        elif c == "q":
            o["quick"] = o.get("quick", 0) + 1
        elif c in (" ", ","):
            pass
        else:
            raise _Bad(self.p - 1, f"unknown option {c!r}")

    def period(self) -> None:
        self.skip_blank_comma()
        if not (self.peek().isascii() and self.peek().isdigit()):
            return
        period = min(self.digits(), ULONG_MAX)  # strtoull saturates
        self.period_set = True
        self.skip_blank_comma()
        at = self.p
        unit = self.take()
        if unit == "\0":  # end of string: no unit
            self.o["period"] = period
            self.p = len(self.s)
            return
        if unit == "i":
            ptype = PeriodType.INSTRUCTIONS
        elif unit == "t":
            ptype = PeriodType.TICKS
        elif unit in ("m", "u", "n"):
            scale = {"m": 1000 * 1000, "u": 1000, "n": 1}[unit]
            if self.take() != "s":
                raise _Bad(at, f"period unit '{unit}' must be followed by 's'")
            period = (period * scale) & ULONG_MAX  # u64 arithmetic, as in C
            ptype = PeriodType.NANOSECS
        else:
            raise _Bad(at, f"bad period unit {unit!r} (want i, t, ms, us or ns)")
        self.o["period"] = period
        self.o["period_type"] = ptype
        self.period_type_set = True

    def flags(self, plus: str, minus: str) -> None:
        while True:
            c = self.peek()
            if c == " ":
                self.p += 1
            elif c in ("+", "-"):
                self.p += 1
                while self.peek() == " ":
                    self.p += 1
                f = self.peek()
                if not ("a" <= f <= "z"):
                    raise _Bad(self.p, f"'{c}' must be followed by a lower-case flag letter")
                self.p += 1
                self.o.setdefault(plus if c == "+" else minus, set()).add(f)
            else:
                return

    def size(self, default: int, maximum: int, what: str) -> int:
        self.skip_blank_comma()
        if not (self.peek().isascii() and self.peek().isdigit()):
            return default
        at = self.p
        val = min(self.digits(), ULONG_MAX) & UINT_MAX  # strtoul into an unsigned int
        if not val or val > maximum:
            raise _Bad(at, f"{what} must be 1..{maximum}")
        return val

    def strtoul(self) -> int:
        start = self.p
        i = self.p
        while i < len(self.s) and self.s[i] in " \t\n\v\f\r":
            i += 1
        neg = False
        if i < len(self.s) and self.s[i] in "+-":
            neg = self.s[i] == "-"
            i += 1
        j = i
        while j < len(self.s) and self.s[j].isascii() and self.s[j].isdigit():
            j += 1
        if j == i:
            raise _Bad(start, "'s' must be followed by a number")
        self.p = j
        val = int(self.s[i:j])
        if val > ULONG_MAX:
            return ULONG_MAX
        return (-val) & ULONG_MAX if neg else val


def with_changes(opts: ItraceOptions, **changes) -> ItraceOptions:
    """A copy of ``opts`` with some fields changed (dataclasses.replace)."""
    return replace(opts, **changes)
