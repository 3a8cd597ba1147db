"""Compiled fast path of the raw instruction flow (``dump insns --raw``; issue #13).

The reference :class:`~ptexport.raw.insn.InsnDecoder` follows libipt one
instruction and one packet at a time in Python.  Most of a trace, though, is
*plain*: TNT and TIP packets (with PAD and timing packets between them) that
only steer conditional branches, returns and indirect branches, with no event
pending.  :class:`Walker` walks such stretches in a compiled kernel, a block
at a time, and hands everything else back to the reference decoder:

- :meth:`Walker.step` is called where :func:`ptexport.raw.ptxed.walk` would
  take the reference's fast path.  It starts only from a clean reference state
  (no event pending or being processed, tracing enabled, no queued packet-level
  events, the query decoder's look-ahead a TNT or TIP event, no tick events).
- The kernel consumes the query decoder's cached TNT bits, then packets from
  the look-ahead on; it stops *before* anything it does not model: an
  instruction that cannot be decoded, a branch whose trace is not the expected
  kind (libipt reports an error or does something unusual there), a return
  whose compression cannot be followed, or - right after the branch that used
  the last TNT bit or TIP of a stretch - any packet other than TNT/TIP/PAD/
  timing (events, PSB, OVF, PGD, FUP, errors, the end of the trace).
- It then puts the reference decoders into the very state they would have
  reached themselves (instruction pointer, return stack, TNT cache, last IP,
  packet position, time) and lets them go on: events, errors, recovery and
  sideband stay the reference's code, so the output is the reference's.
- One kind of event it walks through itself, where the events print nothing
  (``--quiet``, no ``--event:time``, no sideband): a tracing-disabled gap
  (TIP.PGD without IP, PSB+, TIP.PGE, as around each system call of a user
  space trace; :func:`_gap_end` says exactly which), whose events leave the
  decoders as the kernel's hand-back sets them.  Without it each such gap costs
  ~150 us of Python (the reference's packets and events, two kernel calls); a
  loop-heavy trace has one every ~2,700 instructions.

Blocks (straight-line code up to and including its first branch or special
instruction) are classified by the reference's instruction cache
(:class:`~ptexport.raw.insn_class.InsnCache`) the first time the kernel
meets their start IP: the kernel returns, Python adds the block, the kernel
resumes.  Instruction lines are formatted by a compiled loop too.

:class:`Walker` implements :class:`ptexport.raw.ptxed.Walker` (same name, same
methods; the twins convention of docs/architecture.md, tests/test_twins.py);
:mod:`ptexport.raw.backend` picks it.
"""

from __future__ import annotations

import numpy as np

from ptexport.raw import insn_class as ic
from ptexport.raw.insn import Insn
from ptexport.raw.ptxed import FAST, BlockView
from ptexport.raw.retstack import CAPACITY
from ptexport.raw.status import EVENT_PENDING
from ptexport.jit_tables import tab_find, tab_insert
from ptexport.jit import numba
from ptexport.pt import packets as P
from ptexport.pt import packets_compiled
from ptexport.pt.packets import PacketKind as K

M64 = 0xFFFFFFFFFFFFFFFF

# Packet classes for the kernel (PCLS).  C_PGD...C_PGE: what a tracing-disabled gap of a quiet walk
# may hold (see _gap_end).
C_OTHER, C_SKIP, C_TNT, C_TIP, C_PGD, C_PSB, C_PSBEND, C_MODEX, C_PGE = range(9)

# Block terminals (BK[:, B_TERM]).
T_TROUBLE, T_CONT, T_STEP, T_COND, T_JUMP, T_CALL, T_RET, T_IND, T_ICALL = range(9)
(B_NPLAIN, B_TERM, B_TIP, B_TSIZE, B_TARGET, B_IPS, B_PUSH, B_ENDS, B_SPECIAL, B_SUCC_F, B_SUCC_T,
 B_DISABLE) = range(12)
BK_SIZE = 12    # B_SUCC_F/T: the row of the fall-through (only) / taken successor, -1 until known
# B_DISABLE: the terminal is where a tracing-disabled event without IP binds (a far branch, or it
# changes CPL or CR3: InsnDecoder._at_disabled_event)

