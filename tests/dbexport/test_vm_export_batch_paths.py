"""The VM export's vectorized paths against the per-sample code they replace (issue #13).

* guest attribution (``VcpuAttribution.apply``: machine pid, VCPU, guest thread of every guest sample,
  a column at a time) equals :meth:`VcpuAttribution.guest_thread` asked row by row;
* the batch export's thread memo (:class:`ThreadMemo`) gives the answers and makes the rows that calling
  ``MachineState.threads`` every time gives, where an earlier answer goes stale: a main thread created
  later, a thread whose pid is set after it was seen with pid -1, a comm set by a record;
* the VM time correlation walk (``vmtime._walked``: the packets it acts on, a run of TNT/TIP as its first)
  leaves the same messages, VMCS sightings and TSC patches as visiting every packet.
"""

from __future__ import annotations

import numpy as np
import pytest

from ptexport.writers.model import ExportModel
from ptexport.dbexport.machine import MachineState
from ptexport.dbexport.vm import GuestThreads, SideMemo, ThreadMemo
from ptexport.dbexport.threads import PerfThreads


def _state(model: ExportModel, pt: PerfThreads) -> MachineState:
    st = MachineState.__new__(MachineState)  # only the thread table side: threads() / export_threads()
    st.m, st.pt, st.machine_id = model, pt, model.machine(-1, "")
    return st


def _play(table, calls, memo: bool):
    """(answers, rows, thread table) of ``calls`` through the memo or calling every time: "run" a run's
    look-up, "find" an error row's, "switch" a context switch (DbExporter.event + switch: the next task
    found or made, its side's rows; the memo stays), "comm" a COMM record (the memo is cleared)."""
    model = ExportModel()
    pt = table(comm_exec=False)
    st = _state(model, pt)
    tm = ThreadMemo(model)
    sides = SideMemo(model)
    out = []
    for what, p, t in calls:
        if what == "find":
            pt.find(p, t)
        elif what in ("switch", "side"):  # "side": the other side of a CPU-wide switch (no findnew)
            if what == "switch":
                pt.findnew(p, t)
            out.append(sides.side(st, p, t) if memo else st.switch_side(p, t))
        elif what == "comm":
            pt.on_comm(p, t, "worker", 5, True)
            tm.clear()
            sides.clear()
        else:
            out.append(tm.threads(st, 0, p, t) if memo else st.threads(p, t))
    return out, [t.take() for t in model.tables()], [(th.pid, th.tid, th.db_id) for th in pt.all]


@pytest.mark.parametrize("table", [PerfThreads, GuestThreads])
def test_thread_memo_answers_as_every_call(table):
    calls = [("run", 100, 101), ("run", 100, 101), ("run", 100, 100), ("run", 100, 101),  # main made after
             ("run", 300, 300), ("run", -1, 200), ("run", -1, 200), ("find", 300, 200),  # pid set by a find
             ("run", -1, 200),
             ("run", 300, 200), ("run", 100, 101), ("comm", 100, 100), ("comm", 100, 100),  # comms by records
             ("run", 100, 101),
             ("run", 300, 300), ("run", 300, 200), ("run", 100, 100), ("run", 100, 101)]

    direct, memo = _play(table, calls, False), _play(table, calls, True)
    assert memo == direct
    answers = direct[0]
    if table is PerfThreads:  # (a guest's table makes the main thread with its first thread)
        assert answers[3][1] != answers[0][1]  # the main thread's comm reached thread 101 once 100 existed
    assert answers[7][1] != answers[6][1]  # thread 200's, once its pid (300) was known
    assert answers[10][1] != answers[9][1]  # the exec comm the COMM records gave 101's main thread


@pytest.mark.parametrize("table", [PerfThreads, GuestThreads])
def test_thread_memo_answers_as_every_call_across_context_switches(table):
    """A host's context switch does not clear the memo (a `perf record -a` recording has one every few
    dozen samples): what one changes - a thread created, a row exported, an unknown pid learned - is in the
    memo's generation, so the answers and rows are still those of calling every time."""
    calls = [("run", -1, 300), ("run", 300, 301), ("switch", 300, 300), ("run", 300, 301), ("run", -1, 300),
             ("run", 400, 401), ("switch", 400, 400), ("run", 400, 401), ("switch", -1, 500), ("run", -1, 500),
             ("switch", 600, 500), ("run", -1, 500), ("run", 600, 601), ("switch", 600, 601), ("run", 600, 601),
             ("comm", 600, 600), ("run", 600, 601), ("switch", 0, 0), ("run", 300, 301), ("run", 400, 401)]

    assert _play(table, calls, True) == _play(table, calls, False)


