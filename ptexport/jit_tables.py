"""Hash tables for compiled kernels: int64 key -> int64 value, open addressing over two arrays.

Both compiled walkers keep their code blocks in one (the perf decoder's kernel,
:mod:`ptexport.decoder.compiled.kernel`, and the raw instruction walker,
:mod:`ptexport.raw.insn_compiled`), so the table sits here, beside
:mod:`ptexport.jit`, below both packages: neither imports the other.

A table is ``HK`` (keys) and ``HV`` (values), both int64 of the same
power-of-two length; a negative value marks an empty slot.  The caller sizes
the table (it must never fill up) and grows it by re-inserting into a bigger
one.  Compiled without numba's reference counting, as the kernels calling it
are (see :mod:`ptexport.decoder.compiled.kernel`); plain Python when numba is
missing.  numba's cache of a caller is keyed by the caller's source only: after
changing this file, remove the callers' cache files too (their ``__pycache__/*.nb[ic]``).
"""

from __future__ import annotations

import numpy as np

from ptexport.jit import numba

if numba is not None:
    _jit = numba.njit(cache=True, _nrt=False)
else:  # pragma: no cover - exercised where numba is missing
    def _jit(f):
        return f


@_jit
def _hash(ip, mask):
    h = ip * np.int64(-7046029254386353131)
    return (h ^ (h >> 29)) & mask


@_jit
def tab_find(HK, HV, ip):
    """The value stored for key ``ip``, or -1."""
    mask = len(HK) - 1
    h = _hash(ip, mask)
    while True:
        v = HV[h]
        if v < 0:
            return -1
        if HK[h] == ip:
            return v
        h = (h + 1) & mask


@_jit
def tab_insert(HK, HV, ip, val):
    """Store ``val`` (>= 0) for key ``ip``, replacing what was there."""
    mask = len(HK) - 1
    h = _hash(ip, mask)
    while True:
        if HV[h] < 0 or HK[h] == ip:
            HK[h] = ip
            HV[h] = val
            return
        h = (h + 1) & mask