# Kernel state (S).
(S_IP, S_TBITS, S_TMASK, S_K, S_LASTIP, S_NINSN, S_SINCE, S_RESETS, S_REASON, S_LAST, S_SP, S_TOP,
 S_OUTN, S_OPEN, S_NBLOCKS, S_RECORD, S_OUTCAP, S_TIPS, S_MAXINSN, S_NOTRACE, S_LASTNEW, S_CROSS,
 S_MODEX, S_PGD, S_GAPS, S_LASTTERM) = range(26)
S_SIZE = 26     # S_LASTNEW: the last instruction took a new packet (not a cached TNT bit);
# S_LASTTERM: it ended a block (not a plain one)
# S_CROSS: walk across tracing-disabled gaps (_gap_end; quiet walks only), S_MODEX: the CS.L/CS.D
# bits of MODE.EXEC that change nothing, S_PGD: the TIP.PGD of the gap being walked up to, or -1,
# S_GAPS: gaps walked across

# Why the kernel stopped.
R_NEEDBLOCK, R_TROUBLE, R_BOUNDARY, R_FULL = 1, 2, 3, 4

STACK = CAPACITY  # libipt's return stack depth
_SEXT = -(1 << 48)


def _s64(v: int) -> int:
    v &= M64
    return v - (1 << 64) if v >> 63 else v


def _next_packet(PCLS, npk, k):
    """Index of the next TNT/TIP packet from ``k`` over PAD and timing packets; -1 if something else."""
    while k < npk:
        c = PCLS[k]
        if c == C_SKIP:
            k += 1
            continue
        if c != C_TNT and c != C_TIP:
            return -1
        return k
    return -1


def _skip(PCLS, npk, k):
    """Index of the first packet from ``k`` on that is not PAD or timing (``npk`` at the end)."""
    while k < npk and PCLS[k] == C_SKIP:
        k += 1
    return k


def _gap_end(PCLS, P0, npk, j, modex):
    """The TIP.PGE that ends the tracing-disabled gap of the TIP.PGD at ``j``; -1 if the gap is not
    one the kernel walks across.

    That gap is TIP.PGD without IP, optionally PSB and PSBEND, MODE.EXEC that changes nothing
    (its CS.L/CS.D bits are ``modex``), TIP.PGE with IP, PAD and timing packets anywhere in
    between, and a TNT or TIP right after: the reference gives a disabled event (binding at the
    next far branch or CPL or CR3 change), PSB+ status updates, an enabled (resumed) event and
    nothing else; no event is queued, the last IP is the PGE's (from zero after a PSB, which
    resets it), the return stack stays.  Quiet walks print none of these events (the caller
    checks that)."""
    i = _skip(PCLS, npk, j + 1)
    if i < npk and PCLS[i] == C_PSB:
        i = _skip(PCLS, npk, i + 1)
        if i >= npk or PCLS[i] != C_PSBEND:
            return -1
        i = _skip(PCLS, npk, i + 1)
    while i < npk and PCLS[i] == C_MODEX and (P0[i] & 3) == modex:
        i = _skip(PCLS, npk, i + 1)
    if i >= npk or PCLS[i] != C_PGE:
        return -1
    if _next_packet(PCLS, npk, i + 1) < 0:
        return -1
    return i


def _lastip(last, p, ipc):
    if ipc == 1:
        return (last & ~np.int64(0xFFFF)) | (p & 0xFFFF)
    if ipc == 2:
        return (last & ~np.int64(0xFFFFFFFF)) | (p & 0xFFFFFFFF)
    if ipc == 3:
        v = p & 0xFFFFFFFFFFFF
        if v & 0x800000000000:
            v |= _SEXT
        return v
    if ipc == 4:
        return (last & ~np.int64(0xFFFFFFFFFFFF)) | (p & 0xFFFFFFFFFFFF)
    return p


def _push(S, STK, v):
    STK[S[S_TOP]] = v
    S[S_TOP] = (S[S_TOP] + 1) % STACK
    if S[S_SP] < STACK:
        S[S_SP] += 1


def _pop(S, STK):
    S[S_TOP] = (S[S_TOP] + STACK - 1) % STACK
    S[S_SP] -= 1
    return STK[S[S_TOP]]


