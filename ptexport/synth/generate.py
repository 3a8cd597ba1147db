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
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ptexport.errors import SynthError, UsageError
from ptexport.synth.blocks import (END_CALL, END_CALL_IND, END_JCC, END_JMP, END_JMP_IND,
                                   END_RET, END_SYSCALL, BlockCache)
from ptexport.synth.emulate import SYS_PREEMPTED, Program, Slice, run_program
from ptexport.synth.ptencode import PacketWriter

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


# -- scheduling --------------------------------------------------------------------------------

@dataclass
class Placed:
    """A slice placed on a CPU at a time."""

    sl: Slice
    cpu: int
    start: int          # TSC at its first instruction
    end: int = 0        # TSC at its system call


def schedule(slices: list[Slice], ninsns: list[int], ncpus: int, ticks_per_insn: int,
             migrate: bool) -> list[Placed]:
    cpu_free = [TSC_BASE + 10_000] * ncpus
    ready: dict[int, int] = {}
    home: dict[int, int] = {}
    count: dict[int, int] = {}
    placed = []
    for sl, n in zip(slices, ninsns):
        tid = sl.tid
        if tid not in home:
            home[tid] = len(home) % ncpus
            count[tid] = 0
        count[tid] += 1
        cpu = home[tid]
        if migrate and ncpus > 1 and count[tid] % 7 == 0:
            cpu = home[tid] = (cpu + 1) % ncpus
        start = max(cpu_free[cpu], ready.get(tid, 0))
        start += start & 1
        p = Placed(sl, cpu, start)
        p.end = start + n * ticks_per_insn
        cpu_free[cpu] = p.end + SYSCALL_TICKS
        ready[tid] = p.end + SYSCALL_TICKS
        if sl.new_tid is not None:
            ready[sl.new_tid] = p.end + SYSCALL_TICKS
        placed.append(p)
    return placed


# -- encoding ----------------------------------------------------------------------------------

class GroundTruth:
    def __init__(self) -> None:
        self.time: list[int] = []
        self.cpu: list[int] = []
        self.tid: list[int] = []
        self.from_ip: list[int] = []
        self.to_ip: list[int] = []
        self.kind: list[int] = []
        self.exec_time: list[int] = []

    def add(self, t: int, cpu: int, tid: int, frm: int, to: int, kind: int,
            exec_t: int | None = None) -> None:
        self.time.append(t)
        self.exec_time.append(t if exec_t is None else exec_t)
        self.cpu.append(cpu)
        self.tid.append(tid)
        self.from_ip.append(frm)
        self.to_ip.append(to)
        self.kind.append(kind)

    def __len__(self) -> int:
        return len(self.kind)

    def truncate(self, n: int) -> None:
        for col in (self.time, self.cpu, self.tid, self.from_ip, self.to_ip, self.kind,
                    self.exec_time):
            del col[n:]

    def arrays(self) -> dict[str, np.ndarray]:
        tsc = np.array(self.time, dtype=np.uint64)
        return {
            "time": tsc_to_ns(tsc),
            "tsc": tsc,
            "exec_time": tsc_to_ns(np.array(self.exec_time, dtype=np.uint64)),
            "cpu": np.array(self.cpu, dtype=np.int32),
            "tid": np.array(self.tid, dtype=np.int32),
            "from_ip": np.array(self.from_ip, dtype=np.uint64),
            "to_ip": np.array(self.to_ip, dtype=np.uint64),
            "kind": np.array(self.kind, dtype=np.uint8),
        }


