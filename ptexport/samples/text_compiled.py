"""perf script's sample lines written by a compiled loop: ``dump branches`` text at the decoder's speed.

The compiled twin of :mod:`ptexport.samples.text` (same public names; that
module is the reference the tests hold this one to, see docs/architecture.md).
Formatting each line with Python f-strings cost more than decoding (~5 µs a
line); :func:`sample_lines` writes the default lines (``perf script -F
pid,tid,cpu,time,ip,addr,flags --ns`` with the VM prefix) from the columns
into one buffer per batch.  The formats, as perf 6.1 prints them:

- ``VM:%5d VCPU:%03d `` before a guest's sample (machine pid != 0);
- ``%5d/%-5d [%03d] %5lu.%09lu: `` pid/tid, CPU, time;
- the flags field (``"  %-21s "``, given per row as an index into the batch's distinct texts);
- branches `` %16lx => %16lx`` (ip, addr), other samples ``%16lx %16lx`` (addr, ip: perf prints no blank
  before the addr, perf_sample__fprintf_addr).

Error lines are the reference's :func:`~ptexport.samples.text.error_line`
(their messages are Python's), copied in at their rows.  The ``-F`` subsets and
the microsecond time are printed by the reference formatter (they are not on
the hot path of a full dump).
"""

from __future__ import annotations

import numpy as np

from ptexport.jit import numba
from ptexport.samples import text as _reference
from ptexport.samples.columns import EV_BRANCH, EV_ERROR, SampleColumns
from ptexport.samples.flags import distinct_flags, format_flags_field
from ptexport.samples.text import (  # noqa: F401 - the twin's names that have no compiled form
    CSV_COLUMNS,
    CSV_VM_COLUMNS,
    DEFAULT_FIELDS,
    FIELDS,
    csv_header,
    csv_rows,
    error_line,
    error_lines,
    ipc_field,
    perf_time,
    usec_time,
)

__all__ = _reference.__all__

_LINE_MAX = 160  # bytes of one line at most: VM prefix 20, pid/tid/cpu/time ~48, flags 25, two addresses 36
_VM, _VCPU, _ARROW = (np.frombuffer(t, np.uint8) for t in (b"VM:", b" VCPU:", b" => "))


def _put_dec(buf, pos, v, width, left, zero):
    """Signed decimal ``v`` padded to ``width``: right-aligned by spaces (or zeros after the sign), or
    left-aligned (``%5d``, ``%-5d``, ``%03d``)."""
    neg = v < 0
    u = np.uint64(-v) if neg else np.uint64(v)
    n = 1
    t = u // np.uint64(10)
    while t:
        n += 1
        t //= np.uint64(10)
    size = n + (1 if neg else 0)
    pad = width - size if width > size else 0
    if not left and not zero:
        for _ in range(pad):
            buf[pos] = 32
            pos += 1
    if neg:
        buf[pos] = 45
        pos += 1
    if zero and not left:
        for _ in range(pad):
            buf[pos] = 48
            pos += 1
    for k in range(n - 1, -1, -1):  # the digits from the last
        buf[pos + k] = 48 + np.uint8(u % np.uint64(10))
        u //= np.uint64(10)
    pos += n
    if left:
        for _ in range(pad):
            buf[pos] = 32
            pos += 1
    return pos


def _put_hex(buf, pos, u, width):
    """Unsigned ``u`` in lower-case hex, right-aligned by spaces to ``width`` (``%16lx``)."""
    n = 1
    t = u >> np.uint64(4)
    while t:
        n += 1
        t >>= np.uint64(4)
    for _ in range(width - n):
        buf[pos] = 32
        pos += 1
    for k in range(n - 1, -1, -1):
        d = np.uint8(u & np.uint64(15))
        buf[pos + k] = 48 + d if d < 10 else 87 + d
        u >>= np.uint64(4)
    return pos + n


def _put_bytes(buf, pos, src, start, end):
    for k in range(start, end):
        buf[pos] = src[k]
        pos += 1
    return pos