def _succ(HK, HV, BK, row, col, ip):
    """The block row at ``ip``, the successor ``col`` of ``row`` (remembered once found); -1 if new."""
    nrow = BK[row, col]
    if nrow >= 0:
        return nrow
    nrow = tab_find(HK, HV, ip)
    if nrow >= 0:
        BK[row, col] = nrow
    return nrow


def _run(PCLS, P0, P1, npk, S, STK, HK, HV, BK, IPS, OUT):
    """Walk blocks from S[S_IP] on; returns the reason it stopped (state in S, STK)."""
    record = S[S_RECORD]
    notrace = S[S_NOTRACE]
    maxinsn = S[S_MAXINSN]
    outcap = S[S_OUTCAP]
    ip = S[S_IP]
    bits = S[S_TBITS]
    mask = S[S_TMASK]
    k = S[S_K]
    lastip = S[S_LASTIP]
    ninsn = S[S_NINSN]
    since = S[S_SINCE]
    resets = S[S_RESETS]
    last = S[S_LAST]
    outn = S[S_OUTN]
    isopen = S[S_OPEN]
    nblocks = S[S_NBLOCKS]
    tips = S[S_TIPS]
    lastnew = S[S_LASTNEW]
    lastterm = S[S_LASTTERM]
    cross = S[S_CROSS]
    modex = S[S_MODEX]
    pgd = S[S_PGD]
    row = tab_find(HK, HV, ip)
    reason = 0
    while True:
        if row < 0:
            reason = R_NEEDBLOCK
            break
        if ninsn >= maxinsn:
            reason = R_FULL
            break
        n = BK[row, B_NPLAIN]
        term = BK[row, B_TERM]
        if record and outn + n + 1 > outcap:
            reason = R_FULL
            break
        if n:
            base = BK[row, B_IPS]
            if record:
                for i in range(n):
                    OUT[outn + i] = IPS[base + i]
                outn += n
            ninsn += n
            since += n
            last = IPS[base + n - 1]
            lastnew = 0
            lastterm = 0
            if not isopen:
                isopen = 1
                nblocks += 1
        tip = BK[row, B_TIP]
        ip = tip
        if term == T_TROUBLE:
            reason = R_TROUBLE
            break
        if term == T_CONT:
            ip = BK[row, B_TARGET]
            row = _succ(HK, HV, BK, row, B_SUCC_F, ip)
            continue
        if pgd >= 0 and BK[row, B_DISABLE]:
            # the disable binds at this instruction: walk across the gap to where tracing resumes
            e = _gap_end(PCLS, P0, npk, pgd, modex)
            if e < 0:
                reason = R_TROUBLE
                break
            ninsn += 1
            last = tip
            if not isopen:
                nblocks += 1
            isopen = 0              # events end ptxed's block
            if PCLS[_skip(PCLS, npk, pgd + 1)] == C_PSB:
                lastip = np.int64(0)
            lastip = _lastip(lastip, P0[e], P1[e])
            tips += 1
            ip = lastip
            k = e + 1
            since = 0
            resets = 1
            lastnew = 1
            lastterm = 1
            pgd = -1
            S[S_GAPS] += 1
            row = tab_find(HK, HV, ip)
            continue
        if (notrace or pgd >= 0) and not ((term == T_JUMP or term == T_CALL)
                                          and not BK[row, B_SPECIAL]):
            reason = R_TROUBLE      # a disable without IP binds here (or the trace is needed)
            break
        nip = tip + BK[row, B_TSIZE]
        consumed = False
        k_before = k
        col = B_SUCC_F
        if term == T_STEP:
            ip = nip
            since += 1
        elif term == T_JUMP or term == T_CALL:
            if term == T_CALL and BK[row, B_PUSH]:
                _push(S, STK, nip)
            ip = BK[row, B_TARGET]
            since += 1
        elif term == T_COND:
            if mask == 0:
                j = _next_packet(PCLS, npk, k)
                if j < 0 or PCLS[j] != C_TNT:
                    reason = R_TROUBLE
                    break
                bits = P0[j]
                mask = np.int64(1) << (P1[j] - 1)
                k = j + 1
            if bits & mask:
                ip = BK[row, B_TARGET]
                col = B_SUCC_T
            else:
                ip = nip
            mask >>= 1
            consumed = True
        elif term == T_RET:
            col = -1
            if mask != 0:
                if not (bits & mask) or S[S_SP] == 0:
                    reason = R_TROUBLE
                    break
                mask >>= 1
                ip = _pop(S, STK)
            else:
                j = _next_packet(PCLS, npk, k)
                if j < 0:
                    reason = R_TROUBLE
                    break
                if PCLS[j] == C_TNT:
                    m = np.int64(1) << (P1[j] - 1)
                    if not (P0[j] & m) or S[S_SP] == 0:
                        reason = R_TROUBLE
                        break
                    bits = P0[j]
                    mask = m >> 1
                    ip = _pop(S, STK)
                else:
                    lastip = _lastip(lastip, P0[j], P1[j])
                    tips += 1
                    ip = lastip
                k = j + 1
            consumed = True
        else:  # T_IND, T_ICALL: a TIP
            col = -1
            j = _next_packet(PCLS, npk, k)
            if j < 0 or PCLS[j] != C_TIP:
                reason = R_TROUBLE
                break
            if term == T_ICALL:
                _push(S, STK, nip)
            lastip = _lastip(lastip, P0[j], P1[j])
            tips += 1
            k = j + 1
            ip = lastip
            consumed = True
        # the terminal instruction is done
        if record:
            OUT[outn] = tip
            outn += 1
        ninsn += 1
        last = tip
        lastnew = 1 if k != k_before else 0
        lastterm = 1
        if not isopen:
            nblocks += 1
        isopen = 0 if BK[row, B_ENDS] else 1
        if consumed:
            since = 0
            resets = 1
            if mask == 0 and _next_packet(PCLS, npk, k) < 0:
                j = _skip(PCLS, npk, k)
                if cross and j < npk and PCLS[j] == C_PGD:
                    pgd = j     # a disable without IP comes: walk up to where it binds
                else:
                    reason = R_BOUNDARY
                    break
        if col >= 0:
            row = _succ(HK, HV, BK, row, col, ip)
        else:
            row = tab_find(HK, HV, ip)
    S[S_IP] = ip
    S[S_TBITS] = bits
    S[S_TMASK] = mask
    S[S_K] = k
    S[S_LASTIP] = lastip
    S[S_NINSN] = ninsn
    S[S_SINCE] = since
    S[S_RESETS] = resets
    S[S_LAST] = last
    S[S_OUTN] = outn
    S[S_OPEN] = isopen
    S[S_NBLOCKS] = nblocks
    S[S_TIPS] = tips
    S[S_LASTNEW] = lastnew
    S[S_LASTTERM] = lastterm
    S[S_PGD] = pgd
    return reason


