"""The perf-mode decoder (:mod:`ptexport.decoder.reference.decoder`) as numba code over arrays.

This is a line-for-line port of ``PerfDecoder`` (its hop and leap modes,
``--itrace=q``/``qq``, too) plus the session's sample loop
(``PerfSession.decode_queue``, Event Trace's evt and iflag samples too), written so that it
can stop and resume at any decode step:

* all decoder state lives in one int64 array ``S`` (plus ``F`` for the three
  floating-point CYC ratios and ``EV`` for the EVD packets waiting for their CFE),
  indexed by the constants below; a step starts
  from a snapshot, so when it needs something only Python has (a code block
  not in the table, a walk it cannot answer, a re-tokenization) it restores
  the snapshot and returns a request code; Python answers and calls again;
* packets of all buffers of a queue are concatenated in ``PK`` (rows kind,
  count, payload bits, byte position in the buffer); ``BI`` holds one row per
  buffer (packet range, reference timestamp, consecutive, trace_nr, offset,
  length, start in ``BD``, the raw bytes);
* code comes from a block table keyed by IP (valid for one address space
  context, see :mod:`ptexport.decoder.compiled.decoder`; guest (non-root) code from a
  second table, the guest's address space in that context): for a block start the
  instruction count, byte count up to the final branch, the branch's class,
  and the byte offsets of its instruction boundaries (for walks to an IP and
  walks stopped after a count of instructions: instruction samples);
* samples are written as rows of ``O`` (see ``O_*``).

64-bit unsigned values are kept in int64 (same bits); only IP equality and
masks are used on them.  Timestamps are assumed below 2**63.
"""

from __future__ import annotations

import numpy as np

from ptexport.decoder.constants import (
    BR_CONDITIONAL, BR_INDIRECT, BR_NO_BRANCH, BR_UNCONDITIONAL, EAGAIN, EBADMSG, EILSEQ, EINVAL, ELOOP, ENODATA,
    ENOENT, ENOLINK, ENOSYS, EOVERFLOW, ERR_RESYNC, F_ABORT_TX, F_ASYNC, F_FUP_IP, F_IN_TX, F_SAMPLE_IPC,
    FUP_IN_PSB, FUP_NO_TIP, IN_SYNC, NO_IP, NO_PSB, OP_CALL, OP_INT, OP_IRET, OP_JCC, OP_JMP, OP_LOOP, OP_OTHER,
    OP_RET, OP_SYSCALL, OP_SYSRET, OP_VMENTRY, PERIOD_INSTRUCTIONS, PERIOD_MTC, PERIOD_TICKS, RESAMPLE, T_BLK_ITEMS,
    T_BRANCH,
    T_CBR_CHG, T_EVT, T_EX_STOP, T_IFLAG_CHG, T_INSTRUCTION, T_MWAIT_OP, T_PSB_EVT, T_PTW, T_PWR_ENTRY, T_PWR_EXIT, T_TRACE_BEGIN,
    T_TRACE_END, T_TRANSACTION, TNT_CONT, WALK_RETURN,
)
# The packet kinds TNT, TIP, TIP_PGD and FUP (below) take those names here: their packet states get an _ST suffix.
from ptexport.decoder.constants import FUP as FUP_ST, TIP as TIP_ST, TIP_PGD as TIP_PGD_ST, TNT as TNT_ST
from ptexport.jit import numba
from ptexport.jit_tables import tab_find
from ptexport.jit_tables import tab_insert as tab_insert  # for the Python side, which fills the tables
from ptexport.pt.perfpkt_compiled import (
    BAD, BBP, BEP, BEP_IP, BIP, CBR, CFE, CFE_IP, CYC, EVD, EXSTOP, EXSTOP_IP, FUP, MNT, MODE_EXEC, MODE_TSX,
    MTC, MWAIT, OVF, PAD, PIP, PSB, PSBEND, PTWRITE, PTWRITE_IP, PWRE, PWRX, TIP, TIP_PGD, TIP_PGE, TMA, TNT,
    TRACESTOP, TSC, VMCS,
)
from ptexport.samples.columns import (
    ERR_BADPKT, ERR_INTERN, ERR_LOST, ERR_MISMAT, ERR_NELOOP, ERR_NODATA, ERR_NOINSN, ERR_OVR, ERR_UNK,
    EV_BRANCH, EV_CBR, EV_ERROR, EV_EVT, EV_EXSTOP, EV_IFLAG, EV_INSTRUCTION, EV_MWAIT, EV_PSB, EV_PTWRITE, EV_PWRE, EV_PWRX,
    EV_TRANSACTION,
)

if numba is not None:
    # No NRT: the kernel allocates nothing, and with reference counting on, every call between these
    # functions increfs/decrefs each array argument atomically (~3/4 of the kernel's CPU time).
    # nogil: the export's call-tree and page-writer threads run while this process decodes.
    _jit = numba.njit(cache=True, _nrt=False, nogil=True)
    # The functions of the per-branch path (run -> _decode -> _walk_tnt -> _walk_insn -> _walk) inlined
    # into their callers (numba's IR inlining): a call passes each array argument as a struct of 7 or
    # more words pushed on the stack, ~50 arrays a branch, and LLVM's inliner declined these callees.
    # 10 M branches counted: the kernel's time 1.28 -> 0.68 s; compiling it 37 -> 45 s (ahead, at install).
    _jit_inline = numba.njit(cache=True, _nrt=False, nogil=True, inline="always")
else:  # pragma: no cover - exercised where numba is missing: the functions stay Python
    def _jit(f):
        return f

    _jit_inline = _jit


# ---------------------------------------------------------------- state layout
# Indices into S, in this order (tests/decoder/test_constants.py checks they count 0, 1, 2, ...).
# The packet being read: index in PK, step to the next, buffer, kind, count, payload; the previous kind
IDX = 0
STEP = 1
BUF = 2
KIND = 3
COUNT = 4
PAYLOAD = 5
LAST_PKT = 6
# The walk (perf's struct intel_pt_decoder): packet state, IPs, TNT bits, loop detection
PKT_STATE = 7
PGE = 8
IN_PSB = 9
HAVE_LAST_IP = 10
LAST_IP = 11
IP = 12
PSB_IP = 13
NR = 14
NEXT_NR = 15
PIP_PAYLOAD = 16
EXEC_MODE = 17
TX_FLAGS = 18
RET_ADDR = 19
TNT_COUNT = 20
TNT_PAYLOAD = 21
OVERFLOW = 22
NO_PROGRESS = 23
STUCK_IP = 24
STUCK_IP_PRD = 25
STUCK_IP_CNT = 26
MTC_INSN = 27
CONT_PERIOD = 28
# Events waiting for the next FUP
SET_FUP_TX = 29
SET_FUP_PTW = 30
SET_FUP_MWAIT = 31
SET_FUP_PWRE = 32
SET_FUP_EXSTOP = 33
SET_FUP_BEP = 34
FUP_TX_FLAGS = 35
FUP_PTW_PAYLOAD = 36
FUP_MWAIT_PAYLOAD = 37
FUP_PWRE_PAYLOAD = 38
# Time: TSC, MTC/CTC, CYC and CBR, instruction and cycle counts
TIMESTAMP = 39
TSC_TIMESTAMP = 40
REF_TIMESTAMP = 41
BUF_TIMESTAMP = 42
SAMPLE_TIMESTAMP = 43
CTC_TIMESTAMP = 44
CTC_DELTA = 45
LAST_MTC = 46
LAST_CTC = 47
HAVE_TMA = 48
FIXUP_LAST_MTC = 49
HAVE_CYC = 50
CYCLE_CNT = 51
CYC_REF_TIMESTAMP = 52
CUR_CBR = 53
CBR_SEEN = 54
CBR_PAYLOAD = 55
HAVE_CALC_CYC_TO_TSC = 56
TOT_CYC_CNT = 57
SAMPLE_TOT_CYC_CNT = 58
BASE_CYC_CNT = 59
CYC_CNT_TIMESTAMP = 60
SAMPLE_CYC = 61
TIMESTAMP_INSN_CNT = 62
SAMPLE_INSN_CNT = 63
TOT_INSN_CNT = 64
PERIOD_INSN_CNT = 65
LAST_MASKED_TS = 66
# Entries on the return stack (STK)
STACK_DEPTH = 67
# The state a step reports (perf's struct intel_pt_state, the reference's State)
ST_TYPE = 68
ST_FLAGS = 69
ST_ERR = 70
ST_FROM_IP = 71
ST_TO_IP = 72
ST_TIMESTAMP = 73
ST_EST_TS = 74
ST_TOT_INSN = 75
ST_TOT_CYC = 76
ST_INSN_OP = 77
ST_INSN_LEN = 78
ST_FROM_NR = 79
ST_TO_NR = 80
ST_TRACE_NR = 81
ST_PSB_OFFSET = 82
ST_POS = 83
ST_CBR = 84
ST_CBR_PAYLOAD = 85
ST_PTW_PAYLOAD = 86
ST_MWAIT_PAYLOAD = 87
ST_PWRE_PAYLOAD = 88
ST_PWRX_PAYLOAD = 89
# The last instruction walked (the reference's Insn)
INS_OP = 90
INS_BR = 91
INS_LEN = 92
INS_REL = 93
# The session's sample loop (PerfSession.decode_queue)
PHASE = 94
PTQ_TS = 95
CTX_TSC = 96
LAST_BR_INSN = 97
LAST_BR_CYC = 98
LAST_IN_INSN = 99
LAST_IN_CYC = 100
LAST_INSN_CNT = 101
BASE_TRACE_NR = 102
SESS_CBR_SEEN = 103
# The object that failed last; a code walk Python answered, replayed on the retry
LASTFAIL = 104
INJ_VALID = 105
INJ_IP = 106
INJ_TO = 107
INJ_MAX = 108
INJ_NR = 109
INJ_ERR = 110
INJ_CNT = 111
INJ_NEWIP = 112
INJ_OP = 113
INJ_BR = 114
INJ_LEN = 115
INJ_REL = 116
INJ_FAIL = 117
# End of the part a snapshot saves and a failed step restores
NSTATE = 118
# Parameters, set once per queue
P_RETCOMP = 119
P_BRANCH_ENABLE = 120
P_MTC_SHIFT = 121
P_CTC_N = 122
P_CTC_D = 123
P_CTC_MULT = 124
P_MNTR = 125
P_PERIOD_TYPE = 126
P_PERIOD = 127
P_FUP_NLIP = 128
P_PERIOD_MASK = 129
P_PERIOD_TICKS = 130
P_CTC_REM_MASK = 131
P_KERNEL_START = 132
P_FILTER = 133
P_BRANCHES = 134
P_ERRORS = 135
P_ERR_MINUS_O = 136
P_ERR_MINUS_L = 137
P_EST_TSC = 138
P_TIMELESS = 139
P_PER_CPU = 140
P_PWR = 141
P_TX = 142
P_PTW = 143
P_INSNS = 144
P_COUNT_ONLY = 145
P_RAW_INSN = 146
P_SINGLE = 147
P_STOP_BUF = 148
P_STOP_BYTE = 149
P_CYC_THRESH = 150
P_QUICK = 151  # --itrace=q: 1 hop (FUP/TIP ips, no code walk), 2 leap (PSB to PSB)
# Exchange with Python: thread and context range, requests (NEED_*, RETOK_*, MORE_BUF), output counts
HAVE_THREAD = 152
CTX_LO = 153
CTX_HI = 154
NEED_IP = 155
NEED_TO = 156
NEED_MAX = 157
NEED_NR = 158
RETOK_BUF = 159
RETOK_POS = 160
NOUT = 161
NITEM = 162
STEP_NR = 163
NBRANCH = 164
MORE_BUF = 165
# The time filter (--time): on, its selection, the verdict Python gives back
TF_ON = 166
SEL_START = 167
SEL_TS = 168
FF_TS = 169
TF_PENDING = 170
HAVE_SAMPLE = 171
# --itrace=sN: N (0: off), and the samples this queue synthesized so far (CBRs and errors not counted)
P_SKIP = 172
SKIP_SEEN = 173
# Event Trace (appended; a snapshot saves ET_FIRST..ET_END as it saves the part before NSTATE): RFLAGS.IF now
# and after the next branch, MODE.Exec and a CFE bound to the next FUP (the CFE's type and vector), the EVDs
# waiting for it (their count; the pairs in EV), and what the state reports of them
IFLAG = 174
NEXT_IFLAG = 175
SET_FUP_MODE_EXEC = 176
SET_FUP_CFE_IP = 177
SET_FUP_CFE = 178
FUP_CFE_TYPE = 179
FUP_CFE_VECTOR = 180
EVD_N = 181
ST_FROM_IFLAG = 182
ST_TO_IFLAG = 183
ST_CFE_TYPE = 184
ST_CFE_VECTOR = 185
ST_EVD_N = 186
# Event Trace parameters: the recording has it (RFLAGS.IF in the flags), --itrace=I, an evt attribute
P_EVENT_TRACE = 187
P_INTR_EVENTS = 188
P_EVT_ATTR = 189
# The length of S
S_SIZE = 190

