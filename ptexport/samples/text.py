"""Synthesized samples as text: perf script's lines and ``dump branches``' CSV (the reference formatter).

``ptexport dump branches`` prints every output form through this module (or
its compiled twin :mod:`ptexport.samples.text_compiled`, same names, which
writes the default lines from a compiled loop).  The formats, as perf 6.1
prints them (checked line by line against perf; see docs/architecture.md):

- :func:`sample_lines`: ``perf script -F pid,tid,cpu,time,ip,addr,flags --ns``
  by default, with ``VM:%5d VCPU:%03d `` before a guest's sample (machine pid
  != 0); ``%5d/%-5d`` pid/tid, ``[%03d]`` CPU, ``%5lu.%09lu:`` time (``%5lu.%06lu``,
  microseconds truncated, without ``--ns``), the flags field
  (:func:`~ptexport.samples.flags.format_flags_field`), then ``%16lx => %16lx``
  (ip, addr) for branches, ``%16lx %16lx`` (addr, ip) for other samples.
  ``fields`` gives perf script's ``-F`` subset of :data:`FIELDS` (printed in
  perf's order, not the list's); ``ipc`` adds ``" \\t IPC: x.yy (insns/cycles) "``.
- :func:`error_line`: an instruction trace error as perf prints it, whatever ``-F`` says.
- :func:`csv_rows`: ``dump branches --csv`` rows under :func:`csv_header`.

Nothing here prints; the CLI does.
"""

from __future__ import annotations

from collections.abc import Iterator

from ptexport.samples.columns import EV_BRANCH, EV_ERROR, EVENT_NAMES, SampleColumns
from ptexport.samples.flags import format_flags_field

__all__ = ["FIELDS", "DEFAULT_FIELDS", "CSV_COLUMNS", "CSV_VM_COLUMNS", "perf_time", "usec_time", "error_line",
           "error_lines", "ipc_field", "sample_lines", "csv_header", "csv_rows"]

#: perf script ``-F`` names ``dump branches -F`` prints (perf prints them in its own order).
FIELDS = ("machine_pid", "vcpu", "pid", "tid", "cpu", "time", "ip", "addr", "flags", "ipc")
#: What ``dump branches`` prints without ``-F``.
DEFAULT_FIELDS = frozenset(FIELDS) - {"ipc"}
#: ``dump branches --csv`` columns; :data:`CSV_VM_COLUMNS` follow when the recording has guests.
CSV_COLUMNS = ("time", "cpu", "pid", "tid", "ip", "addr", "flags", "event", "error")
CSV_VM_COLUMNS = ("machine_pid", "vcpu")


def perf_time(ns: int, *, nsec: bool = True) -> str:
    """perf script's time: ``%5lu.%09lu`` (``--ns``), else ``%5lu.%06lu`` (microseconds, truncated)."""
    if nsec:
        return f"{ns // 1_000_000_000:>5}.{ns % 1_000_000_000:09d}"
    return f"{ns // 1_000_000_000:>5}.{ns // 1000 % 1_000_000:06d}"


def usec_time(ns: int) -> str:
    """perf's ``timestamp__scnprintf_usec``: seconds and truncated microseconds (unpadded)."""
    return perf_time(int(ns), nsec=False).lstrip()


def error_line(*, time: int, cpu: int, pid: int, tid: int, ip: int, code: int, msg: str, type: int = 1,
               machine_pid: int = 0, vcpu: int = -1) -> str:
    """An instruction trace error as perf prints it (``perf_event__fprintf_auxtrace_error``), no newline."""
    when = perf_time(time).lstrip() if time else "0"  # perf: "time 0" without a time
    name = "instruction trace" if type == 1 else "unknown AUX"
    vm = f"machine_pid {machine_pid} vcpu {vcpu} " if machine_pid else ""
    ip_text = f"{ip:#x}" if ip else "0"  # C's %#lx prints 0 without 0x
    return f" {name} error type {type} time {when} {vm}cpu {cpu} pid {pid} tid {tid} ip {ip_text} code {code}: {msg}"


