"""Every record kind, sample field, feature and error path on files written byte by byte."""

from __future__ import annotations

import io
import struct

import pytest
import zstandard

import perfdata_writer as W
from ptexport.errors import PerfDataError, PtExportError, TruncatedError
from ptexport.perfdata import (
    IntelPTInfo,
    open_perf_data,
    perf_config_terms,
    perf_data_from_bytes,
)
from ptexport.perfdata.constants import (
    PERF_RECORD_MISC_COMM_EXEC,
    PERF_RECORD_MISC_GUEST_KERNEL,
    PERF_RECORD_MISC_GUEST_USER,
    PERF_RECORD_MISC_MMAP_BUILD_ID,
    PERF_RECORD_MISC_SWITCH_OUT,
    PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    AttrFlag,
    Feature,
    ReadFormat,
    RecordType as RT,
    SampleType as ST,
)
from ptexport.perfdata.records import PERF_SAMPLE_BRANCH_HW_INDEX

SID_ALL = 1 << AttrFlag.SAMPLE_ID_ALL
ST_A = ST.IP | ST.TID | ST.TIME | ST.CPU | ST.IDENTIFIER  # trailer: pid,tid,time,cpu,identifier
ST_B = ST.IP | ST.TID | ST.TIME | ST.PERIOD | ST.IDENTIFIER  # trailer: pid,tid,time,identifier


def trailer_a(pid, tid, time, cpu, ident):
    return struct.pack("<iiQIIQ", pid, tid, time, cpu, 0, ident)


def trailer_b(pid, tid, time, ident):
    return struct.pack("<iiQQ", pid, tid, time, ident)


def kernel_records() -> tuple[bytes, list]:
    """One record of every kernel kind (attr A, id 10) plus a SAMPLE of attr B; returns (data, expected)."""
    t = lambda n: trailer_a(100, 101, 1000 + n, 3, 10)  # noqa: E731
    recs = [
        W.record(RT.MMAP, struct.pack("<iiQQQ", 100, 101, 0x400000, 0x1000, 0) + W.cstr("/bin/true"), misc=2,
                 trailer=t(1)),
        W.record(RT.MMAP2, struct.pack("<iiQQQIIQQII", 100, 101, 0x500000, 0x2000, 0x1000, 8, 1, 77, 5, 5, 2)
                 + W.cstr("/lib/libc.so"), misc=2, trailer=t(2)),
        W.record(RT.MMAP2, struct.pack("<iiQQQBBH20sII", 100, 101, 0x600000, 0x3000, 0, 20, 0, 0,
                                       bytes(range(20)), 5, 2) + W.cstr("/lib/libm.so"),
                 misc=2 | PERF_RECORD_MISC_MMAP_BUILD_ID, trailer=t(3)),
        W.record(RT.COMM, struct.pack("<ii", 100, 101) + W.cstr("worker"), misc=PERF_RECORD_MISC_COMM_EXEC,
                 trailer=t(4)),
        W.record(RT.FORK, struct.pack("<iiiiQ", 102, 100, 102, 101, 1005), trailer=t(5)),
        W.record(RT.EXIT, struct.pack("<iiiiQ", 102, 100, 102, 101, 1006), trailer=t(6)),
        W.record(RT.LOST, struct.pack("<QQ", 10, 7), trailer=t(7)),
        W.record(RT.LOST_SAMPLES, struct.pack("<Q", 9), trailer=t(8)),
        W.record(RT.THROTTLE, struct.pack("<QQQ", 1009, 10, 10), trailer=t(9)),
        W.record(RT.UNTHROTTLE, struct.pack("<QQQ", 1010, 10, 10), trailer=t(10)),
        W.record(RT.AUX, struct.pack("<QQQ", 4096, 512, 0x1 | 0x4 | 0x8), trailer=t(11)),
        W.record(RT.ITRACE_START, struct.pack("<ii", 100, 101), trailer=t(12)),
        W.record(RT.SWITCH, b"", misc=PERF_RECORD_MISC_SWITCH_OUT | PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
                 trailer=t(13)),
        W.record(RT.SWITCH_CPU_WIDE, struct.pack("<ii", 200, 201), misc=PERF_RECORD_MISC_SWITCH_OUT, trailer=t(14)),
        W.record(RT.NAMESPACES, struct.pack("<iiQ", 100, 101, 2) + struct.pack("<QQQQ", 1, 2, 3, 4), trailer=t(15)),
        W.record(RT.KSYMBOL, struct.pack("<QIHH", 0xFFFF0000, 64, 1, 0) + W.cstr("bpf_prog_x"), trailer=t(16)),
        W.record(RT.BPF_EVENT, struct.pack("<HHI", 1, 0, 42) + b"TAGTAG01", trailer=t(17)),
        W.record(RT.CGROUP, struct.pack("<Q", 55) + W.cstr("/sys/fs/cgroup/a"), trailer=t(18)),
        W.record(RT.TEXT_POKE, struct.pack("<QHH", 0xFFFF1000, 2, 3) + b"\x90\x90\xcc\xcc\xcc", trailer=t(19)),
        W.record(RT.AUX_OUTPUT_HW_ID, struct.pack("<Q", 6), trailer=t(20)),
        W.record(RT.SAMPLE, struct.pack("<QQiiQQ", 20, 0xFFFFFFFF81000000, 100, 101, 1021, 4000), misc=1),
        W.record(RT.SAMPLE, struct.pack("<QQiiQIIQ", 10, 0x401000, 100, 101, 1022, 3, 0, 0)[:40], misc=2),
    ]
    return b"".join(recs)


def two_attr_file(data: bytes, features=None) -> bytes:
    a = W.attr(type=6, config=0x300E601, sample_type=ST_A, flags=SID_ALL)
    b = W.attr(type=0, config=0, sample_type=ST_B, flags=SID_ALL | 1 << AttrFlag.FREQ, period=4000)
    return W.file_mode([(a, [10, 11]), (b, [20, 21])], data, features)


