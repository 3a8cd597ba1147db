"""ptexport vm-time-correlation against perf inject --vm-time-correlation (perf 6.1)."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest

from ptexport.cli import main
from ptexport.pt.vmtime import VmBuffer, VmTimeConfig, VmTimeCorrelator, parse_offsets
from ptexport.synth.ptencode import PacketWriter
from ptexport.synth.vm import VmOptions, synthesize_vm, pip, vmcs

from ptxtest import needs_perf

M64 = (1 << 64) - 1


def _ptexport(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    rc = main(list(argv), out)
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def two_offsets(tmp_path_factory):
    """Two VCPUs whose VMCSs have different TSC offsets."""
    out = tmp_path_factory.mktemp("vmtc")
    offs = (-0x5000000000 & M64, -0x4FFFFFF000 & M64)
    meta = synthesize_vm(out, VmOptions(branches=80_000, tsc_offsets=offs, seed=5))
    assert meta["guest_psbs"] > 2
    return out, meta


def _perf_inject(path, arg, cwd) -> str:
    cmd = ["perf", "inject", "-i", str(path), f"--vm-time-correlation={arg}"] if arg else \
        ["perf", "inject", "-i", str(path), "--vm-time-correlation"]
    if not (arg or "").startswith("dry-run"):
        cmd.append("--force")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr


def test_dry_run_reports_each_vmcs_offset(two_offsets):
    out, meta = two_offsets
    rc, text = _ptexport("vm-time-correlation", str(out / "host.data"), "--dry-run")
    assert rc == 0
    want = [f"VMCS: {v['vmcs']:#x}  TSC Offset {v['tsc_offset']:#x}" for v in meta["vcpus"]]
    assert sorted(text.splitlines()) == sorted(want)


@needs_perf
def test_dry_run_equals_perf(two_offsets, tmp_path):
    out, _ = two_offsets
    perf = _perf_inject(out / "host.data" / "data", "dry-run", tmp_path)
    rc, ours = _ptexport("vm-time-correlation", str(out / "host.data"), "--dry-run")
    assert rc == 0
    assert ours.splitlines() == [line for line in perf.splitlines() if line.strip()]


@needs_perf
@pytest.mark.parametrize("with_offsets", [True, False])
def test_corrected_copy_is_byte_identical_to_perf(two_offsets, tmp_path, with_offsets):
    """perf rewrites the guest TSC packets in place; our copy has the same bytes."""
    out, meta = two_offsets
    spec = " ".join(f"{v['tsc_offset']:#x}:{v['vmcs']:#x}" for v in meta["vcpus"]) \
        if with_offsets else ""
    perf_copy = tmp_path / "perf"
    shutil.copytree(out / "host.data", perf_copy)
    _perf_inject(perf_copy / "data", spec, tmp_path)
    argv = ["vm-time-correlation", str(out / "host.data"), "-o", str(tmp_path / "ours")]
    for word in spec.split():
        argv += ["--offset", word]
    rc, text = _ptexport(*argv)
    assert rc == 0, text
    assert "TSC packets translated" in text
    ours = (tmp_path / "ours" / "data").read_bytes()
    assert ours == (perf_copy / "data").read_bytes()
    assert ours != (out / "host.data" / "data").read_bytes()


def test_guest_tsc_translated_in_memory():
    """A hand-built stream: host PSB+, MTCs, then a guest PSB+ whose TSC is offset."""
    off = -0x1000000 & M64
    w = PacketWriter()
    t = 1_000_000_000

    def psb(tsc, host_t, nr):
        w.psb()
        w.tsc(tsc & M64)
        w.tma(host_t // 80, host_t % 80)
        pip(w, 0x1000, nr)
        if nr:
            vmcs(w, 0x4242)
        w.mode_exec64()
        w.fup(0x401000)
        w.psbend()

    psb(t, t, False)
    w.tnt(True)
    for k in range(1, 20):
        w.mtc(((t // 80 + k * 8) >> 3) & 0xFF)
        w.tnt(True)
    t2 = t + 19 * 8 * 80 + 40
    psb(t2 + off, t2, True)
    cfg = VmTimeConfig(mtc_period=3, tsc_ctc_ratio_n=80, tsc_ctc_ratio_d=1)
    corr = VmTimeCorrelator(cfg)
    patches = corr.run_queue([VmBuffer(bytes(w.buf), t2 + 10_000, False)])
    assert corr.messages == [f"VMCS: {0x4242:#x}  TSC Offset {off:#x}"]
    assert [(p.old, p.new) for p in patches] == [((t2 + off) & ((1 << 56) - 1), t2)]


def test_parse_offsets():
    assert parse_offsets("") == (0, {})
    assert parse_offsets("0x10") == (16, {})
    assert parse_offsets("0x10:0x1,0x2 0x20") == (0x20, {1: 16, 2: 16})
    with pytest.raises(ValueError):
        parse_offsets("zz")


def test_cli_errors(tmp_path):
    rc, _ = _ptexport("vm-time-correlation", str(tmp_path / "missing.data"), "--dry-run")
    assert rc != 0
    junk = tmp_path / "junk.data"
    junk.write_bytes(b"not a perf file" * 10)
    rc, _ = _ptexport("vm-time-correlation", str(junk), "--dry-run")
    assert rc != 0
    rc, _ = _ptexport("vm-time-correlation", str(junk))
    assert rc != 0


@needs_perf
def test_real_host_recording_without_guest(quipper, tmp_path):
    """quipper's Skylake recording (PADs between TSC and TMA, no VMX): perf finds nothing to
    correlate and changes no byte; so do we."""
    rc, text = _ptexport("vm-time-correlation", str(quipper), "--dry-run")
    assert rc == 0
    copy = tmp_path / "q.data"
    shutil.copyfile(quipper, copy)
    perf = _perf_inject(copy, "dry-run", tmp_path)
    assert text.splitlines() == [line for line in perf.splitlines() if line.strip()] == []
    rc, text = _ptexport("vm-time-correlation", str(quipper), "-o", str(tmp_path / "o.data"))
    assert rc == 0 and text.startswith("0 TSC packets translated")
    assert (tmp_path / "o.data").read_bytes() == copy.read_bytes()


VARIANTS = [  # (vcpus, cpus, psb_period, aux_chunk, guest_tsc_every, guest, guest_insns, distinct offsets)
    (3, 2, 256, 2048, 3, "mixed", 300, False),      # first guest TSCs before any offset is known
    (2, 1, 512, 512, 0, "mixed", 50, True),         # many small AUX buffers, two offsets
    (3, 3, 1024, 8192, 1, "kernel", 2000, True),    # guest TSC outside PSB+ after each entry
    (1, 2, 4096, 65536, 0, "user", 300, False),
    (2, 2, 512, 2048, 1, "mixed", 300, True, True),  # with CYC, as perf's VM examples record
]


@needs_perf
@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_equal_perf(variant, tmp_path):
    vcpus, cpus, psb, chunk, every, guest, insns, distinct, *cyc = variant
    offs = tuple((-(0x3000000000 + 0x1000 * v * distinct)) & M64 for v in range(vcpus))
    out = tmp_path / "o"
    synthesize_vm(out, VmOptions(branches=8000, vcpus=vcpus, cpus=cpus, psb_period=psb,
                                 aux_chunk=chunk, guest_tsc_every=every, guest=guest,
                                 guest_insns=insns, tsc_offsets=offs, seed=vcpus + psb,
                                 cyc=bool(cyc)))
    perf_copy = tmp_path / "perf"
    shutil.copytree(out / "host.data", perf_copy)
    perf = _perf_inject(perf_copy / "data", "dry-run", tmp_path)
    rc, ours = _ptexport("vm-time-correlation", str(out / "host.data"), "--dry-run")
    assert rc == 0
    assert ours.splitlines() == [line for line in perf.splitlines() if line.strip()]
    _perf_inject(perf_copy / "data", "", tmp_path)
    rc, _ = _ptexport("vm-time-correlation", str(out / "host.data"), "-o", str(tmp_path / "ours"))
    assert rc == 0
    assert (tmp_path / "ours" / "data").read_bytes() == (perf_copy / "data").read_bytes()


def test_compiled_and_python_packet_paths_agree(two_offsets, monkeypatch):
    from ptexport.cli.vm_time_correlation import correlate
    from ptexport.pt import packets_compiled as fastdecode
    out, _ = two_offsets
    fast = correlate(str(out / "host.data"))[:2]
    monkeypatch.setattr(fastdecode, "numba", None)
    slow = correlate(str(out / "host.data"))[:2]
    assert fast == slow
    assert sum(len(v) for v in fast[1].values()) > 0


def test_vcpu_table_maps_vmcs_to_vcpu_threads(tmp_path):
    """Three VCPU threads time-sliced over two host CPUs: every VMCS belongs to exactly the
    thread 'CPU n/KVM' that ran it."""
    from ptexport.cli.vm_time_correlation import correlate, vcpu_table

    out = tmp_path / "v"
    meta = synthesize_vm(out, VmOptions(branches=30_000, vcpus=3, cpus=2, seed=9))
    _msgs, _patches, corr = correlate(str(out / "host.data"))
    rows = vcpu_table(str(out / "host.data"), corr)
    got = sorted((r["vmcs"], r["tid"], r["vcpu"]) for r in rows)
    want = sorted((v["vmcs"], v["host_tid"], v["vcpu"]) for v in meta["vcpus"])
    assert got == want
    assert all(r["pid"] == meta["machine_pid"] and r["vmcs_packets"] > 0 for r in rows)
    rc, text = _ptexport("vm-time-correlation", str(out / "host.data"), "--dry-run", "--vcpus")
    assert rc == 0 and "(CPU 2/KVM) VCPU 2" in text