_K_TIP, _K_PAD = int(K.TIP), int(K.PAD)
_K_TSC, _K_MTC, _K_CYC, _K_TMA = int(K.TSC), int(K.MTC), int(K.CYC), int(K.TMA)
_K_TNT_8, _K_TNT_64, _K_TIP_PGD, _K_TIP_PGE = int(K.TNT_8), int(K.TNT_64), int(K.TIP_PGD), int(K.TIP_PGE)
_K_PSB, _K_PSBEND, _K_MODE_EXEC = int(K.PSB), int(K.PSBEND), int(K.MODE_EXEC)


def _classify(KIND, OFF, SIZE, P1, PCLS):
    """PCLS[i]: the kernel's class of packet i (C_OTHER after a decode error: the reference's)."""
    for i in range(len(KIND)):
        k = KIND[i]
        ipc = P1[i]
        c = C_OTHER
        if k == _K_PAD or k == _K_TSC or k == _K_MTC or k == _K_CYC or k == _K_TMA:
            c = C_SKIP
        elif k == _K_TNT_8 or k == _K_TNT_64:
            if ipc > 0:
                c = C_TNT
        elif k == _K_TIP or k == _K_TIP_PGE:
            if ipc == 1 or ipc == 2 or ipc == 3 or ipc == 4 or ipc == 6:
                c = C_TIP if k == _K_TIP else C_PGE
        elif k == _K_TIP_PGD:
            if ipc == 0:
                c = C_PGD
        elif k == _K_PSB:
            c = C_PSB
        elif k == _K_PSBEND:
            c = C_PSBEND
        elif k == _K_MODE_EXEC:
            c = C_MODEX
        if i > 0 and OFF[i] != OFF[i - 1] + SIZE[i - 1]:
            c = C_OTHER     # a decode error in between
        PCLS[i] = c