def test_every_kernel_record_kind_with_sample_id_trailers():
    pd = perf_data_from_bytes(two_attr_file(kernel_records()), "k.data")
    recs = list(pd.records())
    names = [r.name for r in recs]
    assert names == ["MMAP", "MMAP2", "MMAP2", "COMM", "FORK", "EXIT", "LOST", "LOST_SAMPLES", "THROTTLE",
                     "UNTHROTTLE", "AUX", "ITRACE_START", "SWITCH", "SWITCH_CPU_WIDE", "NAMESPACES", "KSYMBOL",
                     "BPF_EVENT", "CGROUP", "TEXT_POKE", "AUX_OUTPUT_HW_ID", "SAMPLE", "SAMPLE"]
    by = {}
    for r in recs:
        by.setdefault(r.name, []).append(r)
    mm = by["MMAP"][0]
    assert (mm.pid, mm.tid, mm.addr, mm.len, mm.pgoff, mm.filename) == (100, 101, 0x400000, 0x1000, 0, "/bin/true")
    assert mm.sample_id.time == 1001 and mm.cpu == 3 and mm.sample_id.id == 10 and mm.cpumode == 2
    m2, m2b = by["MMAP2"]
    assert (m2.maj, m2.min, m2.ino, m2.ino_generation, m2.prot, m2.flags, m2.build_id) == (8, 1, 77, 5, 5, 2, None)
    assert m2.filename == "/lib/libc.so" and m2.time == 1002
    assert m2b.build_id == bytes(range(20)) and m2b.maj is None and m2b.filename == "/lib/libm.so"
    c = by["COMM"][0]
    assert c.exec and c.comm == "worker" and (c.pid, c.tid) == (100, 101)
    f, e = by["FORK"][0], by["EXIT"][0]
    assert (f.pid, f.ppid, f.tid, f.ptid, f.time) == (102, 100, 102, 101, 1005)
    assert (e.pid, e.ppid, e.time) == (102, 100, 1006) and e.sample_id.time == 1006
    assert (by["LOST"][0].lost_id, by["LOST"][0].lost) == (10, 7)
    assert by["LOST_SAMPLES"][0].lost == 9
    th, un = by["THROTTLE"][0], by["UNTHROTTLE"][0]
    assert th.throttled and not un.throttled and th.time == 1009
    aux = by["AUX"][0]
    assert (aux.aux_offset, aux.aux_size) == (4096, 512)
    assert aux.truncated and aux.partial and aux.collision and not aux.overwrite
    assert by["ITRACE_START"][0].pid == 100
    sw = by["SWITCH"][0]
    assert sw.out and sw.preempt and sw.next_prev_pid is None
    swc = by["SWITCH_CPU_WIDE"][0]
    assert swc.out and not swc.preempt and (swc.next_prev_pid, swc.next_prev_tid) == (200, 201)
    assert by["NAMESPACES"][0].link_info == [(1, 2), (3, 4)]
    ks = by["KSYMBOL"][0]
    assert (ks.addr, ks.len, ks.ksym_type, ks.ksym_name) == (0xFFFF0000, 64, 1, "bpf_prog_x")
    bpf = by["BPF_EVENT"][0]
    assert (bpf.bpf_type, bpf.bpf_id, bpf.tag) == (1, 42, b"TAGTAG01")
    assert (by["CGROUP"][0].cgroup_id, by["CGROUP"][0].path) == (55, "/sys/fs/cgroup/a")
    tp = by["TEXT_POKE"][0]
    assert (tp.old_bytes, tp.new_bytes) == (b"\x90\x90", b"\xcc\xcc\xcc")
    assert by["AUX_OUTPUT_HW_ID"][0].hw_id == 6
    s_b, s_a = by["SAMPLE"]
    # mixed attrs resolved through PERF_SAMPLE_IDENTIFIER
    assert s_b.attr is pd.attrs[1] and s_b.period == 4000 and s_b.cpu is None and s_b.time == 1021
    assert s_a.attr is pd.attrs[0] and s_a.cpu == 3 and s_a.period == 1 and s_a.ip == 0x401000
    assert pd.attr_for_id(21) is pd.attrs[1] and pd.attr_for_id(10) is pd.attrs[0]
    with pytest.raises(PerfDataError):
        pd.attr_for_id(999)
    assert pd.stats["MMAP2"] == 2 and pd.stats.total == 22


def test_trailer_of_other_attr_is_found_by_identifier():
    # a COMM of attr B (24-byte trailer) between records of attr A (32-byte trailer)
    data = W.record(RT.COMM, struct.pack("<ii", 5, 6) + W.cstr("b-comm"), trailer=trailer_b(5, 6, 77, 20))
    pd = perf_data_from_bytes(two_attr_file(data), "t.data")
    (r,) = list(pd.records())
    assert r.comm == "b-comm" and r.time == 77 and r.cpu is None and r.sample_id.id == 20
    assert pd.attr_of(r) is pd.attrs[1]


