"""perf's packet tokenization compiled with numba: the twin of :mod:`ptexport.pt.perfpkt`.

``tokenize(buf)`` returns the same :class:`~ptexport.pt.perfpkt.PacketColumns`
as :func:`ptexport.pt.perfpkt.tokenize`; without numba it is that function itself.
The integer logic below mirrors ``perfpkt.decode_one``/``_ext`` line for line
(kinds are the :class:`~ptexport.pt.perfpkt.Pkt` numbers, held equal by
tests/test_twins.py; the twins convention is in docs/architecture.md).
"""

from __future__ import annotations

import numpy as np

from ptexport.pt import perfpkt
from ptexport.pt.perfpkt import PacketColumns

from ptexport.jit import PROBLEM as NUMBA_PROBLEM  # numba is a core dependency; without it: the reference
from ptexport.jit import numba

__all__ = ["tokenize", "NUMBA_PROBLEM"]  # and the Pkt numbers below, for the decoder's kernel

# Pkt numbers (numba freezes module globals as constants).
BAD, PAD, TNT, TIP_PGD, TIP_PGE, TSC, TMA, MODE_EXEC, MODE_TSX, MTC, TIP, FUP, CYC, VMCS, PSB, PSBEND, CBR, \
    TRACESTOP, PIP, OVF, MNT, PTWRITE, PTWRITE_IP, EXSTOP, EXSTOP_IP, MWAIT, PWRE, PWRX, BBP, BIP, BEP, BEP_IP, \
    CFE, CFE_IP, EVD = range(35)
assert EVD == perfpkt.Pkt.EVD and PSB == perfpkt.Pkt.PSB

_NO_CTX, _BLK4_CTX, _BLK8_CTX = 0, 1, 2
_TOP = np.uint64(1 << 63)


def _le(buf, start, n):
    v = np.uint64(0)
    for k in range(n):
        v |= np.uint64(buf[start + k]) << np.uint64(8 * k)
    return v


def _ext(buf, i, n, out):
    """Packets starting with 0x02; fills out[0..2] = count, payload(bits as int64); returns (kind, size)."""
    if n - i < 2:
        return BAD, 0
    b1 = np.int64(buf[i + 1])
    if (b1 & 0x1F) == 0x12:
        count = (b1 >> 5) & 3
        kind = PTWRITE_IP if b1 & 0x80 else PTWRITE
        if count == 0:
            if n - i >= 6:
                out[0] = 0
                out[1] = _le(buf, i + 2, 4)
                return kind, 6
            return BAD, 0
        if count == 1:
            if n - i >= 10:
                out[0] = 1
                out[1] = _le(buf, i + 2, 8)
                return kind, 10
            return BAD, 0
        return BAD, -1
    if b1 == 0xA3:
        if n - i < 8:
            return BAD, 0
        payload = _le(buf, i, 8)
        count = 47
        while count:
            if payload & _TOP:
                break
            payload = payload << np.uint64(1)
            count -= 1
        out[0] = count
        out[1] = payload << np.uint64(1)
        return TNT, 8
    if b1 == 0x43:
        if n - i >= 8:
            out[1] = _le(buf, i + 2, 6)
            return PIP, 8
        return BAD, 0
    if b1 == 0x83:
        return TRACESTOP, 2
    if b1 == 0x03:
        if n - i >= 4:
            out[1] = _le(buf, i + 2, 2)
            return CBR, 4
        return BAD, 0
    if b1 == 0xC8:
        if n - i >= 7:
            out[0] = 5
            out[1] = _le(buf, i + 2, 5)
            return VMCS, 7
        return BAD, 0
    if b1 == 0xF3:
        return OVF, 2
    if b1 == 0x82:
        if n - i < 16:
            return BAD, 0
        for k in range(16):
            if buf[i + k] != (0x02 if k % 2 == 0 else 0x82):
                return BAD, -1
        return PSB, 16
    if b1 == 0x23:
        return PSBEND, 2
    if b1 == 0x73:
        if n - i < 7:
            return BAD, 0
        out[0] = np.int64(buf[i + 5]) | ((np.int64(buf[i + 6]) & 1) << 8)
        out[1] = np.uint64(buf[i + 2]) | (np.uint64(buf[i + 3]) << np.uint64(8))
        return TMA, 7
    if b1 == 0xC3:
        if n - i < 3:
            return BAD, 0
        if buf[i + 2] == 0x88:
            if n - i >= 11:
                out[1] = _le(buf, i + 3, 8)
                return MNT, 11
            return BAD, 0
        return BAD, -1
    if b1 == 0x62:
        return EXSTOP, 2
    if b1 == 0xE2:
        return EXSTOP_IP, 2
    if b1 == 0xC2:
        if n - i >= 10:
            out[1] = _le(buf, i + 2, 8)
            return MWAIT, 10
        return BAD, 0
    if b1 == 0x22:
        if n - i >= 4:
            out[1] = _le(buf, i + 2, 2)
            return PWRE, 4
        return BAD, 0
    if b1 == 0xA2:
        if n - i >= 7:
            out[1] = _le(buf, i + 2, 5)
            return PWRX, 7
        return BAD, 0
    if b1 == 0x63:
        if n - i < 3:
            return BAD, 0
        out[0] = np.int64(buf[i + 2]) >> 7
        out[1] = np.uint64(buf[i + 2] & 0x1F)
        return BBP, 3
    if b1 == 0x33:
        return BEP, 2
    if b1 == 0xB3:
        return BEP_IP, 2
    if b1 == 0x13 or b1 == 0x93:
        if n - i < 4:
            return BAD, 0
        out[0] = np.int64(buf[i + 2]) & 0x1F
        out[1] = np.uint64(buf[i + 3])
        return (CFE_IP if buf[i + 2] & 0x80 else CFE), 4
    if b1 == 0x53:
        if n - i < 11:
            return BAD, 0
        out[0] = np.int64(buf[i + 2]) & 0x3F
        out[1] = _le(buf, i + 3, 8)
        return EVD, 11
    return BAD, -1


