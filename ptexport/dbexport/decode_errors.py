"""``decode_errors.segment``: the PSB segment of its AUX stream an error is in.

An error's ``offset`` is a byte offset in its queue's AUX stream (the queue's
AUXTRACE buffers one after another, as the decoder reads them).  Its segment
is the index of the last PSB at or before that offset (0: the stream's first
PSB); -1 when it is before the first PSB, or has no trace position ("Lost
trace data" comes from a truncated AUX record, not from the trace).  PSBs are
found as perf's intel_pt_find_psb finds them, by their 16-byte pattern.  A
queue's stream is scanned once, the first time one of its errors is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_PSB = b"\x02\x82" * 8


def psb_offsets(chunks: Any) -> np.ndarray:
    """Byte offsets of the PSB patterns in the concatenation of ``chunks`` (bytes-like), ascending; the
    search goes on 16 bytes after each one found, across chunk boundaries too."""
    out: list[int] = []
    tail = b""
    tail_at = 0  # stream offset of tail[0]
    for chunk in chunks:
        data = tail + bytes(chunk)
        i = data.find(_PSB)
        resume = 0
        while i >= 0:
            out.append(tail_at + i)
            resume = i + len(_PSB)
            i = data.find(_PSB, resume)
        keep = max(resume, len(data) - (len(_PSB) - 1))
        tail_at += keep
        tail = data[keep:]
    return np.asarray(out, np.int64)


class ErrorSegments:
    """Segment of an error by (queue, offset), the queue's PSB offsets scanned on first use."""

    def __init__(self, session: Any) -> None:
        self.s = session
        self._queues: list[Any] | None = None
        self._psbs: dict[int, np.ndarray] = {}

    def segment(self, queue: int, offset: int) -> int:
        if queue < 0:
            return -1  # no trace position (Lost trace data)
        psbs = self._psbs.get(queue)
        if psbs is None:
            if self._queues is None:
                self._queues = self.s.queues()
            if queue >= len(self._queues):
                return -1
            bufs = self._queues[queue][1]
            psbs = self._psbs[queue] = psb_offsets(self.s.pd.aux_data(b) for b in bufs)
        return int(np.searchsorted(psbs, offset, side="right")) - 1
