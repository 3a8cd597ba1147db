"""Intel PT packet decoder: bytes -> packets (libipt's packet layer).

Stable API (used by the query decoder in ``ptexport.raw``; keep it stable):

``PacketKind``
    IntEnum of every packet of the current Intel SDM (PAD, TNT_8, TNT_64, TIP,
    TIP_PGE, TIP_PGD, FUP, PIP, MODE_EXEC, MODE_TSX, STOP (TraceStop), CBR,
    TSC, MTC, TMA, CYC, VMCS, OVF, PSB, PSBEND, MNT, PTW, EXSTOP, MWAIT, PWRE,
    PWRX, BBP, BIP, BEP, CFE, EVD, TRIG) plus INVALID (a packet the CPU
    corrupted, reported instead of an error where an erratum says so).

``Packet(offset, size, kind, p0, p1, p2)``
    A NamedTuple.  ``offset`` is the byte offset of the packet in the buffer,
    ``size`` its length in bytes.  The payload fields by kind:

    =========== ======================= ==================== ===================
    kind        p0                      p1                   p2
    =========== ======================= ==================== ===================
    TNT_8/64    bits (oldest = MSB)     number of bits       0
    TIP/FUP/    ip payload as stored    IPC (IpCompression)  0
    TIP_PGE/PGD (not sign-extended)
    PIP         cr3                     nr (0/1)             0
    MODE_EXEC   csl | csd<<1 | if<<2    0                    0
    MODE_TSX    intx | abrt<<1          0                    0
    CBR         ratio                   0                    0
    TSC         tsc (56 bits)           0                    0
    MTC         ctc (8 bits)            0                    0
    TMA         ctc (16 bits)           fc (9 bits)          0
    CYC         cycle count             0                    0
    VMCS        base (payload << 12)    0                    0
    MNT         payload                 0                    0
    PTW         payload                 plc (0: 4 B, 1: 8 B) ip flag
    EXSTOP      ip flag                 0                    0
    MWAIT       hints                   ext                  0
    PWRE        state                   sub_state            hw flag
    PWRX        last                    deepest              wake reason bits
                                                             (1 int, 2 timer,
                                                             4 store, 8 hw)
    BBP         type                    sz (1: 8-byte BIPs)  0
    BIP         id                      value                0
    BEP         ip flag                 0                    0
    CFE         type                    vector               ip flag
    EVD         type                    payload              0
    TRIG        trbv                    icnt (-1: none)      flags (1 ip,
                                                             2 mult, 4 icntv)
    =========== ======================= ==================== ===================

    Named accessors (``ip``, ``ipc``, ``tnt_bits``, ``tnt_count``, ``cr3``,
    ``nr``, ``tsc``, ``ctc``, ``fc``, ``cyc``, ``ratio``, ``vmcs``, ...) read
    the same fields.

``decode_packet(buf, pos, end=None, errata=None, block=0) -> Packet``
    Decode the one packet at ``pos``; raises :class:`PacketError` with
    ``err.reason`` in {"eos", "bad-opcode", "bad-packet"}.  ``block`` is the
    BIP payload size while inside a BBP block (0 outside), see PacketDecoder.

``sync_backward(buf, pos) -> int`` / ``psb_offsets(buf) -> list[int]``
    The PSB before ``pos``; every PSB offset (segment boundaries for
    parallel decoding).

``sync_forward(buf, pos, end=None) -> int``
    Offset of the first PSB that starts at or after ``pos`` (libipt
    semantics, including PSBs partly consumed by the packet before ``pos``:
    callers resyncing after an error pass ``pos`` and the search starts up to
    15 bytes earlier), or -1.

``PacketDecoder(buf, errata=None, source="<buffer>")``
    libipt's pt_packet_decoder: ``sync_forward()``, ``sync_backward()``, ``sync_set(offset)``,
    ``offset``, ``sync_offset``, ``next() -> Packet | None`` (None at the end
    of the buffer; PacketError on a bad packet, leaving ``offset`` at it).
    The attributes ``pos``/``sync`` (same as offset/sync_offset) are public,
    and ``copy.copy(decoder)`` is an independent cursor over the same buffer
    (cheap lookahead).

``iter_packets(buf, errata=None, source=..., sync=True)``
    Yields Packet objects and, for each bad spot, the PacketError itself (not
    raised); after an error it resyncs at the next PSB like ptdump does.

``decode_columns(buf, ...)``
    The whole buffer as numpy columns (offset, size, kind, p0, p1, p2) plus a
    list of errors; the bulk form for fast consumers.

The core ``_decode`` works on integer indexing of a bytes-like object and
integer state so that a numba ``@njit`` twin can mirror it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Iterator, NamedTuple

from ptexport.errors import PacketError

__all__ = [
    "PacketKind",
    "IpCompression",
    "Packet",
    "decode_packet",
    "sync_forward",
    "sync_backward",
    "psb_offsets",
    "PacketDecoder",
    "iter_packets",
    "decode_columns",
    "PSB_SIZE",
    "ERR_EOS",
    "ERR_BAD_OPC",
    "ERR_BAD_PACKET",
]


class PacketKind(IntEnum):
    PAD = 0
    TNT_8 = 1
    TNT_64 = 2
    TIP = 3
    TIP_PGE = 4
    TIP_PGD = 5
    FUP = 6
    PIP = 7
    MODE_EXEC = 8
    MODE_TSX = 9
    STOP = 10
    CBR = 11
    TSC = 12
    MTC = 13
    TMA = 14
    CYC = 15
    VMCS = 16
    OVF = 17
    PSB = 18
    PSBEND = 19
    MNT = 20
    PTW = 21
    EXSTOP = 22
    MWAIT = 23
    PWRE = 24
    PWRX = 25
    BBP = 26
    BIP = 27
    BEP = 28
    CFE = 29
    EVD = 30
    TRIG = 31
    INVALID = 32


class IpCompression(IntEnum):
    SUPPRESSED = 0
    UPDATE_16 = 1
    UPDATE_32 = 2
    SEXT_48 = 3
    UPDATE_48 = 4
    FULL = 6


# Integer aliases for the hot path (enum attribute lookups are slow).
K_PAD = 0
K_TNT_8 = 1
K_TNT_64 = 2
K_TIP = 3
K_TIP_PGE = 4
K_TIP_PGD = 5
K_FUP = 6
K_PIP = 7
K_MODE_EXEC = 8
K_MODE_TSX = 9
K_STOP = 10
K_CBR = 11
K_TSC = 12
K_MTC = 13
K_TMA = 14
K_CYC = 15
K_VMCS = 16
K_OVF = 17
K_PSB = 18
K_PSBEND = 19
K_MNT = 20
K_PTW = 21
K_EXSTOP = 22
K_MWAIT = 23
K_PWRE = 24
K_PWRX = 25
K_BBP = 26
K_BIP = 27
K_BEP = 28
K_CFE = 29
K_EVD = 30
K_TRIG = 31
K_INVALID = 32

# Error codes returned by _decode in place of a kind.
ERR_EOS = -1
ERR_BAD_OPC = -2
ERR_BAD_PACKET = -3

_ERR_REASON = {ERR_EOS: "eos", ERR_BAD_OPC: "bad-opcode", ERR_BAD_PACKET: "bad-packet"}
_ERR_CAUSE = {
    ERR_EOS: "packet runs past the end of the trace",
    ERR_BAD_OPC: "unknown opcode",
    ERR_BAD_PACKET: "malformed packet",
}

PSB_SIZE = 16
TMA_SIZE = 7

# Errata flags relevant at packet level (see errata.py for the full set).
F_SKD007 = 1  # CYC followed by an OVF may overlap it
F_SKZ84 = 2  # TMA with reserved bits set is a corrupted (invalid) packet

# IP payload size in bytes by IPC; -1 = reserved.
_IP_SIZE = (0, 2, 4, 6, 6, -1, 8, -1)
# Short names of the packet kinds (ptdump's spelling).
KIND_NAMES = {
    PacketKind.PAD: "pad",
    PacketKind.TNT_8: "tnt.8",
    PacketKind.TNT_64: "tnt.64",
    PacketKind.TIP: "tip",
    PacketKind.TIP_PGE: "tip.pge",
    PacketKind.TIP_PGD: "tip.pgd",
    PacketKind.FUP: "fup",
    PacketKind.PIP: "pip",
    PacketKind.MODE_EXEC: "mode.exec",
    PacketKind.MODE_TSX: "mode.tsx",
    PacketKind.STOP: "stop",
    PacketKind.CBR: "cbr",
    PacketKind.TSC: "tsc",
    PacketKind.MTC: "mtc",
    PacketKind.TMA: "tma",
    PacketKind.CYC: "cyc",
    PacketKind.VMCS: "vmcs",
    PacketKind.OVF: "ovf",
    PacketKind.PSB: "psb",
    PacketKind.PSBEND: "psbend",
    PacketKind.MNT: "mnt",
    PacketKind.PTW: "ptw",
    PacketKind.EXSTOP: "exstop",
    PacketKind.MWAIT: "mwait",
    PacketKind.PWRE: "pwre",
    PacketKind.PWRX: "pwrx",
    PacketKind.BBP: "bbp",
    PacketKind.BIP: "bip",
    PacketKind.BEP: "bep",
    PacketKind.CFE: "cfe",
    PacketKind.EVD: "evd",
    PacketKind.TRIG: "trig",
    PacketKind.INVALID: "<invalid>",
}


class Packet(NamedTuple):
    offset: int
    size: int
    kind: PacketKind
    p0: int = 0
    p1: int = 0
    p2: int = 0

    # -- named views of the payload fields (see the module docstring) --
    @property
    def name(self) -> str:
        return KIND_NAMES[self.kind]

    @property
    def ip(self) -> int:
        return self.p0

    @property
    def ipc(self) -> int:
        return self.p1

    @property
    def tnt_bits(self) -> int:
        return self.p0

    @property
    def tnt_count(self) -> int:
        return self.p1

    @property
    def cr3(self) -> int:
        return self.p0

    @property
    def nr(self) -> bool:
        return bool(self.p1)

    @property
    def tsc(self) -> int:
        return self.p0

    @property
    def ctc(self) -> int:
        return self.p0

    @property
    def fc(self) -> int:
        return self.p1

    @property
    def cyc(self) -> int:
        return self.p0

    @property
    def ratio(self) -> int:
        return self.p0

    @property
    def vmcs(self) -> int:
        return self.p0

    @property
    def csl(self) -> bool:
        return bool(self.p0 & 1)

    @property
    def csd(self) -> bool:
        return bool(self.p0 & 2)

    @property
    def iflag(self) -> bool:
        return bool(self.p0 & 4)

    @property
    def intx(self) -> bool:
        return bool(self.p0 & 1)

    @property
    def abrt(self) -> bool:
        return bool(self.p0 & 2)

    @property
    def has_ip(self) -> bool:
        """For PTW/CFE (p2), EXSTOP/BEP (p0), TRIG (p2 bit 0): an FUP follows."""
        k = self.kind
        if k == K_EXSTOP or k == K_BEP:
            return bool(self.p0)
        if k == K_PTW or k == K_CFE:
            return bool(self.p2)
        if k == K_TRIG:
            return bool(self.p2 & 1)
        return False

    def tnt_taken(self) -> list[bool]:
        """TNT bits oldest first."""
        n = self.p1
        bits = self.p0
        return [bool(bits >> (n - 1 - i) & 1) for i in range(n)]


def _u(buf, pos: int, n: int) -> int:
    return int.from_bytes(buf[pos : pos + n], "little")


def _decode(buf, pos: int, end: int, flags: int, block: int):
    """Decode one packet.  Returns (kind, size, p0, p1, p2); kind < 0 is an error code.

    Pure integer logic over ``buf[i]`` so that a numba twin can mirror it.
    ``block``: BIP payload size (4 or 8) inside a BBP block, else 0.
    """
    if pos >= end:
        return ERR_EOS, 0, 0, 0, 0
    b = buf[pos]
    if b & 1 == 0:
        if b == 0:
            return K_PAD, 1, 0, 0, 0
        if block and b & 7 == 4:
            size = 1 + block
            if pos + size > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_BIP, size, b >> 3, _u(buf, pos + 1, block), 0
        if b != 2:
            pl = b >> 1
            n = pl.bit_length() - 1
            return K_TNT_8, 1, pl & ~(1 << n), n, 0
        # extended opcode
        if pos + 1 >= end:
            return ERR_EOS, 0, 0, 0, 0
        e = buf[pos + 1]
        if e == 0x82:  # PSB
            if pos + PSB_SIZE > end:
                return ERR_EOS, 0, 0, 0, 0
            i = pos + 2
            while i < pos + PSB_SIZE:
                if buf[i] != 0x02 or buf[i + 1] != 0x82:
                    return ERR_BAD_PACKET, 0, 0, 0, 0
                i += 2
            return K_PSB, PSB_SIZE, 0, 0, 0
        if e == 0x23:
            return K_PSBEND, 2, 0, 0, 0
        if e == 0xF3:
            return K_OVF, 2, 0, 0, 0
        if e == 0xA3:  # TNT-64
            if pos + 8 > end:
                return ERR_EOS, 0, 0, 0, 0
            pl = _u(buf, pos + 2, 6)
            n = pl.bit_length() - 1
            if n <= 0:
                return ERR_BAD_PACKET, 0, 0, 0, 0
            return K_TNT_64, 8, pl & ~(1 << n), n, 0
        if e == 0x43:  # PIP
            if pos + 8 > end:
                return ERR_EOS, 0, 0, 0, 0
            pl = _u(buf, pos + 2, 6)
            return K_PIP, 8, (pl >> 1) << 5, pl & 1, 0
        if e == 0x03:  # CBR
            if pos + 4 > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_CBR, 4, buf[pos + 2], 0, 0
        if e == 0x73:  # TMA
            if pos + TMA_SIZE > end:
                return ERR_EOS, 0, 0, 0, 0
            ctc = buf[pos + 2] | (buf[pos + 3] << 8)
            fc = buf[pos + 5] | (buf[pos + 6] << 8)
            if fc & ~0x1FF or buf[pos + 4]:
                if flags & F_SKZ84:
                    return K_INVALID, TMA_SIZE + 1, 0, 0, 0
                return ERR_BAD_PACKET, 0, 0, 0, 0
            return K_TMA, TMA_SIZE, ctc, fc, 0
        if e == 0xC8:  # VMCS
            if pos + 7 > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_VMCS, 7, _u(buf, pos + 2, 5) << 12, 0, 0
        if e == 0x83:
            return K_STOP, 2, 0, 0, 0
        if e == 0xC3:  # MNT
            if pos + 2 >= end:
                return ERR_EOS, 0, 0, 0, 0
            if buf[pos + 2] != 0x88:
                return ERR_BAD_OPC, 0, 0, 0, 0
            if pos + 11 > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_MNT, 11, _u(buf, pos + 3, 8), 0, 0
        if e & 0x1F == 0x12:  # PTWRITE
            plc = (e >> 5) & 3
            if plc > 1:
                return ERR_BAD_PACKET, 0, 0, 0, 0
            n = 4 << plc
            if pos + 2 + n > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_PTW, 2 + n, _u(buf, pos + 2, n), plc, e >> 7
        if e == 0x62 or e == 0xE2:
            return K_EXSTOP, 2, e >> 7, 0, 0
        if e == 0xC2:  # MWAIT
            if pos + 10 > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_MWAIT, 10, _u(buf, pos + 2, 4), _u(buf, pos + 6, 4), 0
        if e == 0x22:  # PWRE
            if pos + 4 > end:
                return ERR_EOS, 0, 0, 0, 0
            pl = buf[pos + 2] | (buf[pos + 3] << 8)
            # The SDM puts HW at bit 7 of byte 2; libipt (and its test
            # corpus) at bit 3.  Accept both.
            return K_PWRE, 4, (pl >> 12) & 0xF, (pl >> 8) & 0xF, 1 if pl & 0x88 else 0
        if e == 0xA2:  # PWRX
            if pos + 7 > end:
                return ERR_EOS, 0, 0, 0, 0
            b2 = buf[pos + 2]
            return K_PWRX, 7, b2 >> 4, b2 & 0xF, buf[pos + 3] & 0xF
        if e == 0x13:  # CFE
            if pos + 4 > end:
                return ERR_EOS, 0, 0, 0, 0
            b2 = buf[pos + 2]
            return K_CFE, 4, b2 & 0x1F, buf[pos + 3], b2 >> 7
        if e == 0x53:  # EVD
            if pos + 11 > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_EVD, 11, buf[pos + 2] & 0x3F, _u(buf, pos + 3, 8), 0
        if e == 0x63:  # BBP
            if pos + 3 > end:
                return ERR_EOS, 0, 0, 0, 0
            b2 = buf[pos + 2]
            return K_BBP, 3, b2 & 0x1F, b2 >> 7, 0
        if e == 0x33 or e == 0xB3:  # BEP
            return K_BEP, 2, e >> 7, 0, 0
        return ERR_BAD_OPC, 0, 0, 0, 0
    if b & 2:  # CYC: xxxxxE11
        value = b >> 3
        size = 1
        if b & 4:
            shl = 5
            i = pos + 1
            while True:
                if i >= end:
                    return ERR_EOS, 0, 0, 0, 0
                x = buf[i]
                i += 1
                value |= (x >> 1) << shl
                shl += 7
                if shl > 64:
                    return ERR_BAD_PACKET, 0, 0, 0, 0
                if not x & 1:
                    break
            size = i - pos
            # SKD007: a 2-byte CYC whose 2nd byte looks like an ext opcode,
            # followed by an OVF's 2nd byte, is really an OVF (report it at
            # the CYC's offset, spanning both).
            if (
                flags & F_SKD007
                and size == 2
                and (value & ~0x1F) == 0x20
                and i < end
                and buf[i] == 0xF3
            ):
                return K_OVF, 3, 0, 0, 0
        return K_CYC, size, value, 0, 0
    low = b & 0x1F
    if low == 0x0D or low == 0x11 or low == 0x01 or low == 0x1D:
        ipc = b >> 5
        n = _IP_SIZE[ipc]
        if n < 0:
            return ERR_BAD_PACKET, 0, 0, 0, 0
        if pos + 1 + n > end:
            return ERR_EOS, 0, 0, 0, 0
        ip = _u(buf, pos + 1, n) if n else 0
        if low == 0x0D:
            k = K_TIP
        elif low == 0x11:
            k = K_TIP_PGE
        elif low == 0x01:
            k = K_TIP_PGD
        else:
            k = K_FUP
        return k, 1 + n, ip, ipc, 0
    if b == 0x19:  # TSC
        if pos + 8 > end:
            return ERR_EOS, 0, 0, 0, 0
        return K_TSC, 8, _u(buf, pos + 1, 7), 0, 0
    if b == 0x59:  # MTC
        if pos + 2 > end:
            return ERR_EOS, 0, 0, 0, 0
        return K_MTC, 2, buf[pos + 1], 0, 0
    if b == 0x99:  # MODE
        if pos + 2 > end:
            return ERR_EOS, 0, 0, 0, 0
        m = buf[pos + 1]
        leaf = m & 0xE0
        if leaf == 0:
            return K_MODE_EXEC, 2, m & 7, 0, 0
        if leaf == 0x20:
            return K_MODE_TSX, 2, m & 3, 0, 0
        return ERR_BAD_PACKET, 0, 0, 0, 0
    if b == 0xD9:  # TRIG
        if pos + 3 > end:
            return ERR_EOS, 0, 0, 0, 0
        f = buf[pos + 1]
        fl = (1 if f & 0x80 else 0) | (2 if f & 0x20 else 0) | (4 if f & 0x40 else 0)
        if f & 0x40:
            if pos + 5 > end:
                return ERR_EOS, 0, 0, 0, 0
            return K_TRIG, 5, buf[pos + 2], buf[pos + 3] | (buf[pos + 4] << 8), fl
        return K_TRIG, 3, buf[pos + 2], -1, fl
    return ERR_BAD_OPC, 0, 0, 0, 0


_KINDS = tuple(PacketKind)


def _errata_flags(errata) -> int:
    if errata is None:
        return 0
    if isinstance(errata, int):
        return errata
    return (F_SKD007 if getattr(errata, "skd007", False) else 0) | (
        F_SKZ84 if getattr(errata, "skz84", False) else 0
    )


def _make_error(code: int, buf, pos: int, source: str | None) -> PacketError:
    cause = _ERR_CAUSE[code]
    if code == ERR_BAD_OPC and pos < len(buf):
        op = buf[pos]
        if op == 0x02 and pos + 1 < len(buf):
            cause = f"unknown opcode 0x02 0x{buf[pos + 1]:02x}"
        else:
            cause = f"unknown opcode 0x{op:02x}"
    err = PacketError(cause, source=source or "<buffer>", offset=pos, what="packet")
    err.reason = _ERR_REASON[code]  # type: ignore[attr-defined]
    return err


def decode_packet(buf, pos: int, end: int | None = None, errata=None, block: int = 0,
                  source: str | None = None) -> Packet:
    """Decode the packet at ``pos`` (see the module docstring)."""
    if end is None:
        end = len(buf)
    k, size, p0, p1, p2 = _decode(buf, pos, end, _errata_flags(errata), block)
    if k < 0:
        raise _make_error(k, buf, pos, source)
    return Packet(pos, size, _KINDS[k], p0, p1, p2)


_PSB_WORDS = (b"\x02\x82" * 4, b"\x82\x02" * 4)


def _find_psb_start(buf, pos: int, begin: int, end: int) -> int:
    """libipt's pt_find_psb: given a position in PSB payload, the PSB's start or -1."""
    if buf[pos] != 0x02:
        pos += 1
    while pos + 1 < end and buf[pos] == 0x02 and buf[pos + 1] == 0x82:
        pos += 2
    pos -= PSB_SIZE
    if pos < begin:
        return -1
    if buf[pos] != 0x02 or buf[pos + 1] != 0x82:
        return -1
    if _decode(buf, pos, end, 0, 0)[0] != K_PSB:
        return -1
    return pos


def sync_forward(buf, pos: int, end: int | None = None, begin: int = 0) -> int:
    """Offset of the next PSB whose start is >= ``pos``, or -1 (libipt pt_sync_forward).

    libipt scans 8-byte aligned words for the PSB pattern; with a buffer that
    starts aligned, that is offset alignment.
    """
    if end is None:
        end = len(buf)
    start = pos
    pos = (pos + 7) & ~7
    mv = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
    while True:
        cur = pos
        pos += 8
        if pos > end:
            return -1
        # Fast skip with find(): jump to the next candidate word.
        w = mv[cur:pos]
        if w != _PSB_WORDS[0] and w != _PSB_WORDS[1]:
            nxt = mv.find(b"\x02\x82\x02\x82", cur + 1, end)
            if nxt < 0:
                return -1
            # next aligned word that could be entirely pattern
            cand = nxt & ~7
            if cand > cur:
                pos = cand
            continue
        found = _find_psb_start(mv, cur, begin, end)
        if found < 0 or found < start:
            continue
        return found


def sync_backward(buf, pos: int, begin: int = 0) -> int:
    """Offset of the last PSB that starts before ``pos`` (libipt pt_sync_backward), or -1."""
    end = len(buf)
    mv = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
    pos &= ~7
    while True:
        pos -= 8
        if pos < begin:
            return -1
        w = mv[pos : pos + 8]
        if w != _PSB_WORDS[0] and w != _PSB_WORDS[1]:
            continue
        found = _find_psb_start(mv, pos, begin, end)
        if found >= 0:
            return found


PSB_BYTES = b"\x02\x82" * 8


def psb_offsets(buf) -> list[int]:
    """Offsets of every PSB in ``buf``: the sync points where independent decoding can start.

    A run of PSB pattern longer than a PSB counts once, ending where the run
    ends (libipt's pt_find_psb); the stream's segments are the spans between
    consecutive offsets.
    """
    mv = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
    out: list[int] = []
    end = len(mv)
    pos = mv.find(PSB_BYTES)
    while pos >= 0:
        run = pos + PSB_SIZE
        while run + 1 < end and mv[run] == 0x02 and mv[run + 1] == 0x82:
            run += 2
        out.append(run - PSB_SIZE)
        pos = mv.find(PSB_BYTES, run)
    return out


class PacketDecoder:
    """libipt's packet decoder over one buffer (an AUX area, a raw .pt file)."""

    def __init__(self, buf, errata=None, source: str = "<buffer>") -> None:
        # bytes index fastest and let sync_forward search without copying each time
        self.buf = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
        self.end = len(buf)
        self.flags = _errata_flags(errata)
        self.source = source
        self.pos: int | None = None
        self.sync: int | None = None
        self.block = 0

    @property
    def offset(self) -> int | None:
        return self.pos

    @property
    def sync_offset(self) -> int | None:
        return self.sync

    def sync_forward(self) -> int:
        """Move to the next PSB (one partly consumed by the packet before counts); -1 at the end."""
        pos = 0 if self.pos is None else self.pos
        if self.sync is not None and pos == self.sync:
            pos += PSB_SIZE
        pos -= min(pos, PSB_SIZE - 1)
        found = sync_forward(self.buf, pos, self.end)
        if found < 0:
            self.pos = self.end
            return -1
        self.pos = self.sync = found
        self.block = 0
        return found

    def sync_backward(self) -> int:
        """Move to the PSB before the current position (the end if unsynced); -1 if none."""
        pos = self.end if self.pos is None else self.pos
        found = sync_backward(self.buf, pos)
        if found < 0:
            return -1
        self.pos = self.sync = found
        self.block = 0
        return found

    def sync_set(self, offset: int) -> None:
        if not 0 <= offset <= self.end:
            raise _make_error(ERR_EOS, self.buf, offset, self.source)
        self.pos = self.sync = offset
        self.block = 0

    def next(self) -> Packet | None:
        """The next packet, or None at the end of the buffer."""
        pos = self.pos
        if pos is None:
            raise PacketError("decoder is not synchronized", source=self.source, offset=0,
                              what="packet")
        if pos >= self.end:
            return None
        k, size, p0, p1, p2 = _decode(self.buf, pos, self.end, self.flags, self.block)
        if k < 0:
            raise _make_error(k, self.buf, pos, self.source)
        if k == K_BBP:
            self.block = 8 if p1 else 4
        elif k == K_BEP or k == K_PSB or k == K_OVF:
            self.block = 0
        self.pos = pos + size
        return Packet(pos, size, _KINDS[k], p0, p1, p2)

    def __iter__(self):
        while True:
            p = self.next()
            if p is None:
                return
            yield p


def iter_packets(buf, errata=None, source: str = "<buffer>", sync: bool = True
                 ) -> Iterator[Packet | PacketError]:
    """All packets of ``buf``; errors are yielded (not raised), then decoding resyncs at the next PSB.

    ``sync=False`` starts at offset 0 instead of the first PSB (ptdump --no-sync).
    """
    dec = PacketDecoder(buf, errata, source)
    if sync:
        if dec.sync_forward() < 0:
            return
    else:
        dec.sync_set(0)
    while True:
        try:
            p = dec.next()
        except PacketError as e:
            yield e
            if dec.sync_forward() < 0:
                return
            continue
        if p is None:
            return
        yield p


def decode_columns(buf, errata=None, source: str = "<buffer>", sync: bool = True):
    """Decode a whole buffer into numpy columns.

    Returns ``(cols, errors)``: ``cols`` a dict of equal-length numpy arrays
    ``offset`` (int64), ``size`` (uint8), ``kind`` (uint8), ``p0``/``p1``
    (uint64), ``p2`` (int64); ``errors`` the list of PacketError met (each
    followed by a resync to the next PSB).
    """
    import numpy as np  # lazy: only the column form needs numpy (start-up time of the packet decoder)

    rows: list[Packet] = []
    errors: list[PacketError] = []
    append = rows.append
    for p in iter_packets(buf, errata, source, sync):
        if isinstance(p, PacketError):
            errors.append(p)
        else:
            append(p)
    n = len(rows)
    if n:
        off, size, kind, c0, c1, c2 = zip(*rows)
    else:
        off = size = kind = c0 = c1 = c2 = ()
    M = 0xFFFFFFFFFFFFFFFF
    cols = {
        "offset": np.array(off, dtype=np.int64),
        "size": np.array(size, dtype=np.uint8),
        "kind": np.array(kind, dtype=np.uint8),
        "p0": np.array(c0, dtype=np.uint64),
        "p1": np.array([v & M for v in c1], dtype=np.uint64),
        "p2": np.array(c2, dtype=np.int64),
    }
    return cols, errors
