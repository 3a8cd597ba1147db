"""Perf mode: the executed flow as perf sees it, ``perf script``'s samples, and perf.data wrapping.

A case marked ``@perf`` is also wrapped into a per-thread perf.data (:func:`wrap_perf`: its code as a
static ELF mapped by MMAP2, its PT stream as one AUXTRACE buffer) and compared with ``perf script``
(tests/oracle_perf/test_corpus_perf.py, tests/oracle_perf/test_audit_tsx_perf.py).

What it models: the ground truth's executed flow (``Truth.flow``, ``Built.flow``: a list of
:class:`Step`, every executed instruction and hardware event in order, with whether its packets were
written), and perf's rules for turning it into samples (:func:`perf_samples`, perf 6.1's conventions,
documented in test_corpus_perf.py): PERF_IP_FLAG_* flags and their names, the ``--itrace=c/r``
filters, trace begin/end samples for TIP.PGE/TIP.PGD and overflows, transaction samples.

Truth extension (:class:`_FlowRecorder`, every build): it appends a Step before each ``step``,
``abort``, ``async_disable`` (tracing on), ``resume_after_overflow`` and ``tx_event``, and around
``at_event`` (an overflow start, an asynchronous redirect, a TIP.PGE); after ``encode`` it marks a
branch whose packet was TIP.PGD.  A build hook copies the flow into ``Built.flow``.

Kept wrapper: when a run starts, the run's ``PacketWriter`` instance gets its ``tip_pgd`` wrapped to
note the TIP.PGD's IP (``t.last_pgd_ip``): TIP.PGDs are written by the core, flowctl, errata and
timing code through ``t.pw`` (also as ``t.full_ip(t.pw.tip_pgd, ...)``), and the writer
(``ptexport.synth.ptencode``) has no hooks; it is an instance-level proxy, not a Truth method.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from .case import Case, CaseError, Event
from .truth import (BUILD_HOOKS, K_CALL, K_CALL_IND, K_FAR, K_JCC, K_JMP, K_JMP_IND, K_RET, Built, Extension,
                    Truth, _kind, build, normalize, register)

PERF_PID = 1000


@dataclass
class Step:
    """One executed instruction or hardware event of the ground truth (``Truth.flow``), in order.

    ``kind``: a K_* constant for an executed instruction; else "interrupt", "abort", "enable",
    "disable", "ovf-start" (packets lost from here), "ovf-resume", "tx-begin", "tx-commit" or
    "async:NAME" (another @at event that redirected the flow)."""
    ip: int
    next_ip: int | None
    kind: object
    traced: bool               # its packets were written (PacketEn, not lost to an overflow)
    in_tx: bool = False        # inside a transaction (before the instruction executed)
    mnemonic: str = ""
    size: int = 0
    ends_trace: bool = False   # a branch whose packet was TIP.PGD
    taken_to_next: bool = False  # a conditional branch to its next instruction, taken
    pgd_ip: int | None = None  # that TIP.PGD's IP (None: suppressed)


def _flow(self: Truth) -> list:
    flow = self.__dict__.get("flow")
    if flow is None:
        flow = self.flow = []
    return flow


class _FlowRecorder(Extension):
    """Record into Truth.flow around the encoder's methods (the encoder itself stays unchanged)."""

    def run_start(self, t: Truth) -> None:
        """Note the TIP.PGD IPs the encoder writes."""
        pw, tip_pgd = t.pw, t.pw.tip_pgd

        def noting_tip_pgd(ip=None):
            t.last_pgd_ip = ip
            return tip_pgd(ip)
        pw.tip_pgd = noting_tip_pgd
        _flow(t)

    def before_step(self, t: Truth, insn) -> None:
        s = Step(insn.address, None, _kind(insn), t.on and not t.skip, t.in_tx, insn.mnemonic, insn.size)
        _flow(t).append(s)
        t._flow_step = s

    def after_step(self, t: Truth, insn, nxt: int) -> None:
        t._flow_step.next_ip = nxt
        t._flow_step.taken_to_next = t.taken_to_next

    def before_encode(self, t: Truth, insn, nxt: int, after: list) -> None:
        t._flow_encode_on = t.on
        t.last_pgd_ip = None

    def after_encode(self, t: Truth, insn, nxt: int, after: list) -> None:
        flow = _flow(t)
        if t._flow_encode_on and not t.on and flow and flow[-1].ip == insn.address:
            flow[-1].ends_trace = True
            flow[-1].pgd_ip = t.last_pgd_ip

    def before_at_event(self, t: Truth, ev: Event, ip: int) -> None:
        on, traced, intx = t.on, t.on and not t.skip, t.in_tx
        if ev.name == "ovf":
            _flow(t).append(Step(ip, ip, "ovf-start", on, intx))
        t._flow_at = (on, traced, intx, len(_flow(t)))

    def after_at_event(self, t: Truth, ev: Event, ip: int, r: int | None) -> None:
        on, traced, intx, n = t._flow_at
        flow = _flow(t)
        if r is not None and r != ip and ev.name != "abort":
            kind = "interrupt" if ev.name == "interrupt" else f"async:{ev.name}"
            flow.insert(n, Step(ip, r, kind, traced, intx))
        if not on and t.on and not any(s.kind == "enable" for s in flow[n:]):
            flow.append(Step(ip, ip, "enable", True, t.in_tx))

    def before_abort(self, t: Truth, ip: int) -> None:
        s = Step(ip, None, "abort", t.on and not t.skip, t.in_tx)
        _flow(t).append(s)
        t._flow_abort = s

    def after_abort(self, t: Truth, ip: int, fallback: int) -> None:
        t._flow_abort.next_ip = fallback

    def before_async_disable(self, t: Truth, ip: int) -> None:
        if t.on:
            _flow(t).append(Step(ip, None, "disable", True, t.in_tx))

    def before_resume_after_overflow(self, t: Truth, ip: int) -> None:
        _flow(t).append(Step(ip, ip, "ovf-resume", t.on, t.in_tx))

    def before_tx_event(self, t: Truth, intx: bool, abrt: bool, fup_ip: int) -> None:
        _flow(t).append(Step(fup_ip, fup_ip, "tx-begin" if intx else "tx-commit", t.on and not t.skip, t.in_tx))


