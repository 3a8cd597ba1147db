"""ptxed-compatible text output of the instruction flow (libipt's ptxed --no-inst).

:func:`ptxed_lines` drives an :class:`~ptexport.raw.insn.InsnDecoder` the
way ptxed drives libipt and yields its lines: one line per instruction (the
IP as 16 hex digits, ``? `` before speculative ones), events in brackets,
errors as ``[<offset>, <ip>: error: <text>]``, and the ``--stat`` lines.
Recovery follows ptxed: after an error, ``--resync-on-error`` continues at the
next IP the trace provides; otherwise decoding restarts at the next PSB.

:class:`Walker` is what ``walk(fast=)`` takes: the compiled walker of plain
stretches, :class:`ptexport.raw.insn_compiled.Walker` (same name, same
methods: the twins convention of docs/architecture.md, tests/test_twins.py),
or :class:`ptexport.raw.backend.LazyWalker`, which picks it when it pays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, runtime_checkable

from ptexport.raw import insn_class as ic
from ptexport.raw import status as st
from ptexport.raw.events import Event
from ptexport.raw.insn import InsnDecoder
from ptexport.raw.status import EOS_FLAG, EVENT_PENDING, IP_SUPPRESSED_FLAG, FlowError


@dataclass
class PtxedOptions:
    quiet: bool = False
    stat: bool = False
    stat_insn: bool = False
    stat_blocks: bool = False
    event_ip: bool = False
    event_time: bool = False
    event_tick: bool = False
    event_iflags: bool = False
    resync_on_error: bool = False
    block_decoder: bool = False
    show_blocks: bool = False
    end_on_call: bool = False
    end_on_jump: bool = False
    print_offset: bool = False


_MODE_NAMES = {0: "<unknown>", 16: "16-bit", 32: "32-bit", 64: "64-bit"}


def format_event(ev: Event, opts: PtxedOptions, offset: int = 0) -> str:
    """One ptxed event line (without the newline)."""
    parts = []
    if opts.print_offset:
        parts.append(f"{offset:016x}  ")
    if opts.event_time and ev.has_tsc:
        parts.append(f"{ev.tsc:016x}  ")
    t = ev.type
    eip = opts.event_ip
    sup = ev.ip_suppressed
    ip_tail = f", ip: {ev.ip:016x}" if (eip and not sup) else ""
    if t == "enabled":
        s = "resumed" if ev.resumed else "enabled"
        if eip:
            s += f", ip: {ev.ip:016x}"
    elif t == "disabled":
        s = "disabled" + ip_tail
    elif t == "async_disabled":
        s = "disabled"
        if eip:
            s += f", at: {ev.at:016x}"
            if not sup:
                s += f", ip: {ev.ip:016x}"
    elif t == "async_branch":
        s = "interrupt"
        if eip:
            s += f", from: {ev.frm:016x}"
            if not sup:
                s += f", to: {ev.to:016x}"
    elif t == "paging":
        s = f"paging, cr3: {ev.cr3:016x}" + (", nr" if ev.non_root else "")
    elif t == "async_paging":
        s = f"paging, cr3: {ev.cr3:016x}" + (", nr" if ev.non_root else "")
        if eip:
            s += f", ip: {ev.ip:016x}"
    elif t == "overflow":
        s = "overflow" + ip_tail
    elif t == "exec_mode":
        s = f"exec mode: {_MODE_NAMES.get(ev.mode, '<invalid>')}" + ip_tail
    elif t == "tsx":
        if ev.aborted:
            s = "aborted"
        elif ev.speculative:
            s = "begin transaction"
        else:
            s = "committed"
        s += ip_tail
    elif t == "stop":
        s = "stopped"
    elif t == "vmcs":
        s = f"vmcs, base: {ev.base:016x}"
    elif t == "async_vmcs":
        s = f"vmcs, base: {ev.base:016x}"
        if eip:
            s += f", ip: {ev.ip:016x}"
    elif t == "exstop":
        s = "exstop" + ip_tail
    elif t == "mwait":
        s = f"mwait {ev.hints:x} {ev.ext:x}" + ip_tail
    elif t == "pwre":
        s = f"pwre c{(ev.state + 1) & 0xf}.{(ev.sub_state + 1) & 0xf}" + (" hw" if ev.hw else "")
    elif t == "pwrx":
        s = "pwrx "
        if ev.interrupt:
            s += "int: "
        if ev.store:
            s += "st: "
        if ev.autonomous:
            s += "hw: "
        s += f"c{(ev.last + 1) & 0xf} (c{(ev.deepest + 1) & 0xf})"
    elif t == "ptwrite":
        s = f"ptwrite: {ev.payload:x}" + ip_tail
    elif t == "tick":
        s = "tick" + ip_tail
    elif t == "cbr":
        s = f"cbr: {ev.ratio:x}"
    elif t == "mnt":
        s = f"mnt: {ev.payload:x}"
    elif t == "iflags":
        s = f"interrupts {'enabled' if ev.iflag else 'disabled'}" + ip_tail
    elif t == "interrupt":
        s = f"interrupt {ev.vector}"
        if ev.has_cr2:
            s += f", cr2: {ev.cr2:016x}"
        s += ip_tail
    elif t in ("iret", "smi", "rsm", "init", "vmentry", "shutdown", "uiret"):
        s = t + ip_tail
    elif t == "sipi":
        s = f"sipi: {ev.vector:x}"
    elif t == "vmexit":
        s = "vmexit"
        if ev.has_vector:
            s += f", intr: {ev.vector}"
        if ev.has_vmxr:
            s += f", vmxr: {ev.vmxr:016x}"
        if ev.has_vmxq:
            s += f", vmxq: {ev.vmxq:016x}"
        s += ip_tail
    elif t == "uintr":
        s = f"uintr {ev.vector}" + ip_tail
    elif t == "swintr":
        s = f"swintr {ev.vector}" + ip_tail
    elif t == "syscall":
        s = "syscall" + ip_tail
    elif t == "trig":
        s = f"trig {ev.trbv:02x}"
        if ev.mult:
            s += ", mult"
        s += ip_tail
        if ev.icnt:
            s += f", icnt: {ev.icnt}"
    else:
        s = t
    parts.append(s)
    return "[" + "".join(parts) + "]"


class BlockView:
    """ptxed's block decoder view: where blocks end (for [block] lines and counts)."""

    def __init__(self, opts: PtxedOptions) -> None:
        self.opts = opts
        self.count = 0
        self.open = False

    def before_insn(self) -> str | None:
        if self.open:
            return None
        self.open = True
        self.count += 1
        return "[block]" if self.opts.show_blocks else None

    def after_insn(self, iclass: int, direct: bool) -> None:
        if iclass == ic.OTHER or iclass == ic.PTWRITE:
            return
        if iclass == ic.JUMP and direct and not self.opts.end_on_jump:
            return
        if iclass == ic.CALL and direct and not self.opts.end_on_call:
            return
        if iclass == ic.COND_JUMP:
            return
        self.open = False

    def event(self) -> None:
        self.open = False


