"""Check a generated VM trace against perf 6.1.

The perf workflow of perf-intel-pt(1), "Tracing Virtual Machines (including user space)":

1. ``perf inject -i host/data --vm-time-correlation=OFFSET --force`` rewrites the guest TSC
   packets of a copy of the host recording in place (guest TSC - offset = host TSC);
2. ``perf inject -i host/data --guest-data=guest.data,PID,OFFSET -o inj.data`` merges the
   guest's sideband (time converted the same way) and copies its kcore_dir;
3. the host's kcore_dir is copied into inj.data (perf inject copies only the guest's, as
   kcore_dir__PID); ``perf script -i inj.data --itrace=be -F machine_pid,vcpu,pid,tid,cpu,
   time,flags,ip,addr --ns`` prints every branch.

The branches are compared per host CPU, in order, with the ground truth: machine, VCPU,
pid, tid, from and to exactly; times within one MTC period (perf times branches by the last
timing packet it read).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptexport.errors import SynthError

_LINE = re.compile(r"^\s*(?:VM:\s*(\d+)\s+VCPU:(\d+)\s+)?(-?\d+)/(-?\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):"
                   r"\s+(.*?)\s+([0-9a-f]+) =>\s+([0-9a-f]+)\s*$")
FIELDS = "machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr"

# perf 6.1's flags text for each ground-truth kind (vm.KIND_NAMES order).  Tracing stops at
# an indirect call here, hence "tr end  call".  A VM exit's flags (branch|async|vmexit|
# interrupt... = 4131) have no name in perf 6.1, which prints the flag letters "bcyh".
PERF_FLAGS = ("tr strt", "tr end  call", "jcc", "jmp", "call", "return", "vmentry", "bcyh",
              "syscall", "sysret")


def _perf() -> str:
    perf = shutil.which("perf")
    if perf is None:
        raise SynthError("perf is not installed (Debian: apt-get install linux-perf)")
    return perf


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(cwd), timeout=timeout)
    if r.returncode != 0:
        raise SynthError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return r


def vm_time_correlation(perf_data: Path, args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``perf inject -i F --vm-time-correlation=ARGS [--force]`` (in place unless dry-run)."""
    cmd = [_perf(), "inject", "-i", str(perf_data), f"--vm-time-correlation={args}"]
    if not args.strip().startswith("dry-run"):
        cmd.append("--force")
    return _run(cmd, cwd)


def perf_pipeline(out: Path, work: Path, *, inject_guest: bool = True, fields: str = FIELDS,
                  itrace: str = "be") -> str:
    """Run the perf workflow on a copy of the generated recording; returns perf script's
    output (stdout + stderr).  With ``inject_guest`` the merged recording is left in
    ``work/inj.data`` (a directory: data, the guest's kcore_dir__PID and a copy of the
    host's kcore_dir, so ``perf script -i work/inj.data`` needs no other option)."""
    out, work = Path(out).resolve(), Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    meta = json.loads((out / "truth.json").read_text())
    offsets = {v["tsc_offset"] for v in meta["vcpus"]}
    if len(offsets) != 1:
        raise SynthError("the perf check needs one TSC offset for all VCPUs")
    off = hex(offsets.pop())
    scale = meta.get("tsc_scale", 1.0)
    gdata = f"{off},{scale!r}" if scale != 1.0 else off
    host = work / "host.data"
    if host.exists():
        shutil.rmtree(host)
    shutil.copytree(out / "host.data", host)
    vm_time_correlation(host / "data", off, work)
    if inject_guest:
        inj = work / "inj.data"
        if inj.exists():
            shutil.rmtree(inj) if inj.is_dir() else inj.unlink()
        _run([_perf(), "inject", "-i", str(host / "data"),
              f"--guest-data={out / 'guest.data'},{meta['machine_pid']},{gdata}", "-o", str(inj)],
             work)
        if inj.is_dir() and not (inj / "kcore_dir").exists():
            shutil.copytree(host / "kcore_dir", inj / "kcore_dir")
        cmd = [_perf(), "script", "-i", str(inj)]
    else:
        gk = str(out / "guest.data" / "kcore_dir")
        cmd = [_perf(), "script", "-i", str(host), f"--guestkallsyms={gk}/kallsyms",
               f"--guestmodules={gk}/modules"]
    cmd += [f"--itrace={itrace}", "-F", fields, "--ns"]
    r = _run(cmd, work)
    return r.stdout + r.stderr


