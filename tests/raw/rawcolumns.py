"""The instruction flow as numpy columns, in batches (the hot-path output form).

:func:`flow_batches` runs :func:`ptexport.raw.ptxed.walk` and packs it into
:class:`FlowBatch` objects: one row per instruction (``ip``, ``size``,
``iclass``, ``speculative``), with events and errors kept beside the rows they precede
(``row`` = the number of instructions before them in the batch).  Nothing
is built per instruction beyond list appends of ints.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ptexport.raw.insn import InsnDecoder
from ptexport.raw.ptxed import ERROR, EVENT, INSN, RUN, walk


@dataclass
class FlowBatch:
    ip: np.ndarray                 # uint64
    size: np.ndarray               # uint8 instruction length
    iclass: np.ndarray             # uint8 (insn_class.OTHER, CALL, ...)
    speculative: np.ndarray        # bool
    events: list = field(default_factory=list)   # (row, Event)
    errors: list = field(default_factory=list)   # (row, trace offset, ip, pte code, kind)

    def __len__(self) -> int:
        return len(self.ip)


def flow_batches(dec: InsnDecoder, *, batch_rows: int = 1 << 16, resync_on_error: bool = True,
                 sideband=None) -> Iterator[FlowBatch]:
    """Yield the flow of the whole trace in batches of about ``batch_rows`` instructions."""
    ips = array("Q")
    sizes = array("B")
    cls = array("B")
    spec = array("B")
    events: list = []
    errors: list = []

    def flush() -> FlowBatch:
        b = FlowBatch(np.frombuffer(ips, dtype=np.uint64).copy(),
                      np.frombuffer(sizes, dtype=np.uint8).copy(),
                      np.frombuffer(cls, dtype=np.uint8).copy(),
                      np.frombuffer(spec, dtype=np.uint8).astype(bool), list(events), list(errors))
        del ips[:], sizes[:], cls[:], spec[:]
        events.clear()
        errors.clear()
        return b

    entries = dec.cache._entries
    lookup = dec.cache.lookup
    for item in walk(dec, resync_on_error=resync_on_error, sideband=sideband):
        kind = item[0]
        if kind == RUN:
            # A run never crosses an event, so the decoder's current address
            # space and mode are those of all its instructions.
            run = item[1]
            key, mode = dec._image_key(), dec.mode
            for ip in run:
                e = entries.get((key, mode, ip)) or lookup(key, mode, ip, dec.image.read)
                sizes.append(e[0])
                cls.append(e[1])
            ips.extend(run)
            spec.extend(bytes([1 if item[2] else 0]) * len(run))
        elif kind == INSN:
            key, mode = dec._image_key(), dec.mode
            e = entries.get((key, mode, item[1]))
            ips.append(item[1])
            sizes.append(e[0] if e.__class__ is tuple else 0)
            cls.append(item[2])
            spec.append(1 if item[3] else 0)
        elif kind == EVENT:
            events.append((len(ips), item[1]))
        elif kind == ERROR:
            errors.append((len(ips),) + tuple(item[1:]))
        if len(ips) >= batch_rows:
            yield flush()
    if len(ips) or events or errors:
        yield flush()
