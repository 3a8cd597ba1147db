"""perf's est_tsc on timed traces: a branch from the kernel or from nowhere into user space is dated by the
decoder's estimated timestamp, on every timed session (perf 6.1: ``est_tsc = !timeless_decoding`` in
intel_pt_process_auxtrace_info, tested per sample in intel_pt_run_decoder; sync_switch no longer clears it).

Generated traces (``ptexport synth``: CYC or MTC timing, with and without the generator's OVF, corruption and
truncation faults, one or two CPUs, interrupts) are damaged by seeded byte flips, PAD runs and garbage inside
their AUX data, so that after a decode error the estimate and the last timestamp part; ``dump branches
--itrace=be`` must then print perf script's lines, times included, for every seed.  Each trace is tested as
recorded (user space only: ``intel_pt//u``) and with the events' exclude_kernel bit cleared (kernel traced
too), where perf keeps est_tsc on.  Each variant must also be one where the rule shows: with est_tsc off
some seed differs from perf.  The reference decoder is held to perf on those seeds.  A VM recording (``synth
--vm mixed``: host kernel code, guest kernel and guest user code, system calls and sysret) after perf's
inject workflow is the kernel+user trace with kernel addresses, damaged the same way.

Two rules that the estimate brings out are held to perf as well: a sample dated back by the estimate keeps
the thread (and maps) of the highest time its queue reached, since perf has processed the sideband up to
there (seeds whose switch falls in between); and a walk that fails ("Failed to get instruction") counts no
instructions, as perf's walker reports its count only on success (the estimate after it goes by that count).
"""

from __future__ import annotations

import io
import random
import subprocess

import pytest

from ptxtest import perf_branch_lines as _perf, our_branch_lines as _ours, first_difference as _diff, kernel_traced as _kernel_traced, damage_aux as _damage, needs_perf
from ptexport.cli import main
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import RecordType as RT
from ptexport.session.perfsession import PerfSession

pytestmark = needs_perf

SEEDS = range(6)
# (synth options, kernel traced): every base is 15 000 branches
VARIANTS = {
    "user-cyc": (("--program", "threads", "--timing", "cyc", "--psb-period", "2048", "--seed", "17"), False),
    "user-mtc": (("--program", "threads", "--timing", "mtc", "--psb-period", "2048", "--seed", "17"), False),
    "user-cyc-2cpus-ovf-truncate": (("--program", "threads", "--timing", "cyc", "--cpus", "2", "--ovf", "2",
                                     "--truncate", "2", "--psb-period", "1024", "--seed", "5"), False),
    "kernel-cyc": (("--program", "threads", "--timing", "cyc", "--psb-period", "2048", "--seed", "17"), True),
    "kernel-mtc": (("--program", "threads", "--timing", "mtc", "--psb-period", "2048", "--seed", "17"), True),
    "kernel-mtc-preempt-corrupt": (("--program", "calls", "--timing", "mtc", "--preempt", "700", "--corrupt", "2",
                                    "--psb-period", "1024", "--seed", "6"), True),
}


def _damaged(data: bytes, spans, seed: int, rounds: int = 1) -> bytes:
    rng = random.Random(seed)
    for _ in range(rounds):
        data = _damage(data, spans, rng)
    return data


@pytest.mark.slow
@pytest.mark.parametrize("name", list(VARIANTS))
def test_times_after_errors_equal_perf(tmp_path, monkeypatch, synth_trace, name):
    opts, kernel = VARIANTS[name]
    base = synth_trace("--branches", "15000", *opts) / "perf.data"  # the same for user-X and kernel-X
    data = base.read_bytes()
    if kernel:
        data = _kernel_traced(data)
    with open_perf_data(base) as pd:
        spans = [(r.data_offset, r.size) for r in pd.records(types=(RT.AUXTRACE,))]
    assert spans
    damaged = []
    for seed in SEEDS:
        path = tmp_path / f"s{seed}.data"
        path.write_bytes(_damage(data, spans, random.Random(seed)))
        theirs = _perf(path)
        assert any("instruction trace error" in line for line in theirs), seed  # the damage shows
        mine = _ours(path)
        assert mine == theirs, f"seed {seed}: " + _diff(mine, theirs)
        damaged.append((seed, path, theirs))
    with open_perf_data(damaged[0][1]) as pd:
        assert any(not a.exclude_kernel for a in pd.attrs) == kernel
    # The rule shows here: dated by the last timestamp instead, some seed differs from perf.
    with monkeypatch.context() as m:
        m.setattr(PerfSession, "_est_tsc", property(lambda s: False))
        shows = [(seed, path, theirs) for seed, path, theirs in damaged if _ours(path) != theirs]
    assert shows, f"{name}: no seed where perf's est_tsc changes a time"
    # The reference decoder on those seeds.
    from ptexport.session import queues_compiled as perffast_order
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)
    monkeypatch.setattr(perffast_order, "numba", None)
    for seed, path, theirs in shows:
        mine = _ours(path)
        assert mine == theirs, f"reference decoder, seed {seed}: " + _diff(mine, theirs)


