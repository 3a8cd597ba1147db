"""The sideband model on real recordings: the quipper Intel PT file and files perf makes here.

The differential checks use what the kernel itself wrote: every cpu-clock sample
of a system-wide recording carries the tid that really ran on its CPU, and perf
script resolves every sample IP to a DSO; the model must give the same answers
from the switch events and mmap records alone.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from ptxtest import needs_perf
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import RecordType as RT
from ptexport.sideband import CpuTimeline, sideband_from_perf_data


@pytest.fixture(scope="module")
def quipper_sb(quipper):
    with open_perf_data(quipper) as pd:
        return sideband_from_perf_data(pd)


def test_quipper_threads_comms_and_exec(quipper_sb):
    host = quipper_sb.host
    echo = host.thread(3174)
    # COMM perf (synthesized, time 0), then the kernel's exec COMM, then a plain COMM echo
    assert [(c.comm, c.start, c.exec) for c in echo.comms] == [
        ("perf", 0, False), ("echo", 641256847598, True), ("echo", 641257875796, False)]
    assert echo.exec_comm().comm == "echo" and echo.comm_at(641256847597).comm == "perf"
    assert echo.end == 641258039091  # PERF_RECORD_EXIT
    assert sorted(quipper_sb.machines) == [-1]


def test_quipper_maps(quipper_sb):
    sb = quipper_sb
    # perf script -D: MMAP2 3174/3174: [0x7fb36c8bb000(0x3ab000) @ 0 ...]: r-xp /lib64/libc-2.23.so at 641257237773
    m = sb.map_at(3174, 0x7FB36C8BB000 + 0x1234, 641257237773)
    assert (m.filename, m.start, m.end, m.pgoff, m.prot) == ("/lib64/libc-2.23.so", 0x7FB36C8BB000, 0x7FB36CC66000, 0, 5)
    assert sb.map_at(3174, 0x7FB36C8BB000, 641257237772) is None  # not mapped yet
    vdso = sb.map_at(3174, 0x7FFD8FDFE100, 641258000000)
    assert vdso.filename == "[vdso]"
    k = sb.map_at(3174, 0xFFFFFFFFB9600000 + 0x100, 641257000000)
    assert k.filename == "[kernel.kallsyms]_text" and sb.host.mmap_counts["kernel"] == 56
    assert sb.map_at(3174, 0xFFFFFFFFC04F7000 + 8, 641257000000).filename.endswith("/fuse.ko")
    assert sb.host.mmap_counts[3174] == 10


def test_quipper_cpu_timeline(quipper_sb):
    sb = quipper_sb
    tl = sb.host.cpus[3]
    # first record on cpu 3: SWITCH_CPU_WIDE OUT next pid/tid 1760/1760 at 641255848111
    assert (int(tl.times[0]), sb.tid_on_cpu(3, 641255848111)) == (641255848111, (1760, 1760))
    assert sb.tid_on_cpu(3, 641255849446) == (1760, 1760)  # IN: the record's own pid/tid (prev is 0/0)
    assert sb.tid_on_cpu(3, 641255852546) == (0, 0)  # OUT: next_prev pid/tid
    assert sb.tid_on_cpu(3, 641256844131)[1] == 3174  # ITRACE_START pid 3174
    assert sum(len(t) for t in sb.host.cpus.values()) == 152 + 2
    assert tl.kinds.tolist().count(CpuTimeline.ITRACE_START) == 1
    # TSC queries: 0xbc4cd2cfe8 is the first TSC packet in cpu 3's trace
    th = sb.thread_on_cpu_tsc(3, 0xBC4CD2CFE8)
    assert th is not None and th.tid == sb.tid_on_cpu(3, sb.time_conv.tsc_to_perf_time(0xBC4CD2CFE8))[1]


def test_quipper_aux_layout(quipper_sb):
    sb = quipper_sb
    assert sb.per_cpu_mmaps is True and sb.time_conv.source == "AUXTRACE_INFO"
    streams = sb.aux_streams()
    assert sorted(streams) == [("cpu", 0), ("cpu", 3)]
    assert [b.size for b in streams[("cpu", 0)]] == [0x2FD0] and [b.size for b in streams[("cpu", 3)]] == [0x21A00]
    assert streams[("cpu", 3)][0].reference == 0xBC4CD584C2
    assert sum(e.aux_size for e in sb.aux_events[3]) == 0x21A00 and len(sb.aux_events[3]) == 9
    assert [e.time for e in sb.aux_events[0]] == [641258037956]


def _record(tmp_path, name, *args):
    out = tmp_path / name
    r = subprocess.run(["perf", "record", "-q", "-o", str(out), *args], capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or not out.exists():
        pytest.skip(f"perf record {' '.join(args)} failed here: {r.stderr.strip()[:200]}")
    return out


@pytest.mark.slow
@needs_perf
def test_switch_timeline_gives_the_tid_of_every_sample(tmp_path):
    data = _record(tmp_path, "sw.data", "-a", "--switch-events", "-e", "cpu-clock", "-c", "100000", "--", "sleep", "0.05")
    with open_perf_data(data) as pd:
        sb = sideband_from_perf_data(pd)
        samples = [(r.cpu, r.time, r.pid, r.tid) for r in pd.records() if r.type == RT.SAMPLE]
    assert len(samples) > 50
    checked, wrong = 0, []
    for cpu, time, pid, tid in samples:
        got = sb.tid_on_cpu(cpu, time)
        if got is None:  # before the first switch on that CPU
            continue
        if got != (pid, tid):
            wrong.append((cpu, time, pid, tid, got))
        checked += 1
    assert checked >= 0.9 * len(samples)
    if sb.lost:
        # a loaded machine can make the kernel drop records (PERF_RECORD_LOST): a lost switch
        # leaves the timeline behind until the next one
        assert len(wrong) <= 0.05 * checked, (sb.lost[:3], wrong[:3])
    else:
        assert not wrong, wrong[:5]


@pytest.mark.slow
@needs_perf
def test_maps_resolve_every_sample_like_perf_script(tmp_path):
    data = _record(tmp_path, "m.data", "-e", "cpu-clock", "-c", "20000", "--",
                   "sh", "-c", "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; ls / >/dev/null")
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "pid,tid,time,ip,dso", "--ns"],
                         capture_output=True, text=True, timeout=120).stdout
    expect = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)/(\d+)\s+(\d+)\.(\d+):\s+([0-9a-f]+)\s+\((.*)\)", line)
        if m:
            _pid, tid, s, ns, ip, dso = m.groups()
            expect[(int(tid), int(s) * 10**9 + int(ns))] = (int(ip, 16), dso)
    assert len(expect) > 20
    with open_perf_data(data) as pd:
        sb = sideband_from_perf_data(pd)
        n = 0
        for r in pd.records():
            if r.type != RT.SAMPLE:
                continue
            ip, dso = expect[(r.tid, r.time)]
            assert ip == r.ip
            m = sb.map_at(r.pid, r.ip, r.time)
            got = m.filename if m else "[unknown]"
            if dso == "[kernel.kallsyms]":
                assert got.startswith("[kernel.kallsyms]"), (hex(ip), got)
            else:
                assert got == dso, (hex(ip), r.time, got, dso)
            n += 1
    assert n == len(expect)
    sh = [t for t in sb.host.processes() if t.comm_name() == "sh"]
    assert sh and sh[0].exec_comm().exec


EXPORT_TO_SQLITE = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"


@pytest.mark.slow
@needs_perf
def test_sample_comms_match_perf_export_to_sqlite(tmp_path):
    """perf's export gives each sample the main thread's exec comm at that time; so must the model."""
    import os
    import sqlite3

    if not os.path.exists(EXPORT_TO_SQLITE):
        pytest.skip(f"{EXPORT_TO_SQLITE} is not installed")
    data = _record(tmp_path, "a.data", "-a", "-e", "cpu-clock", "-c", "200000", "--",
                   "sh", "-c", "sleep 0.02; ls / >/dev/null")
    db = tmp_path / "a.db"
    # perf's embedded Python finds its prefix through PATH: put the system python first (not pyenv's)
    env = dict(os.environ, PATH="/usr/bin:/bin:" + os.environ.get("PATH", ""))
    r = subprocess.run(["perf", "script", "-i", str(data), "-s", EXPORT_TO_SQLITE, str(db)],
                       capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0 or not db.exists():
        pytest.skip(f"perf's export-to-sqlite.py does not run here: {r.stderr.strip()[-200:]}")
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT s.time, t.pid, t.tid, c.comm, p.tid FROM samples s JOIN threads t ON s.thread_id = t.id "
        "JOIN comms c ON s.comm_id = c.id JOIN threads p ON t.process_id = p.id WHERE s.id > 0").fetchall()
    con.close()
    with open_perf_data(data) as pd:
        sb = sideband_from_perf_data(pd)
    assert len(rows) > 20
    names = set()
    for time, pid, tid, comm, main_tid in rows:
        th = sb.host.thread(tid, time)
        assert (th.pid, th.tid) == (pid, tid) and main_tid == pid
        ec = sb.host.process(pid, time).exec_comm(time)
        assert ec.comm == comm, (time, pid, tid)
        names.add(comm)
    assert {"sh", "ls"} <= names  # exec comms of the workload (perf-exec -> sh -> ls)


FAKE_VM = r"""
import ctypes, os, threading, time
libc = ctypes.CDLL(None)
def vcpu(n):
    libc.prctl(15, f"CPU {n}/KVM".encode(), 0, 0, 0)  # PR_SET_NAME, as QEMU names its VCPU threads
    end = time.time() + 0.25
    while time.time() < end:
        pass