def _find_k(OFF, SIZE, KIND, PCLS, P0, P1, pos, is_tip, bits, nbits):
    """The index of the look-ahead packet the reference stands at (``pos``: its decoder's offset),
    a TIP if ``is_tip`` else the TNT of ``bits``/``nbits`` (only PADs after it); -1 if not there."""
    npk = len(OFF)
    lo, hi = 0, npk
    while lo < hi:      # the first packet at or after pos
        mid = (lo + hi) >> 1
        if OFF[mid] < pos:
            lo = mid + 1
        else:
            hi = mid
    k = lo
    if is_tip:
        if k >= npk or OFF[k] != pos or KIND[k] != _K_TIP or PCLS[k] != C_TIP:
            return -1
        return k
    k2 = k
    k -= 1
    while k >= 0 and KIND[k] == _K_PAD:
        k -= 1
    # the TNT, then only PADs (one byte each), right up to the reference's position
    if k < 0 or PCLS[k] != C_TNT or OFF[k] + SIZE[k] + (k2 - k - 1) != pos:
        return -1
    if P0[k] != bits or P1[k] != nbits:
        return -1
    return k


def _start(S, ip, bits, mask, k, notrace, lastip, isopen, record, outcap, maxinsn, sp, cross, modex):
    """The kernel state S for a walk from these values (the return stack: STK[:sp])."""
    for i in range(S_SIZE):
        S[i] = 0
    S[S_IP] = ip
    S[S_TBITS] = bits
    S[S_TMASK] = mask
    S[S_K] = k
    S[S_NOTRACE] = notrace
    S[S_LASTIP] = lastip
    S[S_OPEN] = isopen
    S[S_RECORD] = record
    S[S_OUTCAP] = outcap
    S[S_MAXINSN] = maxinsn
    S[S_SP] = sp
    S[S_TOP] = sp % STACK
    S[S_CROSS] = cross
    S[S_MODEX] = modex
    S[S_PGD] = -1


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _format_ips(ips, n, spec, out):
    """``%016x\\n`` (``? `` first when ``spec``) for ips[:n] into out; returns the bytes written."""
    pos = 0
    for i in range(n):
        v = np.uint64(ips[i])
        if spec:
            out[pos] = 63
            out[pos + 1] = 32
            pos += 2
        for d in range(16):
            out[pos + 15 - d] = _HEX[np.int64(v & np.uint64(15))]
            v >>= np.uint64(4)
        out[pos + 16] = 10
        pos += 17
    return pos


if numba is not None:
    _jit = numba.njit(cache=True, _nrt=False)
    _next_packet = _jit(_next_packet)
    _skip = _jit(_skip)
    _gap_end = _jit(_gap_end)
    _lastip = _jit(_lastip)
    _push = _jit(_push)
    _pop = _jit(_pop)
    _succ = _jit(_succ)
    _run_kernel = _jit(_run)
    _find_k = _jit(_find_k)
    _classify = _jit(_classify)
    _start = _jit(_start)
    _format_ips = _jit(_format_ips)
else:  # pragma: no cover - numba is a core dependency; the reference decoder is used then
    _run_kernel = None


class _Table:
    """Blocks of one address space and mode: IP -> row of BK (open addressing), plain IPs in IPS."""

    def __init__(self) -> None:
        self.hk = np.zeros(1 << 12, np.int64)
        self.hv = np.full(1 << 12, -1, np.int64)
        self.bk = np.zeros((1024, BK_SIZE), np.int64)
        self.ips = np.zeros(1 << 14, np.int64)
        self.n = 0
        self.nips = 0

    def insert(self, ip: int, row) -> None:
        if (self.n + 1) * 2 > len(self.hk):
            hk, hv = self.hk, self.hv
            self.hk = np.zeros(len(hk) * 2, np.int64)
            self.hv = np.full(len(hk) * 2, -1, np.int64)
            for i in np.nonzero(hv >= 0)[0]:
                tab_insert(self.hk, self.hv, hk[i], hv[i])
        if self.n >= len(self.bk):
            self.bk = np.concatenate([self.bk, np.zeros_like(self.bk)])
        ips = row.pop()
        while self.nips + len(ips) > len(self.ips):
            self.ips = np.concatenate([self.ips, np.zeros_like(self.ips)])
        row[B_IPS] = self.nips
        self.ips[self.nips:self.nips + len(ips)] = ips
        self.nips += len(ips)
        self.bk[self.n] = row
        tab_insert(self.hk, self.hv, _s64(ip), self.n)
        self.n += 1


