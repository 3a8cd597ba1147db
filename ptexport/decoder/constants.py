"""The perf decoder's numbers, declared once for both backends.

The reference decoder (:mod:`ptexport.decoder.reference.decoder`) and the
compiled kernel (:mod:`ptexport.decoder.compiled.kernel`) import their packet
states, state type bits, state flags, instruction classes and period kinds
from here, so the two cannot drift apart (``tests/decoder/test_constants.py``
checks every name they both define).  perf's error codes (``ERR_*``) and the
sample kinds (``EV_*``) belong to the decode -> export contract and live in
:mod:`ptexport.samples.columns`.  See docs/architecture.md.

The kernel reads these as numba compile-time constants: after changing a value
here, remove the kernels' numba cache (``ptexport/decoder/compiled/__pycache__/
kernel.*.nb[ic]``), which numba keys by the kernel's own source only.
"""

from __future__ import annotations

# Decoder packet states (perf's INTEL_PT_STATE_*).  The kernel, whose namespace also holds the packet
# kinds TNT/TIP/TIP_PGD/FUP, imports the four states of those names as TNT_ST/TIP_ST/TIP_PGD_ST/FUP_ST.
NO_PSB, NO_IP, ERR_RESYNC, IN_SYNC, TNT_CONT, TNT, TIP, TIP_PGD, FUP, FUP_NO_TIP, FUP_IN_PSB, RESAMPLE = range(12)

# State.type bits (perf's INTEL_PT_* sample types).
T_BRANCH = 1 << 0
T_INSTRUCTION = 1 << 1
T_TRANSACTION = 1 << 2
T_PTW = 1 << 3
T_MWAIT_OP = 1 << 4
T_PWR_ENTRY = 1 << 5
T_EX_STOP = 1 << 6
T_PWR_EXIT = 1 << 7
T_CBR_CHG = 1 << 8
T_TRACE_BEGIN = 1 << 9
T_TRACE_END = 1 << 10
T_BLK_ITEMS = 1 << 11
T_PSB_EVT = 1 << 12
T_EVT = 1 << 13
T_IFLAG_CHG = 1 << 14

# State.flags bits.
F_IN_TX = 1 << 0
F_ABORT_TX = 1 << 1
F_ASYNC = 1 << 2
F_FUP_IP = 1 << 3
F_SAMPLE_IPC = 1 << 4

# Instruction classes (perf's op / branch kinds).
OP_OTHER, OP_CALL, OP_RET, OP_JCC, OP_JMP, OP_LOOP, OP_IRET, OP_INT, OP_SYSCALL, OP_SYSRET, OP_VMENTRY = range(11)
BR_NO_BRANCH, BR_INDIRECT, BR_CONDITIONAL, BR_UNCONDITIONAL = range(4)

# Period kinds for instruction samples.
PERIOD_NONE, PERIOD_INSTRUCTIONS, PERIOD_TICKS, PERIOD_MTC = range(4)

# Outcomes inside the decoders: perf's negative errnos (intel-pt-decoder.c returns them), and a walk that
# stopped at a branch it handled.
WALK_RETURN = 1
EAGAIN = -11
ENOLINK = -67
EILSEQ = -84
ENOENT = -2
EINVAL = -22
EBADMSG = -74
ENODATA = -61
EOVERFLOW = -75
ELOOP = -40
ENOSYS = -38

# The row kind of an EVD (Event Trace) in a queue's rows: it belongs to the 'evt' row after it; the
# session keeps it as SampleColumns.evd_* (not a sample; dropped with the budget marks).
EVD_ROW = -2