ET_FIRST, ET_END = IFLAG, P_EVENT_TRACE
MAX_EVDS = 64  # perf: "Too many EVD packets"; EV holds (type, payload) of this many

# Indices into F (the CYC ratios).
F_CBR_CYC_TO_TSC, F_CALC_CYC_TO_TSC, F_TSC_TO_CYC, F_MNTR, F_SIZE = range(5)

# BI columns.
BI_PSTART, BI_PEND, BI_REF, BI_CONSEC, BI_TRACE_NR, BI_OFFSET, BI_DLEN, BI_DSTART, BI_SIZE = range(9)
# Block rows.
BK_CNT, BK_BYTES, BK_OP, BK_BR, BK_LEN, BK_REL, BK_BND0, BK_BNDN, BK_SIZE = range(9)
# Output columns.
O_KIND, O_TSC, O_WHO_TSC, O_IP, O_ADDR, O_FLAGS, O_INSN, O_CYC, O_CODE, O_OFFSET, O_NR, O_INSN_LEN, O_TRACE_NR, \
    O_OBJ, O_STEP, O_PAYLOAD, O_PERIOD, O_SIZE = range(18)
# Row kinds besides the samples' EV_* kinds.
K_BUDGET = -1  # an unreported failure that counts toward perf's per-object budget
K_SETUP_FAIL = -2  # a failure before the first timestamp
K_EVD = -3  # an EVD of the evt row after it (the reference's EVD_ROW)

# run() results.
R_DONE, R_NEED, R_RETOK, R_CTX, R_OUTFULL, R_STOP, R_STEP, R_MORE, R_TF = range(9)
PH_SETUP, PH_RUN, PH_DONE = 0, 1, 2  # PH_DONE: --time stopped the queue after its last range

# Hop mode (--itrace=q): what a packet does to the walk (_hop_trace).
_HOP_PROCESS, _HOP_IGNORE, _HOP_RETURN, _HOP_AGAIN = range(4)

W_NEED = -1000
W_RETOK = -1001
W_MORE = -1002  # the next buffer is not in the loaded window

_MAX_LOOPS = 10000
_TSC_SLIP = 0x10000
_TOP8 = np.int64(-72057594037927936)  # 0xFF << 56
_BIT63 = np.int64(-9223372036854775808)
_SIGNBIT = np.int64(-9223372036854775808)

# perf sample flag bits (PERF_IP_FLAG_*).
FL_BRANCH, FL_CALL, FL_RETURN, FL_CONDITIONAL, FL_SYSCALLRET, FL_ASYNC, FL_INTERRUPT, FL_TX_ABORT, \
    FL_TRACE_BEGIN, FL_TRACE_END, FL_IN_TX, FL_VMENTRY, FL_VMEXIT, FL_INTR_DISABLE, FL_INTR_TOGGLE = \
    (1 << i for i in range(15))
_IFLAG = 1 << 2  # MODE.Exec: RFLAGS.IF (the packet's count)


@_jit
def _ult(a, b):
    return (a ^ _SIGNBIT) < (b ^ _SIGNBIT)


# --------------------------------------------------------------------- packets

@_jit
def _get_data(S, BI, reposition):
    nb = BI.shape[0]
    nxt = S[BUF] + 1
    while nxt < nb and BI[nxt, BI_DLEN] == 0:
        nxt += 1
    if nxt >= nb:
        S[BUF] = nb
        S[IDX] = 0
        S[STEP] = 0
        return ENODATA
    if BI[nxt, BI_PSTART] < 0:
        S[MORE_BUF] = nxt
        return W_MORE
    first = S[BUF] < 0
    S[BUF] = nxt
    S[IDX] = BI[nxt, BI_PSTART]
    S[STEP] = 0
    S[BUF_TIMESTAMP] = BI[nxt, BI_REF]
    if first or BI[nxt, BI_CONSEC] == 0 or reposition:
        S[IP] = 0
        S[PKT_STATE] = NO_PSB
        S[TIMESTAMP] = 0
        S[HAVE_TMA] = 0
        S[REF_TIMESTAMP] = BI[nxt, BI_REF]
        S[ST_TRACE_NR] = BI[nxt, BI_TRACE_NR]
        return ENOLINK
    return 0


@_jit
def _buf_end(S, BI):
    b = S[BUF]
    if b < 0 or b >= BI.shape[0]:
        return -1
    return BI[b, BI_PEND]


@_jit
def _abs_pos(S, PK, BI):
    b = S[BUF]
    if b < 0 or b >= BI.shape[0]:
        return 0
    if S[IDX] < BI[b, BI_PEND]:
        return BI[b, BI_OFFSET] + PK[3, S[IDX]]
    return BI[b, BI_OFFSET] + BI[b, BI_DLEN]


@_jit
def _get_next_packet(S, PK, BI):
    S[LAST_PKT] = S[KIND]
    while True:
        S[IDX] += S[STEP]
        S[STEP] = 0
        if S[IDX] >= _buf_end(S, BI):
            err = _get_data(S, BI, False)
            if err:
                return err
        i = S[IDX]
        k = PK[0, i]
        S[KIND] = k
        S[COUNT] = PK[1, i]
        S[PAYLOAD] = PK[2, i]
        S[STEP] = 1
        if k == BAD:
            S[TX_FLAGS] = 0
            S[HAVE_TMA] = 0
            return EBADMSG
        if k != PAD:
            return 0


# ---------------------------------------------------------------- small helpers

@_jit
def _calc_ip(count, payload, last_ip):
    if count == 1:
        return (last_ip & np.int64(-65536)) | payload
    if count == 2:
        return (last_ip & np.int64(-4294967296)) | payload
    if count == 3:
        if payload & 0x800000000000:
            return payload | np.int64(-281474976710656)
        return payload
    if count == 4:
        return (last_ip & np.int64(-281474976710656)) | payload
    if count == 6:
        return payload
    return 0


@_jit
def _set_last_ip(S):
    S[LAST_IP] = _calc_ip(S[COUNT], S[PAYLOAD], S[LAST_IP])
    S[HAVE_LAST_IP] = 1


@_jit
def _set_ip(S):
    _set_last_ip(S)
    S[IP] = S[LAST_IP]


@_jit
def _have_ip(S):
    c = S[COUNT]
    return c != 0 and (S[HAVE_LAST_IP] != 0 or c == 3 or c == 6)


@_jit
def _update_nr(S):
    S[NEXT_NR] = S[PIP_PAYLOAD] & 1


@_jit
def _set_nr(S):
    S[NR] = S[PIP_PAYLOAD] & 1
    S[NEXT_NR] = S[NR]


@_jit
def _set_pip(S):
    S[PIP_PAYLOAD] = S[PAYLOAD]
    _set_nr(S)


@_jit
def _update_sample_time(S):
    S[SAMPLE_TIMESTAMP] = S[TIMESTAMP]
    S[SAMPLE_INSN_CNT] = S[TIMESTAMP_INSN_CNT]


@_jit
def _bug(S):
    S[PKT_STATE] = NO_PSB
    return ENOSYS


# ----------------------------------------------------------------------- timing

@_jit
def _mtc_cyc_cnt_pge(S):
    if S[HAVE_CYC]:
        return
    S[CYC_CNT_TIMESTAMP] = S[TIMESTAMP]
    S[BASE_CYC_CNT] = S[TOT_CYC_CNT]


@_jit
def _mtc_cyc_cnt_upd(S, F):
    if S[HAVE_CYC]:
        return
    S[SAMPLE_CYC] = 1
    if not S[PGE] or S[TIMESTAMP] <= S[CYC_CNT_TIMESTAMP]:
        return
    tot = np.int64(float(S[TIMESTAMP] - S[CYC_CNT_TIMESTAMP]) * F[F_TSC_TO_CYC] + float(S[BASE_CYC_CNT]))
    if tot > S[TOT_CYC_CNT]:
        S[TOT_CYC_CNT] = tot


