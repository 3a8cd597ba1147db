"""Bulk packet decoding into numpy columns, compiled with numba: the twin of :mod:`ptexport.pt.packets`.

``decode_columns(buf, errata=None, source="<buffer>", sync=True)`` returns the same
``(cols, errors)`` as :func:`ptexport.pt.packets.decode_columns` (columns
offset/size/kind/p0/p1/p2, errors as PacketError with ``reason``), decoded
by an ``@njit`` twin of ``packets._decode`` (same integer logic, uint64
payloads).  Without numba it falls back to the pure-Python decoder.
Errors resync at the next PSB as everywhere else.

:func:`perf_timestamps` is the column form of :class:`ptexport.pt.time.PerfTime`
(perf's TSC/MTC/TMA timestamp after each packet).  The twins convention
(same names, same signatures in both) is in docs/architecture.md and held by
tests/test_twins.py.
"""

from __future__ import annotations

import numpy as np

from ptexport.pt import packets as P

from ptexport.jit import numba

__all__ = ["decode_columns", "perf_timestamps"]

U64 = np.uint64


def _u(buf, pos, n):
    v = U64(0)
    for i in range(n):
        v |= U64(buf[pos + i]) << U64(8 * i)
    return v


def _bitlen(v):
    n = 0
    while v:
        v >>= U64(1)
        n += 1
    return n


