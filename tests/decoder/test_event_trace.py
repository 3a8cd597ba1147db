"""Event Trace (``--itrace=I``): perf's ``evt`` and ``iflag`` samples and the "D"/"t" flag bits.

``ptexport synth --event-trace`` makes a recording with the event_trace config
bit and cap_event_trace in AUXTRACE_INFO: each timer interrupt is CFE.INTR
(every third a page fault with an EVD CR2 before it) bound to the FUP where
it hit, each return to user space CFE.IRET before the TIP.PGE, and MODE.Exec
carries RFLAGS.IF.  Oracles: perf 6.1's ``perf script`` line for line, and the
generator's ground truth for which events happened (type, vector, thread, ip).
"""

from __future__ import annotations

import csv
import io
import subprocess

import numpy as np
import pytest

from ptxtest import needs_perf
from ptexport.cli import main
from ptexport.pt.perfpkt import Pkt, tokenize
from ptexport.synth.generate import CFE_INTR, CFE_IRET, EV_EVT, PF_VECTOR

VARIANTS = {
    "threads-2cpus": ("--program", "threads", "--cpus", "2", "--preempt", "400"),
    "threads-per-thread": ("--program", "threads", "--per-thread", "--preempt", "300"),
    "threads-ovf-cyc": ("--program", "threads", "--cpus", "2", "--preempt", "350", "--ovf", "3", "--timing", "cyc"),
}
KINDS = ("Ibe", "I", "be", "Ii100", "cr")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    made = {}
    for name, opts in VARIANTS.items():
        d = tmp_path_factory.mktemp(name)
        assert main(["synth", "--out", str(d), "--branches", "3000", "--seed", "5", "--event-trace", *opts],
                    out=io.StringIO()) == 0
        made[name] = d
    return made


def _collapse(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _ours(path, *args) -> str:
    out = io.StringIO()
    assert main(["dump", "branches", str(path), *args], out=out) == 0
    return out.getvalue()


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_event_trace_equals_perf(traces, variant):
    path = traces[variant] / "perf.data"
    n_evt = 0
    for itrace in KINDS:
        proc = subprocess.run(["perf", "script", "-i", str(path), f"--itrace={itrace}", "-F",
                               "pid,tid,cpu,time,ip,addr,flags", "--ns"], capture_output=True, text=True, check=True)
        theirs = _collapse(proc.stdout)
        mine = _collapse(_ours(path, f"--itrace={itrace}"))
        assert theirs
        if mine != theirs:
            first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            pytest.fail(f"--itrace={itrace}: {len(mine)} lines vs perf's {len(theirs)}; first difference at {first}:\n"
                        f"  ours: {mine[first] if first < len(mine) else None}\n"
                        f"  perf: {theirs[first] if first < len(theirs) else None}")
        if itrace == "I":
            n_evt = len(mine)
    assert n_evt > 20


def _csv_rows(path, itrace: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(_ours(path, "--csv", f"--itrace={itrace}"))))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_evt_samples_match_ground_truth(traces, variant):
    """Every CFE.INTR the generator wrote is one evt sample: same thread, vector, EVD count, and the
    IP where the interrupt hit (its FUP).  CFE.IRET samples are a subset: perf 6.1 walks on from
    the interrupt's FUP at the TIP.PGD, often fails ("Trace doesn't match instruction") and
    resyncs at the next TIP.PGE, skipping the CFE.IRET before it."""
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session
    from ptexport.samples.columns import EV_EVT as K_EVT
    from ptexport.samples.itrace import parse_itrace

    d = traces[variant]
    truth = np.load(d / "truth.npz")
    sel = truth["ev_kind"] == EV_EVT
    pay = truth["ev_payload"][sel].tolist()
    tids = truth["ev_tid"][sel].tolist()
    ips = truth["ev_ip"][sel].tolist()
    want_intr = sorted((t, p & 0xFF, ip) for t, p, ip in zip(tids, pay, ips) if p >> 8 == CFE_INTR)
    n_iret = sum(1 for p in pay if p >> 8 == CFE_IRET)
    with open_perf_data(str(d / "perf.data")) as pd:
        cols = open_session(pd, DecodeConfig(itrace=parse_itrace("I"))).decode()
    k = cols.kind == K_EVT
    words = cols.payload[k].tolist()
    assert len(words) == sum(1 for r in _csv_rows(d / "perf.data", "I") if r["event"] == "evt")
    have_intr = sorted((t, (w >> 8) & 0xFF, ip) for t, w, ip in zip(cols.tid[k].tolist(), words, cols.ip[k].tolist())
                       if w & 0x1F == CFE_INTR)
    assert have_intr == want_intr and len(want_intr) > 10
    iret = sum(1 for w in words if w & 0x1F == CFE_IRET)
    assert iret <= n_iret
    assert iret > 0 or variant == "threads-per-thread"  # there every IRET follows a failed walk
    assert len(words) == len(have_intr) + iret
    for w in words:  # a page fault carries its CR2 in one EVD; the IP bit is set for interrupts only
        assert (w >> 16) == (1 if (w >> 8) & 0xFF == PF_VECTOR else 0)
        assert bool(w & 0x80) == ((w & 0x1F) == CFE_INTR)


def test_iflag_sample_flags(traces):
    """RFLAGS.IF goes 0 -> 1 at the first trace begin of a queue: an iflag sample and a branch,
    both flagged "D" (interrupts were disabled before) and "t" (they toggled)."""
    from ptexport.samples.flags import IpFlag

    rows = _csv_rows(traces["threads-2cpus"] / "perf.data", "Ib")
    iflags = [r for r in rows if r["event"] == "iflag"]
    assert iflags
    dt = int(IpFlag.INTR_DISABLE | IpFlag.INTR_TOGGLE)
    for r in iflags:
        assert int(r["flags"]) & dt == dt
        i = rows.index(r)
        assert rows[i + 1]["event"] == "branches" and int(rows[i + 1]["flags"]) & dt == dt
    # later branches run with interrupts enabled: no D or t
    assert sum(1 for r in rows if r["event"] == "branches" and int(r["flags"]) & dt) == len(iflags)


def test_mode_exec_carries_iflag():
    """perf's packet decoder keeps MODE.Exec's byte in count: bit 2 is RFLAGS.IF."""
    cols = tokenize(bytes([0x99, 0x05, 0x99, 0x01]))
    assert cols.kind.tolist() == [Pkt.MODE_EXEC, Pkt.MODE_EXEC]
    assert cols.count.tolist() == [4, 0]
    assert cols.payload.tolist() == [64, 64]
