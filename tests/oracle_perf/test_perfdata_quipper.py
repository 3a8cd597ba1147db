"""The real Skylake Intel PT recording: counts, attrs, AUXTRACE_INFO, TIME_CONV, features, payloads vs perf."""

from __future__ import annotations

import re

import pytest
from ptxtest import needs_perf

import perf_oracle as P
from ptexport.perfdata import IntelPTInfo, open_perf_data, perf_config_terms
from ptexport.perfdata.constants import AttrFlag, ReadFormat, SampleType

# perf 6.1 `perf report --stats` on this file (../shared/testdata/README.md)
EXPECTED_COUNTS = {"MMAP": 56, "COMM": 3, "EXIT": 1, "SAMPLE": 15, "MMAP2": 10, "AUX": 10, "ITRACE_START": 2,
                   "SWITCH_CPU_WIDE": 152, "FINISHED_ROUND": 4, "AUXTRACE_INFO": 1, "AUXTRACE": 2, "TIME_CONV": 1}


@pytest.fixture(scope="module")
def pd(quipper):
    with open_perf_data(quipper) as p:
        yield p


@pytest.fixture(scope="module")
def dump(quipper):
    return P.perf_dump(quipper)


def test_record_counts_match_perf_report_stats(pd):
    n = sum(1 for _ in pd.records())
    assert dict(pd.stats) == EXPECTED_COUNTS
    assert n == sum(EXPECTED_COUNTS.values()) == pd.stats.total
    # the fast path counts the same
    assert sum(1 for _ in pd.iter_headers()) == n


@needs_perf
def test_counts_equal_perf_61_output(pd, quipper):
    assert dict(pd.stats) == P.perf_stats(quipper)


@needs_perf
def test_attrs_match_header_only(pd, quipper):
    events = P.header_events(P.perf_header(quipper))
    assert len(events) == len(pd.attrs) == 4
    flag_names = {f.name.lower() for f in AttrFlag}
    for ev, a in zip(events, pd.attrs):
        assert a.name == ev["name"]
        assert a.ids == [int(x) for x in ev["id"].split(", ")]
        assert a.type == int(ev.get("type", "0"))
        assert a.size == int(ev["size"])
        assert a.config == int(ev.get("config", "0"), 0)
        assert a.sample_period == int(ev["sample_period"])
        assert "|".join(b.name for b in SampleType if a.sample_type & b) == ev["sample_type"]
        assert "|".join(b.name for b in ReadFormat if a.read_format & b) == ev["read_format"]
        set_flags = {k for k, v in ev.items() if k in flag_names and v == "1"}
        assert set(a.flag_names()) == set_flags
        for k in set_flags:
            assert getattr(a, k) is True


def test_intel_pt_config_terms(pd):
    pt = pd.attrs[0]
    assert pd.features["pmu_mappings"][pt.type] == "intel_pt"
    # 0x300e601: perf's default intel_pt// config on Skylake (tsc, mtc, mtc_period=3, branch, psb_period=3)
    assert perf_config_terms(pt, "intel_pt") == {"pt": 1, "mtc": 1, "tsc": 1, "branch": 1, "mtc_period": 3,
                                                 "psb_period": 3}
    assert pd.auxtrace_info.config_terms(pt.config) == {"tsc": 1, "mtc": 1, "mtc_period": 3}


