"""Run perf 6.1 and parse what it prints: `perf report --stats`, `perf script -D`, `--header-only -I`.

Results are cached by path (test files do not change once made); callers must not mutate them."""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_STAT = re.compile(r"^\s*(\w+) events:\s+(\d+)")
_EVENT = re.compile(r"^(0x[0-9a-f]+|\d+)@(\S+) \[(0x[0-9a-f]+)\]: event: (\d+)$")
_CHAIN = re.compile(r"^\.{5}\s+\d+: ([0-9a-f]+)$")
_REG = re.compile(r"^\.{4} (\w+)\s+(0x[0-9a-f]+)$")
_SAMPLE = re.compile(r"PERF_RECORD_SAMPLE\(\w+, (0x[0-9a-f]+)\): (-?\d+)/(-?\d+): (0x[0-9a-f]+) period: (\d+)"
                     r" addr: (0x[0-9a-f]+|\d+)")


def run(args: list[str], stdin_file: Path | None = None, **kw) -> str:
    if stdin_file is None:
        return subprocess.run(args, check=True, capture_output=True, text=True, errors="replace", **kw).stdout
    # a real pipe (perf treats a regular file on stdin differently)
    cat = subprocess.Popen(["cat", str(stdin_file)], stdout=subprocess.PIPE)
    try:
        return subprocess.run(args, check=True, stdin=cat.stdout, capture_output=True, text=True,
                              errors="replace", **kw).stdout
    finally:
        cat.stdout.close()
        cat.wait()


def _input(path: Path, via_pipe: bool) -> tuple[list[str], Path | None]:
    """perf's -i arguments. perf 6.1 misreads pipe-mode *files* holding AUXTRACE records when given as
    ``-i FILE`` (it lseeks to a pipe-relative offset, 16 bytes short); through a real pipe it is right."""
    return (["-i", "-"], path) if via_pipe else (["-i", str(path)], None)


@functools.lru_cache(maxsize=64)
def perf_stats(path: Path, via_pipe: bool = False) -> dict[str, int]:
    """`perf report --stats`: the Aggregated stats block as {record name: count} (TOTAL left out)."""
    args, stdin = _input(path, via_pipe)
    out = run(["perf", "report", "--stats"] + args, stdin_file=stdin)
    counts: dict[str, int] = {}
    in_block = False
    for line in out.splitlines():
        if line.startswith("Aggregated stats"):
            in_block = True
            continue
        if in_block:
            m = _STAT.match(line)
            if not m:
                if counts:
                    break
                continue
            if m.group(1) != "TOTAL":
                counts[m.group(1)] = int(m.group(2))
    return counts


@dataclass
class DumpRecord:
    offset: int
    file: str
    size: int
    type: int
    name: str = ""
    summary: str = ""
    time: int | None = None
    sample: dict | None = None
    callchain: list[int] = field(default_factory=list)
    regs: dict[str, int] = field(default_factory=dict)
    ustack_size: int | None = None
    lines: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=16)
def perf_dump(path: Path, via_pipe: bool = False) -> list[DumpRecord]:
    """`perf script -D`: one DumpRecord per raw event in the order perf read them."""
    args, stdin = _input(path, via_pipe)
    out = run(["perf", "script", "-D"] + args, stdin_file=stdin)
    recs: list[DumpRecord] = []
    cur: DumpRecord | None = None
    for line in out.splitlines():
        m = _EVENT.match(line)
        if m:
            cur = DumpRecord(int(m.group(1), 0), m.group(2), int(m.group(3), 16), int(m.group(4)))
            recs.append(cur)
            continue
        if cur is None:
            continue
        if ": PERF_RECORD_" in line and not cur.name:
            left, right = line.split(": PERF_RECORD_", 1)
            cur.name = re.match(r"\w+", right).group(0)
            cur.summary = right
            toks = left.split()
            if len(toks) >= 3 and toks[-3].isdigit():
                cur.time = int(toks[-3])
            sm = _SAMPLE.search(line)
            if sm:
                cur.sample = {"misc": int(sm.group(1), 16), "pid": int(sm.group(2)), "tid": int(sm.group(3)),
                              "ip": int(sm.group(4), 16), "period": int(sm.group(5)),
                              "addr": int(sm.group(6), 0)}
            continue
        cm = _CHAIN.match(line)
        if cm:
            cur.callchain.append(int(cm.group(1), 16))
            continue
        rm = _REG.match(line)
        if rm:
            cur.regs[rm.group(1)] = int(rm.group(2), 16)
            continue
        if line.startswith("... ustack: size "):
            cur.ustack_size = int(line.split("size ")[1].split(",")[0])
            continue
        cur.lines.append(line)
    return recs


@functools.lru_cache(maxsize=64)
def perf_header(path: Path) -> str:
    return run(["perf", "report", "--header-only", "-I", "-i", str(path)])


def header_events(text: str) -> list[dict[str, str]]:
    """The `# event : name = ..., k = v, ...` lines of --header-only -I as dicts."""
    out = []
    for line in text.splitlines():
        if not line.startswith("# event : "):
            continue
        body = line[len("# event : "):]
        d: dict[str, str] = {}
        # ids are in braces: id = { 1, 2 }
        m = re.search(r"id = \{ ([^}]*) \}", body)
        if m:
            d["id"] = m.group(1)
            body = body.replace(m.group(0), "")
        body = body.replace("{ sample_period, sample_freq }", "sample_period")
        for part in body.split(", "):
            if " = " in part:
                k, v = part.split(" = ", 1)
                d[k.strip()] = v.strip()
        out.append(d)
    return out


def header_values(text: str) -> dict[str, str]:
    """`# key : value` lines of --header-only -I (first occurrence of each key)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^# ([\w ]+?)\s*: (.*)$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2).strip()
    return out