def _ip_len(count):
    if count == 0:
        return 0
    if count == 1:
        return 2
    if count == 2:
        return 4
    if count == 3 or count == 4:
        return 6
    if count == 6:
        return 8
    return -1


def _decode_one(buf, i, n, ctx, out):
    """Returns (kind, size); out[0] = count, out[1] = payload (uint64 array of 2)."""
    out[0] = 0
    out[1] = 0
    byte = np.int64(buf[i])
    if ctx != _NO_CTX and (byte & 7) == 4:
        width = 4 if ctx == _BLK4_CTX else 8
        if n - i < width + 1:
            return BAD, 0
        out[0] = byte >> 3
        out[1] = _le(buf, i + 1, width)
        return BIP, width + 1
    if not byte & 1:
        if byte == 0:
            return PAD, 1
        if byte == 2:
            return _ext(buf, i, n, out)
        count = 6
        while count:
            if byte & 0x80:
                break
            byte <<= 1
            count -= 1
        out[0] = count
        out[1] = np.uint64(byte & 0xFF) << np.uint64(57)
        return TNT, 1
    if byte & 2:
        payload = np.uint64(byte >> 3)
        offs = 1
        shift = 5
        b = byte >> 2
        while b & 1:
            if offs > 9:
                return BAD, -1
            if n - i - 1 < offs:
                return BAD, 0
            b = np.int64(buf[i + offs])
            offs += 1
            payload |= np.uint64(b >> 1) << np.uint64(shift)
            shift += 7
        out[1] = payload
        return CYC, offs
    low = byte & 0x1F
    if low == 0x0D or low == 0x11 or low == 0x01 or low == 0x1D:
        if low == 0x0D:
            kind = TIP
        elif low == 0x11:
            kind = TIP_PGE
        elif low == 0x01:
            kind = TIP_PGD
        else:
            kind = FUP
        count = byte >> 5
        ip_len = _ip_len(count)
        if ip_len < 0:
            return BAD, -1
        if n - i < ip_len + 1:
            return BAD, 0
        out[0] = count
        out[1] = _le(buf, i + 1, ip_len)
        return kind, ip_len + 1
    if low == 0x19:
        if byte == 0x99:
            if n - i < 2:
                return BAD, 0
            b1 = np.int64(buf[i + 1])
            mode = b1 >> 5
            if mode == 0:
                m = b1 & 3
                if m == 0:
                    out[1] = 16
                elif m == 1:
                    out[1] = 64
                elif m == 2:
                    out[1] = 32
                else:
                    return BAD, -1
                out[0] = b1 & 0x04  # RFLAGS.IF (perf's INTEL_PT_IFLAG)
                return MODE_EXEC, 2
            if mode == 1:
                if (b1 & 3) == 3:
                    return BAD, -1
                out[1] = np.uint64(b1 & 3)
                return MODE_TSX, 2
            return BAD, -1
        if byte == 0x19:
            if n - i >= 8:
                out[1] = _le(buf, i + 1, 7)
                return TSC, 8
            return BAD, 0
        if byte == 0x59:
            if n - i >= 2:
                out[1] = np.uint64(buf[i + 1])
                return MTC, 2
            return BAD, 0
    return BAD, -1


