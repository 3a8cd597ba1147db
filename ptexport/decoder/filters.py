"""perf's Intel PT side of ``--time``: the decoder's queue time filter (tools/perf/util/intel-pt.c).

Intel PT applies perf script's ``--time`` ranges (:mod:`ptexport.samples.filters`)
in its decoder too (converted to TSC so that they convert back to the same perf
times): it fast-forwards to the last PSB before a start, synthesizes nothing for
a state before the start (the queue's first state included, so a CBR event and
IPC counts carry over to the first state kept), and stops a queue after the last
end.  That part is :class:`TscRanges` / :class:`QueueTimeFilter` / :func:`fast_forward`,
driven by :mod:`ptexport.decoder.reference.queue` (the
reference backend) and by the compiled decoder's ``QueueDecoder`` (the kernel
decides inside a range or before a start, this class at the edges; its fast
forward works on byte offsets, :func:`psb_positions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ptexport.samples.filters import TimeRange


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
    from ptexport.decoder.constants import NO_PSB

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
