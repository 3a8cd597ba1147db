"""The decode -> export contract: synthesized samples as columns.

A decoder backend (:mod:`ptexport.decoder`) turns a trace into
:class:`SampleColumns`, one row per synthesized sample in perf's output
order; the call-tree builder and the database export read nothing else.
``kind`` is one of the ``EV_*`` sample kinds, ``code`` of an error row one of
perf's ``ERR_*`` error codes (numbered as perf prints "code N").
See docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Sample kinds.
EV_BRANCH, EV_ERROR, EV_INSTRUCTION, EV_TRANSACTION, EV_PTWRITE, EV_CBR, EV_MWAIT, EV_PWRE, EV_EXSTOP, EV_PWRX, EV_PSB, \
    EV_EVT, EV_IFLAG = range(13)
EVENT_NAMES = ("branches", "error", "instructions", "transactions", "ptwrite", "cbr", "mwait", "pwre", "exstop", "pwrx", "psb",
               "evt", "iflag")

# Error codes, numbered as perf numbers them (perf prints "code N").
ERR_NOMEM, ERR_INTERN, ERR_BADPKT, ERR_NODATA, ERR_NOINSN, ERR_MISMAT, ERR_OVR, ERR_LOST, ERR_UNK, ERR_NELOOP = range(1, 11)
ERROR_MESSAGES = {
    ERR_NOMEM: "Memory allocation failed",
    ERR_INTERN: "Internal error",
    ERR_BADPKT: "Bad packet",
    ERR_NODATA: "No more data",
    ERR_NOINSN: "Failed to get instruction",
    ERR_MISMAT: "Trace doesn't match instruction",
    ERR_OVR: "Overflow packet",
    ERR_LOST: "Lost trace data",
    ERR_UNK: "Unknown error!",
    ERR_NELOOP: "Never-ending loop (refer perf config intel-pt.max-loops)",
}

COLUMNS = ("kind", "tsc", "time", "cpu", "pid", "tid", "ip", "addr", "flags", "insn_cnt", "cyc_cnt",
           "period", "code", "payload", "queue", "offset", "nr", "insn_len", "trace_nr", "obj", "step")

DEFAULTS = {"obj": -1}
OUT_COLUMNS = tuple(c for c in COLUMNS if c not in ("obj", "step"))
U64_COLUMNS = ("tsc", "ip", "addr", "payload")


@dataclass
class SampleColumns:
    """Synthesized samples and errors in perf's output order."""

    kind: np.ndarray
    tsc: np.ndarray
    time: np.ndarray  # perf time in ns (0 when timeless)
    cpu: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ip: np.ndarray
    addr: np.ndarray
    flags: np.ndarray
    insn_cnt: np.ndarray
    cyc_cnt: np.ndarray
    period: np.ndarray
    code: np.ndarray  # error code (EV_ERROR), else 0
    payload: np.ndarray  # ptwrite/cbr/mwait/pwre/pwrx payload, psb offset, evt CFE word, iflag bits
    queue: np.ndarray
    offset: np.ndarray  # trace offset in the queue (errors, psb)
    nr: np.ndarray  # 1 when the sample is in a guest (non-root)
    insn_len: np.ndarray  # length of the branch instruction (0 for async branches)
    trace_nr: np.ndarray  # decoder trace number: a change is a discontinuity
    # Filled by decode() (decoder/guest.py VcpuAttribution): guest machine pid (0: host) and VCPU (-1)
    machine_pid: np.ndarray | None = None
    vcpu: np.ndarray | None = None
    # EVD packets of the evt samples (--itrace=I): row of the evt sample in this batch, EVD type, payload
    evd_row: np.ndarray | None = None
    evd_type: np.ndarray | None = None
    evd_payload: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.kind)

    @staticmethod
    def error_message(code: int) -> str:
        return ERROR_MESSAGES.get(int(code), "Unknown error!")


def concat_columns(batches: list[SampleColumns]) -> SampleColumns:
    """Batches of :meth:`PerfSession.iter_batches` as one :class:`SampleColumns`."""
    if not batches:
        return SampleColumns(**{c: np.zeros(0, np.uint64 if c in U64_COLUMNS else np.int64) for c in OUT_COLUMNS})
    if len(batches) == 1:
        return batches[0]
    cols = {c: np.concatenate([getattr(b, c) for b in batches]) for c in OUT_COLUMNS}
    if all(b.machine_pid is not None for b in batches):  # split already (perf's VM split): kept so
        cols["machine_pid"] = np.concatenate([b.machine_pid for b in batches])
        cols["vcpu"] = np.concatenate([b.vcpu for b in batches])
    return SampleColumns(**cols)


def few_distinct(values: np.ndarray, most: int = 16) -> np.ndarray:
    """``np.unique(values)`` for a column with a few distinct values (a batch's VCPU threads, its guest
    machines): a comparison pass per value instead of a sort of the batch (a 64 K-row batch with
    three values: 0.05 ms against np.unique's 1 ms); np.unique once more than ``most`` turn up."""
    a = np.asarray(values).ravel()
    if not a.size:
        return np.unique(a)
    found = [a[0]]
    left = a != a[0]  # the rows of values not found yet
    while True:
        i = int(left.argmax())
        if not left[i]:
            return np.sort(np.array(found, dtype=a.dtype))
        if len(found) == most:
            return np.unique(a)
        found.append(a[i])
        left &= a != a[i]
