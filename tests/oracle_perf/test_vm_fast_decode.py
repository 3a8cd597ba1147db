"""The compiled decoder (flow/perffast) on VM traces: equal to perf 6.1, line for line.

Host recordings made by ``ptexport synth --vm`` (two VCPUs on two host CPUs) go through perf's
workflow (vm_verify.perf_pipeline: ``perf inject --vm-time-correlation`` then ``perf inject
--guest-data``); ``ptexport dump branches`` on the result must print exactly what ``perf script
--itrace=be -F machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr --ns`` prints, errors included,
in perf's order.  Every test runs with the reference decoder disabled
(``PerfSession.decode_queue`` raises), so the compiled path is what is checked, and counts the
guest blocks the compiled decoder cached (guest code really read through its guest tables).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from pathlib import Path

import pytest

from ptexport.synth.vm import VmOptions, synthesize_vm
from ptexport.synth.vm_verify import FIELDS, perf_pipeline

from ptxtest import needs_perf

pytestmark = needs_perf


@pytest.fixture
def compiled(monkeypatch):
    """The reference decoder refused; returns counters of the compiled decoder's guest work."""
    from ptexport import jit
    from ptexport.decoder.compiled import decoder as perffast
    from ptexport.decoder.reference import queue as reference_queue
    from ptexport.session.perfsession import PerfSession

    if not jit.available():
        pytest.skip("numba (the 'fast' extra) is not installed")

    def refuse(*_a, **_k):
        raise AssertionError("the reference decoder was used")

    monkeypatch.setattr(PerfSession, "decode_queue", refuse)
    monkeypatch.setattr(reference_queue, "decode_queue", refuse)
    monkeypatch.setattr(reference_queue, "iter_queue", refuse)
    stats = {"guest_blocks": 0}
    block = perffast.QueueDecoder._block

    def counting(self, ip, nr=False):
        ok = block(self, ip, nr)
        stats["guest_blocks"] += int(bool(ok and nr))
        return ok

    monkeypatch.setattr(perffast.QueueDecoder, "_block", counting)
    return stats


def _perf_lines(text: str) -> list[str]:
    """perf script's sample and error lines (not its summary on stderr)."""
    return [line for line in text.splitlines() if "[00" in line or "instruction trace error type" in line]


def _perf_script(data: Path, cwd: Path, fields: str = FIELDS, extra: tuple[str, ...] = ()) -> list[str]:
    r = subprocess.run(["perf", "script", "-i", str(data), "--itrace=be", "--ns", "-F", fields, *extra],
                       capture_output=True, text=True, cwd=str(cwd))
    assert r.returncode == 0, r.stderr[-500:]
    return _perf_lines(r.stdout)


def _dump(*argv: str) -> list[str]:
    from ptexport.cli import main

    out = io.StringIO()
    assert main(["dump", "branches", *argv], out) == 0, out.getvalue()[-500:]
    return out.getvalue().splitlines()


def _count(*argv: str) -> str:
    from ptexport.cli import main

    out = io.StringIO()
    assert main(["dump", "branches", "--count", *argv], out) == 0
    return out.getvalue().strip()


def _first_diff(got: list[str], want: list[str]) -> str:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"line {i}: ours {a!r} perf {b!r}"
    return f"lengths: ours {len(got)} perf {len(want)}"


def _errors(lines: list[str]) -> int:
    return sum("instruction trace error type" in line for line in lines)


def _vm(tmp: Path, guest: str, branches: int, seed: int, **kw) -> tuple[dict, Path]:
    out = tmp / "o"
    meta = synthesize_vm(out, VmOptions(branches=branches, guest=guest, vcpus=2, cpus=2, seed=seed, **kw))
    return meta, out


def test_guest_kernel_only_equals_perf(tmp_path, compiled):
    """No guest sideband: perf's default guest, its code from the kcore beside --guestkallsyms."""
    meta, out = _vm(tmp_path, "kernel", 3000, 31)
    perf_pipeline(out, tmp_path / "w", inject_guest=False)
    kallsyms = str(out / "guest.data" / "kcore_dir" / "kallsyms")
    fields = "pid,tid,cpu,time,flags,ip,addr"
    want = _perf_script(tmp_path / "w" / "host.data", tmp_path / "w", fields,
                        (f"--guestkallsyms={kallsyms}", f"--guestmodules={out / 'guest.data' / 'kcore_dir' / 'modules'}"))
    got = _dump("--jobs", "1", "--guestkallsyms", kallsyms, str(tmp_path / "w" / "host.data"))
    assert len(want) == meta["branches"] and _errors(want) == 0
    assert got == want, _first_diff(got, want)
    assert compiled["guest_blocks"] > 0