def _perf_vm(inj, cwd, fields: str) -> list[str]:
    r = subprocess.run(["perf", "script", "-i", str(inj), "--itrace=be", "--ns", "-F", fields], capture_output=True,
                       text=True, cwd=str(cwd), timeout=300)
    assert r.returncode == 0, r.stderr[-500:]
    return [line for line in r.stdout.splitlines() if "[00" in line or "instruction trace error type" in line]


def _dump_vm(inj) -> list[str]:
    out = io.StringIO()
    assert main(["dump", "branches", "--jobs", "1", str(inj), "--itrace=be"], out=out) == 0, out.getvalue()[-500:]
    return out.getvalue().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("cyc", [False, True], ids=["mtc", "cyc"])
def test_vm_kernel_and_user_times_after_errors_equal_perf(tmp_path, monkeypatch, cyc):
    from ptexport.synth.vm import VmOptions, synthesize_vm
    from ptexport.synth.vm_verify import FIELDS, perf_pipeline

    synthesize_vm(tmp_path / "o", VmOptions(branches=8000, guest="mixed", vcpus=2, cpus=2, seed=33, cyc=cyc,
                                            psb_period=1024))
    perf_pipeline(tmp_path / "o", tmp_path / "w")
    inj = tmp_path / "w" / "inj.data"
    data = (inj / "data").read_bytes()
    with open_perf_data(inj / "data") as pd:
        spans = [(r.data_offset, r.size) for r in pd.records(types=(RT.AUXTRACE,))]
        assert any(not a.exclude_kernel and not a.exclude_user for a in pd.attrs)
    assert spans
    for seed in range(4):
        (inj / "data").write_bytes(_damage(data, spans, random.Random(seed)))
        theirs = _perf_vm(inj, tmp_path / "w", FIELDS)
        assert any("instruction trace error" in line for line in theirs), seed
        assert any(line.startswith("VM: ") for line in theirs)
        mine = _dump_vm(inj)
        assert mine == theirs, f"seed {seed}: " + _diff(mine, theirs)
        with monkeypatch.context() as m:
            m.setattr(PerfSession, "_est_tsc", property(lambda s: False))
            assert _dump_vm(inj) != theirs, f"seed {seed}: est_tsc changes no time"
        if seed == 0:
            from ptexport.session import queues_compiled as perffast_order
            with monkeypatch.context() as m:
                m.setenv("PTEXPORT_REFERENCE", "1")
                m.setattr(perffast_order, "numba", None)
                mine = _dump_vm(inj)
            assert mine == theirs, "reference decoder: " + _diff(mine, theirs)


@pytest.fixture(scope="module")
def user_cyc(synth_trace):
    d = synth_trace("--branches", "15000", *VARIANTS["user-cyc"][0])
    with open_perf_data(d / "perf.data") as pd:
        spans = [(r.data_offset, r.size) for r in pd.records(types=(RT.AUXTRACE,))]
    return (d / "perf.data").read_bytes(), spans


def _both_decoders_equal_perf(path, monkeypatch) -> list[str]:
    theirs = _perf(path)
    mine = _ours(path)
    assert mine == theirs, "compiled decoder: " + _diff(mine, theirs)
    from ptexport.session import queues_compiled as perffast_order
    with monkeypatch.context() as m:
        m.setenv("PTEXPORT_REFERENCE", "1")
        m.setattr(perffast_order, "numba", None)
        mine = _ours(path)
    assert mine == theirs, "reference decoder: " + _diff(mine, theirs)
    return theirs


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 24, 27])
def test_sample_dated_back_keeps_the_later_thread(user_cyc, tmp_path, monkeypatch, seed):
    """A "tr strt" dated back by the estimate, before a context switch its queue has already passed:
    perf gives it the thread switched to (its current tid), not the one current at the earlier time."""
    data, spans = user_cyc
    path = tmp_path / "t.data"
    path.write_bytes(_damaged(data, spans, seed))
    theirs = _both_decoders_equal_perf(path, monkeypatch)
    back, last, tids = 0, None, set()
    for line in theirs:
        f = line.split()
        if f[0] != "instruction":
            t = int(f[2].rstrip(":").replace(".", ""))
            back += last is not None and t < last
            last = t
            tids.add(f[0])
    assert back and len(tids) > 1


def test_failed_walk_counts_no_instructions(user_cyc, tmp_path, monkeypatch):
    """Corruption sends the walk into code it falls off (bytes that decode as no instruction): perf's
    "Failed to get instruction" error and every estimate after it count none of the walk's instructions."""
    data, spans = user_cyc
    path = tmp_path / "w.data"
    path.write_bytes(_damaged(data, spans, 7, rounds=3))
    theirs = _both_decoders_equal_perf(path, monkeypatch)
    assert any("code 5: Failed to get instruction" in line for line in theirs)