def test_sample_with_every_field():
    st = (ST.IP | ST.TID | ST.TIME | ST.ADDR | ST.READ | ST.CALLCHAIN | ST.ID | ST.CPU | ST.PERIOD
          | ST.STREAM_ID | ST.RAW | ST.BRANCH_STACK | ST.REGS_USER | ST.STACK_USER | ST.WEIGHT | ST.DATA_SRC
          | ST.TRANSACTION | ST.REGS_INTR | ST.PHYS_ADDR | ST.AUX | ST.CGROUP | ST.DATA_PAGE_SIZE
          | ST.CODE_PAGE_SIZE)
    rf = ReadFormat.GROUP | ReadFormat.ID | ReadFormat.TOTAL_TIME_ENABLED | ReadFormat.LOST
    a = W.attr(sample_type=st, read_format=rf, branch_sample_type=PERF_SAMPLE_BRANCH_HW_INDEX,
               regs_user=0b1011, regs_intr=0b11)
    body = struct.pack("<QiiQQQQIIQ", 0x1234, 7, 8, 99, 0xAAAA, 5, 6, 1, 0, 1000)
    body += struct.pack("<QQ", 2, 555) + struct.pack("<QQQ", 10, 5, 0) + struct.pack("<QQQ", 20, 6, 1)
    body += struct.pack("<Q3Q", 3, 0x1, 0x2, 0x3)
    body += struct.pack("<I", 4) + b"RAW!"
    body += struct.pack("<QQ", 1, 17) + struct.pack("<QQQ", 0x10, 0x20, 0x3)
    body += struct.pack("<Q3Q", 2, 11, 12, 13)
    body += struct.pack("<Q", 8) + b"STACK!!!" + struct.pack("<Q", 6)
    body += struct.pack("<QQQ", 300, 0x42, 0x99)
    body += struct.pack("<Q2Q", 2, 21, 22)
    body += struct.pack("<QQQQ", 0xBEEF, 0xC, 4096, 2 << 20)
    body += struct.pack("<Q", 3) + b"aux" + b"\0" * 5
    # PERF_SAMPLE_AUX comes after CGROUP/page sizes in perf's order
    body = body[:-16] + struct.pack("<Q", 3) + b"aux"
    pd = perf_data_from_bytes(W.file_mode([(a, [5])], W.record(RT.SAMPLE, body)), "all.data")
    (s,) = list(pd.records())
    assert (s.ip, s.pid, s.tid, s.time, s.addr, s.id, s.stream_id, s.cpu, s.period) == (
        0x1234, 7, 8, 99, 0xAAAA, 5, 6, 1, 1000)
    assert s.read == {"time_enabled": 555, "values": [{"value": 10, "id": 5, "lost": 0},
                                                       {"value": 20, "id": 6, "lost": 1}]}
    assert s.callchain == (1, 2, 3)
    assert s.raw == b"RAW!"
    assert s.branch_hw_idx == 17 and s.branch_stack == [(0x10, 0x20, 0x3)]
    assert s.user_regs_abi == 2 and s.user_regs == (11, 12, 13)
    assert s.user_stack == b"STACK!!!" and s.user_stack_dyn_size == 6
    assert (s.weight, s.data_src, s.transaction) == (300, 0x42, 0x99)
    assert s.intr_regs_abi == 2 and s.intr_regs == (21, 22)
    assert (s.phys_addr, s.cgroup, s.data_page_size, s.code_page_size) == (0xBEEF, 0xC, 4096, 2 << 20)
    assert s.aux == b"aux"
    assert s.sample_id.pid == 7 and s.sample_id.stream_id == 6


def _intel_pt_info_record(filter_str: str = "") -> bytes:
    priv = [8, 31, 1789569706, 123456, 1, 0x400, 0x800, 1, 0, 1, 0x200, 0x3C000, 100, 2, 0x2, 12]
    fb = filter_str.encode()
    priv.append(len(fb))
    tail = b""
    if fb:
        tail = fb + b"\0"
        tail += bytes(-len(tail) % 8)
    body = struct.pack("<II", 1, 0) + struct.pack(f"<{len(priv)}Q", *priv) + tail
    return W.record(RT.AUXTRACE_INFO, body)


def user_records() -> bytes:
    recs = [
        _intel_pt_info_record("filter main @ /bin/ls"),
        W.record(RT.TIME_CONV, struct.pack("<QQQQQBB6x", 31, 1789569706, 123456, 999, 0xFFFF, 1, 1)),
        W.record(RT.ID_INDEX, struct.pack("<Q", 2) + struct.pack("<QQQQ", 10, 0, 0, 100)
                 + struct.pack("<QQQQ", 11, 1, 1, 2**64 - 1) + struct.pack("<QQQQ", 4242, 0, 4242, 1)),
        W.record(RT.THREAD_MAP, struct.pack("<Q", 2) + struct.pack("<Q16s", 100, b"bash")
                 + struct.pack("<Q16s", 2**64 - 1, b"")),
        W.record(RT.CPU_MAP, struct.pack("<HH3H", 0, 3, 0, 2, 0xFFFF)),
        W.record(RT.CPU_MAP, struct.pack("<HHHxxQ", 1, 1, 8, 0b1011)),
        W.record(RT.CPU_MAP, struct.pack("<HHHI", 1, 1, 4, 0b110)),
        W.record(RT.CPU_MAP, struct.pack("<HBBHH", 2, 0, 0, 4, 7)),
        W.record(RT.STAT_CONFIG, struct.pack("<Q", 2) + struct.pack("<QQQQ", 0, 1, 2, 1000)),
        W.record(RT.STAT, struct.pack("<QIIQQQ", 10, 1, 0, 100, 200, 150)),
        W.record(RT.STAT_ROUND, struct.pack("<QQ", 1, 5000)),
        W.record(RT.EVENT_UPDATE, struct.pack("<QQ", 2, 10) + W.cstr("intel_pt//u")),
        W.record(RT.EVENT_UPDATE, struct.pack("<QQd", 1, 10, 0.5)),
        W.record(RT.EVENT_UPDATE, struct.pack("<QQ", 0, 10) + W.cstr("msec")),
        W.record(RT.HEADER_BUILD_ID, struct.pack("<i20sBBH", -1, b"\x11" * 20, 20, 0, 0) + W.cstr("/bin/ls"),
                 misc=1 | 1 << 15),
        W.record(RT.AUXTRACE_ERROR, struct.pack("<IIIiiIQQ64sii", 1, 5, 2, 100, 101, 2, 0x401000, 7777,
                                                b"Overflow packet", 4242, 1)),
        W.record(RT.FINISHED_INIT, b""),
        W.record(RT.FINISHED_ROUND, b""),
        W.record(RT.AUXTRACE, struct.pack("<QQQIII4x", 16, 0, 888, 0, 101, 2)) + b"\x02\x82" * 8,
        W.record(200, b"unknown-kind"),
        W.record(RT.SAMPLE, struct.pack("<QQiiQII", 10, 0x401000, 100, 101, 1030, 1, 0),
                 misc=PERF_RECORD_MISC_GUEST_USER),
    ]
    return b"".join(recs)


