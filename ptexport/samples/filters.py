"""perf script's sample filters: ``--time``, ``--pid``, ``--tid`` (the samples' side).

Semantics are perf 6.1's (tools/perf/util/time-utils.c, builtin-script.c):

* ``--time`` is a list of ranges ``<start>,<stop>`` in seconds with up to 9
  decimals (either side may be empty), ranges separated by blanks and not
  overlapping; or percent slices of the recording's first..last sample time
  (``10%/2``: the second 10 % slice; ``0%-10%,30%-40%``), which need the
  header's SAMPLE_TIME feature.  perf script drops samples whose perf time
  lies outside every range (bounds inclusive, time 0 is never dropped).
  The decoder applies the ranges too (:mod:`ptexport.decoder.filters`: in TSC,
  with perf's fast forward); the session and db-export use the masks here.
* ``--pid`` / ``--tid`` keep the samples of threads whose process / thread id
  is listed (perf's thread__is_filtered on the sample's thread: a guest
  sample's guest thread); sideband rows (context switches, threads, comms)
  are not filtered by perf.
* perf script applies both in process_sample_event: errors (auxtrace_error)
  are never dropped (``PerfSession._script_filter_keep``).

Nothing here prints; bad option values raise :class:`~ptexport.errors.UsageError`.
See docs/architecture.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ptexport.errors import UsageError

NSEC_PER_SEC = 1_000_000_000


@dataclass(frozen=True)
class TimeRange:
    """One perf time interval in ns; 0 means open (perf's perf_time_interval)."""

    start: int = 0
    end: int = 0


def parse_nsec_time(text: str) -> int:
    """perf's parse_nsec_time: ``SEC[.NSEC]``, at most 9 decimals."""
    m = re.fullmatch(r"(\d*)(?:\.(\d*))?", text)
    if m is None or (m.group(2) is not None and len(m.group(2)) > 9):
        raise UsageError(f"--time: invalid time '{text}' (seconds with at most 9 decimals)")
    sec = int(m.group(1) or 0)
    nsec = int((m.group(2) or "").ljust(9, "0") or 0)
    return sec * NSEC_PER_SEC + nsec


def _parse_one(text: str) -> TimeRange:
    """perf_time__parse_str: ``<start>,<stop>``, either side may be empty."""
    start_s, sep, end_s = text.partition(",")
    if not sep:
        raise UsageError(f"--time: invalid range '{text}' (expected <start>,<stop>)")
    start = parse_nsec_time(start_s) if start_s else 0
    end = parse_nsec_time(end_s) if end_s else 0
    if end and end < start:
        raise UsageError(f"--time: range '{text}' ends before it starts")
    return TimeRange(start, end)


def _parse_percent(text: str) -> float:
    if not text.endswith("%"):
        raise UsageError(f"--time: invalid percentage '{text}'")
    try:
        return float(text[:-1]) / 100.0
    except ValueError:
        raise UsageError(f"--time: invalid percentage '{text}'") from None


def _percent_range(start_pcnt: float, end_pcnt: float, first: int, last: int, text: str) -> TimeRange:
    """perf's set_percent_time."""
    if not (0.0 <= start_pcnt <= 1.0 and 0.0 <= end_pcnt <= 1.0):
        raise UsageError(f"--time: percent slice '{text}' outside 0%..100%")
    total = last - first

    def rnd(x: float) -> int:  # C round(): halves away from zero
        return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))

    start = first + rnd(start_pcnt * total)
    end = first + rnd(end_pcnt * total)
    if end > start and end != last:
        end -= 1
    return TimeRange(start, end)


def parse_time_ranges(text: str, sample_time: tuple[int, int] | None = None) -> list[TimeRange]:
    """perf script's ``--time`` argument as ranges (perf_time__parse_for_ranges).

    ``sample_time`` is the header's (first, last) sample time, needed by the
    percent forms.
    """
    text = text.strip()
    if "%" in text:
        if not sample_time or (not sample_time[0] and not sample_time[1]):
            raise UsageError("--time: percent ranges need the first/last sample time, which this "
                             "perf.data does not record (perf record --timestamp-boundary)")
        first, last = int(sample_time[0]), int(sample_time[1])
        out = []
        for piece in text.split(","):
            if "/" in text:
                pc, _, nth = piece.partition("/")
                pcnt = _parse_percent(pc)
                try:
                    i = int(nth)
                except ValueError:
                    raise UsageError(f"--time: invalid slice '{piece}'") from None
                if pcnt <= 0.0:
                    raise UsageError(f"--time: invalid slice '{piece}'")
                out.append(_percent_range(pcnt * (i - 1), pcnt * i, first, last, piece))
            elif "-" in text:
                a, sep, b = piece.partition("-")
                if not sep:
                    raise UsageError(f"--time: invalid percent range '{piece}'")
                out.append(_percent_range(_parse_percent(a), _parse_percent(b), first, last, piece))
            else:
                raise UsageError(f"--time: invalid percent range '{piece}' (use 10%/2 or 0%-10%)")
        return out
    # Ranges "<start>,<stop>" separated by blanks: one comma per range.
    pieces = text.split()
    if not pieces or any(p.count(",") != 1 for p in pieces):
        raise UsageError(f"--time: invalid value '{text}' (expected <start>,<stop>[ <start>,<stop>...])")
    ranges = [_parse_one(p) for p in pieces]
    for a, b in zip(ranges, ranges[1:]):
        if a.end >= b.start:
            raise UsageError(f"--time: ranges overlap or are out of order in '{text}'")
    return ranges


def parse_id_list(text: str, what: str) -> frozenset[int]:
    """``--pid`` / ``--tid``: comma-separated integers (perf's intlist)."""
    out = set()
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            out.add(int(part, 0))
        except ValueError:
            raise UsageError(f"--{what}: '{part}' is not a number") from None
    if not out:
        raise UsageError(f"--{what}: empty list")
    return frozenset(out)


def time_mask(times: np.ndarray, ranges: list[TimeRange] | None) -> np.ndarray:
    """perf_time__ranges_skip_sample, negated: True for samples perf keeps (time 0 always)."""
    times = np.asarray(times, dtype=np.uint64)
    if not ranges:
        return np.ones(len(times), bool)
    keep = times == 0
    for r in ranges:
        inside = times >= np.uint64(r.start)
        if r.end:
            inside &= times <= np.uint64(r.end)
        keep |= inside
    return keep


def thread_mask(pids: np.ndarray, tids: np.ndarray, pid_list: frozenset[int] | None,
                tid_list: frozenset[int] | None) -> np.ndarray:
    """perf's thread__is_filtered, negated, over the samples' threads."""
    keep = np.ones(len(pids), bool)
    if pid_list is not None:
        keep &= np.isin(np.asarray(pids, dtype=np.int64), np.fromiter(pid_list, np.int64))
    if tid_list is not None:
        keep &= np.isin(np.asarray(tids, dtype=np.int64), np.fromiter(tid_list, np.int64))
    return keep


def thread_kept(pid: int, tid: int, pid_list: frozenset[int] | None, tid_list: frozenset[int] | None) -> bool:
    return (pid_list is None or pid in pid_list) and (tid_list is None or tid in tid_list)


def time_kept(time: int, ranges: list[TimeRange] | None) -> bool:
    """perf_time__ranges_skip_sample, negated, for one sample (time 0 is always kept)."""
    if not ranges or not time:
        return True
    return any(time >= r.start and (not r.end or time <= r.end) for r in ranges)
