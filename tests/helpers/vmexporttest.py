"""Shared helpers of the VM export tests: a generated VM recording run through perf's workflow.

``make_vm_trace`` generates a host recording of a guest (``ptexport synth --vm``), puts
exit-causing instructions (hlt, out, in: one byte each, so the instruction flow is
unchanged) at some of the guest ips where the generator makes VM exits, then runs perf's
workflow (``perf inject --vm-time-correlation`` and ``--guest-data``).  The ground truth
is the generator's: every branch with host time, host CPU, machine, VCPU and thread.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptexport.synth import generate as G
from ptexport.synth.vm import GUEST_KBASE, GUEST_UBASE, K_VMENTRY, K_VMEXIT, VmOptions, synthesize_vm
from ptexport.synth.vm_verify import parse, perf_pipeline

from ptxtest import perf_python_env

EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
PG_BASE = os.environ.get("PTEXPORT_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
PERF_TABLES = ["machines", "threads", "comms", "comm_threads", "dsos", "symbols", "selected_events", "samples",
               "calls", "call_paths", "context_switches", "branch_types"]
OTHER = "external interrupt or other"
_PATCHES = ((b"\xf4", "HLT"), (b"\xee", "IO_INSTRUCTION"), (b"\xec", "IO_INSTRUCTION"), (None, OTHER))


def have_exporter() -> bool:
    if not os.path.exists(EXPORTER):
        return False
    proc = subprocess.run(["/usr/bin/python3", "-c", "import PySide2.QtSql"], capture_output=True)
    return proc.returncode == 0


@dataclass
class VmTrace:
    out: Path  # the generator's output (truth.npz, truth.json, host.data, guest.data, gprog)
    work: Path  # perf's workflow: work/inj.data (or work/host.data without guest sideband)
    data: Path  # the recording to export
    meta: dict
    reasons: dict[int, str]  # guest ip -> the exit reason of the instruction there

    @property
    def truth(self) -> dict[str, np.ndarray]:
        return dict(np.load(self.out / "truth.npz"))


def patch_exit_instructions(out: Path) -> dict[int, str]:
    """hlt / out / in at every 4th distinct guest exit ip that holds a nop (guest kernel: the kcore
    copy, guest user: the program); returns the expected exit reason of every guest exit ip."""
    truth = dict(np.load(out / "truth.npz"))
    guest_exit = (truth["kind"] == K_VMEXIT) & (truth["machine_pid"] != -1)
    ips = sorted(set(truth["from_ip"][guest_exit].tolist()))
    files = {True: out / "guest.data" / "kcore_dir" / "kcore", False: out / "gprog"}
    data = {k: bytearray(p.read_bytes()) for k, p in files.items()}
    reasons = {}
    n = 0
    for ip in ips:
        kernel = bool(ip >> 63)
        off = 0x1000 + ip - (GUEST_KBASE if kernel else GUEST_UBASE)
        code, reason = _PATCHES[n % len(_PATCHES)] if data[kernel][off] == 0x90 else (None, OTHER)
        if data[kernel][off] == 0x90:
            n += 1
        if code is not None:
            data[kernel][off:off + 1] = code
        reasons[ip] = reason
    for k, p in files.items():
        p.write_bytes(bytes(data[k]))
    return reasons


def make_vm_trace(base: Path, *, guest: str = "mixed", seed: int = 3, branches: int = 6000,
                  inject: bool = True, patch: bool = True, **opts) -> VmTrace:
    out, work = base / "gen", base / "work"
    meta = synthesize_vm(out, VmOptions(branches=branches, guest=guest, vcpus=2, cpus=2, seed=seed, **opts))
    reasons = patch_exit_instructions(out) if patch else {}
    perf_pipeline(out, work, inject_guest=inject)
    data = work / ("inj.data" if inject else "host.data")
    return VmTrace(out, work, data, meta, reasons)


def perf_export(trace: Path, db: Path, *extra: str) -> None:
    subprocess.run(["perf", "script", "-i", str(trace), "--itrace=bep", *extra, "-s", EXPORTER, str(db),
                    "branches", "calls"], check=True, capture_output=True, timeout=600, env=perf_python_env(),
                   cwd=str(trace.parent))


def perf_branches(trace: Path, *extra: str):
    """perf script's branches with machine_pid and vcpu (vm_verify.parse's columns)."""
    r = subprocess.run(["perf", "script", "-i", str(trace), "--itrace=be", *extra, "-F",
                        "machine_pid,vcpu,pid,tid,cpu,time,flags,ip,addr", "--ns"],
                       capture_output=True, text=True, timeout=600, cwd=str(trace.parent))
    return parse(r.stdout + r.stderr)


def table_rows(db: Path, table: str, columns: list[str]) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute(f"SELECT {','.join(columns)} FROM {table} ORDER BY id").fetchall()
    finally:
        con.close()
    return [tuple(None if v == "" else v for v in r) for r in rows]


def columns(db: Path, table: str) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def truth_exits(vm: VmTrace) -> list[dict]:
    """Every VM exit of the ground truth with the next VM entry of its host VCPU thread."""
    t = vm.truth
    host_tid = {v["vcpu"]: v["host_tid"] for v in vm.meta["vcpus"]}
    order = np.argsort(t["tsc"], kind="stable")
    out: list[dict] = []
    open_: dict[int, dict] = {}
    for i in order.tolist():
        kind, mp = int(t["kind"][i]), int(t["machine_pid"][i])
        if kind == K_VMEXIT and mp != -1:
            e = {"vcpu": int(t["vcpu"][i]), "cpu": int(t["cpu"][i]), "guest_ip": int(t["from_ip"][i]),
                 "exit_tsc": int(t["tsc"][i]), "entry_tsc": None, "reason": vm.reasons.get(int(t["from_ip"][i]), OTHER)}
            out.append(e)
            open_[host_tid[e["vcpu"]]] = e
        elif kind == K_VMENTRY and mp == -1:
            e = open_.pop(int(t["tid"][i]), None)
            if e is not None:
                e["entry_tsc"] = int(t["tsc"][i])
    for e in out:
        e["exit_time"] = int(G.tsc_to_ns(np.array([e["exit_tsc"]], np.uint64))[0])
        e["entry_time"] = (int(G.tsc_to_ns(np.array([e["entry_tsc"]], np.uint64))[0])
                           if e["entry_tsc"] is not None else None)
    return out


def load_meta(out: Path) -> dict:
    return json.loads((out / "truth.json").read_text())


def export_db(trace: Path, db: str | Path, *extra: str) -> str:
    """``ptexport TRACE --db DB -q [extra]``; returns what it printed (asserting success)."""
    import io

    from ptexport.cli import main

    out = io.StringIO()
    assert main([str(trace), "--db", str(db), "-q", *extra], out=out) == 0, out.getvalue()
    return out.getvalue()