register(_FlowRecorder())


def _keep_flow(b: Built, workdir: Path, truth: Truth) -> None:
    b.flow = list(_flow(truth))


BUILD_HOOKS.append(_keep_flow)


def build_perf(case: Case, workdir: Path) -> Built:
    """build() that also keeps the executed flow (``Built.flow``, a list of Step)."""
    return build(case, workdir)


# perf's sample flags (PERF_IP_FLAG_*), its names for them and its --itrace=c/r filter (perf script's
# conventions: how a branch sample is labelled is perf's rule, the branches themselves are the truth's).
PF_BRANCH, PF_CALL, PF_RETURN, PF_COND, PF_SYSCALLRET, PF_ASYNC, PF_INTR, PF_TX_ABORT, PF_TR_BEGIN, PF_TR_END, \
    PF_IN_TX = (1 << i for i in range(11))
_PF_NAMES = {
    PF_BRANCH | PF_CALL: "call", PF_BRANCH | PF_RETURN: "return", PF_BRANCH | PF_COND: "jcc",
    PF_BRANCH: "jmp", PF_BRANCH | PF_CALL | PF_INTR: "int", PF_BRANCH | PF_RETURN | PF_INTR: "iret",
    PF_BRANCH | PF_CALL | PF_SYSCALLRET: "syscall", PF_BRANCH | PF_RETURN | PF_SYSCALLRET: "sysret",
    PF_BRANCH | PF_ASYNC: "async", PF_BRANCH | PF_CALL | PF_ASYNC | PF_INTR: "hw int",
    PF_BRANCH | PF_TX_ABORT: "tx abrt", PF_BRANCH | PF_TR_BEGIN: "tr strt", PF_BRANCH | PF_TR_END: "tr end",
}


