"""Instruction-flow decoder: walks the traced code (libipt's pt_insn_decoder).

``InsnDecoder(buf, image, config)`` follows the code in ``image`` as the query
decoder's TNT bits, TIP targets and events direct it.  Use it like libipt:

    status = dec.sync_forward()
    while True:
        while status & EVENT_PENDING:
            ev, status = dec.event()
        if status & EOS_FLAG: break
        ip, size, iclass, status = dec.next()     # one instruction

Errors raise :class:`~ptexport.raw.status.FlowError`; ``dec.offset`` is the
trace offset to report.  ``dec.resync()`` continues after an error at the next
event that gives an IP (``--resync-on-error``); ``sync_forward()`` restarts at
the next PSB.

Instructions come out as plain ints; decoded instructions are cached per
(address space, mode, ip) in an :class:`~ptexport.raw.insn_class.InsnCache`,
so each instruction's bytes are decoded once.
"""

from __future__ import annotations

from ptexport.raw import insn_class as ic
from ptexport.raw import status as st
from ptexport.raw.events import Event
from ptexport.raw.query import DecoderConfig, QueryDecoder
from ptexport.raw.retstack import RetStack, RetStackEmpty
from ptexport.raw.status import EOS_FLAG, EVENT_PENDING, IP_SUPPRESSED_FLAG, FlowError

OTHER, CALL, RETURN, JUMP, COND_JUMP = ic.OTHER, ic.CALL, ic.RETURN, ic.JUMP, ic.COND_JUMP
FAR_CALL, FAR_RETURN, FAR_JUMP, PTWRITE = ic.FAR_CALL, ic.FAR_RETURN, ic.FAR_JUMP, ic.PTWRITE

BDM64_MAX_STEPS = 0x100


class Insn:
    """The instruction being processed (the postponed one, too)."""

    __slots__ = ("ip", "size", "iclass", "special", "disp", "mode", "speculative")

    def __init__(self, ip, size, iclass, special, disp, mode, speculative):
        self.ip = ip
        self.size = size
        self.iclass = iclass
        self.special = special
        self.disp = disp
        self.mode = mode
        self.speculative = speculative


