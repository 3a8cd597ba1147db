"""``ptexport dump branches host.data --guest-data guest.data,PID,OFFSET[,SCALE]`` prints exactly what
``ptexport dump branches injected.data`` prints, where injected.data is ``perf inject --guest-data``'s
output for the same host recording and guest data (and so perf script's lines: checked for one case).

Variants of ``ptexport synth --vm``: guest kernel only, guest user only, both, three VCPUs on two host
CPUs, an explicit TSC offset, TSC scaling 2.0 and 0.5 (with another offset). Also: the record stream
perf inject writes, record for record; a wrong offset gives what perf inject with that offset gives.

Two guests in one host recording: tests/oracle_perf/test_guestdata_two_guests.py.
"""

from __future__ import annotations

import subprocess

import pytest

from ptexport.perfdata import open_perf_data
from ptexport.session.guestdata import apply_guest_data, parse_guest_data

from guestdatatest import VARIANTS, dump, make
from ptxtest import needs_perf


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_dump_equals_injected(tmp_path, name):
    t = make(tmp_path, name)
    ours = dump(t.host, "--guest-data", t.spec)
    theirs = dump(t.inj)
    assert ours == theirs
    lines = ours.splitlines()
    assert len(lines) >= 3000
    guest = [line for line in lines if line.startswith("VM: ")]
    assert guest and len(guest) < len(lines)
    vcpus = {line.split("VCPU:")[1][:3] for line in guest}
    assert vcpus == {f"{v:03d}" for v in range(VARIANTS[name].get("vcpus", 2))}


def _key(r):
    fields = tuple((k, getattr(r, k, None)) for k in ("pid", "tid", "comm", "filename", "start", "len",
                                                       "next_prev_pid", "next_prev_tid", "ppid", "ptid"))
    entries = tuple((e.id, e.cpu, e.tid, e.machine_pid, e.vcpu) for e in r.entries) if r.type == 69 else None
    return r.type, r.misc, None if r.sample_id is None else tuple(r.sample_id), fields, entries


@needs_perf
@pytest.mark.parametrize("name", ["mixed", "scale2"])
def test_records_equal_perf_inject(tmp_path, name):
    """The view's records are perf inject's, in its order: host ones reordered by time, the ID_INDEX and
    guest records with guest cpumode, new ids, host CPU and host time; attrs and id index too."""
    t = make(tmp_path, name)
    with open_perf_data(t.host) as hp, open_perf_data(t.inj) as ip:
        view = apply_guest_data(hp, [parse_guest_data(t.spec)])
        assert [_key(r) for r in view.records()] == [_key(r) for r in ip.records()]
        assert [_key(r) for r in view.ordered_records()] == [_key(r) for r in ip.ordered_records()]
        assert [(a.name, a.ids, a.sample_type, a.flags) for a in view.attrs] == \
            [(a.name, a.ids, a.sample_type, a.flags) for a in ip.attrs]
        assert {i: (e.cpu, e.tid, e.machine_pid, e.vcpu) for i, e in view.id_index.items()} == \
            {i: (e.cpu, e.tid, e.machine_pid, e.vcpu) for i, e in ip.id_index.items()}


@needs_perf
def test_mixed_equals_perf_script(tmp_path):
    """perf script's lines on the injected file, per host CPU (perf interleaves CPUs its own way)."""
    t = make(tmp_path, "mixed")
    r = subprocess.run(["perf", "script", "-i", str(t.inj), "--itrace=be", "--ns", "-F",
                        "machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr"],
                       capture_output=True, text=True, cwd=str(t.work), timeout=120)
    assert r.returncode == 0, r.stderr[-500:]
    ours = dump(t.host, "--guest-data", t.spec).splitlines()

    def per_cpu(lines):
        return {c: [line for line in lines if f"[{c:03d}]" in line] for c in (0, 1)}

    assert per_cpu(ours) == per_cpu(r.stdout.splitlines())
    assert sum(map(len, per_cpu(ours).values())) == len(ours)


@needs_perf
def test_wrong_offset_as_perf_inject(tmp_path):
    """A wrong OFFSET: guest records land at other host times; the same as perf inject with that offset."""
    t = make(tmp_path, "mixed")
    wrong = (t.offset + 2_000) & ((1 << 64) - 1)  # 1000 ns later in guest time
    bad = t.work / "inj_wrong.data"
    r = subprocess.run(["perf", "inject", "-i", str(t.host / "data"),
                        f"--guest-data={t.guest},{t.pid},{wrong:#x}", "-o", str(bad)],
                       capture_output=True, text=True, cwd=str(t.work), timeout=120)
    assert r.returncode == 0, r.stderr[-500:]
    if not (bad / "kcore_dir").exists():
        import shutil

        shutil.copytree(t.host / "kcore_dir", bad / "kcore_dir")
    ours = dump(t.host, "--guest-data", f"{t.guest},{t.pid},{wrong:#x}")
    assert ours == dump(bad)
    assert ours != dump(t.host, "--guest-data", t.spec)  # guest threads switch at other times


