"""perf's VM time correlation walk (:class:`ptexport.pt.vmtime._Queue`), compiled.

One kernel call walks one AUX buffer's packets (``vmtime.packet_arrays``) with the queue's state
carried in a uint64 array from buffer to buffer, the VMCS table (shared by the queues) in arrays
the caller sizes, and what the Python walk appends - TSC patches, VMCS packets seen, messages -
written into arrays sized for the buffer (at most one patch per TSC packet, one VMCS seen per VMCS
packet, three messages per TSC or PSB packet).  The arithmetic is perf's modulo 2**64, as the
Python form's masks give it; every rule, and the order of the messages, is the Python form's
(``tests/pt/test_vmtime_compiled.py`` runs both over random packet streams).

Used when numba loads (``vmtime.packet_lists``' rule); without it the Python walk runs.
"""

from __future__ import annotations

import numpy as np

from ptexport.jit import numba
from ptexport.pt.perfpkt import Pkt

# --- the state array (uint64) -----------------------------------------------------------------------
TS, TSC_TS, REF_TS, BUF_TS, CTC_TS, CTC_DELTA, LAST_CTC, LAST_MTC = range(8)
HAVE_TMA, FIXUP, PGE, IN_PSB, PIP_PAYLOAD, VMCS, RELIABLE, CONTINUOUS, SAME_BUF, LAST_REL_TS = range(8, 18)
PRINTED_ERANGE, PRINTED_UNK_VMCS = 18, 19
# the PSB+ lookahead kept from packet to packet (the Python walk's ``data``)
D_PIP, D_PIP_PAYLOAD, D_VMCS, D_VMCS_PAYLOAD, D_TMA, D_TMA_CTC, D_TMA_FC, D_TSC, D_PSBEND, D_CTC_DELTA, \
    D_LAST_CTC = range(20, 31)
D_SIZE = 11
# configuration
C_SHIFT, C_REM_MASK, C_HAVE_D, C_MULT, C_N, C_D, C_DEFAULT_OFF = range(31, 38)
# counts of the outputs (reset by the caller per buffer) and of the VMCS table
N_PATCH, N_SEEN, N_MSG, N_TAB = range(38, 42)
STATE_SIZE = 42

# --- messages: (code, value, value) -> perf's text ----------------------------------------------------
MSG_PSB_NO_PSBEND, MSG_FIRST_NOT_IN_PSB, MSG_FIRST_UNKNOWN_OFFSET, MSG_FIRST_NO_PIP, MSG_TSC_NO_TMA, \
    MSG_MISSING_VMCS, MSG_OFFSET, MSG_UNKNOWN_OFFSET, MSG_UNKNOWN_VMCS, MSG_OUT_OF_RANGE = range(1, 11)


def message(code: int, a: int, b: int) -> str:
    """The text of message ``code`` (the Python walk's)."""
    if code == MSG_OFFSET:
        return f"VMCS: {a:#x}  TSC Offset {b:#x}"
    if code == MSG_UNKNOWN_OFFSET:
        return f"ERROR: Unknown TSC Offset for VMCS {a:#x}"
    return _TEXTS[code]


_TEXTS = {MSG_PSB_NO_PSBEND: "ERROR: PSB without PSBEND", MSG_FIRST_NOT_IN_PSB: "ERROR: First TSC is not in PSB+",
          MSG_FIRST_UNKNOWN_OFFSET: "ERROR: First TSC, unknown TSC Offset",
          MSG_FIRST_NO_PIP: "ERROR: First TSC, no PIP, unknown TSC Offset",
          MSG_TSC_NO_TMA: "ERROR: TSC without TMA", MSG_MISSING_VMCS: "ERROR: Missing VMCS",
          MSG_UNKNOWN_VMCS: "ERROR: Unknown VMCS", MSG_OUT_OF_RANGE: "Timestamp out of range"}

_BAD, _PAD, _TNT, _TIP_PGD, _TIP_PGE, _TSC, _TMA, _MTC, _TIP, _FUP, _CYC, _VMCS, _PSB, _PSBEND, _CBR, _STOP, \
    _PIP, _OVF, _MNT, _MODE_EXEC, _MODE_TSX = (int(p) for p in (
        Pkt.BAD, Pkt.PAD, Pkt.TNT, Pkt.TIP_PGD, Pkt.TIP_PGE, Pkt.TSC, Pkt.TMA, Pkt.MTC, Pkt.TIP, Pkt.FUP, Pkt.CYC,
        Pkt.VMCS, Pkt.PSB, Pkt.PSBEND, Pkt.CBR, Pkt.TRACESTOP, Pkt.PIP, Pkt.OVF, Pkt.MNT, Pkt.MODE_EXEC,
        Pkt.MODE_TSX))