def _timing(kind: int, p0: int, p1: int):
    return P.Packet(0, 0, K(kind), p0, p1, 0)


_MAX_BLOCK = 1024
_OUTCAP = 1 << 16


class Walker:
    """The compiled walker for one trace; see the module docstring.

    ``record`` keeps each instruction's IP (for printing); ``end_on_call`` /
    ``end_on_jump`` are ptxed's block-decoder options (block counting).
    ``keep_time=False`` skips the timing packets of compiled stretches: the
    decoder's clock then lags, which nothing shows unless events are printed
    with their time (``--event:time``) or sideband is correlated by time.
    """

    def __init__(self, buf, errata=None, *, record: bool = False, end_on_call: bool = False,
                 end_on_jump: bool = False, keep_time: bool = True) -> None:
        cols, _errors = packets_compiled.decode_columns(buf, errata)
        kind = cols["kind"]
        off = cols["offset"]
        size = cols["size"].astype(np.int64)
        p0 = cols["p0"].view(np.int64)
        p1 = cols["p1"].astype(np.int64)
        self.kind, self.off, self.size, self.p0, self.p1 = kind, off, size, p0, p1
        self.npk = len(kind)
        self.pcls = np.zeros(self.npk, np.uint8)
        _classify(kind, off, size, p1, self.pcls)
        self.timing = np.nonzero((kind == K.TSC) | (kind == K.MTC) | (kind == K.CYC)
                                 | (kind == K.TMA))[0] if keep_time else None
        self.record = record
        self.keep_time = keep_time
        self.end_on_call = end_on_call
        self.end_on_jump = end_on_jump
        self.tables: dict = {}
        self.S = np.zeros(S_SIZE, np.int64)
        self.stk = np.zeros(STACK, np.int64)
        self._ustk = self.stk.view(np.uint64)     # the same, as the reference's (unsigned) IPs
        self._rec = 1 if record else 0
        # tracing-disabled gaps are walked across only where their events print nothing
        self._cross = not record and not keep_time
        self.out = np.zeros(_OUTCAP if record else 1, np.int64)
        self.blocks: BlockView | None = None      # ptxed's block view when counting blocks
        self.nblocks = 0
        self.ninsn = 0
        self.gaps = 0           # tracing-disabled gaps walked across (_gap_end)
        self.calls = 0

    # -- blocks ------------------------------------------------------------------
    def _ends(self, c: int) -> int:
        """Does an instruction of class ``c`` end ptxed's block (ptxed.BlockView.after_insn)?"""
        if c in (ic.OTHER, ic.PTWRITE, ic.COND_JUMP):
            return 0
        if c == ic.JUMP:
            return int(self.end_on_jump)
        if c == ic.CALL:
            return int(self.end_on_call)
        return 1

    def _add_block(self, dec, tab: _Table, ip: int) -> None:
        key, mode, read = dec._image_key(), dec.mode, dec.image.read
        lookup = dec.cache.lookup
        ips: list[int] = []
        cur = ip
        row: list = [0] * BK_SIZE     # then the block's plain IPs, popped by _Table.insert
        row[B_SUCC_F] = row[B_SUCC_T] = -1
        while True:
            e = lookup(key, mode, cur, read)
            if e.__class__ is int:
                row[B_TERM], row[B_TIP] = T_TROUBLE, _s64(cur)
                break
            size, c, special, disp = e
            if c == ic.OTHER and special == ic.NONE:
                ips.append(_s64(cur))
                cur = (cur + size) & M64
                if len(ips) >= _MAX_BLOCK:
                    row[B_TERM], row[B_TIP], row[B_TARGET] = T_CONT, _s64(cur), _s64(cur)
                    break
                continue
            nip = (cur + size) & M64
            row[B_TIP], row[B_TSIZE], row[B_ENDS] = _s64(cur), size, self._ends(c)
            row[B_SPECIAL] = int(special != ic.NONE)
            row[B_DISABLE] = int(ic.is_far_branch(c) or ic.changes_cpl(special)
                                 or ic.changes_cr3(special))
            if c == ic.OTHER or c == ic.PTWRITE:
                row[B_TERM] = T_STEP
            elif c == ic.COND_JUMP:
                if disp is None:
                    row[B_TERM] = T_TROUBLE
                else:
                    row[B_TERM], row[B_TARGET] = T_COND, _s64(nip + disp)
            elif c == ic.JUMP and disp is not None:
                row[B_TERM], row[B_TARGET] = T_JUMP, _s64(nip + disp)
            elif c == ic.CALL and disp is not None:
                row[B_TERM], row[B_TARGET], row[B_PUSH] = T_CALL, _s64(nip + disp), int(disp != 0)
            elif c == ic.RETURN:
                row[B_TERM] = T_RET
            elif c == ic.CALL:
                row[B_TERM] = T_ICALL
            else:  # indirect jump, far call/jump/return
                row[B_TERM] = T_IND
            break
        row[B_NPLAIN] = len(ips)
        row.append(ips)
        tab.insert(ip, row)

    # -- entering and leaving ----------------------------------------------------------
    def _entry(self, dec) -> int:
        """The index of the query decoder's look-ahead packet if the fast path may start; -1 if not;
        -2 to walk up to where a pending tracing-disabled event without IP binds."""
        if (dec.process_event or dec.process_insn or not dec.enabled
                or dec.config.enable_tick_events or dec.mode not in (16, 32, 64)):
            return -1
        q = dec.query
        ev = q.event
        if ev is None:
            return -1
        t = ev.type
        if (t == "disabled" and ev.ip_suppressed and not ev.status_update and not q.tnt_index
                and dec.status & EVENT_PENDING and not dec.config.addr_filter):
            # InsnDecoder._check_insn_event: it binds at the first far branch, special or
            # trace-needing instruction; plain and direct ones before it just execute.
            return -2
        if q.status != 0:
            return -1
        if t != "tnt" and t != "tip":
            return -1
        evd = q.evdec
        if evd.status != 0 or evd.evq._q or not evd.enabled or evd.event is not None \
                or evd.cur.dec.block:
            return -1
        if t == "tip":
            if not evd.bound:
                return -1
            return _find_k(self.off, self.size, self.kind, self.pcls, self.p0, self.p1, evd.offset,
                           True, 0, 0)
        return _find_k(self.off, self.size, self.kind, self.pcls, self.p0, self.p1, evd.offset,
                       False, ev.bits, ev.nbits)

    def step(self, dec):
        """Run the kernel from ``dec``'s state: (item or None, status, again) or None if it may not."""
        k0 = self._entry(dec)
        notrace = k0 == -2
        if notrace:
            k0 = 0
        elif k0 < 0:
            return None
        q = dec.query
        evd = q.evdec
        S = self.S
        blocks = self.blocks
        d = dec.retstack._d
        sp = len(d)
        stk = self.stk
        if sp:
            self._ustk[:sp] = list(d)
        tnt_index = q.tnt_index
        cross, modex = 0, 0
        if self._cross and evd.mode_exec_valid:
            cfg = dec.config
            if not (cfg.addr_filter or cfg.enable_iflags_events):
                cross, modex = 1, int(evd.csl) | int(evd.csd) << 1
        # back to Python now and then (Ctrl-C; code that loops without trace never ends)
        _start(S, _s64(dec.ip), q.tnt_bits if tnt_index else 0, tnt_index, k0, int(notrace),
               _s64(evd.ip.ip), 1 if blocks is not None and blocks.open else 0, self._rec,
               len(self.out), _OUTCAP if self.record else 1 << 24, sp, cross, modex)
        key = (dec._image_key(), dec.mode)
        tab = self.tables.get(key)
        if tab is None:
            tab = self.tables[key] = _Table()
        while True:
            self.calls += 1
            reason = _run_kernel(self.pcls, self.p0, self.p1, self.npk, S, stk, tab.hk, tab.hv,
                                 tab.bk, tab.ips, self.out)
            if reason != R_NEEDBLOCK:
                break
            self._add_block(dec, tab, int(S[S_IP]) & M64)
        S[S_REASON] = reason
        v = S.tolist()
        n = v[S_NINSN]
        # -- hand back to the reference: its state as if it had decoded all this itself --
        dec.ip = v[S_IP] & M64
        sp, top = v[S_SP], v[S_TOP]
        d.clear()
        if sp:
            u = self._ustk
            lo = (top - sp) % STACK
            d.extend(u[lo:lo + sp].tolist() if lo + sp <= STACK
                     else u[lo:].tolist() + u[:top].tolist())
        if v[S_RESETS]:
            dec.has_icnt, dec.icnt = True, v[S_SINCE]
        elif dec.has_icnt:
            dec.icnt += v[S_SINCE]
        k1 = v[S_K]
        q.tnt_index = v[S_TMASK]
        if k1 > k0:
            if q.tnt_index:
                q.tnt_bits = v[S_TBITS]
            if self.keep_time:
                # timing packets the reference would have applied, after the look-ahead up to k1
                tm = self.timing
                lo, hi = np.searchsorted(tm, k0 + 1), np.searchsorted(tm, k1)
                if hi > lo:
                    apply = evd.time.apply
                    kinds, p0, p1 = self.kind, self.p0, self.p1
                    for i in tm[lo:hi].tolist():
                        apply(_timing(int(kinds[i]), int(p0[i]) & M64, int(p1[i])))
            if v[S_TIPS] or self.kind[k0] == K.TIP:
                lip = evd.ip
                lip.ip = v[S_LASTIP] & M64
                lip.have_ip, lip.suppressed = True, False
            evd.cur.dec.pos = int(self.off[k1 - 1] + self.size[k1 - 1])
            evd.packet = None
            evd.bound = False
            evd.event = None
            evd._fetch_packet()
            q._fetch_event()
        status = None
        last = 0
        self.gaps += v[S_GAPS]
        if n:
            self.ninsn += n
            self.nblocks += v[S_NBLOCKS]
            if blocks is not None:
                blocks.count += v[S_NBLOCKS]
                blocks.open = bool(v[S_OPEN])
            dec.status = q.status_flags()
            last = v[S_LAST] & M64
            size, iclass, special, disp = dec._decode(last)
            status = dec._check_ip_event(Insn(last, size, iclass, special, disp, dec.mode,
                                              dec.speculative))
        ips = self.out[:v[S_OUTN]].view(np.uint64) if self.record else None
        # walk()'s "current IP" for errors that follow: the reference took an instruction that
        # needed a new packet through InsnDecoder.next() (its IP), others through next_many()
        # (the IP after them); with the block view (walk(fast_branches=False)) every instruction
        # that ends a block through next(), plain ones through next_run()
        newip = v[S_LASTNEW] if blocks is None else v[S_LASTTERM]
        walk_ip = last if n and newip else dec.ip
        item = (FAST, n, ips, dec.speculative, v[S_NBLOCKS], walk_ip) if n else None
        return item, status, reason == R_FULL

    # -- printing -----------------------------------------------------------------------
    @staticmethod
    def format_ips(ips, speculative: bool) -> str:
        """The ptxed lines of ``ips`` (one per instruction, with a final newline)."""
        n = len(ips)
        buf = np.empty(n * 19, np.uint8)
        m = _format_ips(ips, n, speculative, buf)
        return buf[:m].tobytes().decode("ascii")


def warm() -> None:
    """Compile the kernels ahead (``ptexport.cli.precompile``) with the argument types :class:`Walker`
    passes: one straight block over a one-packet trace, and a formatted line."""
    if _run_kernel is None:
        return
    fast = Walker(bytes.fromhex("0282" * 8 + "0223") + b"\x0d\x00\x10", record=True)
    tab = _Table()
    tab.insert(0x1000, [1, T_TROUBLE, 0x1001, 0, 0, 0, 0, 0, 0, -1, -1, 0, [0x1000]])
    S = fast.S
    _find_k(fast.off, fast.size, fast.kind, fast.pcls, fast.p0, fast.p1, 0, True, 0, 0)
    _start(S, 0x1000, 0, 0, 0, 0, 0, 0, 1, len(fast.out), 1 << 20, 0, 0, 0)
    _run_kernel(fast.pcls, fast.p0, fast.p1, fast.npk, S, fast.stk, tab.hk, tab.hv, tab.bk, tab.ips,
                fast.out)
    fast.format_ips(fast.out[:int(S[S_OUTN])].view(np.uint64), False)
