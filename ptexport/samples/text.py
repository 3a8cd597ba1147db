"""Branch samples as text: perf script's line format and a CSV form.

:func:`perf_script_lines` renders branch samples exactly as perf 6.1 prints
them with ``perf script -F time,cpu,pid,tid,ip,addr,flags`` (checked line by
line against perf on the quipper trace): ``%5d/%-5d`` pid/tid, ``[%03d]``
CPU, the time in seconds with microseconds (truncated) right-aligned in 12
columns, the flags field (:func:`~ptexport.samples.flags.format_flags_field`),
then ``%16x => %16x`` for source and target.  :func:`error_line` renders an
instruction trace error as perf does.  Nothing here prints; the CLI does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from ptexport.samples.flags import format_flags_array

__all__ = ["perf_script_lines", "csv_lines", "CSV_COLUMNS", "usec_time", "error_line"]

#: ``ptexport dump branches --csv`` columns.
CSV_COLUMNS = ("time", "cpu", "pid", "tid", "ip", "addr", "flags")


def usec_time(ns: int) -> str:
    """perf's ``timestamp__scnprintf_usec``: seconds and truncated microseconds."""
    us = int(ns) // 1000
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def perf_script_lines(cols: Mapping[str, np.ndarray]) -> Iterator[str]:
    """One line per branch sample (no newline), as ``perf script -F time,cpu,pid,tid,ip,addr,flags``."""
    n = len(cols["time"])
    flags_text = format_flags_array(cols["flags"])
    time = np.asarray(cols["time"]).tolist()
    cpu = np.asarray(cols["cpu"]).tolist()
    pid = np.asarray(cols["pid"]).tolist()
    tid = np.asarray(cols["tid"]).tolist()
    ip = np.asarray(cols["ip"]).astype(np.uint64).tolist()
    addr = np.asarray(cols["addr"]).astype(np.uint64).tolist()
    for i in range(n):
        yield (
            f"{pid[i]:5d}/{tid[i]:<5d} [{cpu[i]:03d}] {usec_time(time[i]):>12}:   {flags_text[i]:<21}  "
            f"{ip[i]:16x} => {addr[i]:16x}"
        )


def csv_lines(cols: Mapping[str, np.ndarray], *, header: bool = True) -> Iterator[str]:
    """CSV lines (no newline): time in ns, cpu, pid, tid, ip and addr in hex, numeric flags."""
    if header:
        yield ",".join(CSV_COLUMNS)
    time = np.asarray(cols["time"]).tolist()
    cpu = np.asarray(cols["cpu"]).tolist()
    pid = np.asarray(cols["pid"]).tolist()
    tid = np.asarray(cols["tid"]).tolist()
    ip = np.asarray(cols["ip"]).astype(np.uint64).tolist()
    addr = np.asarray(cols["addr"]).astype(np.uint64).tolist()
    flags = np.asarray(cols["flags"]).tolist()
    for i in range(len(time)):
        yield f"{time[i]},{cpu[i]},{pid[i]},{tid[i]},{ip[i]:#x},{addr[i]:#x},{flags[i]}"


def error_line(*, type: int, time: int, cpu: int, pid: int, tid: int, ip: int, code: int, msg: str) -> str:
    """An instruction trace error as perf prints it (``perf_event__fprintf_auxtrace_error``)."""
    when = f"{time // 1_000_000_000}.{time % 1_000_000_000:09d}" if time else "0"
    name = "instruction trace" if type == 1 else "unknown AUX"
    ip_text = f"{ip:#x}" if ip else "0"  # C's %#lx prints 0 without 0x
    return f" {name} error type {type} time {when} cpu {cpu} pid {pid} tid {tid} ip {ip_text} code {code}: {msg}"