def _decode1(buf, pos, end, flags, block, out):
    """Decode at pos; fills out[0..4] = kind,size,p0,p1,p2 (as uint64); returns kind (<0 error)."""
    out[2] = U64(0)
    out[3] = U64(0)
    out[4] = U64(0)
    if pos >= end:
        return -1
    b = buf[pos]
    if b & 1 == 0:
        if b == 0:
            out[1] = U64(1)
            return 0
        if block != 0 and b & 7 == 4:
            size = 1 + block
            if pos + size > end:
                return -1
            out[1] = U64(size)
            out[2] = U64(b >> 3)
            out[3] = _u(buf, pos + 1, block)
            return 27
        if b != 2:
            pl = U64(b >> 1)
            n = _bitlen(pl) - 1
            out[1] = U64(1)
            out[2] = pl & ~(U64(1) << U64(n))
            out[3] = U64(n)
            return 1
        if pos + 1 >= end:
            return -1
        e = buf[pos + 1]
        if e == 0x82:
            if pos + 16 > end:
                return -1
            i = pos + 2
            while i < pos + 16:
                if buf[i] != 0x02 or buf[i + 1] != 0x82:
                    return -3
                i += 2
            out[1] = U64(16)
            return 18
        if e == 0x23:
            out[1] = U64(2)
            return 19
        if e == 0xF3:
            out[1] = U64(2)
            return 17
        if e == 0xA3:
            if pos + 8 > end:
                return -1
            pl = _u(buf, pos + 2, 6)
            n = _bitlen(pl) - 1
            if n <= 0:
                return -3
            out[1] = U64(8)
            out[2] = pl & ~(U64(1) << U64(n))
            out[3] = U64(n)
            return 2
        if e == 0x43:
            if pos + 8 > end:
                return -1
            pl = _u(buf, pos + 2, 6)
            out[1] = U64(8)
            out[2] = (pl >> U64(1)) << U64(5)
            out[3] = pl & U64(1)
            return 7
        if e == 0x03:
            if pos + 4 > end:
                return -1
            out[1] = U64(4)
            out[2] = U64(buf[pos + 2])
            return 11
        if e == 0x73:
            if pos + 7 > end:
                return -1
            ctc = U64(buf[pos + 2]) | (U64(buf[pos + 3]) << U64(8))
            fc = U64(buf[pos + 5]) | (U64(buf[pos + 6]) << U64(8))
            if (fc & ~U64(0x1FF)) != U64(0) or buf[pos + 4] != 0:
                if flags & 2:
                    out[1] = U64(8)
                    return 32
                return -3
            out[1] = U64(7)
            out[2] = ctc
            out[3] = fc
            return 14
        if e == 0xC8:
            if pos + 7 > end:
                return -1
            out[1] = U64(7)
            out[2] = _u(buf, pos + 2, 5) << U64(12)
            return 16
        if e == 0x83:
            out[1] = U64(2)
            return 10
        if e == 0xC3:
            if pos + 2 >= end:
                return -1
            if buf[pos + 2] != 0x88:
                return -2
            if pos + 11 > end:
                return -1
            out[1] = U64(11)
            out[2] = _u(buf, pos + 3, 8)
            return 20
        if e & 0x1F == 0x12:
            plc = (e >> 5) & 3
            if plc > 1:
                return -3
            n = 4 << plc
            if pos + 2 + n > end:
                return -1
            out[1] = U64(2 + n)
            out[2] = _u(buf, pos + 2, n)
            out[3] = U64(plc)
            out[4] = U64(e >> 7)
            return 21
        if e == 0x62 or e == 0xE2:
            out[1] = U64(2)
            out[2] = U64(e >> 7)
            return 22
        if e == 0xC2:
            if pos + 10 > end:
                return -1
            out[1] = U64(10)
            out[2] = _u(buf, pos + 2, 4)
            out[3] = _u(buf, pos + 6, 4)
            return 23
        if e == 0x22:
            if pos + 4 > end:
                return -1
            pl = buf[pos + 2] | (buf[pos + 3] << 8)
            out[1] = U64(4)
            out[2] = U64((pl >> 12) & 0xF)
            out[3] = U64((pl >> 8) & 0xF)
            out[4] = U64(1) if pl & 0x88 else U64(0)
            return 24
        if e == 0xA2:
            if pos + 7 > end:
                return -1
            b2 = buf[pos + 2]
            out[1] = U64(7)
            out[2] = U64(b2 >> 4)
            out[3] = U64(b2 & 0xF)
            out[4] = U64(buf[pos + 3] & 0xF)
            return 25
        if e == 0x13:
            if pos + 4 > end:
                return -1
            b2 = buf[pos + 2]
            out[1] = U64(4)
            out[2] = U64(b2 & 0x1F)
            out[3] = U64(buf[pos + 3])
            out[4] = U64(b2 >> 7)
            return 29
        if e == 0x53:
            if pos + 11 > end:
                return -1
            out[1] = U64(11)
            out[2] = U64(buf[pos + 2] & 0x3F)
            out[3] = _u(buf, pos + 3, 8)
            return 30
        if e == 0x63:
            if pos + 3 > end:
                return -1
            b2 = buf[pos + 2]
            out[1] = U64(3)
            out[2] = U64(b2 & 0x1F)
            out[3] = U64(b2 >> 7)
            return 26
        if e == 0x33 or e == 0xB3:
            out[1] = U64(2)
            out[2] = U64(e >> 7)
            return 28
        return -2
    if b & 2:
        value = U64(b >> 3)
        size = 1
        if b & 4:
            shl = 5
            i = pos + 1
            while True:
                if i >= end:
                    return -1
                x = buf[i]
                i += 1
                if shl < 64:
                    value |= U64(x >> 1) << U64(shl)
                shl += 7
                if shl > 64:
                    return -3
                if not x & 1:
                    break
            size = i - pos
            if (flags & 1) and size == 2 and (value & ~U64(0x1F)) == U64(0x20) and i < end \
                    and buf[i] == 0xF3:
                out[1] = U64(3)
                return 17
        out[1] = U64(size)
        out[2] = value
        return 15
    low = b & 0x1F
    if low == 0x0D or low == 0x11 or low == 0x01 or low == 0x1D:
        ipc = b >> 5
        if ipc == 0:
            n = 0
        elif ipc == 1:
            n = 2
        elif ipc == 2:
            n = 4
        elif ipc == 3 or ipc == 4:
            n = 6
        elif ipc == 6:
            n = 8
        else:
            return -3
        if pos + 1 + n > end:
            return -1
        out[1] = U64(1 + n)
        out[2] = _u(buf, pos + 1, n)
        out[3] = U64(ipc)
        if low == 0x0D:
            return 3
        if low == 0x11:
            return 4
        if low == 0x01:
            return 5
        return 6
    if b == 0x19:
        if pos + 8 > end:
            return -1
        out[1] = U64(8)
        out[2] = _u(buf, pos + 1, 7)
        return 12
    if b == 0x59:
        if pos + 2 > end:
            return -1
        out[1] = U64(2)
        out[2] = U64(buf[pos + 1])
        return 13
    if b == 0x99:
        if pos + 2 > end:
            return -1
        m = buf[pos + 1]
        leaf = m & 0xE0
        out[1] = U64(2)
        if leaf == 0:
            out[2] = U64(m & 7)
            return 8
        if leaf == 0x20:
            out[2] = U64(m & 3)
            return 9
        return -3
    if b == 0xD9:
        if pos + 3 > end:
            return -1
        f = buf[pos + 1]
        fl = 0
        if f & 0x80:
            fl |= 1
        if f & 0x20:
            fl |= 2
        if f & 0x40:
            fl |= 4
        out[2] = U64(buf[pos + 2])
        out[4] = U64(fl)
        if f & 0x40:
            if pos + 5 > end:
                return -1
            out[1] = U64(5)
            out[3] = U64(buf[pos + 3] | (buf[pos + 4] << 8))
            return 31
        out[1] = U64(3)
        out[3] = ~U64(0)
        return 31
    return -2