@_jit
def _ctc_to_tsc(S, ctc):
    if S[P_CTC_MULT]:
        return ctc * S[P_CTC_MULT]
    d = S[P_CTC_D]
    if not d:
        return 0
    n = S[P_CTC_N]
    return (ctc // d) * n + ((ctc % d) * n) // d


@_jit
def _calc_tsc_timestamp(S):
    S[HAVE_TMA] = 0
    if S[REF_TIMESTAMP]:
        ref = S[REF_TIMESTAMP]
        ts = S[PAYLOAD] | (ref & _TOP8)
        if ts < ref:
            if ref - ts > (1 << 55):
                ts += 1 << 56
        elif ts - ref > (1 << 55):
            ts -= 1 << 56
        S[TSC_TIMESTAMP] = ts
        S[TIMESTAMP] = ts
        S[REF_TIMESTAMP] = 0
        S[TIMESTAMP_INSN_CNT] = 0
    elif S[TIMESTAMP]:
        cur = S[TIMESTAMP]
        ts = S[PAYLOAD] | (cur & _TOP8)
        S[TSC_TIMESTAMP] = ts
        if ts < cur and cur - ts < _TSC_SLIP:
            ts = cur
        if ts < cur:
            if not S[BUF_TIMESTAMP] or ts + (1 << 56) < S[BUF_TIMESTAMP]:
                ts += 1 << 56
                S[TSC_TIMESTAMP] = ts
            else:
                ts = cur
        S[TIMESTAMP] = ts
        S[TIMESTAMP_INSN_CNT] = 0
    if S[LAST_PKT] == CYC:
        S[CYC_REF_TIMESTAMP] = S[TIMESTAMP]
        S[CYCLE_CNT] = 0
        S[HAVE_CALC_CYC_TO_TSC] = 0


@_jit
def _calc_tma(S, F):
    ctc = S[PAYLOAD]
    fc = S[COUNT]
    ctc_rem = ctc & S[P_CTC_REM_MASK]
    if not S[P_CTC_D]:
        return
    if S[PGE] and not S[IN_PSB]:
        _mtc_cyc_cnt_pge(S)
    else:
        _mtc_cyc_cnt_upd(S, F)
    S[LAST_MTC] = (ctc >> S[P_MTC_SHIFT]) & 0xFF
    S[LAST_CTC] = ctc - ctc_rem
    S[CTC_TIMESTAMP] = S[TSC_TIMESTAMP] - fc - _ctc_to_tsc(S, ctc_rem)
    S[CTC_DELTA] = 0
    S[HAVE_TMA] = 1
    S[FIXUP_LAST_MTC] = 1


@_jit
def _fixup_last_mtc(mtc, mtc_shift, last_mtc):
    first_missing_bit = np.int64(1) << (16 - mtc_shift)
    mask = ~(first_missing_bit - 1) & 0xFFFFFFFF
    last_mtc |= mtc & mask
    if last_mtc >= mtc:
        last_mtc -= first_missing_bit
        last_mtc &= 0xFF
    return last_mtc


@_jit
def _calc_cyc_to_tsc_from_mtc(S, F, PK, BI):
    cycle_cnt = 0
    cbr = 0
    cbr_cyc_to_tsc = 0.0
    last_mtc = S[LAST_MTC]
    ctc_timestamp = S[CTC_TIMESTAMP]
    ctc_delta = S[CTC_DELTA]
    data_timestamp = S[TIMESTAMP]
    have_tma = S[HAVE_TMA]
    fixup = S[FIXUP_LAST_MTC]
    shift = S[P_MTC_SHIFT]
    last = S[LAST_PKT]
    i = S[IDX] + S[STEP]
    end = _buf_end(S, BI)
    timestamp = 0
    while i < end:
        kind = PK[0, i]
        if kind == BAD:
            return
        if kind == PAD:
            i += 1
            continue
        payload = PK[2, i]
        prev = last
        last = kind
        i += 1
        if (kind == TNT or kind == TIP_PGE or kind == TIP or kind == FUP or kind == PSB or kind == PIP
                or kind == MODE_EXEC or kind == MODE_TSX or kind == PSBEND or kind == VMCS or kind == MNT
                or kind == PTWRITE or kind == PTWRITE_IP or kind == BBP or kind == BIP or kind == BEP
                or kind == BEP_IP or kind == CFE or kind == CFE_IP or kind == EVD):
            continue
        if kind == MTC:
            if not have_tma:
                continue
            mtc = payload
            if shift > 8 and fixup:
                fixup = 0
                last_mtc = _fixup_last_mtc(mtc, shift, last_mtc)
            delta = mtc - last_mtc if mtc > last_mtc else mtc + 256 - last_mtc
            ctc_delta += delta << shift
            ts = ctc_timestamp + _ctc_to_tsc(S, ctc_delta)
            if ts < data_timestamp:
                return
            if prev != CYC:
                data_timestamp = ts
                last_mtc = mtc
                continue
            timestamp = ts
        elif kind == TSC or kind == TMA:
            return
        elif kind == CYC:
            cycle_cnt += payload
            continue
        elif kind == CBR:
            c = payload
            if cbr and cbr != c:
                return
            cbr = c
            cbr_cyc_to_tsc = F[F_MNTR] / c if c else 0.0
            continue
        else:
            return
        if not cbr and S[CUR_CBR]:
            cbr = S[CUR_CBR]
            cbr_cyc_to_tsc = F[F_CBR_CYC_TO_TSC]
        if not cycle_cnt:
            return
        cyc_to_tsc = (timestamp - S[TIMESTAMP]) / cycle_cnt
        if cbr and cyc_to_tsc > cbr_cyc_to_tsc and cyc_to_tsc / cbr_cyc_to_tsc > 1.25:
            return
        F[F_CALC_CYC_TO_TSC] = cyc_to_tsc
        S[HAVE_CALC_CYC_TO_TSC] = 1
        return


@_jit
def _calc_mtc_timestamp(S, F, PK, BI):
    if not S[HAVE_TMA]:
        return
    mtc = S[PAYLOAD]
    shift = S[P_MTC_SHIFT]
    if shift > 8 and S[FIXUP_LAST_MTC]:
        S[FIXUP_LAST_MTC] = 0
        S[LAST_MTC] = _fixup_last_mtc(mtc, shift, S[LAST_MTC])
    last_mtc = S[LAST_MTC]
    delta = mtc - last_mtc if mtc > last_mtc else mtc + 256 - last_mtc
    S[CTC_DELTA] += delta << shift
    ts = S[CTC_TIMESTAMP] + _ctc_to_tsc(S, S[CTC_DELTA])
    if ts >= S[TIMESTAMP]:
        S[TIMESTAMP] = ts
    _mtc_cyc_cnt_upd(S, F)
    S[TIMESTAMP_INSN_CNT] = 0
    S[LAST_MTC] = mtc
    if S[LAST_PKT] == CYC:
        S[CYC_REF_TIMESTAMP] = S[TIMESTAMP]
        S[CYCLE_CNT] = 0
        S[HAVE_CALC_CYC_TO_TSC] = 0
        _calc_cyc_to_tsc_from_mtc(S, F, PK, BI)


@_jit
def _calc_cbr(S, F):
    cbr = S[PAYLOAD] & 0xFF
    S[CBR_PAYLOAD] = S[PAYLOAD]
    if S[CUR_CBR] == cbr:
        return
    S[CUR_CBR] = cbr
    F[F_CBR_CYC_TO_TSC] = F[F_MNTR] / cbr if cbr else 0.0
    F[F_TSC_TO_CYC] = cbr / F[F_MNTR] if F[F_MNTR] else 0.0
    S[CYC_REF_TIMESTAMP] = S[TIMESTAMP]
    S[CYCLE_CNT] = 0
    if S[PGE]:
        _mtc_cyc_cnt_pge(S)


@_jit
def _calc_cyc_timestamp(S, F):
    ts = S[CYC_REF_TIMESTAMP]
    S[HAVE_CYC] = 1
    S[CYCLE_CNT] += S[PAYLOAD]
    if S[PGE]:
        S[TOT_CYC_CNT] += S[PAYLOAD]
    S[SAMPLE_CYC] = 1
    if not S[CYC_REF_TIMESTAMP]:
        return
    if S[HAVE_CALC_CYC_TO_TSC]:
        ts = np.int64(float(ts) + float(S[CYCLE_CNT]) * F[F_CALC_CYC_TO_TSC])
    elif S[CUR_CBR]:
        ts = np.int64(float(ts) + float(S[CYCLE_CNT]) * F[F_CBR_CYC_TO_TSC])
    else:
        return
    if ts >= S[TIMESTAMP]:
        S[TIMESTAMP] = ts
    S[TIMESTAMP_INSN_CNT] = 0


# ------------------------------------------------------------------ code table

@_jit_inline
def _walk(S, HK, HV, GK, GV, BK, BND, ip, to_ip, max_insn, nr):
    """perf's walk_insn callback answered from the tables (HK/HV host code, GK/GV guest code when
    ``nr``); returns (err, cnt, new_ip, op, br, len, rel)."""
    if to_ip and ip == to_ip:
        S[LASTFAIL] = -1
        return 0, 0, ip, OP_OTHER, BR_NO_BRANCH, 0, 0
    if (S[INJ_VALID] and S[INJ_IP] == ip and S[INJ_TO] == to_ip and S[INJ_MAX] == max_insn
            and S[INJ_NR] == nr):
        S[INJ_VALID] = 0
        S[LASTFAIL] = S[INJ_FAIL]
        return S[INJ_ERR], S[INJ_CNT], S[INJ_NEWIP], S[INJ_OP], S[INJ_BR], S[INJ_LEN], S[INJ_REL]
    if not nr and not S[HAVE_THREAD] and _ult(ip, S[P_KERNEL_START]):
        S[LASTFAIL] = -1
        return EINVAL, 0, ip, OP_OTHER, BR_NO_BRANCH, 0, 0
    # guest (non-root) code has its own table: the guest's address space of the context
    b = tab_find(GK, GV, ip) if nr else tab_find(HK, HV, ip)
    if b < 0:
        S[NEED_IP] = ip
        S[NEED_TO] = to_ip
        S[NEED_MAX] = max_insn
        S[NEED_NR] = nr
        return W_NEED, 0, 0, 0, 0, 0, 0
    S[LASTFAIL] = -1
    nbytes = BK[b, BK_BYTES]
    b0 = BK[b, BK_BND0]
    # The walker's order per instruction: a branch ends the walk, then the count (max_insn: a stop
    # at that instruction, returned as it is), then to_ip (reached after the instruction before it).
    # Instruction k (1-based) of a block starts at 0 (k = 1) or BND[b0 + k - 2]; all but the last are
    # no branches (class OTHER, no displacement).
    reach = 0  # instructions walked when to_ip is reached inside the block (0: it is not)
    if to_ip:
        d = to_ip - ip
        if d > 0 and d <= nbytes:
            n = BK[b, BK_BNDN]
            lo = 0
            hi = n
            while lo < hi:
                mid = (lo + hi) >> 1
                if BND[b0 + mid] < d:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < n and BND[b0 + lo] == d:
                reach = lo + 1
    if max_insn and max_insn < BK[b, BK_CNT] and (not reach or max_insn <= reach):
        k = max_insn if max_insn > 0 else 1
        at = BND[b0 + k - 2] if k >= 2 else 0
        return 0, k, ip + at, OP_OTHER, BR_NO_BRANCH, BND[b0 + k - 1] - at, 0
    if reach:
        return 0, reach, to_ip, OP_OTHER, BR_NO_BRANCH, 0, 0
    return 0, BK[b, BK_CNT], ip + nbytes, BK[b, BK_OP], BK[b, BK_BR], BK[b, BK_LEN], BK[b, BK_REL]


# ------------------------------------------------------------ instruction walk

@_jit
def _next_period(S):
    ts = S[TIMESTAMP] + S[TIMESTAMP_INSN_CNT]
    masked = ts & S[P_PERIOD_MASK]
    if S[CONT_PERIOD]:
        if masked > S[LAST_MASKED_TS]:
            return 1
    else:
        ts += 1
        masked = ts & S[P_PERIOD_MASK]
        if masked > S[LAST_MASKED_TS]:
            S[LAST_MASKED_TS] = masked
            S[CONT_PERIOD] = 1
    if masked < S[LAST_MASKED_TS]:
        return S[P_PERIOD_TICKS]
    return S[P_PERIOD_TICKS] - (ts - masked)


@_jit
def _next_sample(S):
    if S[P_PERIOD_TYPE] == PERIOD_INSTRUCTIONS:
        return S[P_PERIOD] - S[PERIOD_INSN_CNT]
    if S[P_PERIOD_TYPE] == PERIOD_TICKS:
        return _next_period(S)
    return 0


@_jit
def _sample_insn(S):
    if S[P_PERIOD_TYPE] == PERIOD_INSTRUCTIONS:
        S[PERIOD_INSN_CNT] = 0
    elif S[P_PERIOD_TYPE] == PERIOD_TICKS:
        ts = S[TIMESTAMP] + S[TIMESTAMP_INSN_CNT]
        masked = ts & S[P_PERIOD_MASK]
        if masked > S[LAST_MASKED_TS]:
            S[LAST_MASKED_TS] = masked
        else:
            S[LAST_MASKED_TS] += S[P_PERIOD_TICKS]
    S[ST_TYPE] |= T_INSTRUCTION


@_jit
def _finish_walk(S):
    S[ST_INSN_OP] = S[INS_OP]
    S[ST_INSN_LEN] = S[INS_LEN]
    if S[TX_FLAGS] & F_IN_TX:
        S[ST_FLAGS] |= F_IN_TX


@_jit
def _push(S, STK, v):
    d = S[STACK_DEPTH]
    if d < len(STK):
        STK[d] = v
    S[STACK_DEPTH] = d + 1


@_jit
def _pop(S, STK):
    d = S[STACK_DEPTH]
    if d == 0:
        return 0
    d -= 1
    S[STACK_DEPTH] = d
    if d < len(STK):
        return STK[d]
    return 0


@_jit_inline
def _walk_insn(S, STK, HK, HV, GK, GV, BK, BND, to_ip):
    S[MTC_INSN] = 1
    max_insn_cnt = _next_sample(S)
    err, insn_cnt, new_ip, op, br, ln, rel = _walk(S, HK, HV, GK, GV, BK, BND, S[IP], to_ip, max_insn_cnt, S[ST_TO_NR])
    if err == W_NEED:
        return W_NEED
    S[IP] = new_ip
    S[INS_OP] = op
    S[INS_BR] = br
    S[INS_LEN] = ln
    S[INS_REL] = rel
    S[TOT_INSN_CNT] += insn_cnt
    S[TIMESTAMP_INSN_CNT] += insn_cnt
    S[SAMPLE_INSN_CNT] += insn_cnt
    S[PERIOD_INSN_CNT] += insn_cnt
    if err:
        S[NO_PROGRESS] = 0
        S[PKT_STATE] = NO_IP
        return ENOLINK if err == ENOENT else EILSEQ
    if to_ip and S[IP] == to_ip:
        result = EAGAIN
    else:
        if max_insn_cnt and insn_cnt >= max_insn_cnt:
            _sample_insn(S)
        if br == BR_NO_BRANCH:
            S[ST_TYPE] = T_INSTRUCTION
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = 0
            S[IP] += ln
            result = WALK_RETURN
        else:
            if op == OP_CALL:
                if br != BR_UNCONDITIONAL or rel:
                    _push(S, STK, S[IP] + ln)
            elif op == OP_RET:
                S[RET_ADDR] = _pop(S, STK)
            if br == BR_UNCONDITIONAL:
                cnt = S[NO_PROGRESS]
                S[NO_PROGRESS] += 1
                S[ST_FROM_IP] = S[IP]
                S[IP] = S[IP] + ln + rel
                S[ST_TO_IP] = S[IP]
                result = WALK_RETURN
                if cnt:
                    if cnt == 1:
                        S[STUCK_IP] = S[ST_TO_IP]
                        S[STUCK_IP_PRD] = 1
                        S[STUCK_IP_CNT] = 1
                    elif cnt > _MAX_LOOPS or S[ST_TO_IP] == S[STUCK_IP]:
                        S[PKT_STATE] = ERR_RESYNC
                        S[NO_PROGRESS] = 0
                        _finish_walk(S)
                        return ELOOP
                    else:
                        S[STUCK_IP_CNT] -= 1
                        if not S[STUCK_IP_CNT]:
                            S[STUCK_IP_PRD] += 1
                            S[STUCK_IP_CNT] = S[STUCK_IP_PRD]
                            S[STUCK_IP] = S[ST_TO_IP]
                S[ST_INSN_OP] = op
                S[ST_INSN_LEN] = ln
                if S[TX_FLAGS] & F_IN_TX:
                    S[ST_FLAGS] |= F_IN_TX
                return result
            result = 0
    S[NO_PROGRESS] = 0
    _finish_walk(S)
    return result


# RFLAGS.IF (Event Trace): MODE.Exec in PSB+ states it, elsewhere it changes at the next branch.
@_jit
def _mode_exec_status(S):
    iflag = 1 if S[COUNT] & _IFLAG else 0
    S[EXEC_MODE] = S[PAYLOAD]
    S[IFLAG] = iflag
    S[NEXT_IFLAG] = iflag
    S[ST_FROM_IFLAG] = iflag
    S[ST_TO_IFLAG] = iflag


@_jit
def _mode_exec(S):
    S[EXEC_MODE] = S[PAYLOAD]
    S[NEXT_IFLAG] = 1 if S[COUNT] & _IFLAG else 0


@_jit
def _sample_iflag(S):
    S[ST_TYPE] |= T_IFLAG_CHG
    S[ST_FROM_IFLAG] = S[IFLAG]
    S[ST_TO_IFLAG] = S[NEXT_IFLAG]
    S[IFLAG] = S[NEXT_IFLAG]


@_jit
def _sample_iflag_chg(S):
    if S[IFLAG] != S[NEXT_IFLAG]:
        _sample_iflag(S)


@_jit
def _clear_fup_event_et(S):
    """The Event Trace part of perf's intel_pt_clear_fup_event."""
    S[SET_FUP_CFE_IP] = 0
    S[SET_FUP_CFE] = 0
    S[EVD_N] = 0
    S[SET_FUP_MODE_EXEC] = 0
    S[IFLAG] = S[NEXT_IFLAG]


@_jit
def _sample_fup_insn(S, HK, HV, GK, GV, BK, BND):
    """perf's intel_pt_sample_fup_insn: an instruction sample at the FUP, with the event's flags
    (0, or W_NEED)."""
    S[ST_INSN_OP] = OP_OTHER
    S[ST_INSN_LEN] = 0
    if not S[P_BRANCH_ENABLE] or not S[PGE] or S[P_QUICK] or S[IP] != S[LAST_IP]:
        return 0
    S[MTC_INSN] = 1
    max_insn_cnt = _next_sample(S)
    if max_insn_cnt != 1:
        return 0
    err, insn_cnt, new_ip, op, br, ln, rel = _walk(S, HK, HV, GK, GV, BK, BND, S[IP], 0, max_insn_cnt, S[ST_TO_NR])
    if err == W_NEED:
        return W_NEED
    if err:
        return 0  # reported by the next walk
    S[IP] = new_ip
    if br != BR_NO_BRANCH:
        return 0
    S[TOT_INSN_CNT] += insn_cnt
    S[TIMESTAMP_INSN_CNT] += insn_cnt
    S[SAMPLE_INSN_CNT] += insn_cnt
    S[PERIOD_INSN_CNT] += insn_cnt
    _sample_insn(S)
    S[IP] += ln
    return 0


@_jit
def _clear_insn(S):
    S[INS_OP] = OP_OTHER
    S[INS_BR] = BR_NO_BRANCH
    S[INS_LEN] = 0
    S[INS_REL] = 0


@_jit
def _fup_event(S, no_tip):
    """perf's intel_pt_fup_event: 0 (no event), 1 (an event), 2 (an event, and the caller takes an
    instruction sample at the FUP: _sample_fup_insn)."""
    saved_type = S[ST_TYPE]
    S[ST_TYPE] &= ~T_BRANCH
    S[ST_INSN_OP] = OP_OTHER  # perf 6.1 (stable fix): an FUP event is no instruction
    S[ST_INSN_LEN] = 0
    ret = False
    sample_fup_insn = False
    if S[SET_FUP_CFE_IP] or S[SET_FUP_CFE]:
        ip = S[SET_FUP_CFE_IP]
        S[SET_FUP_CFE_IP] = 0
        S[SET_FUP_CFE] = 0
        S[ST_TYPE] |= T_EVT
        if not ip and S[PGE]:
            S[ST_TYPE] |= T_BRANCH
        S[ST_CFE_TYPE] = S[FUP_CFE_TYPE]
        S[ST_CFE_VECTOR] = S[FUP_CFE_VECTOR]
        S[ST_EVD_N] = S[EVD_N]  # (the pairs stay in EV until the next EVD: the state is sampled first)
        S[EVD_N] = 0
        if ip or S[PGE]:
            S[ST_FLAGS] |= F_FUP_IP
        ret = True
    if S[SET_FUP_MODE_EXEC]:
        S[SET_FUP_MODE_EXEC] = 0
        _sample_iflag(S)
        sample_fup_insn = no_tip
        ret = True
    if S[SET_FUP_TX]:
        S[SET_FUP_TX] = 0
        S[TX_FLAGS] = S[FUP_TX_FLAGS]
        S[ST_TYPE] |= T_TRANSACTION
        if S[FUP_TX_FLAGS] & F_ABORT_TX:
            S[ST_TYPE] |= T_BRANCH
        S[ST_FLAGS] = S[FUP_TX_FLAGS]
        ret = True
    if S[SET_FUP_PTW]:
        S[SET_FUP_PTW] = 0
        S[ST_TYPE] |= T_PTW
        S[ST_FLAGS] |= F_FUP_IP
        S[ST_PTW_PAYLOAD] = S[FUP_PTW_PAYLOAD]
        ret = True
    if S[SET_FUP_MWAIT]:
        S[SET_FUP_MWAIT] = 0
        S[ST_TYPE] |= T_MWAIT_OP
        S[ST_MWAIT_PAYLOAD] = S[FUP_MWAIT_PAYLOAD]
        ret = True
    if S[SET_FUP_PWRE]:
        S[SET_FUP_PWRE] = 0
        S[ST_TYPE] |= T_PWR_ENTRY
        S[ST_PWRE_PAYLOAD] = S[FUP_PWRE_PAYLOAD]
        ret = True
    if S[SET_FUP_EXSTOP]:
        S[SET_FUP_EXSTOP] = 0
        S[ST_TYPE] |= T_EX_STOP
        S[ST_FLAGS] |= F_FUP_IP
        ret = True
    if S[SET_FUP_BEP]:
        S[SET_FUP_BEP] = 0
        S[ST_TYPE] |= T_BLK_ITEMS
        ret = True
    if S[OVERFLOW]:
        S[OVERFLOW] = 0
        if not ret and not S[PGE]:
            if S[P_QUICK]:  # hop: the trace begin, then its ip resampled as an instruction
                S[ST_TYPE] = 0
                S[PKT_STATE] = RESAMPLE
            S[PGE] = 1
            S[ST_TYPE] |= T_BRANCH | T_TRACE_BEGIN
            S[ST_FROM_IP] = 0
            S[ST_TO_IP] = S[IP]
            return 1
    if ret:
        S[ST_FROM_IP] = S[IP]
        S[ST_TO_IP] = 0
        return 2 if sample_fup_insn else 1
    S[ST_TYPE] = saved_type
    return 0


@_jit
def _walk_fup(S, STK, HK, HV, GK, GV, BK, BND):
    _clear_insn(S)
    ip = S[LAST_IP]
    while True:
        err = _walk_insn(S, STK, HK, HV, GK, GV, BK, BND, ip)
        if err == W_NEED:
            return err
        if err == WALK_RETURN:
            return 0
        if err == EAGAIN or (S[P_FUP_NLIP] and not err and S[INS_BR] == BR_INDIRECT
                              and ip == S[IP] + S[INS_LEN]):
            no_tip = S[PKT_STATE] != FUP_ST
            S[PKT_STATE] = IN_SYNC
            ev = _fup_event(S, no_tip)
            if ev == 2 and _sample_fup_insn(S, HK, HV, GK, GV, BK, BND) == W_NEED:
                return W_NEED
            if ev and no_tip:
                return 0
            return EAGAIN
        S[SET_FUP_TX] = 0
        if err:
            return err
        if S[INS_BR] == BR_INDIRECT or S[INS_BR] == BR_CONDITIONAL:
            S[PKT_STATE] = ERR_RESYNC
            return ENOENT
        return _bug(S)


@_jit
def _walk_tip(S, STK, HK, HV, GK, GV, BK, BND):
    _clear_insn(S)
    err = _walk_insn(S, STK, HK, HV, GK, GV, BK, BND, 0)
    if err == W_NEED:
        return err
    if err == WALK_RETURN:
        return 0
    if err:
        return err
    _update_nr(S)
    _sample_iflag_chg(S)
    if S[INS_BR] == BR_INDIRECT:
        if S[PKT_STATE] == TIP_PGD_ST:
            S[PGE] = 0
            S[CONT_PERIOD] = 0
            S[ST_TYPE] |= T_TRACE_END
        S[PKT_STATE] = IN_SYNC
        S[ST_FROM_IP] = S[IP]
        if S[COUNT] == 0:
            S[ST_TO_IP] = 0
        else:
            S[ST_TO_IP] = S[LAST_IP]
            S[IP] = S[LAST_IP]
        return 0
    if S[INS_BR] == BR_CONDITIONAL:
        S[PKT_STATE] = ERR_RESYNC
        return ENOENT
    return _bug(S)


@_jit_inline
def _walk_tnt(S, PK, BI, STK, HK, HV, GK, GV, BK, BND):
    _clear_insn(S)
    while True:
        err = _walk_insn(S, STK, HK, HV, GK, GV, BK, BND, 0)
        if err == W_NEED:
            return err
        if err == WALK_RETURN:
            return 0
        if err:
            return err
        op = S[INS_OP]
        br = S[INS_BR]
        if op == OP_RET:
            if not S[P_RETCOMP] or not S[RET_ADDR] or not (S[TNT_PAYLOAD] & _BIT63):
                S[PKT_STATE] = ERR_RESYNC
                return ENOENT
            S[TNT_COUNT] -= 1
            S[PKT_STATE] = TNT_CONT if S[TNT_COUNT] else IN_SYNC
            S[TNT_PAYLOAD] = S[TNT_PAYLOAD] << 1
            S[ST_FROM_IP] = S[IP]
            S[IP] = S[RET_ADDR]
            S[ST_TO_IP] = S[IP]
            return 0
        if br == BR_INDIRECT:
            err = _get_next_packet(S, PK, BI)
            if err:
                return err
            if S[KIND] != TIP or S[COUNT] == 0:
                S[PKT_STATE] = ERR_RESYNC
                S[STEP] = 0
                return ENOENT
            _set_last_ip(S)
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = S[LAST_IP]
            S[IP] = S[LAST_IP]
            _update_nr(S)
            _sample_iflag_chg(S)
            return 0
        if br == BR_CONDITIONAL:
            S[TNT_COUNT] -= 1
            S[PKT_STATE] = TNT_CONT if S[TNT_COUNT] else IN_SYNC
            if S[TNT_PAYLOAD] & _BIT63:
                S[TNT_PAYLOAD] = S[TNT_PAYLOAD] << 1
                S[ST_FROM_IP] = S[IP]
                S[IP] = S[IP] + S[INS_LEN] + S[INS_REL]
                S[ST_TO_IP] = S[IP]
                return 0
            if S[ST_TYPE] & T_INSTRUCTION:
                S[TNT_PAYLOAD] = S[TNT_PAYLOAD] << 1
                S[ST_TYPE] = T_INSTRUCTION
                S[ST_FROM_IP] = S[IP]
                S[ST_TO_IP] = 0
                S[IP] += S[INS_LEN]
                return 0
            S[SAMPLE_CYC] = 0
            S[IP] += S[INS_LEN]
            if not S[TNT_COUNT]:
                _update_sample_time(S)
                return EAGAIN
            S[TNT_PAYLOAD] = S[TNT_PAYLOAD] << 1
            continue
        return _bug(S)


@_jit
def _mode_tsx(S, PK, BI):
    """Returns err*2 + no_tip (err <= 0)."""
    fup_tx_flags = S[PAYLOAD] & (F_IN_TX | F_ABORT_TX)
    err = _get_next_packet(S, PK, BI)
    if err:
        return err, False
    no_tip = False
    if S[KIND] == FUP:
        S[FUP_TX_FLAGS] = fup_tx_flags
        S[SET_FUP_TX] = 1
        if not fup_tx_flags & F_ABORT_TX:
            no_tip = True
    else:
        S[TX_FLAGS] = S[PAYLOAD] & F_IN_TX
    return 0, no_tip


@_jit
def _overflow(S):
    S[TX_FLAGS] = 0
    _set_nr(S)
    S[TIMESTAMP_INSN_CNT] = 0
    S[PKT_STATE] = IN_SYNC
    S[ST_FROM_IP] = S[IP]
    S[IP] = 0
    S[PGE] = 0
    S[SET_FUP_TX] = 0
    S[SET_FUP_PTW] = 0
    S[SET_FUP_MWAIT] = 0
    S[SET_FUP_PWRE] = 0
    S[SET_FUP_EXSTOP] = 0
    S[SET_FUP_BEP] = 0
    _clear_fup_event_et(S)
    S[OVERFLOW] = 1
    return EOVERFLOW


# -------------------------------------------------------------------- PSB walks

@_jit
def _is_psb_abort(k):
    return (k == TIP_PGD or k == TIP_PGE or k == TIP or k == TNT or k == TRACESTOP or k == BAD or k == PSB
            or k == PTWRITE or k == PTWRITE_IP or k == EXSTOP or k == EXSTOP_IP or k == MWAIT or k == PWRE
            or k == PWRX or k == BBP or k == BIP or k == BEP or k == BEP_IP or k == CFE or k == CFE_IP
            or k == EVD)


@_jit
def _psb_common(S, F, PK, BI, k, psb_walk):
    if k == TSC:
        _calc_tsc_timestamp(S)
    elif k == TMA:
        _calc_tma(S, F)
    elif k == CBR:
        _calc_cbr(S, F)
    elif k == MODE_EXEC:
        _mode_exec_status(S)
    elif k == PIP:
        _set_pip(S)
    elif k == FUP:
        S[PGE] = 1
        if psb_walk:
            if _have_ip(S):
                _set_ip(S)
                S[PSB_IP] = S[IP]
        elif S[COUNT]:
            _set_last_ip(S)
            S[PSB_IP] = S[LAST_IP]
    elif k == MODE_TSX:
        S[TX_FLAGS] = S[PAYLOAD] & F_IN_TX
    elif k == MTC:
        _calc_mtc_timestamp(S, F, PK, BI)
        if not psb_walk and S[P_PERIOD_TYPE] == PERIOD_MTC:
            S[ST_TYPE] |= T_INSTRUCTION
    elif k == CYC:
        _calc_cyc_timestamp(S, F)


@_jit
def _walk_psbend(S, F, PK, BI):
    S[IN_PSB] = 1
    while True:
        err = _get_next_packet(S, PK, BI)
        if err:
            break
        k = S[KIND]
        if k == PSBEND:
            err = 0
            break
        if _is_psb_abort(k):
            S[HAVE_TMA] = 0
            err = EAGAIN
            break
        if k == OVF:
            err = _overflow(S)
            break
        _psb_common(S, F, PK, BI, k, False)
    S[IN_PSB] = 0
    return err


@_jit
def _walk_psb(S, F, PK, BI):
    S[IN_PSB] = 1
    while True:
        err = _get_next_packet(S, PK, BI)
        if err:
            break
        k = S[KIND]
        if k == PSBEND:
            err = 0
            break
        if (k == TIP_PGD or k == TIP_PGE or k == TIP or k == PTWRITE or k == PTWRITE_IP or k == EXSTOP
                or k == EXSTOP_IP or k == MWAIT or k == PWRE or k == PWRX or k == BBP or k == BIP or k == BEP
                or k == BEP_IP or k == CFE or k == CFE_IP or k == EVD):
            if k == TIP_PGD:
                S[CONT_PERIOD] = 0
            err = ENOENT
            break
        if k == TRACESTOP or k == TNT:
            if k == TRACESTOP:
                S[PGE] = 0
                S[CONT_PERIOD] = 0
                S[TX_FLAGS] = 0
            S[HAVE_TMA] = 0
            S[PKT_STATE] = IN_SYNC if S[IP] else ERR_RESYNC
            err = ENOENT
            break
        if k == OVF:
            err = _overflow(S)
            break
        _psb_common(S, F, PK, BI, k, True)
    S[IN_PSB] = 0
    return err


@_jit
def _psb(S, F, PK, BI):
    S[LAST_IP] = 0
    S[PSB_IP] = 0
    S[HAVE_LAST_IP] = 1
    S[STACK_DEPTH] = 0
    err = _walk_psbend(S, F, PK, BI)
    if err:
        return err
    S[ST_TYPE] = T_PSB_EVT
    S[ST_FROM_IP] = S[PSB_IP]
    S[ST_TO_IP] = 0
    return 0


@_jit
def _fup_in_psb(S, F, PK, BI, STK, HK, HV, GK, GV, BK, BND):
    if S[IP] != S[LAST_IP]:
        err = _walk_fup(S, STK, HK, HV, GK, GV, BK, BND)
        if not err or err != EAGAIN:
            return err
    S[PKT_STATE] = IN_SYNC
    err = _psb(S, F, PK, BI)
    if err == W_MORE:
        return err
    if err:
        S[PKT_STATE] = ERR_RESYNC
        return ENOENT
    return 0


@_jit
def _psb_with_fup(S, F, PK, BI, STK, HK, HV, GK, GV, BK, BND):
    """Returns (done, err)."""
    if not S[P_BRANCH_ENABLE] or not S[PGE]:
        return False, 0
    have_fup = False
    fup_count = 0
    fup_payload = 0
    after_psbend = 0
    i = S[IDX] + S[STEP]
    end = _buf_end(S, BI)
    while i < end:
        kind = PK[0, i]
        if kind == BAD:
            break
        if kind == PAD:
            i += 1
            continue
        count = PK[1, i]
        payload = PK[2, i]
        i += 1
        if (kind == PAD or kind == MNT or kind == TSC or kind == TMA or kind == MODE_EXEC or kind == MODE_TSX
                or kind == MTC or kind == CYC or kind == VMCS or kind == CBR or kind == PIP):
            if after_psbend:
                after_psbend -= 1
                if not after_psbend:
                    break
            continue
        if kind == FUP:
            if after_psbend or have_fup or count == 0:
                break
            have_fup = True
            fup_count = count
            fup_payload = payload
            continue
        if kind == PSBEND:
            if not have_fup:
                break
            after_psbend = 6
            continue
        if kind == TIP_PGE:
            if after_psbend:
                have_fup = False
            break
        if (kind == PTWRITE or kind == PTWRITE_IP or kind == EXSTOP or kind == EXSTOP_IP or kind == MWAIT
                or kind == PWRE or kind == PWRX or kind == BBP or kind == BIP or kind == BEP or kind == BEP_IP
                or kind == CFE or kind == CFE_IP or kind == EVD):
            if after_psbend:
                after_psbend -= 1
                if not after_psbend:
                    break
                continue
            break
        break
    if not have_fup:
        return False, 0
    S[COUNT] = fup_count
    S[PAYLOAD] = fup_payload
    _set_last_ip(S)
    S[PKT_STATE] = FUP_IN_PSB
    return True, _fup_in_psb(S, F, PK, BI, STK, HK, HV, GK, GV, BK, BND)


# ------------------------------------------------------------------- main walk

@_jit
def _walk_trace(S, F, PK, BI, BD, STK, HK, HV, GK, GV, BK, BND, EV):
    no_tip = False
    quick = S[P_QUICK]
    cyc_thresh = S[P_CYC_THRESH]
    prev_kind = PAD  # with a CYC threshold a CYC counts toward IPC only for the next packet
    err = _get_next_packet(S, PK, BI)
    if err:
        return err
    while True:
        k = S[KIND]
        if cyc_thresh:
            if S[SAMPLE_CYC] and prev_kind != CYC:
                S[SAMPLE_CYC] = 0
            prev_kind = k
        if quick:
            hop, err, no_tip = _hop_trace(S, F, PK, BI, BD, no_tip)
            if hop == _HOP_IGNORE:
                err = _get_next_packet(S, PK, BI)
                if err:
                    return err
                continue
            if hop == _HOP_RETURN:
                return err
            if hop == _HOP_AGAIN:
                continue
            k = S[KIND]  # (leap: the PSB scanned to)
        if k == TNT:
            if S[COUNT]:
                S[TNT_COUNT] = S[COUNT]
                S[TNT_PAYLOAD] = S[PAYLOAD]
                S[PKT_STATE] = TNT_ST
                err = _walk_tnt(S, PK, BI, STK, HK, HV, GK, GV, BK, BND)
                if err != EAGAIN:
                    return err
        elif k == TIP_PGD:
            if S[COUNT]:
                _set_last_ip(S)
            S[PKT_STATE] = TIP_PGD_ST
            return _walk_tip(S, STK, HK, HV, GK, GV, BK, BND)
        elif k == TIP_PGE:
            S[PGE] = 1
            S[OVERFLOW] = 0
            _mtc_cyc_cnt_pge(S)
            _set_nr(S)
            if S[COUNT]:
                _sample_iflag_chg(S)
                _set_ip(S)
                S[ST_FROM_IP] = 0
                S[ST_TO_IP] = S[IP]
                S[ST_TYPE] |= T_TRACE_BEGIN
                if quick:  # hop: resample to get to_ip as an "instruction" sample
                    S[PKT_STATE] = RESAMPLE
                return 0
        elif k == OVF:
            return _overflow(S)
        elif k == TIP:
            if S[COUNT]:
                _set_last_ip(S)
            S[PKT_STATE] = TIP_ST
            return _walk_tip(S, STK, HK, HV, GK, GV, BK, BND)
        elif k == FUP:
            if S[COUNT] == 0:
                no_tip = False
            else:
                _set_last_ip(S)
                if not S[P_BRANCH_ENABLE] or not S[PGE]:
                    S[IP] = S[LAST_IP]
                    ev = _fup_event(S, no_tip)
                    if ev == 2 and _sample_fup_insn(S, HK, HV, GK, GV, BK, BND) == W_NEED:
                        return W_NEED
                    if ev:
                        return 0
                    no_tip = False
                else:
                    if S[SET_FUP_MWAIT]:
                        no_tip = True
                    S[PKT_STATE] = FUP_NO_TIP if no_tip else FUP_ST
                    err = _walk_fup(S, STK, HK, HV, GK, GV, BK, BND)
                    if err != EAGAIN:
                        return err
                    if not no_tip:
                        return _walk_fup_tip(S, F, PK, BI)
                    no_tip = False
        elif k == TRACESTOP:
            S[PGE] = 0
            S[CONT_PERIOD] = 0
            S[TX_FLAGS] = 0
            S[HAVE_TMA] = 0
        elif k == PSB:
            S[ST_PSB_OFFSET] = _abs_pos(S, PK, BI)
            S[PSB_IP] = 0
            done, err = _psb_with_fup(S, F, PK, BI, STK, HK, HV, GK, GV, BK, BND)
            if done:
                return err
            err = _psb(S, F, PK, BI)
            if err == EAGAIN:
                continue
            return err
        elif k == PIP:
            S[PIP_PAYLOAD] = S[PAYLOAD]
        elif k == MTC:
            _calc_mtc_timestamp(S, F, PK, BI)
            if S[P_PERIOD_TYPE] == PERIOD_MTC and S[MTC_INSN] and S[TIMESTAMP]:
                S[MTC_INSN] = 0
                S[ST_TYPE] = T_INSTRUCTION
                S[ST_FROM_IP] = S[IP]
                S[ST_TO_IP] = 0
                return 0
        elif k == TSC:
            _calc_tsc_timestamp(S)
        elif k == TMA:
            _calc_tma(S, F)
        elif k == CYC:
            _calc_cyc_timestamp(S, F)
        elif k == CBR:
            _calc_cbr(S, F)
            if S[CUR_CBR] != S[CBR_SEEN]:
                S[ST_TYPE] = 0
                return 0
        elif k == MODE_EXEC:
            _mode_exec(S)
            err = _get_next_packet(S, PK, BI)
            if err:
                return err
            if S[KIND] == FUP:
                S[SET_FUP_MODE_EXEC] = 1
                no_tip = True
            continue  # examine the packet after MODE.Exec
        elif k == CFE:
            S[FUP_CFE_TYPE] = S[COUNT]
            S[FUP_CFE_VECTOR] = S[PAYLOAD]
            S[SET_FUP_CFE] = 1
            if not S[PGE]:
                if _fup_event(S, True) == 2 and _sample_fup_insn(S, HK, HV, GK, GV, BK, BND) == W_NEED:
                    return W_NEED
                return 0
        elif k == CFE_IP:
            S[FUP_CFE_TYPE] = S[COUNT]
            S[FUP_CFE_VECTOR] = S[PAYLOAD]
            err = _get_next_packet(S, PK, BI)
            if err:
                return err
            if S[KIND] == FUP:
                S[SET_FUP_CFE_IP] = 1
                no_tip = True
            continue  # the FUP (or whatever came instead) next
        elif k == EVD:
            n = S[EVD_N]
            if n >= MAX_EVDS:
                return ENOSYS  # perf: "Too many EVD packets"
            EV[0, n] = S[COUNT]
            EV[1, n] = S[PAYLOAD]
            S[EVD_N] = n + 1
        elif k == MODE_TSX:
            if not S[PGE] or S[IN_PSB]:
                S[TX_FLAGS] = S[PAYLOAD] & F_IN_TX
            else:
                err, nt = _mode_tsx(S, PK, BI)
                if err:
                    return err
                no_tip = no_tip or nt
                continue
        elif k == PTWRITE_IP:
            S[FUP_PTW_PAYLOAD] = S[PAYLOAD]
            err = _get_next_packet(S, PK, BI)
            if err:
                return err
            if S[KIND] == FUP:
                S[SET_FUP_PTW] = 1
                no_tip = True
            continue
        elif k == PTWRITE:
            S[ST_TYPE] = T_PTW
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = 0
            S[ST_PTW_PAYLOAD] = S[PAYLOAD]
            return 0
        elif k == MWAIT:
            S[FUP_MWAIT_PAYLOAD] = S[PAYLOAD]
            S[SET_FUP_MWAIT] = 1
        elif k == PWRE:
            if S[SET_FUP_MWAIT]:
                S[FUP_PWRE_PAYLOAD] = S[PAYLOAD]
                S[SET_FUP_PWRE] = 1
            else:
                S[ST_TYPE] = T_PWR_ENTRY
                S[ST_FROM_IP] = S[IP]
                S[ST_TO_IP] = 0
                S[ST_PWRX_PAYLOAD] = S[PAYLOAD]
                return 0
        elif k == EXSTOP_IP:
            err = _get_next_packet(S, PK, BI)
            if err:
                return err
            if S[KIND] == FUP:
                S[SET_FUP_EXSTOP] = 1
                no_tip = True
            continue
        elif k == EXSTOP:
            S[ST_TYPE] = T_EX_STOP
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = 0
            return 0
        elif k == PWRX:
            S[ST_TYPE] = T_PWR_EXIT
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = 0
            S[ST_PWRX_PAYLOAD] = S[PAYLOAD]
            return 0
        elif k == BEP:
            S[ST_TYPE] = T_BLK_ITEMS
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = 0
            return 0
        elif k == BEP_IP:
            err = _get_next_packet(S, PK, BI)
            if err:
                return err
            if S[KIND] == FUP:
                S[SET_FUP_BEP] = 1
                no_tip = True
            continue
        err = _get_next_packet(S, PK, BI)
        if err:
            return err


@_jit
def _hop_trace(S, F, PK, BI, BD, no_tip):
    """perf's intel_pt_hop_trace: ips from FUP and TIP packets, TNT ignored, no code walked;
    returns (_HOP_*, err, no_tip)."""
    if S[P_QUICK] >= 2 and not S[IN_PSB] and S[KIND] != PSB:
        err = _scan_for_psb(S, PK, BI, BD)  # leap: PSB to PSB, the ip from the FUP in PSB+
        if err:
            return _HOP_RETURN, err, no_tip
    k = S[KIND]
    if k == TNT:
        return _HOP_IGNORE, 0, no_tip
    if k == TIP_PGD:
        S[PGE] = 0
        if not S[COUNT]:
            _set_nr(S)
            return _HOP_IGNORE, 0, no_tip
        _set_ip(S)
        S[ST_TYPE] |= T_TRACE_END
        S[ST_FROM_IP] = 0
        S[ST_TO_IP] = S[IP]
        _update_nr(S)
        return _HOP_RETURN, 0, no_tip
    if k == TIP:
        if not S[COUNT]:
            _set_nr(S)
            return _HOP_IGNORE, 0, no_tip
        _set_ip(S)
        S[ST_TYPE] = T_INSTRUCTION
        S[ST_FROM_IP] = S[IP]
        S[ST_TO_IP] = 0
        _update_nr(S)
        _sample_iflag_chg(S)
        return _HOP_RETURN, 0, no_tip
    if k == FUP:
        if not S[COUNT]:
            return _HOP_IGNORE, 0, no_tip
        _set_ip(S)
        if S[SET_FUP_MWAIT] or S[SET_FUP_PWRE] or not S[P_BRANCH_ENABLE] or not S[PGE]:
            no_tip = True
        if no_tip:
            S[ST_TYPE] = T_INSTRUCTION
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = 0
            _fup_event(S, no_tip)  # (no instruction sample at the FUP in hop mode)
            return _HOP_RETURN, 0, no_tip
        _fup_event(S, no_tip)
        S[ST_TYPE] |= T_INSTRUCTION | T_BRANCH
        err = _walk_fup_tip(S, F, PK, BI)
        if not err and S[ST_TO_IP]:
            S[PKT_STATE] = RESAMPLE
        return _HOP_RETURN, err, no_tip
    if k == PSB:
        S[ST_PSB_OFFSET] = _abs_pos(S, PK, BI)
        S[PSB_IP] = 0
        S[LAST_IP] = 0
        S[HAVE_LAST_IP] = 1
        err = _walk_psbend(S, F, PK, BI)
        if err == EAGAIN:
            return _HOP_AGAIN, 0, no_tip
        if err:
            return _HOP_RETURN, err, no_tip
        S[ST_TYPE] = T_PSB_EVT
        if S[PSB_IP]:
            S[ST_TYPE] |= T_INSTRUCTION
            S[IP] = S[PSB_IP]
        S[ST_FROM_IP] = S[PSB_IP]
        S[ST_TO_IP] = 0
        return _HOP_RETURN, 0, no_tip
    return _HOP_PROCESS, 0, no_tip


@_jit
def _walk_fup_tip(S, F, PK, BI):
    if S[TX_FLAGS] & F_ABORT_TX:
        S[TX_FLAGS] = 0
        S[ST_FLAGS] &= ~F_IN_TX
        S[ST_FLAGS] |= F_ABORT_TX
    else:
        S[ST_FLAGS] |= F_ASYNC
    while True:
        err = _get_next_packet(S, PK, BI)
        if err:
            return err
        k = S[KIND]
        if (k == TNT or k == FUP or k == TRACESTOP or k == PSB or k == TSC or k == TMA or k == MODE_TSX
                or k == BAD or k == PSBEND or k == PTWRITE or k == PTWRITE_IP or k == EXSTOP or k == EXSTOP_IP
                or k == MWAIT or k == PWRE or k == PWRX or k == BBP or k == BIP or k == BEP or k == BEP_IP
                or k == CFE or k == CFE_IP or k == EVD):
            S[PKT_STATE] = ERR_RESYNC
            S[STEP] = 0
            return ENOENT
        if k == CBR:
            _calc_cbr(S, F)
        elif k == OVF:
            return _overflow(S)
        elif k == TIP_PGD:
            S[ST_FROM_IP] = S[IP]
            if S[COUNT] == 0:
                S[ST_TO_IP] = 0
            else:
                _set_ip(S)
                S[ST_TO_IP] = S[IP]
            S[PGE] = 0
            S[CONT_PERIOD] = 0
            S[ST_TYPE] |= T_TRACE_END
            _update_nr(S)
            return 0
        elif k == TIP_PGE:
            S[PGE] = 1
            S[ST_FROM_IP] = 0
            if S[COUNT] == 0:
                S[ST_TO_IP] = 0
            else:
                _set_ip(S)
                S[ST_TO_IP] = S[IP]
            S[ST_TYPE] |= T_TRACE_BEGIN
            _mtc_cyc_cnt_pge(S)
            _set_nr(S)
            return 0
        elif k == TIP:
            S[ST_FROM_IP] = S[IP]
            if S[COUNT] == 0:
                S[ST_TO_IP] = 0
            else:
                _set_ip(S)
                S[ST_TO_IP] = S[IP]
            _update_nr(S)
            _sample_iflag_chg(S)
            return 0
        elif k == PIP:
            S[PIP_PAYLOAD] = S[PAYLOAD]
        elif k == MTC:
            _calc_mtc_timestamp(S, F, PK, BI)
            if S[P_PERIOD_TYPE] == PERIOD_MTC:
                S[ST_TYPE] |= T_INSTRUCTION
        elif k == CYC:
            _calc_cyc_timestamp(S, F)
        elif k == MODE_EXEC:
            _mode_exec(S)
        elif k == VMCS or k == MNT or k == PAD:
            pass
        else:
            return _bug(S)


@_jit
def _walk_to_ip(S, F, PK, BI):
    while True:
        err = _get_next_packet(S, PK, BI)
        if err:
            return err
        k = S[KIND]
        if k == TIP_PGD:
            S[CONT_PERIOD] = 0
            S[PGE] = 0
            if _have_ip(S):
                _set_ip(S)
            if S[IP]:
                S[ST_TYPE] |= T_TRACE_END
                return 0
        elif k == TIP_PGE:
            S[PGE] = 1
            _mtc_cyc_cnt_pge(S)
            if _have_ip(S):
                _set_ip(S)
            if S[IP]:
                S[ST_TYPE] |= T_TRACE_BEGIN
                return 0
        elif k == TIP:
            S[PGE] = 1
            if _have_ip(S):
                _set_ip(S)
            if S[IP]:
                return 0
        elif k == FUP:
            if _have_ip(S):
                _set_ip(S)
            if S[IP]:
                return 0
        elif k == MTC:
            _calc_mtc_timestamp(S, F, PK, BI)
        elif k == TSC:
            _calc_tsc_timestamp(S)
        elif k == TMA:
            _calc_tma(S, F)
        elif k == CYC:
            _calc_cyc_timestamp(S, F)
        elif k == CBR:
            _calc_cbr(S, F)
        elif k == PIP:
            _set_pip(S)
        elif k == MODE_EXEC:
            _mode_exec_status(S)
        elif k == MODE_TSX:
            S[TX_FLAGS] = S[PAYLOAD] & F_IN_TX
        elif k == OVF:
            return _overflow(S)
        elif k == TRACESTOP:
            S[PGE] = 0
            S[CONT_PERIOD] = 0
            S[TX_FLAGS] = 0
            S[HAVE_TMA] = 0
        elif k == PSB:
            S[ST_PSB_OFFSET] = _abs_pos(S, PK, BI)
            S[PSB_IP] = 0
            S[LAST_IP] = 0
            S[HAVE_LAST_IP] = 1
            S[STACK_DEPTH] = 0
            err = _walk_psb(S, F, PK, BI)
            if err:
                return err
            S[ST_TYPE] = T_PSB_EVT
            S[ST_FROM_IP] = S[PSB_IP]
            S[ST_TO_IP] = 0
            return 0


@_jit
def _sync_ip(S, F, PK, BI):
    S[SET_FUP_TX] = 0
    S[SET_FUP_PTW] = 0
    S[SET_FUP_MWAIT] = 0
    S[SET_FUP_PWRE] = 0
    S[SET_FUP_EXSTOP] = 0
    S[SET_FUP_BEP] = 0
    _clear_fup_event_et(S)
    S[OVERFLOW] = 0
    if not S[P_BRANCH_ENABLE]:
        S[PKT_STATE] = IN_SYNC
        S[ST_TYPE] = 0
        return 0
    err = _walk_to_ip(S, F, PK, BI)
    if err or ((S[ST_TYPE] & T_PSB_EVT) and not S[IP]):
        return err
    S[PKT_STATE] = RESAMPLE if S[P_QUICK] else IN_SYNC  # hop: resample to_ip as an instruction
    S[ST_FROM_IP] = 0
    S[ST_TO_IP] = S[IP]
    return 0


@_jit
def _find_psb(BD, start, end):
    i = start
    while i + 16 <= end:
        ok = True
        for k in range(16):
            if BD[i + k] != (0x02 if k % 2 == 0 else 0x82):
                ok = False
                break
        if ok:
            return i
        i += 1
    return -1


@_jit
def _scan_for_psb(S, PK, BI, BD):
    while True:
        if S[BUF] < 0 or S[IDX] + S[STEP] >= _buf_end(S, BI):
            err = _get_data(S, BI, False)
            if err:
                return err
        b = S[BUF]
        ds = BI[b, BI_DSTART]
        start = PK[3, S[IDX] + S[STEP]]
        at = _find_psb(BD, ds + start, ds + BI[b, BI_DLEN])
        if at < 0:
            S[IDX] = BI[b, BI_PEND]
            S[STEP] = 0
            continue
        at -= ds
        lo = BI[b, BI_PSTART]
        hi = BI[b, BI_PEND]
        while lo < hi:
            mid = (lo + hi) >> 1
            if PK[3, mid] < at:
                lo = mid + 1
            else:
                hi = mid
        if lo >= BI[b, BI_PEND] or PK[3, lo] != at:
            S[RETOK_BUF] = b
            S[RETOK_POS] = at
            return W_RETOK
        S[IDX] = lo
        S[STEP] = 0
        return _get_next_packet(S, PK, BI)


@_jit
def _sync(S, F, PK, BI, BD):
    S[PGE] = 0
    S[CONT_PERIOD] = 0
    S[HAVE_LAST_IP] = 0
    S[LAST_IP] = 0
    S[PSB_IP] = 0
    S[IP] = 0
    S[STACK_DEPTH] = 0
    err = _scan_for_psb(S, PK, BI, BD)
    if err:
        return err
    S[HAVE_LAST_IP] = 1
    S[PKT_STATE] = IN_SYNC
    err = _walk_psb(S, F, PK, BI)
    if err:
        return err
    S[ST_TYPE] = T_PSB_EVT
    S[ST_FROM_IP] = S[PSB_IP]
    S[ST_TO_IP] = 0
    if S[IP]:
        S[PKT_STATE] = RESAMPLE if S[P_QUICK] else IN_SYNC  # hop: the PSB FUP ip as an instruction
    return 0


@_jit
def _errno_to_code(err):
    if err == ENOSYS:
        return ERR_INTERN
    if err == EBADMSG:
        return ERR_BADPKT
    if err == ENODATA:
        return ERR_NODATA
    if err == EILSEQ:
        return ERR_NOINSN
    if err == ENOENT:
        return ERR_MISMAT
    if err == EOVERFLOW:
        return ERR_OVR
    if err == ELOOP:
        return ERR_NELOOP
    return ERR_UNK


@_jit_inline
def _decode(S, F, PK, BI, BD, STK, HK, HV, GK, GV, BK, BND, EV):
    """PerfDecoder.decode(); returns 0, or W_NEED/W_RETOK (state to be restored by the caller)."""
    while True:
        S[ST_TYPE] = T_BRANCH
        S[ST_FLAGS] = 0
        ps = S[PKT_STATE]
        if ps == NO_PSB:
            err = _sync(S, F, PK, BI, BD)
        elif ps == NO_IP or ps == ERR_RESYNC:
            if ps == NO_IP:
                S[HAVE_LAST_IP] = 0
                S[LAST_IP] = 0
                S[IP] = 0
            err = _sync_ip(S, F, PK, BI)
        elif ps == IN_SYNC:
            err = _walk_trace(S, F, PK, BI, BD, STK, HK, HV, GK, GV, BK, BND, EV)
        elif ps == TNT_ST or ps == TNT_CONT:
            err = _walk_tnt(S, PK, BI, STK, HK, HV, GK, GV, BK, BND)
            if err == EAGAIN:
                err = _walk_trace(S, F, PK, BI, BD, STK, HK, HV, GK, GV, BK, BND, EV)
        elif ps == TIP_ST or ps == TIP_PGD_ST:
            err = _walk_tip(S, STK, HK, HV, GK, GV, BK, BND)
        elif ps == FUP_ST:
            err = _walk_fup(S, STK, HK, HV, GK, GV, BK, BND)
            if err == EAGAIN:
                err = _walk_fup_tip(S, F, PK, BI)
        elif ps == FUP_NO_TIP:
            err = _walk_fup(S, STK, HK, HV, GK, GV, BK, BND)
            if err == EAGAIN:
                err = _walk_trace(S, F, PK, BI, BD, STK, HK, HV, GK, GV, BK, BND, EV)
        elif ps == FUP_IN_PSB:
            err = _fup_in_psb(S, F, PK, BI, STK, HK, HV, GK, GV, BK, BND)
        elif ps == RESAMPLE:  # hop: the ip just reached, as an instruction sample
            S[PKT_STATE] = IN_SYNC
            S[ST_TYPE] = T_INSTRUCTION
            S[ST_FROM_IP] = S[IP]
            S[ST_TO_IP] = 0
            err = 0
        else:
            err = _bug(S)
        if err == W_NEED or err == W_RETOK or err == W_MORE:
            return err
        if err != ENOLINK:
            break
    S[ST_POS] = _abs_pos(S, PK, BI)
    if err:
        S[ST_ERR] = _errno_to_code(err)
        if err != EOVERFLOW:
            S[ST_FROM_IP] = S[IP]
        _update_sample_time(S)
        S[SAMPLE_TOT_CYC_CNT] = S[TOT_CYC_CNT]
        _set_nr(S)
    else:
        S[ST_ERR] = 0
        if S[CUR_CBR] != S[CBR_SEEN]:
            S[CBR_SEEN] = S[CUR_CBR]
            if not S[ST_TYPE]:
                S[ST_FROM_IP] = S[IP]
                S[ST_TO_IP] = 0
            S[ST_TYPE] |= T_CBR_CHG
            S[ST_CBR_PAYLOAD] = S[CBR_PAYLOAD]
            S[ST_CBR] = S[CUR_CBR]
        ps = S[PKT_STATE]
        if ps == NO_PSB or ps == NO_IP or ps == ERR_RESYNC or ps == IN_SYNC or ps == TNT_CONT or ps == RESAMPLE:
            _update_sample_time(S)
            if S[SAMPLE_CYC]:
                S[SAMPLE_TOT_CYC_CNT] = S[TOT_CYC_CNT]
                S[ST_FLAGS] |= F_SAMPLE_IPC
                S[SAMPLE_CYC] = 0
        if not S[HAVE_CYC]:
            S[ST_FLAGS] |= F_SAMPLE_IPC
    if (S[ST_TYPE] & T_PSB_EVT) and S[TSC_TIMESTAMP]:
        S[SAMPLE_TIMESTAMP] = S[TSC_TIMESTAMP]
    S[ST_FROM_NR] = S[NR]
    S[ST_TO_NR] = S[NEXT_NR]
    S[NR] = S[NEXT_NR]
    S[ST_TIMESTAMP] = S[SAMPLE_TIMESTAMP]
    est = S[SAMPLE_INSN_CNT] << 1
    if S[CUR_CBR] and S[P_MNTR]:
        est = est * S[P_MNTR] // S[CUR_CBR]
    S[ST_EST_TS] = S[SAMPLE_TIMESTAMP] + est
    S[ST_TOT_INSN] = S[TOT_INSN_CNT]
    S[ST_TOT_CYC] = S[SAMPLE_TOT_CYC_CNT]
    return 0


# ------------------------------------------------------------ samples (session)

@_jit
def _op_flags(op):
    if op == OP_CALL:
        return FL_BRANCH | FL_CALL
    if op == OP_RET:
        return FL_BRANCH | FL_RETURN
    if op == OP_JCC or op == OP_LOOP:
        return FL_BRANCH | FL_CONDITIONAL
    if op == OP_JMP:
        return FL_BRANCH
    if op == OP_IRET:
        return FL_BRANCH | FL_RETURN | FL_INTERRUPT
    if op == OP_INT:
        return FL_BRANCH | FL_CALL | FL_INTERRUPT
    if op == OP_SYSCALL:
        return FL_BRANCH | FL_CALL | FL_SYSCALLRET
    if op == OP_SYSRET:
        return FL_BRANCH | FL_RETURN | FL_SYSCALLRET
    if op == OP_VMENTRY:
        return FL_BRANCH | FL_CALL | FL_VMENTRY
    return 0


@_jit
def _sample_flags(S):
    sf = S[ST_FLAGS]
    if sf & F_ABORT_TX:
        flags = FL_BRANCH | FL_TX_ABORT
    elif sf & F_ASYNC:
        if not S[ST_TO_IP]:
            flags = FL_BRANCH | FL_ASYNC | FL_TRACE_END
        elif S[ST_FROM_NR] and not S[ST_TO_NR]:
            flags = FL_BRANCH | FL_CALL | FL_ASYNC | FL_VMEXIT
        else:
            flags = FL_BRANCH | FL_CALL | FL_ASYNC | FL_INTERRUPT
    else:
        flags = _op_flags(S[ST_INSN_OP]) if S[ST_FROM_IP] else (FL_BRANCH | FL_TRACE_BEGIN)
        if sf & F_IN_TX:
            flags |= FL_IN_TX
    if S[ST_TYPE] & T_TRACE_BEGIN:
        flags |= FL_TRACE_BEGIN
    if S[ST_TYPE] & T_TRACE_END:
        flags |= FL_TRACE_END
    return flags


@_jit
def _iflag_flags(S):
    """RFLAGS.IF bits of perf's intel_pt_sample_flags (cap_event_trace)."""
    if S[ST_TYPE] & T_IFLAG_CHG:
        flags = 0 if S[ST_FROM_IFLAG] else FL_INTR_DISABLE
        if S[ST_FROM_IFLAG] != S[ST_TO_IFLAG]:
            flags |= FL_INTR_TOGGLE
        return flags
    return 0 if S[ST_TO_IFLAG] else FL_INTR_DISABLE


@_jit
def _row(S, O, kind, ip, addr, flags, ins, cyc, code, offset, nr, insn_len, obj):
    n = S[NOUT]
    O[O_KIND, n] = kind
    O[O_TSC, n] = S[PTQ_TS]
    O[O_WHO_TSC, n] = S[CTX_TSC]
    O[O_IP, n] = ip
    O[O_ADDR, n] = addr
    O[O_FLAGS, n] = flags
    O[O_INSN, n] = ins
    O[O_CYC, n] = cyc
    O[O_CODE, n] = code
    O[O_OFFSET, n] = offset
    O[O_NR, n] = nr
    O[O_INSN_LEN, n] = insn_len
    O[O_TRACE_NR, n] = S[BASE_TRACE_NR]
    O[O_OBJ, n] = obj
    O[O_STEP, n] = S[STEP_NR]
    O[O_PAYLOAD, n] = 0
    O[O_PERIOD, n] = 0
    S[NOUT] = n + 1
    if S[P_SKIP] and kind >= 0 and kind != EV_ERROR and kind != EV_CBR:
        S[SKIP_SEEN] += 1


@_jit
def _sample_nr(S):
    """Whether a sample of the state is in a guest (perf's intel_pt_prep_a_sample/intel_pt_cpumode:
    the from side when there is a from ip, else the to side)."""
    return S[ST_FROM_NR] if S[ST_FROM_IP] else S[ST_TO_NR]


@_jit
def _prow(S, O, kind, flags, payload, offset):
    """A power-event sample (perf's intel_pt_synth_*_sample for --itrace=p)."""
    if S[P_COUNT_ONLY]:
        S[NBRANCH] += 1
        return
    # Like branches, perf's power/PSB samples carry the state's from_ip and to_ip.
    _row(S, O, kind, S[ST_FROM_IP], S[ST_TO_IP], flags, 0, 0, 0, offset, _sample_nr(S), 0, -1)
    O[O_PAYLOAD, S[NOUT] - 1] = payload


@_jit
def _evt_rows(S, O, EV, flags):
    """perf's intel_pt_synth_events_sample: an 'evt' sample (payload: perf's CFE word - type, IP bit 7,
    vector bits 8-15, EVD count from 16), its EVDs as K_EVD rows just before it (code type, payload)."""
    if S[P_COUNT_ONLY]:
        S[NBRANCH] += 1
        return
    nr = _sample_nr(S)
    n = S[ST_EVD_N]
    for j in range(n):
        _row(S, O, K_EVD, 0, 0, 0, 0, 0, EV[0, j], 0, 0, 0, -1)
        O[O_PAYLOAD, S[NOUT] - 1] = EV[1, j]
    fip = S[ST_FROM_IP]
    _row(S, O, EV_EVT, fip, S[ST_TO_IP], flags if fip else 0, 0, 0, 0, 0, nr, 0, -1)
    ip_bit = 1 if S[ST_FLAGS] & F_FUP_IP else 0
    O[O_PAYLOAD, S[NOUT] - 1] = ((S[ST_CFE_TYPE] & 0x1F) | ip_bit << 7 | (S[ST_CFE_VECTOR] & 0xFF) << 8
                                 | n << 16)


@_jit
def _item(S, IT, is_err):
    if S[P_COUNT_ONLY]:
        return
    n = S[NITEM]
    IT[0, n] = is_err
    IT[1, n] = S[PTQ_TS]
    S[NITEM] = n + 1


@_jit
def _synth(S, O, EV):
    """intel_pt_sample() for the state just decoded, at PTQ_TS."""
    if S[PTQ_TS] > S[CTX_TSC]:  # perf's thread/maps: the sideband up to the queue's highest timestamp
        S[CTX_TSC] = S[PTQ_TS]
    S[BASE_TRACE_NR] = S[ST_TRACE_NR]
    flags = _sample_flags(S)
    if S[P_EVENT_TRACE]:
        flags |= _iflag_flags(S)
    if S[P_INTR_EVENTS]:
        # perf's intel_pt_synth_events_sample / intel_pt_synth_iflag_chg_sample, before power events
        typ = S[ST_TYPE]
        if typ & T_EVT and S[P_EVT_ATTR]:
            _evt_rows(S, O, EV, flags)
        if typ & T_IFLAG_CHG and S[P_EVENT_TRACE]:
            if S[P_COUNT_ONLY]:
                S[NBRANCH] += 1
            else:
                via = 1 if typ & T_BRANCH else 0
                _row(S, O, EV_IFLAG, S[ST_FROM_IP], S[ST_TO_IP] if via else 0, flags, 0, 0, 0, 0, _sample_nr(S), 0,
                     -1)
                O[O_PAYLOAD, S[NOUT] - 1] = S[ST_TO_IFLAG] | via << 1
    if S[P_PWR]:
        typ = S[ST_TYPE]
        pflags = flags if S[ST_FROM_IP] else 0
        if typ & T_PSB_EVT:
            _prow(S, O, EV_PSB, 0, S[ST_PSB_OFFSET], S[ST_PSB_OFFSET])
        if S[ST_CBR] != S[SESS_CBR_SEEN]:
            if S[P_SKIP] and S[SKIP_SEEN] < S[P_SKIP]:
                # --itrace=sN: perf holds a CBR back while samples are skipped and retries at each
                # state; which try it emits depends on every queue (the session decides: code 1)
                _prow(S, O, EV_CBR, pflags, S[ST_CBR_PAYLOAD], 0)
                if not S[P_COUNT_ONLY]:
                    O[O_CODE, S[NOUT] - 1] = 1
            else:
                S[SESS_CBR_SEEN] = S[ST_CBR]
                _prow(S, O, EV_CBR, pflags, S[ST_CBR_PAYLOAD], 0)
        if typ & T_MWAIT_OP:
            _prow(S, O, EV_MWAIT, pflags, S[ST_MWAIT_PAYLOAD], 0)
        if typ & T_PWR_ENTRY:
            _prow(S, O, EV_PWRE, pflags, S[ST_PWRE_PAYLOAD], 0)
        if typ & T_EX_STOP:
            _prow(S, O, EV_EXSTOP, pflags, 1 if S[ST_FLAGS] & F_FUP_IP else 0, 0)
        if typ & T_PWR_EXIT:
            _prow(S, O, EV_PWRX, pflags, S[ST_PWRX_PAYLOAD], 0)
    if S[P_INSNS] and S[ST_TYPE] & T_INSTRUCTION:
        # perf's intel_pt_synth_instruction_sample: the period is the instructions since the last one
        # (P_RAW_INSN, PSB segments: the raw totals, made differences in perf's order by the join)
        cyc = S[ST_TOT_CYC] - S[LAST_IN_CYC] if S[ST_FLAGS] & F_SAMPLE_IPC else 0
        ins = 0
        if cyc:
            ins = S[ST_TOT_INSN] if S[P_RAW_INSN] else S[ST_TOT_INSN] - S[LAST_IN_INSN]
            S[LAST_IN_INSN] = S[ST_TOT_INSN]
            S[LAST_IN_CYC] = S[ST_TOT_CYC]
        if S[P_QUICK]:
            period = 1  # hop/leap: 1, as perf
        else:
            period = S[ST_TOT_INSN] if S[P_RAW_INSN] else S[ST_TOT_INSN] - S[LAST_INSN_CNT]
        S[LAST_INSN_CNT] = S[ST_TOT_INSN]
        if S[P_COUNT_ONLY]:
            S[NBRANCH] += 1
        else:
            _row(S, O, EV_INSTRUCTION, S[ST_FROM_IP], S[ST_TO_IP], flags, ins, cyc, 0, 0, _sample_nr(S), 0, -1)
            O[O_PERIOD, S[NOUT] - 1] = period
    if S[P_TX] and S[ST_TYPE] & T_TRANSACTION:
        if S[P_COUNT_ONLY]:
            S[NBRANCH] += 1
        else:
            _row(S, O, EV_TRANSACTION, S[ST_FROM_IP], S[ST_TO_IP], flags, 0, 0, 0, 0, _sample_nr(S), 0, -1)
    if S[P_PTW] and S[ST_TYPE] & T_PTW:
        if S[P_COUNT_ONLY]:
            S[NBRANCH] += 1
        else:
            _row(S, O, EV_PTWRITE, S[ST_FROM_IP], S[ST_TO_IP], flags if S[ST_FROM_IP] else 0, 0, 0,
                 1 if S[ST_FLAGS] & F_FUP_IP else 0, 0, _sample_nr(S), 0, -1)
            O[O_PAYLOAD, S[NOUT] - 1] = S[ST_PTW_PAYLOAD]
    if not (S[ST_TYPE] & T_BRANCH) or not S[P_BRANCHES]:
        return
    if S[P_FILTER] and not (S[P_FILTER] & flags):
        return
    cyc = S[ST_TOT_CYC] - S[LAST_BR_CYC] if S[ST_FLAGS] & F_SAMPLE_IPC else 0
    ins = 0
    if cyc:
        ins = S[ST_TOT_INSN] if S[P_RAW_INSN] else S[ST_TOT_INSN] - S[LAST_BR_INSN]
        S[LAST_BR_INSN] = S[ST_TOT_INSN]
        S[LAST_BR_CYC] = S[ST_TOT_CYC]
    insn_len = 0 if S[ST_FLAGS] & (F_ABORT_TX | F_ASYNC) else S[ST_INSN_LEN]
    fip = S[ST_FROM_IP]
    tip = S[ST_TO_IP]
    if S[P_COUNT_ONLY]:  # decode and discard: count the rows
        S[NBRANCH] += 2 if (S[ST_FROM_NR] != S[ST_TO_NR] and fip and tip) else 1
        return
    if S[ST_FROM_NR] != S[ST_TO_NR] and fip and tip:
        _row(S, O, EV_BRANCH, fip, 0, flags, ins, cyc, 0, 0, S[ST_FROM_NR], insn_len, -1)
        _row(S, O, EV_BRANCH, 0, tip, flags, 0, 0, 0, 0, S[ST_TO_NR], insn_len, -1)
    else:
        _row(S, O, EV_BRANCH, fip, tip, flags, ins, cyc, 0, 0, S[ST_FROM_NR] if fip else S[ST_TO_NR], insn_len, -1)


@_jit
def _no_sample(S):
    """A state the time filter passes over: no sample, but the thread context and the trace number
    follow it (as perf's queue does)."""
    if S[PTQ_TS] > S[CTX_TSC]:
        S[CTX_TSC] = S[PTQ_TS]
    S[BASE_TRACE_NR] = S[ST_TRACE_NR]


@_jit
def _state_step(S, O, IT, EV):
    """A decoded state: its item for perf's queue order, its samples unless the time filter says no."""
    S[STEP_NR] += 1
    _item(S, IT, 0)
    if S[HAVE_SAMPLE]:
        _synth(S, O, EV)
    else:
        _no_sample(S)


@_jit
def cursor(S, PK, BI):
    """(buffer, byte offset in it) of the packet the decoder is at (for segment stops)."""
    b = S[BUF]
    if b < 0:
        return -1, 0
    if b >= BI.shape[0]:
        return BI.shape[0], 0
    if S[IDX] < BI[b, BI_PEND]:
        return b, PK[3, S[IDX]]
    return b, BI[b, BI_DLEN]


@_jit
def run(S, F, SNAP, FSNAP, PK, BI, BD, STK, HK, HV, GK, GV, BK, BND, O, IT, EV):
    """Decode and synthesize until done or until Python must answer something (R_* codes).

    ``SNAP`` has S's length (the snapshot's two parts keep their indices); ``EV`` holds the
    (type, payload) pairs of the EVDs waiting for their CFE (Event Trace; 2 x MAX_EVDS)."""
    ns = NSTATE
    cap = O.shape[1]
    room = 9 + (MAX_EVDS + 2 if S[P_INTR_EVENTS] else 0)  # the rows one state may give
    while True:
        if S[NOUT] + room > cap or S[NITEM] + 2 > IT.shape[1]:
            return R_OUTFULL
        if S[PHASE] == PH_DONE:
            return R_DONE
        if S[TF_PENDING]:  # the time filter's verdict came back from Python (HAVE_SAMPLE, PHASE)
            S[TF_PENDING] = 0
            _state_step(S, O, IT, EV)
            continue
        if S[P_STOP_BUF] >= 0:
            b, byte = cursor(S, PK, BI)
            if b > S[P_STOP_BUF] or (b == S[P_STOP_BUF] and byte >= S[P_STOP_BYTE]):
                return R_STOP
        if S[PHASE] == PH_RUN and (S[CTX_TSC] < S[CTX_LO] or S[CTX_TSC] >= S[CTX_HI]):
            return R_CTX
        for k in range(ns):
            SNAP[k] = S[k]
        for k in range(ET_FIRST, ET_END):
            SNAP[k] = S[k]
        for k in range(F_SIZE):
            FSNAP[k] = F[k]
        err = _decode(S, F, PK, BI, BD, STK, HK, HV, GK, GV, BK, BND, EV)
        if err:
            for k in range(ns):
                S[k] = SNAP[k]
            for k in range(ET_FIRST, ET_END):
                S[k] = SNAP[k]
            for k in range(F_SIZE):
                F[k] = FSNAP[k]
            if err == W_NEED:
                return R_NEED
            return R_RETOK if err == W_RETOK else R_MORE
        e = S[ST_ERR]
        if S[PHASE] == PH_SETUP:
            if e:
                if e == ERR_NODATA:
                    return R_DONE
                if S[LASTFAIL] >= 0:
                    _row(S, O, K_SETUP_FAIL, 0, 0, 0, 0, 0, 0, 0, 0, 0, S[LASTFAIL])
                if S[P_SINGLE]:
                    return R_STEP
                continue
            if S[ST_TIMESTAMP] or S[P_TIMELESS]:
                S[PTQ_TS] = S[ST_TIMESTAMP]
                S[PHASE] = PH_RUN
                S[STEP_NR] = 0
                _item(S, IT, 0)
                if S[TF_ON] and S[SEL_START] and S[SEL_TS] and S[PTQ_TS] < S[SEL_TS]:
                    _no_sample(S)  # --time: the first state before the first start gives nothing
                else:
                    _synth(S, O, EV)
                S[CTX_LO] = 0
                S[CTX_HI] = 0
            if S[P_SINGLE]:
                return R_STEP
            continue
        if e:
            if e == ERR_NODATA:
                return R_DONE
            S[PTQ_TS] = S[ST_EST_TS]
            S[STEP_NR] += 1
            _item(S, IT, 1)
            obj = S[LASTFAIL]
            if S[P_ERRORS] and not ((e == ERR_OVR and S[P_ERR_MINUS_O]) or (e == ERR_LOST and S[P_ERR_MINUS_L])):
                _row(S, O, EV_ERROR, S[ST_FROM_IP], 0, 0, 0, 0, e, S[ST_POS], S[ST_FROM_NR], 0, obj)
            elif obj >= 0:
                _row(S, O, K_BUDGET, 0, 0, 0, 0, 0, 0, 0, 0, 0, obj)
            if S[P_SINGLE]:
                return R_STEP
            continue
        if (S[P_EST_TSC] and S[ST_FROM_IP] <= 0 and S[ST_TO_IP] > 0):
            S[PTQ_TS] = S[ST_EST_TS]  # perf's est_tsc: kernel (or nothing) -> user space (below 2^63)
        elif S[ST_TIMESTAMP] > S[PTQ_TS]:
            S[PTQ_TS] = S[ST_TIMESTAMP]
        if S[TF_ON] and S[SEL_TS]:
            # --time (perf's intel_pt_time_filter): before a start whose fast forward is done, no
            # sample; inside a range, a sample; a start or an end passed, or a fast forward due: Python
            if S[SEL_START]:
                if S[PTQ_TS] >= S[SEL_TS] or S[SEL_TS] > S[FF_TS]:
                    S[TF_PENDING] = 1
                    return R_TF
                S[HAVE_SAMPLE] = 0
            elif S[PTQ_TS] > S[SEL_TS]:
                S[TF_PENDING] = 1
                return R_TF
            else:
                S[HAVE_SAMPLE] = 1
        else:
            S[HAVE_SAMPLE] = 1
        _state_step(S, O, IT, EV)
        if S[P_SINGLE]:
            return R_STEP

