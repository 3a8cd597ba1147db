"""The instruction-flow decoder with perf's semantics (the reference for perf.data).

perf's Intel PT decoder and libipt agree on what the hardware means but not on
what a tool reports: where a sample's time comes from, which branches become
samples, and how decoding recovers after an error.  Exports must match perf
exactly (DESIGN.md section 5), so this module reproduces perf's decoder
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

from ptexport.samples.columns import ERR_BADPKT, ERR_INTERN, ERR_MISMAT, ERR_NELOOP, ERR_NODATA, ERR_NOINSN, ERR_OVR, ERR_UNK
from ptexport.pt.perfpkt import PSB_BYTES, PacketColumns, Pkt, tokenize

# Decoder packet states.
NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT, TNT, TIP, TIP_PGD, FUP, FUP_NO_TIP, FUP_IN_PSB, RESAMPLE = range(12)

# Hop mode (--itrace=q): what a packet does to the walk.
_HOP_PROCESS, _HOP_IGNORE, _HOP_RETURN, _HOP_AGAIN = range(4)

# State.type bits (perf's INTEL_PT_* sample types).
T_BRANCH = 1 << 0
T_INSTRUCTION = 1 << 1
T_TRANSACTION = 1 << 2
T_PTW = 1 << 3
T_MWAIT_OP = 1 << 4
T_PWR_ENTRY = 1 << 5
T_EX_STOP = 1 << 6
T_PWR_EXIT = 1 << 7
T_CBR_CHG = 1 << 8
T_TRACE_BEGIN = 1 << 9
T_TRACE_END = 1 << 10
T_BLK_ITEMS = 1 << 11
T_PSB_EVT = 1 << 12
T_EVT = 1 << 13
T_IFLAG_CHG = 1 << 14

_IFLAG = 1 << 2  # MODE.Exec: RFLAGS.IF (the packet's count)
_MAX_EVDS = 64

# State.flags bits.
F_IN_TX = 1 << 0
F_ABORT_TX = 1 << 1
F_ASYNC = 1 << 2
F_FUP_IP = 1 << 3
F_SAMPLE_IPC = 1 << 4

# Instruction classes (perf's op / branch kinds).
OP_OTHER, OP_CALL, OP_RET, OP_JCC, OP_JMP, OP_LOOP, OP_IRET, OP_INT, OP_SYSCALL, OP_SYSRET, OP_VMENTRY = range(11)
BR_NO_BRANCH, BR_INDIRECT, BR_CONDITIONAL, BR_UNCONDITIONAL = range(4)

# Period kinds for instruction samples.
PERIOD_NONE, PERIOD_INSTRUCTIONS, PERIOD_TICKS, PERIOD_MTC = range(4)

# Internal outcomes (perf's negative errnos).
_RETURN = 1  # walk_insn stopped at a branch it handled
_EAGAIN = -11
_ENOLINK = -67
_EILSEQ = -84
_ENOENT = -2
_EINVAL = -22
_EBADMSG = -74
_ENODATA = -61
_EOVERFLOW = -75
_ELOOP = -40
_ENOSYS = -38

_ERRNO_TO_CODE = {
    _ENOSYS: ERR_INTERN,
    _EBADMSG: ERR_BADPKT,
    _ENODATA: ERR_NODATA,
    _EILSEQ: ERR_NOINSN,
    _ENOENT: ERR_MISMAT,
    _EOVERFLOW: ERR_OVR,
    _ELOOP: ERR_NELOOP,
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


@dataclass(slots=True)
class Insn:
    """One decoded instruction as the walker reports it."""

    op: int = OP_OTHER
    branch: int = BR_NO_BRANCH
    length: int = 0
    rel: int = 0


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


class PerfDecoder:
    """perf's Intel PT decoder for one queue (a CPU's or a thread's AUX stream)."""

    def __init__(self, buffers: Sequence[Buffer], walker: InsnWalker, params: Params) -> None:
        self.buffers = list(buffers)
        self.walker = walker
        self.p = params
        self.state = State()
        self.stack = _Stack()
        # Packet cursor.
        self.buf_idx = -1
        self.cols: PacketColumns | None = None
        self.kinds: list = []
        self.counts: list = []
        self.payloads: list = []
        self.poss: list = []
        self.idx = 0  # index of the current packet
        self.step = 0  # 1 when the current packet has been consumed
        self.base = 0  # absolute offset of the current buffer
        self.kind = Pkt.PAD
        self.count = 0
        self.payload = 0
        self.last_packet_type = Pkt.PAD
        # Decoder state.
        self.pkt_state = NO_PSB
        self.pge = False
        self.in_psb = False
        self.have_last_ip = False
        self.last_ip = 0
        self.ip = 0
        self.psb_ip = 0
        self.nr = False
        self.next_nr = False
        self.pip_payload = 0
        self.exec_mode = 0
        self.tx_flags = 0
        self.ret_addr = 0
        self.tnt_count = 0
        self.tnt_payload = 0
        self.overflow = False
        self.no_progress = 0
        self.stuck_ip = 0
        self.stuck_ip_prd = 0
        self.stuck_ip_cnt = 0
        self.mtc_insn = False
        self.continuous_period = False
        # Pending FUP-bound events.
        self.set_fup_tx_flags = False
        self.set_fup_ptw = False
        self.set_fup_mwait = False
        self.set_fup_pwre = False
        self.set_fup_exstop = False
        self.set_fup_bep = False
        self.fup_tx_flags = 0
        self.fup_ptw_payload = 0
        self.fup_mwait_payload = 0
        self.fup_pwre_payload = 0
        # Event Trace: a CFE waiting for its FUP, the EVDs before it; RFLAGS.IF now and next.
        self.set_fup_cfe_ip = False
        self.set_fup_cfe = False
        self.fup_cfe = (0, 0)
        self.evd: list[tuple[int, int]] = []
        self.set_fup_mode_exec = False
        self.iflag = False
        self.next_iflag = False
        # Timing.
        self.timestamp = 0
        self.tsc_timestamp = 0
        self.ref_timestamp = 0
        self.buf_timestamp = 0
        self.sample_timestamp = 0
        self.ctc_timestamp = 0
        self.ctc_delta = 0
        self.last_mtc = 0
        self.last_ctc = 0
        self.have_tma = False
        self.fixup_last_mtc = False
        self.have_cyc = False
        self.cycle_cnt = 0
        self.cyc_ref_timestamp = 0
        self.cbr = 0
        self.cbr_seen = 0
        self.cbr_payload = 0
        self.cbr_cyc_to_tsc = 0.0
        self.calc_cyc_to_tsc = 0.0
        self.have_calc_cyc_to_tsc = False
        self.max_non_turbo_ratio_fp = float(params.max_non_turbo_ratio)
        self.tot_cyc_cnt = 0
        self.sample_tot_cyc_cnt = 0
        self.base_cyc_cnt = 0
        self.cyc_cnt_timestamp = 0
        self.tsc_to_cyc = 0.0
        self.sample_cyc = False
        self.timestamp_insn_cnt = 0
        self.sample_insn_cnt = 0
        self.tot_insn_cnt = 0
        self.period_insn_cnt = 0
        self.period_mask = 0
        self.period_ticks = 0
        self.last_masked_timestamp = 0
        self.mtc_shift = params.mtc_period
        self.ctc_rem_mask = (1 << self.mtc_shift) - 1
        self.tsc_ctc_ratio_n = params.tsc_ctc_ratio_n
        self.tsc_ctc_ratio_d = params.tsc_ctc_ratio_d if params.tsc_ctc_ratio_n else 0
        self.tsc_ctc_mult = 0
        if self.tsc_ctc_ratio_d and not self.tsc_ctc_ratio_n % self.tsc_ctc_ratio_d:
            self.tsc_ctc_mult = self.tsc_ctc_ratio_n // self.tsc_ctc_ratio_d
        if params.period_type == PERIOD_TICKS and params.period:
            period = 1 << (params.period.bit_length() - 1)
            self.period_mask = ~(period - 1) & _MASK64
            self.period_ticks = period

    # ------------------------------------------------------------------ packets

    def _load_buffer(self, i: int) -> None:
        buf = self.buffers[i]
        if buf.packets is None:
            buf.packets = tokenize(buf.data)
        self.cols = buf.packets
        self.kinds = buf.packets.kind.tolist()
        self.counts = buf.packets.count.tolist()
        self.payloads = buf.packets.payload.tolist()
        self.poss = buf.packets.pos.tolist()
        self.base = buf.offset
        self.buf_idx = i
        self.idx = 0
        self.step = 0

    def _get_data(self, reposition: bool = False) -> int:
        """Move to the next buffer (perf's get_data)."""
        nxt = self.buf_idx + 1
        while nxt < len(self.buffers) and not len(self.buffers[nxt].data):
            nxt += 1
        if nxt >= len(self.buffers):
            self.buf_idx = len(self.buffers)
            self.kinds = []
            self.idx = 0
            self.step = 0
            return _ENODATA
        first = self.buf_idx < 0
        self._load_buffer(nxt)
        buf = self.buffers[nxt]
        self.buf_timestamp = buf.ref_timestamp
        if first or not buf.consecutive or reposition:
            self.ip = 0
            self.pkt_state = NO_PSB
            self.timestamp = 0
            self.have_tma = False
            self.ref_timestamp = buf.ref_timestamp
            self.state.trace_nr = buf.trace_nr
            return _ENOLINK
        return 0

    def _abs_pos(self) -> int:
        if self.idx < len(self.poss):
            return self.base + self.poss[self.idx]
        return self.base + (len(self.buffers[self.buf_idx].data) if 0 <= self.buf_idx < len(self.buffers) else 0)

    def _get_next_packet(self) -> int:
        self.last_packet_type = self.kind
        while True:
            self.idx += self.step
            self.step = 0
            if self.idx >= len(self.kinds):
                err = self._get_data()
                if err:
                    return err
            i = self.idx
            self.kind = self.kinds[i]
            self.count = self.counts[i]
            self.payload = self.payloads[i]
            self.step = 1
            if self.kind == Pkt.BAD:
                return self._bad_packet()
            if self.kind != Pkt.PAD:
                return 0

    def _bad_packet(self) -> int:
        # perf (non-strict) keeps the current packet state and steps one byte.
        self.tx_flags = 0
        self.have_tma = False
        return _EBADMSG

    def _lookahead(self):
        """Yield (kind, count, payload, pos) of the packets after the current one in this buffer."""
        last = self.last_packet_type
        i = self.idx + self.step
        kinds, counts, payloads = self.kinds, self.counts, self.payloads
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
        self.last_ip = calc_ip(self.count, self.payload, self.last_ip)
        self.have_last_ip = True

    def _set_ip(self) -> None:
        self._set_last_ip()
        self.ip = self.last_ip

    def _have_ip(self) -> bool:
        return bool(self.count) and (self.have_last_ip or self.count in (3, 6))

    def _update_pip(self) -> None:
        self.pip_payload = self.payload

    def _update_nr(self) -> None:
        self.next_nr = bool(self.pip_payload & 1)

    def _set_nr(self) -> None:
        self.nr = bool(self.pip_payload & 1)
        self.next_nr = self.nr

    def _set_pip(self) -> None:
        self._update_pip()
        self._set_nr()

    def _update_in_tx(self) -> None:
        self.tx_flags = self.payload & F_IN_TX

    def _update_sample_time(self) -> None:
        self.sample_timestamp = self.timestamp
        self.sample_insn_cnt = self.timestamp_insn_cnt

    def _bug(self) -> int:
        self.pkt_state = NO_PSB
        return _ENOSYS

    # ----------------------------------------------------------------- timing

    def _mtc_cyc_cnt_pge(self) -> None:
        if self.have_cyc:
            return
        self.cyc_cnt_timestamp = self.timestamp
        self.base_cyc_cnt = self.tot_cyc_cnt

    def _mtc_cyc_cnt_upd(self) -> None:
        if self.have_cyc:
            return
        self.sample_cyc = True
        if not self.pge or self.timestamp <= self.cyc_cnt_timestamp:
            return
        tot = int((self.timestamp - self.cyc_cnt_timestamp) * self.tsc_to_cyc + self.base_cyc_cnt)
        if tot > self.tot_cyc_cnt:
            self.tot_cyc_cnt = tot

    def _ctc_to_tsc(self, ctc: int) -> int:
        if self.tsc_ctc_mult:
            return ctc * self.tsc_ctc_mult
        return _multdiv(ctc, self.tsc_ctc_ratio_n, self.tsc_ctc_ratio_d)

    def _calc_tsc_timestamp(self) -> None:
        self.have_tma = False
        if self.ref_timestamp:
            ts = self.payload | (self.ref_timestamp & (0xFF << 56))
            if ts < self.ref_timestamp:
                if self.ref_timestamp - ts > (1 << 55):
                    ts += 1 << 56
            elif ts - self.ref_timestamp > (1 << 55):
                ts -= 1 << 56
            self.tsc_timestamp = ts
            self.timestamp = ts
            self.ref_timestamp = 0
            self.timestamp_insn_cnt = 0
        elif self.timestamp:
            ts = self.payload | (self.timestamp & (0xFF << 56))
            self.tsc_timestamp = ts
            if ts < self.timestamp and self.timestamp - ts < _TSC_SLIP:
                ts = self.timestamp  # suppress a backwards timestamp
            if ts < self.timestamp:
                if not self.buf_timestamp or ts + (1 << 56) < self.buf_timestamp:
                    ts += 1 << 56
                    self.tsc_timestamp = ts
                else:
                    ts = self.timestamp
            self.timestamp = ts
            self.timestamp_insn_cnt = 0
        if self.last_packet_type == Pkt.CYC:
            self.cyc_ref_timestamp = self.timestamp
            self.cycle_cnt = 0
            self.have_calc_cyc_to_tsc = False
            # perf does not calibrate from TSC packets (from_mtc false).

    def _calc_tma(self) -> None:
        ctc = self.payload
        fc = self.count
        ctc_rem = ctc & self.ctc_rem_mask
        if not self.tsc_ctc_ratio_d:
            return
        if self.pge and not self.in_psb:
            self._mtc_cyc_cnt_pge()
        else:
            self._mtc_cyc_cnt_upd()
        self.last_mtc = (ctc >> self.mtc_shift) & 0xFF
        self.last_ctc = ctc - ctc_rem
        self.ctc_timestamp = self.tsc_timestamp - fc - self._ctc_to_tsc(ctc_rem)
        self.ctc_delta = 0
        self.have_tma = True
        self.fixup_last_mtc = True

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
        if not self.have_tma:
            return
        mtc = self.payload
        if self.mtc_shift > 8 and self.fixup_last_mtc:
            self.fixup_last_mtc = False
            self.last_mtc = self._fixup_last_mtc(mtc, self.mtc_shift, self.last_mtc)
        delta = mtc - self.last_mtc if mtc > self.last_mtc else mtc + 256 - self.last_mtc
        self.ctc_delta += delta << self.mtc_shift
        ts = self.ctc_timestamp + self._ctc_to_tsc(self.ctc_delta)
        if ts >= self.timestamp:
            self.timestamp = ts
        self._mtc_cyc_cnt_upd()
        self.timestamp_insn_cnt = 0
        self.last_mtc = mtc
        if self.last_packet_type == Pkt.CYC:
            self.cyc_ref_timestamp = self.timestamp
            self.cycle_cnt = 0
            self.have_calc_cyc_to_tsc = False
            self._calc_cyc_to_tsc_from_mtc()

    def _calc_cyc_to_tsc_from_mtc(self) -> None:
        """Estimate TSC ticks per cycle by looking ahead to the next timing packet."""
        cycle_cnt = 0
        cbr = 0
        cbr_cyc_to_tsc = 0.0
        last_mtc = self.last_mtc
        ctc_timestamp = self.ctc_timestamp
        ctc_delta = self.ctc_delta
        data_timestamp = self.timestamp
        have_tma = self.have_tma
        fixup = self.fixup_last_mtc
        for kind, count, payload, last in self._lookahead():
            if kind in (Pkt.TNT, Pkt.TIP_PGE, Pkt.TIP, Pkt.FUP, Pkt.PSB, Pkt.PIP, Pkt.MODE_EXEC,
                        Pkt.MODE_TSX, Pkt.PSBEND, Pkt.PAD, Pkt.VMCS, Pkt.MNT, Pkt.PTWRITE,
                        Pkt.PTWRITE_IP, Pkt.BBP, Pkt.BIP, Pkt.BEP, Pkt.BEP_IP, Pkt.CFE, Pkt.CFE_IP, Pkt.EVD):
                continue
            if kind == Pkt.MTC:
                if not have_tma:
                    continue
                mtc = payload
                if self.mtc_shift > 8 and fixup:
                    fixup = False
                    last_mtc = self._fixup_last_mtc(mtc, self.mtc_shift, last_mtc)
                delta = mtc - last_mtc if mtc > last_mtc else mtc + 256 - last_mtc
                ctc_delta += delta << self.mtc_shift
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
                cbr_cyc_to_tsc = self.max_non_turbo_ratio_fp / c if c else 0.0
                continue
            else:
                return
            if not cbr and self.cbr:
                cbr = self.cbr
                cbr_cyc_to_tsc = self.cbr_cyc_to_tsc
            if not cycle_cnt:
                return
            cyc_to_tsc = (timestamp - self.timestamp) / cycle_cnt
            if cbr and cyc_to_tsc > cbr_cyc_to_tsc and cyc_to_tsc / cbr_cyc_to_tsc > 1.25:
                return
            self.calc_cyc_to_tsc = cyc_to_tsc
            self.have_calc_cyc_to_tsc = True
            return

    def _calc_cbr(self) -> None:
        cbr = self.payload & 0xFF
        self.cbr_payload = self.payload
        if self.cbr == cbr:
            return
        self.cbr = cbr
        self.cbr_cyc_to_tsc = self.max_non_turbo_ratio_fp / cbr if cbr else 0.0
        # perf 6.1.y (stable backport of "Fix CYC timestamps after standalone CBR"):
        # CYC counts restart from the CBR's time.
        self.cyc_ref_timestamp = self.timestamp
        self.cycle_cnt = 0
        self.tsc_to_cyc = cbr / self.max_non_turbo_ratio_fp if self.max_non_turbo_ratio_fp else 0.0
        if self.pge:
            self._mtc_cyc_cnt_pge()

    def _calc_cyc_timestamp(self) -> None:
        ts = self.cyc_ref_timestamp
        self.have_cyc = True
        self.cycle_cnt += self.payload
        if self.pge:
            self.tot_cyc_cnt += self.payload
        self.sample_cyc = True
        if not self.cyc_ref_timestamp:
            return
        # perf adds in double precision and truncates back to u64.
        if self.have_calc_cyc_to_tsc:
            ts = int(float(ts) + self.cycle_cnt * self.calc_cyc_to_tsc)
        elif self.cbr:
            ts = int(float(ts) + self.cycle_cnt * self.cbr_cyc_to_tsc)
        else:
            return
        if ts >= self.timestamp:
            self.timestamp = ts
        self.timestamp_insn_cnt = 0

    # --------------------------------------------------------- instruction walk

    def _next_period(self) -> int:
        ts = self.timestamp + self.timestamp_insn_cnt
        masked = ts & self.period_mask
        if self.continuous_period:
            if masked > self.last_masked_timestamp:
                return 1
        else:
            ts += 1
            masked = ts & self.period_mask
            if masked > self.last_masked_timestamp:
                self.last_masked_timestamp = masked
                self.continuous_period = True
        if masked < self.last_masked_timestamp:
            return self.period_ticks
        return self.period_ticks - (ts - masked)

    def _next_sample(self) -> int:
        if self.p.period_type == PERIOD_INSTRUCTIONS:
            return self.p.period - self.period_insn_cnt
        if self.p.period_type == PERIOD_TICKS:
            return self._next_period()
        return 0

    def _sample_insn(self) -> None:
        if self.p.period_type == PERIOD_INSTRUCTIONS:
            self.period_insn_cnt = 0
        elif self.p.period_type == PERIOD_TICKS:
            ts = self.timestamp + self.timestamp_insn_cnt
            masked = ts & self.period_mask
            if masked > self.last_masked_timestamp:
                self.last_masked_timestamp = masked
            else:
                self.last_masked_timestamp += self.period_ticks
        self.state.type |= T_INSTRUCTION

    def _walk_insn(self, insn: Insn, to_ip: int) -> int:
        st = self.state
        self.mtc_insn = True
        max_insn_cnt = self._next_sample()
        err, insn_cnt, new_ip, got = self.walker.walk(self.ip, to_ip, max_insn_cnt, st.to_nr)
        self.ip = new_ip
        insn.op, insn.branch, insn.length, insn.rel = got.op, got.branch, got.length, got.rel
        self.tot_insn_cnt += insn_cnt
        self.timestamp_insn_cnt += insn_cnt
        self.sample_insn_cnt += insn_cnt
        self.period_insn_cnt += insn_cnt
        if err:
            self.no_progress = 0
            self.pkt_state = NO_IP
            return _ENOLINK if err == _ENOENT else _EILSEQ
        if to_ip and self.ip == to_ip:
            result = _EAGAIN
        else:
            if max_insn_cnt and insn_cnt >= max_insn_cnt:
                self._sample_insn()
            if insn.branch == BR_NO_BRANCH:
                st.type = T_INSTRUCTION
                st.from_ip = self.ip
                st.to_ip = 0
                self.ip += insn.length
                result = _RETURN
            else:
                if insn.op == OP_CALL:
                    if insn.branch != BR_UNCONDITIONAL or insn.rel:  # zero-length calls excluded
                        self.stack.push((self.ip + insn.length) & _MASK64)
                elif insn.op == OP_RET:
                    self.ret_addr = self.stack.pop()
                if insn.branch == BR_UNCONDITIONAL:
                    cnt = self.no_progress
                    self.no_progress += 1
                    st.from_ip = self.ip
                    self.ip = (self.ip + insn.length + insn.rel) & _MASK64
                    st.to_ip = self.ip
                    result = _RETURN
                    if cnt:
                        if cnt == 1:
                            self.stuck_ip = st.to_ip
                            self.stuck_ip_prd = 1
                            self.stuck_ip_cnt = 1
                        elif cnt > _MAX_LOOPS or st.to_ip == self.stuck_ip:
                            self.pkt_state = ERR_RESYNC
                            self.no_progress = 0
                            self._finish_walk(insn)
                            return _ELOOP
                        else:
                            self.stuck_ip_cnt -= 1
                            if not self.stuck_ip_cnt:
                                self.stuck_ip_prd += 1
                                self.stuck_ip_cnt = self.stuck_ip_prd
                                self.stuck_ip = st.to_ip
                    st.insn_op = insn.op
                    st.insn_len = insn.length
                    if self.tx_flags & F_IN_TX:
                        st.flags |= F_IN_TX
                    return result
                result = 0
        self.no_progress = 0
        self._finish_walk(insn)
        return result

    def _finish_walk(self, insn: Insn) -> None:
        st = self.state
        st.insn_op = insn.op
        st.insn_len = insn.length
        if self.tx_flags & F_IN_TX:
            st.flags |= F_IN_TX

    def _fup_event(self, no_tip: bool) -> bool:
        """perf's intel_pt_fup_event: only the bits an FUP event owns change in state.type."""
        st = self.state
        saved_type = st.type
        st.type &= ~T_BRANCH
        st.insn_op = OP_OTHER  # perf 6.1: an FUP event is no instruction (its flags show none)
        st.insn_len = 0
        ret = False
        sample_fup_insn = False
        if self.set_fup_cfe_ip or self.set_fup_cfe:
            ip = self.set_fup_cfe_ip
            self.set_fup_cfe_ip = self.set_fup_cfe = False
            st.type |= T_EVT
            if not ip and self.pge:
                st.type |= T_BRANCH
            st.cfe_type, st.cfe_vector = self.fup_cfe
            st.evd = tuple(self.evd)
            self.evd = []
            if ip or self.pge:
                st.flags |= F_FUP_IP
            ret = True
        if self.set_fup_mode_exec:
            self.set_fup_mode_exec = False
            self._sample_iflag()
            sample_fup_insn = no_tip
            ret = True
        if self.set_fup_tx_flags:
            self.set_fup_tx_flags = False
            self.tx_flags = self.fup_tx_flags
            st.type |= T_TRANSACTION
            if self.fup_tx_flags & F_ABORT_TX:
                st.type |= T_BRANCH
            st.flags = self.fup_tx_flags
            ret = True
        if self.set_fup_ptw:
            self.set_fup_ptw = False
            st.type |= T_PTW
            st.flags |= F_FUP_IP
            st.ptw_payload = self.fup_ptw_payload
            ret = True
        if self.set_fup_mwait:
            self.set_fup_mwait = False
            st.type |= T_MWAIT_OP
            st.mwait_payload = self.fup_mwait_payload
            ret = True
        if self.set_fup_pwre:
            self.set_fup_pwre = False
            st.type |= T_PWR_ENTRY
            st.pwre_payload = self.fup_pwre_payload
            ret = True
        if self.set_fup_exstop:
            self.set_fup_exstop = False
            st.type |= T_EX_STOP
            st.flags |= F_FUP_IP
            ret = True
        if self.set_fup_bep:
            self.set_fup_bep = False
            st.type |= T_BLK_ITEMS
            ret = True
        if self.overflow:
            # The FUP after an OVF says where tracing goes on: a trace begin.
            self.overflow = False
            if not ret and not self.pge:
                if self.p.quick:
                    st.type = 0
                    self.pkt_state = RESAMPLE
                self.pge = True
                st.type |= T_BRANCH | T_TRACE_BEGIN
                st.from_ip = 0
                st.to_ip = self.ip
                return True
        if ret:
            st.from_ip = self.ip
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
        if not self.p.branch_enable or not self.pge or self.p.quick or self.ip != self.last_ip:
            return
        self.mtc_insn = True
        max_insn_cnt = self._next_sample()
        if max_insn_cnt != 1:
            return
        err, insn_cnt, new_ip, insn = self.walker.walk(self.ip, 0, max_insn_cnt, st.to_nr)
        if err:
            return  # reported by the next walk
        self.ip = new_ip
        if insn.branch != BR_NO_BRANCH:
            return
        self.tot_insn_cnt += insn_cnt
        self.timestamp_insn_cnt += insn_cnt
        self.sample_insn_cnt += insn_cnt
        self.period_insn_cnt += insn_cnt
        self._sample_insn()
        st.type |= T_INSTRUCTION
        self.ip += insn.length

    # RFLAGS.IF (Event Trace): MODE.Exec in PSB+ states it, elsewhere it changes at the next branch.
    def _mode_exec_status(self) -> None:
        iflag = bool(self.count & _IFLAG)
        self.exec_mode = self.payload
        self.iflag = self.next_iflag = iflag
        self.state.from_iflag = self.state.to_iflag = iflag

    def _mode_exec(self) -> None:
        self.exec_mode = self.payload
        self.next_iflag = bool(self.count & _IFLAG)

    def _sample_iflag(self) -> None:
        st = self.state
        st.type |= T_IFLAG_CHG
        st.from_iflag = self.iflag
        st.to_iflag = self.next_iflag
        self.iflag = self.next_iflag

    def _sample_iflag_chg(self) -> None:
        if self.iflag != self.next_iflag:
            self._sample_iflag()

    def _clear_fup_event(self) -> None:
        self.set_fup_tx_flags = self.set_fup_ptw = self.set_fup_mwait = False
        self.set_fup_pwre = self.set_fup_exstop = self.set_fup_bep = False
        self.set_fup_cfe_ip = self.set_fup_cfe = False
        self.evd = []
        self.set_fup_mode_exec = False
        self.iflag = self.next_iflag

    def _walk_fup(self) -> int:
        insn = Insn()
        ip = self.last_ip
        while True:
            err = self._walk_insn(insn, ip)
            if err == _RETURN:
                return 0
            if err == _EAGAIN or (
                self.p.fup_with_nlip and not err and insn.branch == BR_INDIRECT
                and ip == self.ip + insn.length
            ):
                no_tip = self.pkt_state != FUP
                self.pkt_state = IN_SYNC
                if self._fup_event(no_tip) and no_tip:
                    return 0
                return _EAGAIN
            self.set_fup_tx_flags = False
            if err:
                return err
            if insn.branch in (BR_INDIRECT, BR_CONDITIONAL):
                self.pkt_state = ERR_RESYNC
                return _ENOENT
            return self._bug()

    def _walk_tip(self) -> int:
        st = self.state
        insn = Insn()
        err = self._walk_insn(insn, 0)
        if err == _RETURN:
            return 0
        if err:
            return err
        self._update_nr()
        self._sample_iflag_chg()
        if insn.branch == BR_INDIRECT:
            if self.pkt_state == TIP_PGD:
                self.pge = False
                self.continuous_period = False
                st.type |= T_TRACE_END
            self.pkt_state = IN_SYNC
            st.from_ip = self.ip
            if self.count == 0:
                st.to_ip = 0
            else:
                st.to_ip = self.last_ip
                self.ip = self.last_ip
            return 0
        if insn.branch == BR_CONDITIONAL:
            self.pkt_state = ERR_RESYNC
            return _ENOENT
        return self._bug()

    def _walk_tnt(self) -> int:
        st = self.state
        insn = Insn()
        while True:
            err = self._walk_insn(insn, 0)
            if err == _RETURN:
                return 0
            if err:
                return err
            if insn.op == OP_RET:
                if not self.p.return_compression or not self.ret_addr or not (self.tnt_payload & _BIT63):
                    self.pkt_state = ERR_RESYNC
                    return _ENOENT
                self.tnt_count -= 1
                self.pkt_state = TNT_CONT if self.tnt_count else IN_SYNC
                self.tnt_payload = (self.tnt_payload << 1) & _MASK64
                st.from_ip = self.ip
                self.ip = self.ret_addr
                st.to_ip = self.ip
                return 0
            if insn.branch == BR_INDIRECT:
                # A deferred TIP must come next.
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind != Pkt.TIP or self.count == 0:
                    self.pkt_state = ERR_RESYNC
                    self.step = 0
                    return _ENOENT
                self._set_last_ip()
                st.from_ip = self.ip
                st.to_ip = self.last_ip
                self.ip = self.last_ip
                self._update_nr()
                self._sample_iflag_chg()
                return 0
            if insn.branch == BR_CONDITIONAL:
                self.tnt_count -= 1
                self.pkt_state = TNT_CONT if self.tnt_count else IN_SYNC
                if self.tnt_payload & _BIT63:
                    self.tnt_payload = (self.tnt_payload << 1) & _MASK64
                    st.from_ip = self.ip
                    self.ip = (self.ip + insn.length + insn.rel) & _MASK64
                    st.to_ip = self.ip
                    return 0
                if st.type & T_INSTRUCTION:  # instruction sample at a not-taken branch
                    self.tnt_payload = (self.tnt_payload << 1) & _MASK64
                    st.type = T_INSTRUCTION
                    st.from_ip = self.ip
                    st.to_ip = 0
                    self.ip += insn.length
                    return 0
                self.sample_cyc = False
                self.ip += insn.length
                if not self.tnt_count:
                    self._update_sample_time()
                    return _EAGAIN
                self.tnt_payload = (self.tnt_payload << 1) & _MASK64
                continue
            return self._bug()

    def _mode_tsx(self) -> tuple[int, bool]:
        fup_tx_flags = self.payload & (F_IN_TX | F_ABORT_TX)
        err = self._get_next_packet()
        if err:
            return err, False
        no_tip = False
        if self.kind == Pkt.FUP:
            self.fup_tx_flags = fup_tx_flags
            self.set_fup_tx_flags = True
            if not fup_tx_flags & F_ABORT_TX:
                no_tip = True
        else:
            self._update_in_tx()
        return 0, no_tip

    def _overflow(self) -> int:
        # perf >= 5.16: an OVF loses data but not sync; the error's ip is where the walk was.
        self.tx_flags = 0
        self._set_nr()
        self.timestamp_insn_cnt = 0
        self.pkt_state = IN_SYNC
        self.state.from_ip = self.ip
        self.ip = 0
        self.pge = False
        self._clear_fup_event()
        self.overflow = True
        return _EOVERFLOW

    # --------------------------------------------------------------- PSB walks

    def _walk_psbend(self) -> int:
        """Process PSB+ when already in sync."""
        self.in_psb = True
        try:
            while True:
                err = self._get_next_packet()
                if err:
                    return err
                k = self.kind
                if k == Pkt.PSBEND:
                    return 0
                if k in _PSB_ABORT:
                    self.have_tma = False
                    return _EAGAIN
                if k == Pkt.OVF:
                    return self._overflow()
                self._psb_common(k, psb_walk=False)
        finally:
            self.in_psb = False

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
            self.pge = True
            if psb_walk:
                if self._have_ip():
                    self._set_ip()
                    self.psb_ip = self.ip
            elif self.count:
                self._set_last_ip()
                self.psb_ip = self.last_ip
        elif k == Pkt.MODE_TSX:
            self._update_in_tx()
        elif k == Pkt.MTC:
            self._calc_mtc_timestamp()
            if not psb_walk and self.p.period_type == PERIOD_MTC:
                self.state.type |= T_INSTRUCTION
        elif k == Pkt.CYC:
            self._calc_cyc_timestamp()

    def _walk_psb(self) -> int:
        """Process PSB+ to get in sync."""
        self.in_psb = True
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
                        self.continuous_period = False
                    return _ENOENT
                if k in (Pkt.TRACESTOP, Pkt.TNT):
                    if k == Pkt.TRACESTOP:
                        self.pge = False
                        self.continuous_period = False
                        self.tx_flags = 0
                    self.have_tma = False
                    self.pkt_state = IN_SYNC if self.ip else ERR_RESYNC
                    return _ENOENT
                if k == Pkt.OVF:
                    return self._overflow()
                self._psb_common(k, psb_walk=True)
        finally:
            self.in_psb = False

    def _psb(self) -> int:
        st = self.state
        self.last_ip = 0
        self.psb_ip = 0
        self.have_last_ip = True
        self.stack.clear()
        err = self._walk_psbend()
        if err:
            return err
        st.type = T_PSB_EVT
        st.from_ip = self.psb_ip
        st.to_ip = 0
        return 0

    def _fup_in_psb(self) -> int:
        if self.ip != self.last_ip:
            err = self._walk_fup()
            if not err or err != _EAGAIN:
                return err
        self.pkt_state = IN_SYNC
        if self._psb():
            self.pkt_state = ERR_RESYNC
            return _ENOENT
        return 0

    def _psb_with_fup(self) -> tuple[bool, int]:
        """If PSB+ carries a FUP (not followed by TIP.PGE), walk to it first."""
        if not self.p.branch_enable or not self.pge:
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
        self.pkt_state = FUP_IN_PSB
        return True, self._fup_in_psb()

    # --------------------------------------------------------------- main walk

    def _walk_trace(self) -> int:
        st = self.state
        no_tip = False
        cyc_threshold = self.p.cyc_threshold
        # With a CYC threshold not every packet that could carry a CYC has one: a CYC counts
        # toward IPC only for the packet right after it (perf: "Fix IPC with CYC threshold").
        # The previous packet is this walk's own: a new walk starts as if after a PAD.
        prev_kind = Pkt.PAD
        err = self._get_next_packet()
        if err:
            return err
        while True:
            if cyc_threshold:
                if self.sample_cyc and prev_kind != Pkt.CYC:
                    self.sample_cyc = False
                prev_kind = self.kind
            if self.p.quick:
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
                    self.tnt_count = self.count
                    self.tnt_payload = self.payload
                    self.pkt_state = TNT
                    err = self._walk_tnt()
                    if err != _EAGAIN:
                        return err
            elif k == Pkt.TIP_PGD:
                if self.count:
                    self._set_last_ip()
                self.pkt_state = TIP_PGD
                return self._walk_tip()
            elif k == Pkt.TIP_PGE:
                self.pge = True
                self.overflow = False
                self._mtc_cyc_cnt_pge()
                self._set_nr()
                if self.count:
                    self._sample_iflag_chg()
                    self._set_ip()
                    st.from_ip = 0
                    st.to_ip = self.ip
                    st.type |= T_TRACE_BEGIN
                    if self.p.quick:  # resample to get to_ip as an "instruction" sample
                        self.pkt_state = RESAMPLE
                    return 0
            elif k == Pkt.OVF:
                return self._overflow()
            elif k == Pkt.TIP:
                if self.count:
                    self._set_last_ip()
                self.pkt_state = TIP
                return self._walk_tip()
            elif k == Pkt.FUP:
                if self.count == 0:
                    no_tip = False
                else:
                    self._set_last_ip()
                    if not self.p.branch_enable or not self.pge:
                        self.ip = self.last_ip
                        if self._fup_event(no_tip):
                            return 0
                        no_tip = False
                    else:
                        if self.set_fup_mwait:
                            no_tip = True
                        self.pkt_state = FUP_NO_TIP if no_tip else FUP
                        err = self._walk_fup()
                        if err != _EAGAIN:
                            return err
                        if not no_tip:
                            return self._walk_fup_tip()
                        no_tip = False
            elif k == Pkt.TRACESTOP:
                self.pge = False
                self.continuous_period = False
                self.tx_flags = 0
                self.have_tma = False
            elif k == Pkt.PSB:
                st.psb_offset = self._abs_pos()
                self.psb_ip = 0
                done, err = self._psb_with_fup()
                if done:
                    return err
                err = self._psb()
                if err == _EAGAIN:
                    continue  # re-examine the packet that ended PSB+
                return err
            elif k == Pkt.PIP:
                self._update_pip()
            elif k == Pkt.MTC:
                self._calc_mtc_timestamp()
                if self.p.period_type == PERIOD_MTC and self.mtc_insn and self.timestamp:
                    self.mtc_insn = False
                    st.type = T_INSTRUCTION
                    st.from_ip = self.ip
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
                if self.cbr != self.cbr_seen:
                    st.type = 0
                    return 0
            elif k == Pkt.MODE_EXEC:
                self._mode_exec()
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    self.set_fup_mode_exec = True
                    no_tip = True
                continue  # examine the packet after MODE.Exec
            elif k == Pkt.CFE:
                self.fup_cfe = (self.count, self.payload)
                self.set_fup_cfe = True
                if not self.pge:
                    self._fup_event(True)
                    return 0
            elif k == Pkt.CFE_IP:
                self.fup_cfe = (self.count, self.payload)
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    self.set_fup_cfe_ip = True
                    no_tip = True
                continue  # the FUP (or whatever came instead) next
            elif k == Pkt.EVD:
                if len(self.evd) >= _MAX_EVDS:
                    return _ENOSYS  # perf: "Too many EVD packets"
                self.evd.append((self.count, self.payload))
            elif k == Pkt.MODE_TSX:
                if not self.pge or self.in_psb:
                    self._update_in_tx()
                else:
                    err, nt = self._mode_tsx()
                    if err:
                        return err
                    no_tip = no_tip or nt
                    continue  # examine the packet after MODE.TSX
            elif k == Pkt.PTWRITE_IP:
                self.fup_ptw_payload = self.payload
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    self.set_fup_ptw = True
                    no_tip = True
                continue
            elif k == Pkt.PTWRITE:
                st.type = T_PTW
                st.from_ip = self.ip
                st.to_ip = 0
                st.ptw_payload = self.payload
                return 0
            elif k == Pkt.MWAIT:
                self.fup_mwait_payload = self.payload
                self.set_fup_mwait = True
            elif k == Pkt.PWRE:
                if self.set_fup_mwait:
                    self.fup_pwre_payload = self.payload
                    self.set_fup_pwre = True
                else:
                    st.type = T_PWR_ENTRY
                    st.from_ip = self.ip
                    st.to_ip = 0
                    st.pwrx_payload = self.payload
                    return 0
            elif k == Pkt.EXSTOP_IP:
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    self.set_fup_exstop = True
                    no_tip = True
                continue
            elif k == Pkt.EXSTOP:
                st.type = T_EX_STOP
                st.from_ip = self.ip
                st.to_ip = 0
                return 0
            elif k == Pkt.PWRX:
                st.type = T_PWR_EXIT
                st.from_ip = self.ip
                st.to_ip = 0
                st.pwrx_payload = self.payload
                return 0
            elif k == Pkt.BEP:
                st.type = T_BLK_ITEMS
                st.from_ip = self.ip
                st.to_ip = 0
                return 0
            elif k == Pkt.BEP_IP:
                err = self._get_next_packet()
                if err:
                    return err
                if self.kind == Pkt.FUP:
                    self.set_fup_bep = True
                    no_tip = True
                continue
            # PSBEND, VMCS, MNT, PAD, BBP, BIP: nothing to do here.
            err = self._get_next_packet()
            if err:
                return err

    def _hop_trace(self, no_tip: bool) -> tuple[int, int, bool]:
        """perf's intel_pt_hop_trace: ips from FUP and TIP packets, TNT ignored, no code walked."""
        st = self.state
        if self.p.quick >= 2 and not self.in_psb and self.kind != Pkt.PSB:
            err = self._scan_for_psb()  # leap: PSB to PSB, the ip from the FUP in PSB+
            if err:
                return _HOP_RETURN, err, no_tip
        k = self.kind
        if k == Pkt.TNT:
            return _HOP_IGNORE, 0, no_tip
        if k == Pkt.TIP_PGD:
            self.pge = False
            if not self.count:
                self._set_nr()
                return _HOP_IGNORE, 0, no_tip
            self._set_ip()
            st.type |= T_TRACE_END
            st.from_ip = 0
            st.to_ip = self.ip
            self._update_nr()
            return _HOP_RETURN, 0, no_tip
        if k == Pkt.TIP:
            if not self.count:
                self._set_nr()
                return _HOP_IGNORE, 0, no_tip
            self._set_ip()
            st.type = T_INSTRUCTION
            st.from_ip = self.ip
            st.to_ip = 0
            self._update_nr()
            self._sample_iflag_chg()
            return _HOP_RETURN, 0, no_tip
        if k == Pkt.FUP:
            if not self.count:
                return _HOP_IGNORE, 0, no_tip
            self._set_ip()
            if self.set_fup_mwait or self.set_fup_pwre or not self.p.branch_enable or not self.pge:
                no_tip = True
            if no_tip:
                st.type = T_INSTRUCTION
                st.from_ip = self.ip
                st.to_ip = 0
                self._fup_event(no_tip)
                return _HOP_RETURN, 0, no_tip
            self._fup_event(no_tip)
            st.type |= T_INSTRUCTION | T_BRANCH
            err = self._walk_fup_tip()
            if not err and st.to_ip:
                self.pkt_state = RESAMPLE
            return _HOP_RETURN, err, no_tip
        if k == Pkt.PSB:
            st.psb_offset = self._abs_pos()
            self.psb_ip = 0
            self.last_ip = 0
            self.have_last_ip = True
            err = self._walk_psbend()
            if err == _EAGAIN:
                return _HOP_AGAIN, 0, no_tip
            if err:
                return _HOP_RETURN, err, no_tip
            st.type = T_PSB_EVT
            if self.psb_ip:
                st.type |= T_INSTRUCTION
                self.ip = self.psb_ip
            st.from_ip = self.psb_ip
            st.to_ip = 0
            return _HOP_RETURN, 0, no_tip
        return _HOP_PROCESS, 0, no_tip

    def _walk_fup_tip(self) -> int:
        st = self.state
        if self.tx_flags & F_ABORT_TX:
            self.tx_flags = 0
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
                self.pkt_state = ERR_RESYNC
                self.step = 0
                return _ENOENT
            if k == Pkt.CBR:
                self._calc_cbr()
            elif k == Pkt.OVF:
                return self._overflow()
            elif k == Pkt.TIP_PGD:
                st.from_ip = self.ip
                if self.count == 0:
                    st.to_ip = 0
                else:
                    self._set_ip()
                    st.to_ip = self.ip
                self.pge = False
                self.continuous_period = False
                st.type |= T_TRACE_END
                self._update_nr()
                return 0
            elif k == Pkt.TIP_PGE:
                self.pge = True
                st.from_ip = 0
                if self.count == 0:
                    st.to_ip = 0
                else:
                    self._set_ip()
                    st.to_ip = self.ip
                st.type |= T_TRACE_BEGIN
                self._mtc_cyc_cnt_pge()
                self._set_nr()
                return 0
            elif k == Pkt.TIP:
                st.from_ip = self.ip
                if self.count == 0:
                    st.to_ip = 0
                else:
                    self._set_ip()
                    st.to_ip = self.ip
                self._update_nr()
                self._sample_iflag_chg()
                return 0
            elif k == Pkt.PIP:
                self._update_pip()
            elif k == Pkt.MTC:
                self._calc_mtc_timestamp()
                if self.p.period_type == PERIOD_MTC:
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
        while True:
            err = self._get_next_packet()
            if err:
                return err
            k = self.kind
            if k == Pkt.TIP_PGD:
                self.continuous_period = False
                self.pge = False
                if self._have_ip():
                    self._set_ip()
                if self.ip:
                    st.type |= T_TRACE_END
                    return 0
            elif k == Pkt.TIP_PGE:
                self.pge = True
                self._mtc_cyc_cnt_pge()
                if self._have_ip():
                    self._set_ip()
                if self.ip:
                    st.type |= T_TRACE_BEGIN
                    return 0
            elif k == Pkt.TIP:
                self.pge = True
                if self._have_ip():
                    self._set_ip()
                if self.ip:
                    return 0
            elif k == Pkt.FUP:
                if self._have_ip():
                    self._set_ip()
                if self.ip:
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
                self.pge = False
                self.continuous_period = False
                self.tx_flags = 0
                self.have_tma = False
            elif k == Pkt.PSB:
                st.psb_offset = self._abs_pos()
                self.psb_ip = 0
                self.last_ip = 0
                self.have_last_ip = True
                self.stack.clear()
                err = self._walk_psb()
                if err:
                    return err
                st.type = T_PSB_EVT
                st.from_ip = self.psb_ip
                st.to_ip = 0
                return 0

    def _sync_ip(self) -> int:
        st = self.state
        self._clear_fup_event()
        self.overflow = False
        if not self.p.branch_enable:
            self.pkt_state = IN_SYNC
            st.type = 0
            return 0
        err = self._walk_to_ip()
        if err or ((st.type & T_PSB_EVT) and not self.ip):
            return err
        self.pkt_state = RESAMPLE if self.p.quick else IN_SYNC  # hop: resample to_ip as an instruction
        st.from_ip = 0
        st.to_ip = self.ip
        return 0

    def _scan_for_psb(self) -> int:
        """Skip to the next PSB (perf's scan_for_psb); re-tokenize when it is mid-token."""
        while True:
            if self.buf_idx < 0 or self.idx + self.step >= len(self.kinds):
                err = self._get_data()
                if err:
                    return err  # no more data, or a new non-consecutive buffer
            buf = self.buffers[self.buf_idx]
            data = buf.data if isinstance(buf.data, bytes) else bytes(buf.data)
            at = data.find(PSB_BYTES, self.poss[self.idx + self.step])
            if at < 0:
                self.idx = len(self.kinds)
                self.step = 0
                continue
            self.idx = self._index_at(at)
            self.step = 0
            return self._get_next_packet()

    def _index_at(self, byte_pos: int) -> int:
        """Index of the packet starting at ``byte_pos``, re-tokenizing the rest if needed."""
        j = bisect.bisect_left(self.poss, byte_pos)
        if j < len(self.poss) and self.poss[j] == byte_pos:
            return j
        buf = self.buffers[self.buf_idx]
        tail = tokenize(buf.data[byte_pos:])
        self.kinds = self.kinds[:j] + tail.kind.tolist()
        self.counts = self.counts[:j] + tail.count.tolist()
        self.payloads = self.payloads[:j] + tail.payload.tolist()
        self.poss = self.poss[:j] + [p + byte_pos for p in tail.pos.tolist()]
        return j

    def _sync(self) -> int:
        st = self.state
        self.pge = False
        self.continuous_period = False
        self.have_last_ip = False
        self.last_ip = 0
        self.psb_ip = 0
        self.ip = 0
        self.stack.clear()
        err = self._scan_for_psb()
        if err:
            return err
        self.have_last_ip = True
        self.pkt_state = IN_SYNC  # perf 6.x: a PSB+ without an IP still leaves the decoder in sync
        err = self._walk_psb()
        if err:
            return err
        st.type = T_PSB_EVT
        st.from_ip = self.psb_ip
        st.to_ip = 0
        if self.ip:
            self.pkt_state = RESAMPLE if self.p.quick else IN_SYNC  # hop: the PSB FUP ip as an instruction
        return 0

    def _est_timestamp(self) -> int:
        est = self.sample_insn_cnt << 1
        if self.cbr and self.p.max_non_turbo_ratio:
            est = est * self.p.max_non_turbo_ratio // self.cbr
        return self.sample_timestamp + est

    # ----------------------------------------------------------------- public

    def decode(self) -> State:
        """Decode up to the next sample-worthy state; ``state.err`` is set on errors."""
        st = self.state
        while True:
            st.type = T_BRANCH
            st.flags = 0
            ps = self.pkt_state
            if ps == NO_PSB:
                err = self._sync()
            elif ps in (NO_IP, ERR_RESYNC):
                if ps == NO_IP:
                    self.have_last_ip = False
                    self.last_ip = 0
                    self.ip = 0
                err = self._sync_ip()
            elif ps == IN_SYNC:
                err = self._walk_trace()
            elif ps in (TNT, TNT_CONT):
                err = self._walk_tnt()
                if err == _EAGAIN:
                    err = self._walk_trace()
            elif ps in (TIP, TIP_PGD):
                err = self._walk_tip()
            elif ps == FUP:
                err = self._walk_fup()
                if err == _EAGAIN:
                    err = self._walk_fup_tip()
            elif ps == FUP_NO_TIP:
                err = self._walk_fup()
                if err == _EAGAIN:
                    err = self._walk_trace()
            elif ps == FUP_IN_PSB:
                err = self._fup_in_psb()
            elif ps == RESAMPLE:
                self.pkt_state = IN_SYNC
                st.type = T_INSTRUCTION
                st.from_ip = self.ip
                st.to_ip = 0
                err = 0
            else:
                err = self._bug()
            if err != _ENOLINK:
                break
        st.pos = self._abs_pos()
        if err:
            st.err = _ERRNO_TO_CODE.get(err, ERR_UNK)
            if err != _EOVERFLOW:
                st.from_ip = self.ip
            self._update_sample_time()
            self.sample_tot_cyc_cnt = self.tot_cyc_cnt
            self._set_nr()
        else:
            st.err = 0
            if self.cbr != self.cbr_seen:
                self.cbr_seen = self.cbr
                if not st.type:
                    st.from_ip = self.ip
                    st.to_ip = 0
                st.type |= T_CBR_CHG
                st.cbr_payload = self.cbr_payload
                st.cbr = self.cbr
            if self.pkt_state in (NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT, RESAMPLE):
                self._update_sample_time()
                if self.sample_cyc:
                    self.sample_tot_cyc_cnt = self.tot_cyc_cnt
                    st.flags |= F_SAMPLE_IPC
                    self.sample_cyc = False
            if not self.have_cyc:
                st.flags |= F_SAMPLE_IPC
        if (st.type & T_PSB_EVT) and self.tsc_timestamp:
            self.sample_timestamp = self.tsc_timestamp
        st.from_nr = self.nr
        st.to_nr = self.next_nr
        self.nr = self.next_nr
        st.timestamp = self.sample_timestamp
        st.est_timestamp = self._est_timestamp()
        st.tot_insn_cnt = self.tot_insn_cnt
        st.tot_cyc_cnt = self.sample_tot_cyc_cnt
        return st
