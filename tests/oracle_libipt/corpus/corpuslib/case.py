"""Corpus cases: the ``cases/NAME.s`` files, their directives and the registries families add to.

A case is one assembly file (GNU as, Intel syntax).  Comment lines ``# @key value`` describe it
(README.md lists them): the built-in directives (``@org``, ``@mode``, ``@retcomp``, ``@ip``, ``@tnt``,
``@ptw-fup``, ``@ptxed``, ``@cpu``, ``@end``, ``@max``, ``@perf``, ``@covers``, ``@reg``) are parsed
here into :class:`Case`; ``@at``/``@after LABEL[#N] EVENT ARGS`` lines become :class:`Event`\\ s.

Registries (each family module registers its own names when it is imported):

* :data:`CASE_DIRECTIVES`: more directives, ``name -> function(case, words)`` (options go into
  ``case.extra``);
* :data:`AT_EVENTS`: ``@at`` events, ``name -> function(truth, event, ip) -> new ip or None``
  (the hardware does something before the Nth execution of the labelled instruction);
* :data:`AFTER_EVENTS`: ``@after`` events, ``name -> function(truth, event, insn, next_ip) -> True``
  when it wrote the branch's packets (it replaces the instruction's branch packets, SDM vol. 3C
  "Intel Processor Trace": what a branch writes is decided when it retires).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent     # tests/oracle_libipt/corpus
CASES = HERE / "cases"

# Scripted events: name -> function(truth, event, ip) -> new ip or None ("@at"), and
# name -> function(truth, event, insn, next_ip) -> True when it wrote the branch's packets ("@after").
# Add an event with the decorators below (each family of cases keeps its events in its own module).
AT_EVENTS: dict = {}
AFTER_EVENTS: dict = {}

# Extra case directives: name -> function(case, words); options go into case.extra.
CASE_DIRECTIVES: dict = {}


def at_event(name: str):
    def deco(fn):
        AT_EVENTS[name] = fn
        return fn
    return deco


def after_event(name: str):
    def deco(fn):
        AFTER_EVENTS[name] = fn
        return fn
    return deco


class CaseError(Exception):
    """A corpus case that cannot be built (bad directive, assembler error, emulation fault)."""


@dataclass
class Event:
    label: str
    nth: int
    name: str
    args: list[str]
    where: str = "at"          # "at": before the instruction; "after": in place of its branch packet


@dataclass
class Case:
    name: str
    path: Path
    org: int = 0x100000
    mode: int = 64
    retcomp: bool = True
    ip_mode: str = "auto"
    tnt_mode: str = "long"
    ptw_fup: bool = False      # PTWRITE packets carry a FUP (IA32_RTIT_CTL.FUPonPTW)
    ptxed: list[str] = field(default_factory=list)
    cpus: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    end: str = "disable"       # how the trace ends at hlt: disable (FUP+TIP.PGD) or eos
    max_insns: int = 20000
    perf: bool = False         # also wrap into a perf.data and compare with perf script
    covers: list[str] = field(default_factory=list)
    regs: dict[str, int] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def _int(s: str) -> int:
    return int(s, 0)


def parse_case(path: Path) -> Case:
    case = Case(name=path.stem, path=path)
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"\s*#\s*@(\w[\w-]*)\s*(.*)$", line)
        if not m:
            continue
        key, rest = m.group(1), m.group(2).strip()
        words = shlex.split(rest, comments=False)
        try:
            if key == "org":
                case.org = _int(words[0])
            elif key == "mode":
                case.mode = int(words[0])
            elif key == "retcomp":
                case.retcomp = words[0] in ("on", "1", "yes")
            elif key == "ip":
                case.ip_mode = words[0]
            elif key == "tnt":
                case.tnt_mode = words[0]
            elif key == "ptw-fup":
                case.ptw_fup = True
            elif key == "ptxed":
                case.ptxed += words
            elif key == "cpu":
                case.cpus += words
            elif key == "end":
                case.end = words[0]
            elif key == "max":
                case.max_insns = int(words[0])
            elif key == "perf":
                case.perf = True
            elif key == "covers":
                case.covers += words
            elif key == "reg":
                case.regs[words[0].lower()] = _int(words[1])
            elif key in CASE_DIRECTIVES:
                CASE_DIRECTIVES[key](case, words)
            elif key in ("at", "after"):
                label, _, nth = words[0].partition("#")
                case.events.append(Event(label, int(nth or 1), words[1], words[2:], key))
            else:
                raise CaseError(f"{path.name}:{lineno}: unknown directive @{key}")
        except (IndexError, ValueError) as e:
            raise CaseError(f"{path.name}:{lineno}: bad @{key} line: {e}") from e
    return case


def all_cases() -> list[Case]:
    return [parse_case(p) for p in sorted(CASES.glob("*.s"))]
