"""Generated traces decode in perf 6.1 to exactly the generator's ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from ptxtest import needs_perf, slow_after
from ptexport.synth.generate import KIND_CALL, KIND_RET, SynthOptions, synthesize
from ptexport.synth.verify import compare_branches, load_truth, parse_branches, perf_script

pytestmark = [needs_perf, pytest.mark.perf]

MTC_PERIOD_NS = 320   # 80 TSC ticks per CTC << 3, TSC at 2 GHz


def _check(out, *, itrace="b", kinds=None, per="cpu", max_err=MTC_PERIOD_NS, expect_errors=()):
    proc = perf_script(out / "perf.data", itrace)
    assert proc.returncode == 0, proc.stderr
    perf = parse_branches(proc.stdout)
    truth, meta = load_truth(out)
    if not expect_errors:
        assert not perf.other, perf.other[:5]
    cmp = compare_branches(truth, perf, per=per, kinds=kinds)
    assert cmp.mismatches == 0, cmp.first_mismatch
    assert cmp.compared == (len(truth["kind"]) if kinds is None
                            else int(np.isin(truth["kind"], list(kinds)).sum()))
    assert cmp.monotonic
    if max_err is not None:
        assert cmp.max_time_error_ns < max_err
        assert np.all(truth["time"][: len(perf.time)] >= 0)
    return truth, meta, perf


VARIANTS = {
    "loops-default": SynthOptions(program="loops"),
    "calls-retcomp": SynthOptions(program="calls", retcomp=True),
    "calls-noretcomp": SynthOptions(program="calls", retcomp=False),
    "calls-short-tnt": SynthOptions(program="calls", tnt="short"),
    "loops-short-tnt": SynthOptions(program="loops", tnt="short"),
    "calls-ip-full": SynthOptions(program="calls", ip_mode="full"),
    "calls-ip-sext48": SynthOptions(program="calls", ip_mode="sext48"),
    "calls-ip-upd48": SynthOptions(program="calls", ip_mode="upd48"),
    "calls-ip-mixed": SynthOptions(program="calls", ip_mode="mixed", psb_period=512),
}


@pytest.mark.parametrize("name", slow_after(sorted(VARIANTS)))
def test_variant_matches_perf(tmp_path, name):
    opts = VARIANTS[name]
    opts.branches = 30_000
    res = synthesize(tmp_path, opts)
    assert res.branches >= 30_000
    truth, meta, _ = _check(tmp_path)
    _check(tmp_path, itrace="cr", kinds={KIND_CALL, KIND_RET})
    used = {int(k): v for k, v in meta["ipbytes_used"].items()}
    if opts.ip_mode == "mixed":
        # every IP compression the SDM defines occurs (0 = suppressed for TIP.PGD)
        assert all(used[k] > 0 for k in (0, 1, 2, 3, 4, 6)), used
    if opts.ip_mode == "full":
        assert used[6] > 0 and used[1] == used[2] == used[3] == used[4] == 0
    if name == "calls-noretcomp":
        assert (perf_data_config(tmp_path) >> 11) & 1


def perf_data_config(out):
    proc = perf_script(out / "perf.data", "b", extra=["--header-only"])
    for line in proc.stdout.splitlines():
        if "intel_pt" in line and "config = " in line:
            return int(line.split("config = ")[1].split(",")[0], 16)
    raise AssertionError(proc.stdout[:2000])


@pytest.mark.slow
def test_million_branches_match_perf(tmp_path):
    """1 M branches of real emulation: 4 threads on 4 CPUs, switches and migrations."""
    res = synthesize(tmp_path, SynthOptions(program="threads", branches=1_000_000, cpus=4,
                                            replay="off"))
    assert res.branches >= 1_000_000
    truth, _, perf = _check(tmp_path)
    assert len(perf.flags) == res.branches
    assert set(perf.cpu.tolist()) == {0, 1, 2, 3} and len(set(perf.tid.tolist())) == 4


TIMING = {
    "tsc-only": SynthOptions(program="calls", timing="tsc"),
    "mtc-period0": SynthOptions(program="calls", timing="mtc", mtc_period=0),
    "cyc": SynthOptions(program="calls", timing="cyc"),
    "cyc-cbr-slow": SynthOptions(program="loops", timing="cyc", cbr=10),
    "cyc-cbr-turbo": SynthOptions(program="loops", timing="cyc", cbr=40),
    "mtc-cbr": SynthOptions(program="calls", timing="mtc", cbr=20),
}


@pytest.mark.parametrize("name", slow_after(sorted(TIMING)))
def test_timing_variant(tmp_path, name):
    opts = TIMING[name]
    opts.branches = 20_000
    synthesize(tmp_path, opts)
    mtc_ns = (80 << opts.mtc_period) // 2
    truth, meta, perf = _check(tmp_path, max_err=None if opts.timing == "tsc" else mtc_ns)
    err = truth["time"].astype(np.int64) - perf.time
    if opts.timing == "tsc":
        # only PSB+ and the TSC at each trace start time the branches: perf is never ahead
        assert err.min() >= 0
    else:
        assert err.min() >= -mtc_ns
    cfg = perf_data_config(tmp_path)
    assert bool(cfg & (1 << 9)) == (opts.timing != "tsc")      # mtc
    assert bool(cfg & (1 << 1)) == (opts.timing == "cyc")      # cyc
    if opts.cbr:
        proc = perf_script(tmp_path / "perf.data", "b", extra=["-D"])
        assert f"CBR {opts.cbr:#x}" in proc.stdout or f"CBR {opts.cbr}" in proc.stdout


@pytest.mark.parametrize("cpus", slow_after([1, 2, 4]))
def test_threads_on_cpus(tmp_path, cpus):
    synthesize(tmp_path, SynthOptions(program="threads", branches=20_000, cpus=cpus))
    truth, meta, perf = _check(tmp_path)
    assert len(set(perf.tid.tolist())) == 4
    assert set(perf.cpu.tolist()) == set(range(cpus))
    # every thread's branches in perf's order agree with the ground truth too
    _check(tmp_path, per="tid")
    proc = perf_script(tmp_path / "perf.data", "b", extra=["--show-switch-events"])
    switches = [ln for ln in proc.stdout.splitlines() if "PERF_RECORD_SWITCH_CPU_WIDE" in ln]
    assert len(switches) > 20


@pytest.mark.parametrize("prog,cpus", slow_after([("calls", 1), ("threads", 2)], unpack=True))
def test_instructions_match_perf(tmp_path, prog, cpus):
    from ptexport.synth.verify import compare_instructions

    synthesize(tmp_path, SynthOptions(program=prog, branches=20_000, cpus=cpus))
    cmp = compare_instructions(tmp_path)
    assert cmp.mismatches == 0, cmp.first_mismatch
    assert cmp.compared == len(np.load(tmp_path / "truth_insns.npz")["ip"])


def test_per_thread_layout(tmp_path):
    from ptexport.synth.verify import compare_instructions

    synthesize(tmp_path, SynthOptions(program="threads", branches=20_000, cpus=2,
                                      per_thread=True))
    truth, meta, perf = _check(tmp_path, per="tid")
    assert set(perf.cpu.tolist()) == {-1}
    assert len(set(perf.tid.tolist())) == 4
    proc = perf_script(tmp_path / "perf.data", "b", extra=["-D"])
    assert "Per-cpu maps        0" in proc.stdout
    cmp = compare_instructions(tmp_path, per="tid")
    assert cmp.mismatches == 0, cmp.first_mismatch


@pytest.mark.parametrize("cpus", slow_after([1, 2]))
def test_fork_exec(tmp_path, cpus):
    synthesize(tmp_path, SynthOptions(program="forkexec", branches=20_000, cpus=cpus))
    truth, meta, perf = _check(tmp_path)
    assert (tmp_path / "calls").exists() and (tmp_path / "forkexec").exists()
    proc = perf_script(tmp_path / "perf.data", "b",
                       extra=["--show-task-events", "--show-mmap-events"])
    text = proc.stdout
    assert "PERF_RECORD_FORK(1001:1001):(1000:1000)" in text
    assert "PERF_RECORD_COMM exec: calls:1001/1001" in text
    mmaps = [ln for ln in text.splitlines() if "PERF_RECORD_MMAP2" in ln]
    assert any(ln.endswith("/forkexec") for ln in mmaps) and any(ln.endswith("/calls") for ln in mmaps)
    # the child runs both programs: forkexec's code before the exec, calls' after it
    child = perf.tid == 1001
    assert child.sum() > 1000 and (perf.tid == 1000).sum() > 10


@pytest.mark.parametrize("prog,cpus,retcomp", slow_after([("calls", 1, True), ("threads", 2, False)], unpack=True))
def test_error_variants(tmp_path, prog, cpus, retcomp):
    from ptexport.synth.verify import aux_truncations, dump_offsets, parse_errors, perf_dump

    synthesize(tmp_path, SynthOptions(program=prog, branches=60_000, cpus=cpus, retcomp=retcomp,
                                      ovf=2, corrupt=2, truncate=1, psb_period=2048))
    truth, meta, perf = _check(tmp_path, itrace="be", expect_errors=True)
    errs = meta["errors"]
    kinds = [e["kind"] for e in errs]
    assert kinds.count("overflow") >= 2 * cpus - 1 and "bad packet" in kinds
    assert "lost trace data" in kinds
    # the faults sit at the offsets the generator put them, as perf's packet dump shows
    dump = perf_dump(tmp_path / "perf.data")
    where = lambda kind: sorted((e["cpu"], e["offset"]) for e in errs if e["kind"] == kind)
    assert sorted(dump_offsets(dump, "OVF")) == where("overflow")
    assert sorted(dump_offsets(dump, "Bad packet!")) == where("bad packet")
    assert sorted(aux_truncations(dump)) == where("lost trace data")
    # and perf reports each error where its decoder stood: same code, CPU, IP and time
    perr = parse_errors(perf.other)
    for e in errs:
        hits = [p for p in perr if p["code"] == e["code"] and p["cpu"] == e["cpu"]
                and p["ip"] == e["ip"] and abs(p["time"] - e["time"]) < MTC_PERIOD_NS]
        assert len(hits) == 1, (e, perr)
    # the only other errors: "Trace doesn't match instruction" where perf meets the PSB
    # after a bad packet or a truncation, on that CPU right after it stopped
    stops = [(e["cpu"], e["stop_time"]) for e in errs if "stop_time" in e]
    follow = [p for p in perr if p["code"] == 6]
    assert all(any(c == p["cpu"] and 0 <= p["time"] - t < MTC_PERIOD_NS for c, t in stops)
               for p in follow), follow
    assert len(follow) >= kinds.count("bad packet")
    assert len(perr) == len(errs) + len(follow)


@pytest.mark.slow
@pytest.mark.parametrize("prog,timing", [("calls", "mtc"), ("loops", "cyc")])
def test_replay_million_branches_match_perf(tmp_path, prog, timing):
    """The fast method (one round encoded, replayed behind fresh PSB+) against perf."""
    res = synthesize(tmp_path, SynthOptions(program=prog, branches=1_000_000, replay="on",
                                            timing=timing))
    assert res.meta["replay"]["repeat"] > 100
    truth, _, perf = _check(tmp_path)
    assert len(perf.flags) == res.branches >= 1_000_000


def test_replay_rate(tmp_path):
    """--branches 20 M is made at well over 5 M branches/s (50 M takes ~1 s here).

    CPU time of this process, so that other jobs on a shared machine do not count."""
    import time

    t0 = time.process_time()
    res = synthesize(tmp_path, SynthOptions(program="calls", branches=20_000_000))
    dt = time.process_time() - t0
    assert res.branches >= 20_000_000
    assert res.branches / dt > 5_000_000, f"{res.branches / dt:.0f} branches/s"
    assert (tmp_path / "truth.npz").stat().st_size < 100_000   # stored as head/round/tail
    assert (tmp_path / "perf.data").stat().st_size > 20_000_000


@pytest.mark.parametrize("pipe,kcore", slow_after([(True, False), (False, True), (True, True)], unpack=True))
def test_pipe_mode_and_kcore_dir(tmp_path, pipe, kcore):
    from ptexport.synth.verify import is_pipe_format

    res = synthesize(tmp_path, SynthOptions(program="threads", branches=20_000, cpus=2,
                                            pipe=pipe, kcore=kcore))
    data = tmp_path / ("data" if kcore else "perf.data")
    assert res.perf_data == data
    assert is_pipe_format(data) == pipe
    if kcore:
        assert sorted(p.name for p in (tmp_path / "kcore_dir").iterdir()) == [
            "kallsyms", "kcore", "modules"]
        # perf takes the directory itself as input and reads OUT/data
        proc = perf_script(tmp_path, "b") if not pipe else perf_script(data, "b")
    else:
        proc = perf_script(data, "b")
    assert proc.returncode == 0, proc.stderr
    perf = parse_branches(proc.stdout)
    truth, _ = load_truth(tmp_path)
    cmp = compare_branches(truth, perf)
    assert cmp.mismatches == 0 and cmp.compared == len(truth["kind"]), cmp.first_mismatch


@pytest.mark.parametrize("ptwrite,power", [("fup", False), ("nofup", False), ("off", True),
                                           ("fup", True)])
def test_ptwrite_and_power_events(tmp_path, ptwrite, power):
    from ptexport.synth.generate import EV_NAMES
    from ptexport.synth.verify import parse_events

    synthesize(tmp_path, SynthOptions(program="events", branches=8_000, ptwrite=ptwrite,
                                      power=power))
    _check(tmp_path)                                     # branches are unchanged by events
    proc = perf_script(tmp_path / "perf.data", "bwp", fields="tid,cpu,time,synth,ip,event")
    got = parse_events(proc.stdout)
    truth, meta = load_truth(tmp_path)
    kinds = set(truth["ev_kind"].tolist())
    assert ("ptwrite" in {EV_NAMES[k] for k in kinds}) == (ptwrite != "off")
    assert ({"mwait", "pwre", "exstop", "pwrx"} <= {EV_NAMES[k] for k in kinds}) == power
    for col in ("ev_cpu", "ev_tid", "ev_ip", "ev_kind", "ev_payload"):
        assert np.array_equal(got[col], truth[col]), col
    assert np.abs(got["ev_time"] - truth["ev_time"]).max() < MTC_PERIOD_NS
    cfg = perf_data_config(tmp_path)
    assert bool(cfg & (1 << 12)) == (ptwrite != "off")   # ptw
    assert bool(cfg & (1 << 5)) == (ptwrite == "fup")    # fup_on_ptw
    assert bool(cfg & (1 << 4)) == power                 # pwr_evt


# Every variant through all three of perf's views: --itrace=b (above), cr and i1i.
MATRIX = {
    "basic": dict(program="loops"),
    "noretcomp-short-tnt": dict(program="calls", retcomp=False, tnt="short"),
    "ip-mixed": dict(program="calls", ip_mode="mixed", psb_period=512),
    "tsc-only": dict(program="calls", timing="tsc"),
    "cyc-cbr": dict(program="calls", timing="cyc", cbr=10),
    "threads-4cpus": dict(program="threads", cpus=4),
    "per-thread": dict(program="threads", cpus=2, per_thread=True),
    "forkexec": dict(program="forkexec", cpus=2),
    "events": dict(program="events", ptwrite="fup", power=True),
    "pipe": dict(program="threads", cpus=2, pipe=True),
    "kcore": dict(program="calls", kcore=True),
    "replay": dict(program="calls", replay="on"),
    "preempt": dict(program="threads", cpus=3, preempt=600),
}


@pytest.mark.parametrize("name", slow_after(sorted(MATRIX)))
def test_variant_matrix_cr_and_instructions(tmp_path, name):
    from ptexport.synth.generate import KIND_JCC, KIND_JMP, KIND_NAMES
    from ptexport.synth.verify import compare_instructions

    opts = SynthOptions(branches=8_000, **MATRIX[name])
    res = synthesize(tmp_path, opts)
    per = "tid" if opts.per_thread else "cpu"
    # calls and returns: every branch but jcc/jmp (trace begin/end count as return/call)
    cr_kinds = set(range(len(KIND_NAMES))) - {KIND_JCC, KIND_JMP}
    proc = perf_script(res.perf_data, "cr")
    perf = parse_branches(proc.stdout)
    truth, _ = load_truth(tmp_path)
    cmp = compare_branches(truth, perf, per=per, kinds=cr_kinds)
    sel = np.isin(truth["kind"], list(cr_kinds))
    assert cmp.mismatches == 0 and cmp.compared == int(sel.sum()), cmp.first_mismatch
    if (tmp_path / "truth_insns.npz").exists():
        ci = compare_instructions(tmp_path, res.perf_data, per=per)
        assert ci.mismatches == 0 and ci.compared > 8_000, ci.first_mismatch
    else:
        assert opts.replay == "on"


def test_preemption(tmp_path):
    """Timer interrupts: FUP + TIP.PGD ("tr end  async"), preempted switch-outs."""
    from ptexport.synth.generate import KIND_ASYNC

    synthesize(tmp_path, SynthOptions(program="threads", branches=20_000, cpus=2, preempt=500))
    truth, meta, perf = _check(tmp_path)
    assert (truth["kind"] == KIND_ASYNC).sum() > 20
    proc = perf_script(tmp_path / "perf.data", "b", extra=["--show-switch-events"])
    assert proc.stdout.count("OUT preempt") > 10
