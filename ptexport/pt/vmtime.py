"""VM time correlation: find the VMX TSC offset of each VMCS from the trace, and translate
guest TSC packets to host TSC (what ``perf inject --vm-time-correlation`` does).

In VMX non-root operation the TSC packets carry the guest TSC (host TSC + the VMCS's TSC
offset) while MTC and TMA count the crystal clock, which VMX does not offset.  So a TSC
packet can be compared with the TSC the MTC/TMA chain predicts for it: the difference is
the offset.  This module walks each queue's packets with perf's rules
(tools/perf/util/intel-pt-decoder: intel_pt_vm_time_correlation and its helpers):

- a TSC in a PSB+ whose PIP has NR=1 is a guest TSC; with NR=0 a host TSC; without a PIP
  (or outside a PSB+ while tracing is disabled) host or guest is guessed from the time;
- an offset is assigned to a VMCS (and printed as ``VMCS: 0x..  TSC Offset 0x..``) from a
  guest TSC in a PSB+ that is not the first of its AUX buffer;
- every guest TSC is translated with its VMCS's offset (payload - offset, 7 bytes); the
  translations are returned as patches so a caller can rewrite a copy of the file.

Messages are perf's texts, in the order found.  Queues share the VMCS table, as in perf.
CYC-based timestamps are not modelled (they only change the "Timestamp out of range" check
in traces recorded with cyc).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ptexport.pt.packets import PacketKind as K
from ptexport.pt.perfpkt import Pkt, tokenize

M64 = (1 << 64) - 1
SEVEN_BYTES = (1 << 56) - 1
NO_VMCS = 0xFFFFFFFFFF
TSC_SLIP = 0x10000


@dataclass
class VmcsInfo:
    vmcs: int
    tsc_offset: int = 0
    reliable: bool = False
    error_printed: bool = False


@dataclass
class VmTimeConfig:
    """Timing parameters (as perf derives them from AUXTRACE_INFO and the attr) and the
    offsets given by the user: ``default_offset`` for every VMCS, ``offsets`` per VMCS."""

    mtc_period: int
    tsc_ctc_ratio_n: int
    tsc_ctc_ratio_d: int
    default_offset: int = 0
    offsets: dict[int, int] = field(default_factory=dict)
    first_timestamp: int = 0


@dataclass
class VmBuffer:
    data: bytes | bytearray | memoryview
    ref_timestamp: int
    consecutive: bool


@dataclass(frozen=True)
class TscPatch:
    """Rewrite the 7-byte payload of the TSC packet at ``pos`` of buffer ``buffer``."""

    buffer: int
    pos: int
    old: int
    new: int


def _kind_table() -> np.ndarray:
    t = np.full(256, int(Pkt.BAD), dtype=np.uint8)
    pairs = {K.PAD: Pkt.PAD, K.TNT_8: Pkt.TNT, K.TNT_64: Pkt.TNT, K.TIP: Pkt.TIP,
             K.TIP_PGE: Pkt.TIP_PGE, K.TIP_PGD: Pkt.TIP_PGD, K.FUP: Pkt.FUP, K.PIP: Pkt.PIP,
             K.MODE_EXEC: Pkt.MODE_EXEC, K.MODE_TSX: Pkt.MODE_TSX, K.STOP: Pkt.TRACESTOP,
             K.CBR: Pkt.CBR, K.TSC: Pkt.TSC, K.MTC: Pkt.MTC, K.TMA: Pkt.TMA, K.CYC: Pkt.CYC,
             K.VMCS: Pkt.VMCS, K.OVF: Pkt.OVF, K.PSB: Pkt.PSB, K.PSBEND: Pkt.PSBEND,
             K.MNT: Pkt.MNT, K.PTW: Pkt.PTWRITE, K.EXSTOP: Pkt.EXSTOP, K.MWAIT: Pkt.MWAIT,
             K.PWRE: Pkt.PWRE, K.PWRX: Pkt.PWRX, K.BBP: Pkt.BBP, K.BIP: Pkt.BIP,
             K.BEP: Pkt.BEP, K.CFE: Pkt.CFE, K.EVD: Pkt.EVD}
    for a, b in pairs.items():
        t[int(a)] = int(b)
    return t


def packet_arrays(data) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`packet_lists` as numpy arrays (kinds uint8, counts and payloads uint64, offsets int64), from
    the compiled columnar decoder (numba must be loaded)."""
    from ptexport.pt import packets_compiled as fastdecode  # lazy: loads numba (start-up time)

    cols, _errors = fastdecode.decode_columns(data)
    kind = cols["kind"]
    keep = kind != int(K.PAD)          # perf's lookaheads skip PADs; nothing else does
    kind = kind[keep]
    p0 = cols["p0"][keep]
    p1 = cols["p1"][keep]
    payload = p0.copy()
    pip = kind == int(K.PIP)
    payload[pip] = p1[pip] & np.uint64(1)
    vm = kind == int(K.VMCS)
    payload[vm] = p0[vm] >> np.uint64(12)
    count = np.zeros(len(kind), dtype=np.uint64)
    tma = kind == int(K.TMA)
    count[tma] = p1[tma]
    return _KINDS[kind], count, payload, cols["offset"][keep]


