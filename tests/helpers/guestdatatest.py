"""Shared helpers of the --guest-data tests: a generated VM recording run through perf's workflow.

``make(base, name)`` generates one VM variant (``ptexport synth --vm``), applies perf's
``--vm-time-correlation`` to a copy of the host recording (work/host.data) and merges the guest
with ``perf inject --guest-data`` (work/inj.data), as the VM tests do; ``--guest-data`` on
work/host.data must then read like work/inj.data.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from ptexport.cli import main
from ptexport.synth.vm import VmOptions, synthesize_vm
from ptexport.synth.vm_verify import perf_pipeline

# name -> VmOptions keywords (2 host CPUs; 2 VCPUs unless said)
VARIANTS: dict[str, dict] = {
    "kernel": dict(guest="kernel", seed=5),
    "user": dict(guest="user", seed=2),
    "mixed": dict(guest="mixed", seed=3),
    "vcpus3": dict(guest="mixed", seed=4, vcpus=3),
    "offset": dict(guest="mixed", seed=6, tsc_offsets=(0x123456789, 0x123456789)),
    "scale2": dict(guest="mixed", seed=8, tsc_scale=2.0),
    "scale_half": dict(guest="user", seed=9, tsc_scale=0.5, tsc_offsets=(1 << 40, 1 << 40)),
}


@dataclass
class GuestTrace:
    gen: Path  # the generator's output: host.data, guest.data, gprog, truth
    work: Path  # work/host.data (time-corrected copy), work/inj.data (perf inject's output)
    meta: dict
    spec: str  # the --guest-data argument perf inject was given

    @property
    def host(self) -> Path:
        return self.work / "host.data"

    @property
    def inj(self) -> Path:
        return self.work / "inj.data"

    @property
    def guest(self) -> Path:
        return self.gen / "guest.data"

    @property
    def pid(self) -> int:
        return int(self.meta["machine_pid"])

    @property
    def offset(self) -> int:
        return int(self.meta["vcpus"][0]["tsc_offset"])


def make(base: Path, name: str, branches: int = 3000) -> GuestTrace:
    opts = dict(branches=branches, vcpus=2, cpus=2)
    opts.update(VARIANTS[name])
    gen, work = base / "gen", base / "work"
    meta = synthesize_vm(gen, VmOptions(**opts))
    perf_pipeline(gen, work)
    scale = meta.get("tsc_scale", 1.0)
    off = int(meta["vcpus"][0]["tsc_offset"])
    spec = f"{gen / 'guest.data'},{meta['machine_pid']},{off:#x}" + (f",{scale!r}" if scale != 1.0 else "")
    return GuestTrace(gen, work, meta, spec)


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    rc = main([str(a) for a in argv], out=out)
    return rc, out.getvalue()


def dump(*argv) -> str:
    rc, text = run(["dump", "branches", "--jobs", "1", *argv])
    assert rc == 0, text
    return text


def tables(db, stamped=("schema_version", "ptexport_migrations")) -> dict[str, list[tuple]]:
    """Every table's column names and rows (rowid order); the write-time columns of ``stamped`` left out."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {}
        for name in names:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({name})")]
            if name in stamped:
                cols = [c for c in cols if c not in ("created", "applied")]
            out[name] = [tuple(cols)] + con.execute(f"SELECT {', '.join(cols)} FROM {name} ORDER BY rowid").fetchall()
        return out
    finally:
        con.close()
