"""The reference backend's queue loop: perf's decoder states turned into perf's samples, one AUX queue.

For one AUX queue (a CPU in per-CPU mode, a thread in ``--per-thread`` mode)
:func:`iter_queue` runs :class:`~ptexport.decoder.reference.decoder.PerfDecoder`
and synthesizes perf's samples from its states, laid out as perf's
intel-pt.c: :meth:`QueueSynth.sample` is ``intel_pt_sample()`` and calls one
method per kind of sample (``synth_branch_sample``,
``synth_instruction_sample``, ... as perf's ``intel_pt_synth_*``);
:meth:`_QueueRun.setup` is perf's queue setup (decode to the first timestamp,
errors dropped) and :meth:`_QueueRun.time_filter` is ``intel_pt_time_filter``.
Rules:

* the thread of a sample is the one current on its CPU after every sideband
  event whose time, converted to TSC, is at or before the sample's TSC (perf
  runs the decoder up to each event's time, then applies the event);
* code is read in the address space of that thread (kernel code in the
  kernel's); before the first timestamp perf has no thread for a CPU queue;
* errors before a queue's first timestamp are dropped, as perf drops them;
* a branch between machines (VM entry/exit) becomes two samples.

Everything the loop reads of the session comes through a
:class:`~ptexport.decoder.context.DecodeContext`; the compiled backend
(:mod:`ptexport.decoder.compiled.decoder`) has the same entry points
(:func:`supported`, :func:`decode_queue`) and must give the same rows.
See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any, Iterator

from ptexport.decoder.constants import (
    EVD_ROW,
    F_ABORT_TX,
    F_ASYNC,
    F_FUP_IP,
    F_IN_TX,
    F_SAMPLE_IPC,
    OP_CALL,
    OP_INT,
    OP_IRET,
    OP_JCC,
    OP_JMP,
    OP_LOOP,
    OP_RET,
    OP_SYSCALL,
    OP_SYSRET,
    OP_VMENTRY,
    T_BRANCH,
    T_EVT,
    T_EX_STOP,
    T_IFLAG_CHG,
    T_INSTRUCTION,
    T_MWAIT_OP,
    T_PSB_EVT,
    T_PTW,
    T_PWR_ENTRY,
    T_PWR_EXIT,
    T_TRACE_BEGIN,
    T_TRACE_END,
    T_TRANSACTION,
)
from ptexport.decoder.codewalk import PerfCodeWalker
from ptexport.decoder.context import TIMELESS_MAP_TIME, DecodeContext, queue_tid
from ptexport.decoder.filters import fast_forward
from ptexport.decoder.reference.decoder import PerfDecoder
from ptexport.samples.columns import (
    COLUMNS,
    DEFAULTS,
    ERR_LOST,
    ERR_NODATA,
    ERR_OVR,
    EV_BRANCH,
    EV_CBR,
    EV_ERROR,
    EV_EVT,
    EV_EXSTOP,
    EV_IFLAG,
    EV_INSTRUCTION,
    EV_MWAIT,
    EV_PSB,
    EV_PTWRITE,
    EV_PWRE,
    EV_PWRX,
    EV_TRANSACTION,
)
from ptexport.samples.flags import IpFlag


_F = IpFlag
OP_FLAGS = {k: int(v) for k, v in {
    OP_CALL: _F.BRANCH | _F.CALL,
    OP_RET: _F.BRANCH | _F.RETURN,
    OP_JCC: _F.BRANCH | _F.CONDITIONAL,
    OP_JMP: _F.BRANCH,
    OP_LOOP: _F.BRANCH | _F.CONDITIONAL,
    OP_IRET: _F.BRANCH | _F.RETURN | _F.INTERRUPT,
    OP_INT: _F.BRANCH | _F.CALL | _F.INTERRUPT,
    OP_SYSCALL: _F.BRANCH | _F.CALL | _F.SYSCALLRET,
    OP_SYSRET: _F.BRANCH | _F.RETURN | _F.SYSCALLRET,
    OP_VMENTRY: _F.BRANCH | _F.CALL | _F.VMENTRY,
}.items()}


class Rows:
    """Row accumulator for one queue (lists, converted once)."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {c: [] for c in COLUMNS}
        self.setup_failures: list[int] = []  # object ids that failed before the first timestamp
        # Every decode result after setup, in order: (is_error, queue timestamp after it).
        # Rows carry the index of the result they came from in their "step" column.
        self.items_err: list[bool] = []
        self.items_ts: list[int] = []

    def add(self, **kw: int) -> None:
        for c in COLUMNS:
            self.cols[c].append(kw.get(c, DEFAULTS.get(c, 0)))

    def __len__(self) -> int:
        return len(self.cols["kind"])