@dataclass
class VmPerfBranches:
    machine_pid: np.ndarray
    vcpu: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    cpu: np.ndarray
    time: np.ndarray
    flags: list[str]
    from_ip: np.ndarray
    to_ip: np.ndarray
    other: list[str]


def parse(text: str) -> VmPerfBranches:
    cols: list[list] = [[] for _ in range(9)]
    other = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            if line.strip():
                other.append(line)
            continue
        mp, vc, pid, tid, cpu, sec, nsec, flags, frm, to = m.groups()
        for c, v in zip(cols, (-1 if mp is None else int(mp), -1 if vc is None else int(vc),
                               int(pid), int(tid), int(cpu),
                               int(sec) * 1_000_000_000 + int(nsec), flags.strip(),
                               int(frm, 16), int(to, 16))):
            c.append(v)
    i64 = lambda c: np.array(c, dtype=np.int64)   # noqa: E731
    return VmPerfBranches(i64(cols[0]), i64(cols[1]), i64(cols[2]), i64(cols[3]), i64(cols[4]),
                          i64(cols[5]), cols[6], np.array(cols[7], dtype=np.uint64),
                          np.array(cols[8], dtype=np.uint64), other)


def compare(out: Path, perf: VmPerfBranches, *, guest_sideband: bool = True) -> dict:
    """Per host CPU: equal identity columns in order, and the largest time difference.
    Without guest sideband (kernel-only decoding) perf shows guest branches under the host
    thread with no machine/VCPU, so only from/to/cpu/time are compared."""
    truth = dict(np.load(Path(out) / "truth.npz"))
    keys = ["machine_pid", "vcpu", "pid", "tid", "from_ip", "to_ip"] if guest_sideband else \
        ["from_ip", "to_ip"]
    res = {"perf_branches": int(len(perf.time)), "truth_branches": int(len(truth["time"])),
           "mismatches": 0, "first_mismatch": None, "max_time_error_ns": 0, "errors": [
               line for line in perf.other if "error" in line][:5]}
    for cpu in np.unique(truth["cpu"]):
        ts = truth["cpu"] == cpu
        ps = perf.cpu == cpu
        n = min(ts.sum(), ps.sum())
        if ts.sum() != ps.sum():
            res["mismatches"] += abs(int(ts.sum()) - int(ps.sum()))
        for k in keys:
            a = truth[k][ts][:n].astype(np.int64)
            b = getattr(perf, k)[ps][:n].astype(np.int64)
            bad = np.nonzero(a != b)[0]
            if len(bad):
                res["mismatches"] += len(bad)
                if res["first_mismatch"] is None:
                    i = int(bad[0])
                    res["first_mismatch"] = {"cpu": int(cpu), "index": i, "column": k,
                                             "truth": int(a[i]), "perf": int(b[i])}
        want = [PERF_FLAGS[k] for k in truth["kind"][ts][:n]]
        got = [f for f, keep in zip(perf.flags, ps) if keep][:n]
        bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
        if bad:
            res["mismatches"] += len(bad)
            if res["first_mismatch"] is None:
                res["first_mismatch"] = {"cpu": int(cpu), "index": bad[0], "column": "flags",
                                         "truth": want[bad[0]], "perf": got[bad[0]]}
        dt = np.abs(truth["time"][ts][:n].astype(np.int64) - perf.time[ps][:n])
        if n:
            res["max_time_error_ns"] = max(res["max_time_error_ns"], int(dt.max()))
    return res
