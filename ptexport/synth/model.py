"""The generator's model: ground-truth kinds, the recording's constants, the options that select a variant.

Shared by every part of :mod:`ptexport.synth` (the engine, perf.data writing, replay, faults, VM traces,
verification); it imports no other part of the generator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ptexport.errors import UsageError

# Ground-truth branch kinds and the flag text perf script prints for them.
KIND_TR_STRT, KIND_JCC, KIND_JMP, KIND_CALL, KIND_RET, KIND_SYSCALL, KIND_TR_END, KIND_ASYNC = \
    range(8)


KIND_NAMES = ("tr strt", "jcc", "jmp", "call", "return", "tr end  syscall", "tr end",
              "tr end  async")


PMU_TYPE = 8


TSC_BASE = 7_000_000_000_000         # TSC at the start of the recording


TIME_SHIFT, TIME_MULT, TIME_ZERO = 32, 1 << 31, 0   # 2 GHz TSC: ns = tsc / 2


TSC_CTC_N, TSC_CTC_D = 80, 1         # 25 MHz crystal clock


MAX_NONTURBO_RATIO = 20              # 2 GHz / 100 MHz bus clock


SYSCALL_TICKS = 2000                 # time a thread spends in the kernel per system call


EV_PTWRITE, EV_MWAIT, EV_PWRE, EV_EXSTOP, EV_PWRX, EV_EVT = range(6)


EV_NAMES = ("ptwrite", "mwait", "pwre", "exstop", "pwrx", "evt")


# Event Trace (--event-trace): CFE types and the vectors of the interrupts the generator makes
CFE_INTR, CFE_IRET = 1, 2


TIMER_VECTOR, PF_VECTOR = 0xEC, 14  # Linux's local APIC timer; #PF (with an EVD CR2 packet)


EVD_CR2 = 0


WAIT_TICKS = 400                     # how long a TPAUSE waits


OVF_LOST_BLOCKS = 60                 # blocks whose packets an overflow loses


REPLAY_ABOVE = 2_000_000             # --branches above this replay one encoded round


# The sample programs by name: the checkout's sample_data/src, else the copies an install carries
# (setup.py puts the built programs in ptexport/synth/programs).
SAMPLE_DIR = Path(__file__).resolve().parent.parent.parent / "sample_data" / "src"


PROGRAM_DIRS = (SAMPLE_DIR, Path(__file__).resolve().parent / "programs")


def tsc_to_ns(tsc):
    """perf's tsc_to_perf_time for the TIME_CONV this generator writes (exact for even TSC)."""
    return TIME_ZERO + (np.asarray(tsc, dtype=np.uint64) >> np.uint64(1)).astype(np.int64) \
        if isinstance(tsc, np.ndarray) else TIME_ZERO + tsc // 2


