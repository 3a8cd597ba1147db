"""Intel PT packets tokenized the way perf's decoder sees them.

perf's packet reader differs from libipt's ptdump view in ways that change
what its decoder does, so the perf-compatible decoder gets its own tokenizer:

* a packet swallows the zero bytes (PADs) that follow it, up to 8 bytes in
  all, so positions after it skip them;
* TNT bits are left-aligned: bit 63 of ``payload`` is the oldest branch and
  ``count`` says how many bits there are;
* IP packets keep the raw IPBytes code in ``count`` (0, 1, 2, 3, 4 or 6) and
  the unextended bytes in ``payload``;
* TMA puts CTC in ``payload`` and FC in ``count``; MODE.Exec carries 16, 32
  or 64; PTWRITE/EXSTOP/BEP have separate kinds when their IP bit is set;
* a packet cut short by the end of the buffer is a bad packet of one byte.

:func:`tokenize` turns a whole buffer into numpy columns in one pass, so the
decoder above it indexes arrays instead of parsing bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np


class Pkt(IntEnum):
    BAD = 0
    PAD = 1
    TNT = 2
    TIP_PGD = 3
    TIP_PGE = 4
    TSC = 5
    TMA = 6
    MODE_EXEC = 7
    MODE_TSX = 8
    MTC = 9
    TIP = 10
    FUP = 11
    CYC = 12
    VMCS = 13
    PSB = 14
    PSBEND = 15
    CBR = 16
    TRACESTOP = 17
    PIP = 18
    OVF = 19
    MNT = 20
    PTWRITE = 21
    PTWRITE_IP = 22
    EXSTOP = 23
    EXSTOP_IP = 24
    MWAIT = 25
    PWRE = 26
    PWRX = 27
    BBP = 28
    BIP = 29
    BEP = 30
    BEP_IP = 31
    CFE = 32
    CFE_IP = 33
    EVD = 34


PSB_BYTES = bytes([0x02, 0x82] * 8)

# Packet context after a BBP: block items are 4 or 8 bytes.
_NO_CTX, _BLK4_CTX, _BLK8_CTX = 0, 1, 2

_IP_LEN = {0: 0, 1: 2, 2: 4, 3: 6, 4: 6, 6: 8}


@dataclass(slots=True)
class PacketColumns:
    """One buffer's packets, in order; ``pos`` is the byte offset in the buffer."""

    kind: np.ndarray  # uint8 Pkt
    count: np.ndarray  # uint16
    payload: np.ndarray  # uint64
    pos: np.ndarray  # int64
    size: np.ndarray  # uint8, including swallowed trailing PADs

    def __len__(self) -> int:
        return len(self.kind)


def _le(buf, start: int, n: int) -> int:
    return int.from_bytes(buf[start:start + n], "little")