print(os.getpid(), flush=True)
ts = [threading.Thread(target=vcpu, args=(i,)) for i in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
"""


@pytest.mark.slow
@needs_perf
def test_guest_machine_from_perf_inject_guest_data(tmp_path):
    """perf inject --guest-data merges a guest's sideband (ID_INDEX machine_pid/vcpu, guest cpumode).

    A process with threads named "CPU n/KVM" stands in for QEMU; a system-wide recording on this
    machine stands in for the guest's own perf.data.  perf script then shows every guest record
    as "VM: <pid> VCPU:<n>"; the model must put the same records on the same machine and VCPU.
    """
    script = tmp_path / "fakevm.py"
    script.write_text(FAKE_VM)
    common = ["-a", "-e", "cpu-clock", "-c", "500000", "--switch-events", "--sample-identifier"]
    guest = _record(tmp_path, "guest.data", *common, "--", "sleep", "0.05")
    host = tmp_path / "host.data"
    r = subprocess.run(["perf", "record", "-q", "-o", str(host), *common, "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf record failed here: {r.stderr[:200]}")
    vm_pid = int(r.stdout.split()[0])
    merged = tmp_path / "merged.data"
    r = subprocess.run(["perf", "inject", "-v", "-i", str(host), f"--guest-data={guest},{vm_pid},0", "-o", str(merged)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"perf inject --guest-data failed here: {r.stderr[-200:]}")
    perf_vcpus = {int(v): int(t) for t, v in re.findall(r"Found VCPU: tid (\d+) comm CPU \d+/KVM vcpu (\d+)", r.stderr)}
    assert sorted(perf_vcpus) == [0, 1]

    with open_perf_data(merged) as pd:
        sb = sideband_from_perf_data(pd)
    assert sorted(sb.machines) == [-1, vm_pid]
    assert {v: sb.vcpu_thread(vm_pid, v).tid for v in (0, 1)} == perf_vcpus
    assert sb.hypervisors() == {vm_pid: perf_vcpus}
    assert {sb.vcpu_of_host_thread(t) for t in perf_vcpus.values()} == {(vm_pid, 0), (vm_pid, 1)}
    assert sb.vcpu_of_host_thread(vm_pid) is None  # the main thread runs no VCPU

    out = subprocess.run(["perf", "script", "-i", str(merged), "--show-switch-events", "--show-task-events",
                          "-F", "machine_pid,vcpu,cpu,pid,tid,comm,time", "--ns"],
                         capture_output=True, text=True, timeout=120).stdout
    line_re = re.compile(r"^(?:VM:\s*(\d+) VCPU:(\d+))?\s*(.*?)\s+(-?\d+)/(-?\d+)\s+\[\d+\]\s+(\d+)\.(\d+): "
                         r"(PERF_RECORD_SWITCH_CPU_WIDE|PERF_RECORD_EXIT)(.*)$")
    seen = {"guest": 0, "host": 0}
    for line in out.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        vm, vcpu, comm, pid, tid, s, ns, kind, rest = m.groups()
        time = int(s) * 10**9 + int(ns)
        mpid = int(vm) if vm else -1
        th = sb.machine(mpid).thread(int(tid), time)
        assert th is not None or int(tid) < 0, line  # an exiting task can switch out as -1
        assert (th.comm_name(time) if th else f":{tid}") == comm, line  # same thread, same name, on the same machine
        if kind == "PERF_RECORD_SWITCH_CPU_WIDE" and vm:
            seen["guest"] += 1
            nxt = re.search(r"(?:next|prev) pid/tid:\s*(-?\d+)/(-?\d+)", rest)
            expect = (int(nxt.group(1)), int(nxt.group(2))) if " OUT " in rest else (int(pid), int(tid))
            assert sb.tid_on_cpu(int(vcpu), time, machine=mpid) == expect, line  # guest timeline by VCPU
        elif kind == "PERF_RECORD_SWITCH_CPU_WIDE":
            seen["host"] += 1
    assert seen["guest"] > 10 and seen["host"] > 10
    assert sorted(sb.machine(vm_pid).cpus) == [0, 1]
    # ptexport info reports the guest machine and the VCPU threads
    import io
    import json

    from ptexport.cli import main

    out = io.StringIO()
    assert main(["info", "--json", str(merged)], out=out) == 0
    rep = json.loads(out.getvalue())["sideband"]
    assert rep["hypervisors"] == {str(vm_pid): {str(v): t for v, t in sorted(perf_vcpus.items())}}
    assert [(m["pid"], m["kind"]) for m in rep["machines"]] == [(-1, "host"), (vm_pid, "guest")]
    assert sorted(rep["machines"][1]["cpus"]) == ["0", "1"]


def test_quipper_maps_get_build_ids_from_the_header(quipper_sb):
    # MMAP2 records of perf 4.14 carry no build-ids; the BUILD_ID feature (pid -1 = host) has them
    sb = quipper_sb
    libc = sb.map_at(3174, 0x7FB36C8BB000, 641257237773)
    assert libc.build_id.hex() == "93fdba25fc55b597068e81c42f82e7766da372cb"
    k = sb.map_at(3174, 0xFFFFFFFFB9600000, 0)
    assert k.build_id.hex() == "672679ceaecf17b7a879e56c56802afc568aa242"  # [kernel.kallsyms]
    assert sb.map_at(3174, 0x7FFD8FDFE000, 641258000000).build_id.hex() == "2d160c5722251748ef5c2239fb6940195d3c19b7"


@needs_perf
def test_quipper_tid_and_dso_of_every_perf_branch_sample(quipper, quipper_sb):
    """perf 6.1 decodes the quipper trace into 619 branch samples; each carries the tid perf's
    intel_pt took from the switch timeline at that time and the DSOs of its from/to addresses:
    the model must name the same ones."""
    out = subprocess.run(["perf", "script", "--itrace=be", "-F", "cpu,pid,tid,time,ip,dso,addr", "--ns", "-i",
                          str(quipper)], capture_output=True, text=True, timeout=120).stdout
    n = addrs = 0
    for line in out.splitlines():
        m = re.match(r"\s*(-?\d+)/(-?\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+([0-9a-f]+) \((.*?)\) => +([0-9a-f]+) \((.*?)\)",
                     line)
        if not m:
            continue  # decoder error lines (cpu -1)
        pid, tid, cpu, s, ns = map(int, m.groups()[:5])
        time = s * 10**9 + ns
        assert quipper_sb.tid_on_cpu(cpu, time) == (pid, tid), line
        n += 1
        for addr, dso in ((m.group(6), m.group(7)), (m.group(8), m.group(9))):
            if int(addr, 16) == 0:
                continue
            e = quipper_sb.map_at(pid, int(addr, 16), time)
            got = "[unknown]" if e is None else e.filename
            assert got == dso or (dso == "[kernel.kallsyms]" and got.startswith(dso)), line
            addrs += 1
    assert n == 619 and addrs > 600