def packet_lists(data) -> tuple[list, list, list, list]:
    """(kinds as Pkt, counts, payloads, offsets) of a buffer, payloads in perf's form (PIP:
    the NR bit; VMCS: the raw 40-bit field; TMA: CTC with the fast counter as count).

    The compiled columnar decoder is used when numba is installed (a decode error there
    resynchronizes at the next PSB, as perf's decoder does after a bad packet); otherwise
    the perf-style tokenizer."""
    from ptexport.pt import packets_compiled as fastdecode  # lazy: loads numba (start-up time)
    if fastdecode.numba is None:
        pk = tokenize(data)
        return pk.kind.tolist(), pk.count.tolist(), pk.payload.tolist(), pk.pos.tolist()
    kinds, counts, payloads, offsets = packet_arrays(data)
    return kinds.tolist(), counts.tolist(), payloads.tolist(), offsets.tolist()


def parse_offsets(spec: str) -> tuple[int, dict[int, int]]:
    """perf's option syntax: ``[<TSC Offset> [: <VMCS> [, <VMCS>]...]]...`` (hex or decimal).
    Returns (default offset, {vmcs: offset}); raises ValueError on bad text."""
    default = 0
    per: dict[int, int] = {}
    for word in spec.replace(" :", ":").replace(": ", ":").replace(", ", ",").split():
        off_s, _, vm_s = word.partition(":")
        off = int(off_s, 0) & M64
        if vm_s:
            for v in vm_s.split(","):
                per[int(v, 0)] = off
        else:
            default = off
    return default, per


def _eight_byte_tsc(ts: int, ref: int) -> int:
    ts |= ref & (0xFF << 56)
    if ts < ref:
        if ref - ts > (1 << 55):
            ts += 1 << 56
    elif ts - ref > (1 << 55):
        ts -= 1 << 56
    return ts & M64


class _Lookahead:
    """What perf's lookahead callbacks collect (struct intel_pt_vm_tsc_info)."""

    __slots__ = ("pip", "pip_payload", "vmcs", "vmcs_payload", "tma", "tma_ctc", "tma_fc", "tsc",
                 "psbend", "ctc_delta", "last_ctc")

    def __init__(self, ctc_delta: int = 0, last_ctc: int = 0) -> None:
        self.pip = self.vmcs = self.tma = self.tsc = self.psbend = False
        self.pip_payload = self.vmcs_payload = self.tma_ctc = self.tma_fc = 0
        self.ctc_delta = ctc_delta
        self.last_ctc = last_ctc


_KINDS = _kind_table()


# Packets _Queue.run acts on; every other kind (CYC, MODE, CBR, PTW, power events...) is passed over.
_ACTED = np.array(sorted(int(p) for p in (Pkt.BAD, Pkt.TIP_PGD, Pkt.TNT, Pkt.TIP, Pkt.TIP_PGE, Pkt.OVF, Pkt.FUP,
                                          Pkt.TRACESTOP, Pkt.PSB, Pkt.PIP, Pkt.MTC, Pkt.TSC, Pkt.TMA, Pkt.PSBEND,
                                          Pkt.VMCS)), dtype=np.int64)
