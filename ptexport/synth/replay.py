"""Large traces fast: encode one round of the program once and replay it.

The sample programs run the same work every round of their main loop, and
each round ends with a ``write`` (tracing stops at the system call and starts
again after it).  Emulating three rounds gives: the first slice (start-up and
round 1), round 2, round 3 and the tail (exit).  When rounds 2 and 3 are the
same block for block, a run with K rounds is exactly

    first slice, (round) x (K - 1), tail

so the generator encodes the round once, behind a fresh PSB+, and copies the
bytes K - 1 times.  Each copy starts a fixed period D later (D is a multiple
of the MTC period, so every copy has its MTCs at the same places); only the
timing payloads differ (TSC, TMA's CTC, MTC), and those are patched with
numpy.  The ground truth is stored the same way (head, round, tail, repeat
count and period) and expanded by :func:`expand_truth`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ptexport.errors import SynthError
from ptexport.synth import engine as E
from ptexport.synth import model as G
from ptexport.synth.blocks import BlockCache
from ptexport.synth.emulate import run_program
from ptexport.synth.sideband import perf_data_path, write_perf_data


@dataclass
class Unit:
    """One encoded round: its bytes and what to patch in each copy."""

    data: bytes
    tsc_offs: list[int]       # 7-byte TSC payloads
    tma_offs: list[int]       # TMA: 2-byte CTC at the offset
    mtc_offs: list[int]       # 1-byte MTC payloads
    psb_offs: list[int]       # PSBs inside the round (offsets from its start) and their TSC
    psb_tsc: list[int]


def replicate(unit: Unit, count: int, period_ticks: int, ctc_ticks: int, mtc_shift: int
              ) -> np.ndarray:
    """``count`` copies of ``unit``; copy j is ``j * period_ticks`` later."""
    n = len(unit.data)
    out = np.tile(np.frombuffer(unit.data, dtype=np.uint8), count)
    base = np.arange(count, dtype=np.int64) * n
    j = np.arange(count, dtype=np.uint64)
    if period_ticks % (ctc_ticks << mtc_shift):
        raise SynthError("replay period is not a multiple of the MTC period")
    for off in unit.tsc_offs:
        v0 = int.from_bytes(unit.data[off:off + 7], "little")
        vals = np.uint64(v0) + j * np.uint64(period_ticks)
        for b in range(7):
            out[base + off + b] = ((vals >> np.uint64(8 * b)) & np.uint64(0xFF)).astype(np.uint8)
    dctc = period_ticks // ctc_ticks
    for off in unit.tma_offs:
        v0 = int.from_bytes(unit.data[off:off + 2], "little")
        vals = (np.uint64(v0) + j * np.uint64(dctc)) & np.uint64(0xFFFF)
        out[base + off] = (vals & np.uint64(0xFF)).astype(np.uint8)
        out[base + off + 1] = (vals >> np.uint64(8)).astype(np.uint8)
    dmtc = dctc >> mtc_shift
    for off in unit.mtc_offs:
        vals = (np.uint64(unit.data[off]) + j * np.uint64(dmtc)) & np.uint64(0xFF)
        out[base + off] = vals.astype(np.uint8)
    return out


TRUTH_COLS = ("time", "tsc", "exec_time", "cpu", "tid", "from_ip", "to_ip", "kind")


def expand_truth(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Full ground-truth arrays from a replayed truth (``head_*``, ``unit_*``, ``tail_*``)."""
    if "unit_kind" not in d:
        return d
    count = int(d["repeat"])
    period = int(d["period_ticks"])
    out = {}
    for c in TRUTH_COLS:
        unit = d["unit_" + c]
        tiled = np.tile(unit, count)
        if c in ("time", "exec_time"):
            step = np.repeat(np.arange(count, dtype=np.int64) * (period // 2), len(unit))
            tiled = tiled + step
        elif c == "tsc":
            step = np.repeat(np.arange(count, dtype=np.uint64) * np.uint64(period), len(unit))
            tiled = tiled + step
        out[c] = np.concatenate([d["head_" + c], tiled, d["tail_" + c]])
    return out


class _Stream:
    """What the perf.data writer needs of an encoded CPU stream."""

    def __init__(self, cpu, buf, psb_marks, end_time) -> None:
        self.cpu = cpu
        self.tid = -1
        self.w = type("W", (), {})()
        self.w.buf = buf
        self.psb_marks = psb_marks
        self.truncated_at: list = []
        self.end_time = end_time
        self.errors: list = []


def synthesize_replay(out_dir, opts, program, extra):
    """:func:`ptexport.synth.generate.synthesize` for large traces (see the module doc)."""
    if (opts.per_thread or opts.ovf or opts.corrupt or opts.truncate or opts.power
            or opts.ptwrite != "off"):
        raise SynthError("replay (large --branches) works with the per-CPU layout and no "
                         "faults; use --replay off or fewer branches")
    out_dir = Path(out_dir)
    emu = run_program(program, iterations=3, extra_programs=extra)
    sl = emu.slices
    if len(emu.threads) != 1 or len(sl) != 4 or not (
            sl[1].addrs == sl[2].addrs and sl[1].sizes == sl[2].sizes
            and sl[1].taken == sl[2].taken
            and sl[1].end_ip == sl[2].end_ip and sl[1].sysno == sl[2].sysno):
        raise SynthError(f"program {program.name}: its rounds are not all alike (or it has "
                         "threads), so it cannot be replayed; use --replay off")
    E.tag_programs(emu, program)
    elf_names = E.copy_elfs(out_dir, opts, emu)
    caches = {id(p): BlockCache(p) for p in emu.programs}
    cache = caches[id(program)]
    tpi = G.ticks_per_insn_for(opts)

    def ninsn(s):
        return sum(len(cache.get(a, z).insns) for a, z in zip(s.addrs, s.sizes))

    truth = E.GroundTruth()
    enc = E.CpuEncoder(0, opts, caches, truth, tpi)
    enc.force_psb = True
    t0 = G.TSC_BASE + 10_000
    p0 = E.Placed(sl[0], 0, t0, t0 + ninsn(sl[0]) * tpi)
    enc.encode_slice(p0)
    head_rows = len(truth)
    mtc_ticks = (G.TSC_CTC_N // G.TSC_CTC_D) << opts.mtc_period
    t1 = p0.end + G.SYSCALL_TICKS
    t1 += (-t1) % mtc_ticks                      # rounds start on an MTC boundary
    nu = ninsn(sl[1])
    pu = E.Placed(sl[1], 0, t1, t1 + nu * tpi)
    a = len(enc.w.buf)
    fl = (len(enc.f_tsc), len(enc.f_tma), len(enc.f_mtc), len(enc.psb_marks))
    enc.encode_slice(pu)
    enc.w.flush_tnt()
    unit_rows = len(truth) - head_rows
    unit = Unit(bytes(enc.w.buf[a:]),
                [o - a for o in enc.f_tsc[fl[0]:]], [o - a for o in enc.f_tma[fl[1]:]],
                [o - a for o in enc.f_mtc[fl[2]:]],
                [o - a for o, _t in enc.psb_marks[fl[3]:]], [t for _o, t in enc.psb_marks[fl[3]:]])
    period = nu * tpi + G.SYSCALL_TICKS
    period += (-period) % math.lcm(mtc_ticks, 2)
    repeat = max(1, -(-(opts.branches - head_rows - 2) // unit_rows))
    # the tail after the last round
    tail_enc = E.CpuEncoder(0, opts, caches, truth, tpi)
    tail_enc.force_psb = True
    t3 = t1 + repeat * period
    p3 = E.Placed(sl[3], 0, t3, t3 + ninsn(sl[3]) * tpi)
    tail_enc.encode_slice(p3)
    tail_enc.w.flush_tnt()

    head = bytes(enc.w.buf[:a])
    body = replicate(unit, repeat, period, G.TSC_CTC_N // G.TSC_CTC_D, opts.mtc_period)
    buf = bytearray(head)
    buf += body.tobytes()
    tail_at = len(buf)
    buf += tail_enc.w.buf
    psb_marks = [m for m in enc.psb_marks[:fl[3]]]
    n = len(unit.data)
    for j in range(repeat):
        for o, t in zip(unit.psb_offs, unit.psb_tsc):
            psb_marks.append((a + j * n + o, t + j * period))
    psb_marks += [(o + tail_at, t) for o, t in tail_enc.psb_marks]
    stream = _Stream(0, buf, psb_marks, p3.end)
    perf_path = perf_data_path(out_dir, opts)
    write_perf_data(perf_path, opts, emu, [p0, pu, p3], [stream], elf_names)

    arrays = truth.arrays()
    parts = {"head": slice(0, head_rows), "unit": slice(head_rows, head_rows + unit_rows),
             "tail": slice(head_rows + unit_rows, None)}
    saved = {f"{part}_{k}": v[sel] for part, sel in parts.items() for k, v in arrays.items()}
    saved["repeat"] = np.array(repeat)
    saved["period_ticks"] = np.array(period)
    np.savez_compressed(out_dir / "truth.npz", **saved)
    branches = head_rows + repeat * unit_rows + (len(truth) - head_rows - unit_rows)
    meta = {
        "options": asdict(opts),
        "program": program.name,
        "iterations": repeat + 1,
        "replay": {"repeat": repeat, "period_ticks": period, "unit_bytes": n,
                   "unit_branches": unit_rows},
        "branches": int(branches),
        "pt_bytes": len(buf),
        "kinds": list(G.KIND_NAMES),
        "threads": {str(t): {"pid": i.pid, "comm": i.comm} for t, i in emu.threads.items()},
        "time_conv": {"shift": G.TIME_SHIFT, "mult": G.TIME_MULT, "zero": G.TIME_ZERO},
        "elfs": sorted(elf_names.values()),
        "errors": [],
    }
    (out_dir / "truth.json").write_text(json.dumps(meta, indent=1) + "\n")
    return G.SynthResult(out_dir, perf_path, int(branches), len(buf), meta)
