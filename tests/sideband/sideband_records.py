"""Tiny hand-made records with perfdata's attribute names, for unit tests of the model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ptexport.perfdata.constants import RecordType as RT

COMM_EXEC = 1 << 13
SWITCH_OUT = 1 << 13
SWITCH_OUT_PREEMPT = 1 << 14
USER, KERNEL, GUEST_KERNEL, GUEST_USER = 2, 1, 4, 5


@dataclass
class SampleId:
    pid: int | None = None
    tid: int | None = None
    time: int | None = None
    cpu: int | None = None
    id: int | None = None


@dataclass
class Rec:
    type: int
    misc: int = USER
    time: int | None = None
    cpu: int | None = None
    pid: int | None = None
    tid: int | None = None
    sample_id: SampleId | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpumode(self) -> int:
        return self.misc & 7

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["extra"][name]
        except KeyError:
            raise AttributeError(name) from None


def _sid(pid, tid, time, cpu, sid):
    return SampleId(pid=pid, tid=tid, time=time, cpu=cpu, id=sid)


def comm(pid, tid, name, time, exec_=False, cpu=0, sid=None):
    return Rec(RT.COMM, USER | (COMM_EXEC if exec_ else 0), time, cpu, pid, tid, _sid(pid, tid, time, cpu, sid),
               {"comm": name, "exec": exec_})


def fork(pid, tid, ppid, ptid, time, cpu=0):
    return Rec(RT.FORK, USER, time, cpu, pid, tid, _sid(pid, tid, time, cpu, None), {"ppid": ppid, "ptid": ptid})


def exit_(pid, tid, time, cpu=0):
    return Rec(RT.EXIT, USER, time, cpu, pid, tid, _sid(pid, tid, time, cpu, None), {"ppid": pid, "ptid": tid})


def mmap2(pid, tid, start, length, filename, time, pgoff=0, prot=5, misc=USER, build_id=None, sid=None):
    if build_id is not None:
        misc |= 1 << 14
    return Rec(RT.MMAP2, misc, time, 0, pid, tid, _sid(pid, tid, time, 0, sid),
               {"start": start, "len": length, "pgoff": pgoff, "filename": filename, "prot": prot, "flags": 2,
                "build_id": build_id, "maj": 8, "min": 1, "ino": 42, "ino_generation": 0})


def mmap(pid, tid, start, length, filename, time, pgoff=0, misc=USER):
    return Rec(RT.MMAP, misc, time, 0, pid, tid, _sid(pid, tid, time, 0, None),
               {"start": start, "len": length, "pgoff": pgoff, "filename": filename})


def switch_cpu_wide(cpu, time, pid, tid, out, next_prev_pid, next_prev_tid, preempt=False, misc=KERNEL, sid=None):
    m = misc | (SWITCH_OUT if out else 0) | (SWITCH_OUT_PREEMPT if preempt else 0)
    return Rec(RT.SWITCH_CPU_WIDE, m, time, cpu, pid, tid, _sid(pid, tid, time, cpu, sid),
               {"out": out, "preempt": preempt, "next_prev_pid": next_prev_pid, "next_prev_tid": next_prev_tid})


def switch(cpu, time, pid, tid, out, sid=None, misc=USER):
    return Rec(RT.SWITCH, misc | (SWITCH_OUT if out else 0), time, cpu, pid, tid, _sid(pid, tid, time, cpu, sid),
               {"out": out, "preempt": False})


def itrace_start(cpu, time, pid, tid):
    return Rec(RT.ITRACE_START, USER, time, cpu, pid, tid, _sid(pid, tid, time, cpu, None), {})


def aux(cpu, time, offset, size, flags=0):
    return Rec(RT.AUX, USER, time, cpu, None, None, _sid(None, None, time, cpu, None),
               {"aux_offset": offset, "aux_size": size, "flags": flags})


def auxtrace(cpu, tid, size, offset=0, ref=0, idx=0, data_offset=0):
    return Rec(RT.AUXTRACE, 0, None, cpu, None, tid, None,
               {"size": size, "aux_offset": offset, "reference": ref, "idx": idx,
                "data_offset": data_offset, "offset": data_offset - 0x30})


@dataclass
class IdEntry:
    id: int
    idx: int = 0
    cpu: int = 0
    tid: int = 0
    machine_pid: int = 0
    vcpu: int = 0


def id_index(entries):
    return Rec(RT.ID_INDEX, 0, None, None, None, None, None, {"entries": entries})