def n_samples(rows: Rows) -> int:
    """Samples (not errors, CBRs or budget marks) among ``rows``: what --itrace=sN counts."""
    return sum(1 for k in rows.cols["kind"] if k >= 0 and k not in (EV_ERROR, EV_CBR))


def join_rows(pieces: list[Rows]) -> Rows:
    """The pieces of :func:`iter_queue` as one :class:`Rows`."""
    if len(pieces) == 1:
        return pieces[0]
    out = Rows()
    for p in pieces:
        for c in COLUMNS:
            out.cols[c] += p.cols[c]
        out.setup_failures += p.setup_failures
        out.items_err += p.items_err
        out.items_ts += p.items_ts
    return out


def cfe_word(st: Any) -> int:
    """perf's perf_synth_intel_evt word: CFE type, IP bit 7, vector bits 8-15, EVD count from 16."""
    return (st.cfe_type & 0x1F) | int(bool(st.flags & F_FUP_IP)) << 7 | (st.cfe_vector & 0xFF) << 8 \
        | len(st.evd) << 16


def iflag_flags(st: Any) -> int:
    """RFLAGS.IF bits of perf's intel_pt_sample_flags (cap_event_trace)."""
    if st.type & T_IFLAG_CHG:
        flags = 0 if st.from_iflag else int(_F.INTR_DISABLE)
        if st.from_iflag != st.to_iflag:
            flags |= int(_F.INTR_TOGGLE)
        return flags
    return 0 if st.to_iflag else int(_F.INTR_DISABLE)


def sample_flags(st: Any) -> int:
    """perf's intel_pt_sample_flags."""
    if st.flags & F_ABORT_TX:
        flags = int(_F.BRANCH | _F.TX_ABORT)
    elif st.flags & F_ASYNC:
        if not st.to_ip:
            flags = int(_F.BRANCH | _F.ASYNC | _F.TRACE_END)
        elif st.from_nr and not st.to_nr:
            flags = int(_F.BRANCH | _F.CALL | _F.ASYNC | _F.VMEXIT)
        else:
            flags = int(_F.BRANCH | _F.CALL | _F.ASYNC | _F.INTERRUPT)
    else:
        flags = OP_FLAGS.get(st.insn_op, 0) if st.from_ip else int(_F.BRANCH | _F.TRACE_BEGIN)
        if st.flags & F_IN_TX:
            flags |= int(_F.IN_TX)
    if st.type & T_TRACE_BEGIN:
        flags |= int(_F.TRACE_BEGIN)
    if st.type & T_TRACE_END:
        flags |= int(_F.TRACE_END)
    return flags


