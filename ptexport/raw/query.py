"""Query decoder: TNT bits, indirect branch targets and events (libipt's pt_query_decoder).

:class:`QueryDecoder` sits on the :class:`~ptexport.raw.evdecoder.EventDecoder`:
it caches TNT bits and answers the instruction-flow decoder's questions -
``cond_branch()`` (one TNT bit), ``indirect_branch()`` (a TIP target),
``next_event()`` (the next non-branch event) - with libipt's status flags
(event pending, IP suppressed, end of stream).  Errors found while reading
ahead are kept and reported when the decoder gets to them, so the
instructions before a bad packet still come out.
"""

from __future__ import annotations

import copy

from ptexport.raw import status as st
from ptexport.raw.evdecoder import DecoderConfig, EventDecoder, Time, exec_mode  # noqa: F401
from ptexport.raw.events import Event
from ptexport.raw.status import FlowError

__all__ = ["DecoderConfig", "EventDecoder", "QueryDecoder", "Time", "exec_mode"]


class QueryDecoder:
    """TNT cache over the event decoder (libipt's pt_query_decoder)."""

    def __init__(self, buf, config: DecoderConfig) -> None:
        self.config = config
        self.evdec = EventDecoder(buf, config)
        self.reset()

    def reset(self) -> None:
        self.status = -st.NOSYNC
        self.tnt_bits = 0
        self.tnt_index = 0   # mask of the next bit; 0 = empty
        self.event: Event | None = None
        self.last_tsc = (False, 0)

    # -- positions -----------------------------------------------------------
    @property
    def offset(self) -> int:
        return self.evdec.offset

    @property
    def sync_offset(self) -> int:
        return self.evdec.sync_offset

    # -- helpers -------------------------------------------------------------
    def _event_pending(self) -> bool:
        ev = self.event
        return ev is not None and ev.type not in ("tnt", "tip")

    def status_flags(self) -> int:
        flags = 0
        if not self.tnt_index:
            if self.status < 0:
                if self.status == -st.EOS:
                    flags |= st.EOS_FLAG
            elif self._event_pending():
                flags |= st.EVENT_PENDING
        return flags

    def _fetch_event(self) -> None:
        try:
            self.event = self.evdec.next()
        except FlowError as e:
            self.status = -e.code
            self.event = None

    def _time_now(self) -> None:
        t = self.evdec.time
        self.last_tsc = (t.have_tsc, t.tsc)

    # -- sync ------------------------------------------------------------------
    def _start(self):
        """Process the PSB+ status events on a copy to find the start IP."""
        ip = None
        shadow = copy.copy(self.evdec)
        shadow.cur = self.evdec.cur.copy()
        shadow.evq = copy.deepcopy(self.evdec.evq)
        shadow.ip = copy.copy(self.evdec.ip)
        shadow.time = self.evdec.time.copy()
        start_pos = self.evdec.cur.dec.pos
        while True:
            if shadow.cur.dec.pos != start_pos:
                break
            try:
                ev = shadow.next()
            except FlowError as e:
                if e.code != st.EOS:
                    raise
                break
            if not ev.status_update:
                break
            if ev.type == "enabled":
                ip = ev.ip
                break
        self.status = 0
        self._fetch_event()
        flags = self.status_flags()
        if ip is None:
            flags |= st.IP_SUPPRESSED_FLAG
        return flags, ip

    def sync_forward(self):
        """Sync at the next PSB: returns (status flags, start ip or None)."""
        self.reset()
        self.evdec.sync_forward()
        return self._start()

    def sync_set(self, offset: int):
        self.reset()
        self.evdec.sync_set(offset)
        return self._start()

    # -- queries ---------------------------------------------------------------
    def _cache_tnt(self) -> None:
        if self.status < 0:
            raise FlowError(-self.status)
        ev = self.event
        if ev is None or ev.type != "tnt":
            return
        if ev.nbits:
            self.tnt_bits = ev.bits
            self.tnt_index = 1 << (ev.nbits - 1)
        self._fetch_event()

    def cond_branch(self):
        """One TNT bit: (taken, status flags)."""
        if not self.tnt_index:
            self._time_now()
            self._cache_tnt()
            if not self.tnt_index:
                if self.status < 0:
                    raise FlowError(-self.status)
                raise FlowError(st.BAD_QUERY)
        taken = bool(self.tnt_bits & self.tnt_index)
        self.tnt_index >>= 1
        return taken, self.status_flags()

    def indirect_branch(self):
        """A TIP target: (ip or None if suppressed, status flags)."""
        if self.status < 0:
            raise FlowError(-self.status)
        ev = self.event
        if ev is None or ev.type != "tip":
            self._cache_tnt()
            ev = self.event
            if ev is None or ev.type != "tip":
                if self.status < 0:
                    raise FlowError(-self.status)
                raise FlowError(st.BAD_QUERY)
        ip = None if ev.ip_suppressed else ev.ip
        self._time_now()
        self._fetch_event()
        return ip, self.status_flags()

    def next_event(self):
        """The pending non-branch event: (event, status flags)."""
        if self.tnt_index:
            raise FlowError(st.BAD_QUERY)
        if self.status < 0:
            raise FlowError(-self.status)
        if not self._event_pending():
            raise FlowError(st.BAD_QUERY)
        ev = self.event
        self._time_now()
        self._fetch_event()
        return ev, self.status_flags()

    def peek_event(self) -> Event | None:
        return self.event

    def drop_tnt(self) -> None:
        self.tnt_index = 0

    def skip_event(self) -> None:
        """Drop the current event (resync)."""
        self._fetch_event()
