"""Decoding VM traces in perf mode: guest code, VCPU attribution, equal to perf 6.1's pipeline.

The generated host recording (ptexport synth --vm) is decoded like perf does it:
* guest kernel only: ``perf script -i host --guestkallsyms=...`` (perf's default guest,
  no guest sideband: guest branches stay on the host thread);
* with guest sideband: ``perf inject --guest-data`` then ``perf script -F machine_pid,vcpu,...``
  (guest branches carry the guest machine, the VCPU and the guest thread).
Our samples are compared per host CPU, in order, with perf's lines.

The compiled decoder (flow/perffast) does not read guest code yet: these tests decode with
the reference decoder (PTEXPORT_REFERENCE=1 makes decoder/backend.py pick it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptexport.decoder.codewalk import KcoreCode, PerfCodeWalker
from ptexport.synth.vm import VmOptions, synthesize_vm
from ptexport.synth.vm_verify import parse, perf_pipeline

from ptxtest import needs_perf


@pytest.fixture
def reference(monkeypatch):
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)


def _decode(path: Path, guest_kcore: str | None = None):
    from ptexport.perfdata import open_perf_data
    from ptexport.session.perfsession import DecodeConfig, open_session
    from ptexport.samples.itrace import parse_itrace

    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be"), guest_kcore=guest_kcore))
        return s.decode(1)


def _compare(cols, perf, *, times: bool = True) -> dict:
    """Per host CPU: counts and every column equal, in order (perf prints no VM for machine 0)."""
    out = {"mismatch": {}, "max_dt": 0}
    mp = np.where(cols.machine_pid == 0, -1, cols.machine_pid)
    ours = {"machine_pid": mp, "vcpu": cols.vcpu, "pid": cols.pid, "tid": cols.tid,
            "ip": cols.ip.astype(np.int64), "addr": cols.addr.astype(np.int64), "time": cols.time}
    theirs = {"machine_pid": perf.machine_pid, "vcpu": perf.vcpu, "pid": perf.pid, "tid": perf.tid,
              "ip": perf.from_ip.astype(np.int64), "addr": perf.to_ip.astype(np.int64), "time": perf.time}
    for cpu in np.unique(perf.cpu):
        a, b = cols.cpu == cpu, perf.cpu == cpu
        if a.sum() != b.sum():
            out["mismatch"][f"count cpu {cpu}"] = (int(a.sum()), int(b.sum()))
            continue
        for k in ours:
            if k == "time" and not times:
                continue
            bad = np.nonzero(ours[k][a] != theirs[k][b])[0]
            if len(bad):
                out["mismatch"][f"{k} cpu {cpu}"] = (len(bad), int(bad[0]))
        out["max_dt"] = max(out["max_dt"], int(np.abs(cols.time[a] - perf.time[b]).max()))
    return out


def test_kcore_code_reads_segments(tmp_path):
    out = tmp_path / "k"
    synthesize_vm(out, VmOptions(branches=500, guest="kernel"))
    k = KcoreCode(str(out / "guest.data" / "kcore_dir" / "kcore"))
    start, end, pgoff, obj = k.at(0xFFFFFFFF81000000)
    assert start == 0xFFFFFFFF81000000 and end > start and pgoff == 0 and obj.read(0, 1)
    assert k.at(0xFFFFFFFF80000000) is None
    assert KcoreCode(str(tmp_path / "missing")).at(0xFFFFFFFF81000000) is None


def test_walker_guest_code_needs_a_guest_lookup():
    walker = PerfCodeWalker(lambda ip, kernel: None, 1 << 63)
    assert walker.guest_lookup is None
    assert walker.walk(0xFFFFFFFF81000000, 0, 0, True)[0] == -22


@needs_perf
def test_guest_kernel_only_equals_perf(tmp_path, reference):
    """No guest sideband: perf's default guest, its code from the kcore beside --guestkallsyms."""
    out = tmp_path / "o"
    meta = synthesize_vm(out, VmOptions(branches=3000, guest="kernel", vcpus=2, cpus=2, seed=3))
    perf = parse(perf_pipeline(out, tmp_path / "w", inject_guest=False))
    assert not [line for line in perf.other if "error" in line]
    assert len(perf.time) == meta["branches"]
    cols = _decode(tmp_path / "w" / "host.data", str(out / "guest.data" / "kcore_dir"))
    assert len(cols) == len(perf.time) and not (cols.kind != 0).any()
    res = _compare(cols, perf)
    assert res["mismatch"] == {}
    assert (cols.machine_pid == 0).all() and (cols.vcpu == -1).all()
    # without the guest kcore, guest code cannot be read (perf: "Failed to get instruction")
    bad = _decode(tmp_path / "w" / "host.data")
    assert (bad.kind != 0).any()