class QueueSynth:
    """perf's sample synthesis for one queue: ``intel_pt_sample()`` and its ``intel_pt_synth_*``.

    Each ``synth_*`` method adds the rows of one kind of sample for decoder
    state ``st``; ``base`` holds the columns every row of the state shares
    (tsc, time, cpu, pid, tid, queue, trace_nr, step), ``flags`` perf's sample
    flags and ``nr`` the state's machine (guest or host, by its from side).
    The IPC and CBR bookkeeping perf keeps per queue lives here.
    """

    def __init__(self, ctx: DecodeContext) -> None:
        it = ctx.itrace
        self.rows = Rows()
        self.skipped_before = 0  # samples of earlier pieces (--itrace=sN holds CBRs back meanwhile)
        self.initial_skip = it.initial_skip
        self.quick = ctx.params.quick
        self.branches_filter = ctx.branches_filter
        self.event_trace = ctx.event_trace
        self.evt_attr = ctx.evt_attr
        self.intr_events = it.intr_events
        self.pwr_events = it.pwr_events
        self.instructions = it.instructions
        self.transactions = it.transactions
        self.ptwrites = it.ptwrites
        self.branches = it.branches
        self.errors = it.errors
        self.err_minus_o = "o" in it.error_minus
        self.err_minus_l = "l" in it.error_minus
        self.last_br_insn = self.last_br_cyc = 0  # IPC of branch samples (perf's last_br_*)
        self.last_in_insn = self.last_in_cyc = 0  # IPC of instruction samples (perf's last_in_*)
        self.last_insn_cnt = 0
        self.cbr_seen = -1  # perf starts from UINT_MAX

    def new_piece(self) -> Rows:
        """Hand back the rows so far and start a new piece."""
        rows = self.rows
        if self.initial_skip:
            self.skipped_before += n_samples(rows)
        self.rows = Rows()
        return rows

    # ------------------------------------------------------------- intel_pt_sample

    def sample(self, st: Any, base: dict[str, int]) -> None:
        """perf's intel_pt_sample(): every sample the pending state ``st`` holds, in perf's order."""
        flags = sample_flags(st)
        if self.event_trace:
            flags |= iflag_flags(st)
        typ = st.type
        # perf's intel_pt_prep_a_sample: a sample is in the guest by its from side, else its to side
        nr = int(st.from_nr if st.from_ip else st.to_nr)
        if self.intr_events:
            # perf's intel_pt_synth_events_sample / intel_pt_synth_iflag_chg_sample, before power events
            if typ & T_EVT and self.evt_attr:
                self.synth_events_sample(st, base, flags, nr)
            if typ & T_IFLAG_CHG and self.event_trace:
                self.synth_iflag_chg_sample(st, base, flags, nr)
        if self.pwr_events:
            # perf's power/ptwrite/psb samples carry the state's from_ip and to_ip like branches do
            if typ & T_PSB_EVT:
                self.synth_psb_sample(st, base, nr)
            if st.cbr != self.cbr_seen:
                self.synth_cbr_sample(st, base, flags, nr)
            if typ & T_MWAIT_OP:
                self.synth_mwait_sample(st, base, flags, nr)
            if typ & T_PWR_ENTRY:
                self.synth_pwre_sample(st, base, flags, nr)
            if typ & T_EX_STOP:
                self.synth_exstop_sample(st, base, flags, nr)
            if typ & T_PWR_EXIT:
                self.synth_pwrx_sample(st, base, flags, nr)
        if self.instructions and typ & T_INSTRUCTION:
            self.synth_instruction_sample(st, base, flags, nr)
        if self.transactions and typ & T_TRANSACTION:
            self.synth_transaction_sample(st, base, flags, nr)
        if self.ptwrites and typ & T_PTW:
            self.synth_ptwrite_sample(st, base, flags, nr)
        if typ & T_BRANCH and self.branches:
            self.synth_branch_sample(st, base, flags)

    # ------------------------------------------------------------- intel_pt_synth_*

    def synth_events_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_events_sample: an 'evt' sample (CFE), its EVDs as rows just before it."""
        add = self.rows.add
        for evd_type, evd_payload in st.evd:  # rows only for iter_batches' evd_* columns
            add(kind=EVD_ROW, code=evd_type, payload=evd_payload, **base)
        add(kind=EV_EVT, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
            payload=cfe_word(st), nr=nr, **base)

    def synth_iflag_chg_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_iflag_chg_sample: RFLAGS.IF changed (payload: new IF, bit 1: via a branch)."""
        via = bool(st.type & T_BRANCH)
        self.rows.add(kind=EV_IFLAG, ip=st.from_ip, addr=st.to_ip if via else 0, flags=flags,
                      payload=int(st.to_iflag) | int(via) << 1, nr=nr, **base)

    def synth_psb_sample(self, st: Any, base: dict[str, int], nr: int) -> None:
        """perf's intel_pt_synth_psb_sample."""
        self.rows.add(kind=EV_PSB, ip=st.from_ip, addr=st.to_ip, flags=0, payload=st.psb_offset,
                      offset=st.psb_offset, nr=nr, **base)

    def synth_cbr_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_cbr_sample, on a core-to-bus ratio other than the last one sampled."""
        if self.initial_skip and self.skipped_before + n_samples(self.rows) < self.initial_skip:
            # --itrace=sN: perf holds a CBR back while samples are skipped and retries at each
            # state; which try is emitted depends on all queues (decided in perf order: code 1)
            self.rows.add(kind=EV_CBR, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
                          payload=st.cbr_payload, code=1, nr=nr, **base)
            return
        self.cbr_seen = st.cbr
        self.rows.add(kind=EV_CBR, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
                      payload=st.cbr_payload, nr=nr, **base)

    def synth_mwait_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_mwait_sample."""
        self.rows.add(kind=EV_MWAIT, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
                      payload=st.mwait_payload, nr=nr, **base)

    def synth_pwre_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_pwre_sample."""
        self.rows.add(kind=EV_PWRE, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
                      payload=st.pwre_payload, nr=nr, **base)

    def synth_exstop_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_exstop_sample (payload: whether the EXSTOP had an IP)."""
        self.rows.add(kind=EV_EXSTOP, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
                      payload=int(bool(st.flags & F_FUP_IP)), nr=nr, **base)

    def synth_pwrx_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_pwrx_sample."""
        self.rows.add(kind=EV_PWRX, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
                      payload=st.pwrx_payload, nr=nr, **base)

    def synth_instruction_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_instruction_sample: period since the last one, IPC when CYC allows."""
        ipc_insn, ipc_cyc = st.tot_insn_cnt, st.tot_cyc_cnt
        cyc = ipc_cyc - self.last_in_cyc if st.flags & F_SAMPLE_IPC else 0
        ins = 0
        if cyc:
            ins = ipc_insn - self.last_in_insn
            self.last_in_insn, self.last_in_cyc = ipc_insn, ipc_cyc
        self.rows.add(kind=EV_INSTRUCTION, ip=st.from_ip, addr=st.to_ip, flags=flags,
                      period=1 if self.quick else st.tot_insn_cnt - self.last_insn_cnt, insn_cnt=ins,
                      cyc_cnt=cyc, nr=nr, **base)
        self.last_insn_cnt = st.tot_insn_cnt

    def synth_transaction_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_transaction_sample."""
        self.rows.add(kind=EV_TRANSACTION, ip=st.from_ip, addr=st.to_ip, flags=flags, nr=nr, **base)

    def synth_ptwrite_sample(self, st: Any, base: dict[str, int], flags: int, nr: int) -> None:
        """perf's intel_pt_synth_ptwrite_sample (code: whether the PTWRITE had an IP)."""
        self.rows.add(kind=EV_PTWRITE, ip=st.from_ip, addr=st.to_ip, flags=flags if st.from_ip else 0,
                      payload=st.ptw_payload, code=int(bool(st.flags & F_FUP_IP)), nr=nr, **base)

    def synth_branch_sample(self, st: Any, base: dict[str, int], flags: int) -> None:
        """perf's intel_pt_synth_branch_sample (--itrace=c/r: perf's branches_filter first); a branch
        between machines (VM entry/exit) is two samples, its from side and its to side."""
        if self.branches_filter and not (self.branches_filter & flags):
            return
        ipc_insn, ipc_cyc = st.tot_insn_cnt, st.tot_cyc_cnt
        cyc = ipc_cyc - self.last_br_cyc if st.flags & F_SAMPLE_IPC else 0
        ins = 0
        if cyc:
            ins = ipc_insn - self.last_br_insn
            self.last_br_insn, self.last_br_cyc = ipc_insn, ipc_cyc
        insn_len = 0 if st.flags & (F_ABORT_TX | F_ASYNC) else st.insn_len
        add = self.rows.add
        if st.from_nr != st.to_nr and st.from_ip and st.to_ip:
            add(kind=EV_BRANCH, ip=st.from_ip, addr=0, flags=flags, insn_cnt=ins, cyc_cnt=cyc,
                nr=int(st.from_nr), insn_len=insn_len, **base)
            add(kind=EV_BRANCH, ip=0, addr=st.to_ip, flags=flags, nr=int(st.to_nr), insn_len=insn_len, **base)
        else:
            add(kind=EV_BRANCH, ip=st.from_ip, addr=st.to_ip, flags=flags, insn_cnt=ins, cyc_cnt=cyc,
                nr=int(st.from_nr if st.from_ip else st.to_nr), insn_len=insn_len, **base)

    def synth_error(self, st: Any, base: dict[str, int], obj: int) -> None:
        """perf's intel_pt_synth_error (--itrace=e, less -o/-l's kinds); a failed code read that is not
        reported still counts toward perf's failure budget of its object (a row of kind -1)."""
        if self.errors and not ((st.err == ERR_OVR and self.err_minus_o) or (st.err == ERR_LOST and self.err_minus_l)):
            self.rows.add(kind=EV_ERROR, ip=st.from_ip, code=st.err, offset=st.pos, obj=obj, nr=int(st.from_nr),
                          **base)
        elif obj >= 0:
            self.rows.add(kind=-1, obj=obj, **base)  # counts toward perf's failure budget only