def _find_psb_start(buf, pos, end):
    if buf[pos] != 0x02:
        pos += 1
    while pos + 1 < end and buf[pos] == 0x02 and buf[pos + 1] == 0x82:
        pos += 2
    pos -= 16
    if pos < 0:
        return -1
    if buf[pos] != 0x02 or buf[pos + 1] != 0x82:
        return -1
    i = pos + 2
    if pos + 16 > end:
        return -1
    while i < pos + 16:
        if buf[i] != 0x02 or buf[i + 1] != 0x82:
            return -1
        i += 2
    return pos


def _sync_forward(buf, pos, end):
    start = pos
    pos = (pos + 7) & ~7
    while True:
        cur = pos
        pos += 8
        if pos > end:
            return -1
        a = buf[cur]
        if a != 0x02 and a != 0x82:
            continue
        c = 0x82 if a == 0x02 else 0x02
        ok = True
        for i in range(8):
            want = a if i % 2 == 0 else c
            if buf[cur + i] != want:
                ok = False
                break
        if not ok:
            continue
        found = _find_psb_start(buf, cur, end)
        if found < 0 or found < start:
            continue
        return found


def _decode_all(buf, flags, sync, off, size, kind, p0, p1, p2, err_off, err_code):
    end = buf.shape[0]
    out = np.zeros(5, np.uint64)
    n = 0
    ne = 0
    block = 0
    if sync:
        pos = _sync_forward(buf, 0, end)
        if pos < 0:
            return 0, 0
    else:
        pos = 0
    sync_pos = pos
    while pos < end:
        k = _decode1(buf, pos, end, flags, block, out)
        if k < 0:
            err_off[ne] = pos
            err_code[ne] = k
            ne += 1
            s = pos
            if s == sync_pos:
                s += 16
            s -= min(s, 15)
            nxt = _sync_forward(buf, s, end)
            if nxt < 0:
                break
            pos = nxt
            sync_pos = nxt
            block = 0
            continue
        sz = int(out[1])
        off[n] = pos
        size[n] = sz
        kind[n] = k
        p0[n] = out[2]
        p1[n] = out[3]
        p2[n] = np.int64(out[4])
        n += 1
        if k == 26:
            block = 8 if out[3] != U64(0) else 4
        elif k == 28 or k == 18 or k == 17:
            block = 0
        pos += sz
    return n, ne


if numba is not None:
    _u = numba.njit(cache=True)(_u)
    _bitlen = numba.njit(cache=True)(_bitlen)
    _decode1 = numba.njit(cache=True)(_decode1)
    _find_psb_start = numba.njit(cache=True)(_find_psb_start)
    _sync_forward = numba.njit(cache=True)(_sync_forward)
    _decode_all = numba.njit(cache=True)(_decode_all)


def decode_columns(buf, errata=None, source: str = "<buffer>", sync: bool = True):
    """:func:`ptexport.pt.packets.decode_columns`, compiled (numba); the reference without numba."""
    if numba is None:
        return P.decode_columns(buf, errata, source, sync)
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    n = arr.shape[0] + 1
    off = np.empty(n, np.int64)
    size = np.empty(n, np.uint8)
    kind = np.empty(n, np.uint8)
    p0 = np.empty(n, np.uint64)
    p1 = np.empty(n, np.uint64)
    p2 = np.empty(n, np.int64)
    err_off = np.empty(n, np.int64)
    err_code = np.empty(n, np.int64)
    cnt, ne = _decode_all(arr, P._errata_flags(errata), sync, off, size, kind, p0, p1, p2,
                          err_off, err_code)
    cols = {
        "offset": off[:cnt].copy(),
        "size": size[:cnt].copy(),
        "kind": kind[:cnt].copy(),
        "p0": p0[:cnt].copy(),
        "p1": p1[:cnt].copy(),
        "p2": p2[:cnt].copy(),
    }
    errors = [P._make_error(int(err_code[i]), buf, int(err_off[i]), source) for i in range(ne)]
    return cols, errors


