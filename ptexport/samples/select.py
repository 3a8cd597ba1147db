"""Which branch samples perf synthesizes from decoded branches, vectorised.

perf's Intel PT sample synthesis (tools/perf/util/intel-pt.c) applies, per
decoder queue and in this order, to each branch the decoder reports:

1. VM entry/exit: a branch whose source and target are in different
   machines (guest/host, ``nr`` differs) with both addresses known becomes
   two samples, ``ip -> 0`` then ``0 -> addr`` (perf cannot give ip and addr
   different machines).
2. ``--itrace`` filter: ``b`` keeps every branch; ``c`` keeps calls,
   asynchronous branches and trace ends; ``r`` keeps returns and trace
   begins; both may be given (:attr:`ItraceOptions.branches_filter`).
3. ``s`` initial skip: the first N synthesized events are dropped
   (:class:`InitialSkip`, counted across batches).
4. IPC: a sample taken where the decoder knows exact cycles carries the
   cycles (and instructions) since the previous sample that carried them
   (:class:`BranchIpc`, from the decoder's running counters).

Everything works on numpy columns; state objects carry what must survive from
one batch of a queue to the next.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ptexport.samples.itrace import ItraceOptions

__all__ = ["branch_mask", "split_vm_branches", "InitialSkip", "BranchIpc", "select_branches"]


def branch_mask(flags: np.ndarray, opts: ItraceOptions) -> np.ndarray:
    """Rows perf keeps as branch samples under ``opts`` (all False without ``b``/``c``/``r``)."""
    flags = np.asarray(flags)
    if not opts.branches:
        return np.zeros(flags.shape, dtype=bool)
    f = opts.branches_filter
    if not f:
        return np.ones(flags.shape, dtype=bool)
    return (flags.astype(np.int64) & f) != 0


def split_vm_branches(
    columns: Mapping[str, np.ndarray], from_nr: np.ndarray, to_nr: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Split branches between machines into two samples, as perf does.

    ``columns`` must hold ``ip`` and ``addr``; ``from_nr``/``to_nr`` say
    whether source and target run in a guest.  Returns the new columns and,
    for each output row, the index of the input row it came from.
    """
    ip = np.asarray(columns["ip"])
    addr = np.asarray(columns["addr"])
    split = (np.asarray(from_nr) != np.asarray(to_nr)) & (ip != 0) & (addr != 0)
    reps = np.where(split, 2, 1)
    src = np.repeat(np.arange(len(ip)), reps)
    out = {k: np.asarray(v)[src] for k, v in columns.items()}
    if split.any():
        first = np.concatenate(([True], src[1:] != src[:-1]))  # first copy of each input row
        second = ~first
        out["addr"] = out["addr"].copy()
        out["ip"] = out["ip"].copy()
        out["addr"][first & split[src]] = 0
        out["ip"][second] = 0
    return out, src


class InitialSkip:
    """perf's ``s`` option: drop the first ``count`` synthesized events of a session."""

    def __init__(self, count: int) -> None:
        self.remaining = int(count)

    def apply(self, mask: np.ndarray) -> np.ndarray:
        """``mask`` with its first still-to-skip True rows cleared (a new array)."""
        mask = np.array(mask, dtype=bool)
        if self.remaining <= 0:
            return mask
        idx = np.flatnonzero(mask)
        k = min(self.remaining, len(idx))
        mask[idx[:k]] = False
        self.remaining -= k
        return mask


class BranchIpc:
    """Instruction and cycle counts of branch samples (perf's ``last_br_*_cnt``), one per queue.

    The decoder gives, for every branch, its running instruction and cycle
    counts and whether cycles are exact there (``sample_ipc``).  A kept branch
    sample at an exact point reports the cycles since the previous such sample,
    and when that is not 0, the instructions since the last sample that
    reported cycles; other samples report 0 and 0.
    """

    def __init__(self) -> None:
        self.last_insn = 0
        self.last_cyc = 0

    def apply(
        self, kept: np.ndarray, sample_ipc: np.ndarray, cum_insn: np.ndarray, cum_cyc: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(insn_cnt, cyc_cnt) for every row (0 where not kept)."""
        kept = np.asarray(kept, dtype=bool)
        n = len(kept)
        insn_out = np.zeros(n, dtype=np.uint64)
        cyc_out = np.zeros(n, dtype=np.uint64)
        rows = np.flatnonzero(kept & np.asarray(sample_ipc, dtype=bool))
        if not len(rows):
            return insn_out, cyc_out
        C = np.asarray(cum_cyc, dtype=np.uint64)[rows]
        I = np.asarray(cum_insn, dtype=np.uint64)[rows]
        c_prev = np.concatenate((np.array([self.last_cyc], dtype=np.uint64), C[:-1]))
        cyc = C - c_prev  # u64 wrap-around, as in C
        upd = cyc != 0
        m = len(rows)
        upd_idx = np.maximum.accumulate(np.where(upd, np.arange(m), -1))
        prev_upd = np.concatenate(([-1], upd_idx[:-1]))
        last_i = np.where(prev_upd >= 0, I[np.maximum(prev_upd, 0)], np.uint64(self.last_insn)).astype(np.uint64)
        insn = np.where(upd, I - last_i, np.uint64(0))
        insn_out[rows] = insn
        cyc_out[rows] = cyc
        self.last_cyc = int(C[-1])
        if upd_idx[-1] >= 0:
            self.last_insn = int(I[upd_idx[-1]])
        return insn_out, cyc_out


def select_branches(
    columns: Mapping[str, np.ndarray],
    opts: ItraceOptions,
    *,
    skip: InitialSkip | None = None,
    from_nr: np.ndarray | None = None,
    to_nr: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The branch samples perf synthesizes from one batch of decoded branches.

    Applies the VM split (when ``from_nr``/``to_nr`` are given), the
    ``--itrace`` filter and the initial skip.  Returns the kept rows' columns
    and their indices into the input.
    """
    cols = dict(columns)
    src = np.arange(len(np.asarray(cols["flags"])))
    if from_nr is not None and to_nr is not None:
        cols, src = split_vm_branches(cols, from_nr, to_nr)
    mask = branch_mask(cols["flags"], opts)
    if skip is not None:
        mask = skip.apply(mask)
    return {k: v[mask] for k, v in cols.items()}, src[mask]