def test_guest_kernel_only_without_kcore_errors_equal_perf(tmp_path, compiled):
    """--guestkallsyms whose folder has no kcore: guest code unreadable, perf's errors and host branches."""
    meta, out = _vm(tmp_path, "kernel", 3000, 39)
    perf_pipeline(out, tmp_path / "w", inject_guest=False)
    gk = tmp_path / "gk"
    gk.mkdir()
    for name in ("kallsyms", "modules"):
        shutil.copy(out / "guest.data" / "kcore_dir" / name, gk / name)
    fields = "pid,tid,cpu,time,flags,ip,addr"
    want = _perf_script(tmp_path / "w" / "host.data", tmp_path / "w", fields,
                        (f"--guestkallsyms={gk / 'kallsyms'}", f"--guestmodules={gk / 'modules'}"))
    got = _dump("--jobs", "1", "--guestkallsyms", str(gk / "kallsyms"), str(tmp_path / "w" / "host.data"))
    assert _errors(want) >= 2 and len(want) > _errors(want)
    assert got == want, _first_diff(got, want)
    n_err = _errors(want)
    assert _count("--jobs", "2", "--guestkallsyms", str(gk / "kallsyms"), str(tmp_path / "w" / "host.data")) \
        == f"{len(want) - n_err} samples, {n_err} errors"


@pytest.mark.parametrize("guest,seed", [("user", 32), ("mixed", 33)])
def test_guest_sideband_equals_perf(tmp_path, compiled, guest, seed):
    """perf inject --guest-data: 'VM: PID VCPU:NNN' lines with the guest thread, equal to perf's."""
    meta, out = _vm(tmp_path, guest, 4000, seed)
    perf_pipeline(out, tmp_path / "w")
    inj = tmp_path / "w" / "inj.data"
    want = _perf_script(inj, tmp_path / "w")
    got = _dump("--jobs", "1", str(inj))
    assert len(want) == meta["branches"] and _errors(want) == 0
    assert got == want, _first_diff(got, want)
    vms = {line.split()[2] for line in got if line.startswith("VM: ")}
    assert vms == {"VCPU:000", "VCPU:001"}
    assert compiled["guest_blocks"] > 0


def test_guest_hop_leap_equal_perf(tmp_path, compiled):
    """Hop and leap modes (--itrace=q/qq: ips from packets, no code walked) through VM entries and exits,
    on the compiled path, equal to perf's."""
    meta, out = _vm(tmp_path, "mixed", 4000, 33)
    perf_pipeline(out, tmp_path / "w")
    inj = tmp_path / "w" / "inj.data"
    n = 0
    for itrace in ("bq", "iq", "beqq", "ipqq"):
        r = subprocess.run(["perf", "script", "-i", str(inj), f"--itrace={itrace}", "--ns", "-F", FIELDS],
                           capture_output=True, text=True, cwd=str(tmp_path / "w"))
        assert r.returncode == 0, r.stderr[-500:]
        # (exactly: perf prints a non-branch sample's addr with no blank before it, after the flags field)
        want = _perf_lines(r.stdout)
        got = _dump("--jobs", "1", f"--itrace={itrace}", str(inj))
        assert got == want, f"{itrace}: " + _first_diff(got, want)
        n += len(want)
    assert n > 100


@pytest.mark.parametrize("missing", ["guest program", "guest kcore"])
def test_absent_guest_image_errors_equal_perf(tmp_path, compiled, missing):
    """Guest code that cannot be read: perf's 'Failed to get instruction' errors (guest machine, VCPU,
    guest thread; an object's first two failures), the rest of the trace, host code included, decoded."""
    meta, out = _vm(tmp_path, "mixed", 3000, 34)
    perf_pipeline(out, tmp_path / "w")
    inj = tmp_path / "w" / "inj.data"
    if missing == "guest program":
        (out / "gprog").rename(out / "gprog.hidden")
    else:
        shutil.rmtree(inj / f"kcore_dir__{meta['machine_pid']}")
    want = _perf_script(inj, tmp_path / "w")
    got = _dump("--jobs", "1", str(inj))
    assert _errors(want) >= 2
    assert all(f"machine_pid {meta['machine_pid']} vcpu " in line for line in want if "error type" in line)
    assert any(not line.startswith("VM: ") and "error" not in line for line in want)  # host branches
    assert got == want, _first_diff(got, want)
    n_err = _errors(want)
    assert _count("--jobs", "1", str(inj)) == f"{len(want) - n_err} samples, {n_err} errors"


def test_wrong_tsc_offset_equals_perf(tmp_path, compiled):
    """--guest-data with a wrong TSC offset: guest sideband lands at the wrong host times (other guest
    threads get the samples); whatever perf makes of it, ours is the same."""
    meta, out = _vm(tmp_path, "mixed", 3000, 35)
    perf_pipeline(out, tmp_path / "w")
    good = _perf_script(tmp_path / "w" / "inj.data", tmp_path / "w")
    bad = tmp_path / "w" / "bad.data"
    off = meta["vcpus"][0]["tsc_offset"] + 3_000_000
    r = subprocess.run(["perf", "inject", "-i", str(tmp_path / "w" / "host.data" / "data"),
                        f"--guest-data={out / 'guest.data'},{meta['machine_pid']},{off:#x}", "-o", str(bad)],
                       capture_output=True, text=True, cwd=str(tmp_path / "w"))
    assert r.returncode == 0, r.stderr[-500:]
    shutil.copytree(tmp_path / "w" / "host.data" / "kcore_dir", bad / "kcore_dir")
    want = _perf_script(bad, tmp_path / "w")
    got = _dump("--jobs", "1", str(bad))
    assert want != good
    assert got == want, _first_diff(got, want)