class InsnDecoder:
    def __init__(self, buf, image, config: DecoderConfig | None = None,
                 cache: ic.InsnCache | None = None, select_image=None) -> None:
        """``select_image(cr3, non_root, vmcs) -> image or None`` picks the address
        space when PIP/VMCS events change it (host and guest code); None keeps
        the current image."""
        self.config = config or DecoderConfig()
        self.select_image = select_image
        self.host_image = image
        self.query = QueryDecoder(buf, self.config)
        self.image = image
        self.cache = cache if cache is not None else ic.InsnCache()
        self.retstack = RetStack()
        self._key = None
        self._reset()

    # -- state ---------------------------------------------------------------
    def _reset(self) -> None:
        self.mode = 0
        self.ip = 0
        self.status = 0
        self.enabled = False
        self.process_event = False
        self.speculative = False
        self.process_insn = False
        self.bound_paging = False
        self.bound_vmcs = False
        self.bound_ptwrite = False
        self.bound_iret = False
        self.bound_vmentry = False
        self.bound_uiret = False
        self.has_icnt = False
        self.icnt = 0
        self.insn: Insn | None = None
        self.event: Event | None = None
        self.cr3 = None
        self.nr = False
        self.vmcs = None
        self.last_ev_tsc = 0
        self.retstack.clear()

    def set_image(self, image) -> None:
        """Decode from ``image`` (anything with ``read(ip, n)`` and ``generation``) from now on.

        With a ``select_image`` hook this is the host image: guest code (as
        the hook decides from the last PIP/VMCS) keeps its own image."""
        self.host_image = image
        self._select()

    @property
    def offset(self) -> int:
        return self.query.offset

    @property
    def sync_offset(self) -> int:
        return self.query.sync_offset

    def _status(self, flags: int = 0) -> int:
        status = self.status
        if not self.enabled:
            flags |= IP_SUPPRESSED_FLAG
        if (status & EOS_FLAG) and not self.process_event:
            flags |= EOS_FLAG
        return flags

    # -- sync ------------------------------------------------------------------
    def _start(self, status: int, ip) -> int:
        self.status = status
        if not (status & IP_SUPPRESSED_FLAG):
            self.enabled = True
            self.ip = ip
        return self._check_ip_event(None)

    def sync_forward(self) -> int:
        self._reset()
        status, ip = self.query.sync_forward()
        return self._start(status, ip)

    def sync_set(self, offset: int) -> int:
        self._reset()
        status, ip = self.query.sync_set(offset)
        return self._start(status, ip)

    def resync(self) -> int:
        """Continue after an error at the next event that provides an IP.

        TNT bits and events without an IP are skipped; a tracing-disabled
        event is reported as is; a tracing-enabled event is preceded by a
        disabled event (the trace in between is lost).
        """
        q = self.query
        mode = self.mode
        self._reset()
        self.mode = mode
        q.drop_tnt()
        while True:
            if q.status < 0:
                raise FlowError(-q.status)
            ev = q.event
            if ev is None:
                raise FlowError(st.EOS)
            t = ev.type
            if t == "tnt":
                q.skip_event()
                continue
            if t == "tip":
                if ev.ip_suppressed:
                    q.skip_event()
                    continue
                self.ip = ev.ip
                self.enabled = True
                q.skip_event()
                self.status = q.status_flags()
                return self._check_ip_event(None)
            if t == "enabled" and not ev.status_update:
                self.enabled = True
                self.ip = 0
                self.event = Event("disabled", ip_suppressed=True)
                self.process_event = True
                self.status = q.status_flags()
                return self._status(EVENT_PENDING)
            if t == "disabled" and not ev.status_update:
                self.enabled = True
                self.event = ev
                self.status = q.status_flags()
                return self._bind()
            if t == "overflow":
                self.status = q.status_flags()
                return self._check_ip_event(None)
            ip = ev.frm if t == "async_branch" else ev.ip
            if not ev.ip_suppressed and t not in ("async_disabled", "disabled"):
                self.ip = ip
                self.enabled = True
                self.status = q.status_flags()
                return self._check_ip_event(None)
            q.skip_event()

    # -- event plumbing --------------------------------------------------------
    def _event_pending(self) -> bool:
        """Is an event waiting?  Peeks at the query's event without taking it.

        The event is taken from the query only when it binds (:meth:`_bind`),
        so an error before that point leaves it for :meth:`resync` and the
        reported trace offset where libipt reports it.
        """
        if self.process_event:
            return True
        if not (self.status & EVENT_PENDING):
            return False
        self.event = self.query.event
        return True

    def _bind(self) -> int:
        """Take the peeked event from the query: it is now being processed."""
        if not self.process_event:
            ev, status = self.query.next_event()
            self.status = status
            self.process_event = True
            self.last_ev_tsc = ev.tsc
        return self._status(EVENT_PENDING)

    def _image_key(self):
        image = self.image
        gen = image.generation
        k = self._key
        if k is None or k[0] is not image or k[1] != gen:
            k = self._key = (image, gen, (id(image), gen))
        return k[2]

    def _decode(self, ip: int):
        """(size, iclass, special, disp) at ``ip`` in the current mode; raises."""
        hit = self.cache.lookup(self._image_key(), self.mode, ip, self.image.read)
        if hit.__class__ is int:
            raise FlowError(st.NOMAP if hit == ic.InsnCache.NOMAP else st.BAD_INSN)
        return hit

    def _next_ip(self, insn: Insn) -> int:
        """pt_insn_next_ip: the fall-through/direct target, FlowError(BAD_QUERY) if unknown."""
        ip = insn.ip + insn.size
        c = insn.iclass
        if c == OTHER or c == PTWRITE:
            return ip
        if (c == JUMP or c == CALL) and insn.disp is not None:
            return (ip + insn.disp) & 0xFFFFFFFFFFFFFFFF
        raise FlowError(st.BAD_QUERY)

    def _update_trig(self, ip: int) -> None:
        if not self.has_icnt:
            return
        if not self.enabled:
            raise FlowError(st.INTERNAL)
        self.icnt += 1
        if self.process_event:
            ev = self.event
        elif self.status & EVENT_PENDING:
            ev = self.query.event      # peeked, not yet taken
        else:
            ev = None
        if ev is not None:
            if ev.type == "trig" and ev.ip == ip:
                if not ev.icnt:
                    raise FlowError(st.INTERNAL)
                ev.icnt -= 1
                ev.ip = self.ip

    def _proceed(self, insn: Insn) -> None:
        self.ip = (self.ip + insn.size) & 0xFFFFFFFFFFFFFFFF
        c = insn.iclass
        if c == OTHER or c == PTWRITE:
            self._update_trig(insn.ip)
            return
        q = self.query
        if c == COND_JUMP:
            taken, status = q.cond_branch()
            self.status = status
            if self.config.enable_tick_events:
                self._tick(self.ip)
            if taken:
                self.ip = (self.ip + insn.disp) & 0xFFFFFFFFFFFFFFFF
            self.has_icnt = True
            self.icnt = 0
            return
        if c == CALL:
            if insn.disp or insn.disp is None:
                self.retstack.push(self.ip)
        elif c == RETURN:
            try:
                taken, status = q.cond_branch()
            except FlowError:
                taken = None
            if taken is not None:
                self.status = status
                if self.config.enable_tick_events:
                    self._tick(self.ip)
                if not taken:
                    raise FlowError(st.BAD_RETCOMP)
                try:
                    self.ip = self.retstack.pop()
                except RetStackEmpty:
                    raise FlowError(st.RETSTACK_EMPTY) from None
                self.has_icnt = True
                self.icnt = 0
                return
        if insn.disp is not None and c in (CALL, JUMP):
            self.ip = (self.ip + insn.disp) & 0xFFFFFFFFFFFFFFFF
            self._update_trig(insn.ip)
            return
        evip = self.ip
        ip, status = q.indirect_branch()
        self.status = status
        if self.config.enable_tick_events:
            self._tick(evip)
        if ip is None:
            raise FlowError(st.NOIP)
        self.ip = ip
        self.has_icnt = True
        self.icnt = 0

    def _tick(self, ip: int) -> None:
        """Synthesize a tick event when the time moved since the last event."""
        if not self.enabled or self.process_event:
            return
        have, tsc = self.query.last_tsc
        if tsc == self.last_ev_tsc:
            return
        self.event = Event("tick", ip=ip, has_tsc=have, tsc=tsc)
        self.process_event = True
        self.last_ev_tsc = tsc

    def _at_skl014(self, ev: Event, insn: Insn) -> bool:
        if not ev.ip_suppressed:
            return False
        if insn.iclass in (CALL, JUMP) and insn.disp is not None:
            target = insn.ip + insn.size + insn.disp
            if not self.config.addr_filter_check(target):
                return True
        return False

    def _at_disabled_event(self, ev: Event, insn: Insn) -> bool:
        c = insn.iclass
        if ev.ip_suppressed:
            if ic.is_far_branch(c) or ic.changes_cpl(insn.special) or ic.changes_cr3(insn.special):
                return True
            if (self.config.addr_filter and self.config.errata.skl014
                    and self._at_skl014(ev, insn)):
                return True
            return False
        if c == OTHER or c == PTWRITE:
            return False
        if c in (CALL, JUMP) and insn.disp is not None:
            target = (insn.ip + insn.size + insn.disp) & 0xFFFFFFFFFFFFFFFF
            return target == ev.ip
        return True

    @staticmethod
    def _needs_trace(insn: Insn) -> bool:
        c = insn.iclass
        return c == RETURN or c == COND_JUMP or (c in (CALL, JUMP) and insn.disp is None)

    def _postpone(self, insn: Insn) -> int:
        if not self.process_insn:
            self.process_insn = True
            self.insn = insn
        return self._bind()

    def _clear_postponed(self) -> None:
        self.process_insn = False
        self.bound_paging = self.bound_vmcs = self.bound_ptwrite = False
        self.bound_iret = self.bound_vmentry = self.bound_uiret = False

    def _proceed_postponed(self) -> None:
        if not self.process_insn:
            raise FlowError(st.INTERNAL)
        if not self.enabled:
            self._clear_postponed()
            return
        self._proceed(self.insn)
        self._clear_postponed()

    def _check_insn_event(self, insn: Insn) -> int:
        if not self._event_pending():
            return 0
        ev = self.event
        t = ev.type
        if t == "disabled":
            if ev.status_update:
                return 0
            if not self._at_disabled_event(ev, insn):
                # A disable without IP also binds where the flow would need
                # trace that is not there (the block decoder stops there too).
                if not (ev.ip_suppressed and self._needs_trace(insn)):
                    return 0
            try:
                self.ip = self._next_ip(insn)
            except FlowError as e:
                self.ip = 0
                if e.code != st.BAD_QUERY:
                    raise
                if insn.iclass in (CALL, FAR_CALL):
                    self.ip = insn.ip + insn.size
            return self._bind()
        if t == "paging":
            if self.bound_paging or not ic.binds_to_pip(insn.iclass, insn.special):
                return 0
            self.bound_paging = True
            return self._postpone(insn)
        if t == "vmcs":
            if self.bound_vmcs or not ic.binds_to_vmcs(insn.iclass, insn.special):
                return 0
            self.bound_vmcs = True
            return self._postpone(insn)
        if t == "ptwrite":
            if self.bound_ptwrite:
                return 0
            if ev.ip_suppressed:
                if insn.iclass != PTWRITE:
                    return 0
            elif self.ip != ev.ip:
                return 0
            self.bound_ptwrite = True
            return self._postpone(insn)
        if t == "iret":
            if self.bound_iret:
                return 0
            if ev.ip_suppressed:
                if not ic.is_iret(insn.special):
                    return 0
            elif self.ip != ev.ip:
                return 0
            self.bound_iret = True
            return self._postpone(insn)
        if t == "vmentry":
            if self.bound_vmentry:
                return 0
            if ev.ip_suppressed:
                if not ic.is_vmentry(insn.special):
                    return 0
            elif self.ip != ev.ip:
                return 0
            self.bound_vmentry = True
            return self._postpone(insn)
        if t == "uiret":
            if self.bound_uiret:
                return 0
            if ev.ip_suppressed:
                if insn.special != ic.UIRET:
                    return 0
            elif self.ip != ev.ip:
                return 0
            self.bound_uiret = True
            return self._postpone(insn)
        if t in ("tip", "tnt"):
            raise FlowError(st.INTERNAL)
        return 0

    def _range_is_contiguous(self, begin: int, end: int, steps: int) -> bool:
        ip = begin
        while ip != end:
            if not steps:
                return False
            steps -= 1
            try:
                size, iclass, special, disp = self._decode(ip)
                ip = self._next_ip(Insn(ip, size, iclass, special, disp, self.mode, False))
            except FlowError:
                return False
        return True

    def _postpone_tsx(self, insn: Insn | None, ev: Event) -> bool:
        if ev.ip_suppressed:
            return False
        if insn is not None and self.config.errata.bdm64:
            if ev.aborted and ic.is_branch(insn.iclass):
                if not self._range_is_contiguous(self.ip, ev.ip, BDM64_MAX_STEPS):
                    self.ip = ev.ip
        return self.ip != ev.ip

    def _check_ip_event(self, insn: Insn | None) -> int:
        if not self._event_pending():
            return self._status(0)
        ev = self.event
        t = ev.type
        enabled = self.enabled
        if t == "disabled":
            if ev.status_update:
                return self._bind()
        elif t == "enabled":
            if ev.status_update and enabled and not ev.ip_suppressed and ev.ip != self.ip:
                return self._status(0)
            return self._bind()
        elif t in ("overflow", "stop", "pwre", "pwrx", "tick", "cbr", "mnt"):
            return self._bind()
        elif t == "async_disabled":
            if ev.at != self.ip:
                return self._status(0)
            if self.config.errata.skd022 and self._skd022():
                return self._status(0)
            return self._bind()
        elif t == "tsx":
            if self._postpone_tsx(insn, ev):
                return self._status(0)
            return self._bind()
        elif t == "async_branch":
            if ev.frm != self.ip:
                return self._status(0)
            return self._bind()
        elif t in ("exec_mode", "iflags", "interrupt", "smi", "init", "vmexit", "shutdown",
                   "uintr", "swintr", "syscall"):
            if enabled and not ev.ip_suppressed and ev.ip != self.ip:
                return self._status(0)
            return self._bind()
        elif t in ("async_paging", "async_vmcs"):
            if not ev.ip_suppressed and ev.ip != self.ip:
                return self._status(0)
            return self._bind()
        elif t in ("paging", "vmcs", "ptwrite", "iret", "vmentry", "uiret"):
            if enabled:
                return self._status(0)
            return self._bind()
        elif t in ("exstop", "mwait"):
            if not ev.ip_suppressed and enabled and self.ip != ev.ip:
                return self._status(0)
            return self._bind()
        elif t in ("rsm", "sipi"):
            if not ev.ip_suppressed:
                raise FlowError(st.INTERNAL)
            return self._bind()
        elif t == "trig":
            if ev.ip_suppressed:
                return self._bind()
            if not ev.ip:
                if not self.has_icnt:
                    raise FlowError(st.BAD_PACKET)
                if ev.icnt < self.icnt:
                    raise FlowError(st.BAD_PACKET)
                ev.icnt -= self.icnt
                ev.ip = self.ip
            if ev.icnt:
                return self._status(0)
            if enabled and ev.ip != self.ip:
                return self._status(0)
            return self._bind()
        elif t in ("tip", "tnt"):
            raise FlowError(st.INTERNAL)
        return self._status(0)

    def _skd022(self) -> bool:
        try:
            _, _, special, _ = self._decode(self.ip)
        except FlowError:
            return False
        if special not in (ic.VMLAUNCH, ic.VMRESUME):
            return False
        ev = self.event
        ev.type = "disabled"
        return True

    # -- the API -----------------------------------------------------------------
    def next_run(self) -> tuple:
        """Fast path: the IPs of the plain instructions from here to the next branch.

        Returns () unless nothing can bind in between (no event pending or in
        progress, no deferred error); otherwise the decoder moves past them
        and the caller continues with :meth:`next` for the branch.
        """
        if (self.process_event or self.process_insn or not self.enabled
                or self.status & (EVENT_PENDING | EOS_FLAG) or self.query.status < 0):
            return ()
        ips, end = self.cache.run(self._image_key(), self.mode, self.ip, self.image.read)
        if ips:
            self.ip = end
            if self.has_icnt:
                self.icnt += len(ips)
        return ips

    def next_many(self, limit: int = 4096):
        """Fast path: (IPs of up to ``limit`` instructions, status or None).

        Walks plain runs (block cache), direct jumps and calls, conditional
        branches and compressed returns whose TNT bits are already cached,
        as long as no event is pending or in progress and no error is
        waiting.  Anything else is left to :meth:`next`, so the result is
        exactly what calling :meth:`next` repeatedly would give.  The status
        is None when no instruction was taken (the caller's status stands).
        """
        out: list = []
        if self.config.enable_tick_events:
            return out, None
        last = None
        q = self.query
        cache = self.cache
        runs = cache._runs
        entries = cache._entries
        read = self.image.read
        mode = self.mode
        push = self.retstack.push
        # The image cannot change in here: only events change it, and they stop us.
        key = self._image_key()
        busy = EVENT_PENDING | EOS_FLAG
        if self.process_event or self.process_insn or not self.enabled:
            return out, None
        while len(out) < limit:
            if self.status & busy or q.status < 0:
                break
            ip = self.ip
            hit = runs.get((key, mode, ip))
            if hit is None:
                hit = cache.run(key, mode, ip, read)
            ips, end = hit
            if ips:
                out.extend(ips)
                self.ip = ip = end
                if self.has_icnt:
                    self.icnt += len(ips)
            e = entries.get((key, mode, ip))
            if e is None:
                e = cache.lookup(key, mode, ip, read)
            if e.__class__ is int:
                break
            size, c, special, disp = e
            nip = (ip + size) & 0xFFFFFFFFFFFFFFFF
            if c == COND_JUMP:
                if not q.tnt_index:
                    break
                taken, status = q.cond_branch()
                self.status = status
                self.ip = (nip + disp) & 0xFFFFFFFFFFFFFFFF if taken else nip
                self.has_icnt, self.icnt = True, 0
            elif c == RETURN:
                if (not q.tnt_index or not (q.tnt_bits & q.tnt_index)
                        or self.retstack.is_empty()):
                    break
                _, status = q.cond_branch()
                self.status = status
                self.ip = self.retstack.pop()
                self.has_icnt, self.icnt = True, 0
            elif c == JUMP and disp is not None and special == ic.NONE:
                self.ip = (nip + disp) & 0xFFFFFFFFFFFFFFFF
                if self.has_icnt:
                    self.icnt += 1
            elif c == CALL and disp is not None:
                if disp:
                    push(nip)
                self.ip = (nip + disp) & 0xFFFFFFFFFFFFFFFF
                if self.has_icnt:
                    self.icnt += 1
            else:
                break
            out.append(ip)
            last = (ip, size, c, special, disp)
        if last is None:
            if out:
                return out, self._status(0)
            return out, None
        insn = Insn(last[0], last[1], last[2], last[3], last[4], mode, self.speculative)
        return out, self._check_ip_event(insn)

    def next(self):
        """Decode one instruction: (ip, size, iclass, speculative, status).

        On an error after the instruction was decoded, raises FlowError with
        ``err.insn`` set to (ip, size, iclass, speculative) so it can still be
        printed (like ptxed does).
        """
        if not self.enabled:
            if self.status & EOS_FLAG:
                raise FlowError(st.EOS)
            raise FlowError(st.NO_ENABLE)
        q = self.query
        if q.status < 0 and q.status != -st.EOS and not q.tnt_index:
            # A deferred trace error is reported before the next instruction
            # once the TNT bits before it are used up (libipt reports errors
            # at the end of a block).
            err = FlowError(-q.status)
            err.at_block_start = True
            raise err
        ip = self.ip
        size, iclass, special, disp = self._decode(ip)
        insn = Insn(ip, size, iclass, special, disp, self.mode, self.speculative)
        out = (ip, size, iclass, self.speculative)
        try:
            status = self._check_insn_event(insn)
            if status & EVENT_PENDING:
                return out + (status,)
            self._proceed(insn)
            status = self._check_ip_event(insn)
        except FlowError as e:
            e.insn = out
            raise
        return out + (status,)

    def take_event(self):
        """Process and return the pending event: (event, status)."""
        if not self.process_event:
            raise FlowError(st.BAD_QUERY)
        ev = self.event
        t = ev.type
        if t == "enabled":
            if self.ip == ev.ip:
                ev.resumed = True
            self._process_enabled(ev)
        elif t in ("async_disabled", "disabled"):
            if t == "async_disabled" and not ev.ip_suppressed and self.ip != ev.at:
                raise FlowError(st.BAD_QUERY)
            self._process_disabled(ev)
        elif t == "async_branch":
            if self.ip != ev.frm:
                raise FlowError(st.BAD_QUERY)
            if ev.status_update or not self.enabled:
                raise FlowError(st.BAD_CONTEXT)
            self.ip = ev.to
            self.has_icnt, self.icnt = True, 0
        elif t in ("async_paging", "paging"):
            if t == "async_paging" and not ev.ip_suppressed and self.ip != ev.ip:
                raise FlowError(st.BAD_QUERY)
            self.cr3 = ev.cr3
            self.nr = ev.non_root
            self._select()
        elif t in ("async_vmcs", "vmcs"):
            if t == "async_vmcs" and not ev.ip_suppressed and self.ip != ev.ip:
                raise FlowError(st.BAD_QUERY)
            self.vmcs = ev.base
            self._select()
            if not ev.ip_suppressed:
                self.has_icnt, self.icnt = True, 0
        elif t == "overflow":
            if ev.status_update:
                raise FlowError(st.BAD_CONTEXT)
            if ev.ip_suppressed:
                self.enabled = False
                self.ip = 0
                self.has_icnt = False
            else:
                self.ip = ev.ip
                self.enabled = True
                self.has_icnt, self.icnt = True, 0
            self.speculative = False
        elif t == "exec_mode":
            if (ev.status_update and self.enabled and self.mode != 0
                    and self.mode != ev.mode):
                raise FlowError(st.BAD_STATUS_UPDATE)
            self.mode = ev.mode
            self.has_icnt, self.icnt = True, 0
        elif t == "tsx":
            self.speculative = ev.speculative
            self.has_icnt, self.icnt = True, 0
        elif t == "stop":
            if ev.status_update or self.enabled:
                raise FlowError(st.BAD_CONTEXT)
        elif t in ("exstop", "iflags", "interrupt", "smi", "init", "vmexit", "shutdown",
                   "uintr", "swintr", "syscall"):
            if not ev.ip_suppressed:
                if self.enabled and self.ip != ev.ip:
                    raise FlowError(st.BAD_QUERY)
                self.has_icnt, self.icnt = True, 0
        elif t == "mwait":
            if not ev.ip_suppressed and self.enabled and self.ip != ev.ip:
                raise FlowError(st.BAD_QUERY)
        elif t in ("rsm", "sipi"):
            if not ev.ip_suppressed:
                raise FlowError(st.INTERNAL)
        elif t == "trig":
            if not ev.ip_suppressed:
                if self.enabled and ev.ip != self.ip:
                    raise FlowError(st.BAD_QUERY)
                if ev.icnt:
                    raise FlowError(st.INTERNAL)
                self.has_icnt, self.icnt = True, 0
        elif t in ("pwre", "pwrx", "ptwrite", "tick", "cbr", "mnt", "iret", "vmentry", "uiret"):
            pass
        else:
            raise FlowError(st.BAD_QUERY)
        self.process_event = False
        if self.process_insn:
            status = self._check_insn_event(self.insn)
            if status & EVENT_PENDING:
                return ev, status
            self._proceed_postponed()
        return ev, self._check_ip_event(None)

    def _select(self) -> None:
        image = None
        if self.select_image is not None:
            image = self.select_image(self.cr3, self.nr, self.vmcs)
        self.image = image if image is not None else self.host_image

    def _process_enabled(self, ev: Event) -> None:
        if ev.status_update:
            if not self.enabled:
                raise FlowError(st.BAD_STATUS_UPDATE)
            return
        if ev.ip_suppressed:
            raise FlowError(st.NOIP)
        if self.enabled:
            raise FlowError(st.BAD_CONTEXT)
        self.ip = ev.ip
        self.enabled = True
        self.has_icnt, self.icnt = True, 0

    def _process_disabled(self, ev: Event) -> None:
        if ev.status_update:
            if self.enabled:
                raise FlowError(st.BAD_STATUS_UPDATE)
            return
        if not self.enabled:
            raise FlowError(st.BAD_CONTEXT)
        self.enabled = False
        self.has_icnt = False