def test_user_records_and_intel_pt_info():
    a = W.attr(type=8, config=0x300E601, sample_type=ST_A, flags=SID_ALL)
    data = user_records()
    pd = perf_data_from_bytes(W.file_mode([(a, [10, 11, 4242])], data), "u.data")
    # AUXTRACE_INFO / TIME_CONV / ID_INDEX are known right after open
    info = pd.auxtrace_info
    assert isinstance(info, IntelPTInfo)
    assert (info.pmu_type, info.time_shift, info.time_mult, info.time_zero) == (8, 31, 1789569706, 123456)
    assert info.cap_user_time_zero and info.per_cpu_mmaps and not info.snapshot_mode
    assert (info.tsc_bit, info.noretcomp_bit, info.mtc_bit, info.mtc_freq_bits, info.cyc_bit) == (
        0x400, 0x800, 0x200, 0x3C000, 0x2)
    assert (info.tsc_ctc_ratio_n, info.tsc_ctc_ratio_d, info.max_non_turbo_ratio) == (100, 2, 12)
    assert info.filter == "filter main @ /bin/ls"
    assert info.config_terms(0x300E601) == {"tsc": 1, "mtc": 1, "mtc_period": 3}
    tc = pd.time_conv
    assert (tc.time_shift, tc.time_mult, tc.time_zero, tc.time_cycles, tc.time_mask) == (
        31, 1789569706, 123456, 999, 0xFFFF)
    assert tc.cap_user_time_zero and tc.cap_user_time_short
    assert pd.id_index[10].tid == 100 and pd.id_index[11].tid == -1
    recs = list(pd.records())
    by = {}
    for r in recs:
        by.setdefault(r.name, []).append(r)
    idx = by["ID_INDEX"][0].entries
    assert [(e.id, e.cpu, e.machine_pid, e.vcpu) for e in idx] == [(10, 0, 4242, 0), (11, 1, 4242, 1)]
    assert by["THREAD_MAP"][0].entries == [(100, "bash"), (-1, "")]
    assert [r.cpus for r in by["CPU_MAP"]] == [[0, 2, -1], [0, 1, 3], [1, 2], [4, 5, 6, 7]]
    assert by["STAT_CONFIG"][0].config == {0: 1, 2: 1000}
    st = by["STAT"][0]
    assert (st.stat_id, st.cpu, st.val, st.ena, st.run) == (10, 1, 100, 200, 150)
    assert (by["STAT_ROUND"][0].round_type, by["STAT_ROUND"][0].time) == (1, 5000)
    eu = by["EVENT_UPDATE"]
    assert eu[0].event_name == "intel_pt//u" and eu[1].scale == 0.5 and eu[2].unit == "msec"
    assert pd.attrs[0].name == "intel_pt//u"
    bid = by["BUILD_ID"][0]
    assert bid.build_id == b"\x11" * 20 and bid.filename == "/bin/ls" and bid.pid == -1
    err = by["AUXTRACE_ERROR"][0]
    assert (err.error_type, err.code, err.cpu, err.pid, err.tid, err.ip, err.time, err.msg) == (
        1, 5, 2, 100, 101, 0x401000, 7777, "Overflow packet")
    assert (err.machine_pid, err.vcpu) == (4242, 1)
    at = by["AUXTRACE"][0]
    assert (at.size, at.reference, at.tid, at.cpu) == (16, 888, 101, 2)
    assert bytes(pd.aux_data(at)) == b"\x02\x82" * 8
    unk = by["UNKNOWN(200)"][0]
    assert type(unk).__name__ == "UnknownRecord"
    assert pd.stats["UNKNOWN(200)"] == 1 and pd.stats.unknown == 1
    # guest user sample attributed to the guest machine through ID_INDEX machine_pid
    (s,) = by["SAMPLE"]
    assert s.cpumode == PERF_RECORD_MISC_GUEST_USER
    assert pd.machine_pid_of(s) == 4242 and pd.vcpu_of(s) == 0
    assert pd.machine_pid_of(by["STAT"][0]) is None


def test_guest_kernel_mmap_uses_mmap_pid_without_id_index():
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    data = W.record(RT.MMAP, struct.pack("<iiQQQ", 3000, 0, 0xFFFFFFFF81000000, 0x1000000, 0)
                    + W.cstr("[guest.kernel.kallsyms]"), misc=PERF_RECORD_MISC_GUEST_KERNEL,
                    trailer=trailer_a(0, 0, 0, 0, 10))
    pd = perf_data_from_bytes(W.file_mode([(a, [10])], data), "g.data")
    (r,) = list(pd.records())
    assert pd.machine_pid_of(r) == 3000