def perf_flags_text(flags: int) -> str:
    """perf script's ``flags`` column (blanks collapsed)."""
    xs = " (x)" if flags & PF_IN_TX else ""
    name = _PF_NAMES.get(flags & ~PF_IN_TX)
    if name:
        return name + xs
    for bit, word in ((PF_TR_BEGIN, "tr strt"), (PF_TR_END, "tr end")):
        if flags & bit:
            name = _PF_NAMES.get(flags & ~(PF_IN_TX | bit))
            if name:
                return f"{word} {name}{xs}"
    return "".join(c for i, c in enumerate("bcrosyiABEx") if flags >> i & 1)


def _insn_flags(s: Step) -> int:
    """The branch flags of an executed instruction (0: not a branch)."""
    k, m = s.kind, s.mnemonic
    if k == K_JCC:
        return PF_BRANCH | PF_COND
    if k in (K_JMP, K_JMP_IND):
        return PF_BRANCH
    if k in (K_CALL, K_CALL_IND):
        return PF_BRANCH | PF_CALL
    if k == K_RET:
        return PF_BRANCH | PF_RETURN
    if k == K_FAR:
        if m in ("syscall", "sysenter"):
            return PF_BRANCH | PF_CALL | PF_SYSCALLRET
        if m.startswith("sysret") or m.startswith("sysexit"):
            return PF_BRANCH | PF_RETURN | PF_SYSCALLRET
        if m.startswith("iret"):
            return PF_BRANCH | PF_RETURN | PF_INTR
        if m.startswith("int"):
            return PF_BRANCH | PF_CALL | PF_INTR
        raise CaseError(f"perf mode: no perf flags for {m}")
    return 0


def _taken(s: Step) -> bool:
    return s.kind != K_JCC or s.next_ip != s.ip + s.size or s.taken_to_next


