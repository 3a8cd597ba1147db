"""The sideband model on hand-made records: threads, comms, maps and CPU timelines over time."""

from __future__ import annotations

import numpy as np
import pytest

import sideband_records as R
from ptexport.sideband import END_OF_TIME, HOST_PID, CpuTimeline, SidebandBuilder, build_sideband


def test_fork_exec_exit_and_comms_over_time():
    recs = [
        R.comm(100, 100, "bash", 0),
        R.mmap2(100, 100, 0x400000, 0x1000, "/bin/bash", 0),
        R.fork(200, 200, 100, 100, 1000),
        R.comm(200, 200, "ls", 2000, exec_=True),
        R.mmap2(200, 200, 0x500000, 0x2000, "/bin/ls", 2100),
        R.fork(200, 201, 200, 200, 2500),          # a second thread of ls
        R.comm(200, 201, "worker", 2600),
        R.exit_(200, 200, 3000),
    ]
    sb = build_sideband(recs)
    host = sb.host
    bash, ls, worker = host.thread(100), host.thread(200), host.thread(201)
    assert (ls.pid, ls.tid, ls.ppid, ls.start, ls.end, ls.start_known) == (200, 200, 100, 1000, 3000, True)
    assert ls.is_main and not worker.is_main and worker.pid == 200
    assert host.process_of(worker, 2700) is ls and host.process_of(ls) is ls
    # the child inherits the parent's comm at fork time, then exec renames it
    assert [(c.comm, c.start, c.exec) for c in ls.comms] == [("bash", 1000, False), ("ls", 2000, True)]
    assert [c.inherited for c in ls.comms] == [True, False]
    assert ls.comm_at(1500).comm == "bash" and ls.comm_at(2000).comm == "ls"
    assert ls.comm_at(5).comm == "bash"  # before the first comm: perf answers with the oldest
    assert ls.exec_comm().comm == "ls" and ls.exec_comm(1500).comm == "bash"
    assert worker.comm_name(2550) == "ls" and worker.comm_name() == "worker"
    assert bash.comm_name() == "bash" and bash.start_known is False
    assert [t.tid for t in host.processes()] == [0, 100, 200]  # 0: perf's idle thread "swapper"
    assert host.thread(0).comm_name() == "swapper"
    # maps: fork copies bash's, exec clears them, the new mmap appears later
    assert sb.map_at(200, 0x400010, 1500).filename == "/bin/bash"
    assert sb.map_at(200, 0x400010, 2000) is None
    assert sb.map_at(200, 0x500010, 2099) is None
    m = sb.map_at(200, 0x501000, 2100)
    assert (m.filename, m.start, m.end, m.file_offset(0x501234)) == ("/bin/ls", 0x500000, 0x502000, 0x1234)
    assert sb.map_at(100, 0x400010, 10**9).filename == "/bin/bash"  # bash's own maps untouched
    # threads share the process's maps
    assert sb.map_at(worker.pid, 0x500000, 2700).filename == "/bin/ls"


def test_exec_keeps_maps_when_asked_like_perf():
    recs = [R.mmap2(7, 7, 0x1000, 0x1000, "/old", 0), R.comm(7, 7, "new", 10, exec_=True)]
    assert build_sideband(recs, exec_clears_maps=False).map_at(7, 0x1000, 20).filename == "/old"
    assert build_sideband(recs).map_at(7, 0x1000, 20) is None


def test_overlapping_mmap_shadows_part_of_the_old_map():
    recs = [
        R.mmap2(5, 5, 0x10000, 0x10000, "/lib/a.so", 10, pgoff=0x2000),
        R.mmap2(5, 5, 0x14000, 0x4000, "/lib/b.so", 20),
    ]
    sb = build_sideband(recs)
    assert sb.map_at(5, 0x15000, 15).filename == "/lib/a.so"
    assert sb.map_at(5, 0x15000, 20).filename == "/lib/b.so"
    left, right = sb.map_at(5, 0x13000, 25), sb.map_at(5, 0x19000, 25)
    assert left is right and (left.filename, left.start, left.end, left.pgoff, left.valid_from) == (
        "/lib/a.so", 0x10000, 0x20000, 0x2000, 10)
    assert right.file_offset(0x18000) == 0xA000
    assert sb.map_at(5, 0x20000, 25) is None and sb.map_at(5, 0xFFFF, 25) is None
    # the address space at one time, cut up as perf's maps__fixup_overlappings leaves it
    live = sb.host.maps(5).live_at(25)
    assert [(e.start, e.end, e.pgoff, e.filename) for e in live] == [
        (0x10000, 0x14000, 0x2000, "/lib/a.so"), (0x14000, 0x18000, 0, "/lib/b.so"),
        (0x18000, 0x20000, 0xA000, "/lib/a.so")]
    assert [e.filename for e in sb.host.maps(5).live_at(15)] == ["/lib/a.so"]
    assert sb.map_at(5, 0x15000, 5) is None  # before anything was mapped