_BRANCHY = np.array(sorted(int(p) for p in (Pkt.TNT, Pkt.TIP, Pkt.TIP_PGE)), dtype=np.int64)


def _walked(kinds: list) -> list[int]:
    """Indices of the packets :meth:`_Queue.run` must visit: those it acts on, less every TNT/TIP/TIP.PGE
    that follows another of them with nothing acted on between (all three only set PacketEn, so a run of
    them is its first).  The lookaheads still see every packet."""
    ka = np.asarray(kinds, dtype=np.int64)
    idx = np.flatnonzero(np.isin(ka, _ACTED))
    b = np.isin(ka[idx], _BRANCHY)
    keep = np.ones(len(idx), dtype=bool)
    keep[1:] = ~(b[1:] & b[:-1])
    return idx[keep].tolist()


class VmTimeCorrelator:
    """Runs perf's VM time correlation over queues; collects messages and TSC patches."""

    def __init__(self, cfg: VmTimeConfig) -> None:
        self.cfg = cfg
        self.vmcs_table: dict[int, VmcsInfo] = {}
        self.messages: list[str] = []
        # (queue, perf's timestamp (TSC) at the packet, VMCS) of every VMCS packet seen after
        # the first timestamp: which thread ran which VMCS is a sideband question
        self.vmcs_seen: list[tuple[object, int, int]] = []
        n, d = cfg.tsc_ctc_ratio_n, cfg.tsc_ctc_ratio_d
        self.mult = n // d if n and d and n % d == 0 else 0

    # -- shared state ----------------------------------------------------------------------

    def _findnew_vmcs(self, vmcs: int) -> VmcsInfo | None:
        cfg = self.cfg
        if not vmcs and not cfg.default_offset:
            return None
        info = self.vmcs_table.get(vmcs)
        if info is None:
            off = cfg.offsets.get(vmcs, cfg.default_offset)
            info = self.vmcs_table[vmcs] = VmcsInfo(vmcs, off, reliable=bool(off))
        return info

    def _ctc_to_tsc(self, ctc: int) -> int:
        if self.mult:
            return (ctc * self.mult) & M64
        n, d = self.cfg.tsc_ctc_ratio_n, self.cfg.tsc_ctc_ratio_d
        if not d:
            return 0
        return ((ctc // d) * n + ((ctc % d) * n) // d) & M64

    # -- one queue -------------------------------------------------------------------------

    def run_queue(self, buffers: list[VmBuffer], queue: object = None) -> list[TscPatch]:
        """Walk one queue's buffers (in order); returns the TSC packets translated."""
        q = _Queue(self, buffers)
        q.queue = queue
        return q.run()


class _Queue:
    def __init__(self, owner: VmTimeCorrelator, buffers: list[VmBuffer]) -> None:
        self.o = owner
        self.buffers = buffers
        cfg = owner.cfg
        self.mtc_shift = cfg.mtc_period
        self.ctc_rem_mask = (1 << cfg.mtc_period) - 1
        self.have_d = bool(cfg.tsc_ctc_ratio_d)
        self.timestamp = self.tsc_timestamp = self.ref_timestamp = self.buf_timestamp = 0
        self.ctc_timestamp = self.ctc_delta = self.last_ctc = self.last_mtc = 0
        self.have_tma = self.fixup_last_mtc = False
        self.pge = self.in_psb = False
        self.pip_payload = 0
        self.vmcs = NO_VMCS
        self.reliable = self.continuous = self.same_buf = False
        self.last_reliable_timestamp = cfg.first_timestamp
        self.printed: set[str] = set()
        self.patches: list[TscPatch] = []
        self.queue: object = None

    def _log(self, msg: str) -> None:
        self.o.messages.append(msg)

    def _print_once(self, key: str) -> bool:
        if key in self.printed:
            return False
        self.printed.add(key)
        return True

    def _in_range(self, ts: int) -> bool:
        return self.last_reliable_timestamp <= ts < self.buf_timestamp

    # timing (perf's calc_tsc_timestamp / calc_tma / calc_mtc_timestamp)
    def _calc_tsc(self, payload: int) -> None:
        self.have_tma = False
        if self.ref_timestamp:
            ts = _eight_byte_tsc(payload, self.ref_timestamp)
            self.tsc_timestamp = self.timestamp = ts
            self.ref_timestamp = 0
        elif self.timestamp:
            bad = False
            ts = payload | (self.timestamp & (0xFF << 56))
            self.tsc_timestamp = ts
            if ts < self.timestamp and self.timestamp - ts < TSC_SLIP:
                ts = self.timestamp
            if ts < self.timestamp:
                if not self.buf_timestamp or ts + (1 << 56) < self.buf_timestamp:
                    ts = (ts + (1 << 56)) & M64
                    self.tsc_timestamp = ts
                else:
                    ts = self.timestamp
                    bad = True
            if (bad or not self._in_range(ts)) and self._print_once("erange"):
                self._log("Timestamp out of range")
            self.timestamp = ts

    def _calc_tma(self, ctc: int, fc: int) -> None:
        if not self.have_d:
            return
        rem = ctc & self.ctc_rem_mask
        self.last_mtc = (ctc >> self.mtc_shift) & 0xFF
        self.last_ctc = ctc - rem
        self.ctc_timestamp = (self.tsc_timestamp - fc - self.o._ctc_to_tsc(rem)) & M64
        self.ctc_delta = 0
        self.have_tma = True
        self.fixup_last_mtc = True

    def _calc_mtc(self, mtc: int) -> None:
        if not self.have_tma:
            return
        if self.mtc_shift > 8 and self.fixup_last_mtc:
            self.fixup_last_mtc = False
            first_missing = 1 << (16 - self.mtc_shift)
            mask = ~(first_missing - 1) & 0xFFFFFFFF
            last = self.last_mtc | (mtc & mask)
            if last >= mtc:
                last = (last - first_missing) & 0xFFFFFFFF
            self.last_mtc = last
        delta = mtc - self.last_mtc if mtc > self.last_mtc else mtc + 256 - self.last_mtc
        self.ctc_delta = (self.ctc_delta + (delta << self.mtc_shift)) & M64
        ts = (self.ctc_timestamp + self.o._ctc_to_tsc(self.ctc_delta)) & M64
        if ts >= self.timestamp:
            self.timestamp = ts
        self.last_mtc = mtc

    # lookaheads
    def _psb_lookahead(self, k, i: int) -> _Lookahead:
        data = _Lookahead(self.ctc_delta, self.last_ctc)
        kinds, counts, payloads = k
        for j in range(i + 1, len(kinds)):
            t = kinds[j]
            if t in (Pkt.PAD, Pkt.MNT, Pkt.MODE_EXEC, Pkt.MODE_TSX, Pkt.MTC, Pkt.FUP, Pkt.CYC,
                     Pkt.CBR):
                continue
            if t == Pkt.TSC:
                data.tsc = True
            elif t == Pkt.TMA:
                data.tma, data.tma_ctc, data.tma_fc = True, payloads[j], counts[j]
            elif t == Pkt.PIP:
                data.pip, data.pip_payload = True, payloads[j]
            elif t == Pkt.VMCS:
                data.vmcs, data.vmcs_payload = True, payloads[j]
            elif t == Pkt.PSBEND:
                data.psbend = True
                break
            else:
                break
        return data

    def _tma_lookahead(self, k, i: int, data: _Lookahead) -> None:
        kinds, counts, payloads = k
        budget = 16
        for j in range(i + 1, len(kinds)):
            t = kinds[j]
            if t == Pkt.PAD:          # perf's lookahead never shows PADs to its callbacks
                continue
            if t in (Pkt.CYC, Pkt.MTC):
                budget -= 1
                if not budget:
                    return
                continue
            if t == Pkt.TMA:
                data.tma, data.tma_ctc, data.tma_fc = True, payloads[j], counts[j]
            return

    def _ovf_fup_lookahead(self, k, i: int) -> bool:
        kinds = k[0]
        budget = 16
        for j in range(i + 1, len(kinds)):
            t = kinds[j]
            if t == Pkt.PAD:
                continue
            if t in (Pkt.CYC, Pkt.MTC, Pkt.TSC):
                budget -= 1
                if not budget:
                    return False
                continue
            return t == Pkt.FUP
        return False

    # the TSC rules
    def _translate(self, bi: int, pos: int, payload: int, info_offset: int) -> int:
        new = (payload - info_offset) & SEVEN_BYTES
        self.patches.append(TscPatch(bi, pos, payload, new))
        return new

    def _first_tsc(self, data: _Lookahead, info: VmcsInfo | None, host_tsc: int,
                   bi: int, pos: int, payload: int) -> int:
        if not self.in_psb:
            self._log("ERROR: First TSC is not in PSB+")
        if data.pip:
            if data.pip_payload & 1:
                if info is not None and info.tsc_offset:
                    payload = self._translate(bi, pos, payload, info.tsc_offset)
                    self.reliable = True
                else:
                    self._log("ERROR: First TSC, unknown TSC Offset")
            else:
                self.reliable = True
        else:
            self.reliable = False
            if not self._in_range(host_tsc):
                if info is not None and info.tsc_offset:
                    payload = self._translate(bi, pos, payload, info.tsc_offset)
                else:
                    self._log("ERROR: First TSC, no PIP, unknown TSC Offset")
        return payload

    def _tsc(self, k, i: int, data: _Lookahead, bi: int, pos: int, payload: int) -> int:
        """perf's intel_pt_vm_tm_corr_tsc; returns the (maybe translated) payload."""
        if not self.in_psb:
            data = _Lookahead(self.ctc_delta, self.last_ctc)
            self._tma_lookahead(k, i, data)
            if self.pge:
                data.pip, data.pip_payload = True, self.pip_payload
        if not data.tma:
            self._log("ERROR: TSC without TMA")
            return payload
        vmcs = data.vmcs_payload if data.vmcs else self.vmcs
        if vmcs == NO_VMCS:
            vmcs = 0
        info = self.o._findnew_vmcs(vmcs)
        ref = self.timestamp or self.buf_timestamp
        host_tsc = _eight_byte_tsc(payload, ref)
        if not self.ctc_timestamp:
            return self._first_tsc(data, info, host_tsc, bi, pos, payload)
        # expected TSC from the MTC/TMA chain (perf's intel_pt_calc_expected_tsc)
        last_mtc_ctc = data.last_ctc + data.ctc_delta
        d16 = ((data.tma_ctc & 0xFFFF) - (last_mtc_ctc & 0xFFFF)) & 0xFFFF
        delta = d16 - 0x10000 if d16 & 0x8000 else d16
        new_ctc_delta = (data.ctc_delta + delta) & M64
        expected = (self.ctc_timestamp + self.o._ctc_to_tsc(new_ctc_delta) + data.tma_fc) & M64
        tsc_offset = (host_tsc - expected) & M64
        reliable = True
        guest = False
        if data.pip:
            if data.pip_payload & 1:
                if info is None:
                    self._log("ERROR: Missing VMCS")
                    payload = self._translate(bi, pos, payload, tsc_offset)
                    self.reliable = False
                    return payload
                guest = True
            else:
                self.last_reliable_timestamp = host_tsc
                self.reliable = True
                return payload
        else:
            reliable = False
            if self.in_psb:
                if not tsc_offset:
                    return payload
                if info is not None and (tsc_offset & SEVEN_BYTES) == (info.tsc_offset & SEVEN_BYTES):
                    guest = True
            if not guest and host_tsc >= expected and self._in_range(host_tsc):
                self.reliable = False
                return payload
        # assuming guest
        assign = assign_reliable = False
        if info is not None and info.vmcs:
            if info.tsc_offset and info.reliable:
                assign = False
            elif self.in_psb and data.pip and self.reliable and self.continuous and self.same_buf:
                assign = assign_reliable = True
            elif self.in_psb and data.pip and self.same_buf:
                assign, assign_reliable = True, False
        if assign and (info.tsc_offset != tsc_offset or info.reliable != assign_reliable):
            show = info.tsc_offset != tsc_offset
            info.tsc_offset = tsc_offset
            info.reliable = assign_reliable
            if show:
                self._log(f"VMCS: {info.vmcs:#x}  TSC Offset {info.tsc_offset:#x}")
        if info is not None and info.tsc_offset:
            if not info.reliable:
                reliable = False
            payload = self._translate(bi, pos, payload, info.tsc_offset)
        else:
            reliable = False
            if info is not None:
                if not info.error_printed:
                    self._log(f"ERROR: Unknown TSC Offset for VMCS {info.vmcs:#x}")
                    info.error_printed = True
            elif self._print_once("unk_vmcs"):
                self._log("ERROR: Unknown VMCS")
            payload = self._translate(bi, pos, payload, tsc_offset)
        self.reliable = reliable
        return payload

    def run(self) -> list[TscPatch]:
        """Walk the buffers: compiled where numba loads (as :func:`packet_lists` decides), else here."""
        from ptexport.pt import packets_compiled as fastdecode  # lazy: loads numba (start-up time)
        from ptexport.pt import vmtime_compiled

        if fastdecode.numba is not None and vmtime_compiled.walk_buffer is not None:
            return self._run_compiled(vmtime_compiled)
        return self._run_python()

    def _run_compiled(self, C) -> list[TscPatch]:
        """:meth:`_run_python` by :mod:`ptexport.pt.vmtime_compiled`: one kernel call per buffer, the
        queue's state in an array, the VMCS table as arrays while the queue runs."""
        o, cfg = self.o, self.o.cfg
        U = np.zeros(C.STATE_SIZE, dtype=np.uint64)
        for at, v in ((C.C_SHIFT, self.mtc_shift), (C.C_REM_MASK, self.ctc_rem_mask), (C.C_HAVE_D, self.have_d),
                      (C.C_MULT, o.mult), (C.C_N, cfg.tsc_ctc_ratio_n), (C.C_D, cfg.tsc_ctc_ratio_d),
                      (C.C_DEFAULT_OFF, cfg.default_offset), (C.LAST_REL_TS, self.last_reliable_timestamp),
                      (C.VMCS, NO_VMCS)):
            U[at] = int(v) & M64
        cfg_vmcs = np.array([k & M64 for k in cfg.offsets], dtype=np.uint64)
        cfg_off = np.array([v & M64 for v in cfg.offsets.values()], dtype=np.uint64)
        infos = list(o.vmcs_table.values())
        tab = np.zeros((4, len(infos) + 16), dtype=np.uint64)  # rows: vmcs, offset, reliable, error printed
        for t, info in enumerate(infos):
            tab[:, t] = (info.vmcs & M64, info.tsc_offset & M64, info.reliable, info.error_printed)
        U[C.N_TAB] = len(infos)
        for bi, buf in enumerate(self.buffers):
            kinds, counts, payloads, positions = packet_arrays(buf.data)
            n_tsc = int(np.count_nonzero(kinds == int(Pkt.TSC)))
            n_psb = int(np.count_nonzero(kinds == int(Pkt.PSB)))
            n_vmcs = int(np.count_nonzero(kinds == int(Pkt.VMCS)))
            if int(U[C.N_TAB]) + n_tsc > tab.shape[1]:  # a TSC packet makes at most one VMCS row
                grown = np.zeros((4, 2 * (int(U[C.N_TAB]) + n_tsc)), dtype=np.uint64)
                grown[:, :tab.shape[1]] = tab
                tab = grown
            patches = np.zeros((4, n_tsc), dtype=np.uint64)
            seen = np.zeros((2, n_vmcs), dtype=np.uint64)
            msgs = np.zeros((3, 3 * n_tsc + n_psb), dtype=np.uint64)  # at most 3 a TSC, 1 a PSB
            U[C.N_PATCH] = U[C.N_SEEN] = U[C.N_MSG] = 0
            C.walk_buffer(U, kinds, counts, payloads, positions, bi, np.uint64(buf.ref_timestamp & M64),
                          bool(buf.consecutive), tab, cfg_vmcs, cfg_off, patches, seen, msgs)
            for k in range(int(U[C.N_MSG])):
                o.messages.append(C.message(int(msgs[0, k]), int(msgs[1, k]), int(msgs[2, k])))
            self.patches.extend(TscPatch(b, p, old, new) for b, p, old, new in patches[:, :int(U[C.N_PATCH])].T.tolist())
            o.vmcs_seen.extend((self.queue, ts, v) for ts, v in seen[:, :int(U[C.N_SEEN])].T.tolist())
        table = {}
        for t, (vmcs, off, reliable, printed) in enumerate(tab[:, :int(U[C.N_TAB])].T.tolist()):
            info = infos[t] if t < len(infos) else VmcsInfo(vmcs)
            info.tsc_offset, info.reliable, info.error_printed = off, bool(reliable), bool(printed)
            table[vmcs] = info
        o.vmcs_table.clear()
        o.vmcs_table.update(table)
        return self.patches

    def _run_python(self) -> list[TscPatch]:
        # the kinds as plain ints: an enum member look-up per packet and comparison costs more than the rest
        (_BAD, _FUP, _MTC, _OVF, _PIP, _PSB, _PSBEND, _TIP, _TIP_PGD, _TIP_PGE, _TMA, _TNT, _TRACESTOP, _TSC,
         _VMCS) = (int(p) for p in (Pkt.BAD, Pkt.FUP, Pkt.MTC, Pkt.OVF, Pkt.PIP, Pkt.PSB, Pkt.PSBEND, Pkt.TIP,
                                    Pkt.TIP_PGD, Pkt.TIP_PGE, Pkt.TMA, Pkt.TNT, Pkt.TRACESTOP, Pkt.TSC, Pkt.VMCS))
        data = _Lookahead()
        for bi, buf in enumerate(self.buffers):
            self.buf_timestamp = buf.ref_timestamp
            if not buf.consecutive:
                self.timestamp = 0
                self.have_tma = False
                self.ref_timestamp = buf.ref_timestamp
                self.same_buf = False
            kinds, counts, payloads, positions = packet_lists(buf.data)
            k = (kinds, counts, payloads)
            skip_to_psb = False
            for i in _walked(kinds):
                t = kinds[i]
                if skip_to_psb and t != _PSB:
                    continue
                skip_to_psb = False
                if t == _BAD:
                    # perf stops at a bad packet and its decoder resynchronizes at a PSB
                    skip_to_psb = True
                elif t == _TIP_PGD:
                    self.pge = False
                    self.continuous = False
                elif t in (_TNT, _TIP, _TIP_PGE):
                    self.pge = True
                elif t == _OVF:
                    self.in_psb = False
                    self.pge = self._ovf_fup_lookahead(k, i)
                    if not self.pge:
                        self.continuous = False
                elif t == _FUP:
                    if self.in_psb:
                        self.pge = True
                elif t == _TRACESTOP:
                    self.pge = False
                    self.continuous = False
                    self.have_tma = False
                elif t == _PSB:
                    data = self._psb_lookahead(k, i)
                    if data.tsc and not data.psbend:
                        self._log("ERROR: PSB without PSBEND")
                    self.in_psb = data.psbend
                elif t == _PIP:
                    self.pip_payload = payloads[i]
                elif t == _MTC:
                    self._calc_mtc(payloads[i])
                elif t == _TSC:
                    payload = self._tsc(k, i, data, bi, positions[i], payloads[i])
                    self._calc_tsc(payload)
                    self.same_buf = True
                    self.continuous = self.pge
                elif t == _TMA:
                    self._calc_tma(payloads[i], counts[i])
                elif t == _PSBEND:
                    self.in_psb = False
                    data.psbend = False
                elif t == _VMCS:
                    if payloads[i] != NO_VMCS:
                        self.vmcs = payloads[i]
                        if self.timestamp:
                            self.o.vmcs_seen.append((self.queue, self.timestamp, payloads[i]))
        return self.patches


def warm() -> None:
    """Compile the walk ahead (``ptexport.cli.precompile``: no shipped sample is a VM's): a PSB+ walked."""
    VmTimeCorrelator(VmTimeConfig(mtc_period=3, tsc_ctc_ratio_n=2, tsc_ctc_ratio_d=1)).run_queue(
        [VmBuffer(b"\x02\x82" * 8 + b"\x02\x23", 0, False)])


def apply_patches(data: bytearray, patches: list[TscPatch], base: int = 0) -> None:
    """Write translated TSC payloads into ``data`` (a buffer starting at file offset ``base``
    when patch positions are buffer-relative and the caller adds the buffer's offset)."""
    for p in patches:
        off = base + p.pos + 1
        data[off:off + 7] = p.new.to_bytes(7, "little")
