"""The instruction-flow decoder with perf's semantics (the reference for perf.data).

perf's Intel PT decoder and libipt agree on what the hardware means but not on
what a tool reports: where a sample's time comes from, which branches become
samples, and how decoding recovers after an error.  Exports must match perf
exactly (see docs/architecture.md), so this module reproduces perf's decoder
behaviour state for state:

* it walks packets with the states NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT,
  TNT_CONT, TIP, TIP_PGD, FUP, FUP_NO_TIP and FUP_IN_PSB;
* after an error it resynchronises at the next packet that carries an IP,
  with an empty return stack (perf's ``sync_ip``), and only a bad packet or a
  non-consecutive buffer sends it back to a PSB search;
* time moves only on TSC, MTC (after TMA) and CYC, exactly as perf moves it;
* each call to :meth:`PerfDecoder.decode` yields one :class:`State`, the
  equivalent of perf's ``struct intel_pt_state``.

It knows nothing of perf.data or threads: code bytes come through the
``walker`` object (see :class:`InsnWalker`), trace bytes through a list of
:class:`Buffer` objects.  Hop and leap modes (``--itrace=q``/``qq``,
``Params.quick``) follow perf's intel_pt_hop_trace.  Event Trace follows perf
6.1: a CFE (with the EVDs before it) is an ``T_EVT`` state, bound to the next
FUP when it has an IP, and RFLAGS.IF from MODE.Exec gives ``T_IFLAG_CHG``
states and the ``from_iflag``/``to_iflag`` of every state.  VM time
correlation is not implemented.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ptexport.decoder.constants import (
    BR_CONDITIONAL, BR_INDIRECT, BR_NO_BRANCH, BR_UNCONDITIONAL, EAGAIN, EBADMSG, EILSEQ, ELOOP, ENODATA, ENOENT,
    ENOLINK, ENOSYS, EOVERFLOW, ERR_RESYNC, F_ABORT_TX, F_ASYNC, F_FUP_IP, F_IN_TX, F_SAMPLE_IPC, FUP, FUP_IN_PSB,
    FUP_NO_TIP, IN_SYNC, NO_IP, NO_PSB, OP_CALL, OP_OTHER, OP_RET, PERIOD_INSTRUCTIONS, PERIOD_MTC, PERIOD_NONE,
    PERIOD_TICKS, RESAMPLE, T_BLK_ITEMS, T_BRANCH, T_CBR_CHG, T_EVT, T_EX_STOP, T_IFLAG_CHG, T_INSTRUCTION,
    T_MWAIT_OP, T_PSB_EVT, T_PTW, T_PWR_ENTRY, T_PWR_EXIT, T_TRACE_BEGIN, T_TRACE_END, T_TRANSACTION, TIP, TIP_PGD,
    TNT, TNT_CONT, WALK_RETURN,
)
from ptexport.decoder.codewalk import Insn
from ptexport.samples.columns import ERR_BADPKT, ERR_INTERN, ERR_MISMAT, ERR_NELOOP, ERR_NODATA, ERR_NOINSN, ERR_OVR, ERR_UNK
from ptexport.pt.perfpkt import PSB_BYTES, PacketColumns, Pkt, tokenize

# Hop mode (--itrace=q): what a packet does to the walk.
_HOP_PROCESS, _HOP_IGNORE, _HOP_RETURN, _HOP_AGAIN = range(4)

_IFLAG = 1 << 2  # MODE.Exec: RFLAGS.IF (the packet's count)
_MAX_EVDS = 64


_ERRNO_TO_CODE = {
    ENOSYS: ERR_INTERN,
    EBADMSG: ERR_BADPKT,
    ENODATA: ERR_NODATA,
    EILSEQ: ERR_NOINSN,
    ENOENT: ERR_MISMAT,
    EOVERFLOW: ERR_OVR,
    ELOOP: ERR_NELOOP,
}

_MASK64 = (1 << 64) - 1
_BIT63 = 1 << 63
_MAX_LOOPS = 10000
_TSC_SLIP = 0x10000

# Packets that PSB+ may legally contain before PSBEND, and those that abort it.
_PSB_ABORT = frozenset({
    Pkt.TIP_PGD, Pkt.TIP_PGE, Pkt.TIP, Pkt.TNT, Pkt.TRACESTOP, Pkt.BAD, Pkt.PSB, Pkt.PTWRITE,
    Pkt.PTWRITE_IP, Pkt.EXSTOP, Pkt.EXSTOP_IP, Pkt.MWAIT, Pkt.PWRE, Pkt.PWRX, Pkt.BBP, Pkt.BIP,
    Pkt.BEP, Pkt.BEP_IP, Pkt.CFE, Pkt.CFE_IP, Pkt.EVD,
})


class InsnWalker(Protocol):
    """Reads code for the decoder (perf's ``walk_insn`` callback).

    ``walk(ip, to_ip, max_insn_cnt, nr)`` walks forward from ``ip`` until a
    branch instruction, ``to_ip`` (when non-zero) or ``max_insn_cnt``
    instructions (when non-zero).  It returns ``(err, insn_cnt, new_ip,
    insn)``: ``err`` is 0, or -22 when code cannot be read, or -2 when the
    object is known to be unreadable; ``new_ip`` is the address of the last
    instruction walked (the branch) or ``to_ip``; ``insn`` describes that
    instruction (``length`` 0 when ``to_ip`` was reached).
    """

    def walk(self, ip: int, to_ip: int, max_insn_cnt: int, nr: bool) -> tuple[int, int, int, Insn]: ...


@dataclass(slots=True)
class Buffer:
    """One AUX buffer of a queue, in trace order."""

    data: bytes | memoryview
    ref_timestamp: int = 0  # the AUXTRACE record's reference (TSC), 0 if none
    consecutive: bool = True  # follows the previous buffer with no gap
    trace_nr: int = 0
    offset: int = 0  # where the buffer starts in its source (for error offsets)
    packets: PacketColumns | None = None


@dataclass(slots=True)
class Params:
    return_compression: bool = True
    branch_enable: bool = True
    mtc_period: int = 0
    tsc_ctc_ratio_n: int = 0
    tsc_ctc_ratio_d: int = 0
    max_non_turbo_ratio: int = 0
    period_type: int = PERIOD_NONE
    period: int = 0
    fup_with_nlip: bool = False  # perf sets it for GenuineIntel,6,92 (Goldmont)
    quick: int = 0  # --itrace=q: 1 hop (FUP/TIP ips, no code walk), 2 leap (PSB to PSB)
    cyc_threshold: int = 0  # the attr's cyc_thresh when cyc is on (perf's IA32_RTIT_CTL CycThresh)


@dataclass(slots=True)
class State:
    """What one decode step produced (perf's ``struct intel_pt_state``)."""

    type: int = 0
    flags: int = 0
    err: int = 0
    from_ip: int = 0
    to_ip: int = 0
    timestamp: int = 0
    est_timestamp: int = 0
    tot_insn_cnt: int = 0
    tot_cyc_cnt: int = 0
    insn_op: int = OP_OTHER
    insn_len: int = 0
    from_nr: bool = False
    to_nr: bool = False
    trace_nr: int = 0
    psb_offset: int = 0
    pos: int = 0  # absolute offset of the packet being processed (errors)
    cbr: int = 0
    cbr_payload: int = 0
    ptw_payload: int = 0
    mwait_payload: int = 0
    pwre_payload: int = 0
    pwrx_payload: int = 0
    cfe_type: int = 0  # Event Trace (T_EVT): CFE type and vector, EVD (type, payload) pairs
    cfe_vector: int = 0
    evd: tuple = ()
    from_iflag: bool = False  # RFLAGS.IF before / after this state (MODE.Exec, Event Trace)
    to_iflag: bool = False


def _multdiv(t: int, n: int, d: int) -> int:
    if not d:
        return 0
    return (t // d) * n + ((t % d) * n) // d


def calc_ip(count: int, payload: int, last_ip: int) -> int:
    """IP from an IP packet's compression code (perf's intel_pt_calc_ip)."""
    if count == 1:
        return (last_ip & 0xFFFFFFFFFFFF0000) | payload
    if count == 2:
        return (last_ip & 0xFFFFFFFF00000000) | payload
    if count == 3:
        return payload | 0xFFFF000000000000 if payload & 0x800000000000 else payload
    if count == 4:
        return (last_ip & 0xFFFF000000000000) | payload
    if count == 6:
        return payload
    return 0


@dataclass
class _Stack:
    items: list = field(default_factory=list)

    def push(self, ip: int) -> None:
        self.items.append(ip)

    def pop(self) -> int:
        return self.items.pop() if self.items else 0

    def clear(self) -> None:
        self.items.clear()


# ------------------------------------------------------------- decoder state
# The decoder's state in named parts, the way perf's struct intel_pt_decoder reads in
# sections and libipt splits a decoder into units (packet decoder, last-IP, TNT cache, time,
# event queue, config).  Each part is a plain class with __slots__, held by PerfDecoder for
# its lifetime (never replaced); hot methods bind the parts they use to locals once.


class _Config:
    """What the decoder was set up with (perf's struct intel_pt_params and what follows from it); never changes."""

    __slots__ = ("return_compression", "branch_enable", "fup_with_nlip", "quick", "cyc_threshold",
                 "period_type", "period", "period_mask", "period_ticks", "max_non_turbo_ratio",
                 "max_non_turbo_ratio_fp", "mtc_shift", "ctc_rem_mask", "tsc_ctc_ratio_n", "tsc_ctc_ratio_d",
                 "tsc_ctc_mult")

    def __init__(self, params: Params) -> None:
        self.return_compression = params.return_compression  # a RET may be a taken TNT bit (no noretcomp)
        self.branch_enable = params.branch_enable  # BranchEn: code is walked between IP packets
        self.fup_with_nlip = params.fup_with_nlip  # a FUP may give the IP after an indirect branch (Goldmont)
        self.quick = params.quick  # --itrace=q: 1 hop, 2 leap (perf's hop / leap)
        self.cyc_threshold = params.cyc_threshold  # CycThresh: a CYC counts toward IPC only right before a packet
        self.period_type = params.period_type  # what the instruction-sample period counts (PERIOD_*)
        self.period = params.period  # that period (instructions, or TSC ticks before rounding)
        self.period_mask = 0  # PERIOD_TICKS: ~(period_ticks - 1), the bits of a period boundary
        self.period_ticks = 0  # PERIOD_TICKS: the period rounded down to a power of 2
        self.max_non_turbo_ratio = params.max_non_turbo_ratio  # TSC ticks per bus clock (est_timestamp, CBR)
        self.max_non_turbo_ratio_fp = float(params.max_non_turbo_ratio)  # the same as a float (cycles <-> TSC)
        self.mtc_shift = params.mtc_period  # MTC payload = CTC >> mtc_shift
        self.ctc_rem_mask = (1 << self.mtc_shift) - 1  # the CTC bits below MTC's
        self.tsc_ctc_ratio_n = params.tsc_ctc_ratio_n  # TSC ticks per CTC tick, numerator ...
        self.tsc_ctc_ratio_d = params.tsc_ctc_ratio_d if params.tsc_ctc_ratio_n else 0  # ... and denominator
        self.tsc_ctc_mult = 0  # the ratio when it is a whole number (0: use n/d)
        if self.tsc_ctc_ratio_d and not self.tsc_ctc_ratio_n % self.tsc_ctc_ratio_d:
            self.tsc_ctc_mult = self.tsc_ctc_ratio_n // self.tsc_ctc_ratio_d
        if params.period_type == PERIOD_TICKS and params.period:
            period = 1 << (params.period.bit_length() - 1)
            self.period_mask = ~(period - 1) & _MASK64
            self.period_ticks = period


class _Cursor:
    """Where the decoder is in its buffers (perf's buf/len/pkt_step, libipt's packet decoder)."""

    __slots__ = ("buf_idx", "kinds", "counts", "payloads", "poss", "base", "idx", "step")

    def __init__(self) -> None:
        self.buf_idx = -1  # the buffer being decoded (-1 before the first, len(buffers) after the last)
        self.kinds: list = []  # its packets' kinds (Pkt) ...
        self.counts: list = []  # ... counts (IP compression, TNT bits, ...) ...
        self.payloads: list = []  # ... payloads ...
        self.poss: list = []  # ... and byte offsets in the buffer
        self.base = 0  # absolute offset of the buffer (error offsets)
        self.idx = 0  # index of the current packet
        self.step = 0  # 1 when the current packet has been consumed


class _Flow:
    """Where the walk is: packet state, IPs, TNT bits, return address, loop detection, mode bits."""

    __slots__ = ("pkt_state", "pge", "in_psb", "overflow", "have_last_ip", "last_ip", "ip", "psb_ip", "ret_addr",
                 "tnt_count", "tnt_payload", "no_progress", "stuck_ip", "stuck_ip_prd", "stuck_ip_cnt",
                 "pip_payload", "nr", "next_nr", "exec_mode", "iflag", "next_iflag", "tx_flags")

    def __init__(self) -> None:
        self.pkt_state = NO_PSB  # what the next decode() does (NO_PSB ... RESAMPLE)
        self.pge = False  # tracing is enabled (packet generation enable)
        self.in_psb = False  # between PSB and PSBEND
        self.overflow = False  # after an OVF: the next FUP is a trace begin
        self.have_last_ip = False  # last_ip is known: compressed IPs can be expanded
        self.last_ip = 0  # the last IP packet's IP (what IP compression refers to)
        self.ip = 0  # where the walk is (0: not known)
        self.psb_ip = 0  # the IP of the FUP in the last PSB+ (0: none)
        self.ret_addr = 0  # the return address popped by the last RET walked (return compression)
        self.tnt_count = 0  # TNT bits left
        self.tnt_payload = 0  # the TNT bits, the next at bit 63
        self.no_progress = 0  # unconditional branches walked in a row without a packet
        self.stuck_ip = 0  # loop detection: an IP that, seen again, means no progress ...
        self.stuck_ip_prd = 0  # ... checked at a growing period ...
        self.stuck_ip_cnt = 0  # ... with this many branches left to the next check
        self.pip_payload = 0  # the last PIP's payload (CR3 and the NR bit)
        self.nr = False  # non-root (VMX guest) at the state's from_ip ...
        self.next_nr = False  # ... and at its to_ip
        self.exec_mode = 0  # the last MODE.Exec's payload
        self.iflag = False  # RFLAGS.IF now (MODE.Exec, Event Trace) ...
        self.next_iflag = False  # ... and after the next branch
        self.tx_flags = 0  # F_IN_TX while in a TSX transaction (MODE.TSX)


class _Timing:
    """The clock, as perf moves it: TSC, TMA/MTC (CTC), CYC and CBR; the time a sample reports."""

    __slots__ = ("timestamp", "timestamp_insn_cnt", "sample_timestamp", "sample_insn_cnt", "tsc_timestamp",
                 "ref_timestamp", "buf_timestamp", "have_tma", "ctc_timestamp", "ctc_delta", "last_mtc", "last_ctc",
                 "fixup_last_mtc", "have_cyc", "cycle_cnt", "cyc_ref_timestamp", "calc_cyc_to_tsc",
                 "have_calc_cyc_to_tsc", "cbr", "cbr_seen", "cbr_payload", "cbr_cyc_to_tsc")

    def __init__(self) -> None:
        self.timestamp = 0  # the current time (TSC ticks; 0: not known yet)
        self.timestamp_insn_cnt = 0  # instructions walked since timestamp last moved
        self.sample_timestamp = 0  # the time the next state reports ...
        self.sample_insn_cnt = 0  # ... and the instructions since then (est_timestamp)
        self.tsc_timestamp = 0  # the last TSC packet's time
        self.ref_timestamp = 0  # the buffer's reference TSC, until a TSC packet is placed by it
        self.buf_timestamp = 0  # the current buffer's reference TSC (TSC wrap-around)
        self.have_tma = False  # a TMA since the last TSC: MTCs move the time
        self.ctc_timestamp = 0  # the time of CTC 0 (from TSC and TMA) ...
        self.ctc_delta = 0  # ... and the CTC ticks counted from there by MTCs
        self.last_mtc = 0  # the last MTC's payload (from the TMA's CTC at first)
        self.last_ctc = 0  # the TMA's CTC, without the bits below MTC's
        self.fixup_last_mtc = False  # last_mtc (from TMA) lacks high bits the next MTC gives
        self.have_cyc = False  # a CYC was seen (cycle-accurate mode)
        self.cycle_cnt = 0  # cycles since cyc_ref_timestamp
        self.cyc_ref_timestamp = 0  # the time CYC counts are added to
        self.calc_cyc_to_tsc = 0.0  # TSC ticks per cycle, measured between MTCs ...
        self.have_calc_cyc_to_tsc = False  # ... when known
        self.cbr = 0  # the core:bus ratio (the last CBR's) ...
        self.cbr_seen = 0  # ... the one last reported (T_CBR_CHG) ...
        self.cbr_payload = 0  # ... the last CBR's payload ...
        self.cbr_cyc_to_tsc = 0.0  # ... and TSC ticks per cycle from it


class _Counters:
    """Instruction and cycle counts (IPC) and the instruction-sample period."""

    __slots__ = ("tot_insn_cnt", "period_insn_cnt", "last_masked_timestamp", "continuous_period", "mtc_insn",
                 "tot_cyc_cnt", "sample_tot_cyc_cnt", "sample_cyc", "base_cyc_cnt", "cyc_cnt_timestamp",
                 "tsc_to_cyc")

    def __init__(self) -> None:
        self.tot_insn_cnt = 0  # instructions walked in all
        self.period_insn_cnt = 0  # PERIOD_INSTRUCTIONS: instructions since the last instruction sample
        self.last_masked_timestamp = 0  # PERIOD_TICKS: the last period boundary sampled
        self.continuous_period = False  # PERIOD_TICKS: the walk went on since the last boundary
        self.mtc_insn = False  # PERIOD_MTC: an instruction was walked since the last MTC sample
        self.tot_cyc_cnt = 0  # cycles in all (from CYC, or estimated from time and CBR without CYC) ...
        self.sample_tot_cyc_cnt = 0  # ... as the state reports it (IPC) ...
        self.sample_cyc = False  # ... which has moved since the last IPC sample
        self.base_cyc_cnt = 0  # without CYC: tot_cyc_cnt at cyc_cnt_timestamp ...
        self.cyc_cnt_timestamp = 0  # ... the time cycles are estimated from ...
        self.tsc_to_cyc = 0.0  # ... at this many cycles per TSC tick (from CBR)


class _Pending:
    """Events bound to the next FUP (perf's set_fup_*): TSX, PTWRITE, power, BEP, MODE.Exec, Event Trace."""

    __slots__ = ("set_fup_tx_flags", "fup_tx_flags", "set_fup_ptw", "fup_ptw_payload", "set_fup_mwait",
                 "fup_mwait_payload", "set_fup_pwre", "fup_pwre_payload", "set_fup_exstop", "set_fup_bep",
                 "set_fup_mode_exec", "set_fup_cfe_ip", "set_fup_cfe", "fup_cfe", "evd")

    def __init__(self) -> None:
        self.set_fup_tx_flags = False  # MODE.TSX before the FUP ...
        self.fup_tx_flags = 0  # ... its F_IN_TX / F_ABORT_TX
        self.set_fup_ptw = False  # PTWRITE with IP before the FUP ...
        self.fup_ptw_payload = 0  # ... its payload
        self.set_fup_mwait = False  # MWAIT before the FUP ...
        self.fup_mwait_payload = 0  # ... its payload
        self.set_fup_pwre = False  # PWRE after that MWAIT ...
        self.fup_pwre_payload = 0  # ... its payload
        self.set_fup_exstop = False  # EXSTOP with IP before the FUP
        self.set_fup_bep = False  # BEP with IP before the FUP
        self.set_fup_mode_exec = False  # MODE.Exec before the FUP: RFLAGS.IF changes there
        self.set_fup_cfe_ip = False  # Event Trace: a CFE with IP, its FUP next ...
        self.set_fup_cfe = False  # ... or a CFE without IP
        self.fup_cfe = (0, 0)  # the CFE's (type, vector)
        self.evd: list[tuple[int, int]] = []  # the EVDs' (type, payload) before it


class PerfDecoder:
    """perf's Intel PT decoder for one queue (a CPU's or a thread's AUX stream).

    It holds its inputs (``buffers``, ``walker``), what it returns (``state``), the return
    stack, the packet being processed, and its state in parts: ``cfg`` (:class:`_Config`),
    ``cur`` (:class:`_Cursor`), ``flow`` (:class:`_Flow`), ``timing`` (:class:`_Timing`),
    ``counters`` (:class:`_Counters`) and ``pending`` (:class:`_Pending`).
    """

    __slots__ = ("buffers", "walker", "state", "stack", "kind", "count", "payload", "last_packet_type",
                 "cfg", "cur", "flow", "timing", "counters", "pending")

    def __init__(self, buffers: Sequence[Buffer], walker: InsnWalker, params: Params) -> None:
        self.buffers = list(buffers)  # the queue's AUX buffers, in trace order
        self.walker = walker  # reads code (perf's walk_insn callback)
        self.state = State()  # what decode() returns (one object, updated in place)
        self.stack = _Stack()  # return addresses of the calls walked (return compression)
        self.kind = Pkt.PAD  # the packet being processed (perf's decoder->packet): its kind ...
        self.count = 0  # ... count ...
        self.payload = 0  # ... and payload
        self.last_packet_type = Pkt.PAD  # the kind of the packet before it
        self.cfg = _Config(params)  # configuration
        self.cur = _Cursor()  # packet cursor
        self.flow = _Flow()  # packet state, IPs, TNT
        self.timing = _Timing()  # TSC / MTC / CYC / CBR time
        self.counters = _Counters()  # instruction and cycle counts, sample period
        self.pending = _Pending()  # events waiting for their FUP

    # perf's intel_pt_fast_forward (decoder/filters.fast_forward) moves the decoder through these.

    @property
    def buf_idx(self) -> int:
        return self.cur.buf_idx

    @property
    def kinds(self) -> list:
        return self.cur.kinds

    @property
    def idx(self) -> int:
        return self.cur.idx

    @idx.setter
    def idx(self, value: int) -> None:
        self.cur.idx = value

    @property
    def step(self) -> int:
        return self.cur.step

    @step.setter
    def step(self, value: int) -> None:
        self.cur.step = value

    @property
    def ip(self) -> int:
        return self.flow.ip

    @ip.setter
    def ip(self, value: int) -> None:
        self.flow.ip = value

    @property
    def pkt_state(self) -> int:
        return self.flow.pkt_state

    @pkt_state.setter
    def pkt_state(self, value: int) -> None:
        self.flow.pkt_state = value

    @property
    def timestamp(self) -> int:
        return self.timing.timestamp

    @timestamp.setter
    def timestamp(self, value: int) -> None:
        self.timing.timestamp = value

    @property
    def have_tma(self) -> bool:
        return self.timing.have_tma

    @have_tma.setter
    def have_tma(self, value: bool) -> None:
        self.timing.have_tma = value

    # ------------------------------------------------------------------ packets

    def _load_buffer(self, i: int) -> None:
        buf = self.buffers[i]
        if buf.packets is None:
            buf.packets = tokenize(buf.data)
        cols = buf.packets
        c = self.cur
        c.kinds = cols.kind.tolist()
        c.counts = cols.count.tolist()
        c.payloads = cols.payload.tolist()
        c.poss = cols.pos.tolist()
        c.base = buf.offset
        c.buf_idx = i
        c.idx = 0
        c.step = 0

    def _get_data(self, reposition: bool = False) -> int:
        """Move to the next buffer (perf's get_data)."""
        c = self.cur
        bufs = self.buffers
        nxt = c.buf_idx + 1
        while nxt < len(bufs) and not len(bufs[nxt].data):
            nxt += 1
        if nxt >= len(bufs):
            c.buf_idx = len(bufs)
            c.kinds = []
            c.idx = 0
            c.step = 0
            return ENODATA
        first = c.buf_idx < 0
        self._load_buffer(nxt)
        buf = bufs[nxt]
        t = self.timing
        t.buf_timestamp = buf.ref_timestamp
        if first or not buf.consecutive or reposition:
            f = self.flow
            f.ip = 0
            f.pkt_state = NO_PSB
            t.timestamp = 0
            t.have_tma = False
            t.ref_timestamp = buf.ref_timestamp
            self.state.trace_nr = buf.trace_nr
            return ENOLINK
        return 0

    def _abs_pos(self) -> int:
        c = self.cur
        if c.idx < len(c.poss):
            return c.base + c.poss[c.idx]
        return c.base + (len(self.buffers[c.buf_idx].data) if 0 <= c.buf_idx < len(self.buffers) else 0)

    def _get_next_packet(self) -> int:
        self.last_packet_type = self.kind
        c = self.cur
        while True:
            c.idx += c.step
            c.step = 0
            if c.idx >= len(c.kinds):
                err = self._get_data()
                if err:
                    return err
            i = c.idx
            self.kind = k = c.kinds[i]
            self.count = c.counts[i]
            self.payload = c.payloads[i]
            c.step = 1
            if k == Pkt.BAD:
                return self._bad_packet()
            if k != Pkt.PAD:
                return 0

    def _bad_packet(self) -> int:
        # perf (non-strict) keeps the current packet state and steps one byte.
        self.flow.tx_flags = 0
        self.timing.have_tma = False
        return EBADMSG

    def _lookahead(self):
        """Yield (kind, count, payload, pos) of the packets after the current one in this buffer."""
        last = self.last_packet_type
        c = self.cur
        i = c.idx + c.step
        kinds, counts, payloads = c.kinds, c.counts, c.payloads
        while i < len(kinds):
            k = kinds[i]
            if k == Pkt.BAD:
                return
            if k != Pkt.PAD:
                yield k, counts[i], payloads[i], last
                last = k
            i += 1

    # ------------------------------------------------------------ small helpers

    def _set_last_ip(self) -> None:
        f = self.flow
        f.last_ip = calc_ip(self.count, self.payload, f.last_ip)
        f.have_last_ip = True

    def _set_ip(self) -> None:
        f = self.flow
        f.last_ip = calc_ip(self.count, self.payload, f.last_ip)
        f.have_last_ip = True
        f.ip = f.last_ip

    def _have_ip(self) -> bool:
        return bool(self.count) and (self.flow.have_last_ip or self.count in (3, 6))

    def _update_pip(self) -> None:
        self.flow.pip_payload = self.payload

    def _update_nr(self) -> None:
        f = self.flow
        f.next_nr = bool(f.pip_payload & 1)

    def _set_nr(self) -> None:
        f = self.flow
        f.nr = bool(f.pip_payload & 1)
        f.next_nr = f.nr

    def _set_pip(self) -> None:
        self._update_pip()
        self._set_nr()

    def _update_in_tx(self) -> None:
        self.flow.tx_flags = self.payload & F_IN_TX

    def _update_sample_time(self) -> None:
        t = self.timing
        t.sample_timestamp = t.timestamp
        t.sample_insn_cnt = t.timestamp_insn_cnt

    def _bug(self) -> int:
        self.flow.pkt_state = NO_PSB
        return ENOSYS

    # ----------------------------------------------------------------- timing

    def _mtc_cyc_cnt_pge(self) -> None:
        t = self.timing
        if t.have_cyc:
            return
        n = self.counters
        n.cyc_cnt_timestamp = t.timestamp
        n.base_cyc_cnt = n.tot_cyc_cnt

    def _mtc_cyc_cnt_upd(self) -> None:
        t = self.timing
        if t.have_cyc:
            return
        n = self.counters
        n.sample_cyc = True
        if not self.flow.pge or t.timestamp <= n.cyc_cnt_timestamp:
            return
        tot = int((t.timestamp - n.cyc_cnt_timestamp) * n.tsc_to_cyc + n.base_cyc_cnt)
        if tot > n.tot_cyc_cnt:
            n.tot_cyc_cnt = tot

    def _ctc_to_tsc(self, ctc: int) -> int:
        cfg = self.cfg
        if cfg.tsc_ctc_mult:
            return ctc * cfg.tsc_ctc_mult
        return _multdiv(ctc, cfg.tsc_ctc_ratio_n, cfg.tsc_ctc_ratio_d)

    def _calc_tsc_timestamp(self) -> None:
        t = self.timing
        t.have_tma = False
        if t.ref_timestamp:
            ts = self.payload | (t.ref_timestamp & (0xFF << 56))
            if ts < t.ref_timestamp:
                if t.ref_timestamp - ts > (1 << 55):
                    ts += 1 << 56
            elif ts - t.ref_timestamp > (1 << 55):
                ts -= 1 << 56
            t.tsc_timestamp = ts
            t.timestamp = ts
            t.ref_timestamp = 0
            t.timestamp_insn_cnt = 0
        elif t.timestamp:
            ts = self.payload | (t.timestamp & (0xFF << 56))
            t.tsc_timestamp = ts
            if ts < t.timestamp and t.timestamp - ts < _TSC_SLIP:
                ts = t.timestamp  # suppress a backwards timestamp
            if ts < t.timestamp:
                if not t.buf_timestamp or ts + (1 << 56) < t.buf_timestamp:
                    ts += 1 << 56
                    t.tsc_timestamp = ts
                else:
                    ts = t.timestamp
            t.timestamp = ts
            t.timestamp_insn_cnt = 0
        if self.last_packet_type == Pkt.CYC:
            t.cyc_ref_timestamp = t.timestamp
            t.cycle_cnt = 0
            t.have_calc_cyc_to_tsc = False
            # perf does not calibrate from TSC packets (from_mtc false).

    def _calc_tma(self) -> None:
        ctc = self.payload
        fc = self.count
        cfg = self.cfg
        ctc_rem = ctc & cfg.ctc_rem_mask
        if not cfg.tsc_ctc_ratio_d:
            return
        f = self.flow
        if f.pge and not f.in_psb:
            self._mtc_cyc_cnt_pge()
        else:
            self._mtc_cyc_cnt_upd()
        t = self.timing
        t.last_mtc = (ctc >> cfg.mtc_shift) & 0xFF
        t.last_ctc = ctc - ctc_rem
        t.ctc_timestamp = t.tsc_timestamp - fc - self._ctc_to_tsc(ctc_rem)
        t.ctc_delta = 0
        t.have_tma = True
        t.fixup_last_mtc = True

    @staticmethod
    def _fixup_last_mtc(mtc: int, mtc_shift: int, last_mtc: int) -> int:
        first_missing_bit = 1 << (16 - mtc_shift)
        mask = ~(first_missing_bit - 1) & 0xFFFFFFFF
        last_mtc |= mtc & mask
        if last_mtc >= mtc:
            last_mtc -= first_missing_bit
            last_mtc &= 0xFF
        return last_mtc

    def _calc_mtc_timestamp(self) -> None:
        t = self.timing
        if not t.have_tma:
            return
        mtc = self.payload
        mtc_shift = self.cfg.mtc_shift
        if mtc_shift > 8 and t.fixup_last_mtc:
            t.fixup_last_mtc = False
            t.last_mtc = self._fixup_last_mtc(mtc, mtc_shift, t.last_mtc)
        delta = mtc - t.last_mtc if mtc > t.last_mtc else mtc + 256 - t.last_mtc
        t.ctc_delta += delta << mtc_shift
        ts = t.ctc_timestamp + self._ctc_to_tsc(t.ctc_delta)
        if ts >= t.timestamp:
            t.timestamp = ts
        self._mtc_cyc_cnt_upd()
        t.timestamp_insn_cnt = 0
        t.last_mtc = mtc
        if self.last_packet_type == Pkt.CYC:
            t.cyc_ref_timestamp = t.timestamp
            t.cycle_cnt = 0
            t.have_calc_cyc_to_tsc = False
            self._calc_cyc_to_tsc_from_mtc()

    def _calc_cyc_to_tsc_from_mtc(self) -> None:
        """Estimate TSC ticks per cycle by looking ahead to the next timing packet."""
        t = self.timing
        cfg = self.cfg
        mtc_shift = cfg.mtc_shift
        cycle_cnt = 0
        cbr = 0
        cbr_cyc_to_tsc = 0.0
        last_mtc = t.last_mtc
        ctc_timestamp = t.ctc_timestamp
        ctc_delta = t.ctc_delta
        data_timestamp = t.timestamp
        have_tma = t.have_tma
        fixup = t.fixup_last_mtc
        for kind, count, payload, last in self._lookahead():
            if kind in (Pkt.TNT, Pkt.TIP_PGE, Pkt.TIP, Pkt.FUP, Pkt.PSB, Pkt.PIP, Pkt.MODE_EXEC,
                        Pkt.MODE_TSX, Pkt.PSBEND, Pkt.PAD, Pkt.VMCS, Pkt.MNT, Pkt.PTWRITE,
                        Pkt.PTWRITE_IP, Pkt.BBP, Pkt.BIP, Pkt.BEP, Pkt.BEP_IP, Pkt.CFE, Pkt.CFE_IP, Pkt.EVD):
                continue
            if kind == Pkt.MTC:
                if not have_tma:
                    continue
                mtc = payload
                if mtc_shift > 8 and fixup:
                    fixup = False
                    last_mtc = self._fixup_last_mtc(mtc, mtc_shift, last_mtc)
                delta = mtc - last_mtc if mtc > last_mtc else mtc + 256 - last_mtc
                ctc_delta += delta << mtc_shift
                ts = ctc_timestamp + self._ctc_to_tsc(ctc_delta)
                if ts < data_timestamp:
                    return
                if last != Pkt.CYC:
                    data_timestamp = ts
                    last_mtc = mtc
                    continue
                timestamp = ts
            elif kind in (Pkt.TSC, Pkt.TMA):
                return  # from an MTC: perf stops at TSC and TMA
            elif kind == Pkt.CYC:
                cycle_cnt += payload
                continue
            elif kind == Pkt.CBR:
                c = payload
                if cbr and cbr != c:
                    return
                cbr = c
                cbr_cyc_to_tsc = cfg.max_non_turbo_ratio_fp / c if c else 0.0
                continue
            else:
                return
            if not cbr and t.cbr:
                cbr = t.cbr
                cbr_cyc_to_tsc = t.cbr_cyc_to_tsc
            if not cycle_cnt:
                return
            cyc_to_tsc = (timestamp - t.timestamp) / cycle_cnt
            if cbr and cyc_to_tsc > cbr_cyc_to_tsc and cyc_to_tsc / cbr_cyc_to_tsc > 1.25:
                return
            t.calc_cyc_to_tsc = cyc_to_tsc
            t.have_calc_cyc_to_tsc = True
            return

    def _calc_cbr(self) -> None:
        t = self.timing
        cbr = self.payload & 0xFF
        t.cbr_payload = self.payload
        if t.cbr == cbr:
            return
        t.cbr = cbr
        fp = self.cfg.max_non_turbo_ratio_fp
        t.cbr_cyc_to_tsc = fp / cbr if cbr else 0.0
        # perf 6.1.y (stable backport of "Fix CYC timestamps after standalone CBR"):
        # CYC counts restart from the CBR's time.
        t.cyc_ref_timestamp = t.timestamp
        t.cycle_cnt = 0
        self.counters.tsc_to_cyc = cbr / fp if fp else 0.0
        if self.flow.pge:
            self._mtc_cyc_cnt_pge()

    def _calc_cyc_timestamp(self) -> None:
        t = self.timing
        n = self.counters
        ts = t.cyc_ref_timestamp
        t.have_cyc = True
        t.cycle_cnt += self.payload
        if self.flow.pge:
            n.tot_cyc_cnt += self.payload
        n.sample_cyc = True
        if not ts:
            return
        # perf adds in double precision and truncates back to u64.
        if t.have_calc_cyc_to_tsc:
            ts = int(float(ts) + t.cycle_cnt * t.calc_cyc_to_tsc)
        elif t.cbr:
            ts = int(float(ts) + t.cycle_cnt * t.cbr_cyc_to_tsc)
        else:
            return
        if ts >= t.timestamp:
            t.timestamp = ts
        t.timestamp_insn_cnt = 0

    # --------------------------------------------------------- instruction walk

    def _next_period(self) -> int:
        t = self.timing
        n = self.counters
        cfg = self.cfg
        ts = t.timestamp + t.timestamp_insn_cnt
        masked = ts & cfg.period_mask
        if n.continuous_period:
            if masked > n.last_masked_timestamp:
                return 1
        else:
            ts += 1
            masked = ts & cfg.period_mask
            if masked > n.last_masked_timestamp:
                n.last_masked_timestamp = masked
                n.continuous_period = True
        if masked < n.last_masked_timestamp:
            return cfg.period_ticks
        return cfg.period_ticks - (ts - masked)

    def _next_sample(self) -> int:
        cfg = self.cfg
        if cfg.period_type == PERIOD_INSTRUCTIONS:
            return cfg.period - self.counters.period_insn_cnt
        if cfg.period_type == PERIOD_TICKS:
            return self._next_period()
        return 0

    def _sample_insn(self) -> None:
        cfg = self.cfg
        if cfg.period_type == PERIOD_INSTRUCTIONS:
            self.counters.period_insn_cnt = 0
        elif cfg.period_type == PERIOD_TICKS:
            t = self.timing
            n = self.counters
            ts = t.timestamp + t.timestamp_insn_cnt
            masked = ts & cfg.period_mask
            if masked > n.last_masked_timestamp:
                n.last_masked_timestamp = masked
            else:
                n.last_masked_timestamp += cfg.period_ticks
        self.state.type |= T_INSTRUCTION

    def _walk_insn(self, insn: Insn, to_ip: int) -> int:
        st = self.state
        f = self.flow
        n = self.counters
        n.mtc_insn = True
        max_insn_cnt = self._next_sample()
        err, insn_cnt, new_ip, got = self.walker.walk(f.ip, to_ip, max_insn_cnt, st.to_nr)
        f.ip = new_ip
        insn.op, insn.branch, insn.length, insn.rel = got.op, got.branch, got.length, got.rel
        n.tot_insn_cnt += insn_cnt
        t = self.timing
        t.timestamp_insn_cnt += insn_cnt
        t.sample_insn_cnt += insn_cnt
        n.period_insn_cnt += insn_cnt
        if err:
            f.no_progress = 0
            f.pkt_state = NO_IP
            return ENOLINK if err == ENOENT else EILSEQ
        if to_ip and f.ip == to_ip:
            result = EAGAIN
        else:
            if max_insn_cnt and insn_cnt >= max_insn_cnt:
                self._sample_insn()
            if insn.branch == BR_NO_BRANCH:
                st.type = T_INSTRUCTION
                st.from_ip = f.ip
                st.to_ip = 0
                f.ip += insn.length
                result = WALK_RETURN
            else:
                if insn.op == OP_CALL:
                    if insn.branch != BR_UNCONDITIONAL or insn.rel:  # zero-length calls excluded
                        self.stack.push((f.ip + insn.length) & _MASK64)
                elif insn.op == OP_RET:
                    f.ret_addr = self.stack.pop()
                if insn.branch == BR_UNCONDITIONAL:
                    cnt = f.no_progress
                    f.no_progress += 1
                    st.from_ip = f.ip
                    f.ip = (f.ip + insn.length + insn.rel) & _MASK64
                    st.to_ip = f.ip
                    result = WALK_RETURN
                    if cnt:
                        if cnt == 1:
                            f.stuck_ip = st.to_ip
                            f.stuck_ip_prd = 1
                            f.stuck_ip_cnt = 1
                        elif cnt > _MAX_LOOPS or st.to_ip == f.stuck_ip:
                            f.pkt_state = ERR_RESYNC
                            f.no_progress = 0
                            self._finish_walk(insn)
                            return ELOOP
                        else:
                            f.stuck_ip_cnt -= 1
                            if not f.stuck_ip_cnt:
                                f.stuck_ip_prd += 1
                                f.stuck_ip_cnt = f.stuck_ip_prd
                                f.stuck_ip = st.to_ip
                    st.insn_op = insn.op
                    st.insn_len = insn.length
                    if f.tx_flags & F_IN_TX:
                        st.flags |= F_IN_TX
                    return result
                result = 0
        f.no_progress = 0
        self._finish_walk(insn)
        return result

    def _finish_walk(self, insn: Insn) -> None:
        st = self.state
        st.insn_op = insn.op
        st.insn_len = insn.length
        if self.flow.tx_flags & F_IN_TX:
            st.flags |= F_IN_TX

    def _fup_event(self, no_tip: bool) -> bool:
        """perf's intel_pt_fup_event: only the bits an FUP event owns change in state.type."""
        st = self.state
        f = self.flow
        e = self.pending
        saved_type = st.type
        st.type &= ~T_BRANCH
        st.insn_op = OP_OTHER  # perf 6.1: an FUP event is no instruction (its flags show none)
        st.insn_len = 0
        ret = False
        sample_fup_insn = False
        if e.set_fup_cfe_ip or e.set_fup_cfe:
            ip = e.set_fup_cfe_ip
            e.set_fup_cfe_ip = e.set_fup_cfe = False
            st.type |= T_EVT
            if not ip and f.pge:
                st.type |= T_BRANCH
            st.cfe_type, st.cfe_vector = e.fup_cfe
            st.evd = tuple(e.evd)
            e.evd = []
            if ip or f.pge:
                st.flags |= F_FUP_IP
            ret = True
        if e.set_fup_mode_exec:
            e.set_fup_mode_exec = False
            self._sample_iflag()
            sample_fup_insn = no_tip
            ret = True
        if e.set_fup_tx_flags:
            e.set_fup_tx_flags = False
            f.tx_flags = e.fup_tx_flags
            st.type |= T_TRANSACTION
            if e.fup_tx_flags & F_ABORT_TX:
                st.type |= T_BRANCH
            st.flags = e.fup_tx_flags
            ret = True
        if e.set_fup_ptw:
            e.set_fup_ptw = False
            st.type |= T_PTW
            st.flags |= F_FUP_IP
            st.ptw_payload = e.fup_ptw_payload
            ret = True
        if e.set_fup_mwait:
            e.set_fup_mwait = False
            st.type |= T_MWAIT_OP
            st.mwait_payload = e.fup_mwait_payload
            ret = True
        if e.set_fup_pwre:
            e.set_fup_pwre = False
            st.type |= T_PWR_ENTRY
            st.pwre_payload = e.fup_pwre_payload
            ret = True
        if e.set_fup_exstop:
            e.set_fup_exstop = False
            st.type |= T_EX_STOP
            st.flags |= F_FUP_IP
            ret = True
        if e.set_fup_bep:
            e.set_fup_bep = False
            st.type |= T_BLK_ITEMS
            ret = True
        if f.overflow:
            # The FUP after an OVF says where tracing goes on: a trace begin.
            f.overflow = False
            if not ret and not f.pge:
                if self.cfg.quick:
                    st.type = 0
                    f.pkt_state = RESAMPLE
                f.pge = True
                st.type |= T_BRANCH | T_TRACE_BEGIN
                st.from_ip = 0
                st.to_ip = f.ip
                return True
        if ret:
            st.from_ip = f.ip
            st.to_ip = 0
            if sample_fup_insn:
                self._sample_fup_insn()
        else:
            st.type = saved_type
        return ret

    def _sample_fup_insn(self) -> None:
        """perf's intel_pt_sample_fup_insn: an instruction sample at the FUP, with the event's flags."""
        st = self.state
        st.insn_op = OP_OTHER
        st.insn_len = 0
        f = self.flow
        cfg = self.cfg
        if not cfg.branch_enable or not f.pge or cfg.quick or f.ip != f.last_ip:
            return
        n = self.counters
        n.mtc_insn = True
        max_insn_cnt = self._next_sample()
        if max_insn_cnt != 1:
            return
        err, insn_cnt, new_ip, insn = self.walker.walk(f.ip, 0, max_insn_cnt, st.to_nr)
        if err:
            return  # reported by the next walk
        f.ip = new_ip
        if insn.branch != BR_NO_BRANCH:
            return
        n.tot_insn_cnt += insn_cnt
        t = self.timing
        t.timestamp_insn_cnt += insn_cnt
        t.sample_insn_cnt += insn_cnt
        n.period_insn_cnt += insn_cnt
        self._sample_insn()
        st.type |= T_INSTRUCTION
        f.ip += insn.length

    # RFLAGS.IF (Event Trace): MODE.Exec in PSB+ states it, elsewhere it changes at the next branch.
    def _mode_exec_status(self) -> None:
        iflag = bool(self.count & _IFLAG)
        f = self.flow
        f.exec_mode = self.payload
        f.iflag = f.next_iflag = iflag
        self.state.from_iflag = self.state.to_iflag = iflag

    def _mode_exec(self) -> None:
        f = self.flow
        f.exec_mode = self.payload
        f.next_iflag = bool(self.count & _IFLAG)

    def _sample_iflag(self) -> None:
        st = self.state
        f = self.flow
        st.type |= T_IFLAG_CHG
        st.from_iflag = f.iflag
        st.to_iflag = f.next_iflag
        f.iflag = f.next_iflag

    def _sample_iflag_chg(self) -> None:
        f = self.flow
        if f.iflag != f.next_iflag:
            self._sample_iflag()

    def _clear_fup_event(self) -> None:
        e = self.pending
        e.set_fup_tx_flags = e.set_fup_ptw = e.set_fup_mwait = False
        e.set_fup_pwre = e.set_fup_exstop = e.set_fup_bep = False
        e.set_fup_cfe_ip = e.set_fup_cfe = False
        e.evd = []
        e.set_fup_mode_exec = False
        f = self.flow
        f.iflag = f.next_iflag

    def _walk_fup(self) -> int:
        insn = Insn()
        f = self.flow
        ip = f.last_ip
        while True:
            err = self._walk_insn(insn, ip)
            if err == WALK_RETURN:
                return 0
            if err == EAGAIN or (
                self.cfg.fup_with_nlip and not err and insn.branch == BR_INDIRECT
                and ip == f.ip + insn.length
            ):
                no_tip = f.pkt_state != FUP
                f.pkt_state = IN_SYNC
                if self._fup_event(no_tip) and no_tip:
                    return 0
                return EAGAIN
            self.pending.set_fup_tx_flags = False
            if err:
                return err
            if insn.branch in (BR_INDIRECT, BR_CONDITIONAL):
                f.pkt_state = ERR_RESYNC
                return ENOENT
            return self._bug()

    def _walk_tip(self) -> int:
        st = self.state
        insn = Insn()
        err = self._walk_insn(insn, 0)
        if err == WALK_RETURN:
            return 0
        if err:
            return err
        self._update_nr()
        self._sample_iflag_chg()
        f = self.flow
        if insn.branch == BR_INDIRECT:
            if f.pkt_state == TIP_PGD:
                f.pge = False
                self.counters.continuous_period = False
                st.type |= T_TRACE_END
            f.pkt_state = IN_SYNC
            st.from_ip = f.ip
            if self.count == 0:
                st.to_ip = 0
            else:
                st.to_ip = f.last_ip
                f.ip = f.last_ip
            return 0
        if insn.branch == BR_CONDITIONAL:
            f.pkt_state = ERR_RESYNC
            return ENOENT
        return self._bug()

    def _walk_tnt(self) -> int:
        st = self.state
        f = self.flow
        insn = Insn()
        while True:
            err = self._walk_insn(insn, 0)
            if err == WALK_RETURN:
                return 0
            if err:
                return err
            if insn.op == OP_RET:
                if not self.cfg.return_compression or not f.ret_addr or not (f.tnt_payload & _BIT63):
                    f.pkt_state = ERR_RESYNC
                    return ENOENT
                f.tnt_count -= 1
                f.pkt_state = TNT_CONT if f.tnt_count else IN_SYNC
                f.tnt_payload = (f.tnt_payload << 1) & _MASK64
                st.from_ip = f.ip
                f.ip = f.ret_addr
                st.to_ip = f.ip
                return 0
            if insn.branch == BR_INDIRECT:
                # A deferred TIP must come next.
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind != Pkt.TIP or self.count == 0:
                    f.pkt_state = ERR_RESYNC
                    self.cur.step = 0
                    return ENOENT
                self._set_last_ip()
                st.from_ip = f.ip
                st.to_ip = f.last_ip
                f.ip = f.last_ip
                self._update_nr()
                self._sample_iflag_chg()
                return 0
            if insn.branch == BR_CONDITIONAL:
                f.tnt_count -= 1
                f.pkt_state = TNT_CONT if f.tnt_count else IN_SYNC
                if f.tnt_payload & _BIT63:
                    f.tnt_payload = (f.tnt_payload << 1) & _MASK64
                    st.from_ip = f.ip
                    f.ip = (f.ip + insn.length + insn.rel) & _MASK64
                    st.to_ip = f.ip
                    return 0
                if st.type & T_INSTRUCTION:  # instruction sample at a not-taken branch
                    f.tnt_payload = (f.tnt_payload << 1) & _MASK64
                    st.type = T_INSTRUCTION
                    st.from_ip = f.ip
                    st.to_ip = 0
                    f.ip += insn.length
                    return 0
                self.counters.sample_cyc = False
                f.ip += insn.length
                if not f.tnt_count:
                    self._update_sample_time()
                    return EAGAIN
                f.tnt_payload = (f.tnt_payload << 1) & _MASK64
                continue
            return self._bug()

    def _mode_tsx(self) -> tuple[int, bool]:
        fup_tx_flags = self.payload & (F_IN_TX | F_ABORT_TX)
        err = self._get_next_packet()
        if err:
            return err, False
        no_tip = False
        if self.kind == Pkt.FUP:
            e = self.pending
            e.fup_tx_flags = fup_tx_flags
            e.set_fup_tx_flags = True
            if not fup_tx_flags & F_ABORT_TX:
                no_tip = True
        else:
            self._update_in_tx()
        return 0, no_tip

    def _overflow(self) -> int:
        # perf >= 5.16: an OVF loses data but not sync; the error's ip is where the walk was.
        f = self.flow
        f.tx_flags = 0
        self._set_nr()
        self.timing.timestamp_insn_cnt = 0
        f.pkt_state = IN_SYNC
        self.state.from_ip = f.ip
        f.ip = 0
        f.pge = False
        self._clear_fup_event()
        f.overflow = True
        return EOVERFLOW

    # --------------------------------------------------------------- PSB walks

    def _walk_psbend(self) -> int:
        """Process PSB+ when already in sync."""
        f = self.flow
        f.in_psb = True
        try:
            while True:
                err = self._get_next_packet()
                if err:
                    return err
                k = self.kind
                if k == Pkt.PSBEND:
                    return 0
                if k in _PSB_ABORT:
                    self.timing.have_tma = False
                    return EAGAIN
                if k == Pkt.OVF:
                    return self._overflow()
                self._psb_common(k, psb_walk=False)
        finally:
            f.in_psb = False

    def _psb_common(self, k: int, psb_walk: bool) -> None:
        if k == Pkt.TSC:
            self._calc_tsc_timestamp()
        elif k == Pkt.TMA:
            self._calc_tma()
        elif k == Pkt.CBR:
            self._calc_cbr()
        elif k == Pkt.MODE_EXEC:
            self._mode_exec_status()
        elif k == Pkt.PIP:
            self._set_pip()
        elif k == Pkt.FUP:
            f = self.flow
            f.pge = True
            if psb_walk:
                if self._have_ip():
                    self._set_ip()
                    f.psb_ip = f.ip
            elif self.count:
                self._set_last_ip()
                f.psb_ip = f.last_ip
        elif k == Pkt.MODE_TSX:
            self._update_in_tx()
        elif k == Pkt.MTC:
            self._calc_mtc_timestamp()
            if not psb_walk and self.cfg.period_type == PERIOD_MTC:
                self.state.type |= T_INSTRUCTION
        elif k == Pkt.CYC:
            self._calc_cyc_timestamp()

    def _walk_psb(self) -> int:
        """Process PSB+ to get in sync."""
        f = self.flow
        f.in_psb = True
        try:
            while True:
                err = self._get_next_packet()
                if err:
                    return err
                k = self.kind
                if k == Pkt.PSBEND:
                    return 0
                if k in (Pkt.TIP_PGD, Pkt.TIP_PGE, Pkt.TIP, Pkt.PTWRITE, Pkt.PTWRITE_IP, Pkt.EXSTOP,
                         Pkt.EXSTOP_IP, Pkt.MWAIT, Pkt.PWRE, Pkt.PWRX, Pkt.BBP, Pkt.BIP, Pkt.BEP, Pkt.BEP_IP,
                         Pkt.CFE, Pkt.CFE_IP, Pkt.EVD):
                    if k == Pkt.TIP_PGD:
                        self.counters.continuous_period = False
                    return ENOENT
                if k in (Pkt.TRACESTOP, Pkt.TNT):
                    if k == Pkt.TRACESTOP:
                        f.pge = False
                        self.counters.continuous_period = False
                        f.tx_flags = 0
                    self.timing.have_tma = False
                    f.pkt_state = IN_SYNC if f.ip else ERR_RESYNC
                    return ENOENT
                if k == Pkt.OVF:
                    return self._overflow()
                self._psb_common(k, psb_walk=True)
        finally:
            f.in_psb = False

    def _psb(self) -> int:
        st = self.state
        f = self.flow
        f.last_ip = 0
        f.psb_ip = 0
        f.have_last_ip = True
        self.stack.clear()
        err = self._walk_psbend()
        if err:
            return err
        st.type = T_PSB_EVT
        st.from_ip = f.psb_ip
        st.to_ip = 0
        return 0

    def _fup_in_psb(self) -> int:
        f = self.flow
        if f.ip != f.last_ip:
            err = self._walk_fup()
            if not err or err != EAGAIN:
                return err
        f.pkt_state = IN_SYNC
        if self._psb():
            f.pkt_state = ERR_RESYNC
            return ENOENT
        return 0

    def _psb_with_fup(self) -> tuple[bool, int]:
        """If PSB+ carries a FUP (not followed by TIP.PGE), walk to it first."""
        if not self.cfg.branch_enable or not self.flow.pge:
            return False, 0
        fup = None
        after_psbend = 0
        for kind, count, payload, _last in self._lookahead():
            if kind in (Pkt.PAD, Pkt.MNT, Pkt.TSC, Pkt.TMA, Pkt.MODE_EXEC, Pkt.MODE_TSX, Pkt.MTC,
                        Pkt.CYC, Pkt.VMCS, Pkt.CBR, Pkt.PIP):
                if after_psbend:
                    after_psbend -= 1
                    if not after_psbend:
                        break
                continue
            if kind == Pkt.FUP:
                if after_psbend or fup is not None or count == 0:
                    break
                fup = (count, payload)
                continue
            if kind == Pkt.PSBEND:
                if fup is None:
                    break
                after_psbend = 6
                continue
            if kind == Pkt.TIP_PGE:
                if after_psbend:
                    fup = None
                break
            if kind in (Pkt.PTWRITE, Pkt.PTWRITE_IP, Pkt.EXSTOP, Pkt.EXSTOP_IP, Pkt.MWAIT, Pkt.PWRE,
                        Pkt.PWRX, Pkt.BBP, Pkt.BIP, Pkt.BEP, Pkt.BEP_IP, Pkt.CFE, Pkt.CFE_IP, Pkt.EVD):
                if after_psbend:
                    after_psbend -= 1
                    if not after_psbend:
                        break
                    continue
                break
            break
        if fup is None:
            return False, 0
        self.count, self.payload = fup
        self._set_last_ip()
        self.flow.pkt_state = FUP_IN_PSB
        return True, self._fup_in_psb()

    # --------------------------------------------------------------- main walk

    def _walk_trace(self) -> int:
        st = self.state
        f = self.flow
        e = self.pending
        cfg = self.cfg
        quick = cfg.quick
        no_tip = False
        cyc_threshold = cfg.cyc_threshold
        # With a CYC threshold not every packet that could carry a CYC has one: a CYC counts
        # toward IPC only for the packet right after it (perf: "Fix IPC with CYC threshold").
        # The previous packet is this walk's own: a new walk starts as if after a PAD.
        prev_kind = Pkt.PAD
        err = self._get_next_packet()
        if err:
            return err
        while True:
            if cyc_threshold:
                n = self.counters
                if n.sample_cyc and prev_kind != Pkt.CYC:
                    n.sample_cyc = False
                prev_kind = self.kind
            if quick:
                hop, err, no_tip = self._hop_trace(no_tip)
                if hop == _HOP_IGNORE:
                    err = self._get_next_packet()
                    if err:
                        return err
                    continue
                if hop == _HOP_RETURN:
                    return err
                if hop == _HOP_AGAIN:
                    continue
            k = self.kind
            if k == Pkt.TNT:
                if self.count:
                    f.tnt_count = self.count
                    f.tnt_payload = self.payload
                    f.pkt_state = TNT
                    err = self._walk_tnt()
                    if err != EAGAIN:
                        return err
            elif k == Pkt.TIP_PGD:
                if self.count:
                    self._set_last_ip()
                f.pkt_state = TIP_PGD
                return self._walk_tip()
            elif k == Pkt.TIP_PGE:
                f.pge = True
                f.overflow = False
                self._mtc_cyc_cnt_pge()
                self._set_nr()
                if self.count:
                    self._sample_iflag_chg()
                    self._set_ip()
                    st.from_ip = 0
                    st.to_ip = f.ip
                    st.type |= T_TRACE_BEGIN
                    if quick:  # resample to get to_ip as an "instruction" sample
                        f.pkt_state = RESAMPLE
                    return 0
            elif k == Pkt.OVF:
                return self._overflow()
            elif k == Pkt.TIP:
                if self.count:
                    self._set_last_ip()
                f.pkt_state = TIP
                return self._walk_tip()
            elif k == Pkt.FUP:
                if self.count == 0:
                    no_tip = False
                else:
                    self._set_last_ip()
                    if not cfg.branch_enable or not f.pge:
                        f.ip = f.last_ip
                        if self._fup_event(no_tip):
                            return 0
                        no_tip = False
                    else:
                        if e.set_fup_mwait:
                            no_tip = True
                        f.pkt_state = FUP_NO_TIP if no_tip else FUP
                        err = self._walk_fup()
                        if err != EAGAIN:
                            return err
                        if not no_tip:
                            return self._walk_fup_tip()
                        no_tip = False
            elif k == Pkt.TRACESTOP:
                f.pge = False
                self.counters.continuous_period = False
                f.tx_flags = 0
                self.timing.have_tma = False
            elif k == Pkt.PSB:
                st.psb_offset = self._abs_pos()
                f.psb_ip = 0
                done, err = self._psb_with_fup()
                if done:
                    return err
                err = self._psb()
                if err == EAGAIN:
                    continue  # re-examine the packet that ended PSB+
                return err
            elif k == Pkt.PIP:
                self._update_pip()
            elif k == Pkt.MTC:
                self._calc_mtc_timestamp()
                n = self.counters
                if cfg.period_type == PERIOD_MTC and n.mtc_insn and self.timing.timestamp:
                    n.mtc_insn = False
                    st.type = T_INSTRUCTION
                    st.from_ip = f.ip
                    st.to_ip = 0
                    return 0
            elif k == Pkt.TSC:
                self._calc_tsc_timestamp()
            elif k == Pkt.TMA:
                self._calc_tma()
            elif k == Pkt.CYC:
                self._calc_cyc_timestamp()
            elif k == Pkt.CBR:
                self._calc_cbr()
                t = self.timing
                if t.cbr != t.cbr_seen:
                    st.type = 0
                    return 0
            elif k == Pkt.MODE_EXEC:
                self._mode_exec()
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    e.set_fup_mode_exec = True
                    no_tip = True
                continue  # examine the packet after MODE.Exec
            elif k == Pkt.CFE:
                e.fup_cfe = (self.count, self.payload)
                e.set_fup_cfe = True
                if not f.pge:
                    self._fup_event(True)
                    return 0
            elif k == Pkt.CFE_IP:
                e.fup_cfe = (self.count, self.payload)
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    e.set_fup_cfe_ip = True
                    no_tip = True
                continue  # the FUP (or whatever came instead) next
            elif k == Pkt.EVD:
                if len(e.evd) >= _MAX_EVDS:
                    return ENOSYS  # perf: "Too many EVD packets"
                e.evd.append((self.count, self.payload))
            elif k == Pkt.MODE_TSX:
                if not f.pge or f.in_psb:
                    self._update_in_tx()
                else:
                    err, nt = self._mode_tsx()
                    if err:
                        return err
                    no_tip = no_tip or nt
                    continue  # examine the packet after MODE.TSX
            elif k == Pkt.PTWRITE_IP:
                e.fup_ptw_payload = self.payload
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    e.set_fup_ptw = True
                    no_tip = True
                continue
            elif k == Pkt.PTWRITE:
                st.type = T_PTW
                st.from_ip = f.ip
                st.to_ip = 0
                st.ptw_payload = self.payload
                return 0
            elif k == Pkt.MWAIT:
                e.fup_mwait_payload = self.payload
                e.set_fup_mwait = True
            elif k == Pkt.PWRE:
                if e.set_fup_mwait:
                    e.fup_pwre_payload = self.payload
                    e.set_fup_pwre = True
                else:
                    st.type = T_PWR_ENTRY
                    st.from_ip = f.ip
                    st.to_ip = 0
                    st.pwrx_payload = self.payload
                    return 0
            elif k == Pkt.EXSTOP_IP:
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    e.set_fup_exstop = True
                    no_tip = True
                continue
            elif k == Pkt.EXSTOP:
                st.type = T_EX_STOP
                st.from_ip = f.ip
                st.to_ip = 0
                return 0
            elif k == Pkt.PWRX:
                st.type = T_PWR_EXIT
                st.from_ip = f.ip
                st.to_ip = 0
                st.pwrx_payload = self.payload
                return 0
            elif k == Pkt.BEP:
                st.type = T_BLK_ITEMS
                st.from_ip = f.ip
                st.to_ip = 0
                return 0
            elif k == Pkt.BEP_IP:
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    e.set_fup_bep = True
                    no_tip = True
                continue
            # PSBEND, VMCS, MNT, PAD, BBP, BIP: nothing to do here.
            err = self._get_next_packet()
            if err:
                return err

    def _hop_trace(self, no_tip: bool) -> tuple[int, int, bool]:
        """perf's intel_pt_hop_trace: ips from FUP and TIP packets, TNT ignored, no code walked."""
        st = self.state
        f = self.flow
        if self.cfg.quick >= 2 and not f.in_psb and self.kind != Pkt.PSB:
            err = self._scan_for_psb()  # leap: PSB to PSB, the ip from the FUP in PSB+
            if err:
                return _HOP_RETURN, err, no_tip
        k = self.kind
        if k == Pkt.TNT:
            return _HOP_IGNORE, 0, no_tip
        if k == Pkt.TIP_PGD:
            f.pge = False
            if not self.count:
                self._set_nr()
                return _HOP_IGNORE, 0, no_tip
            self._set_ip()
            st.type |= T_TRACE_END
            st.from_ip = 0
            st.to_ip = f.ip
            self._update_nr()
            return _HOP_RETURN, 0, no_tip
        if k == Pkt.TIP:
            if not self.count:
                self._set_nr()
                return _HOP_IGNORE, 0, no_tip
            self._set_ip()
            st.type = T_INSTRUCTION
            st.from_ip = f.ip
            st.to_ip = 0
            self._update_nr()
            self._sample_iflag_chg()
            return _HOP_RETURN, 0, no_tip
        if k == Pkt.FUP:
            if not self.count:
                return _HOP_IGNORE, 0, no_tip
            self._set_ip()
            e = self.pending
            if e.set_fup_mwait or e.set_fup_pwre or not self.cfg.branch_enable or not f.pge:
                no_tip = True
            if no_tip:
                st.type = T_INSTRUCTION
                st.from_ip = f.ip
                st.to_ip = 0
                self._fup_event(no_tip)
                return _HOP_RETURN, 0, no_tip
            self._fup_event(no_tip)
            st.type |= T_INSTRUCTION | T_BRANCH
            err = self._walk_fup_tip()
            if not err and st.to_ip:
                f.pkt_state = RESAMPLE
            return _HOP_RETURN, err, no_tip
        if k == Pkt.PSB:
            st.psb_offset = self._abs_pos()
            f.psb_ip = 0
            f.last_ip = 0
            f.have_last_ip = True
            err = self._walk_psbend()
            if err == EAGAIN:
                return _HOP_AGAIN, 0, no_tip
            if err:
                return _HOP_RETURN, err, no_tip
            st.type = T_PSB_EVT
            if f.psb_ip:
                st.type |= T_INSTRUCTION
                f.ip = f.psb_ip
            st.from_ip = f.psb_ip
            st.to_ip = 0
            return _HOP_RETURN, 0, no_tip
        return _HOP_PROCESS, 0, no_tip

    def _walk_fup_tip(self) -> int:
        st = self.state
        f = self.flow
        if f.tx_flags & F_ABORT_TX:
            f.tx_flags = 0
            st.flags &= ~F_IN_TX
            st.flags |= F_ABORT_TX
        else:
            st.flags |= F_ASYNC
        while True:
            err = self._get_next_packet()
            if err:
                return err
            k = self.kind
            if k in (Pkt.TNT, Pkt.FUP, Pkt.TRACESTOP, Pkt.PSB, Pkt.TSC, Pkt.TMA, Pkt.MODE_TSX, Pkt.BAD,
                     Pkt.PSBEND, Pkt.PTWRITE, Pkt.PTWRITE_IP, Pkt.EXSTOP, Pkt.EXSTOP_IP, Pkt.MWAIT,
                     Pkt.PWRE, Pkt.PWRX, Pkt.BBP, Pkt.BIP, Pkt.BEP, Pkt.BEP_IP, Pkt.CFE, Pkt.CFE_IP, Pkt.EVD):
                f.pkt_state = ERR_RESYNC
                self.cur.step = 0
                return ENOENT
            if k == Pkt.CBR:
                self._calc_cbr()
            elif k == Pkt.OVF:
                return self._overflow()
            elif k == Pkt.TIP_PGD:
                st.from_ip = f.ip
                if self.count == 0:
                    st.to_ip = 0
                else:
                    self._set_ip()
                    st.to_ip = f.ip
                f.pge = False
                self.counters.continuous_period = False
                st.type |= T_TRACE_END
                self._update_nr()
                return 0
            elif k == Pkt.TIP_PGE:
                f.pge = True
                st.from_ip = 0
                if self.count == 0:
                    st.to_ip = 0
                else:
                    self._set_ip()
                    st.to_ip = f.ip
                st.type |= T_TRACE_BEGIN
                self._mtc_cyc_cnt_pge()
                self._set_nr()
                return 0
            elif k == Pkt.TIP:
                st.from_ip = f.ip
                if self.count == 0:
                    st.to_ip = 0
                else:
                    self._set_ip()
                    st.to_ip = f.ip
                self._update_nr()
                self._sample_iflag_chg()
                return 0
            elif k == Pkt.PIP:
                self._update_pip()
            elif k == Pkt.MTC:
                self._calc_mtc_timestamp()
                if self.cfg.period_type == PERIOD_MTC:
                    st.type |= T_INSTRUCTION
            elif k == Pkt.CYC:
                self._calc_cyc_timestamp()
            elif k == Pkt.MODE_EXEC:
                self._mode_exec()
            elif k in (Pkt.VMCS, Pkt.MNT, Pkt.PAD):
                pass
            else:
                return self._bug()

    def _walk_to_ip(self) -> int:
        st = self.state
        f = self.flow
        while True:
            err = self._get_next_packet()
            if err:
                return err
            k = self.kind
            if k == Pkt.TIP_PGD:
                self.counters.continuous_period = False
                f.pge = False
                if self._have_ip():
                    self._set_ip()
                if f.ip:
                    st.type |= T_TRACE_END
                    return 0
            elif k == Pkt.TIP_PGE:
                f.pge = True
                self._mtc_cyc_cnt_pge()
                if self._have_ip():
                    self._set_ip()
                if f.ip:
                    st.type |= T_TRACE_BEGIN
                    return 0
            elif k == Pkt.TIP:
                f.pge = True
                if self._have_ip():
                    self._set_ip()
                if f.ip:
                    return 0
            elif k == Pkt.FUP:
                if self._have_ip():
                    self._set_ip()
                if f.ip:
                    return 0
            elif k == Pkt.MTC:
                self._calc_mtc_timestamp()
            elif k == Pkt.TSC:
                self._calc_tsc_timestamp()
            elif k == Pkt.TMA:
                self._calc_tma()
            elif k == Pkt.CYC:
                self._calc_cyc_timestamp()
            elif k == Pkt.CBR:
                self._calc_cbr()
            elif k == Pkt.PIP:
                self._set_pip()
            elif k == Pkt.MODE_EXEC:
                self._mode_exec_status()
            elif k == Pkt.MODE_TSX:
                self._update_in_tx()
            elif k == Pkt.OVF:
                return self._overflow()
            elif k == Pkt.TRACESTOP:
                f.pge = False
                self.counters.continuous_period = False
                f.tx_flags = 0
                self.timing.have_tma = False
            elif k == Pkt.PSB:
                st.psb_offset = self._abs_pos()
                f.psb_ip = 0
                f.last_ip = 0
                f.have_last_ip = True
                self.stack.clear()
                err = self._walk_psb()
                if err:
                    return err
                st.type = T_PSB_EVT
                st.from_ip = f.psb_ip
                st.to_ip = 0
                return 0

    def _sync_ip(self) -> int:
        st = self.state
        f = self.flow
        self._clear_fup_event()
        f.overflow = False
        if not self.cfg.branch_enable:
            f.pkt_state = IN_SYNC
            st.type = 0
            return 0
        err = self._walk_to_ip()
        if err or ((st.type & T_PSB_EVT) and not f.ip):
            return err
        f.pkt_state = RESAMPLE if self.cfg.quick else IN_SYNC  # hop: resample to_ip as an instruction
        st.from_ip = 0
        st.to_ip = f.ip
        return 0

    def _scan_for_psb(self) -> int:
        """Skip to the next PSB (perf's scan_for_psb); re-tokenize when it is mid-token."""
        c = self.cur
        while True:
            if c.buf_idx < 0 or c.idx + c.step >= len(c.kinds):
                err = self._get_data()
                if err:
                    return err  # no more data, or a new non-consecutive buffer
            buf = self.buffers[c.buf_idx]
            data = buf.data if isinstance(buf.data, bytes) else bytes(buf.data)
            at = data.find(PSB_BYTES, c.poss[c.idx + c.step])
            if at < 0:
                c.idx = len(c.kinds)
                c.step = 0
                continue
            c.idx = self._index_at(at)
            c.step = 0
            return self._get_next_packet()

    def _index_at(self, byte_pos: int) -> int:
        """Index of the packet starting at ``byte_pos``, re-tokenizing the rest if needed."""
        c = self.cur
        j = bisect.bisect_left(c.poss, byte_pos)
        if j < len(c.poss) and c.poss[j] == byte_pos:
            return j
        buf = self.buffers[c.buf_idx]
        tail = tokenize(buf.data[byte_pos:])
        c.kinds = c.kinds[:j] + tail.kind.tolist()
        c.counts = c.counts[:j] + tail.count.tolist()
        c.payloads = c.payloads[:j] + tail.payload.tolist()
        c.poss = c.poss[:j] + [p + byte_pos for p in tail.pos.tolist()]
        return j

    def _sync(self) -> int:
        st = self.state
        f = self.flow
        f.pge = False
        self.counters.continuous_period = False
        f.have_last_ip = False
        f.last_ip = 0
        f.psb_ip = 0
        f.ip = 0
        self.stack.clear()
        err = self._scan_for_psb()
        if err:
            return err
        f.have_last_ip = True
        f.pkt_state = IN_SYNC  # perf 6.x: a PSB+ without an IP still leaves the decoder in sync
        err = self._walk_psb()
        if err:
            return err
        st.type = T_PSB_EVT
        st.from_ip = f.psb_ip
        st.to_ip = 0
        if f.ip:
            f.pkt_state = RESAMPLE if self.cfg.quick else IN_SYNC  # hop: the PSB FUP ip as an instruction
        return 0

    def _est_timestamp(self) -> int:
        t = self.timing
        est = t.sample_insn_cnt << 1
        max_non_turbo_ratio = self.cfg.max_non_turbo_ratio
        if t.cbr and max_non_turbo_ratio:
            est = est * max_non_turbo_ratio // t.cbr
        return t.sample_timestamp + est

    # ----------------------------------------------------------------- public

    def decode(self) -> State:
        """Decode up to the next sample-worthy state; ``state.err`` is set on errors."""
        st = self.state
        f = self.flow
        while True:
            st.type = T_BRANCH
            st.flags = 0
            ps = f.pkt_state
            if ps == NO_PSB:
                err = self._sync()
            elif ps in (NO_IP, ERR_RESYNC):
                if ps == NO_IP:
                    f.have_last_ip = False
                    f.last_ip = 0
                    f.ip = 0
                err = self._sync_ip()
            elif ps == IN_SYNC:
                err = self._walk_trace()
            elif ps in (TNT, TNT_CONT):
                err = self._walk_tnt()
                if err == EAGAIN:
                    err = self._walk_trace()
            elif ps in (TIP, TIP_PGD):
                err = self._walk_tip()
            elif ps == FUP:
                err = self._walk_fup()
                if err == EAGAIN:
                    err = self._walk_fup_tip()
            elif ps == FUP_NO_TIP:
                err = self._walk_fup()
                if err == EAGAIN:
                    err = self._walk_trace()
            elif ps == FUP_IN_PSB:
                err = self._fup_in_psb()
            elif ps == RESAMPLE:
                f.pkt_state = IN_SYNC
                st.type = T_INSTRUCTION
                st.from_ip = f.ip
                st.to_ip = 0
                err = 0
            else:
                err = self._bug()
            if err != ENOLINK:
                break
        st.pos = self._abs_pos()
        t = self.timing
        n = self.counters
        if err:
            st.err = _ERRNO_TO_CODE.get(err, ERR_UNK)
            if err != EOVERFLOW:
                st.from_ip = f.ip
            self._update_sample_time()
            n.sample_tot_cyc_cnt = n.tot_cyc_cnt
            self._set_nr()
        else:
            st.err = 0
            if t.cbr != t.cbr_seen:
                t.cbr_seen = t.cbr
                if not st.type:
                    st.from_ip = f.ip
                    st.to_ip = 0
                st.type |= T_CBR_CHG
                st.cbr_payload = t.cbr_payload
                st.cbr = t.cbr
            if f.pkt_state in (NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT, RESAMPLE):
                self._update_sample_time()
                if n.sample_cyc:
                    n.sample_tot_cyc_cnt = n.tot_cyc_cnt
                    st.flags |= F_SAMPLE_IPC
                    n.sample_cyc = False
            if not t.have_cyc:
                st.flags |= F_SAMPLE_IPC
        if (st.type & T_PSB_EVT) and t.tsc_timestamp:
            t.sample_timestamp = t.tsc_timestamp
        st.from_nr = f.nr
        st.to_nr = f.next_nr
        f.nr = f.next_nr
        st.timestamp = t.sample_timestamp
        st.est_timestamp = self._est_timestamp()
        st.tot_insn_cnt = n.tot_insn_cnt
        st.tot_cyc_cnt = n.sample_tot_cyc_cnt
        return st