def test_features_parsed_and_unknown_reported():
    feats = {
        Feature.HOSTNAME: W.feat_string("box"),
        Feature.OSRELEASE: W.feat_string("6.1.0"),
        Feature.NRCPUS: struct.pack("<II", 8, 4),
        Feature.TOTAL_MEM: struct.pack("<Q", 1234),
        Feature.CMDLINE: struct.pack("<I", 2) + W.feat_string("perf") + W.feat_string("record"),
        Feature.PMU_MAPPINGS: struct.pack("<I", 2) + struct.pack("<I", 8) + W.feat_string("intel_pt")
        + struct.pack("<I", 1) + W.feat_string("software"),
        Feature.GROUP_DESC: struct.pack("<I", 1) + W.feat_string("{a,b}") + struct.pack("<II", 0, 2),
        Feature.CLOCKID: struct.pack("<Q", 1),
        Feature.DIR_FORMAT: struct.pack("<Q", 1),
        Feature.CLOCK_DATA: struct.pack("<IIQQ", 1, 1, 10, 20),
        Feature.COMPRESSED: struct.pack("<IIIII", 0, 1, 1, 5, 528384),
        Feature.HYBRID_TOPOLOGY: struct.pack("<I", 1) + W.feat_string("cpu_core") + W.feat_string("0-7"),
        Feature.AUXTRACE: struct.pack("<QQQ", 1, 0x1000, 48),
        Feature.BUILD_ID: struct.pack("<IHHi20sBBH", 0, 1 | 1 << 15, 36 + 32, -1, b"\x22" * 20, 20, 0, 0)
        + W.cstr("[kernel.kallsyms]", 16),
        40: b"\x00" * 8,
    }
    pd = perf_data_from_bytes(two_attr_file(b"", feats), "f.data")
    f = pd.features
    assert f["hostname"] == "box" and f["osrelease"] == "6.1.0"
    assert f["nrcpus"] == (8, 4) and f["total_mem"] == 1234 and f["cmdline"] == ["perf", "record"]
    assert f["pmu_mappings"] == {8: "intel_pt", 1: "software"}
    assert f["group_desc"][0] == ("{a,b}", 0, 2)
    assert f["clockid"] == 1 and f["dir_format"] == 1 and f["clock_data"].wall_clock_ns == 10
    assert f["compressed"].mmap_len == 528384 and f["hybrid_topology"] == {"cpu_core": "0-7"}
    assert f["auxtrace"] == [(0x1000, 48)]
    (b,) = f["build_id"]
    assert (b.pid, b.build_id, b.filename, b.cpumode) == (-1, b"\x22" * 20, "[kernel.kallsyms]", 1)
    assert pd.unknown_features == [40]
    assert pd.feature_errors == []


def test_bad_feature_is_reported_not_fatal_unless_strict():
    feats = {Feature.HOSTNAME: struct.pack("<I", 1000) + b"short"}
    data = two_attr_file(b"", feats)
    pd = perf_data_from_bytes(data, "bf.data")
    assert "hostname" not in pd.features
    (err,) = pd.feature_errors
    assert "feature HOSTNAME" in str(err) and "+0x" in str(err)
    with pytest.raises(PerfDataError, match="feature HOSTNAME"):
        perf_data_from_bytes(data, "bf.data", strict=True)


def test_pipe_mode_from_stream_and_file(tmp_path):
    a = W.attr(type=8, sample_type=ST_A, flags=SID_ALL)
    feat = W.record(RT.HEADER_FEATURE, struct.pack("<Q", Feature.HOSTNAME) + W.feat_string("pipebox"), pad=False)
    body = (W.header_attr(a, [10, 11]) + feat
            + W.record(RT.EVENT_UPDATE, struct.pack("<QQ", 2, 11) + W.cstr("intel_pt//"))
            + kernel_records()[:0]
            + W.record(RT.COMM, struct.pack("<ii", 1, 1) + W.cstr("init"), trailer=trailer_a(1, 1, 5, 0, 10))
            + W.record(RT.AUXTRACE, struct.pack("<QQQIII4x", 8, 0, 1, 0, 1, 0)) + b"\x02\x82" * 4
            + W.record(RT.FINISHED_ROUND, b""))
    raw = W.pipe_mode(body)
    p = tmp_path / "pipe.data"
    p.write_bytes(raw)
    for pd in (open_perf_data(p), open_perf_data_stream(raw)):
        with pd:
            assert pd.is_pipe
            # attrs and features known before iterating
            assert [x.ids for x in pd.attrs] == [[10, 11]] and pd.attrs[0].name == "intel_pt//"
            assert pd.features["hostname"] == "pipebox"
            recs = list(pd.records())
            assert [r.name for r in recs] == ["ATTR", "FEATURE", "EVENT_UPDATE", "COMM", "AUXTRACE",
                                              "FINISHED_ROUND"]
            assert recs[3].comm == "init" and recs[3].time == 5
            assert bytes(pd.aux_data(recs[4])) == b"\x02\x82" * 4
            assert recs[4].offset == 16 + sum(r.size for r in recs[:4])
            assert pd.stats["COMM"] == 1 and len(pd.attrs) == 1


def open_perf_data_stream(raw: bytes):
    from ptexport.perfdata import PerfData

    return PerfData("-", stream=io.BufferedReader(io.BytesIO(raw)))


def test_stream_read_once_and_truncated_stream():
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    raw = W.pipe_mode(W.header_attr(a, [10]) + W.record(RT.FINISHED_ROUND, b""))
    pd = open_perf_data_stream(raw)
    assert len(list(pd.records())) == 2
    with pytest.raises(PerfDataError, match="only once"):
        list(pd.records())
    pd = open_perf_data_stream(raw + W.record(RT.COMM, struct.pack("<ii", 1, 1) + W.cstr("x"))[:12])
    with pytest.raises(TruncatedError, match=r"-\+0x.*record COMM"):
        list(pd.records())


def test_compressed_records_split_across_frames():
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    inner = b"".join(W.record(RT.COMM, struct.pack("<ii", i, i) + W.cstr(f"c{i}"), trailer=trailer_a(i, i, i, 0, 10))
                     for i in range(50))
    cut = 1000 + 3  # a record cut between two COMPRESSED records
    c = zstandard.ZstdCompressor()
    z1, z2 = c.compress(inner[:cut]), c.compress(inner[cut:])
    data = (W.record(RT.FINISHED_INIT, b"") + W.record(RT.COMPRESSED, z1, pad=False)
            + W.record(RT.COMPRESSED, z2, pad=False) + W.record(RT.FINISHED_ROUND, b""))
    pd = perf_data_from_bytes(W.file_mode([(a, [10])], data), "z.data")
    recs = list(pd.records())
    comms = [r for r in recs if r.name == "COMM"]
    assert [r.comm for r in comms] == [f"c{i}" for i in range(50)]
    assert [r.time for r in comms] == list(range(50))
    first_c = pd.header["data_offset"] + 8
    assert comms[0].offset == first_c and comms[0].inner_offset == 0
    assert comms[-1].offset > first_c and comms[-1].inner_offset == len(inner) - comms[-1].size
    assert pd.stats["COMPRESSED"] == 2 and pd.stats["COMM"] == 50
    # a last record cut off inside the stream is a typed error
    data = W.record(RT.COMPRESSED, z1, pad=False)
    with pytest.raises(TruncatedError, match="record COMPRESSED"):
        list(perf_data_from_bytes(W.file_mode([(a, [10])], data), "z.data").records())
    data = W.record(RT.COMPRESSED, b"\x28\xb5\x2f\xfd garbage!", pad=False)
    with pytest.raises(PerfDataError, match="zstd"):
        list(perf_data_from_bytes(W.file_mode([(a, [10])], data), "z.data").records())


