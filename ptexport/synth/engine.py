"""The generator's engine: schedule emulated slices on CPUs, encode each CPU's PT stream, keep the truth.

:class:`CpuEncoder` encodes one CPU's (or, with ``--per-thread``, one thread's) slices as a PT stream and
records at the same time every branch perf will report (:class:`GroundTruth`). :func:`ptexport.synth.generate.synthesize`
drives it; :mod:`.replay` reuses it for very large traces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptexport.errors import SynthError
from ptexport.synth.blocks import (END_CALL, END_CALL_IND, END_JCC, END_JMP, END_JMP_IND,
                                   END_RET, END_SYSCALL, BlockCache)
from ptexport.synth.emulate import SYS_PREEMPTED, Program, Slice, run_program
from ptexport.synth.model import (
    CFE_INTR,
    CFE_IRET,
    EVD_CR2,
    EV_EVT,
    EV_EXSTOP,
    EV_MWAIT,
    EV_PTWRITE,
    EV_PWRE,
    EV_PWRX,
    KIND_ASYNC,
    KIND_CALL,
    KIND_JCC,
    KIND_JMP,
    KIND_RET,
    KIND_SYSCALL,
    KIND_TR_STRT,
    MAX_NONTURBO_RATIO,
    OVF_LOST_BLOCKS,
    PF_VECTOR,
    SYSCALL_TICKS,
    SynthOptions,
    TIMER_VECTOR,
    TSC_BASE,
    TSC_CTC_D,
    TSC_CTC_N,
    WAIT_TICKS,
    tsc_to_ns,
)
from ptexport.synth.ptencode import PacketWriter

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


def count_branches(emu, program: Program, caches: dict) -> int:
    """How many branches perf will report for ``emu`` (taken branches + trace begin/end)."""
    tag_programs(emu, program)
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


def iterations_for(program: Program, branches: int, extra: dict) -> int:
    """Pick the program's round count so the trace has about ``branches`` branches."""
    caches: dict = {}
    probe = dict(extra_programs=extra, max_insns=5_000_000)
    one = count_branches(run_program(program, iterations=1, **probe), program, caches)
    two = count_branches(run_program(program, iterations=2, **probe), program, caches)
    per_round = max(1, two - one)
    return max(1, -(-(branches - (one - per_round)) // per_round))


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


def copy_elfs(out_dir: Path, opts: SynthOptions, emu) -> dict[int, str]:
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


def extra_programs(program: Program) -> dict[str, Program]:
    """Programs an execve may name: the executables next to ``program``."""
    out = {}
    for q in program.path.parent.iterdir():
        if q.is_file() and os.access(q, os.X_OK) and q != program.path and not q.suffix:
            try:
                out[q.name] = Program.load(q)
            except SynthError:
                pass
    return out


def mark_after_interrupt(slices) -> None:
    """Set ``slice.after_intr`` on slices that resume a thread its interrupt stopped (an IRET)."""
    last: dict[int, int] = {}
    for sl in slices:
        sl.after_intr = last.get(sl.tid) == SYS_PREEMPTED
        last[sl.tid] = sl.sysno


def tag_programs(emu, program: Program) -> None:
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