@dataclass
class SynthOptions:
    """Everything that selects a variant (the CLI options map 1:1 onto these)."""

    program: str = "loops"
    branches: int = 20_000
    retcomp: bool = True
    tnt: str = "long"                # short | long
    ip_mode: str = "auto"            # auto | full | sext48 | upd48 | mixed
    timing: str = "mtc"              # tsc | mtc | cyc
    mtc_period: int = 3
    cyc_thresh: int = 0              # CYC threshold (cyc_thresh=): a CYC only after >= 2^(N-1) cycles
    cbr: int = 0                     # 0: none; else emit CBR packets with this core:bus ratio
    cpus: int = 1
    per_thread: bool = False
    workload: bool = False           # CPU queues' AUXTRACE buffers carry the workload's pid (perf record -- PROG)
    psb_period: int = 4096           # bytes of trace between PSBs
    seed: int = 1
    migrate: bool = True             # threads move between CPUs now and then
    elf_path: str = ""               # MMAP2 directory for the ELFs ("" = the output dir, absolute)
    ovf: int = 0                     # overflows (OVF packets) per CPU stream
    corrupt: int = 0                 # corrupted bytes per CPU stream
    truncate: int = 0                # truncated AUX areas per CPU stream
    pipe: bool = False               # pipe-mode perf.data (perf record -o -)
    kcore: bool = False              # perf record --kcore directory form: OUT/data + kcore_dir
    ptwrite: str = "off"             # off | fup | nofup: PTW packets (with FUP or not)
    power: bool = False              # power events (pwr_evt): MWAIT, PWRE, EXSTOP, PWRX
    preempt: int = 0                 # timer interrupts every N instructions (0: none)
    event_trace: bool = False        # Event Trace (event_trace=1): CFE/EVD at interrupts, IF in MODE.Exec
    replay: str = "auto"             # on | off | auto (above REPLAY_ABOVE branches)
    insn_truth_limit: int = 3_000_000  # write truth_insns.npz when there are at most this many

    def validate(self) -> None:
        if self.tnt not in ("short", "long"):
            raise UsageError(f"--tnt must be short or long, not {self.tnt!r}")
        if self.ip_mode not in ("auto", "full", "sext48", "upd48", "mixed"):
            raise UsageError(f"--ip-compression {self.ip_mode!r} is not one of "
                             "auto, full, sext48, upd48, mixed")
        if self.timing not in ("tsc", "mtc", "cyc"):
            raise UsageError(f"--timing must be tsc, mtc or cyc, not {self.timing!r}")
        if not 0 <= self.mtc_period <= 15:
            raise UsageError("--mtc-period must be 0..15")
        if not 0 <= self.cyc_thresh <= 15:
            raise UsageError("--cyc-thresh must be 0..15")
        if self.cyc_thresh and self.timing != "cyc":
            raise UsageError("--cyc-thresh needs --timing cyc")
        if self.branches < 1:
            raise UsageError("--branches must be at least 1")
        if not 1 <= self.cpus <= 64:
            raise UsageError("--cpus must be 1..64")
        if self.psb_period < 256:
            raise UsageError("--psb-period must be at least 256 bytes")
        if self.cbr and not 1 <= self.cbr <= 255:
            raise UsageError("--cbr must be 1..255")
        if self.ptwrite not in ("off", "fup", "nofup"):
            raise UsageError("--ptwrite must be off, fup or nofup")
        if self.preempt and self.preempt < 50:
            raise UsageError("--preempt must be at least 50 instructions")
        if self.replay not in ("on", "off", "auto"):
            raise UsageError("--replay must be on, off or auto")
        if self.event_trace and not self.preempt:
            raise UsageError("--event-trace needs --preempt N (its events are the interrupts)")
        if self.event_trace and self.replay == "on":
            raise UsageError("--event-trace cannot be replayed: use --replay off")
        for name in ("ovf", "corrupt", "truncate"):
            if not 0 <= getattr(self, name) <= 1000:
                raise UsageError(f"--{name} must be 0..1000")


def find_program(name: str) -> Path:
    p = Path(name)
    if p.exists():
        return p
    for d in PROGRAM_DIRS:
        if (d / name).exists():
            return d / name
    known = sorted({q.name for d in PROGRAM_DIRS if d.is_dir() for q in d.iterdir()
                    if q.is_file() and os.access(q, os.X_OK)})
    raise UsageError(f"no program {name!r}: give a path to a static x86-64 ELF or one of "
                     f"{', '.join(known) or '(none found)'}")


@dataclass
class SynthResult:
    out_dir: Path
    perf_data: Path
    branches: int
    pt_bytes: int
    meta: dict = field(default_factory=dict)


def ticks_per_insn_for(opts: SynthOptions) -> int:
    """One instruction = one core cycle; the core runs at cbr/max_non_turbo of the TSC rate."""
    ratio = opts.cbr or MAX_NONTURBO_RATIO
    return max(1, round(2 * MAX_NONTURBO_RATIO / ratio))