def _ext(buf, i: int, n: int):
    """Decode a packet whose first byte is 0x02; return (kind, count, payload, size) or size <= 0."""
    if n - i < 2:
        return Pkt.BAD, 0, 0, 0
    b1 = buf[i + 1]
    if (b1 & 0x1F) == 0x12:  # PTWRITE
        count = (b1 >> 5) & 3
        kind = Pkt.PTWRITE_IP if b1 & 0x80 else Pkt.PTWRITE
        if count == 0:
            return (kind, 0, _le(buf, i + 2, 4), 6) if n - i >= 6 else (Pkt.BAD, 0, 0, 0)
        if count == 1:
            return (kind, 1, _le(buf, i + 2, 8), 10) if n - i >= 10 else (Pkt.BAD, 0, 0, 0)
        return Pkt.BAD, 0, 0, -1
    if b1 == 0xA3:  # long TNT
        if n - i < 8:
            return Pkt.BAD, 0, 0, 0
        payload = _le(buf, i, 8)
        count = 47
        while count:
            if payload & (1 << 63):
                break
            payload = (payload << 1) & 0xFFFFFFFFFFFFFFFF
            count -= 1
        return Pkt.TNT, count, (payload << 1) & 0xFFFFFFFFFFFFFFFF, 8
    if b1 == 0x43:
        return (Pkt.PIP, 0, _le(buf, i + 2, 6), 8) if n - i >= 8 else (Pkt.BAD, 0, 0, 0)
    if b1 == 0x83:
        return Pkt.TRACESTOP, 0, 0, 2
    if b1 == 0x03:
        return (Pkt.CBR, 0, _le(buf, i + 2, 2), 4) if n - i >= 4 else (Pkt.BAD, 0, 0, 0)
    if b1 == 0xC8:
        return (Pkt.VMCS, 5, _le(buf, i + 2, 5), 7) if n - i >= 7 else (Pkt.BAD, 0, 0, 0)
    if b1 == 0xF3:
        return Pkt.OVF, 0, 0, 2
    if b1 == 0x82:
        if n - i < 16:
            return Pkt.BAD, 0, 0, 0
        if bytes(buf[i:i + 16]) != PSB_BYTES:
            return Pkt.BAD, 0, 0, -1
        return Pkt.PSB, 0, 0, 16
    if b1 == 0x23:
        return Pkt.PSBEND, 0, 0, 2
    if b1 == 0x73:
        if n - i < 7:
            return Pkt.BAD, 0, 0, 0
        return Pkt.TMA, buf[i + 5] | ((buf[i + 6] & 1) << 8), buf[i + 2] | (buf[i + 3] << 8), 7
    if b1 == 0xC3:
        if n - i < 3:
            return Pkt.BAD, 0, 0, 0
        if buf[i + 2] == 0x88:
            return (Pkt.MNT, 0, _le(buf, i + 3, 8), 11) if n - i >= 11 else (Pkt.BAD, 0, 0, 0)
        return Pkt.BAD, 0, 0, -1
    if b1 == 0x62:
        return Pkt.EXSTOP, 0, 0, 2
    if b1 == 0xE2:
        return Pkt.EXSTOP_IP, 0, 0, 2
    if b1 == 0xC2:
        return (Pkt.MWAIT, 0, _le(buf, i + 2, 8), 10) if n - i >= 10 else (Pkt.BAD, 0, 0, 0)
    if b1 == 0x22:
        return (Pkt.PWRE, 0, _le(buf, i + 2, 2), 4) if n - i >= 4 else (Pkt.BAD, 0, 0, 0)
    if b1 == 0xA2:
        return (Pkt.PWRX, 0, _le(buf, i + 2, 5), 7) if n - i >= 7 else (Pkt.BAD, 0, 0, 0)
    if b1 == 0x63:
        if n - i < 3:
            return Pkt.BAD, 0, 0, 0
        return Pkt.BBP, buf[i + 2] >> 7, buf[i + 2] & 0x1F, 3
    if b1 == 0x33:
        return Pkt.BEP, 0, 0, 2
    if b1 == 0xB3:
        return Pkt.BEP_IP, 0, 0, 2
    if b1 in (0x13, 0x93):  # CFE: type/vector in the next two bytes
        if n - i < 4:
            return Pkt.BAD, 0, 0, 0
        return (Pkt.CFE_IP if buf[i + 2] & 0x80 else Pkt.CFE), buf[i + 2] & 0x1F, buf[i + 3], 4
    if b1 == 0x53:  # EVD
        if n - i < 11:
            return Pkt.BAD, 0, 0, 0
        return Pkt.EVD, buf[i + 2] & 0x3F, _le(buf, i + 3, 8), 11
    return Pkt.BAD, 0, 0, -1