def ipc_field(insn: int, cyc: int) -> str:
    """perf script's ipc field: whole hundredths (cut, not rounded), then the counts ("" without counts)."""
    if not insn or not cyc:
        return ""
    ipc = (insn * 100 // cyc) & 0xFFFFFFFF  # perf keeps it in an unsigned int
    return f" \t IPC: {ipc // 100}.{ipc % 100:02d} ({insn}/{cyc}) "


def error_lines(cols: SampleColumns, rows: list[int], mps: list[int], vcpus: list[int]) -> list[str]:
    """:func:`error_line` of each of ``rows`` of ``cols`` (newline-terminated); ``mps``/``vcpus``: every row's
    machine pid and VCPU."""
    ips, times, cpus, pids, tids, codes = (getattr(cols, c)[rows].tolist()
                                           for c in ("ip", "time", "cpu", "pid", "tid", "code"))
    return [error_line(time=times[j], cpu=cpus[j], pid=pids[j], tid=tids[j], ip=ips[j], code=codes[j],
                       msg=cols.error_message(codes[j]), machine_pid=mps[i], vcpu=vcpus[i]) + "\n"
            for j, i in enumerate(rows)]


def sample_lines(cols: SampleColumns, fields: frozenset[str] = DEFAULT_FIELDS, *, nsec: bool = True) -> str:
    """The lines of a batch (each ending in a newline): samples as ``perf script -F FIELDS``, errors as
    :func:`error_line`; perf 6.1 prints no sample line for ``-F flags`` alone."""
    F = fields.__contains__
    no_samples = fields == {"flags"}
    kinds = cols.kind.tolist()
    n = len(kinds)
    times, cpus, pids, tids = cols.time.tolist(), cols.cpu.tolist(), cols.pid.tolist(), cols.tid.tolist()
    ips, addrs, flags = cols.ip.tolist(), cols.addr.tolist(), cols.flags.tolist()
    none = [0] * n
    mps = cols.machine_pid.tolist() if cols.machine_pid is not None else none
    vcpus = cols.vcpu.tolist() if cols.vcpu is not None else [-1] * n
    insns = cols.insn_cnt.tolist() if F("ipc") else none
    cycs = cols.cyc_cnt.tolist() if F("ipc") else none
    errors = iter(error_lines(cols, [i for i, k in enumerate(kinds) if k == EV_ERROR], mps, vcpus))
    pid, tid, mp, vcpu, cpu, time, fl, ip, addr = (F(f) for f in ("pid", "tid", "machine_pid", "vcpu", "cpu",
                                                                  "time", "flags", "ip", "addr"))
    flag_text: dict[int, str] = {}
    lines = []
    for i, k in enumerate(kinds):
        if k == EV_ERROR:
            lines.append(next(errors))
            continue
        if no_samples:
            continue
        parts = []
        if mps[i]:
            if mp:
                parts.append(f"VM:{mps[i]:5d} ")
            if vcpu:
                parts.append(f"VCPU:{vcpus[i]:03d} ")
        if pid and tid:
            parts.append(f"{pids[i]:5d}/{tids[i]:<5d} ")
        elif pid or tid:
            parts.append(f"{(pids if pid else tids)[i]:5d} ")
        if cpu:
            parts.append(f"[{cpus[i]:03d}] ")
        if time:
            parts.append(f"{perf_time(times[i], nsec=nsec)}: ")
        if fl:
            f = flags[i]
            text = flag_text.get(f)
            if text is None:
                text = flag_text[f] = format_flags_field(f)
            parts.append(text)
        if k == EV_BRANCH:  # perf script: branches print "ip => addr", other samples "addr ip"
            if ip:
                parts.append(f" {ips[i]:16x}")
            if addr:
                parts.append(f" => {addrs[i]:16x}")
        else:  # perf_sample__fprintf_addr: "%16lx" with no blank before it (the ip's is fputc(' '))
            if addr:
                parts.append(f"{addrs[i]:16x}")
            if ip:
                parts.append(f" {ips[i]:16x}")
        if insns[i] and cycs[i]:
            parts.append(ipc_field(insns[i], cycs[i]))
        parts.append("\n")
        lines.append("".join(parts))
    return "".join(lines)


def csv_header(vm: bool = False) -> list[str]:
    """The ``--csv`` header row; ``vm``: the recording has guests (machine_pid, vcpu columns)."""
    return list(CSV_COLUMNS + CSV_VM_COLUMNS) if vm else list(CSV_COLUMNS)


def csv_rows(cols: SampleColumns, vm: bool = False) -> Iterator[list]:
    """The ``--csv`` rows of a batch: perf time in ns, numbers in decimal, flags as perf's bit values, the
    event's name and, for errors, perf's message."""
    kinds, times, cpus, pids, tids = (cols.kind.tolist(), cols.time.tolist(), cols.cpu.tolist(),
                                      cols.pid.tolist(), cols.tid.tolist())
    ips, addrs, flags, codes = cols.ip.tolist(), cols.addr.tolist(), cols.flags.tolist(), cols.code.tolist()
    extra: list[tuple[int, int]] = []
    if vm:
        mpids, vcpus = cols.machine_pid, cols.vcpu
        assert mpids is not None and vcpus is not None  # vm: the batch has its guest columns
        extra = list(zip(mpids.tolist(), vcpus.tolist()))
    for i, k in enumerate(kinds):
        err = cols.error_message(codes[i]) if k == EV_ERROR else ""
        row = [times[i], cpus[i], pids[i], tids[i], ips[i], addrs[i], flags[i], EVENT_NAMES[k], err]
        yield row + list(extra[i]) if vm else row