def test_many_maps_inside_one_big_region_stay_cheap():
    # 4000 small maps punched into one big reserved region: the index must stay O(n log n)
    import time as _t

    n = 4000
    recs = [R.mmap2(1, 1, 0x10000000, 0x10000000, "/big", 0)]
    recs += [R.mmap2(1, 1, 0x10000000 + i * 0x2000, 0x1000, f"/s{i}", 1 + i) for i in range(n)]
    t0 = _t.perf_counter()
    sb = build_sideband(recs)
    assert _t.perf_counter() - t0 < 5
    assert sb.map_at(1, 0x10000000 + 7 * 0x2000 + 5, 100).filename == "/s7"
    assert sb.map_at(1, 0x10000000 + 7 * 0x2000 + 5, 7).filename == "/big"  # /s7 came at time 8
    assert sb.map_at(1, 0x10000000 + 7 * 0x2000 + 0x1000, 10**6).filename == "/big"  # the gap after it
    assert len(sb.host.maps(1).live_at(10**6)) == 2 * n  # n small maps, each followed by a piece of /big


def test_exec_ends_maps_and_ksymbol_unregister_unmaps():
    from ptexport.perfdata.constants import RecordType as RT

    recs = [
        R.mmap2(7, 7, 0x1000, 0x1000, "/old", 0),
        R.comm(7, 7, "new", 10, exec_=True),
        R.mmap2(7, 7, 0x3000, 0x1000, "/new", 12),
        R.Rec(RT.KSYMBOL, R.KERNEL, 5, 0, None, None, None, {"addr": 0xFFFF0000, "len": 0x100, "flags": 0, "ksym_name": "bpf_prog_1"}),
        R.Rec(RT.KSYMBOL, R.KERNEL, 50, 0, None, None, None, {"addr": 0xFFFF0000, "len": 0x100, "flags": 1, "ksym_name": "bpf_prog_1"}),
    ]
    sb = build_sideband(recs)
    old = sb.map_at(7, 0x1000, 9)
    assert old.valid_to == 10 and sb.map_at(7, 0x1000, 10) is None
    assert sb.map_at(7, 0x3000, 12).valid_to == END_OF_TIME
    assert sb.map_at(7, 0xFFFF0010, 20).filename == "bpf_prog_1"
    assert sb.map_at(7, 0xFFFF0010, 50) is None and sb.map_at(7, 0xFFFF0010, 49) is not None


def test_records_out_of_time_order_are_replayed_in_order():
    # per-CPU buffers are flushed in rounds: a later record can come first in the file
    recs = [R.mmap2(5, 5, 0x1000, 0x1000, "/new", 20), R.mmap2(5, 5, 0x1000, 0x1000, "/old", 10)]
    sb = build_sideband(recs)
    assert sb.map_at(5, 0x1000, 15).filename == "/old"
    assert sb.map_at(5, 0x1000, 25).filename == "/new"


def test_kernel_maps_and_build_ids():
    recs = [
        R.mmap(-1, 0, 0xFFFFFFFF81000000, 0x1000000, "[kernel.kallsyms]_text", 0, pgoff=0xFFFFFFFF81000000, misc=R.KERNEL),
        R.mmap2(9, 9, 0x1000, 0x1000, "/usr/bin/x", 0, build_id=bytes.fromhex("aabbcc") + bytes(17)),
    ]
    sb = build_sideband(recs)
    k = sb.map_at(9, 0xFFFFFFFF81234567, 100)
    assert k.filename == "[kernel.kallsyms]_text" and k.prot == 5 and k.valid_to == END_OF_TIME
    assert sb.map_at(9, 0xFFFFFFFF81234567, 100, kernel=False) is None
    assert sb.map_at(9, 0x1000, 100, kernel=True) is None
    assert sb.map_at(9, 0x1000, 0).build_id.hex().startswith("aabbcc")