@needs_perf
def test_build_ids_as_perf_inject(tmp_path, monkeypatch):
    """The guest's BUILD_ID feature becomes the guest machine's (pid PID, guest cpumodes), after the host's."""
    from pathlib import Path

    import ptexport.synth.vm as vm
    from ptexport.perfdata.constants import Feature
    from ptexport.synth.perfwrite import build_id_record

    orig = vm._common_features

    def features(n, cmdline, attrs):
        f = orig(n, cmdline, attrs)
        if "dummy" in cmdline:  # the guest's recording
            f[Feature.BUILD_ID] = (build_id_record(-1, b"\x11" * 20, str(Path(tmp_path / "gen" / "gprog")), misc=2)
                                   + build_id_record(-1, b"\x22" * 20, "[kernel.kallsyms]", misc=1))
        else:
            f[Feature.BUILD_ID] = build_id_record(-1, b"\x33" * 20, "[kernel.kallsyms]", misc=1)
        return f

    monkeypatch.setattr(vm, "_common_features", features)
    t = make(tmp_path, "mixed", branches=1000)
    with open_perf_data(t.host) as hp, open_perf_data(t.inj) as ip:
        view = apply_guest_data(hp, [parse_guest_data(t.spec)])
        got = view.features["build_id"]
        assert got == ip.features["build_id"]
        assert [(b.pid, b.misc & 7) for b in got] == [(-1, 1), (t.pid, 5), (t.pid, 4)]


@needs_perf
def test_csv_equals_injected(tmp_path):
    """--csv (with the machine_pid,vcpu columns of a recording with guest sideband) too."""
    t = make(tmp_path, "user", branches=1000)
    ours = dump(t.host, "--csv", "--guest-data", t.spec)
    assert ours == dump(t.inj, "--csv")
    assert ours.splitlines()[0].endswith(",machine_pid,vcpu")


@needs_perf
def test_jobs_workers_read_guest_data(tmp_path, monkeypatch):
    """--jobs 2 with PSB segments small enough for worker processes: they reopen the host recording by
    its path and merge the guest data again (DecodeConfig.guest_data); else guest user code would be
    unreadable there ("Failed to get instruction")."""
    from ptexport.session import parallel
    t = make(tmp_path, "user", branches=8000)
    want = dump(t.inj)
    monkeypatch.setattr(parallel, "MIN_SEGMENT_BYTES", 1 << 12)
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 1 << 12)
    used = []
    orig = parallel._segment_streams
    monkeypatch.setattr(parallel, "_segment_streams", lambda *a: used.append(orig(*a)) or used[-1])
    monkeypatch.setenv("PTEXPORT_DECODE_PROCESS", "0")  # the workers in this process (not a decoding child)
    assert dump(t.host, "--guest-data", t.spec, "--jobs", "2") == want
    assert used and used[0] is not None  # segments went to workers
    monkeypatch.delenv("PTEXPORT_DECODE_PROCESS")
    assert dump(t.host, "--guest-data", t.spec, "--jobs", "3") == want  # a decoding child with 2 workers


@needs_perf
def test_pipe_mode_guest_file(tmp_path):
    """A pipe-mode guest perf.data (perf inject -o - of the guest's data) reads like the file-mode one
    (both without kcore_dir: guest kernel code unreadable in both). perf 6.1's inject refuses it ("Guest
    data has no sample IDs": it looks for them before the pipe's attr records)."""
    t = make(tmp_path, "user", branches=1000)
    pipe = tmp_path / "guest.pipe"
    with open(pipe, "wb") as f:
        r = subprocess.run(["perf", "inject", "-i", str(t.guest / "data"), "-o", "-"], stdout=f,
                           stderr=subprocess.PIPE, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr[-300:]
    with open_perf_data(pipe) as pd:
        assert pd.is_pipe
    rest = t.spec.split(",", 1)[1]
    ours = dump(t.host, "--guest-data", f"{pipe},{rest}")
    assert ours == dump(t.host, "--guest-data", f"{t.guest / 'data'},{rest}")
    assert "VM: " in ours


@needs_perf
def test_host_without_finished_init(tmp_path, monkeypatch):
    """A host recording without FINISHED_INIT (older perf): perf 6.1 inject merges nothing (it starts at
    that record); ptexport merges the guest before the first timed record, which gives the lines of
    the same recording with FINISHED_INIT merged by perf inject."""
    import ptexport.synth.vm as vm
    from ptexport.perfdata.constants import RecordType

    normal = make(tmp_path / "normal", "mixed")
    orig = vm.record
    monkeypatch.setattr(vm, "record", lambda t, m, b: b"" if t == RecordType.FINISHED_INIT else orig(t, m, b))
    t = make(tmp_path / "noinit", "mixed")
    theirs = dump(t.inj)
    assert "VM: " not in theirs  # perf inject merged nothing
    ours = dump(t.host, "--guest-data", t.spec)
    assert ours == dump(normal.inj)