@pytest.mark.parametrize("size,match", [(0, "size 0 is smaller"), (4, "size 4 is smaller"),
                                        (4096, "runs past the end")])
def test_bad_record_sizes_name_offset_and_record(size, match):
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    good = W.record(RT.FINISHED_ROUND, b"")
    bad = struct.pack("<IHH", RT.MMAP2, 0, size) + bytes(64)
    raw = W.file_mode([(a, [10])], good + bad)
    pd = perf_data_from_bytes(raw, "bad.data")
    off = pd.header["data_offset"] + 8
    with pytest.raises(PerfDataError, match=match) as ei:
        list(pd.records())
    assert ei.value.offset == off and ei.value.what == "record MMAP2" and ei.value.source == "bad.data"
    assert str(ei.value).startswith(f"bad.data+{off:#x}: record MMAP2: ")


def test_record_too_small_for_its_fields():
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    raw = W.file_mode([(a, [10])], W.record(RT.MMAP2, bytes(24)))
    with pytest.raises(PerfDataError, match="record MMAP2: size 32 is too small"):
        list(perf_data_from_bytes(raw, "s.data").records())


@pytest.mark.parametrize("data,match", [
    (b"", "too small"), (b"NOTPERF!" + bytes(120), "bad magic"), (b"2ELIFREP" + bytes(120), "big-endian"),
    (b"PERFILE2" + struct.pack("<Q", 77) + bytes(100), "header size 77"),
])
def test_bad_headers(data, match):
    with pytest.raises(PerfDataError, match=match) as ei:
        perf_data_from_bytes(data, "h.data")
    assert ei.value.offset is not None


def test_kcore_directory_form(tmp_path):
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    d = tmp_path / "rec.data"
    (d / "kcore_dir").mkdir(parents=True)
    for n in ("kallsyms", "modules", "kcore"):
        (d / "kcore_dir" / n).write_bytes(b"x")
    (d / "data").write_bytes(W.file_mode([(a, [10])], W.record(RT.FINISHED_ROUND, b"")))
    with open_perf_data(d) as pd:
        assert pd.kcore_dir == d / "kcore_dir"
        assert [r.name for r in pd.records()] == ["FINISHED_ROUND"]


def test_multi_file_directory_reads_data_n_in_order(tmp_path):
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    d = tmp_path / "thr.data"
    d.mkdir()
    feats = {Feature.DIR_FORMAT: struct.pack("<Q", 1)}
    (d / "data").write_bytes(W.file_mode([(a, [10])], W.record(RT.FINISHED_INIT, b""), feats))
    comm = lambda n: W.record(RT.COMM, struct.pack("<ii", n, n) + W.cstr(f"t{n}"),  # noqa: E731
                              trailer=trailer_a(n, n, n, 0, 10))
    (d / "data.0").write_bytes(comm(1) + comm(2))
    (d / "data.10").write_bytes(comm(4))
    (d / "data.2").write_bytes(comm(3) + W.record(RT.AUXTRACE, struct.pack("<QQQIII4x", 8, 0, 0, 0, 3, 0))
                               + b"PAYLOAD!")
    with open_perf_data(d) as pd:
        assert pd.features["dir_format"] == 1 and pd.kcore_dir is None
        recs = list(pd.records())
        assert [r.comm for r in recs if r.name == "COMM"] == ["t1", "t2", "t3", "t4"]
        assert recs[1].src.endswith("data.0") and recs[0].src is None
        aux = [r for r in recs if r.name == "AUXTRACE"][0]
        assert aux.src.endswith("data.2") and bytes(pd.aux_data(aux)) == b"PAYLOAD!"
        assert pd.stats["COMM"] == 4
    # a cut record in a data.N file names that file
    (d / "data.10").write_bytes(comm(4)[:20])
    with open_perf_data(d) as pd:
        with pytest.raises(TruncatedError) as ei:
            list(pd.records())
        assert ei.value.source.endswith("data.10") and ei.value.offset == 0


def test_perf_config_terms_intel_pt_layout():
    from ptexport.perfdata import EventAttr

    a = EventAttr(W.attr(type=8, config=0x300E601 | 1 << 1 | 0xF << 19 | 1 << 55))
    assert perf_config_terms(a, "intel_pt") == {
        "pt": 1, "cyc": 1, "mtc": 1, "tsc": 1, "branch": 1, "mtc_period": 3, "cyc_thresh": 15,
        "psb_period": 3, "notnt": 1}
    b = EventAttr(W.attr(type=8, config=1 | 1 << 12 | 1 << 5 | 1 << 4 | 1 << 31 | 1 << 11 | 1 << 40))
    assert perf_config_terms(b) == {"pt": 1, "pwr_evt": 1, "fup_on_ptw": 1, "noretcomp": 1, "ptw": 1,
                                    "event": 1, "unknown": 1 << 40}


def test_errors_are_ptexport_errors():
    assert issubclass(TruncatedError, PtExportError)


