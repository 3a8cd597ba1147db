"""VM trace generator: a host ``perf kvm --guest --host record -e intel_pt//`` recording in
which the VCPU threads ``CPU n/KVM`` of a hypervisor process enter and leave a guest.

Layout of ``synthesize_vm(out, opts)``'s output directory:

- ``host.data/``: the host recording in ``perf record --kcore`` form (``data`` plus
  ``kcore_dir/`` with the host kernel code the VCPU threads run);
- ``guest.data/``: the guest's own sideband recording (``perf record --kcore -a -e dummy
  --switch-events --sample-identifier`` in the guest: COMM, MMAP2, SWITCH_CPU_WIDE on the
  guest CPU = VCPU, ID_INDEX, TIME_CONV) with the guest ``kcore_dir/``;
- ``gprog``: the guest user program (a static ELF; the guest MMAP2 names its absolute path);
- ``truth.npz`` / ``truth.json``: every branch perf reports, with host time, host CPU,
  machine pid (-1 host), VCPU (-1 host), pid and tid (guest ones for guest branches).

The PT stream follows the SDM: VM entry (``vmresume``) is followed by PIP(NR=1, guest
CR3), VMCS, MODE.Exec and a TIP to the guest IP; VM exit by FUP(guest IP), PIP(NR=0),
MODE.Exec and a TIP to the host's VM-exit address.  PSB+ in the guest holds PIP(NR=1) and
VMCS, and its TSC is the guest TSC = host TSC + that VMCS's TSC offset (VMX).  MTC/TMA
count the crystal clock, which VMX does not offset.
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ptexport.errors import SynthError, UsageError
from ptexport.perfdata.constants import (
    PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_GUEST_KERNEL, PERF_RECORD_MISC_SWITCH_OUT,
    PERF_RECORD_MISC_USER, AttrFlag,
    AttrType, Feature, RecordType, SampleType, SoftwareEvent,
)
from ptexport.synth import model as G
from ptexport.synth.perfwrite import (
    Attr, PerfDataWriter, attr_flags, aux_body, auxtrace_info_record, comm_body, feat_cmdline,
    feat_event_desc, feat_nrcpus, feat_pmu_mappings, feat_string, feat_u64, finished_round,
    itrace_start_body, mmap2_body, pad8, record, sample_id, switch_cpu_wide_body, time_conv_record,
)
from ptexport.synth.ptencode import PacketWriter
from ptexport.synth.sideband import CPUID, auxtrace_priv, pt_config
from ptexport.synth.vm_code import Code, guest_code, host_code, write_kcore_dir, write_static_elf

HOST_KBASE = 0xFFFFFFFFC0F80000      # host KVM module text (the VCPU threads' host code)
GUEST_KBASE = 0xFFFFFFFF81000000     # guest kernel text
GUEST_UBASE = 0x401000               # guest user program
HOST_CR3 = 0x10A000
MISC_KERNEL = 1

# ground-truth kinds
(K_TR_STRT, K_TR_END, K_JCC, K_JMP, K_CALL, K_RET, K_VMENTRY, K_VMEXIT, K_SYSCALL,
 K_SYSRET) = range(10)
KIND_NAMES = ("tr strt", "tr end", "jcc", "jmp", "call", "return", "vmentry", "vmexit",
              "syscall", "sysret")

TPI = 2                 # TSC ticks per instruction
MTC_TICKS_UNIT = G.TSC_CTC_N // G.TSC_CTC_D


@dataclass
class VmOptions:
    branches: int = 20_000
    vcpus: int = 2
    cpus: int = 2
    machine_pid: int = 4000
    guest: str = "mixed"             # kernel | user | mixed: what the guest runs
    tsc_offsets: tuple[int, ...] = ()  # per VCPU (default: one offset for all VCPUs)
    mtc_period: int = 3
    psb_period: int = 4096
    guest_insns: int = 300           # instructions per guest run (about)
    guest_tsc_every: int = 0         # TSC+TMA (guest TSC) after every Nth VM entry (0: never)
    aux_chunk: int = 64 * 1024       # largest AUXTRACE buffer (buffers end at a PSB)
    tsc_scale: float = 1.0           # VMX TSC scaling: guest TSC = (host * mult >> 48) + offset
    cyc: bool = False                # CYC packets (intel_pt/cyc/, as perf's VM examples record)
    runs_per_slot: int = 12          # VM runs per host scheduling slot
    seed: int = 1

    def validate(self) -> None:
        if self.guest not in ("kernel", "user", "mixed"):
            raise UsageError(f"--guest must be kernel, user or mixed, not {self.guest!r}")
        if not 1 <= self.vcpus <= 16:
            raise UsageError("--vcpus must be 1..16")
        if not 1 <= self.cpus <= 16:
            raise UsageError("--cpus must be 1..16")
        if self.branches < 100:
            raise UsageError("--branches must be at least 100")
        if not 0.125 <= self.tsc_scale <= 8:
            raise UsageError("--tsc-scale must be 0.125..8")
        if self.tsc_scale != 1.0 and self.guest_tsc_every:
            raise UsageError("guest TSC packets outside PSB+ need an unscaled TSC")
        if self.tsc_offsets and len(self.tsc_offsets) != self.vcpus:
            raise UsageError("give one TSC offset per VCPU")

    @property
    def tsc_multiplier(self) -> int:
        """The VMCS TSC multiplier (fixed point, 48 fraction bits)."""
        return round(self.tsc_scale * (1 << 48))

    def guest_tsc(self, host_tsc: int, offset: int) -> int:
        """VMX: guest TSC = ((host TSC * multiplier) >> 48) + TSC offset (mod 2^64)."""
        return (((host_tsc * self.tsc_multiplier) >> 48) + offset) & ((1 << 64) - 1)

    def offsets(self) -> list[int]:
        if self.tsc_offsets:
            return [o & ((1 << 64) - 1) for o in self.tsc_offsets]
        # the guest booted 1.5 G ticks before the recording: guest TSC = host TSC - (host
        # TSC at guest boot), a negative offset as KVM sets it (even, so perf time is exact)
        return [(-(G.TSC_BASE - 1_500_000_000)) & ((1 << 64) - 1)] * self.vcpus


# -- packets the shared PacketWriter lacks ------------------------------------------------------

def pip(w: PacketWriter, cr3: int, nr: bool) -> None:
    w.flush_tnt()
    w.buf += b"\x02\x43" + ((((cr3 >> 5) << 1) | int(nr)) & ((1 << 48) - 1)).to_bytes(6, "little")


def vmcs(w: PacketWriter, value: int) -> None:
    w.flush_tnt()
    w.buf += b"\x02\xc8" + (value & ((1 << 40) - 1)).to_bytes(5, "little")


# -- ground truth -------------------------------------------------------------------------------

class Truth:
    """Ground-truth rows, packed into numpy chunks as they come (a few bytes per branch)."""

    COLS = ("tsc", "cpu", "machine_pid", "vcpu", "pid", "tid", "from_ip", "to_ip", "kind")
    TYPES = (np.uint64, np.int32, np.int32, np.int32, np.int32, np.int32, np.uint64, np.uint64,
             np.uint8)
    CHUNK = 1 << 18

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.chunks: list[list[np.ndarray]] = []
        self.n = 0

    def add(self, *row) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.CHUNK:
            self._pack()

    def _pack(self) -> None:
        if self.rows:
            cols = list(zip(*self.rows))
            self.chunks.append([np.array(c, dtype=t) for c, t in zip(cols, self.TYPES)])
            self.n += len(self.rows)
            self.rows = []

    def __len__(self) -> int:
        return self.n + len(self.rows)

    def arrays(self) -> dict[str, np.ndarray]:
        self._pack()
        out = {k: (np.concatenate([ch[i] for ch in self.chunks]) if self.chunks
                   else np.zeros(0, dtype=t))
               for i, (k, t) in enumerate(zip(self.COLS, self.TYPES))}
        out["time"] = G.tsc_to_ns(out["tsc"])
        return out


# -- execution contexts -------------------------------------------------------------------------

@dataclass
class Ctx:
    """Where a thread's code stands: its IP and call stack (for return compression)."""

    code: Code
    ip: int
    stack: list[int] = field(default_factory=list)
    known_from: int = 0      # stack entries below this depth are unknown to the decoder
    also: tuple[Code, ...] = ()   # more code in the same address space (the guest kernel)
    sysret_ip: int = 0       # where sysretq returns (the saved RCX)
    insns: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.insns = dict(self.code.insns)
        for c in self.also:
            self.insns.update(c.insns)