@needs_perf
def test_auxtrace_info_and_time_conv_match_perf_script_D(pd, dump):
    info = pd.auxtrace_info
    assert isinstance(info, IntelPTInfo)
    (rec,) = [r for r in dump if r.type == 70]
    labels = ["PMU Type", "Time Shift", "Time Muliplier", "Time Zero", "Cap Time Zero", "TSC bit",
              "NoRETComp bit", "Have sched_switch", "Snapshot mode", "Per-cpu maps", "MTC bit", "MTC freq bits",
              "TSC:CTC numerator", "TSC:CTC denominator", "CYC bit", "Max non-turbo ratio", "Filter string len.",
              "Filter string"]
    vals = {}
    for line in rec.lines:
        text = line.strip()
        for lab in sorted(labels, key=len, reverse=True):
            if text.startswith(lab):
                vals[lab] = text[len(lab):].strip()
                break
    assert vals["PMU Type"] == str(info.pmu_type)
    assert vals["Time Shift"] == str(info.time_shift)
    assert vals["Time Muliplier"] == str(info.time_mult)  # sic (perf's spelling)
    assert vals["Time Zero"] == str(info.time_zero)
    assert vals["Cap Time Zero"] == str(int(info.cap_user_time_zero))
    assert int(vals["TSC bit"], 16) == info.tsc_bit
    assert int(vals["NoRETComp bit"], 16) == info.noretcomp_bit
    assert vals["Have sched_switch"] == str(info.have_sched_switch)
    assert vals["Snapshot mode"] == str(int(info.snapshot_mode))
    assert vals["Per-cpu maps"] == str(int(info.per_cpu_mmaps))
    assert int(vals["MTC bit"], 16) == info.mtc_bit
    assert int(vals["MTC freq bits"], 16) == info.mtc_freq_bits
    assert vals["TSC:CTC numerator"] == str(info.tsc_ctc_ratio_n)
    assert vals["TSC:CTC denominator"] == str(info.tsc_ctc_ratio_d)
    assert int(vals["CYC bit"], 16) == info.cyc_bit
    assert vals["Max non-turbo ratio"] == str(info.max_non_turbo_ratio)
    assert vals["Filter string len."] == str(info.filter_str_len)
    assert info.filter == vals.get("Filter string", "")
    (tc_rec,) = [r for r in dump if r.type == 79]
    tvals = dict(re.match(r"^\.\.\. (.*?)\s{2,}(\d+)$", ln).groups() for ln in tc_rec.lines
                 if ln.startswith("... Time"))
    tc = pd.time_conv
    assert (int(tvals["Time Shift"]), int(tvals["Time Muliplier"]), int(tvals["Time Zero"])) == (
        tc.time_shift, tc.time_mult, tc.time_zero)


@needs_perf
def test_every_record_offset_type_and_sample_matches_perf_script_D(pd, dump):
    # perf dumps user records when it reads them and kernel records when its ordered queue delivers
    # them, so compare in file-offset order
    ours = list(pd.records())
    dump = sorted(dump, key=lambda d: d.offset)
    assert [(r.offset, r.type, r.size if r.type != 71 else r.header_size) for r in ours] == [
        (d.offset, d.type, d.size) for d in dump]
    for r, d in zip(ours, dump):
        assert r.name == d.name
        if d.sample:
            assert (r.pid, r.tid, r.ip, r.period, r.misc) == (
                d.sample["pid"], d.sample["tid"], d.sample["ip"], d.sample["period"], d.sample["misc"])
            assert r.time == d.time
        elif r.sample_id is not None and r.sample_id.time:
            assert r.sample_id.time == d.time
        if r.name == "AUXTRACE":
            m = re.search(r"size: (0x[0-9a-f]+)\s+offset: (\w+)\s+ref: (0x[0-9a-f]+)\s+idx: (\d+)\s+tid: (-?\d+)"
                          r"\s+cpu: (-?\d+)", d.summary)
            assert (r.size, r.aux_offset, r.reference, r.idx, r.tid, r.cpu) == tuple(int(x, 0) for x in m.groups())
        if r.name == "SWITCH_CPU_WIDE":
            m = re.search(r"(OUT|IN)\s.*pid/tid:\s+(-?\d+)/(-?\d+)", d.summary)
            assert r.out == (m.group(1) == "OUT")
            assert (r.next_prev_pid, r.next_prev_tid) == (int(m.group(2)), int(m.group(3)))
        if r.name in ("MMAP", "MMAP2"):
            assert d.summary.rstrip().endswith(r.filename)
            assert f"{r.pid}/{r.tid}:" in d.summary
        if r.name == "COMM":
            assert f"{r.comm}:{r.pid}/{r.tid}" in d.summary
            assert ("exec" in d.summary) == r.exec


def test_aux_payloads_are_intel_pt(pd):
    recs = [r for r in pd.records() if r.name == "AUXTRACE"]
    assert [(r.cpu, r.size) for r in recs] == [(0, 12240), (3, 137728)]
    for r in recs:
        data = pd.aux_data(r)
        assert len(data) == r.size
        assert bytes(data[:16]) == b"\x02\x82" * 8  # PSB
    # the auxtrace index feature points at the same records
    assert [off for off, _ in pd.features["auxtrace"]] == [r.offset for r in recs]


