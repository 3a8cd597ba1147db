"""Deliberate faults in encoded PT streams: corrupted bytes and truncated AUX areas.

Both act on one PSB interval of a stream, starting right after the TIP of an
indirect branch (so perf has just used a packet and fetches the next one):

* ``corrupt``: the bytes from there to the next PSB are overwritten with one
  bad-packet byte (0xD9) and PADs.  perf reports "Bad packet" where its
  decoder stood and resynchronises at the next PSB.
* ``truncate``: the same bytes are missing from the recording, as when the
  AUX buffer filled up: the AUX record of the part before ends with the
  TRUNCATED flag, and the next part starts at the PSB.  perf reports "Lost
  trace data" at that AUX record.

Where the PSB's FUP does not continue the decoder's position, perf adds a
"Trace doesn't match instruction" error (code 6) at the next branch it walks.

The ground truth is edited to what perf can see: the branches of the lost
bytes go, a trace begin at the PSB's FUP comes in.
"""

from __future__ import annotations

from ptexport.synth.model import KIND_TR_STRT, tsc_to_ns
from ptexport.synth.ptencode import PSB

BAD_BYTE = 0xD9          # xxx11001 with bits 7:5 = 110: not a packet


def _pick_intervals(enc, count: int, first: int = 2, step: int = 3) -> list[tuple[int, tuple]]:
    """PSB intervals (k, TIP mark) that have a TIP in their second half, at most ``count``."""
    picks = []
    k = first
    marks = enc.tip_marks
    used = enc.__dict__.setdefault("fault_intervals", set())
    while len(picks) < count and k + 1 < len(enc.psb_marks):
        if k in used or k - 1 in used or k + 1 in used:
            k += 1
            continue
        lo = enc.psb_ends[k]
        hi = enc.psb_marks[k + 1][0]
        mid = (lo + hi) // 2
        # (not where the PSB's FUP is the TIP's target: perf would see no discontinuity)
        cand = [m for m in marks if mid <= m[0] < hi - 16 and m[2] != enc.psb_fup[k + 1]]
        if cand:
            picks.append((k, cand[0]))
            used.add(k)
            k += step
        else:
            k += 1
    return picks


def _edit_truth(enc, truth, k: int, mark, kind: str, code: int, offset: int) -> None:
    """Drop the rows between the TIP and PSB k+1; add the trace begin at its FUP."""
    _off, rows_after, target, tsc = mark
    resume = enc.psb_truth[k + 1]
    fup = enc.psb_fup[k + 1]
    t_psb = enc.psb_marks[k + 1][1]
    keep_tail = slice(resume, None)
    for col in (truth.time, truth.cpu, truth.tid, truth.from_ip, truth.to_ip, truth.kind,
                truth.exec_time):
        tail = col[keep_tail]
        del col[rows_after:]
        col.extend(tail)
    removed = resume - rows_after
    if fup is not None:
        tid = truth.tid[rows_after] if rows_after < len(truth.tid) else truth.tid[rows_after - 1]
        for col, v in ((truth.time, t_psb), (truth.cpu, enc.cpu), (truth.tid, tid),
                       (truth.from_ip, 0), (truth.to_ip, fup), (truth.kind, KIND_TR_STRT),
                       (truth.exec_time, t_psb)):
            col.insert(rows_after, v)
    # perf: the error where its decoder stood (the TIP's target), then "Trace doesn't
    # match instruction" (code 6) when the PSB's FUP does not fit that position; a
    # truncation also gives "Lost trace data" (code 8) at the AUX record.
    err = {"kind": kind, "code": code, "cpu": enc.cpu, "tid": truth.tid[rows_after - 1],
           "offset": offset, "ip": target, "time": int(tsc_to_ns(tsc)), "lost_rows": removed,
           "psb": k + 1, "stop_time": int(tsc_to_ns(tsc))}
    if kind == "lost trace data":
        # perf's error comes from the AUX record (TRUNCATED) at the time perf read it
        err.update(ip=0, tid=-1, time=int(tsc_to_ns(t_psb - 20)))
    enc.errors.append(err)
    # later PSBs' truth indexes move
    delta = (1 if fup is not None else 0) - removed
    for j in range(k + 1, len(enc.psb_truth)):
        enc.psb_truth[j] += delta
    enc.tip_marks = [(o, r + delta if r > rows_after else r, t, ts) for o, r, t, ts in enc.tip_marks]


def corrupt(enc, truth, count: int) -> None:
    buf = enc.w.buf
    for k, mark in reversed(_pick_intervals(enc, count)):
        off = mark[0]
        end = enc.psb_marks[k + 1][0]
        assert bytes(buf[end:end + 16]) == PSB
        buf[off] = BAD_BYTE
        buf[off + 1:end] = b"\0" * (end - off - 1)
        _edit_truth(enc, truth, k, mark, "bad packet", 3, off)


def truncate(enc, truth, count: int) -> None:
    buf = enc.w.buf
    for k, mark in reversed(_pick_intervals(enc, count, first=3)):
        off = mark[0]
        end = enc.psb_marks[k + 1][0]
        n = end - off
        del buf[off:end]
        for e in enc.errors:
            if e["offset"] >= end:
                e["offset"] -= n
        enc.psb_marks = [(o - n if o >= end else o, t) for o, t in enc.psb_marks]
        enc.psb_ends = [o - n if o >= end else o for o in enc.psb_ends]
        enc.truncated_at = [(o - n if o >= end else o, t) for o, t in enc.truncated_at]
        enc.truncated_at.append((off, enc.psb_marks[k + 1][1] - 20))
        _edit_truth(enc, truth, k, mark, "lost trace data", 8, off)