@dataclass
class GuestThread:
    pid: int
    tid: int
    comm: str
    ctx: Ctx
    cr3: int
    user: bool


@dataclass
class Vcpu:
    index: int
    host_tid: int
    vmcs: int
    offset: int
    host: Ctx
    threads: list[GuestThread]
    cur: int = 0             # index into threads
    runs: int = 0


class VmEncoder:
    """One host CPU's PT stream."""

    def __init__(self, cpu: int, opts: VmOptions, truth: Truth, rng: random.Random,
                 pid: int) -> None:
        self.cpu = cpu
        self.opts = opts
        self.truth = truth
        self.rng = rng
        self.pid = pid
        self.w = PacketWriter(ip_mode="auto", tnt_mode="long", seed=opts.seed + cpu)
        self.last_psb = -(1 << 40)
        self.mtc_ticks = MTC_TICKS_UNIT << opts.mtc_period
        self.next_mtc = 0
        self.psb_marks: list[tuple[int, int]] = []
        self.end_time = 0
        # current context (for PSB+)
        self.vcpu: Vcpu | None = None
        self.in_guest = False
        self.guest_psbs = 0
        self.cyc_last = 0

    # timing
    def _tsc_tma(self, t: int) -> None:
        v = self.vcpu
        tsc = self.opts.guest_tsc(t, v.offset) if (self.in_guest and v is not None) else t
        self.w.tsc(tsc & ((1 << 64) - 1))
        self.w.tma(t // MTC_TICKS_UNIT, t % MTC_TICKS_UNIT)
        self.next_mtc = (t // self.mtc_ticks + 1) * self.mtc_ticks
        self.cyc_last = t

    def _timing(self, t: int, tnt: bool = False) -> None:
        """Timing packets due before a branch's packet: MTCs, and a CYC with the core
        cycles since the last one (CBR = the max non-turbo ratio: 1 cycle = 1 TSC tick)."""
        self._mtcs_upto(t)
        if self.opts.cyc and t > self.cyc_last and not (tnt and self.w.tnt_pending):
            self.w.cyc(t - self.cyc_last)
            self.cyc_last = t

    def _mtcs_upto(self, t: int) -> None:
        while self.next_mtc <= t:
            self.w.mtc((self.next_mtc // MTC_TICKS_UNIT) >> self.opts.mtc_period)
            self.next_mtc += self.mtc_ticks

    def psb_plus(self, t: int, ip: int | None) -> None:
        w = self.w
        self.last_psb = w.psb()
        self.psb_marks.append((self.last_psb, t))
        self._tsc_tma(t)
        if self.opts.cyc:
            w.cbr(G.MAX_NONTURBO_RATIO)
        v = self.vcpu
        if self.in_guest:
            self.guest_psbs += 1
            g = v.threads[v.cur]
            pip(w, g.cr3, True)
            vmcs(w, v.vmcs)
        else:
            pip(w, HOST_CR3, False)
        if ip is not None:
            w.mode_exec64()
            w.fup(ip)
        w.psbend()
        if v is not None:
            _reset_known(v.host, *(g.ctx for g in v.threads))

    def _maybe_psb(self, t: int, ip: int) -> None:
        # With TSC scaling, perf cannot translate guest TSC packets (its VM time correlation
        # needs an unscaled TSC), so PSB+ are placed in host code only.
        if self.in_guest and self.opts.tsc_scale != 1.0:
            return
        if len(self.w.buf) - self.last_psb >= self.opts.psb_period:
            self.psb_plus(t, ip)

    # walking
    def walk(self, ctx: Ctx, t: int, budget: int | None, who: tuple) -> tuple[int, int]:
        """Execute from ``ctx.ip`` until ``budget`` instructions ran, or (``budget`` None)
        up to a ``vmresume``, which is left for the caller.  Packets go to the stream and
        every branch perf will report to the ground truth, as ``who`` (machine pid, VCPU,
        pid, tid).  Returns (time, instructions run)."""
        w = self.w
        rng = self.rng
        insns = ctx.insns
        stack = ctx.stack
        n = 0
        cpu = self.cpu
        add = self.truth.add
        while budget is None or n < budget:
            ins = insns.get(ctx.ip)
            if ins is None:
                raise SynthError(f"vm generator walked off its code at {ctx.ip:#x}")
            kind = ins.kind
            if kind == "vmresume":
                return t, n
            t += TPI
            n += 1
            ip = ins.ip
            nxt = ip + ins.size
            if kind == "nop":
                ctx.ip = nxt
                continue
            if kind == "jz":
                taken = rng.random() < 0.35
                self._timing(t, tnt=True)
                w.tnt(taken)
                if taken:
                    nxt = ins.target
                    add(t, cpu, *who, ip, nxt, K_JCC)
            elif kind == "jmp":
                nxt = ins.target
                add(t, cpu, *who, ip, nxt, K_JMP)
            elif kind == "call":
                stack.append(ip + ins.size)
                nxt = ins.target
                add(t, cpu, *who, ip, nxt, K_CALL)
            elif kind == "icall":
                stack.append(ip + ins.size)
                nxt = rng.choice(ins.targets)
                self._timing(t)
                w.tip(nxt)
                add(t, cpu, *who, ip, nxt, K_CALL)
            elif kind == "syscall":
                ctx.sysret_ip = nxt
                nxt = ins.target
                self._timing(t)
                w.tip(nxt)
                add(t, cpu, *who, ip, nxt, K_SYSCALL)
            elif kind == "sysret":
                nxt = ctx.sysret_ip
                self._timing(t)
                w.tip(nxt)
                add(t, cpu, *who, ip, nxt, K_SYSRET)
            elif kind == "ret":
                if not stack:
                    raise SynthError(f"vm generator: ret with an empty stack at {ip:#x}")
                nxt = stack.pop()
                self._timing(t, tnt=len(stack) >= ctx.known_from)
                if len(stack) >= ctx.known_from:
                    w.tnt(True)          # return compression: the decoder saw the call
                else:
                    w.tip(nxt)
                    ctx.known_from = len(stack)
                add(t, cpu, *who, ip, nxt, K_RET)
            ctx.ip = nxt
            self._maybe_psb(t, nxt)
        return t, n

def _reset_known(*ctxs: Ctx) -> None:
    """After a PSB+ or a VM transition the decoder's return stack is not relied on."""
    for c in ctxs:
        c.known_from = len(c.stack)



def synthesize_vm(out_dir: str | Path, opts: VmOptions) -> dict:
    """Write the host and guest recordings and the ground truth; returns the metadata."""
    opts.validate()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SynthError(f"cannot create {out}: {e.strerror}") from e
    rng = random.Random(opts.seed)
    hcode = host_code(HOST_KBASE)
    gk = guest_code(GUEST_KBASE, "gk", kernel=True)
    gu = guest_code(GUEST_UBASE, "gu", syscall_entry=gk.labels["gk_syscall_entry"])
    host_dir, guest_dir = out / "host.data", out / "guest.data"
    write_kcore_dir(host_dir / "kcore_dir", hcode)
    write_kcore_dir(guest_dir / "kcore_dir", gk)
    write_static_elf(out / "gprog", gu)
    gprog_path = str((out / "gprog").resolve())

    P = opts.machine_pid
    offsets = opts.offsets()
    vcpus: list[Vcpu] = []
    for v in range(opts.vcpus):
        threads = []
        if opts.guest in ("kernel", "mixed"):
            threads.append(GuestThread(50 + v, 50 + v, f"kworker/{v}", Ctx(gk, gk.labels["gk_main"]),
                                       0x2000 + 0x1000 * v, False))
        if opts.guest in ("user", "mixed"):
            threads.append(GuestThread(700, 700 + v, "gprog",
                                       Ctx(gu, gu.labels["gu_main"], also=(gk,)),
                                       0x80000 + 0x1000 * v, True))
        vcpus.append(Vcpu(v, P + 1 + v, 0x1BFF6A + 0x1C9E * v, offsets[v],
                          Ctx(hcode, hcode.labels["vcpu_run"]), threads))

    truth = Truth()
    sideband: list = []     # host: (tsc, kind, args...)
    gsideband: list = []    # guest: (host tsc, kind, args...)
    encoders = [VmEncoder(c, opts, truth, rng, P) for c in range(opts.cpus)]
    cpu_free = [G.TSC_BASE + 10_000 + 1000 * c for c in range(opts.cpus)]
    on_cpu: list[int | None] = [None] * opts.cpus
    vcpu_free = [0] * opts.vcpus
    slot = 0
    while len(truth) < opts.branches:
        # the next slot: the CPU that is free first runs the VCPU that waited longest
        c = min(range(opts.cpus), key=lambda k: cpu_free[k])
        v = min(range(opts.vcpus), key=lambda k: (vcpu_free[k], k))
        vc = vcpus[v]
        enc = encoders[c]
        t = max(cpu_free[c], vcpu_free[v]) + 400
        t += t & 1
        if on_cpu[c] != v:
            prev = on_cpu[c]
            prev_tid = vcpus[prev].host_tid if prev is not None else 0
            sideband.append((t - 200, "switch_out", c, prev_tid, P if prev is not None else 0,
                             vc.host_tid, P))
            sideband.append((t - 100, "switch_in", c, vc.host_tid, P, prev_tid,
                             P if prev is not None else 0))
            on_cpu[c] = v
        t = run_slot(enc, vc, t, opts, rng, gsideband, slot)
        cpu_free[c] = t
        vcpu_free[v] = t + 300
        slot += 1
    for enc in encoders:
        enc.w.flush_tnt()

    write_host(host_dir / "data", opts, encoders, vcpus, sideband, hcode)
    write_guest(guest_dir / "data", opts, vcpus, gsideband, gprog_path, gu, gk)

    arrays = truth.arrays()
    order = np.lexsort((np.arange(len(arrays["tsc"])), arrays["tsc"]))
    arrays = {k: a[order] for k, a in arrays.items()}
    np.savez_compressed(out / "truth.npz", **arrays)
    meta = {
        "options": asdict(opts),
        "machine_pid": P,
        "branches": len(truth),
        "kinds": list(KIND_NAMES),
        "pt_bytes": sum(len(e.w.buf) for e in encoders),
        "guest_psbs": sum(e.guest_psbs for e in encoders),
        "vcpus": [{"vcpu": vc.index, "host_tid": vc.host_tid, "vmcs": vc.vmcs,
                   "tsc_offset": vc.offset,
                   "threads": [{"pid": g.pid, "tid": g.tid, "comm": g.comm, "user": g.user}
                               for g in vc.threads]} for vc in vcpus],
        "host": str(host_dir), "guest": str(guest_dir), "gprog": gprog_path,
        "host_kallsyms": str(host_dir / "kcore_dir" / "kallsyms"),
        "guest_kallsyms": str(guest_dir / "kcore_dir" / "kallsyms"),
        "time_conv": {"shift": G.TIME_SHIFT, "mult": G.TIME_MULT, "zero": G.TIME_ZERO},
        "tsc_scale": opts.tsc_scale, "tsc_multiplier": opts.tsc_multiplier,
    }
    (out / "truth.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def run_slot(enc: VmEncoder, vc: Vcpu, t: int, opts: VmOptions, rng: random.Random,
             gsideband: list, slot: int) -> int:
    """One scheduling slot of VCPU ``vc`` on ``enc``'s CPU: tracing starts (TIP.PGE) in the
    host run loop, ``runs_per_slot`` VM runs, and stops (TIP.PGD) at the exit handler's
    indirect call."""
    w = enc.w
    P = enc.pid
    cpu = enc.cpu
    add = enc.truth.add
    enc.vcpu = vc
    enc.in_guest = False
    host_who = (-1, -1, P, vc.host_tid)
    # The guest scheduler runs while the VCPU is out of the trace: its switches come
    # before this slot's PSB+, whose TSC moves perf's clock past them (a switch between
    # two MTCs of a running VCPU would land on either side of perf's coarse timestamps).
    if vc.runs == 0:
        g = vc.threads[0]
        gsideband.append((t - 50, "switch_in", vc.index, g.pid, g.tid, 0, 0))
    elif len(vc.threads) > 1 and slot % 2 == 0:
        old = vc.threads[vc.cur]
        vc.cur = (vc.cur + 1) % len(vc.threads)
        new = vc.threads[vc.cur]
        gsideband.append((t - 60, "switch_out", vc.index, old.pid, old.tid, new.pid, new.tid))
        gsideband.append((t - 50, "switch_in", vc.index, new.pid, new.tid, old.pid, old.tid))
    if len(w.buf) - enc.last_psb >= opts.psb_period or not enc.psb_marks:
        enc.psb_plus(t, None)
    else:
        enc._timing(t)
        enc._tsc_tma(t)
    _reset_known(vc.host)
    w.mode_exec64()
    w.tip_pge(vc.host.ip)
    add(t, cpu, *host_who, 0, vc.host.ip, K_TR_STRT)
    for _run in range(opts.runs_per_slot):
        t, _ = enc.walk(vc.host, t, None, host_who)
        # VM entry
        t += TPI
        g = vc.threads[vc.cur]
        gwho = (P, vc.index, g.pid, g.tid)
        enc._timing(t)
        pip(w, g.cr3, True)
        vmcs(w, vc.vmcs)
        w.mode_exec64()
        w.tip(g.ctx.ip)
        enc.in_guest = True
        if opts.guest_tsc_every and vc.runs % opts.guest_tsc_every == opts.guest_tsc_every - 1:
            enc._tsc_tma(t)      # a guest TSC outside PSB+ (perf: PIP NR=1 while tracing)
        add(t, cpu, *host_who, vc.host.ip, 0, K_VMENTRY)
        add(t, cpu, *gwho, 0, g.ctx.ip, K_VMENTRY)
        vc.host.ip = vc.host.code.labels["vmx_vmexit"]
        enc.in_guest = True
        _reset_known(g.ctx)
        budget = max(5, int(opts.guest_insns * (0.5 + rng.random())))
        t, _ = enc.walk(g.ctx, t, budget, gwho)
        # VM exit
        t += TPI
        enc._timing(t)
        w.fup(g.ctx.ip)
        pip(w, HOST_CR3, False)
        w.mode_exec64()
        w.tip(vc.host.ip)
        add(t, cpu, *gwho, g.ctx.ip, 0, K_VMEXIT)
        add(t, cpu, *host_who, 0, vc.host.ip, K_VMEXIT)
        enc.in_guest = False
        _reset_known(vc.host)
        vc.runs += 1
        t += 20    # the exit handler runs a little after the TIP (truth times stay exact)
    # run the host until the exit handler's indirect call, where tracing stops
    ctx = vc.host
    while True:
        ins = ctx.insns[ctx.ip]
        if ins.kind == "icall":
            t += TPI
            tgt = rng.choice(ins.targets)
            enc._timing(t)
            w.tip_pgd(tgt)
            add(t, cpu, *host_who, ins.ip, tgt, K_TR_END)
            ctx.stack.append(ins.ip + ins.size)
            ctx.ip = tgt
            break
        if ins.kind == "vmresume":
            raise SynthError("vm generator: no indirect call before the next VM entry")
        t, _ = enc.walk(ctx, t, 1, host_who)
    enc.end_time = t
    return t


# -- perf.data writing -------------------------------------------------------------------------

ST = (SampleType.IP | SampleType.TID | SampleType.TIME | SampleType.CPU | SampleType.IDENTIFIER)


def _events(records: list, writer: PerfDataWriter) -> None:
    records.sort(key=lambda x: (x[0], x[1]))
    n = 0
    for _ns, _k, data in records:
        if isinstance(data, tuple):
            chunk, off, ref, idx, cpu = data
            writer.write_auxtrace(chunk, offset=off, reference=ref, idx=idx, tid=-1, cpu=cpu)
        else:
            writer.write(data)
        n += 1
        if n % 200 == 0:
            writer.write(finished_round())
    writer.write(finished_round())


def _common_features(ncpus: int, cmdline: list[str], attrs: list[Attr]) -> dict:
    return {
        Feature.HOSTNAME: feat_string("ptexport-synth-vm"),
        Feature.OSRELEASE: feat_string("6.1.0-synth"),
        Feature.VERSION: feat_string("6.1.187"),
        Feature.ARCH: feat_string("x86_64"),
        Feature.NRCPUS: feat_nrcpus(ncpus),
        Feature.CPUDESC: feat_string("Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz"),
        Feature.CPUID: feat_string(CPUID),
        Feature.TOTAL_MEM: feat_u64(16 * 1024 * 1024),
        Feature.CMDLINE: feat_cmdline(cmdline),
        Feature.EVENT_DESC: feat_event_desc(attrs),
        Feature.PMU_MAPPINGS: feat_pmu_mappings([(4, "cpu"), (1, "software"),
                                                 (2, "tracepoint"), (G.PMU_TYPE, "intel_pt")]),
    }


def _open(path: Path):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "wb")
    except OSError as e:
        raise SynthError(f"cannot write {path}: {e.strerror}") from e


def write_host(path: Path, opts: VmOptions, encoders: list[VmEncoder], vcpus: list[Vcpu],
               sideband: list, hcode: Code) -> None:
    ncpu = opts.cpus
    popts = G.SynthOptions(timing="cyc" if opts.cyc else "mtc", mtc_period=opts.mtc_period,
                           psb_period=opts.psb_period, cpus=ncpu)
    pt = Attr(type=G.PMU_TYPE, config=pt_config(popts), sample_type=ST,
              flags=attr_flags(AttrFlag.DISABLED, AttrFlag.INHERIT, AttrFlag.SAMPLE_ID_ALL),
              name="intel_pt//", ids=[100 + c for c in range(ncpu)], aux_watermark=0x100000)
    dummy = Attr(type=AttrType.SOFTWARE, config=SoftwareEvent.DUMMY, sample_type=ST,
                 flags=attr_flags(AttrFlag.DISABLED, AttrFlag.INHERIT, AttrFlag.MMAP,
                                  AttrFlag.COMM, AttrFlag.TASK, AttrFlag.SAMPLE_ID_ALL,
                                  AttrFlag.MMAP2, AttrFlag.COMM_EXEC, AttrFlag.CONTEXT_SWITCH),
                 name="dummy:u", ids=[200 + c for c in range(ncpu)])
    P = opts.machine_pid
    recs: list = []
    seq = [0]

    def add(tsc, rtype, misc, body, pid, tid, cpu, ev=dummy):
        ns = G.tsc_to_ns(tsc)
        data = record(rtype, misc, body + sample_id(ST, pid, tid, ns, cpu, ev.ids[cpu]))
        recs.append((ns, seq[0], data))
        seq[0] += 1

    # synthesized at the start (time 0 as perf record writes them): kernel map, threads
    kmap = mmap2_body(-1 & 0xFFFFFFFF, 0, hcode.base, 0x100000, hcode.base,
                      "[kernel.kallsyms]_text", prot=5, flags=2, maj=0, minor=0)
    init = [record(RecordType.MMAP2, MISC_KERNEL, kmap + sample_id(ST, -1, 0, 0, 0, dummy.ids[0]))]
    if opts.guest == "kernel":
        # perf kvm --guest --host record: the default guest's kernel map (decoded with
        # perf script --guestkallsyms); a guest with user space is recorded with plain
        # perf record on the host and gets its maps from perf inject --guest-data
        gmap = struct.pack("<IIQQQ", 0, 0, GUEST_KBASE, 0x100000, GUEST_KBASE) + \
            pad8(b"[guest.kernel.kallsyms]_text")
        init.append(record(RecordType.MMAP, PERF_RECORD_MISC_GUEST_KERNEL,
                           gmap + sample_id(ST, 0, 0, 0, 0, dummy.ids[0])))
    init.append(record(RecordType.COMM, 0, comm_body(P, P, "qemu-system-x86")
                       + sample_id(ST, P, P, 0, 0, dummy.ids[0])))
    for vc in vcpus:
        init.append(record(RecordType.COMM, 0, comm_body(P, vc.host_tid, f"CPU {vc.index}/KVM")
                           + sample_id(ST, P, vc.host_tid, 0, 0, dummy.ids[0])))
    started: set = set()
    for tsc, kind, c, tid, pid, otid, opid in sideband:
        if kind == "switch_out":
            add(tsc, RecordType.SWITCH_CPU_WIDE, PERF_RECORD_MISC_SWITCH_OUT,
                switch_cpu_wide_body(opid, otid), pid, tid, c)
        else:
            add(tsc, RecordType.SWITCH_CPU_WIDE, 0, switch_cpu_wide_body(opid, otid), pid, tid, c)
            if (c, tid) not in started:
                started.add((c, tid))
                add(tsc + 10, RecordType.ITRACE_START, 0, itrace_start_body(pid, tid), pid, tid,
                    c, pt)
    for enc in encoders:
        buf = enc.w.buf
        bounds = dict(enc.psb_marks)
        bounds[len(buf)] = enc.end_time + 200
        cuts = sorted(bounds)
        start, k = 0, 0
        while start < len(buf):
            k += 1
            while k + 1 < len(cuts) and cuts[k + 1] - start <= opts.aux_chunk:
                k += 1
            end = cuts[k]
            chunk = bytes(buf[start:end])
            ns0 = G.tsc_to_ns(bounds[start])
            recs.append((ns0, seq[0], (chunk, start, bounds[end] + 100, enc.cpu, enc.cpu)))
            seq[0] += 1
            add(bounds[end], RecordType.AUX, 0, aux_body(start, len(chunk), 0), -1, -1,
                enc.cpu, pt)
            start = end
    cmd = (["/usr/bin/perf", "kvm", "--guest", "--host", "record"] if opts.guest == "kernel"
           else ["/usr/bin/perf", "record"])
    feats = _common_features(ncpu, cmd + ["--kcore", "-a", "-e", "intel_pt//"], [pt, dummy])
    with _open(path) as f:
        w = PerfDataWriter(f, [pt, dummy])
        w.write(auxtrace_info_record(auxtrace_priv(popts, pt)))
        w.write(time_conv_record(G.TIME_SHIFT, G.TIME_MULT, G.TIME_ZERO))
        for r in init:
            w.write(r)
        w.write(record(RecordType.FINISHED_INIT, 0, b""))
        _events(recs, w)
        w.close(feats)


def write_guest(path: Path, opts: VmOptions, vcpus: list[Vcpu], gsideband: list,
                gprog_path: str, gu: Code, gk: Code) -> None:
    """The guest's sideband recording (guest time = guest TSC / 2 ns, guest TSC = host TSC
    + the VCPU's offset)."""
    n = opts.vcpus
    dummy = Attr(type=AttrType.SOFTWARE, config=SoftwareEvent.DUMMY, sample_type=ST,
                 flags=attr_flags(AttrFlag.DISABLED, AttrFlag.INHERIT, AttrFlag.MMAP,
                                  AttrFlag.COMM, AttrFlag.TASK, AttrFlag.SAMPLE_ID_ALL,
                                  AttrFlag.MMAP2, AttrFlag.COMM_EXEC, AttrFlag.CONTEXT_SWITCH),
                 name="dummy:u", ids=[300 + v for v in range(n)])
    recs: list = []
    seq = [0]

    def gns(host_tsc: int, v: int) -> int:
        return G.tsc_to_ns(opts.guest_tsc(host_tsc, vcpus[v].offset))

    def add(host_tsc, rtype, misc, body, pid, tid, v):
        ns = gns(host_tsc, v)
        data = record(rtype, misc, body + sample_id(ST, pid, tid, ns, v, dummy.ids[v]))
        recs.append((ns, seq[0], data))
        seq[0] += 1

    init = []
    kmap = mmap2_body(-1 & 0xFFFFFFFF, 0, gk.base, 0x100000, gk.base, "[kernel.kallsyms]_text",
                      maj=0, minor=0)
    init.append(record(RecordType.MMAP2, MISC_KERNEL, kmap + sample_id(ST, -1, 0, 0, 0, dummy.ids[0])))
    seen = set()
    for vc in vcpus:
        for g in vc.threads:
            if g.tid in seen:
                continue
            seen.add(g.tid)
            init.append(record(RecordType.COMM, 0 if not g.user else PERF_RECORD_MISC_COMM_EXEC,
                               comm_body(g.pid, g.tid, g.comm)
                               + sample_id(ST, g.pid, g.tid, 0, vc.index, dummy.ids[vc.index])))
            if g.user:
                init.append(record(RecordType.MMAP2, PERF_RECORD_MISC_USER,
                                   mmap2_body(g.pid, g.tid, gu.base & ~0xFFF, 0x1000, 0x1000,
                                              gprog_path, ino=4242)
                                   + sample_id(ST, g.pid, g.tid, 0, vc.index, dummy.ids[vc.index])))
    for tsc, kind, v, pid, tid, opid, otid in gsideband:
        misc = PERF_RECORD_MISC_SWITCH_OUT if kind == "switch_out" else 0
        add(tsc, RecordType.SWITCH_CPU_WIDE, misc, switch_cpu_wide_body(opid, otid), pid, tid, v)
    # id index: which guest CPU (VCPU) each sample id belongs to
    idx = struct.pack("<Q", n) + b"".join(struct.pack("<QQQQ", dummy.ids[v], v, v, -1 & (2**64 - 1))
                                          for v in range(n))
    feats = _common_features(n, ["/usr/bin/perf", "record", "--sample-identifier", "--buildid-all",
                                 "--switch-events", "--kcore", "-a", "-e", "dummy"], [dummy])
    with _open(path) as f:
        w = PerfDataWriter(f, [dummy])
        w.write(record(RecordType.ID_INDEX, 0, idx))
        w.write(time_conv_record(G.TIME_SHIFT, G.TIME_MULT, G.TIME_ZERO))
        for r in init:
            w.write(r)
        w.write(record(RecordType.FINISHED_INIT, 0, b""))
        _events(recs, w)
        w.close(feats)
