"""perf script's sample filters: ``--time``, ``--pid``, ``--tid`` (and their Intel PT side).

Semantics are perf 6.1's (tools/perf/util/time-utils.c, builtin-script.c,
util/intel-pt.c):

* ``--time`` is a list of ranges ``<start>,<stop>`` in seconds with up to 9
  decimals (either side may be empty), ranges separated by blanks and not
  overlapping; or percent slices of the recording's first..last sample time
  (``10%/2``: the second 10 % slice; ``0%-10%,30%-40%``), which need the
  header's SAMPLE_TIME feature.  perf script drops samples whose perf time
  lies outside every range (bounds inclusive, time 0 is never dropped).
  Intel PT applies the ranges in its decoder too (converted to TSC so that
  they convert back to the same perf times): it fast-forwards to the last
  PSB before a start, synthesizes nothing for a state before the start (the
  queue's first state included, so a CBR event and IPC counts carry over to
  the first state kept), and stops a queue after the last end.  That part is
  :class:`TscRanges` / :class:`QueueTimeFilter` / :func:`fast_forward`,
  driven by :meth:`ptexport.session.perfsession.PerfSession.iter_queue`
  (the reference decoder) and by ``perffast.QueueDecoder`` (the compiled
  one: the kernel decides inside a range or before a start, this class at
  the edges; its fast forward works on byte offsets, :func:`psb_positions`).
* ``--pid`` / ``--tid`` keep the samples of threads whose process / thread id
  is listed (perf's thread__is_filtered on the sample's thread: a guest
  sample's guest thread); sideband rows (context switches, threads, comms)
  are not filtered by perf.
* perf script applies both in process_sample_event: errors (auxtrace_error)
  are never dropped (``PerfSession._script_filter_keep``).

Nothing here prints; bad option values raise :class:`~ptexport.errors.UsageError`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

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


def tsc_start(ns: int, tc: Any) -> int:
    """perf's intel_pt_tsc_start: the first TSC whose perf time is >= ``ns``."""
    tsc = tc.perf_time_to_tsc(ns)
    while True:
        tm = tc.tsc_to_perf_time(tsc)
        if tm < ns or tsc == 0:
            break
        tsc -= 1
    while tm < ns:
        tsc += 1
        tm = tc.tsc_to_perf_time(tsc)
    return tsc


def tsc_end(ns: int, tc: Any) -> int:
    """perf's intel_pt_tsc_end: the last TSC whose perf time is <= ``ns``."""
    tsc = tc.perf_time_to_tsc(ns)
    while True:
        tm = tc.tsc_to_perf_time(tsc)
        if tm > ns:
            break
        tsc += 1
    while tm > ns:
        tsc -= 1
        tm = tc.tsc_to_perf_time(tsc)
    return tsc


@dataclass
class TscRanges:
    """The time ranges in TSC, as perf's Intel PT decoder filters them (0: open)."""

    starts: list[int]
    ends: list[int]

    @classmethod
    def from_ranges(cls, ranges: list[TimeRange], tc: Any) -> "TscRanges":
        return cls([tsc_start(r.start, tc) if r.start else 0 for r in ranges],
                   [tsc_end(r.end, tc) if r.end else 0 for r in ranges])


class QueueTimeFilter:
    """One queue's position in the ranges: perf's sel_start / sel_timestamp / sel_idx."""

    def __init__(self, ranges: TscRanges) -> None:
        self.r = ranges
        self.idx = 0
        self.sel_timestamp = ranges.starts[0]
        self.sel_start = bool(self.sel_timestamp)
        if not self.sel_start:
            self.sel_timestamp = ranges.ends[0]

    def next_time(self) -> bool:
        """intel_pt_next_time."""
        if self.sel_start:
            self.sel_start = False
            self.sel_timestamp = self.r.ends[self.idx]
            return True
        if self.idx + 1 < len(self.r.starts):
            self.sel_start = True
            self.idx += 1
            self.sel_timestamp = self.r.starts[self.idx]
            return True
        return False

    def filter(self, timestamp: int, ff_timestamp: int) -> tuple[str, int]:
        """intel_pt_time_filter for a state at queue time ``timestamp``.

        Returns (verdict, ff_timestamp): verdict is "keep", "skip" (no sample),
        "ff" (no sample, fast forward to the returned timestamp) or "stop".
        """
        while True:
            if self.sel_start:
                if timestamp >= self.sel_timestamp:
                    self.next_time()
                    if not self.sel_timestamp:
                        return "keep", ff_timestamp
                    continue
                if self.sel_timestamp > ff_timestamp:
                    return "ff", self.sel_timestamp
                return "skip", ff_timestamp
            if timestamp > self.sel_timestamp:
                if not self.next_time():
                    return "stop", ff_timestamp
                continue
            return "keep", ff_timestamp


