"""The VM trace generator, checked against perf 6.1's guest workflows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptexport.errors import UsageError
from ptexport.synth.vm import K_SYSCALL, K_SYSRET, K_VMENTRY, K_VMEXIT, VmOptions, synthesize_vm
from ptexport.synth.vm_verify import compare, parse, perf_pipeline, vm_time_correlation

from ptxtest import needs_perf


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    out = tmp_path_factory.mktemp("vm_mixed")
    meta = synthesize_vm(out, VmOptions(branches=20_000, guest="mixed"))
    return out, meta


def test_layout_and_truth(mixed):
    out, meta = mixed
    for p in ("host.data/data", "host.data/kcore_dir/kcore", "host.data/kcore_dir/kallsyms",
              "guest.data/data", "guest.data/kcore_dir/kcore", "gprog", "truth.npz"):
        assert (out / p).exists(), p
    t = dict(np.load(out / "truth.npz"))
    assert len(t["time"]) == meta["branches"] >= 20_000
    assert np.all(np.diff(t["tsc"].astype(np.int64)) >= 0)
    guest = t["machine_pid"] == meta["machine_pid"]
    # both VCPUs ran, on both host CPUs, in guest kernel and guest user code
    assert set(t["vcpu"][guest]) == {0, 1}
    assert set(t["cpu"][guest]) == {0, 1}
    assert (t["to_ip"][guest] >= 0xFFFFFFFF80000000).any()
    assert ((t["to_ip"][guest] > 0) & (t["to_ip"][guest] < 0x500000)).any()
    # each VM entry / exit is two branches: host half with 0 as target, guest half from 0
    n_entry = (t["kind"] == K_VMENTRY).sum()
    assert n_entry % 2 == 0 and n_entry > 0
    assert ((t["kind"] == K_VMENTRY) & ~guest & (t["to_ip"] == 0)).sum() == n_entry // 2
    assert ((t["kind"] == K_VMEXIT) & guest & (t["to_ip"] == 0)).sum() == \
        (t["kind"] == K_VMEXIT).sum() // 2
    # the guest user threads make system calls into the guest kernel and return (sysretq)
    sc = t["kind"] == K_SYSCALL
    assert sc.sum() > 10 and (t["from_ip"][sc] < 0x500000).all()
    assert (t["to_ip"][sc] >= 0xFFFFFFFF80000000).all()
    assert abs(int(sc.sum()) - int((t["kind"] == K_SYSRET).sum())) <= 2
    vm = meta["vcpus"]
    assert vm[0]["vmcs"] != vm[1]["vmcs"]
    assert meta["guest_psbs"] > 0


def test_bad_options(tmp_path):
    with pytest.raises(UsageError):
        synthesize_vm(tmp_path, VmOptions(guest="nope"))
    with pytest.raises(UsageError):
        synthesize_vm(tmp_path, VmOptions(vcpus=2, tsc_offsets=(1,)))


@needs_perf
def test_perf_inject_guest_data_matches_truth(mixed, tmp_path):
    """perf inject --vm-time-correlation=OFFSET, --guest-data=guest.data,PID,OFFSET, then
    perf script --itrace=be -F machine_pid,vcpu,...: every branch, in order per CPU."""
    out, meta = mixed
    text = perf_pipeline(out, tmp_path)
    res = compare(out, parse(text))
    assert res["errors"] == []
    assert res["perf_branches"] == res["truth_branches"] == meta["branches"]
    assert res["mismatches"] == 0, res["first_mismatch"]
    # perf times a branch by the last timing packet: within one MTC period (2^3 CTC = 320 ns)
    assert res["max_time_error_ns"] <= 330
    p = parse(text)
    assert set(p.machine_pid[p.machine_pid >= 0]) == {meta["machine_pid"]}
    assert set(p.vcpu[p.vcpu >= 0]) == {0, 1}


@needs_perf
def test_perf_guestkallsyms_kernel_only(tmp_path):
    out = tmp_path / "k"
    meta = synthesize_vm(out, VmOptions(branches=5000, guest="kernel", seed=3))
    res = compare(out, parse(perf_pipeline(out, tmp_path / "w", inject_guest=False)),
                  guest_sideband=False)
    assert res["errors"] == []
    assert res["perf_branches"] == meta["branches"]
    assert res["mismatches"] == 0, res["first_mismatch"]


@needs_perf
def test_perf_dry_run_finds_offsets(tmp_path):
    out = tmp_path / "d"
    offs = (-0x123456789A0 & (2**64 - 1), -0x123456789A0 & (2**64 - 1))
    meta = synthesize_vm(out, VmOptions(branches=60_000, tsc_offsets=offs))
    assert meta["guest_psbs"] > 0
    r = vm_time_correlation(out / "host.data" / "data", "dry-run", tmp_path)
    lines = sorted(line for line in (r.stdout + r.stderr).splitlines() if line.startswith("VMCS"))
    want = sorted(f"VMCS: {v['vmcs']:#x}  TSC Offset {v['tsc_offset']:#x}" for v in meta["vcpus"])
    assert lines == want
    assert json.loads((out / "truth.json").read_text())["vcpus"][0]["tsc_offset"] == offs[0]


def test_synth_vm_cli(tmp_path):
    import io

    from ptexport.cli import main

    out = io.StringIO()
    rc = main(["synth", "--vm", "user", "--out", str(tmp_path / "v"), "--branches", "3000",
               "--vcpus", "3", "--cpus", "2"], out)
    assert rc == 0, out.getvalue()
    meta = json.loads((tmp_path / "v" / "truth.json").read_text())
    assert [v["vcpu"] for v in meta["vcpus"]] == [0, 1, 2]
    assert len({v["vmcs"] for v in meta["vcpus"]}) == 3
    assert "perf inject" in out.getvalue()
    bad = main(["synth", "--vm", "user", "--out", str(tmp_path / "b"), "--tsc-offset", "xyz"],
               io.StringIO())
    assert bad != 0


@needs_perf
def test_synth_vm_cli_check(tmp_path):
    import io

    from ptexport.cli import main

    out = io.StringIO()
    rc = main(["synth", "--vm", "mixed", "--out", str(tmp_path / "v"), "--branches", "5000",
               "--cpus", "2", "--tsc-offset=-0x10000000", "--tsc-offset=-0x10000000",
               "--check"], out)
    assert rc == 0, out.getvalue()
    assert ", 0 mismatches" in out.getvalue()


@needs_perf
@pytest.mark.parametrize("variant", [
    # (guest, vcpus, cpus, psb_period, aux_chunk, guest_tsc_every, guest_insns, runs_per_slot)
    ("mixed", 3, 3, 256, 512, 0, 50, 1),
    ("user", 2, 1, 1024, 8192, 1, 2000, 5),
    ("kernel", 2, 2, 256, 512, 3, 2000, 12),
    ("mixed", 2, 2, 512, 8192, 1, 300, 5, True),      # with CYC (intel_pt/cyc/)
    ("kernel", 2, 1, 1024, 2048, 0, 300, 5, True),
])
def test_variants_decode_like_perf(variant, tmp_path):
    guest, vcpus, cpus, psb, chunk, every, insns, runs, *cyc = variant
    out = tmp_path / "o"
    meta = synthesize_vm(out, VmOptions(branches=6000, guest=guest, vcpus=vcpus, cpus=cpus,
                                        psb_period=psb, aux_chunk=chunk, guest_tsc_every=every,
                                        guest_insns=insns, runs_per_slot=runs, seed=cpus,
                                        cyc=bool(cyc)))
    sideband = guest != "kernel"
    res = compare(out, parse(perf_pipeline(out, tmp_path / "w", inject_guest=sideband)),
                  guest_sideband=sideband)
    assert res["errors"] == []
    assert res["perf_branches"] == meta["branches"]
    assert res["mismatches"] == 0, res["first_mismatch"]
    assert res["max_time_error_ns"] <= 330


@needs_perf
def test_tsc_scaling(tmp_path):
    """Guest TSC = host TSC * 1.5 + offset: perf inject --guest-data=...,OFFSET,1.5 puts the
    guest's switch events at the right host times (without the scale they land elsewhere)."""
    out = tmp_path / "s"
    meta = synthesize_vm(out, VmOptions(branches=8000, tsc_scale=1.5, seed=2))
    assert meta["tsc_multiplier"] == 3 << 47 and meta["guest_psbs"] == 0
    res = compare(out, parse(perf_pipeline(out, tmp_path / "w")))
    assert res["mismatches"] == 0 and res["perf_branches"] == meta["branches"]
    meta["tsc_scale"] = 1.0
    (out / "truth.json").write_text(json.dumps(meta))
    assert compare(out, parse(perf_pipeline(out, tmp_path / "w2")))["mismatches"] > 0
    with pytest.raises(UsageError):
        synthesize_vm(tmp_path / "x", VmOptions(tsc_scale=1.5, guest_tsc_every=2))