class _QueueRun:
    """One queue's decoder, walker and sideband view (perf's intel_pt_queue)."""

    def __init__(self, ctx: DecodeContext, qnum: int, key: tuple[str, int], bufs: list[Any]) -> None:
        self.ctx = ctx
        self.qnum = qnum
        self.per_cpu = per_cpu = key[0] == "cpu"
        self.cpu = cpu = key[1] if per_cpu else -1
        self.qtid = -1 if per_cpu else key[1]
        self.lookup = ctx.new_lookup()
        self.walker = PerfCodeWalker(self.lookup, ctx.kernel_start)
        self.dec = PerfDecoder(ctx.buffers(bufs), self.walker, ctx.params)
        self.timeless = ctx.timeless
        self.cur = ctx.cpu_timeline(cpu) if per_cpu and not ctx.timeless else None
        # Timeless decoding (no TSC, or --itrace=Z): perf decodes a queue at its thread's EXIT or at
        # the end, with the maps of that moment and, for a CPU queue, the thread current on the CPU
        # then (it follows no context switch while decoding).
        self.map_time = TIMELESS_MAP_TIME if ctx.timeless else None
        self.end_who = ctx.end_who(cpu, queue_tid(bufs)) if per_cpu and ctx.timeless else (-1, -1)
        # --time: perf's decoder-side filter (intel_pt_time_filter), not in timeless sessions.
        self.tf = ctx.time_filter()
        self.ff_timestamp = 0
        self.synth = QueueSynth(ctx)

    def who(self, tsc: int) -> tuple[int, int]:
        """(pid, tid) current on the queue at ``tsc``."""
        if self.per_cpu:
            return self.cur.at(tsc) if self.cur is not None else self.end_who
        t = self.ctx.sb.thread(self.qtid)
        return (t.pid if t is not None else -1), self.qtid

    def setup(self) -> Any:
        """perf's queue setup: decode until the first state with a timestamp, errors dropped (failed
        code reads counted as setup failures); no thread known for a CPU queue yet.  None: no data."""
        walker, dec, rows = self.walker, self.dec, self.synth.rows
        walker.have_thread = not self.per_cpu or (self.timeless and self.end_who[1] >= 0)
        self.lookup.pid = -1 if self.per_cpu and not self.timeless else self.who(0)[0]
        if self.map_time is not None:
            self.lookup.time = self.map_time
        tf = self.tf
        if tf is not None and tf.sel_start and tf.sel_timestamp:
            fast_forward(dec, tf.sel_timestamp)  # perf's setup: to the last PSB before the first start
        while True:
            st = dec.decode()
            if st.err:
                if st.err == ERR_NODATA:
                    return None
                if walker.fail_obj is not None:
                    rows.setup_failures.append(self.ctx.obj_id(walker.fail_obj))
                continue
            if st.timestamp or self.timeless:
                return st

    def time_filter(self, ptq_ts: int) -> str:
        """perf's intel_pt_time_filter for the state at ``ptq_ts``: "keep", "skip" (before a start: no
        sample), "ff" (fast-forwarded to the last PSB before the next start) or "stop" (after the last)."""
        tf = self.tf
        if tf is None or not tf.sel_timestamp:
            return "keep"
        verdict, self.ff_timestamp = tf.filter(ptq_ts, self.ff_timestamp)
        if verdict == "ff":
            fast_forward(self.dec, self.ff_timestamp)
        return verdict

    def run(self, chunk: int) -> Iterator[Rows]:
        ctx, synth, dec, walker, lookup = self.ctx, self.synth, self.dec, self.walker, self.lookup
        perf_time, obj_id = ctx.perf_time, ctx.obj_id
        st = self.setup()
        if st is None:
            yield synth.rows
            return
        ptq_ts = st.timestamp
        # perf's thread and maps are those of the sideband it has processed, which is everything up to
        # the highest timestamp the queue has reached (it pauses there for the events; errors do not
        # pause it): a sample dated back by an estimate keeps the later thread.
        ctx_ts = 0
        step = 0
        rows = synth.rows
        rows.items_err.append(False)
        rows.items_ts.append(ptq_ts)
        tf = self.tf
        # perf's have_sample: false for a state the time filter passed over (the first one too, when
        # it is before the first start)
        have_sample = not (tf is not None and tf.sel_start and tf.sel_timestamp and ptq_ts < tf.sel_timestamp)
        per_cpu, cpu, qnum, map_time, who = self.per_cpu, self.cpu, self.qnum, self.map_time, self.who
        est_tsc = ctx.est_tsc
        while True:
            if chunk and (len(rows) >= chunk or len(rows.items_ts) >= chunk):
                yield synth.new_piece()
                rows = synth.rows
            ctx_ts = max(ctx_ts, ptq_ts)
            pid, tid = who(ctx_ts)
            base = dict(tsc=ptq_ts, time=perf_time(ptq_ts), cpu=cpu, pid=pid, tid=tid, queue=qnum,
                        trace_nr=st.trace_nr, step=step)
            if have_sample:  # else the time filter passed over this state: nothing, no CBR/IPC bookkeeping
                synth.sample(st, base)
            # ---- next state; the walker reads code as the current thread sees it
            lookup.pid = pid
            lookup.tid = tid
            lookup.time = perf_time(ctx_ts) if map_time is None else map_time
            walker.have_thread = tid >= 0 or not per_cpu
            while True:
                st = dec.decode()
                if not st.err:
                    break
                if st.err == ERR_NODATA:
                    yield rows
                    return
                ptq_ts = st.est_timestamp  # perf dates an error by the decoder's estimate
                step += 1
                rows.items_err.append(True)
                rows.items_ts.append(ptq_ts)
                base["tsc"] = ptq_ts
                base["time"] = perf_time(ptq_ts)
                base["step"] = step
                synth.synth_error(st, base, obj_id(walker.fail_obj) if walker.fail_obj is not None else -1)
            if est_tsc and (st.from_ip >= 1 << 63 or not st.from_ip) and st.to_ip and st.to_ip < 1 << 63:
                ptq_ts = st.est_timestamp  # perf's est_tsc: estimated TSC on return to user space
            elif st.timestamp > ptq_ts:
                ptq_ts = st.timestamp
            verdict = self.time_filter(ptq_ts)
            if verdict == "stop":  # after the last range: perf takes the queue off its heap
                yield rows
                return
            have_sample = verdict == "keep"  # before a start: no sample
            step += 1
            rows.items_err.append(False)
            rows.items_ts.append(ptq_ts)


def supported(ctx: DecodeContext) -> str | None:
    """The reference decodes every session (None: no reason to refuse)."""
    return None


def iter_queue(ctx: DecodeContext, qnum: int, key: tuple[str, int], bufs: list[Any], chunk: int = 0) -> Iterator[Rows]:
    """:func:`decode_queue` in pieces of about ``chunk`` rows or steps (0: one piece).

    A piece ends between two decoder steps; steps (the rows' ``step`` and the
    items) are numbered across pieces, setup failures come with the first.
    """
    return _QueueRun(ctx, qnum, key, bufs).run(chunk)


def decode_queue(ctx: DecodeContext, qnum: int, key: tuple[str, int], bufs: list[Any],
                 count_only: bool = False) -> Rows:
    """Run perf's decoder over one queue and synthesize its samples (``count_only``: the compiled
    backend's option; the reference keeps every row)."""
    return join_rows(list(iter_queue(ctx, qnum, key, bufs)))