def fast_forward(dec: Any, timestamp: int) -> None:
    """perf's intel_pt_fast_forward on the reference decoder (:class:`ptexport.decoder.reference.decoder.PerfDecoder`):
    reposition at the last PSB whose TSC (the first TSC packet of its PSB+) is before ``timestamp``.

    The buffers after the current one are looked at first (perf's lookahead): the
    decoder moves to the last one whose first PSB is early enough (by its reference
    timestamp, as perf walks), then walks the PSBs of the buffer it is in.
    Repositioning forgets the IP, the timestamp and TMA and makes the decoder search
    for a PSB (perf's intel_pt_reposition); nothing moves when no PSB qualifies.
    """
    from ptexport.decoder.reference.decoder import NO_PSB

    bufs = dec.buffers
    target_ref = 0
    for i in range(max(dec.buf_idx, -1) + 1, len(bufs)):
        if not len(bufs[i].data):
            continue
        first = next(iter(_psb_tscs(bufs[i], 0)), None)
        if first is None or first[1] is None:
            continue  # perf's callback: no PSB+ with a TSC in this buffer, look further
        if first[1] >= timestamp:
            break
        target_ref = bufs[i].ref_timestamp
    if target_ref:
        while True:  # perf: next buffer (repositioned) until the buffer timestamp matches
            dec._get_data(True)
            if dec.buf_idx >= len(bufs):
                return
            if bufs[dec.buf_idx].ref_timestamp == target_ref:
                break
    if not 0 <= dec.buf_idx < len(bufs):
        return
    for j, tsc in _psb_tscs(bufs[dec.buf_idx], min(dec.idx, len(dec.kinds))):
        if tsc is None or tsc >= timestamp:
            break
        dec.idx = j
        dec.step = 0
        dec.ip = 0
        dec.pkt_state = NO_PSB
        dec.timestamp = 0
        dec.have_tma = False


def psb_positions(buf: Any, from_byte: int) -> list[tuple[int, int | None]]:
    """(byte offset of each PSB at or after ``from_byte``, the TSC of its PSB+ or None) in a
    :class:`~ptexport.decoder.reference.decoder.Buffer`: :func:`_psb_tscs` by bytes (the compiled decoder's view)."""
    from ptexport.pt.perfpkt import tokenize

    if buf.packets is None:
        buf.packets = tokenize(buf.data)
    j = int(np.searchsorted(buf.packets.pos, from_byte, side="left"))
    pos = buf.packets.pos
    return [(int(pos[i]), tsc) for i, tsc in _psb_tscs(buf, j)]


def _psb_tscs(buf: Any, from_idx: int) -> list[tuple[int, int | None]]:
    """(packet index of each PSB from packet ``from_idx``, the TSC of its PSB+ or None), perf's
    intel_pt_next_psb / intel_pt_next_tsc over the buffer's packets."""
    from ptexport.pt.perfpkt import Pkt, tokenize

    if buf.packets is None:
        buf.packets = tokenize(buf.data)
    kinds = buf.packets.kind.tolist()
    payloads = buf.packets.payload.tolist()
    out: list[tuple[int, int | None]] = []
    n = len(kinds)
    for j in range(from_idx, n):
        if kinds[j] != Pkt.PSB:
            continue
        k = j + 1
        while k < n and kinds[k] not in (Pkt.TSC, Pkt.PSBEND, Pkt.BAD):  # perf's next_tsc gives up at a bad packet
            k += 1
        out.append((j, _tsc_8b(int(payloads[k]), buf.ref_timestamp) if k < n and kinds[k] == Pkt.TSC else None))
    return out


def _tsc_8b(tsc: int, ref: int) -> int:
    """perf's intel_pt_8b_tsc: a 7-byte TSC completed from the buffer's reference timestamp."""
    tsc |= ref & (0xFF << 56)
    if tsc < ref:
        if ref - tsc > 1 << 55:
            tsc += 1 << 56
    elif tsc - ref > 1 << 55:
        tsc -= 1 << 56
    return tsc


def time_kept(time: int, ranges: list[TimeRange] | None) -> bool:
    """perf_time__ranges_skip_sample, negated, for one sample (time 0 is always kept)."""
    if not ranges or not time:
        return True
    return any(time >= r.start and (not r.end or time <= r.end) for r in ranges)