def decode_one(buf, i: int, n: int, ctx: int = _NO_CTX):
    """Decode the packet at ``buf[i]``; return (kind, count, payload, size).

    ``size`` <= 0 means a bad packet (0: cut short by the end of the buffer).
    """
    byte = buf[i]
    if ctx != _NO_CTX and (byte & 7) == 4:
        width = 4 if ctx == _BLK4_CTX else 8
        if n - i < width + 1:
            return Pkt.BAD, 0, 0, 0
        return Pkt.BIP, byte >> 3, _le(buf, i + 1, width), width + 1
    if not byte & 1:
        if byte == 0:
            return Pkt.PAD, 0, 0, 1
        if byte == 2:
            return _ext(buf, i, n)
        count = 6
        while count:
            if byte & 0x80:
                break
            byte <<= 1
            count -= 1
        return Pkt.TNT, count, ((byte & 0xFF) << 57) & 0xFFFFFFFFFFFFFFFF, 1
    if byte & 2:  # CYC
        payload = byte >> 3
        offs, shift, b = 1, 5, byte >> 2
        while b & 1:
            if offs > 9:
                return Pkt.BAD, 0, 0, -1
            if n - i - 1 < offs:
                return Pkt.BAD, 0, 0, 0
            b = buf[i + offs]
            offs += 1
            payload |= (b >> 1) << shift
            shift += 7
        return Pkt.CYC, 0, payload, offs
    low = byte & 0x1F
    if low in (0x0D, 0x11, 0x01, 0x1D):
        kind = {0x0D: Pkt.TIP, 0x11: Pkt.TIP_PGE, 0x01: Pkt.TIP_PGD, 0x1D: Pkt.FUP}[low]
        count = byte >> 5
        ip_len = _IP_LEN.get(count)
        if ip_len is None:
            return Pkt.BAD, 0, 0, -1
        if n - i < ip_len + 1:
            return Pkt.BAD, 0, 0, 0
        return kind, count, _le(buf, i + 1, ip_len), ip_len + 1
    if low == 0x19:
        if byte == 0x99:
            if n - i < 2:
                return Pkt.BAD, 0, 0, 0
            b1 = buf[i + 1]
            mode = b1 >> 5
            if mode == 0:
                exec_mode = {0: 16, 1: 64, 2: 32}.get(b1 & 3)
                if exec_mode is None:
                    return Pkt.BAD, 0, 0, -1
                return Pkt.MODE_EXEC, b1 & 0x04, exec_mode, 2  # count: RFLAGS.IF (perf's INTEL_PT_IFLAG)
            if mode == 1:
                if (b1 & 3) == 3:
                    return Pkt.BAD, 0, 0, -1
                return Pkt.MODE_TSX, 0, b1 & 3, 2
            return Pkt.BAD, 0, 0, -1
        if byte == 0x19:
            return (Pkt.TSC, 0, _le(buf, i + 1, 7), 8) if n - i >= 8 else (Pkt.BAD, 0, 0, 0)
        if byte == 0x59:
            return (Pkt.MTC, 0, buf[i + 1], 2) if n - i >= 2 else (Pkt.BAD, 0, 0, 0)
    return Pkt.BAD, 0, 0, -1


def _next_ctx(kind: int, count: int, ctx: int) -> int:
    if kind == Pkt.BBP:
        return _BLK4_CTX if count else _BLK8_CTX
    if kind in (
        Pkt.BAD, Pkt.PAD, Pkt.TSC, Pkt.TMA, Pkt.MTC, Pkt.FUP, Pkt.CYC, Pkt.CBR, Pkt.MNT,
        Pkt.EXSTOP, Pkt.EXSTOP_IP, Pkt.PWRE, Pkt.PWRX, Pkt.BIP,
    ):
        return ctx
    return _NO_CTX


def tokenize(buf) -> PacketColumns:
    """Tokenize a whole PT buffer into columns, perf's way (see the module doc)."""
    mv = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    n = len(mv)
    kinds: list[int] = []
    counts: list[int] = []
    payloads: list[int] = []
    positions: list[int] = []
    sizes: list[int] = []
    i = 0
    ctx = _NO_CTX
    while i < n:
        kind, count, payload, size = decode_one(mv, i, n, ctx)
        if size <= 0:
            kind, count, payload, size = Pkt.BAD, 0, 0, 1
        else:
            while size < 8 and i + size < n and mv[i + size] == 0:
                size += 1
            ctx = _next_ctx(kind, count, ctx)
        kinds.append(kind)
        counts.append(count)
        payloads.append(payload)
        positions.append(i)
        sizes.append(size)
        i += size
    return PacketColumns(
        kind=np.array(kinds, dtype=np.uint8),
        count=np.array(counts, dtype=np.uint16),
        payload=np.array(payloads, dtype=np.uint64),
        pos=np.array(positions, dtype=np.int64),
        size=np.array(sizes, dtype=np.uint8),
    )


def whole_packets_end(buf) -> int:
    """Where the last whole packet of ``buf`` ends when ``buf`` was cut in the middle of a packet (the
    tail of a cut recording): packets are walked from the last PSB (else from the start); a packet cut
    short by the end gives its offset, anything else (whole packets, a bad packet) ``len(buf)``."""
    mv = bytes(buf)
    n = len(mv)
    i = max(mv.rfind(PSB_BYTES), 0)
    ctx = _NO_CTX
    while i < n:
        kind, count, _payload, size = decode_one(mv, i, n, ctx)
        if size == 0:
            return i
        if size < 0:
            return n
        ctx = _next_ctx(kind, count, ctx)
        i += size
    return n


def find_psb(buf, start: int = 0) -> int:
    """Offset of the next PSB at or after ``start``, or -1."""
    return bytes(buf).find(PSB_BYTES, start) if not isinstance(buf, bytes) else buf.find(PSB_BYTES, start)