def _next_ctx(kind, count, ctx):
    if kind == BBP:
        return _BLK4_CTX if count else _BLK8_CTX
    if (kind == BAD or kind == PAD or kind == TSC or kind == TMA or kind == MTC or kind == FUP or kind == CYC
            or kind == CBR or kind == MNT or kind == EXSTOP or kind == EXSTOP_IP or kind == PWRE or kind == PWRX
            or kind == BIP):
        return ctx
    return _NO_CTX


def _tokenize(buf, kinds, counts, payloads, poss, sizes, out):
    """``out``: two words of scratch (made by the caller: a kernel that allocates makes numba import
    its array library, ~50 ms, when it loads the kernel)."""
    n = len(buf)
    i = 0
    j = 0
    ctx = _NO_CTX
    while i < n:
        kind, size = _decode_one(buf, i, n, ctx, out)
        count = np.int64(out[0])
        payload = out[1]
        if size <= 0:
            kind, size, count, payload = BAD, 1, 0, np.uint64(0)
        else:
            while size < 8 and i + size < n and buf[i + size] == 0:
                size += 1
            ctx = _next_ctx(kind, count, ctx)
        kinds[j] = kind
        counts[j] = count
        payloads[j] = payload
        poss[j] = i
        sizes[j] = size
        j += 1
        i += size
    return j


if numba is not None:
    # the per-packet helpers inlined into the loop (numba's IR inlining): called apart, each passed its
    # arrays as structs and counted their references (10.8 MB tokenized: 0.064 -> 0.035 s)
    _inline = numba.njit(cache=True, inline="always")
    _le = _inline(_le)
    _ext = _inline(_ext)
    _ip_len = _inline(_ip_len)
    _decode_one = _inline(_decode_one)
    _next_ctx = _inline(_next_ctx)
    _tokenize = numba.njit(cache=True, nogil=True)(_tokenize)  # other threads run meanwhile


def tokenize(buf) -> PacketColumns:
    """:func:`ptexport.pt.perfpkt.tokenize` compiled (same columns); the reference without numba."""
    if numba is None:
        return perfpkt.tokenize(buf)
    arr = np.frombuffer(buf, dtype=np.uint8) if len(buf) else np.zeros(0, np.uint8)
    n = len(arr)
    kinds = np.empty(n, np.uint8)
    counts = np.empty(n, np.uint16)
    payloads = np.empty(n, np.uint64)
    poss = np.empty(n, np.int64)
    sizes = np.empty(n, np.uint8)
    m = _tokenize(arr, kinds, counts, payloads, poss, sizes, np.zeros(2, np.uint64))
    return PacketColumns(kind=kinds[:m].copy(), count=counts[:m].copy(), payload=payloads[:m].copy(),
                         pos=poss[:m].copy(), size=sizes[:m].copy())