def _perf_ts(kind, p0, p1, n, d, mult, shift, ref, slip, out):
    """perf's TSC/TMA/MTC timestamp after each packet (PerfTime, column form)."""
    timestamp = U64(0)
    tsc_ts = U64(0)
    ctc_ts = U64(0)
    ctc_delta = U64(0)
    last_mtc = U64(0)
    have_tma = False
    fixup = False
    top = U64(0xFF) << U64(56)
    for i in range(kind.shape[0]):
        k = kind[i]
        if k == 12:  # TSC
            have_tma = False
            pay = p0[i]
            if ref != U64(0):
                ts = pay | (ref & top)
                if ts < ref:
                    if ref - ts > (U64(1) << U64(55)):
                        ts += U64(1) << U64(56)
                elif ts - ref > (U64(1) << U64(55)):
                    ts -= U64(1) << U64(56)
                tsc_ts = ts
                timestamp = ts
                ref = U64(0)
            elif timestamp != U64(0):
                ts = pay | (timestamp & top)
                tsc_ts = ts
                if ts < timestamp and timestamp - ts < slip:
                    ts = timestamp
                if ts < timestamp:
                    ts += U64(1) << U64(56)
                    tsc_ts = ts
                timestamp = ts
            else:
                tsc_ts = pay
                timestamp = pay
        elif k == 14 and d != U64(0):  # TMA
            ctc = p0[i]
            rem = ctc & ((U64(1) << U64(shift)) - U64(1))
            last_mtc = (ctc >> U64(shift)) & U64(0xFF)
            if mult != U64(0):
                conv = rem * mult
            else:
                conv = (rem // d) * n + ((rem % d) * n) // d
            ctc_ts = tsc_ts - p1[i] - conv
            ctc_delta = U64(0)
            have_tma = True
            fixup = True
        elif k == 13 and have_tma:  # MTC
            mtc = p0[i]
            if shift > 8 and fixup:
                fixup = False
                first_missing = U64(1) << U64(16 - shift)
                mask = ~(first_missing - U64(1)) & U64(0xFFFFFFFF)
                last = last_mtc | (mtc & mask)
                if last >= mtc:
                    last = (last - first_missing) & U64(0xFF)
                last_mtc = last
            if mtc > last_mtc:
                delta = mtc - last_mtc
            else:
                delta = mtc + U64(256) - last_mtc
            ctc_delta += delta << U64(shift)
            if mult != U64(0):
                conv = ctc_delta * mult
            else:
                conv = (ctc_delta // d) * n + ((ctc_delta % d) * n) // d
            ts = ctc_ts + conv
            if ts >= timestamp:
                timestamp = ts
            last_mtc = mtc
        out[i] = timestamp


if numba is not None:
    _perf_ts = numba.njit(cache=True)(_perf_ts)


def perf_timestamps(cols, tsc_ctc_ratio_n: int, tsc_ctc_ratio_d: int, mtc_shift: int,
                    ref_timestamp: int = 0, tsc_slip: int = 0x10000) -> np.ndarray:
    """perf's timestamp (TSC units) in effect after each packet of ``cols`` (uint64 array).

    The column form of :class:`ptexport.pt.time.PerfTime` for a buffer decoded
    by :func:`decode_columns`: a sample at packet i carries ``ts[i]``.
    """
    n, d = tsc_ctc_ratio_n, tsc_ctc_ratio_d
    mult = n // d if n and d and n % d == 0 else 0
    out = np.zeros(len(cols["kind"]), np.uint64)
    _perf_ts(cols["kind"], cols["p0"], cols["p1"], U64(n), U64(d), U64(mult), mtc_shift,
             U64(ref_timestamp), U64(tsc_slip), out)
    return out
