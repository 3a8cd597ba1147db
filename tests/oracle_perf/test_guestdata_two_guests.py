"""Two ``--guest-data`` on one host recording: the same as running perf inject once per guest.

The generator makes one hypervisor whose VCPUs run; a second hypervisor process (PID + 1000, with
idle threads "CPU 0/KVM", "CPU 1/KVM") is added to the host's start-up COMMs, and the same guest
perf.data is given for it too. perf 6.1: ``perf inject -i host --guest-data=G,PID,OFF -o inj`` then
``perf inject -i inj --guest-data=G,PID+1000,OFF -o inj2``; ptexport: both --guest-data on the host
recording. The lines and every table are equal (kernel dsos' kcore paths aside), with three machines'
threads, comms and context switches.
"""

from __future__ import annotations

import shutil
import subprocess

from ptexport.perfdata.constants import RecordType

from guestdatatest import dump, make, run, tables
from ptxtest import needs_perf


@needs_perf
def test_two_guests_equal_perf_inject_twice(tmp_path, monkeypatch):
    import ptexport.synth.vm as vm

    second = 5000
    orig = vm.record

    def record(rtype, misc, body):
        out = orig(rtype, misc, body)
        if rtype == RecordType.COMM and b"qemu-system-x86" in body:  # the host's first COMM
            for tid, name in ((second, "qemu-system-x86"), (second + 1, "CPU 0/KVM"), (second + 2, "CPU 1/KVM")):
                out += orig(RecordType.COMM, 0, vm.comm_body(second, tid, name)
                            + vm.sample_id(vm.ST, second, tid, 0, 0, 200))
        return out

    monkeypatch.setattr(vm, "record", record)
    t = make(tmp_path, "mixed")
    monkeypatch.setattr(vm, "record", orig)
    assert t.pid != second
    spec2 = f"{t.guest},{second},{t.offset:#x}"
    inj2 = t.work / "inj2.data"
    r = subprocess.run(["perf", "inject", "-i", str(t.inj / "data"), f"--guest-data={spec2}", "-o", str(inj2)],
                       capture_output=True, text=True, cwd=str(t.work), timeout=120)
    assert r.returncode == 0, r.stderr[-500:]
    for d in ("kcore_dir", f"kcore_dir__{t.pid}"):
        if not (inj2 / d).exists():
            shutil.copytree(t.inj / d, inj2 / d)
    both = ["--guest-data", t.spec, "--guest-data", spec2]
    assert dump(t.host, *both) == dump(inj2)

    ours, theirs = tmp_path / "ours.db", tmp_path / "inj2.db"
    assert run([t.host, "--db", ours, "-q", *both])[0] == 0
    assert run([inj2, "--db", theirs, "-q"])[0] == 0
    a, b = tables(ours), tables(theirs)
    assert a.keys() == b.keys()
    for table in a:
        if table != "dsos":
            assert a[table] == b[table], table
    assert [r[1:] for r in a["dsos"][1:]] == [tuple(v.replace("/inj2.data/kcore_dir/", "/host.data/kcore_dir/")
                                                    .replace(f"/work/inj2.data/kcore_dir__{t.pid}/",
                                                             "/gen/guest.data/kcore_dir/")
                                                    if isinstance(v, str) else v for v in r[1:])
                                              for r in b["dsos"][1:]]
    machines = {r[1]: r[0] for r in a["machines"][1:]}
    assert {t.pid, second, -1} <= set(machines)
    threads = [r for r in a["threads"][1:] if r[1] == machines[second]]
    assert len(threads) > 2  # the second guest's threads, from its records
