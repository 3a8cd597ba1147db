"""The compiled VM time correlation walk (pt/vmtime_compiled.py) equals the Python walk (pt/vmtime.py's
``_Queue._run_python``, itself held against perf inject --vm-time-correlation in
tests/oracle_perf/test_vm_time_correlation.py): messages in order, TSC patches, the VMCS packets seen
and the VMCS table, on random packet streams (PSB+ with and without PIP/VMCS/PSBEND, MTC runs, TSC/TMA
pairs with host and guest times, OVF, TraceStop, bad packets, buffers that do and do not follow on)
and on generated VM recordings."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ptexport.jit import numba
from ptexport.pt import vmtime
from ptexport.pt.perfpkt import Pkt
from ptexport.pt.vmtime import NO_VMCS, VmBuffer, VmTimeConfig, VmTimeCorrelator

pytestmark = pytest.mark.skipif(numba is None, reason="numba is not installed")

M64 = (1 << 64) - 1
M56 = (1 << 56) - 1


def _stream(rng: random.Random, t0: int, offsets: list[int], ratio: tuple[int, int], shift: int) -> list[tuple]:
    """(kind, count, payload) packets: a host clock running from ``t0``, MTCs of its CTC, TSCs of host
    or guest time (a guest's: plus its VMCS's offset), in the shapes perf's rules look at."""
    n, d = ratio
    out: list[tuple] = []
    t = t0
    vmcs = [0x1000 + 0x40 * k for k in range(len(offsets))]
    guest = -1

    def ctc(at: int) -> int:
        return (at * d // n) if n else 0

    def tsc(at: int) -> int:
        now = at if guest < 0 else (at + offsets[guest]) & M64
        if rng.random() < 0.05:
            now = rng.getrandbits(64)  # a time from nowhere
        return now & M56

    for _ in range(rng.randrange(20, 120)):
        t += rng.randrange(1, 5000)
        r = rng.random()
        if r < 0.25:  # a PSB+
            out.append((Pkt.PSB, 0, 0))
            if rng.random() < 0.9:
                out.append((Pkt.TSC, 0, tsc(t)))
            if rng.random() < 0.9:
                out.append((Pkt.TMA, rng.randrange(512), ctc(t) & 0xFFFF))
            if rng.random() < 0.7:
                guest = rng.randrange(-1, len(offsets))
                out.append((Pkt.PIP, 0, 1 if guest >= 0 else 0))
                if guest >= 0 and rng.random() < 0.8:
                    out.append((Pkt.VMCS, 0, vmcs[guest]))
                elif rng.random() < 0.2:
                    out.append((Pkt.VMCS, 0, NO_VMCS))
            for k in rng.sample([Pkt.MODE_EXEC, Pkt.FUP, Pkt.CBR, Pkt.CYC, Pkt.MTC, Pkt.PAD], rng.randrange(3)):
                out.append((k, 0, rng.getrandbits(8)))
            if rng.random() < 0.9:
                out.append((Pkt.PSBEND, 0, 0))
        elif r < 0.5:  # MTCs
            for _ in range(rng.randrange(1, 8)):
                t += rng.randrange(1, 3000)
                out.append((Pkt.MTC, 0, (ctc(t) >> shift) & 0xFF))
        elif r < 0.62:  # a TSC (and its TMA, mostly) outside a PSB+
            out.append((Pkt.TSC, 0, tsc(t)))
            for _ in range(rng.randrange(3)):
                out.append((rng.choice([Pkt.CYC, Pkt.MTC, Pkt.PAD]), 0, rng.getrandbits(8)))
            if rng.random() < 0.8:
                out.append((Pkt.TMA, rng.randrange(512), ctc(t) & 0xFFFF))
        elif r < 0.8:
            out.append((rng.choice([Pkt.TNT, Pkt.TIP, Pkt.TIP_PGE, Pkt.TIP_PGD, Pkt.FUP]), 0, rng.getrandbits(48)))
        elif r < 0.85:
            out.append((Pkt.OVF, 0, 0))
            if rng.random() < 0.5:
                out.append((Pkt.FUP, 0, rng.getrandbits(48)))
        elif r < 0.88:
            out.append((Pkt.TRACESTOP, 0, 0))
        elif r < 0.9:
            out.append((Pkt.BAD, 0, 0))
        elif r < 0.95:
            guest = rng.randrange(-1, len(offsets))
            out.append((Pkt.PIP, 0, 1 if guest >= 0 else 0))
            if guest >= 0:
                out.append((Pkt.VMCS, 0, vmcs[guest] if rng.random() < 0.9 else rng.getrandbits(40)))
        else:
            out.append((rng.choice([Pkt.CYC, Pkt.CBR, Pkt.MODE_EXEC, Pkt.PTWRITE, Pkt.MNT]), 0, rng.getrandbits(16)))
    return out


def _run(buffers: dict[bytes, list[tuple]], queues: list[list[VmBuffer]], cfg: VmTimeConfig, compiled: bool,
         monkeypatch) -> tuple:
    def lists(data):
        pk = buffers[bytes(data)]
        return [int(k) for k, _, _ in pk], [c for _, c, _ in pk], [p for _, _, p in pk], list(range(0, 3 * len(pk), 3))

    def arrays(data):
        kinds, counts, payloads, pos = lists(data)
        return (np.array(kinds, dtype=np.uint8), np.array(counts, dtype=np.uint64),
                np.array(payloads, dtype=np.uint64), np.array(pos, dtype=np.int64))

    monkeypatch.setattr(vmtime, "packet_lists", lists)
    monkeypatch.setattr(vmtime, "packet_arrays", arrays)
    corr = VmTimeCorrelator(cfg)
    patches = []
    for q, bufs in enumerate(queues):
        walk = vmtime._Queue(corr, bufs)
        walk.queue = ("cpu", q)
        patches.append(walk._run_compiled(__import__("ptexport.pt.vmtime_compiled", fromlist=["x"])) if compiled
                       else walk._run_python())
    table = [(k, v.vmcs, v.tsc_offset, v.reliable, v.error_printed) for k, v in corr.vmcs_table.items()]
    return corr.messages, patches, corr.vmcs_seen, table


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_walk_alike(seed, monkeypatch):
    rng = random.Random(seed)
    ratio = rng.choice([(2, 1), (84, 2), (0, 0), (7, 3), (100, 33)])
    shift = rng.choice([0, 3, 5, 9, 12, 15])
    offsets = [rng.choice([0, -0x5000000000 & M64, rng.getrandbits(64), rng.getrandbits(30)])
               for _ in range(rng.randrange(1, 4))]
    extra = {}
    if rng.random() < 0.3:
        extra = dict(default_offset=rng.choice([0, rng.getrandbits(40)]),
                     offsets={0x1000: rng.getrandbits(40)} if rng.random() < 0.5 else {})
    cfg = VmTimeConfig(mtc_period=shift, tsc_ctc_ratio_n=ratio[0], tsc_ctc_ratio_d=ratio[1],
                       first_timestamp=rng.choice([0, 1 << 40]), **extra)
    buffers: dict[bytes, list[tuple]] = {}
    queues = []
    t = rng.getrandbits(44)
    for q in range(rng.randrange(1, 4)):
        bufs = []
        for b in range(rng.randrange(1, 5)):
            key = f"{seed}:{q}:{b}".encode()
            buffers[key] = _stream(rng, t, offsets, ratio, shift)
            t += rng.randrange(1 << 20)
            bufs.append(VmBuffer(key, t + rng.randrange(-(1 << 16), 1 << 24), b > 0 and rng.random() < 0.7))
        queues.append(bufs)
    python = _run(buffers, queues, cfg, False, monkeypatch)
    compiled = _run(buffers, queues, cfg, True, monkeypatch)
    assert compiled[0] == python[0]
    assert compiled[1] == python[1]
    assert compiled[2] == python[2]
    assert compiled[3] == python[3]


def test_generated_vm_recordings_walk_alike(tmp_path, monkeypatch):
    """A generated host recording with two offset VCPUs (and one whose guest TSCs are not offset)."""
    from ptexport.cli.vm_time_correlation import correlate
    from ptexport.synth.vm import VmOptions, synthesize_vm

    out = tmp_path / "vm"
    synthesize_vm(out, VmOptions(branches=40_000, vcpus=3, cpus=2, seed=3,
                                 tsc_offsets=(-0x5000000000 & M64, -0x4FFFFFF000 & M64, 0)))
    used = []
    real = vmtime._Queue._run_compiled

    def spy(self, c):
        used.append(1)
        return real(self, c)

    monkeypatch.setattr(vmtime._Queue, "_run_compiled", spy)
    fast_msgs, fast_patches, fast = correlate(str(out / "host.data"))
    assert used
    monkeypatch.setattr(vmtime._Queue, "run", vmtime._Queue._run_python)
    slow_msgs, slow_patches, slow = correlate(str(out / "host.data"))
    assert fast_msgs == slow_msgs and any("TSC Offset" in m for m in fast_msgs)
    assert fast_patches == slow_patches and sum(len(v) for v in fast_patches.values()) > 0
    assert fast.vmcs_seen == slow.vmcs_seen and fast.vmcs_table == slow.vmcs_table