@runtime_checkable
class Walker(Protocol):
    """A compiled walker of plain stretches (``walk(fast=)``, ``ptxed_lines(fast=)``)."""

    blocks: BlockView | None      # set by ptxed_lines: the block view the kernel counts for

    @property
    def ninsn(self) -> int:
        """Instructions the walker decoded so far."""
        ...

    def step(self, dec: InsnDecoder) -> tuple[tuple | None, int | None, bool] | None:
        """Walk from ``dec``'s state: (FAST item or None, status or None, again), None if it may not."""
        ...

    def format_ips(self, ips, speculative: bool) -> str:
        """The ptxed lines of ``ips`` (one per instruction, each with its newline)."""
        ...


# Items of :func:`walk`.
RUN = 0      # (RUN, ips, speculative): plain instructions (the block-cache fast path)
INSN = 1     # (INSN, ip, iclass, speculative, trace offset)
EVENT = 2    # (EVENT, event, trace offset)
SIDEBAND = 3 # (SIDEBAND, line)
ERROR = 4    # (ERROR, offset, ip, code, kind) with kind "error", "sync error", "resync error"
EOT = 5      # (EOT,): "[end of trace]" (tracing was enabled when the trace ended)
SYNC = 6     # (SYNC, offset): decoding (re)started at the PSB at offset
FAST = 7     # (FAST, count, ips or None, speculative, blocks, ip): the compiled walker (Walker)