def _lines(given, branch, mp, vcpu, pid, tid, cpu, time, ip, addr, flag_idx, ftext, foff, gtext, goff, buf):
    """The lines of all rows into ``buf``; returns the bytes written."""
    pos = 0
    billion = np.uint64(1_000_000_000)
    g = 0
    for i in range(len(given)):
        if given[i]:
            pos = _put_bytes(buf, pos, gtext, goff[g], goff[g + 1])
            g += 1
            continue
        if mp[i] != 0:
            pos = _put_bytes(buf, pos, _VM, 0, 3)
            pos = _put_dec(buf, pos, mp[i], 5, False, False)
            pos = _put_bytes(buf, pos, _VCPU, 0, 6)
            pos = _put_dec(buf, pos, vcpu[i], 3, False, True)
            buf[pos] = 32
            pos += 1
        pos = _put_dec(buf, pos, pid[i], 5, False, False)
        buf[pos] = 47
        pos += 1
        pos = _put_dec(buf, pos, tid[i], 5, True, False)
        buf[pos] = 32
        buf[pos + 1] = 91
        pos += 2
        pos = _put_dec(buf, pos, cpu[i], 3, False, True)
        buf[pos] = 93
        buf[pos + 1] = 32
        pos += 2
        t = np.uint64(time[i])
        pos = _put_dec(buf, pos, np.int64(t // billion), 5, False, False)
        buf[pos] = 46
        pos += 1
        pos = _put_dec(buf, pos, np.int64(t % billion), 9, False, True)
        buf[pos] = 58
        buf[pos + 1] = 32
        pos += 2
        f = flag_idx[i]
        pos = _put_bytes(buf, pos, ftext, foff[f], foff[f + 1])
        if branch[i]:
            buf[pos] = 32
            pos += 1
            pos = _put_hex(buf, pos, np.uint64(ip[i]), 16)
            pos = _put_bytes(buf, pos, _ARROW, 0, 4)
            pos = _put_hex(buf, pos, np.uint64(addr[i]), 16)
        else:
            pos = _put_hex(buf, pos, np.uint64(addr[i]), 16)
            buf[pos] = 32
            pos += 1
            pos = _put_hex(buf, pos, np.uint64(ip[i]), 16)
        buf[pos] = 10
        pos += 1
    return pos


if numba is not None:
    _jit = numba.njit(cache=True, nogil=True)
    # the per-field helpers inlined into the line loop (numba's IR inlining): called apart, each of the
    # ~12 calls a line passed its arrays as structs and counted their references (text 10 M: -5 % CPU)
    _inline = numba.njit(cache=True, nogil=True, inline="always")
    _put_dec = _inline(_put_dec)
    _put_hex = _inline(_put_hex)
    _put_bytes = _inline(_put_bytes)
    _lines = _jit(_lines)


def _packed(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    enc = [t.encode() for t in texts]
    off = np.zeros(len(enc) + 1, np.int64)
    off[1:] = np.cumsum([len(e) for e in enc])
    return np.frombuffer(b"".join(enc) or b"\0", np.uint8), off


def _batch_lines(branch: np.ndarray, mp: np.ndarray, vcpu: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                 cpu: np.ndarray, time: np.ndarray, ip: np.ndarray, addr: np.ndarray, flag_idx: np.ndarray,
                 flags_texts: list[str], given: np.ndarray, given_lines: list[str]) -> memoryview:
    """The lines of a batch: ``flag_idx`` indexes ``flags_texts`` (the flags fields); rows where ``given``
    is set print the next of ``given_lines`` instead (errors, formatted by the reference)."""
    ftext, foff = _packed(flags_texts)
    gtext, goff = _packed(given_lines)
    width = _LINE_MAX + int(np.diff(foff).max(initial=0))
    buf = np.empty(len(branch) * width + len(gtext), np.uint8)
    n = _lines(given, branch, mp, vcpu, pid, tid, cpu, time, ip, addr, flag_idx, ftext, foff, gtext, goff, buf)
    return buf[:n].data


def sample_lines(cols: SampleColumns, fields: frozenset[str] = DEFAULT_FIELDS, *, nsec: bool = True) -> str:
    """:func:`ptexport.samples.text.sample_lines`, the default lines by the compiled loop."""
    return bytes(sample_bytes(cols, fields, nsec=nsec)).decode("ascii")


def sample_bytes(cols: SampleColumns, fields: frozenset[str] = DEFAULT_FIELDS, *, nsec: bool = True) -> bytes | memoryview:
    """:func:`sample_lines` as ASCII bytes, for a binary stream (no str made and encoded again)."""
    if fields != DEFAULT_FIELDS or not nsec:
        return _reference.sample_lines(cols, fields, nsec=nsec).encode("ascii")
    n = len(cols.kind)
    kind = np.asarray(cols.kind)
    err = kind == EV_ERROR
    mps = cols.machine_pid if cols.machine_pid is not None else np.zeros(n, np.int64)
    vcpus = cols.vcpu if cols.vcpu is not None else np.full(n, -1, np.int64)
    uniq, inv = distinct_flags(np.asarray(cols.flags))
    texts = [format_flags_field(int(v)) for v in uniq]
    errors = error_lines(cols, np.flatnonzero(err).tolist(), np.asarray(mps).tolist(),
                                     np.asarray(vcpus).tolist())
    return _batch_lines(
        kind == EV_BRANCH, np.asarray(mps, np.int64), np.asarray(vcpus, np.int64), np.asarray(cols.pid, np.int64),
        np.asarray(cols.tid, np.int64), np.asarray(cols.cpu, np.int64), np.asarray(cols.time, np.int64),
        np.asarray(cols.ip).astype(np.uint64, copy=False), np.asarray(cols.addr).astype(np.uint64, copy=False),
        inv.astype(np.int64), texts, err, errors)