_NO_VMCS = 0xFFFFFFFFFF
_TOP8 = 0xFF << 56
_B56 = 1 << 56
_B55 = 1 << 55
_SEVEN = (1 << 56) - 1
_TSC_SLIP = 0x10000

walk_buffer = None

if numba is not None:
    _u64 = np.uint64
    _TOP8U, _B56U, _B55U, _SEVENU, _SLIPU, _NO_VMCSU = _u64(_TOP8), _u64(_B56), _u64(_B55), _u64(_SEVEN), \
        _u64(_TSC_SLIP), _u64(_NO_VMCS)
    _ZERO, _ONE = _u64(0), _u64(1)

    @numba.njit(cache=True, nogil=True)
    def _log(U, msgs, code, a, b):  # pragma: no cover - compiled
        k = np.int64(U[N_MSG])
        msgs[0, k] = _u64(code)
        msgs[1, k] = a
        msgs[2, k] = b
        U[N_MSG] = _u64(k + 1)

    @numba.njit(cache=True, nogil=True)
    def _ctc_to_tsc(U, ctc):  # pragma: no cover - compiled
        if U[C_MULT] != _ZERO:
            return ctc * U[C_MULT]
        d = U[C_D]
        if d == _ZERO:
            return _ZERO
        n = U[C_N]
        return (ctc // d) * n + ((ctc % d) * n) // d

    @numba.njit(cache=True, nogil=True)
    def _eight_byte_tsc(ts, ref):  # pragma: no cover - compiled
        ts = ts | (ref & _TOP8U)
        if ts < ref:
            if ref - ts > _B55U:
                ts = ts + _B56U
        elif ts - ref > _B55U:
            ts = ts - _B56U
        return ts

    @numba.njit(cache=True, nogil=True)
    def _in_range(U, ts):  # pragma: no cover - compiled
        return U[LAST_REL_TS] <= ts and ts < U[BUF_TS]

    @numba.njit(cache=True, nogil=True)
    def _calc_tsc(U, msgs, payload):  # pragma: no cover - compiled
        U[HAVE_TMA] = _ZERO
        if U[REF_TS] != _ZERO:
            ts = _eight_byte_tsc(payload, U[REF_TS])
            U[TSC_TS] = ts
            U[TS] = ts
            U[REF_TS] = _ZERO
        elif U[TS] != _ZERO:
            bad = False
            now = U[TS]
            ts = payload | (now & _TOP8U)
            U[TSC_TS] = ts
            if ts < now and now - ts < _SLIPU:
                ts = now
            if ts < now:
                buf = U[BUF_TS]
                if buf == _ZERO or (buf >= _B56U and ts < buf - _B56U):  # ts + 2**56 < buf, unbounded
                    ts = ts + _B56U
                    U[TSC_TS] = ts
                else:
                    ts = now
                    bad = True
            if (bad or not _in_range(U, ts)) and U[PRINTED_ERANGE] == _ZERO:
                U[PRINTED_ERANGE] = _ONE
                _log(U, msgs, MSG_OUT_OF_RANGE, _ZERO, _ZERO)
            U[TS] = ts

    @numba.njit(cache=True, nogil=True)
    def _calc_tma(U, ctc, fc):  # pragma: no cover - compiled
        if U[C_HAVE_D] == _ZERO:
            return
        rem = ctc & U[C_REM_MASK]
        U[LAST_MTC] = (ctc >> U[C_SHIFT]) & _u64(0xFF)
        U[LAST_CTC] = ctc - rem
        U[CTC_TS] = U[TSC_TS] - fc - _ctc_to_tsc(U, rem)
        U[CTC_DELTA] = _ZERO
        U[HAVE_TMA] = _ONE
        U[FIXUP] = _ONE

    @numba.njit(cache=True, nogil=True)
    def _calc_mtc(U, mtc):  # pragma: no cover - compiled
        if U[HAVE_TMA] == _ZERO:
            return
        shift = U[C_SHIFT]
        if shift > _u64(8) and U[FIXUP] != _ZERO:
            U[FIXUP] = _ZERO
            first_missing = _ONE << (_u64(16) - shift)
            mask = ~(first_missing - _ONE) & _u64(0xFFFFFFFF)
            last = U[LAST_MTC] | (mtc & mask)
            if last >= mtc:
                last = (last - first_missing) & _u64(0xFFFFFFFF)
            U[LAST_MTC] = last
        last = U[LAST_MTC]
        delta = mtc - last if mtc > last else mtc + _u64(256) - last
        U[CTC_DELTA] = U[CTC_DELTA] + (delta << shift)
        ts = U[CTC_TS] + _ctc_to_tsc(U, U[CTC_DELTA])
        if ts >= U[TS]:
            U[TS] = ts
        U[LAST_MTC] = mtc

    @numba.njit(cache=True, nogil=True)
    def _psb_lookahead(U, kinds, counts, payloads, i, dd):  # pragma: no cover - compiled
        for k in range(D_SIZE):
            dd[k] = _ZERO
        dd[D_CTC_DELTA - D_PIP] = U[CTC_DELTA]
        dd[D_LAST_CTC - D_PIP] = U[LAST_CTC]
        for j in range(i + 1, kinds.shape[0]):
            t = kinds[j]
            if t == _PAD or t == _MNT or t == _MODE_EXEC or t == _MODE_TSX or t == _MTC or t == _FUP or \
                    t == _CYC or t == _CBR:
                continue
            if t == _TSC:
                dd[D_TSC - D_PIP] = _ONE
            elif t == _TMA:
                dd[D_TMA - D_PIP] = _ONE
                dd[D_TMA_CTC - D_PIP] = payloads[j]
                dd[D_TMA_FC - D_PIP] = counts[j]
            elif t == _PIP:
                dd[D_PIP - D_PIP] = _ONE
                dd[D_PIP_PAYLOAD - D_PIP] = payloads[j]
            elif t == _VMCS:
                dd[D_VMCS - D_PIP] = _ONE
                dd[D_VMCS_PAYLOAD - D_PIP] = payloads[j]
            elif t == _PSBEND:
                dd[D_PSBEND - D_PIP] = _ONE
                break
            else:
                break

    @numba.njit(cache=True, nogil=True)
    def _tma_lookahead(kinds, counts, payloads, i, dd):  # pragma: no cover - compiled
        budget = 16
        for j in range(i + 1, kinds.shape[0]):
            t = kinds[j]
            if t == _PAD:
                continue
            if t == _CYC or t == _MTC:
                budget -= 1
                if budget == 0:
                    return
                continue
            if t == _TMA:
                dd[D_TMA - D_PIP] = _ONE
                dd[D_TMA_CTC - D_PIP] = payloads[j]
                dd[D_TMA_FC - D_PIP] = counts[j]
            return

    @numba.njit(cache=True, nogil=True)
    def _ovf_fup_lookahead(kinds, i):  # pragma: no cover - compiled
        budget = 16
        for j in range(i + 1, kinds.shape[0]):
            t = kinds[j]
            if t == _PAD:
                continue
            if t == _CYC or t == _MTC or t == _TSC:
                budget -= 1
                if budget == 0:
                    return False
                continue
            return t == _FUP
        return False

    @numba.njit(cache=True, nogil=True)
    def _translate(U, patches, bi, pos, payload, offset):  # pragma: no cover - compiled
        new = (payload - offset) & _SEVENU
        k = np.int64(U[N_PATCH])
        patches[0, k] = _u64(bi)
        patches[1, k] = _u64(pos)
        patches[2, k] = payload
        patches[3, k] = new
        U[N_PATCH] = _u64(k + 1)
        return new

    @numba.njit(cache=True, nogil=True)
    def _findnew_vmcs(U, tab, cfg_vmcs, cfg_off, vmcs):  # pragma: no cover - compiled
        """Row of ``vmcs`` in the table (rows: vmcs, offset, reliable, error printed), made if new; -1:
        none (VMCS 0 without a default offset)."""
        default = U[C_DEFAULT_OFF]
        if vmcs == _ZERO and default == _ZERO:
            return -1
        n = np.int64(U[N_TAB])
        for t in range(n):
            if tab[0, t] == vmcs:
                return t
        off = default
        for k in range(cfg_vmcs.shape[0]):
            if cfg_vmcs[k] == vmcs:
                off = cfg_off[k]
                break
        tab[0, n] = vmcs
        tab[1, n] = off
        tab[2, n] = _ONE if off != _ZERO else _ZERO
        tab[3, n] = _ZERO
        U[N_TAB] = _u64(n + 1)
        return n

    @numba.njit(cache=True, nogil=True)
    def _first_tsc(U, msgs, patches, tab, dd, info, host_tsc, bi, pos, payload):  # pragma: no cover - compiled
        if U[IN_PSB] == _ZERO:
            _log(U, msgs, MSG_FIRST_NOT_IN_PSB, _ZERO, _ZERO)
        if dd[D_PIP - D_PIP] != _ZERO:
            if dd[D_PIP_PAYLOAD - D_PIP] & _ONE:
                if info >= 0 and tab[1, info] != _ZERO:
                    payload = _translate(U, patches, bi, pos, payload, tab[1, info])
                    U[RELIABLE] = _ONE
                else:
                    _log(U, msgs, MSG_FIRST_UNKNOWN_OFFSET, _ZERO, _ZERO)
            else:
                U[RELIABLE] = _ONE
        else:
            U[RELIABLE] = _ZERO
            if not _in_range(U, host_tsc):
                if info >= 0 and tab[1, info] != _ZERO:
                    payload = _translate(U, patches, bi, pos, payload, tab[1, info])
                else:
                    _log(U, msgs, MSG_FIRST_NO_PIP, _ZERO, _ZERO)
        return payload

    @numba.njit(cache=True, nogil=True)
    def _tsc(U, msgs, patches, tab, cfg_vmcs, cfg_off, kinds, counts, payloads, i, bi, pos, payload, dd
             ):  # pragma: no cover - compiled
        """perf's intel_pt_vm_tm_corr_tsc; returns the (maybe translated) payload."""
        if U[IN_PSB] == _ZERO:
            for k in range(D_SIZE):
                dd[k] = _ZERO
            dd[D_CTC_DELTA - D_PIP] = U[CTC_DELTA]
            dd[D_LAST_CTC - D_PIP] = U[LAST_CTC]
            _tma_lookahead(kinds, counts, payloads, i, dd)
            if U[PGE] != _ZERO:
                dd[D_PIP - D_PIP] = _ONE
                dd[D_PIP_PAYLOAD - D_PIP] = U[PIP_PAYLOAD]
        else:
            for k in range(D_SIZE):
                dd[k] = U[D_PIP + k]
        if dd[D_TMA - D_PIP] == _ZERO:
            _log(U, msgs, MSG_TSC_NO_TMA, _ZERO, _ZERO)
            return payload
        vmcs = dd[D_VMCS_PAYLOAD - D_PIP] if dd[D_VMCS - D_PIP] != _ZERO else U[VMCS]
        if vmcs == _NO_VMCSU:
            vmcs = _ZERO
        info = _findnew_vmcs(U, tab, cfg_vmcs, cfg_off, vmcs)
        ref = U[TS] if U[TS] != _ZERO else U[BUF_TS]
        host_tsc = _eight_byte_tsc(payload, ref)
        if U[CTC_TS] == _ZERO:
            return _first_tsc(U, msgs, patches, tab, dd, info, host_tsc, bi, pos, payload)
        # the TSC the MTC/TMA chain expects (perf's intel_pt_calc_expected_tsc)
        last_mtc_ctc = dd[D_LAST_CTC - D_PIP] + dd[D_CTC_DELTA - D_PIP]
        d16 = ((dd[D_TMA_CTC - D_PIP] & _u64(0xFFFF)) - (last_mtc_ctc & _u64(0xFFFF))) & _u64(0xFFFF)
        new_ctc_delta = dd[D_CTC_DELTA - D_PIP] + d16
        if d16 & _u64(0x8000):
            new_ctc_delta = new_ctc_delta - _u64(0x10000)
        expected = U[CTC_TS] + _ctc_to_tsc(U, new_ctc_delta) + dd[D_TMA_FC - D_PIP]
        tsc_offset = host_tsc - expected
        reliable = True
        guest = False
        in_psb = U[IN_PSB] != _ZERO
        pip = dd[D_PIP - D_PIP] != _ZERO
        if pip:
            if dd[D_PIP_PAYLOAD - D_PIP] & _ONE:
                if info < 0:
                    _log(U, msgs, MSG_MISSING_VMCS, _ZERO, _ZERO)
                    payload = _translate(U, patches, bi, pos, payload, tsc_offset)
                    U[RELIABLE] = _ZERO
                    return payload
                guest = True
            else:
                U[LAST_REL_TS] = host_tsc
                U[RELIABLE] = _ONE
                return payload
        else:
            reliable = False
            if in_psb:
                if tsc_offset == _ZERO:
                    return payload
                if info >= 0 and (tsc_offset & _SEVENU) == (tab[1, info] & _SEVENU):
                    guest = True
            if not guest and host_tsc >= expected and _in_range(U, host_tsc):
                U[RELIABLE] = _ZERO
                return payload
        # assuming guest
        assign = False
        assign_reliable = False
        if info >= 0 and tab[0, info] != _ZERO:
            if tab[1, info] != _ZERO and tab[2, info] != _ZERO:
                assign = False
            elif in_psb and pip and U[RELIABLE] != _ZERO and U[CONTINUOUS] != _ZERO and U[SAME_BUF] != _ZERO:
                assign = True
                assign_reliable = True
            elif in_psb and pip and U[SAME_BUF] != _ZERO:
                assign = True
        if assign and (tab[1, info] != tsc_offset or (tab[2, info] != _ZERO) != assign_reliable):
            show = tab[1, info] != tsc_offset
            tab[1, info] = tsc_offset
            tab[2, info] = _ONE if assign_reliable else _ZERO
            if show:
                _log(U, msgs, MSG_OFFSET, tab[0, info], tab[1, info])
        if info >= 0 and tab[1, info] != _ZERO:
            if tab[2, info] == _ZERO:
                reliable = False
            payload = _translate(U, patches, bi, pos, payload, tab[1, info])
        else:
            reliable = False
            if info >= 0:
                if tab[3, info] == _ZERO:
                    _log(U, msgs, MSG_UNKNOWN_OFFSET, tab[0, info], _ZERO)
                    tab[3, info] = _ONE
            elif U[PRINTED_UNK_VMCS] == _ZERO:
                U[PRINTED_UNK_VMCS] = _ONE
                _log(U, msgs, MSG_UNKNOWN_VMCS, _ZERO, _ZERO)
            payload = _translate(U, patches, bi, pos, payload, tsc_offset)
        U[RELIABLE] = _ONE if reliable else _ZERO
        return payload

    @numba.njit(cache=True, nogil=True)
    def _walk_buffer(U, kinds, counts, payloads, positions, bi, ref_timestamp, consecutive, tab, cfg_vmcs,
                     cfg_off, patches, seen, msgs):  # pragma: no cover - compiled
        U[BUF_TS] = ref_timestamp
        if not consecutive:
            U[TS] = _ZERO
            U[HAVE_TMA] = _ZERO
            U[REF_TS] = ref_timestamp
            U[SAME_BUF] = _ZERO
        dd = np.zeros(D_SIZE, np.uint64)
        skip_to_psb = False
        for i in range(kinds.shape[0]):
            t = kinds[i]
            if skip_to_psb and t != _PSB:
                continue
            skip_to_psb = False
            if t == _BAD:
                skip_to_psb = True  # perf stops at a bad packet and its decoder resynchronizes at a PSB
            elif t == _TIP_PGD:
                U[PGE] = _ZERO
                U[CONTINUOUS] = _ZERO
            elif t == _TNT or t == _TIP or t == _TIP_PGE:
                U[PGE] = _ONE
            elif t == _OVF:
                U[IN_PSB] = _ZERO
                U[PGE] = _ONE if _ovf_fup_lookahead(kinds, i) else _ZERO
                if U[PGE] == _ZERO:
                    U[CONTINUOUS] = _ZERO
            elif t == _FUP:
                if U[IN_PSB] != _ZERO:
                    U[PGE] = _ONE
            elif t == _STOP:
                U[PGE] = _ZERO
                U[CONTINUOUS] = _ZERO
                U[HAVE_TMA] = _ZERO
            elif t == _PSB:
                _psb_lookahead(U, kinds, counts, payloads, i, dd)
                for k in range(D_SIZE):
                    U[D_PIP + k] = dd[k]
                if U[D_TSC] != _ZERO and U[D_PSBEND] == _ZERO:
                    _log(U, msgs, MSG_PSB_NO_PSBEND, _ZERO, _ZERO)
                U[IN_PSB] = U[D_PSBEND]
            elif t == _PIP:
                U[PIP_PAYLOAD] = payloads[i]
            elif t == _MTC:
                _calc_mtc(U, payloads[i])
            elif t == _TSC:
                payload = _tsc(U, msgs, patches, tab, cfg_vmcs, cfg_off, kinds, counts, payloads, i, bi, positions[i],
                               payloads[i], dd)
                _calc_tsc(U, msgs, payload)
                U[SAME_BUF] = _ONE
                U[CONTINUOUS] = U[PGE]
            elif t == _TMA:
                _calc_tma(U, payloads[i], counts[i])
            elif t == _PSBEND:
                U[IN_PSB] = _ZERO
                U[D_PSBEND] = _ZERO
            elif t == _VMCS:
                if payloads[i] != _NO_VMCSU:
                    U[VMCS] = payloads[i]
                    if U[TS] != _ZERO:
                        k = np.int64(U[N_SEEN])
                        seen[0, k] = U[TS]
                        seen[1, k] = payloads[i]
                        U[N_SEEN] = _u64(k + 1)

    walk_buffer = _walk_buffer