def walk(dec: InsnDecoder, *, resync_on_error: bool = False, sideband=None,
         fast_branches: bool = True, exact_offsets: bool = False, fast: Walker | None = None):
    """Decode the whole trace; yield the flow as small tuples (see RUN ... SYNC).

    Recovery after an error is libipt's: restart at the next PSB, or with
    ``resync_on_error`` continue at the next IP the trace provides (perf's
    way).  ``sideband(event) -> (lines, image or None)`` is called for every
    event (status updates too), like ptxed's pt_sb_event: its lines follow the
    event and a returned image becomes the decoder's.  ``fast_branches``
    lets RUN items include branches whose trace is at hand (off when each
    branch must be seen, as for the block view); ``exact_offsets`` turns the
    fast paths off so every instruction comes as an INSN item with the trace
    offset libipt would report for it.  ``fast`` (a :class:`Walker`) walks
    plain stretches of the trace compiled; its items are ``(FAST, count, ips
    or None, speculative, blocks, ip)``.
    """
    sync = None
    need_sync = True
    status = 0
    last_resync = None
    decoded = False
    while True:
        if need_sync:
            try:
                status = dec.sync_forward()
            except FlowError as e:
                if e.code == st.EOS:
                    return
                yield (ERROR, dec.offset, 0, e.code, "sync error")
                new_sync = dec.offset
                if sync is not None and new_sync <= sync:
                    return
                sync = new_sync
                continue
            need_sync = False
            decoded = False
            yield (SYNC, dec.sync_offset)
        ip = 0
        try:
            while True:
                while status & EVENT_PENDING:
                    offset = dec.offset
                    ev, status = dec.take_event()
                    yield (EVENT, ev, offset)
                    if sideband is not None:
                        sb_lines, image = sideband(ev)
                        for line in sb_lines:
                            yield (SIDEBAND, line)
                        if image is not None:
                            dec.set_image(image)
                if status & EOS_FLAG:
                    if not (status & IP_SUPPRESSED_FLAG):
                        yield (EOT,)
                    raise FlowError(st.EOS)
                ip = dec.ip
                if fast is not None and not exact_offsets:
                    got = fast.step(dec)
                    if got is not None:
                        item, st_fast, again = got
                        if item is not None:
                            decoded = True
                            yield item
                        if st_fast is not None:
                            status = st_fast
                        if again or (st_fast is not None
                                     and status & (EVENT_PENDING | EOS_FLAG)):
                            if item is not None:
                                ip = item[5]    # as the reference's last step left it
                            continue
                        ip = dec.ip
                if exact_offsets:
                    run, st_many = (), None
                elif fast_branches:
                    run, st_many = dec.next_many()
                else:
                    run, st_many = dec.next_run(), None
                if run:
                    decoded = True
                    yield (RUN, run, dec.speculative)
                    ip = dec.ip
                if st_many is not None:
                    status = st_many
                    if status & (EVENT_PENDING | EOS_FLAG):
                        continue
                offset = dec.offset if exact_offsets else 0
                try:
                    ip, size, iclass, spec, status = dec.next()
                except FlowError as e:
                    got = getattr(e, "insn", None)
                    if got is not None:
                        ip, size, iclass, spec = got
                        yield (INSN, ip, iclass, spec, offset)
                    raise
                decoded = True
                yield (INSN, ip, iclass, spec, offset)
        except FlowError as e:
            if e.code == st.EOS:
                return
            if getattr(e, "at_block_start", False) and not decoded:
                ip = 0      # ptxed has no instruction (IP) yet for this error
            yield (ERROR, dec.offset, ip, e.code, "error")
            if resync_on_error:
                # Resync must make progress; the same spot twice means it cannot.
                here = (dec.offset, id(dec.query.event))
                if here == last_resync:
                    need_sync = True
                    continue
                last_resync = here
                try:
                    status = dec.resync()
                    decoded = False
                    continue
                except FlowError as e2:
                    if e2.code == st.EOS:
                        return
                    yield (ERROR, dec.offset, ip, e2.code, "resync error")
            need_sync = True


def ptxed_lines(dec: InsnDecoder, opts: PtxedOptions, sideband=None, fast: Walker | None = None
                ) -> Iterator[str]:
    """Decode the whole trace; yield ptxed's output lines.

    With ``fast`` (see :func:`ptexport.raw.backend.compiled_walker`)
    the instruction lines of a compiled stretch come as one string of several
    lines (no final newline).
    """
    ninsn = 0
    blocks = BlockView(opts) if opts.block_decoder else None
    quiet = opts.quiet
    off = opts.print_offset
    if fast is not None:
        fast.blocks = blocks        # counted by the kernel as BlockView would
    for item in walk(dec, resync_on_error=opts.resync_on_error, sideband=sideband,
                     fast_branches=blocks is None, exact_offsets=off, fast=fast):
        kind = item[0]
        if kind == FAST:
            ninsn += item[1]
            if not quiet:
                assert fast is not None     # FAST items come from it only
                yield fast.format_ips(item[2], item[3])[:-1]
            continue
        if kind == RUN:
            run = item[1]
            ninsn += len(run)
            if blocks is not None:
                line = blocks.before_insn()
                if line and not quiet:
                    yield line
            if not quiet:
                if item[2]:
                    for rip in run:
                        yield f"? {rip:016x}"
                else:
                    for rip in run:
                        yield f"{rip:016x}"
        elif kind == INSN:
            ninsn += 1
            if blocks is not None:
                line = blocks.before_insn()
                if line and not quiet:
                    yield line
            if not quiet:
                head = f"{item[4]:016x}  " if off else ""
                yield head + ("? " if item[3] else "") + f"{item[1]:016x}"
            if blocks is not None:
                blocks.after_insn(item[2], True)
        elif kind == EVENT:
            ev = item[1]
            if blocks is not None:
                blocks.event()
            if not quiet and not ev.status_update:
                yield format_event(ev, opts, item[2])
        elif kind == SIDEBAND:
            yield item[1]
        elif kind == ERROR:
            _, offset, ip, code, what = item
            if blocks is not None:
                blocks.open = False
            yield f"[{offset:x}, {ip:x}: {what}: {st.ERRSTR.get(code, 'internal error.')}]"
        elif kind == EOT:
            if not quiet:
                yield "[end of trace]"
        elif kind == SYNC:
            if blocks is not None:
                blocks.open = False
    if opts.stat:
        specific = opts.stat_insn or opts.stat_blocks
        if opts.stat_insn or not specific:
            yield f"insn: {ninsn}."
        if blocks is not None and (opts.stat_blocks or not specific):
            yield f"blocks: {blocks.count}."