def test_ordered_records_round_semantics_and_dir_merge(tmp_path):
    a = W.attr(sample_type=ST_A, flags=SID_ALL)

    def comm(t, name=None):
        return W.record(RT.COMM, struct.pack("<ii", t, t) + W.cstr(name or f"t{t}"), trailer=trailer_a(t, t, t, 0, 10))

    fr = W.record(RT.FINISHED_ROUND, b"")
    data = comm(5) + comm(3) + fr + comm(4) + fr + comm(1)
    pd = perf_data_from_bytes(W.file_mode([(a, [10])], data), "o.data")
    got = [r.comm if r.name == "COMM" else r.name for r in pd.ordered_records()]
    # perf releases a round's records at the *next* FINISHED_ROUND, up to the previous round's max time
    assert got == ["FINISHED_ROUND", "FINISHED_ROUND", "t3", "t4", "t5", "t1"]
    assert pd.stats["COMM"] == 4
    d = tmp_path / "dir.data"
    d.mkdir()
    (d / "data").write_bytes(W.file_mode([(a, [10])], W.record(RT.FINISHED_INIT, b""),
                                         {Feature.DIR_FORMAT: struct.pack("<Q", 1)}))
    (d / "data.0").write_bytes(comm(2) + comm(6))
    (d / "data.1").write_bytes(comm(1) + comm(7))
    with open_perf_data(d) as pd:
        got = [r.comm for r in pd.ordered_records() if r.name == "COMM"]
        assert got == ["t1", "t2", "t6", "t7"]
        assert pd.stats["COMM"] == 4


def _switches(n, t0=0, misc=PERF_RECORD_MISC_SWITCH_OUT):
    return b"".join(W.record(RT.SWITCH_CPU_WIDE, struct.pack("<ii", i, i), misc=misc if i % 3 else 0,
                             trailer=trailer_a(1, 1, t0 + i, i % 4, 10)) for i in range(n))


def test_header_walk_equals_parsed_records_across_same_size_runs():
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    odd = W.record(50, bytes(40))  # an unknown kernel type of the same size inside a run
    data = (_switches(500) + W.record(RT.MMAP, struct.pack("<iiQQQ", 1, 1, 0, 1, 0) + W.cstr("/x"),
                                      trailer=trailer_a(1, 1, 1, 0, 10))
            + _switches(300, 1000) + odd + _switches(70, 2000) + W.record(RT.FINISHED_ROUND, b"")
            + _switches(2000, 3000))
    raw = W.file_mode([(a, [10])], data)
    pd = perf_data_from_bytes(raw, "runs.data")
    heads = list(pd.iter_headers())
    stats = dict(pd.stats)
    recs = list(pd.records())
    assert heads == [(r.offset, r.type, r.misc, r.size) for r in recs]
    assert stats == dict(pd.stats) == {"SWITCH_CPU_WIDE": 2870, "MMAP": 1, "UNKNOWN(50)": 1, "FINISHED_ROUND": 1}
    assert [r.next_prev_pid for r in recs if r.name == "SWITCH_CPU_WIDE"][:3] == [0, 1, 2]
    # a run cut at the end: every whole record comes out first, then the typed error at the cut one
    cut = perf_data_from_bytes(raw[:len(raw) - 20], "cut.data")
    got = []
    with pytest.raises(TruncatedError) as ei:
        for h in cut.iter_headers():
            got.append(h)
    assert got == heads[:-1] and ei.value.offset == heads[-1][0]
    # a bad size inside a run
    bad = bytearray(raw)
    off = heads[1500][0]
    bad[off + 6:off + 8] = b"\x00\x00"
    pd = perf_data_from_bytes(bytes(bad), "bad.data")
    got = []
    with pytest.raises(PerfDataError, match="size 0 is smaller") as ei:
        for h in pd.iter_headers():
            got.append(h)
    assert got == heads[:1500] and ei.value.offset == off


def test_tracing_data_payload_is_skipped_in_files_and_streams():
    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    body = (W.header_attr(a, [10]) + W.record(RT.HEADER_TRACING_DATA, struct.pack("<I", 12)) + b"T" * 16
            + W.record(RT.COMM, struct.pack("<ii", 1, 1) + W.cstr("after"), trailer=trailer_a(1, 1, 5, 0, 10)))
    raw = W.pipe_mode(body)
    for pd in (perf_data_from_bytes(raw, "td.data"), open_perf_data_stream(raw)):
        recs = list(pd.records())
        assert [r.name for r in recs] == ["ATTR", "TRACING_DATA", "COMM"]
        assert recs[1].data_size == 12 and recs[2].comm == "after"
    with pytest.raises(TruncatedError, match="record TRACING_DATA"):
        list(perf_data_from_bytes(raw[:-(56 + 4)], "td.data").records())


def test_compressed_bomb_is_refused_without_eating_memory():
    import zstandard

    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    bomb = zstandard.ZstdCompressor(level=1).compress(bytes(80 << 20))  # 80 MiB of zeros in a few KiB
    raw = W.file_mode([(a, [10])], W.record(RT.COMPRESSED, bomb, pad=False))
    with pytest.raises(PerfDataError, match="decompresses to more than"):
        list(perf_data_from_bytes(raw, "bomb.data").records())


def test_fifo_is_streamed(tmp_path):
    import os
    import threading

    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    raw = W.pipe_mode(W.header_attr(a, [10]) + W.record(RT.COMM, struct.pack("<ii", 1, 1) + W.cstr("fifo"),
                                                        trailer=trailer_a(1, 1, 5, 0, 10)))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def writer():
        with open(fifo, "wb") as f:
            f.write(raw)

    t = threading.Thread(target=writer)
    t.start()
    with open_perf_data(fifo) as pd:
        assert pd.is_pipe and [r.name for r in pd.records()] == ["ATTR", "COMM"]
    t.join()
    with pytest.raises(PerfDataError, match="no such file"):
        open_perf_data(tmp_path / "missing.data")


def test_two_interleaved_passes_count_separately():
    pd = perf_data_from_bytes(two_attr_file(kernel_records()), "k.data")
    a, b = pd.records(), pd.iter_headers()
    next(a)
    assert len(list(b)) == 22 and pd.stats.total == 22
    assert len(list(a)) == 21 and pd.stats.total == 22