def perf_samples(flow: list, itrace: str, pid: int = PERF_PID) -> list[str]:
    """The ``perf script -F pid,tid,ip,addr,flags --itrace=ITRACE`` lines (blanks collapsed, timeless)
    that the executed flow implies, for ITRACE in be, i1i, x, bex, cr (a trailing Z is ignored).

    Branch samples ``FLAGS FROM => TO``: every taken branch that was traced, asynchronous transfers
    (interrupt: hw int, abort: tx abrt), trace ends (TIP.PGD after a branch: "tr end KIND" to its IP or 0; an
    asynchronous disable: "tr end async" to 0) and trace starts (TIP.PGE, and the FUP after an overflow:
    "tr strt" from 0); the PSB+ that begins the trace is no sample.  Instruction samples (i1i) ``FLAGS
    ADDR IP``: every traced instruction, ADDR its target when it is a taken branch, else 0.  Transaction
    samples (x) ``FLAGS ADDR IP``: begin ("x", at the instruction after XBEGIN), commit (after XEND),
    abort ("tx abrt", ADDR the fallback).  Errors (e): an overflow, at the IP where packets were lost."""
    itrace = itrace.replace("Z", "")
    want_b, want_e, want_x = "b" in itrace, "e" in itrace, "x" in itrace
    want_c, want_r = "c" in itrace, "r" in itrace
    want_i = itrace.startswith("i")
    who = f"{pid}/{pid}"
    out: list[str] = []

    def branch(flags: int, frm: int, to: int) -> None:
        if want_b or (want_c and flags & (PF_CALL | PF_ASYNC | PF_TR_END)) or \
                (want_r and flags & (PF_RETURN | PF_TR_BEGIN)):
            out.append(" ".join(p for p in (who, perf_flags_text(flags), f"{frm:x} => {to:x}") if p))

    def sample(flags: int, addr: int, ip: int) -> None:
        out.append(" ".join(p for p in (who, perf_flags_text(flags), f"{addr:x}", f"{ip:x}") if p))

    for s in _flowlist(flow):
        tx = PF_IN_TX if s.in_tx else 0
        if isinstance(s.kind, int):
            if not s.traced:
                continue
            fl = _insn_flags(s)
            to = s.next_ip if fl and _taken(s) else 0
            if s.ends_trace:
                fl |= PF_TR_END
                to = s.pgd_ip or 0
            if want_i:
                sample(fl | tx, to, s.ip)
            if s.ends_trace:
                branch(fl | tx, s.ip, to)
            elif fl and _taken(s):
                branch(fl | tx, s.ip, s.next_ip)
        elif s.kind == "interrupt" and s.traced:
            branch(PF_BRANCH | PF_CALL | PF_ASYNC | PF_INTR | tx, s.ip, s.next_ip)
        elif s.kind == "abort" and s.traced:
            if want_x:
                sample(PF_BRANCH | PF_TX_ABORT, s.next_ip, s.ip)
            branch(PF_BRANCH | PF_TX_ABORT, s.ip, s.next_ip)
        elif s.kind == "tx-begin" and s.traced and want_x:
            sample(PF_IN_TX, 0, s.ip)
        elif s.kind == "tx-commit" and s.traced and want_x:
            sample(0, 0, s.ip)
        elif s.kind == "enable":
            branch(PF_BRANCH | PF_TR_BEGIN, 0, s.ip)
        elif s.kind == "disable":
            # perf's rule: the asynchronous trace end carries no in-transaction flag (perf 6.1)
            branch(PF_BRANCH | PF_ASYNC | PF_TR_END, s.ip, 0)
        elif s.kind == "ovf-start" and want_e:
            out.append(f"instruction trace error type 1 time 0 cpu -1 pid {pid} tid {pid} ip {s.ip:#x} "
                       "code 7: Overflow packet")
        elif s.kind == "ovf-resume" and s.traced:
            branch(PF_BRANCH | PF_TR_BEGIN, 0, s.ip)
        elif isinstance(s.kind, str) and s.kind.startswith("async:") and s.traced:
            raise CaseError(f"perf mode: no perf sample rule for event {s.kind[6:]}")
    return out


def _flowlist(flow) -> list:
    return flow.flow if isinstance(flow, Built) else flow