def test_features_match_header_and_buildids(pd, quipper):
    f = pd.features
    assert f["hostname"] == "localhost" and f["osrelease"] == "4.14.18" and f["arch"] == "x86_64"
    assert f["nrcpus"] == (4, 4) and f["cpuid"] == "GenuineIntel,6,78,3" and f["total_mem"] == 16299868
    assert f["cpudesc"] == "Intel(R) Core(TM) m7-6Y75 CPU @ 1.20GHz"
    assert f["cmdline"][-3:] == ["--", "echo", "Hello, World!"]
    assert f["cpu_topology"]["thread_siblings"] == ["0-1", "2-3"]
    assert [c["core_id"] for c in f["cpu_topology"]["cpus"]] == [0, 0, 1, 1]
    assert f["pmu_mappings"][6] == "intel_pt"
    expected = {}
    for line in quipper.with_name(quipper.name + ".buildids").read_text().splitlines():
        bid, name = line.split(" ", 1)
        expected[name] = bid
    got = {b.filename: b.build_id.hex() for b in f["build_id"]}
    assert got == expected
    assert pd.unknown_features == [] and pd.feature_errors == []


@needs_perf
def test_features_match_perf_header_only(pd, quipper):
    hv = P.header_values(P.perf_header(quipper))
    f = pd.features
    assert hv["hostname"] == f["hostname"] and hv["os release"] == f["osrelease"]
    assert hv["arch"] == f["arch"] and hv["cpudesc"] == f["cpudesc"] and hv["cpuid"] == f["cpuid"]
    assert hv["nrcpus online"] == str(f["nrcpus"].nr_cpus_online)
    assert hv["nrcpus avail"] == str(f["nrcpus"].nr_cpus_avail)
    assert hv["total memory"] == f"{f['total_mem']} kB"
    assert hv["cmdline"] == " ".join(f["cmdline"])
    assert hv["data offset"] == str(pd.header["data_offset"]) and hv["data size"] == str(pd.header["data_size"])
    maps = dict(p.split(" = ") for p in hv["pmu mappings"].split(", "))
    assert {int(v): k for k, v in maps.items()} == f["pmu_mappings"]


@needs_perf
def test_ordered_records_follow_perfs_delivery_order(pd, dump):
    theirs = [(d.offset, d.type) for d in dump if d.type < 64]
    ours = [(r.offset, r.type) for r in pd.ordered_records() if r.type < 64]
    assert ours == theirs
    times = [r.sample_id.time for r in pd.ordered_records() if r.type < 64 and r.sample_id is not None]
    assert times == sorted(times)


@needs_perf
def test_pipe_conversion_of_the_intel_pt_file(pd, quipper, tmp_path):
    """`perf inject -o -` turns the PT recording into a pipe-mode one: the same records, attrs and payloads.

    perf itself must be fed such a file through a pipe: given as `-i FILE` perf 6.1 lseeks to a
    pipe-relative offset after each AUXTRACE record and loses its place."""
    import subprocess

    pipe = tmp_path / "pipe.data"
    with open(pipe, "wb") as f:
        subprocess.run(["perf", "inject", "-i", str(quipper), "-o", "-"], stdout=f, check=True,
                       stderr=subprocess.DEVNULL)
    with open_perf_data(pipe) as pp:
        assert pp.is_pipe and [a.name for a in pp.attrs] == [a.name for a in pd.attrs]
        assert [a.ids for a in pp.attrs] == [a.ids for a in pd.attrs]
        assert pp.auxtrace_info == pd.auxtrace_info and pp.time_conv == pd.time_conv
        recs = list(pp.records())
        assert dict(pp.stats) == P.perf_stats(pipe, via_pipe=True)
        kernel = [(r.type, r.misc, r.size, r.sample_id) for r in pd.records() if r.type < 64]
        assert [(r.type, r.misc, r.size, r.sample_id) for r in recs if r.type < 64] == kernel
        ours = [bytes(pp.aux_data(r)) for r in recs if r.name == "AUXTRACE"]
        assert ours == [bytes(pd.aux_data(r)) for r in pd.records() if r.name == "AUXTRACE"]
        theirs = [(d.offset + 16, d.type) for d in P.perf_dump(pipe, via_pipe=True) if d.type < 64]
        assert [(r.offset, r.type) for r in pp.ordered_records() if r.type < 64] == theirs