@needs_perf
@pytest.mark.parametrize("guest,seed", [("user", 2), ("mixed", 3)])
def test_guest_sideband_equals_perf(tmp_path, reference, guest, seed):
    """perf inject --guest-data: machine_pid, VCPU, guest pid/tid, from, to equal perf line for line."""
    out = tmp_path / "o"
    meta = synthesize_vm(out, VmOptions(branches=6000, guest=guest, vcpus=2, cpus=2, seed=seed))
    perf = parse(perf_pipeline(out, tmp_path / "w"))
    cols = _decode(tmp_path / "w" / "inj.data")
    assert len(cols) == len(perf.time) == meta["branches"]
    res = _compare(cols, perf)
    assert res["mismatch"] == {} and res["max_dt"] == 0
    guest_rows = cols.machine_pid == meta["machine_pid"]
    assert guest_rows.any() and set(cols.vcpu[guest_rows].tolist()) == {0, 1}


def _dump(argv: list[str]) -> str:
    import io

    from ptexport.cli import main

    out = io.StringIO()
    assert main(["dump", "branches", "--jobs", "1", *argv], out) == 0, out.getvalue()
    return out.getvalue()


@needs_perf
def test_dump_branches_prints_like_perf(tmp_path, reference):
    """`ptexport dump branches` prints perf script's lines: kernel-only with --guestkallsyms, and with
    guest sideband the "VM: PID VCPU:NNN" prefix (per host CPU: perf interleaves CPUs its own way)."""
    out = tmp_path / "k"
    synthesize_vm(out, VmOptions(branches=2000, guest="kernel", seed=5))
    text = perf_pipeline(out, tmp_path / "wk", inject_guest=False, fields="pid,tid,cpu,time,flags,ip,addr")
    ours = _dump(["--guestkallsyms", str(out / "guest.data" / "kcore_dir" / "kallsyms"),
                  str(tmp_path / "wk" / "host.data")])
    assert ours.splitlines() == [line for line in text.splitlines() if "[00" in line]

    out = tmp_path / "m"
    synthesize_vm(out, VmOptions(branches=4000, guest="mixed", seed=6))
    text = perf_pipeline(out, tmp_path / "wm", fields="machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr")
    ours = _dump([str(tmp_path / "wm" / "inj.data")])

    def per_cpu(lines):
        keep = [line for line in lines if "[00" in line]
        return {c: [line for line in keep if f"[{c:03d}]" in line] for c in (0, 1)}

    got, want = per_cpu(ours.splitlines()), per_cpu(text.splitlines())
    assert got == want
    assert any(line.startswith("VM: ") and "VCPU:001" in line for line in got[1] + got[0])


@needs_perf
def test_guest_errors_carry_the_guest_thread(tmp_path, reference):
    """Guest user code that cannot be read: the same errors as perf, with machine_pid, vcpu and the
    guest pid/tid (perf's intel_ptq_synth_error with guest sideband and from_nr)."""
    import subprocess

    out = tmp_path / "m"
    synthesize_vm(out, VmOptions(branches=3000, guest="mixed", seed=7))
    perf_pipeline(out, tmp_path / "w")
    (out / "gprog").rename(out / "gprog.hidden")
    inj = tmp_path / "w" / "inj.data"
    r = subprocess.run(["perf", "script", "-i", str(inj), "--itrace=be", "--ns", "-F",
                        "machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr"],
                       capture_output=True, text=True, cwd=str(tmp_path / "w"))
    want = [line for line in (r.stdout + r.stderr).splitlines() if "[00" in line or "error type" in line]
    got = [line for line in _dump([str(inj)]).splitlines()]
    errors = [line for line in got if "error type" in line]
    assert errors and all("machine_pid 4000 vcpu " in line for line in errors)
    for c in (0, 1):
        def mine(lines):
            return [line for line in lines if f"[{c:03d}]" in line or f" cpu {c} " in line]
        assert mine(got) == mine(want)


@needs_perf
def test_dump_branches_csv_has_vcpu_columns(tmp_path, reference):
    import csv
    import io

    out = tmp_path / "m"
    meta = synthesize_vm(out, VmOptions(branches=2000, guest="mixed", seed=8))
    perf = parse(perf_pipeline(out, tmp_path / "w"))
    rows = list(csv.DictReader(io.StringIO(_dump(["--csv", str(tmp_path / "w" / "inj.data")]))))
    assert len(rows) == len(perf.time)
    mp = np.array([int(r["machine_pid"]) for r in rows])
    assert set(mp.tolist()) == {0, meta["machine_pid"]}
    assert sorted(int(r["vcpu"]) for r in rows) == sorted(np.where(perf.vcpu < 0, -1, perf.vcpu).tolist())