def test_cpu_timeline_follows_intel_pt_rules():
    recs = [
        R.itrace_start(3, 100, 10, 11),
        R.switch_cpu_wide(3, 200, 10, 11, out=True, next_prev_pid=20, next_prev_tid=21, preempt=True),
        R.switch_cpu_wide(3, 210, 20, 21, out=False, next_prev_pid=10, next_prev_tid=11),
        R.switch_cpu_wide(3, 300, 20, 21, out=True, next_prev_pid=0, next_prev_tid=0),
        R.switch(1, 150, 30, 31, out=False),
        R.switch(1, 400, 30, 31, out=True),  # per-thread switch-out: ignored, as intel_pt does
        R.comm(20, 21, "b", 0),
    ]
    sb = build_sideband(recs)
    assert sb.tid_on_cpu(3, 99) is None
    assert sb.tid_on_cpu(3, 100) == (10, 11)
    assert sb.tid_on_cpu(3, 199) == (10, 11)
    assert sb.tid_on_cpu(3, 200) == (20, 21)
    assert sb.tid_on_cpu(3, 10**12) == (0, 0)
    assert sb.thread_on_cpu(3, 250).comm_name() == "b"
    assert sb.tid_on_cpu(1, 500) == (30, 31)
    tl = sb.host.cpus[3]
    assert tl.kinds.tolist() == [CpuTimeline.ITRACE_START, CpuTimeline.OUT_PREEMPT, CpuTimeline.IN, CpuTimeline.OUT]
    assert list(tl.intervals()) == [(100, 200, 10, 11), (200, 300, 20, 21), (300, None, 0, 0)]
    assert tl.at_array(np.array([50, 100, 205, 301])).tolist() == [-1, 11, 21, 0]
    assert sb.cpus() == [1, 3]