def test_wrong_hypervisor_pid_is_a_clear_error(tmp_path):
    """--guest-data naming a pid without VCPU threads: perf inject gives up and leaves a file without
    attrs; ptexport says so (exit 1, file and offset), no traceback."""
    from ptexport.cli import main

    meta, out = _vm(tmp_path, "mixed", 1000, 36)
    perf_pipeline(out, tmp_path / "w", inject_guest=False)
    bad = tmp_path / "w" / "bad.data"
    r = subprocess.run(["perf", "inject", "-i", str(tmp_path / "w" / "host.data" / "data"),
                        f"--guest-data={out / 'guest.data'},{meta['machine_pid'] + 7},0", "-o", str(bad)],
                       capture_output=True, text=True, cwd=str(tmp_path / "w"))
    assert r.returncode != 0 and "No VCPU threads" in r.stderr
    buf = io.StringIO()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["dump", "branches", "--jobs", "1", str(bad)], buf)
    assert rc == 1 and "Traceback" not in err.getvalue() + buf.getvalue()
    assert "bad.data" in err.getvalue() + buf.getvalue()


def test_segments_in_workers_equal_serial(tmp_path, compiled):
    """--jobs 2 on a VM trace: PSB segments decoded in worker processes and joined equal serial decoding."""
    import numpy as np

    from ptexport.perfdata import open_perf_data
    from ptexport.session import parallel
    from ptexport.session.perfsession import DecodeConfig, open_session
    from ptexport.samples.itrace import parse_itrace

    meta, out = _vm(tmp_path, "mixed", 40000, 37)
    perf_pipeline(out, tmp_path / "w")
    inj = tmp_path / "w" / "inj.data"
    with open_perf_data(str(inj)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        serial = parallel.decode_queues(s, 1)
        seg = parallel.decode_queues(s, 2, min_segment_bytes=16 << 10)
    assert s.decode_stats.matched + s.decode_stats.redone > 0
    for a, b in zip(serial, seg):
        for c in a.cols:
            assert np.array_equal(np.asarray(a.cols[c]), np.asarray(b.cols[c])), c
    want = _perf_script(inj, tmp_path / "w")
    assert _dump("--jobs", "2", str(inj)) == want


@pytest.mark.slow
def test_one_million_branches_equal_perf(tmp_path, compiled):
    """Issue #6's acceptance: a trace of at least 1 M branches, two VCPUs running guest kernel and
    guest user code, equal to perf sample for sample (every line of perf script's output)."""
    meta, out = _vm(tmp_path, "mixed", 1_000_000, 38)
    perf_pipeline(out, tmp_path / "w")
    inj = tmp_path / "w" / "inj.data"
    want = _perf_script(inj, tmp_path / "w")
    got = _dump("--jobs", "1", str(inj))
    assert len(want) == meta["branches"] >= 1_000_000 and _errors(want) == 0
    assert got == want, _first_diff(got, want)
    guest = [line for line in want if line.startswith("VM: ")]
    assert {line.split()[2] for line in guest} == {"VCPU:000", "VCPU:001"}
    ips = {int(x, 16) for line in guest for x in (line.split("=>")[0].split()[-1], line.split("=>")[1])}
    assert any(ip >> 63 for ip in ips) and any(0 < ip < 1 << 47 for ip in ips)  # guest kernel and user


def test_power_events_in_guest_carry_the_guest(tmp_path, compiled):
    """--itrace=bep: PSB and CBR samples taken in guest code belong to the guest machine, VCPU and
    guest thread like perf's (intel_pt_prep_a_sample: the from side, else the to side); every
    sample and its values equal perf's, in order, line for line."""
    meta, out = _vm(tmp_path, "mixed", 4000, 40)
    perf_pipeline(out, tmp_path / "w")
    inj = tmp_path / "w" / "inj.data"
    r = subprocess.run(["perf", "script", "-i", str(inj), "--itrace=bep", "--ns", "-F", FIELDS],
                       capture_output=True, text=True, cwd=str(tmp_path / "w"))
    want = _perf_lines(r.stdout)
    got = _dump("--jobs", "1", "--itrace=bep", str(inj))
    power = [w.split() for w in want if "=>" not in w and "error" not in w]
    assert any(w[0] == "VM:" for w in power) and any(w[0] != "VM:" for w in power)
    assert got == want, _first_diff(got, want)