@pytest.mark.parametrize("table", [PerfThreads, GuestThreads])
def test_switch_sides_answer_as_every_call(table):
    """A context switch's sides (:class:`SideMemo`) asked of threads not seen yet, of threads without a
    comm (0s) that later get one, of a thread whose pid is learned and of one whose main thread appears:
    the memo's answers and rows are those of calling ``switch_side`` every time."""
    calls = [("comm", 500, 501), ("side", 500, 501), ("switch", 500, 500), ("side", 500, 501),  # main made after
             ("side", 700, 701), ("switch", 700, 701), ("side", 700, 701), ("run", 700, 701),
             ("side", 700, 701), ("switch", 700, 700), ("side", 700, 701), ("side", -1, 800),
             ("switch", -1, 800), ("side", 900, 800), ("side", -1, 800), ("comm", 700, 701), ("side", 700, 701),
             ("switch", 0, 0), ("side", 0, 0), ("side", 700, 700), ("run", 900, 901), ("side", 900, 901),
             ("comm", 900, 900), ("side", 900, 901), ("switch", 900, 900), ("side", 900, 901)]
    direct, memo = _play(table, calls, False), _play(table, calls, True)
    assert memo == direct
    assert len(set(direct[0])) > 4  # the answers change along the way (a memo answering stale would differ)


def test_thread_memo_remembers_settled_threads():
    model = ExportModel()
    st = _state(model, PerfThreads(comm_exec=False))
    tm = ThreadMemo(model)
    calls = 0
    real = st.threads

    def counted(p, t):
        nonlocal calls
        calls += 1
        return real(p, t)

    st.threads = counted
    for _ in range(50):
        for key in ((7, 7), (7, 8), (0, 0)):
            tm.threads(st, 0, *key)
    assert calls <= 6  # each key at most twice (its second ask after the others' rows settle), not 150


@pytest.mark.perf  # perf inject makes the VM recording
@pytest.mark.parametrize("compiled", [True, False])
def test_guest_attribution_columns_equal_per_row(tmp_path, monkeypatch, compiled):
    """Both forms of the split: the compiled pass over the batch, and numpy a VCPU thread at a time."""
    import shutil

    if shutil.which("perf") is None:
        pytest.skip("perf (Debian linux-perf) is not installed: perf inject makes the VM recording")
    from vmexporttest import make_vm_trace

    from ptexport.perfdata import open_perf_data
    from ptexport.decoder.guest import VcpuAttribution
    from ptexport.session.perfsession import DecodeConfig, open_session
    from ptexport.samples.columns import concat_columns
    from ptexport.samples.itrace import export_default

    vm = make_vm_trace(tmp_path, guest="mixed", seed=11, branches=3000, patch=False)
    with open_perf_data(vm.data) as pd:
        s = open_session(pd, DecodeConfig(itrace=export_default(), insn_fetch_marks=False))
        cols = concat_columns(list(s.iter_batches(1)))
        htid, pid, tsc, nr = (np.array(getattr(cols, c), copy=True) for c in ("tid", "pid", "tsc", "nr"))
        va = VcpuAttribution(s)
        assert va.enabled
        if not compiled:
            from ptexport.decoder import guest
            monkeypatch.setattr(guest, "numba", None)
        va.apply(cols)
        guest = np.flatnonzero(nr != 0)
        assert len(guest) > 100 and (cols.vcpu[guest] >= 0).all()
        for i in guest.tolist():
            hit = va.vcpu_of(int(htid[i]))
            assert (int(cols.machine_pid[i]), int(cols.vcpu[i])) == hit
            assert (int(cols.pid[i]), int(cols.tid[i])) == va.guest_thread(int(htid[i]), int(tsc[i]))
        host = np.flatnonzero(nr == 0)
        assert (cols.machine_pid[host] == 0).all() and (cols.vcpu[host] == -1).all()
        assert (cols.tid[host] == htid[host]).all() and (cols.pid[host] == pid[host]).all()


def test_time_correlation_walk_skips_nothing_it_acts_on(tmp_path, monkeypatch):
    from ptexport.perfdata import open_perf_data
    from ptexport.pt import vmtime
    from ptexport.synth.vm import VmOptions, synthesize_vm

    M64 = (1 << 64) - 1
    synthesize_vm(tmp_path, VmOptions(branches=20_000, tsc_offsets=(-0x5000000000 & M64, -0x4FFFFFF000 & M64),
                                      seed=5))
    with open_perf_data(tmp_path / "host.data") as pd:
        info = pd.auxtrace_info
        queues: dict[int, list] = {}
        for rec in pd.records():
            if rec.type == 71:  # AUXTRACE
                queues.setdefault(rec.cpu, []).append(vmtime.VmBuffer(bytes(pd.aux_data(rec)), rec.reference,
                                                                      bool(queues.get(rec.cpu))))
    cfg = vmtime.VmTimeConfig(mtc_period=3, tsc_ctc_ratio_n=info.tsc_ctc_ratio_n,
                              tsc_ctc_ratio_d=info.tsc_ctc_ratio_d)

    def run():
        corr = vmtime.VmTimeCorrelator(cfg)
        patches = [corr.run_queue(bufs, cpu) for cpu, bufs in sorted(queues.items())]
        return corr.messages, corr.vmcs_seen, patches, {k: vars(v) for k, v in corr.vmcs_table.items()}

    fast = run()
    walked = vmtime._walked(vmtime.packet_lists(queues[min(queues)][0].data)[0])
    monkeypatch.setattr(vmtime, "_walked", lambda kinds: range(len(kinds)))
    every = run()
    assert fast == every
    assert fast[0] and fast[1] and any(fast[2])  # offsets found, VMCSs seen, guest TSCs translated
    assert len(walked) < len(vmtime.packet_lists(queues[min(queues)][0].data)[0]) // 2
