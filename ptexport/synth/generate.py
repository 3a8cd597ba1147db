"""The trace generator: emulate a program, schedule it on CPUs, encode PT, write perf.data.

:func:`synthesize` is the one entry point.  Steps:

1. :mod:`.emulate` runs the program (threads, fork/exec) and returns slices
   of user execution cut at system calls.
2. The scheduler places each slice on a CPU at a time (TSC ticks, one
   instruction = ``ticks_per_insn`` ticks), so threads run in parallel on
   several CPUs and switch on ``sched_yield``.
3. Each CPU's slices are encoded as one PT stream (:class:`CpuEncoder`),
   which at the same time records the ground truth: every branch perf will
   report (time, cpu, tid, from, to, kind).
4. :mod:`.perfwrite` writes perf.data with the sideband perf would have
   recorded (COMM, MMAP2, FORK, EXIT, ITRACE_START, SWITCH_CPU_WIDE, AUX).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ptexport.synth import faults
from ptexport.synth.blocks import BlockCache
from ptexport.synth.emulate import Program, run_program
from ptexport.synth.engine import (CpuEncoder, GroundTruth, copy_elfs, extra_programs, instruction_truth,
                                   iterations_for, mark_after_interrupt, schedule, slice_lengths, tag_programs)
# The model's names are the generator's vocabulary; callers read them here too (``generate.SynthOptions``).
from ptexport.synth.model import (CFE_INTR, CFE_IRET, EV_EVT, EV_EXSTOP, EV_MWAIT, EV_NAMES, EV_PTWRITE,  # noqa: F401
                                  EV_PWRE, EV_PWRX, KIND_ASYNC, KIND_CALL, KIND_JCC, KIND_JMP, KIND_NAMES, KIND_RET,
                                  KIND_SYSCALL, KIND_TR_END, KIND_TR_STRT, PF_VECTOR, PMU_TYPE, REPLAY_ABOVE,
                                  TIME_MULT, TIME_SHIFT, TIME_ZERO, TIMER_VECTOR, TSC_BASE, SynthOptions, SynthResult,
                                  find_program, ticks_per_insn_for, tsc_to_ns)
from ptexport.synth.replay import synthesize_replay
from ptexport.synth.sideband import perf_data_path, write_perf_data


def synthesize(out_dir: str | Path, opts: SynthOptions) -> SynthResult:
    """Make ``out_dir/perf.data``, the program ELFs and the ground truth."""
    opts.validate()
    out_dir = Path(out_dir)
    prog_path = find_program(opts.program)
    program = Program.load(prog_path)
    extra = extra_programs(program)
    replay = opts.replay == "on" or (opts.replay == "auto" and opts.branches > REPLAY_ABOVE
                                     and not opts.event_trace)
    if replay:
        return synthesize_replay(out_dir, opts, program, extra)
    iterations = iterations_for(program, opts.branches, extra)
    emu = run_program(program, iterations=iterations, extra_programs=extra,
                      preempt=opts.preempt, max_insns=max(60_000_000, 40 * opts.branches))
    elf_names = copy_elfs(out_dir, opts, emu)
    caches = {id(p): BlockCache(p) for p in emu.programs}

    tag_programs(emu, program)
    if opts.event_trace:
        mark_after_interrupt(emu.slices)

    ticks_per_insn = ticks_per_insn_for(opts)
    ninsns = slice_lengths(emu.slices, caches)
    placed = schedule(emu.slices, ninsns, opts.cpus, ticks_per_insn, opts.migrate)

    truth = GroundTruth()
    if opts.per_thread:
        # perf record --per-thread: one AUX buffer per thread, CPU unknown (-1)
        tids = sorted(emu.threads)
        encoders = [CpuEncoder(-1, opts, caches, truth, ticks_per_insn, tid=t) for t in tids]
        by_tid = {t: e for t, e in zip(tids, encoders)}
        for p in sorted(placed, key=lambda p: (p.sl.tid, p.start)):
            by_tid[p.sl.tid].encode_slice(p)
    else:
        encoders = [CpuEncoder(c, opts, caches, truth, ticks_per_insn) for c in range(opts.cpus)]
        for p in sorted(placed, key=lambda p: (p.cpu, p.start)):
            encoders[p.cpu].encode_slice(p)
    for enc in encoders:
        enc.w.flush_tnt()
    if opts.corrupt or opts.truncate:
        for enc in reversed(encoders):   # later streams first: rows before them stay put
            if opts.corrupt:
                faults.corrupt(enc, truth, opts.corrupt)
            if opts.truncate:
                faults.truncate(enc, truth, opts.truncate)

    perf_path = perf_data_path(out_dir, opts)
    write_perf_data(perf_path, opts, emu, placed, encoders, elf_names)

    n_insns = sum(ninsns)
    if n_insns <= opts.insn_truth_limit:
        np.savez_compressed(out_dir / "truth_insns.npz", **instruction_truth(placed, caches, opts.per_thread))

    arrays = truth.arrays()
    order = np.lexsort((np.arange(len(arrays["time"])), arrays["time"]))
    arrays = {k: v[order] for k, v in arrays.items()}
    evs = sorted((e for enc in encoders for e in enc.events), key=lambda e: e[0])
    if evs:
        cols = list(zip(*evs))
        arrays.update(ev_time=tsc_to_ns(np.array(cols[0], dtype=np.uint64)),
                      ev_cpu=np.array(cols[1], np.int32), ev_tid=np.array(cols[2], np.int32),
                      ev_ip=np.array(cols[3], np.int64), ev_kind=np.array(cols[4], np.uint8),
                      ev_payload=np.array(cols[5], np.uint64))
    np.savez_compressed(out_dir / "truth.npz", **arrays)
    meta = {
        "options": asdict(opts),
        "program": program.name,
        "iterations": iterations,
        "branches": int(len(truth)),
        "pt_bytes": int(sum(len(e.w.buf) for e in encoders)),
        "kinds": list(KIND_NAMES),
        "event_kinds": list(EV_NAMES),
        "threads": {str(t): {"pid": i.pid, "comm": i.comm} for t, i in emu.threads.items()},
        "time_conv": {"shift": TIME_SHIFT, "mult": TIME_MULT, "zero": TIME_ZERO},
        "ipbytes_used": {str(k): sum(e.w.ipbytes_used.get(k, 0) for e in encoders)
                         for k in (0, 1, 2, 3, 4, 6)},
        "elfs": sorted(elf_names.values()),
        "instructions": int(n_insns),
        "output": emu.output.decode("utf-8", "replace")[-200:],
        "errors": [e for enc in encoders for e in enc.errors],
    }
    (out_dir / "truth.json").write_text(json.dumps(meta, indent=1) + "\n")
    return SynthResult(out_dir, perf_path, len(truth), meta["pt_bytes"], meta)