def test_cpu_wide_switches_take_a_fast_path_to_the_same_events():
    """The host's CPU-wide switches (a `perf record -a` recording's bulk) skip the general record path;
    what they add is the general path's, edge values included (u32 -1 and other ids past 2^31, no CPU,
    time 0 or perf's "no time"), and guest or per-thread switches still go the general way."""
    rng = np.random.default_rng(5)
    recs = [R.comm(7, 7, "seven", 0)]
    edge = [0, 1, 7, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
    for i in range(400):
        pick = (lambda: int(rng.choice(edge))) if rng.random() < 0.3 else (lambda: int(rng.integers(0, 50)))
        time = int(rng.choice([0, 0xFFFFFFFFFFFFFFFF, 10 + i])) if rng.random() < 0.1 else 10 + i
        cpu = None if rng.random() < 0.05 else pick() % 8 if rng.random() < 0.9 else pick()
        misc = int(rng.choice([R.KERNEL, R.USER, R.GUEST_KERNEL, R.GUEST_USER])) if rng.random() < 0.2 else R.KERNEL
        if rng.random() < 0.1:
            recs.append(R.switch(cpu, time, pick(), pick(), out=bool(rng.random() < 0.5)))
        else:
            recs.append(R.switch_cpu_wide(cpu, time, pick(), pick(), out=bool(rng.random() < 0.5), next_prev_pid=pick(),
                                          next_prev_tid=pick(), preempt=bool(rng.random() < 0.5), misc=misc))

    def events(general: bool) -> tuple:
        b = SidebandBuilder()
        if general:  # the general path only: as with guest ids (the host's records resolve the same)
            b._guest_ids = True
        b.add_all(recs)
        return b._events, b._first, b._last

    fast, slow = events(False), events(True)
    assert fast == slow and len(fast[0]) > 300


def test_tsc_queries_use_the_clock():
    from ptexport.sideband import TimeConversion

    class TC:
        time_shift, time_mult, time_zero = 0, 1, 0  # tsc == ns

    sb = build_sideband([R.itrace_start(0, 100, 1, 1)], time_conv=TC())
    assert sb.thread_on_cpu_tsc(0, 150).tid == 1
    assert isinstance(sb.time_conv, TimeConversion)
    with pytest.raises(ValueError):
        build_sideband([]).thread_on_cpu_tsc(0, 1)


def test_tid_reuse_gives_a_new_thread():
    recs = [
        R.fork(50, 50, 1, 1, 100), R.comm(50, 50, "first", 110), R.exit_(50, 50, 200),
        R.fork(50, 50, 1, 1, 300), R.comm(50, 50, "second", 310),
    ]
    host = build_sideband(recs).host
    a, b = host.thread(50, 150), host.thread(50, 350)
    assert a is not b and a.uid != b.uid
    assert (a.comm_name(), a.end, b.comm_name(), b.end) == ("first", 200, "second", None)
    assert host.thread(50) is b and host.num_threads() == 4  # + the parent (pid 1) and the idle thread


def test_guest_machines_from_id_index_and_cpumode():
    recs = [
        R.id_index([R.IdEntry(id=7, machine_pid=4242, vcpu=1), R.IdEntry(id=8, machine_pid=0)]),
        R.comm(600, 600, "guest-app", 10, sid=7),
        R.mmap2(600, 600, 0x1000, 0x1000, "/guest/bin", 11, sid=7),
        R.switch_cpu_wide(5, 20, 600, 600, out=False, next_prev_pid=0, next_prev_tid=0, sid=7, misc=R.GUEST_USER),
        R.comm(600, 600, "host-app", 10, sid=8),
        R.mmap(777, 777, 0xFFFF0000, 0x1000, "[guest.kernel.kallsyms]", 0, misc=R.GUEST_KERNEL),
    ]
    sb = build_sideband(recs)
    assert sorted(sb.machines) == [HOST_PID, 777, 4242]
    g = sb.machine(4242)
    assert g.thread(600).comm_name() == "guest-app" and sb.host.thread(600).comm_name() == "host-app"
    assert g.map_at(600, 0x1000, 20).filename == "/guest/bin" and sb.map_at(600, 0x1000, 20) is None
    assert sb.tid_on_cpu(1, 30, machine=4242) == (600, 600)  # keyed by VCPU, not host CPU 5
    assert sb.machine(777).kernel_maps.at(0xFFFF0010, 0).filename == "[guest.kernel.kallsyms]"
    assert [m.pid for m in sb.guests()] == [777, 4242]


def test_aux_records_and_auxtrace_streams():
    recs = [
        R.aux(0, 100, 0, 0x100), R.aux(0, 200, 0x100, 0x80, flags=1),
        R.auxtrace(0, 5, 0x180, data_offset=0x1000), R.auxtrace(2, 5, 0x40, data_offset=0x2000),
        R.auxtrace(0xFFFFFFFF, 77, 0x10, data_offset=0x3000),  # per-thread mode: cpu -1 as u32
        R.comm(77, 77, "traced", 0),
    ]
    sb = build_sideband(recs)
    assert [e.truncated for e in sb.aux_events[0]] == [False, True]
    streams = sb.aux_streams()
    assert sorted(streams) == [("cpu", 0), ("cpu", 2), ("thread", 77)]
    assert streams[("cpu", 0)][0].size == 0x180 and streams[("thread", 77)][0].cpu == -1
    assert sb.thread_for_stream(("thread", 77), 10).tid == 77  # per-thread mode: the stream's own thread
    assert sb.thread_for_stream(("cpu", 0), 10) is None  # no switch/itrace_start seen on cpu 0


def test_builder_is_single_use():
    b = SidebandBuilder()
    b.finish()
    with pytest.raises(RuntimeError):
        b.add(R.comm(1, 1, "x", 0))


def test_map_lookup_is_bisect_not_scan():
    # 8000 mmaps in one process, each lookup must stay fast
    recs = [R.mmap2(1, 1, 0x10000 + i * 0x2000, 0x1000, f"/lib/l{i}.so", i) for i in range(8000)]
    sb = build_sideband(recs)
    import time as _t

    t0 = _t.perf_counter()
    for i in range(0, 8000, 3):
        assert sb.map_at(1, 0x10000 + i * 0x2000 + 5, 10**6).filename == f"/lib/l{i}.so"
    assert _t.perf_counter() - t0 < 0.5


def test_thread_seen_before_its_first_comm_shows_perfs_default_name():
    # a switch names tid 70 before its COMM arrives (perf script prints ":70" then)
    recs = [R.switch_cpu_wide(0, 100, 1, 1, out=True, next_prev_pid=70, next_prev_tid=70), R.comm(70, 70, "late", 200)]
    th = build_sideband(recs).host.thread(70)
    assert (th.comm_name(150), th.comm_name(200), th.comm_name()) == (":70", "late", "late")
    assert th.exec_comm(150) is None and th.exec_comm(250).comm == "late"
    assert th.comm_at(150).comm == "late"  # perf's thread__comm_by_time falls back to the oldest


def test_kvm_vcpu_threads_without_guest_sideband():
    recs = [
        R.comm(900, 900, "qemu-system-x86", 0),
        R.fork(900, 901, 900, 900, 10), R.comm(900, 901, "CPU 0/KVM", 11),
        R.fork(900, 902, 900, 900, 12), R.comm(900, 902, "CPU 1/KVM", 13),
    ]
    sb = build_sideband(recs)
    assert sb.hypervisors() == {900: {0: 901, 1: 902}}
    assert sb.vcpu_of_host_thread(902, 20) == (900, 1)
    assert sb.vcpu_of_host_thread(902, 12) is None  # still named after qemu at that time
    assert sb.vcpu_thread(900, 0) is None  # no guest machine 900 without its sideband


def test_aux_flags_and_comm_identity():
    sb = build_sideband([R.aux(1, 5, 0, 0x10, flags=0x08), R.aux(1, 6, 0x10, 0x10, flags=0x05),
                         R.comm(1, 1, "sh", 0), R.comm(2, 2, "sh", 0)])
    coll, trunc = sb.aux_events[1]
    assert (coll.collision, coll.lost_data, trunc.truncated, trunc.partial, trunc.lost_data) == (True, False, True, True, True)
    a, b = sb.host.thread(1).comms[0], sb.host.thread(2).comms[0]
    assert a is not b and a != b and len({a, b}) == 2  # one comm per thread, as perf's struct comm


def test_map_index_layouts_agree_with_a_replay_oracle():
    """Random mmaps, unmaps and execs: both index layouts answer like replaying perf's fixups."""
    import random

    from ptexport.sideband.model import MapEntry, MapIndex, paint

    rnd = random.Random(1234)
    for _round in range(30):
        entries, removed, clears = [], set(), []
        t = 0
        for k in range(rnd.randint(1, 40)):
            t += rnd.choice((0, 1, 3))
            if rnd.random() < 0.08:
                clears.append(t)
                continue
            start = rnd.randrange(0, 64) * 0x100
            e = MapEntry(start, start + rnd.randrange(1, 20) * 0x100, rnd.randrange(0, 8) * 0x1000, f"f{k}",
                         None, 5, 0, 1, t)
            if rnd.random() < 0.1:
                removed.add(len(entries))
            entries.append(e)
        idx = {lay: MapIndex(entries, removed=frozenset(removed), clears=clears, layout=lay) for lay in ("cells", "tree")}
        for _q in range(200):
            qa, qt = rnd.randrange(0, 90 * 0x100), rnd.randrange(-1, t + 2)
            # oracle: replay everything made at or before qt, since the last exec at or before qt
            last = max([c for c in clears if c <= qt], default=None)
            starts, live = [], []
            for i, e in enumerate(entries):
                if e.valid_from <= qt and (last is None or e.valid_from >= last):
                    paint(starts, live, e, keep=i not in removed)
            hit = [m for m in live if m.start <= qa < m.end]
            want = hit[0].filename if hit else None
            for lay, ix in idx.items():
                got = ix.at(qa, qt)
                assert (got.filename if got else None) == want, (lay, _round, hex(qa), qt)
            live_names = [(m.start, m.end, m.filename) for m in live]
            assert [(m.start, m.end, m.filename) for m in idx["tree"].live_at(qt)] == live_names