def wrap_perf(built: Built, out_dir: Path) -> Path:
    """A per-thread perf.data of a built case: COMM, MMAP2 of the code as a static ELF, ITRACE_START,
    the PT stream as one AUXTRACE buffer and its AUX record; returns its path."""
    from ptexport.perfdata.constants import RecordType
    from ptexport.synth import generate as G
    from ptexport.synth.perfwrite import (PerfDataWriter, aux_body, auxtrace_info_record, comm_body,
                                          finished_round, itrace_start_body, mmap2_body, time_conv_record)
    from ptexport.synth.sideband import _Records, auxtrace_priv, make_attrs
    from ptexport.synth.vm import _common_features
    from ptexport.synth.vm_code import Code, write_static_elf

    misc_user, misc_comm_exec = 2, 0x2000
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    case, org = built.case, built.image.org
    pt_bytes = built.pt_path.read_bytes()
    elf = (out_dir / "prog").resolve()
    write_static_elf(elf, Code(base=org, data=built.image.code, insns={}, labels={}))
    opts = G.SynthOptions(per_thread=True, timing="tsc", cpus=1, retcomp=case.retcomp,
                          ptwrite=("fup" if case.ptw_fup else "off"))
    pt, dummy = make_attrs(opts, 1)
    recs = _Records(pt, dummy, lambda cpu, tid: 0)
    pid = PERF_PID
    t0 = 1_000_000
    start = org & ~0xFFF
    end = (org + len(built.image.code) + 0xFFF) & ~0xFFF
    recs.add(t0, RecordType.COMM, misc_comm_exec, comm_body(pid, pid, "prog"), pid=pid, tid=pid, cpu=0)
    recs.add(t0 + 100, RecordType.MMAP2, misc_user,
             mmap2_body(pid, pid, start, end - start, 0x1000 - (org - start), str(elf), ino=4242),
             pid=pid, tid=pid, cpu=0)
    for k, (addr, data, _path) in enumerate(built.image.regions):
        # more code (e.g. @section): one more static ELF, mapped like the first
        relf = (out_dir / f"prog.{k + 1}").resolve()
        write_static_elf(relf, Code(base=addr, data=data, insns={}, labels={}))
        rstart, rend = addr & ~0xFFF, (addr + len(data) + 0xFFF) & ~0xFFF
        recs.add(t0 + 101 + k, RecordType.MMAP2, misc_user,
                 mmap2_body(pid, pid, rstart, rend - rstart, 0x1000 - (addr - rstart), str(relf), ino=4243 + k),
                 pid=pid, tid=pid, cpu=0)
    recs.add(t0 + 200, RecordType.ITRACE_START, 0, itrace_start_body(pid, pid), pid=pid, tid=pid, cpu=0,
             pt_event=True)
    recs.add_raw(t0 + 300, ("AUXTRACE", pt_bytes, 0, t0 + 500, 0, pid, -1))
    recs.add(t0 + 400, RecordType.AUX, 0, aux_body(0, len(pt_bytes), 0), pid=pid, tid=pid, cpu=0,
             pt_event=True)
    recs.items.sort(key=lambda x: (x[0], x[1]))
    path = out_dir / "perf.data"
    with open(path, "wb") as f:
        w = PerfDataWriter(f, [pt, dummy])
        w.write(auxtrace_info_record(auxtrace_priv(opts, pt)))
        w.write(time_conv_record(G.TIME_SHIFT, G.TIME_MULT, G.TIME_ZERO))
        for _ns, _n, data in recs.items:
            if isinstance(data, tuple):
                _tag, chunk, off, ref, idx, tid, cpu = data
                w.write_auxtrace(chunk, offset=off, reference=ref, idx=idx, tid=tid, cpu=cpu)
            else:
                w.write(data)
        w.write(finished_round())
        w.close(_common_features(1, ["/usr/bin/perf", "record", "--per-thread", "-e", "intel_pt//u", str(elf)],
                                 [pt, dummy]))
    return path


def perf_script_lines(path: Path, itrace: str) -> list[str]:
    """``perf script --itrace=ITRACE -F pid,tid,ip,addr,flags`` on a wrapped case, blanks collapsed."""
    r = subprocess.run(["perf", "script", "-i", str(path), f"--itrace={itrace}", "-F", "pid,tid,ip,addr,flags"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode:
        raise AssertionError(f"perf script --itrace={itrace} failed ({r.returncode}): {r.stderr[-1000:]}")
    return normalize(r.stdout)


def _drop_cpu_time(line: str) -> str:
    if line.startswith("instruction trace error"):
        return line
    parts = line.split(" ")
    return " ".join(parts[:1] + parts[3:])  # pid/tid [cpu] time: ...


def ptexport_branch_lines(path: Path, itrace: str) -> list[str]:
    """``ptexport dump branches --itrace=ITRACE`` on a wrapped case, in perf's timeless per-thread form
    (perf prints neither cpu nor time with Z on a per-thread file: both are dropped)."""
    import io

    from ptexport.cli import main
    out = io.StringIO()
    rc = main(["dump", "branches", str(path), f"--itrace={itrace}"], out=out)
    if rc:
        raise AssertionError(f"ptexport dump branches --itrace={itrace} failed ({rc}): {out.getvalue()[-1000:]}")
    return [_drop_cpu_time(line) for line in normalize(out.getvalue())]