class CpuEncoder:
    """Encodes the slices one CPU ran, in time order, into one PT stream."""

    def __init__(self, cpu: int, opts: SynthOptions, caches: dict, truth: GroundTruth,
                 ticks_per_insn: int, *, tid: int = -1) -> None:
        self.cpu = cpu          # the CPU of the stream (-1: a per-thread stream)
        self.tid = tid          # the thread of a per-thread stream
        self.opts = opts
        self.caches = caches
        self.truth = truth
        self.tpi = ticks_per_insn
        self.w = PacketWriter(ip_mode=opts.ip_mode, tnt_mode=opts.tnt,
                              seed=opts.seed + cpu + 7 * tid)
        self.stack: list[int] = []
        self.last_psb = -(1 << 40)
        self.mtc_ticks = (TSC_CTC_N // TSC_CTC_D) << opts.mtc_period
        self.next_mtc = 0
        self.cyc_last = 0
        self.psb_offsets: list[int] = []
        self.psb_marks: list[tuple[int, int]] = []   # (offset, tsc) of each PSB
        self.psb_ends: list[int] = []                # offset after each PSBEND
        self.psb_truth: list[int] = []               # ground-truth rows before each PSB
        self.end_time = 0
        # overflows: after these PSBs (1-based numbers) the trace loses some packets
        self.ovf_at = {2 + 2 * k for k in range(opts.ovf)}
        self.ovf_arm: int | None = None
        self.errors: list[dict] = []
        self.f_tsc: list[int] = []       # offsets of timing payloads (for replay patching)
        self.f_tma: list[int] = []
        self.f_mtc: list[int] = []
        self.events: list[tuple] = []    # (tsc, cpu, tid, ip, EV_*, payload)
        self.force_psb = False           # every slice starts behind a fresh PSB+ (replay)
        # (offset after, truth rows after, target, tsc) of each TIP of an indirect branch
        self.tip_marks: list[tuple[int, int, int, int]] = []
        self.psb_fup: list[int | None] = []          # the FUP IP in each PSB+ (None: none)
        self.truncated_at: list[int] = []            # AUX chunks that end truncated here
        self.n_intr = 0                              # interrupts encoded (event trace)

    # timing helpers
    def _ctc(self, t: int) -> tuple[int, int]:
        ticks = TSC_CTC_N // TSC_CTC_D
        return t // ticks, t % ticks

    def _tsc_tma(self, t: int) -> None:
        w = self.w
        self.f_tsc.append(w.tsc(t))
        if self.opts.timing in ("mtc", "cyc"):
            ctc, fc = self._ctc(t)
            self.f_tma.append(w.tma(ctc, fc))
            self.next_mtc = (t // self.mtc_ticks + 1) * self.mtc_ticks
        self.cyc_last = t

    def _mtcs_upto(self, t: int, emit: bool = True) -> None:
        if self.opts.timing == "tsc":
            return
        while self.next_mtc <= t:
            ctc = self.next_mtc // (TSC_CTC_N // TSC_CTC_D)
            if emit:
                if self.opts.cyc_thresh:
                    # MTC is CYC-eligible: the cycles up to it, once over the threshold (only
                    # with --cyc-thresh, so the packets of threshold-0 traces stay as they were)
                    self._cyc(self.next_mtc)
                self.f_mtc.append(self.w.mtc(ctc >> self.opts.mtc_period))
            self.next_mtc += self.mtc_ticks

    def _cyc(self, t: int) -> None:
        if self.opts.timing == "cyc" and t > self.cyc_last:
            ratio = self.opts.cbr or MAX_NONTURBO_RATIO
            cycles = max(1, (t - self.cyc_last) * ratio // MAX_NONTURBO_RATIO // 2)
            # with a CYC threshold the hardware holds the count back until it reaches
            # 2^(thresh-1) cycles; the packet then carries all cycles since the last CYC
            if self.opts.cyc_thresh and cycles < 1 << (self.opts.cyc_thresh - 1):
                return
            self.w.cyc(cycles)
            self.cyc_last = t

    def psb_plus(self, t: int, ip: int | None) -> None:
        w = self.w
        self.psb_offsets.append(w.psb())
        self.last_psb = self.psb_offsets[-1]
        self.psb_marks.append((self.last_psb, t))
        self.psb_truth.append(len(self.truth))
        if len(self.psb_marks) in self.ovf_at:
            self.ovf_arm = 40
        self._tsc_tma(t)
        if self.opts.cbr or self.opts.power:
            w.cbr(self.opts.cbr or MAX_NONTURBO_RATIO)
        if ip is not None:
            w.mode_exec64(self.opts.event_trace)
            w.fup(ip)
        self.psb_fup.append(ip)
        w.psbend()
        self.psb_ends.append(len(w.buf))
        self.stack.clear()

    def _events(self, b, ptws, t: int, tid: int, dec_ip: int) -> tuple[int, int]:
        """PTWRITE and TPAUSE inside block ``b`` (which starts at ``t``): their packets,
        bound to a FUP with the instruction's IP.  ``dec_ip`` is where perf's decoder
        stands (a PTW without FUP is reported there).  Returns ``t`` advanced by the
        waits and the decoder's new position."""
        w = self.w
        opts = self.opts
        ev = self.events
        order = sorted([(b.insns.index(ip), "ptw", ip, val) for ip, val in ptws]
                       + [(k, "wait", ip, 0) for k, ip in b.waits])
        for k, kind, ip, val in order:
            tk = t + (k + 1) * self.tpi
            if kind == "ptw" and opts.ptwrite != "off":
                self._mtcs_upto(tk)
                self._cyc(tk)
                fup = opts.ptwrite == "fup"
                w.ptwrite(val, 8, ip=fup)
                if fup:
                    w.fup(ip)
                    dec_ip = ip
                ev.append((tk, self.cpu, tid, dec_ip, EV_PTWRITE, val))
            elif kind == "wait":
                if opts.power:
                    self._mtcs_upto(tk)
                    self._cyc(tk)
                    w.mwait(0x00, 0x1)            # TPAUSE C0.2
                    w.pwre(False, 0, 2)
                    w.exstop(True)
                    w.fup(ip)
                    dec_ip = ip
                    ev += [(tk, self.cpu, tid, ip, EV_MWAIT, 0x100),
                            (tk, self.cpu, tid, ip, EV_PWRE, 0x0002),
                            (tk, self.cpu, tid, ip, EV_EXSTOP, 0)]
                t += WAIT_TICKS
                if opts.power:
                    self._mtcs_upto(tk + WAIT_TICKS)
                    w.pwrx(0, 0, 2)                # woken by the TSC deadline
                    ev.append((tk + WAIT_TICKS, self.cpu, tid, ip, EV_PWRX, 0x002))
        return t, dec_ip

    def encode_slice(self, p: Placed) -> None:
        sl = p.sl
        w = self.w
        cache = self.caches[id(sl.program)]
        tid = sl.tid
        cpu = self.cpu
        truth = self.truth
        opts = self.opts
        retcomp = opts.retcomp
        stack = self.stack
        tpi = self.tpi
        t = p.start
        addrs = sl.addrs
        sizes = sl.sizes
        n = len(addrs)
        if (len(w.buf) - self.last_psb >= opts.psb_period or not self.psb_offsets
                or self.force_psb):
            self.psb_plus(t, None)
        else:
            self._mtcs_upto(t)
            self._tsc_tma(t)
        if opts.event_trace and getattr(sl, "after_intr", False):
            # back to user space from the interrupt handler: CFE.IRET (no IP: tracing is off
            # until the TIP.PGE), as the SDM and libipt's ptet-int-iret-cpl_3 test show it
            w.cfe(CFE_IRET)
            self.events.append((t, cpu, tid, 0, EV_EVT, CFE_IRET << 8))
        w.mode_exec64(opts.event_trace)
        w.tip_pge(addrs[0])
        truth.add(t, cpu, tid, 0, addrs[0], KIND_TR_STRT)
        # Direct branches make no packet: perf can only time them by the packet before
        # them, so their ground-truth "time" is that packet's (exec_time is their own).
        t_pkt = t
        last_pkt_row, last_pkt_ip = len(truth), addrs[0]
        lose_until = -1
        ovf_time = t
        ptw_at: dict[int, list] = {}
        for bi, ip, val in sl.ptwrites:
            ptw_at.setdefault(bi, []).append((ip, val))
        end_next = sl.end_ip if sl.sysno == SYS_PREEMPTED else None
        # hot loop: locals instead of attribute look-ups
        tadd = truth.add
        truth_kind = truth.kind
        blocks = cache._cache
        get_block = cache.get
        has_ptw = bool(ptw_at)
        mtc_on = opts.timing != "tsc"
        cyc_on = opts.timing == "cyc"
        ovf_any = bool(self.ovf_at)
        buf = w.buf
        psb_period = opts.psb_period
        for i in range(n):
            b = blocks.get((addrs[i], sizes[i])) or get_block(addrs[i], sizes[i])
            if (b.waits or (has_ptw and i in ptw_at)) and lose_until < i:
                t, last_pkt_ip = self._events(b, ptw_at.get(i, ()), t, tid, last_pkt_ip)
                t_pkt = t
                last_pkt_row = len(truth_kind)
            t += len(b.insns) * tpi
            end = b.end
            if i + 1 < n:
                nxt = addrs[i + 1]
            else:   # where execution goes on after an interrupt; nothing after a syscall
                nxt = end_next
            if ovf_any and self.ovf_arm is not None:
                self.ovf_arm -= 1
                if (self.ovf_arm <= 0 and end in (END_JCC, END_JMP_IND, END_CALL_IND, END_RET)
                        and i + OVF_LOST_BLOCKS + 2 < n):
                    # Internal buffer overflow: the packets of this branch and of the next
                    # blocks are lost; then OVF and a FUP where tracing goes on.
                    self.ovf_arm = None
                    lose_until = i + OVF_LOST_BLOCKS
                    # perf fetches the next packet (the OVF) right after the last one it
                    # used, so the direct branches since then are not reported either
                    truth.truncate(last_pkt_row)
                    ovf_time = t_pkt
            if lose_until >= i:
                if end == END_CALL or end == END_CALL_IND:
                    stack.append(b.fallthrough)
                elif end == END_RET and stack:
                    stack.pop()
                self._mtcs_upto(t, emit=False)
                if i == lose_until:
                    w.flush_tnt()
                    off = w.ovf_offset = len(w.buf)
                    w.ovf()
                    self._tsc_tma(t)     # timing resumes with the trace
                    w.last_ip = 0
                    w.fup(nxt)
                    stack.clear()
                    # perf reports the error where its decoder stood (after the last branch
                    # it could decode), then a trace begin at the FUP
                    self.errors.append({"kind": "overflow", "code": 7, "cpu": cpu, "tid": tid,
                                        "offset": off, "time": int(tsc_to_ns(ovf_time)),
                                        "ip": last_pkt_ip, "resume_ip": nxt})
                    truth.add(t, cpu, tid, 0, nxt, KIND_TR_STRT)
                    t_pkt = t
                    last_pkt_row, last_pkt_ip = len(truth), nxt
                continue
            if end == 0:
                pass
            elif end == END_JCC:
                taken = nxt != b.fallthrough
                if b.target == b.fallthrough:       # to the next instruction: as it ran
                    taken = sl.taken.get(i, False)
                if mtc_on and t >= self.next_mtc:
                    self._mtcs_upto(t)
                if cyc_on and w.tnt_pending == 0:
                    self._cyc(t)
                w.tnt(taken)
                if taken:
                    tadd(t, cpu, tid, b.last_ip, nxt, KIND_JCC)
            elif end == END_JMP:
                tadd(t_pkt, cpu, tid, b.last_ip, nxt, KIND_JMP, t)
            elif end == END_CALL:
                if not b.zero_len_call:
                    stack.append(b.fallthrough)
                    if len(stack) > 64:
                        del stack[0]
                tadd(t_pkt, cpu, tid, b.last_ip, nxt, KIND_CALL, t)
            elif end == END_JMP_IND or end == END_CALL_IND:
                self._mtcs_upto(t)
                self._cyc(t)
                w.tip(nxt)
                self.tip_marks.append((len(w.buf), len(truth) + 1, nxt, t))
                if end == END_CALL_IND:
                    stack.append(b.fallthrough)
                    if len(stack) > 64:
                        del stack[0]
                    truth.add(t, cpu, tid, b.last_ip, nxt, KIND_CALL)
                else:
                    truth.add(t, cpu, tid, b.last_ip, nxt, KIND_JMP)
            elif end == END_RET:
                if mtc_on and t >= self.next_mtc:
                    self._mtcs_upto(t)
                top = stack.pop() if stack else None
                if retcomp and top == nxt:
                    if cyc_on and w.tnt_pending == 0:
                        self._cyc(t)
                    w.tnt(True)
                else:
                    self._cyc(t)
                    w.tip(nxt)
                    self.tip_marks.append((len(w.buf), len(truth) + 1, nxt, t))
                tadd(t, cpu, tid, b.last_ip, nxt, KIND_RET)
            elif end == END_SYSCALL:
                if i + 1 != n:
                    raise SynthError(f"syscall in the middle of a slice at {b.last_ip:#x}")
            if end and end != END_JMP and end != END_CALL:
                t_pkt = t
                last_pkt_row, last_pkt_ip = len(truth_kind), nxt
            if nxt is not None and len(buf) - self.last_psb >= psb_period:
                self.psb_plus(t, nxt)
        self._mtcs_upto(t)
        self._cyc(t)
        if sl.sysno == SYS_PREEMPTED:
            # an interrupt: FUP with the IP of the next instruction, tracing stops
            if opts.event_trace:
                # CFE.INTR bound to the FUP; every third one a page fault with its CR2 (EVD)
                self.n_intr += 1
                vector = TIMER_VECTOR
                if self.n_intr % 3 == 0:
                    vector = PF_VECTOR
                    w.evd(EVD_CR2, 0x7F0000000000 + (self.n_intr << 12))
                w.cfe(CFE_INTR, vector, ip=True)
                self.events.append((t, cpu, tid, sl.end_ip, EV_EVT, (CFE_INTR << 8) | vector))
            w.fup(sl.end_ip)
            w.tip_pgd(None)
            kind = KIND_ASYNC
        else:
            # the slice ends at its syscall: tracing stops (user-only), IP suppressed
            w.tip_pgd(None)
            kind = KIND_SYSCALL
        self.stack.clear()
        self.end_time = t
        truth.add(t, cpu, tid, sl.end_ip, 0, kind)


# -- the whole generator -----------------------------------------------------------------------

@dataclass
class SynthResult:
    out_dir: Path
    perf_data: Path
    branches: int
    pt_bytes: int
    meta: dict = field(default_factory=dict)


def count_branches(emu, program: Program, caches: dict) -> int:
    """How many branches perf will report for ``emu`` (taken branches + trace begin/end)."""
    _tag_programs(emu, program)
    n = 0
    for sl in emu.slices:
        n += 2
        cache = caches.get(id(sl.program))
        if cache is None:
            cache = caches[id(sl.program)] = BlockCache(sl.program)
        addrs = sl.addrs
        for i in range(len(addrs) - 1):
            b = cache.get(addrs[i], sl.sizes[i])
            if b.end == END_JCC:
                n += (sl.taken.get(i, False) if b.target == b.fallthrough
                      else addrs[i + 1] != b.fallthrough)
            elif b.end:
                n += 1
    return n


def _iterations_for(program: Program, branches: int, extra: dict) -> int:
    """Pick the program's round count so the trace has about ``branches`` branches."""
    caches: dict = {}
    probe = dict(extra_programs=extra, max_insns=5_000_000)
    one = count_branches(run_program(program, iterations=1, **probe), program, caches)
    two = count_branches(run_program(program, iterations=2, **probe), program, caches)
    per_round = max(1, two - one)
    return max(1, -(-(branches - (one - per_round)) // per_round))


def synthesize(out_dir: str | Path, opts: SynthOptions) -> SynthResult:
    """Make ``out_dir/perf.data``, the program ELFs and the ground truth."""
    opts.validate()
    out_dir = Path(out_dir)
    prog_path = find_program(opts.program)
    program = Program.load(prog_path)
    extra = _extra_programs(program)
    replay = opts.replay == "on" or (opts.replay == "auto" and opts.branches > REPLAY_ABOVE
                                     and not opts.event_trace)
    if replay:
        from ptexport.synth.replay import synthesize_replay

        return synthesize_replay(out_dir, opts, program, extra)
    iterations = _iterations_for(program, opts.branches, extra)
    emu = run_program(program, iterations=iterations, extra_programs=extra,
                      preempt=opts.preempt, max_insns=max(60_000_000, 40 * opts.branches))
    elf_names = _copy_elfs(out_dir, opts, emu)
    caches = {id(p): BlockCache(p) for p in emu.programs}

    _tag_programs(emu, program)
    if opts.event_trace:
        _mark_after_interrupt(emu.slices)

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
        from ptexport.synth import faults

        for enc in reversed(encoders):   # later streams first: rows before them stay put
            if opts.corrupt:
                faults.corrupt(enc, truth, opts.corrupt)
            if opts.truncate:
                faults.truncate(enc, truth, opts.truncate)

    from ptexport.synth.sideband import write_perf_data
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


def slice_lengths(slices, caches: dict) -> list[int]:
    """Instructions executed in each slice."""
    counts: dict[int, dict] = {}
    out = []
    for sl in slices:
        nmap = counts.setdefault(id(sl.program), {})
        cache = caches[id(sl.program)]
        keys = list(zip(sl.addrs, sl.sizes))
        for k in set(keys) - nmap.keys():
            nmap[k] = len(cache.get(*k).insns)
        out.append(sum(map(nmap.__getitem__, keys)))
    return out


def _copy_elfs(out_dir: Path, opts: SynthOptions, emu) -> dict[int, str]:
    """Copy the programs next to perf.data; return the MMAP2 file name of each."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SynthError(f"cannot create {out_dir}: {e.strerror}") from e
    elf_dir = Path(opts.elf_path) if opts.elf_path else out_dir.resolve()
    elf_names: dict[int, str] = {}
    for prog in emu.programs:
        dst = out_dir / prog.name
        if not dst.exists() or dst.read_bytes() != prog.data:
            try:  # what was loaded (the emulator's lazy binder has no file of its own)
                dst.write_bytes(prog.data)
                dst.chmod(0o755)
            except OSError as e:
                raise SynthError(f"cannot write {dst}: {e.strerror}") from e
        elf_names[id(prog)] = str(elf_dir / prog.name)
    return elf_names


def perf_data_path(out_dir: Path, opts: SynthOptions) -> Path:
    """Where the recording goes: OUT/perf.data, or OUT/data with OUT/kcore_dir for --kcore."""
    if opts.kcore:
        from ptexport.synth.sideband import write_kcore_dir

        write_kcore_dir(out_dir / "kcore_dir")
        return out_dir / "data"
    return out_dir / "perf.data"


def ticks_per_insn_for(opts: SynthOptions) -> int:
    """One instruction = one core cycle; the core runs at cbr/max_non_turbo of the TSC rate."""
    ratio = opts.cbr or MAX_NONTURBO_RATIO
    return max(1, round(2 * MAX_NONTURBO_RATIO / ratio))


def instruction_truth(placed: list[Placed], caches: dict, per_thread: bool = False
                      ) -> dict[str, np.ndarray]:
    """Every executed instruction (ip, cpu, tid) in per-CPU (per-thread) time order:
    what ``--itrace=i1i`` shows."""
    arrs: dict[tuple[int, int, int], np.ndarray] = {}
    ips, cpus, tids = [], [], []
    key = (lambda p: (p.sl.tid, p.start)) if per_thread else (lambda p: (p.cpu, p.start))
    for p in sorted(placed, key=key):
        sl = p.sl
        cache = caches[id(sl.program)]
        parts = []
        for a, s in zip(sl.addrs, sl.sizes):
            key = (id(sl.program), a, s)
            arr = arrs.get(key)
            if arr is None:
                arr = arrs[key] = np.array(cache.get(a, s).insns, dtype=np.uint64)
            parts.append(arr)
        ip = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        ips.append(ip)
        cpus.append(np.full(len(ip), -1 if per_thread else p.cpu, np.int32))
        tids.append(np.full(len(ip), sl.tid, np.int32))
    return {"ip": np.concatenate(ips), "cpu": np.concatenate(cpus), "tid": np.concatenate(tids)}


def _extra_programs(program: Program) -> dict[str, Program]:
    """Programs an execve may name: the executables next to ``program``."""
    out = {}
    for q in program.path.parent.iterdir():
        if q.is_file() and os.access(q, os.X_OK) and q != program.path and not q.suffix:
            try:
                out[q.name] = Program.load(q)
            except SynthError:
                pass
    return out


def _mark_after_interrupt(slices) -> None:
    """Set ``slice.after_intr`` on slices that resume a thread its interrupt stopped (an IRET)."""
    last: dict[int, int] = {}
    for sl in slices:
        sl.after_intr = last.get(sl.tid) == SYS_PREEMPTED
        last[sl.tid] = sl.sysno


def _tag_programs(emu, program: Program) -> None:
    """Set ``slice.program``: the program each thread runs (execve switches it)."""
    cur: dict[int, Program] = {}
    for sl in emu.slices:
        prog = cur.get(sl.tid) or program
        sl.program = prog
        cur[sl.tid] = prog
        if sl.exec_program is not None:
            cur[sl.tid] = sl.exec_program
        if sl.new_tid is not None:
            cur[sl.new_tid] = prog