def test_short_and_long_runs_and_type_filter_agree_with_full_parse():
    import random

    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    rng = random.Random(7)
    parts = []
    t = 0
    for _ in range(120):
        n = rng.choice([1, 3, 9, 15, 40, 70, 200, 700])
        kind = rng.choice(["sw", "exit", "comm"])
        for _ in range(n):
            t += 1
            if kind == "sw":
                parts.append(W.record(RT.SWITCH_CPU_WIDE, struct.pack("<ii", t, t), trailer=trailer_a(1, 1, t, 0, 10)))
            elif kind == "exit":
                parts.append(W.record(RT.EXIT, struct.pack("<iiiiQ", t, 1, t, 1, t), trailer=trailer_a(1, 1, t, 1, 10)))
            else:
                parts.append(W.record(RT.COMM, struct.pack("<ii", t, t) + W.cstr(f"c{t % 7}"),
                                      trailer=trailer_a(t, t, t, 0, 10)))
    pd = perf_data_from_bytes(W.file_mode([(a, [10])], b"".join(parts)), "mix.data")
    full = [(r.offset, r.type, r.misc, r.size) for r in pd.records()]
    assert list(pd.iter_headers()) == full
    for want in ({RT.COMM}, {RT.EXIT, RT.COMM}, {RT.SWITCH_CPU_WIDE}):
        got = [(r.offset, r.type, r.misc, r.size) for r in pd.records(types=want)]
        assert got == [x for x in full if x[1] in want]
        assert pd.stats.total == len(full)


def test_one_unpack_parsers_equal_the_generic_ones(monkeypatch):
    import ptexport.perfdata.records as R

    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    t = lambda n: trailer_a(100, 101, n, 3, 10)  # noqa: E731
    data = (_switches(20) + W.record(RT.FORK, struct.pack("<iiiiQ", 2, 1, 3, 1, 9), trailer=t(1))
            + W.record(RT.EXIT, struct.pack("<iiiiQ", 2, 1, 3, 1, 9), trailer=t(2))
            + W.record(RT.AUX, struct.pack("<QQQ", 1, 2, 3), trailer=t(3))
            + W.record(RT.ITRACE_START, struct.pack("<ii", 5, 6), trailer=t(4))
            + W.record(RT.SWITCH, b"", misc=PERF_RECORD_MISC_SWITCH_OUT, trailer=t(5))
            + W.record(RT.LOST, struct.pack("<QQ", 10, 4), trailer=t(6))
            + W.record(RT.LOST_SAMPLES, struct.pack("<Q", 7), trailer=t(7))
            + W.record(RT.THROTTLE, struct.pack("<QQQ", 8, 10, 10), trailer=t(8))
            + W.record(RT.AUX_OUTPUT_HW_ID, struct.pack("<Q", 6), trailer=t(9))
            + W.record(RT.ITRACE_START, struct.pack("<ii", 5, 6) + bytes(8), trailer=t(10)))  # odd size
    raw = W.file_mode([(a, [10])], data)

    def snap():
        pd = perf_data_from_bytes(raw, "u.data")
        return [repr((type(r).__name__, r.offset, r.misc, r.size, r.fields(), r.sample_id)) for r in pd.records()]

    fast = snap()
    monkeypatch.setattr(R, "FIXED_SPECS", {})
    assert snap() == fast and len(fast) == 30


def test_declared_layouts_name_the_record_fields_in_order():
    """Each fixed-layout kind's struct fills its class's own fields in slot order (the trailer's values after the
    body's are ignored), and its fixed size is the header plus that struct; the SAMPLE head statement names
    SAMPLE_HEAD_LAYOUT's fields in order."""
    from ptexport.perfdata import records as R

    for cls, label, fixed, layout, set_fields in R.FIXED_SPECS.values():
        n = len(layout.unpack(bytes(layout.size)))
        own = list(cls.__slots__) if cls.__slots__ else list(cls.__mro__[1].__slots__)
        r = cls.__new__(cls)
        set_fields(r, tuple(range(100, 100 + n)) + (7, 8))
        assert fixed == 8 + layout.size, label
        assert [getattr(r, f) for f in own] == (list(range(100, 100 + n)) if n else [None] * len(own)), label
    head = [n for _bit, _fmt, names in R.SAMPLE_HEAD_LAYOUT for n in names]
    r = R.SampleRecord.__new__(R.SampleRecord)
    R._set_sample_head(r, tuple(head))
    assert [getattr(r, f) for f in head] == head


@pytest.mark.parametrize("which", ["TIME_CONV", "AUXTRACE_INFO"])
def test_clock_shift_past_63_is_a_typed_error_naming_the_field(which):
    # a u64 shifted by 64 or more has no meaning (perf's C would be undefined): the record is refused
    a = W.attr(type=8, config=0x300E601, sample_type=ST_A, flags=SID_ALL)
    if which == "TIME_CONV":
        rec = W.record(RT.TIME_CONV, struct.pack("<QQQ", 64, 1789569706, 0))
    else:
        rec = _intel_pt_info_record()
        rec = rec[:16 + 8] + struct.pack("<Q", 200) + rec[16 + 16:]  # priv[1]: the time_shift
    raw = W.file_mode([(a, [10])], W.record(RT.FINISHED_ROUND, b"") + rec)
    pd = perf_data_from_bytes(raw, "tc.data")
    off = pd.header["data_offset"] + 8
    with pytest.raises(PerfDataError, match=f"record {which}: time_shift (64|200) is larger than 63") as ei:
        list(pd.records())
    assert (ei.value.source, ei.value.offset) == ("tc.data", off)


def test_clock_mult_keeps_perfs_32_bits():
    # perf holds time_mult in a u32: a record's wider value truncates; one that truncates to 0 is no clock
    from ptexport.sideband.builder import SidebandBuilder

    class Rec:
        time_shift, time_zero = 31, 0
        time_mult = (7 << 32) | 1789569706

    b = SidebandBuilder()
    b.set_time_conv(Rec())
    assert b._time_conv is not None and b._time_conv.time_mult == 1789569706
    Rec.time_mult = 5 << 32
    b = SidebandBuilder()
    b.set_time_conv(Rec())
    assert b._time_conv is None
