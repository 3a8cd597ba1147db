"""Virtual machines in the export: guest machines as perf's db-export writes them, and what perf loses.

perf 6.1 (``perf script -s export-to-sqlite.py`` on a ``perf inject --guest-data``
recording, or on a host recording with ``--guestkallsyms``) exports guest code
into guest machines:

* a guest's records (ID_INDEX entries with a machine_pid) build that guest's own
  thread table (perf's rules per machine, :mod:`ptexport.dbexport.threads`);
  a guest machine starts with the thread ``[guest/PID]`` (pid -1, tid PID) and,
  once guest code is decoded, the idle task 0/0 ``swapper`` (intel_pt_get_guest);
  Intel PT makes a guest thread current at a guest switch-in only;
* a guest sample (decoded in non-root code) belongs to the guest machine and to
  the guest thread current on its VCPU; without guest sideband perf puts it in
  the machine of the hypervisor's pid, else in the default guest (pid 0, made by
  ``--guestkallsyms``), under a thread with the host thread's pid/tid;
* the guest kernel is the DSO ``[guest.kernel.kallsyms.PID]`` (default guest:
  ``[guest.kernel.kallsyms]``) with the symbols of the guest's kallsyms: the
  ``kcore_dir__PID`` perf inject copied next to the data, else ``--guestkallsyms``;
  with a kcore beside the kallsyms perf loads kcore instead of the kernel map:
  the DSO's long name is the kcore file, its maps are kcore's PT_LOAD segments
  and symbols live in their file-offset space (``dso__split_kallsyms_for_kcore``);
  the host kernel of a ``--kcore`` recording is loaded the same way;
* guest user code comes from the guest's MMAP records (file paths as in the guest,
  read under ``--guestmount``/PID when given).

What perf loses and this module adds: ``samples.vcpu``/``machine_pid``,
``context_switches.vcpu``, one ``vcpus`` row per VCPU (host thread, VMCS, TSC
offset and multiplier with their source) and ``vm_exits``: every VM exit with the
next VM entry of the same VCPU thread and the exit reason, from a recorded
``kvm:kvm_exit`` tracepoint when there is one, else from the guest instruction at
the exit's FUP (:func:`exit_reason_of_insn`).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ptexport.errors import PtExportError
from ptexport.jit import numba
from ptexport.images.kallsyms import load_kallsyms
from ptexport.images.symbols import Symbol, SymbolTable
from ptexport.dbexport.machine import _KERNEL_DSOS, MachineState
from ptexport.dbexport.threads import PerfThreads
from ptexport.samples.columns import few_distinct
from ptexport.samples.flags import IpFlag
from ptexport.sideband.model import Machine

HOST_PID = -1
DEFAULT_GUEST_PID = 0
VMENTRY = int(IpFlag.VMENTRY)
VMEXIT = int(IpFlag.VMEXIT)

#: Reason given to an exit whose guest instruction does not itself exit (an asynchronous exit:
#: an external interrupt, a preemption timer, an EPT violation...).
OTHER_REASON = "external interrupt or other"
#: Reason of an exit whose guest code cannot be read.
UNKNOWN_REASON = "unknown"

#: VMX basic exit reasons (Intel SDM vol. 3, appendix C), named as KVM's kvm_exit tracepoint prints them.
VMX_EXIT_REASONS = {
    0: "EXCEPTION_NMI", 1: "EXTERNAL_INTERRUPT", 2: "TRIPLE_FAULT", 3: "INIT_SIGNAL", 4: "SIPI_SIGNAL",
    7: "INTERRUPT_WINDOW", 8: "NMI_WINDOW", 9: "TASK_SWITCH", 10: "CPUID", 12: "HLT", 13: "INVD",
    14: "INVLPG", 15: "RDPMC", 16: "RDTSC", 18: "VMCALL", 19: "VMCLEAR", 20: "VMLAUNCH", 21: "VMPTRLD",
    22: "VMPTRST", 23: "VMREAD", 24: "VMRESUME", 25: "VMWRITE", 26: "VMOFF", 27: "VMON", 28: "CR_ACCESS",
    29: "DR_ACCESS", 30: "IO_INSTRUCTION", 31: "MSR_READ", 32: "MSR_WRITE", 33: "INVALID_STATE",
    34: "MSR_LOAD_FAIL", 36: "MWAIT_INSTRUCTION", 37: "MONITOR_TRAP_FLAG", 39: "MONITOR_INSTRUCTION",
    40: "PAUSE_INSTRUCTION", 41: "MCE_DURING_VMENTRY", 43: "TPR_BELOW_THRESHOLD", 44: "APIC_ACCESS",
    45: "EOI_INDUCED", 46: "GDTR_IDTR", 47: "LDTR_TR", 48: "EPT_VIOLATION", 49: "EPT_MISCONFIG",
    50: "INVEPT", 51: "RDTSCP", 52: "PREEMPTION_TIMER", 53: "INVVPID", 54: "WBINVD", 55: "XSETBV",
    56: "APIC_WRITE", 57: "RDRAND", 58: "INVPCID", 59: "VMFUNC", 60: "ENCLS", 61: "RDSEED",
    62: "PML_FULL", 63: "XSAVES", 64: "XRSTORS", 67: "UMWAIT", 68: "TPAUSE", 74: "BUS_LOCK", 75: "NOTIFY",
}

# Instructions that cause a VM exit by themselves (unconditionally or under KVM's usual controls),
# by capstone mnemonic.
_INSN_REASONS = {
    "cpuid": "CPUID", "hlt": "HLT", "vmcall": "VMCALL", "vmmcall": "VMCALL",
    "in": "IO_INSTRUCTION", "out": "IO_INSTRUCTION", "insb": "IO_INSTRUCTION", "insw": "IO_INSTRUCTION",
    "insd": "IO_INSTRUCTION", "outsb": "IO_INSTRUCTION", "outsw": "IO_INSTRUCTION", "outsd": "IO_INSTRUCTION",
    "rdmsr": "MSR_READ", "wrmsr": "MSR_WRITE", "invd": "INVD", "invlpg": "INVLPG", "rdpmc": "RDPMC",
    "rdtsc": "RDTSC", "rdtscp": "RDTSCP", "wbinvd": "WBINVD", "xsetbv": "XSETBV",
    "mwait": "MWAIT_INSTRUCTION", "monitor": "MONITOR_INSTRUCTION", "pause": "PAUSE_INSTRUCTION",
    "rdrand": "RDRAND", "rdseed": "RDSEED", "invpcid": "INVPCID", "xsaves": "XSAVES", "xrstors": "XRSTORS",
    "lgdt": "GDTR_IDTR", "sgdt": "GDTR_IDTR", "lidt": "GDTR_IDTR", "sidt": "GDTR_IDTR",
    "lldt": "LDTR_TR", "sldt": "LDTR_TR", "ltr": "LDTR_TR", "str": "LDTR_TR",
    "vmclear": "VMCLEAR", "vmlaunch": "VMLAUNCH", "vmptrld": "VMPTRLD", "vmptrst": "VMPTRST",
    "vmread": "VMREAD", "vmresume": "VMRESUME", "vmwrite": "VMWRITE", "vmxoff": "VMOFF", "vmxon": "VMON",
    "invept": "INVEPT", "invvpid": "INVVPID", "vmfunc": "VMFUNC", "encls": "ENCLS",
    "umwait": "UMWAIT", "tpause": "TPAUSE", "getsec": "GETSEC",
}

_CAPSTONE: Any = None


def exit_reason_of_insn(code: bytes, ip: int = 0) -> str:
    """The VM exit an instruction makes by itself (``code`` starts at the exit's guest ip).

    VMX reports an instruction-caused exit at the instruction (it does not retire), so the
    FUP of the exit points at it; any other instruction there means the exit was not caused
    by it: :data:`OTHER_REASON`.  Unreadable code: :data:`UNKNOWN_REASON`.
    """
    return _insn_reason(code, ip)[0]


def _disassembler() -> Any:
    """capstone's x86-64 disassembler (imported and made on first use)."""
    global _CAPSTONE
    if _CAPSTONE is None:
        import capstone

        _CAPSTONE = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    return _CAPSTONE


def _insn_reason(code: bytes, ip: int = 0) -> tuple[str, int]:
    """:func:`exit_reason_of_insn` and the length of the instruction it read (0: none decoded)."""
    if not code:
        return UNKNOWN_REASON, 0
    for insn in _disassembler().disasm(code[:16], ip, 1):
        name = insn.mnemonic
        if name == "mov":
            ops = [o.strip() for o in insn.op_str.split(",")]
            if any(o.startswith("cr") for o in ops):
                return "CR_ACCESS", insn.size
            if any(o.startswith("dr") for o in ops):
                return "DR_ACCESS", insn.size
        for prefix in ("rep ", "repe ", "repne "):
            if name.startswith(prefix):
                name = name[len(prefix):]
        return _INSN_REASONS.get(name, OTHER_REASON), insn.size
    return UNKNOWN_REASON, 0


class InsnReasons:
    """:func:`exit_reason_of_insn` remembered per instruction: an instruction is its bytes alone (the
    decoder reads no further), so code read at an exit whose first bytes are an instruction seen
    before has that instruction's reason, whatever follows it (the 16 bytes read at each of a VM's
    thousands of exits differ in what follows; the instructions at its exit sites are a few)."""

    def __init__(self) -> None:
        self._by_insn: dict[bytes, str] = {}
        self._sizes: list[int] = []  # the lengths of the instructions seen, each once

    def __call__(self, code: bytes, ip: int = 0) -> str:
        for size in self._sizes:
            reason = self._by_insn.get(code[:size])
            if reason is not None and len(code) >= size:
                return reason
        reason, size = _insn_reason(code, ip)
        if size:
            self._by_insn[code[:size]] = reason
            if size not in self._sizes:
                self._sizes.append(size)
        return reason


def perf_event_modifier(attr: Any) -> str:
    """perf's event-name modifier of an attr (evsel__add_modifiers): ``:k``/``:u``/``:h`` for the
    excluded contexts, and ``H``/``G`` (host, guest) when host or guest counting is not the default
    (an intel_pt event recorded for guests too, as ``perf kvm --guest --host record`` or a host
    recording of VMs makes it, is ``branches:HG``)."""
    mods = ""
    guest_default = False
    if attr.exclude_kernel or attr.exclude_user or attr.exclude_hv:
        mods += "" if attr.exclude_kernel else "k"
        mods += "" if attr.exclude_user else "u"
        mods += "" if attr.exclude_hv else "h"
        guest_default = True
    if attr.precise_ip:
        mods += "p" * min(int(attr.precise_ip), 3)
        guest_default = True
    if attr.exclude_host or bool(attr.exclude_guest) == guest_default:
        mods += "" if attr.exclude_host else "H"
        mods += "" if attr.exclude_guest else "G"
    return f":{mods}" if mods else ""


# ---------------------------------------------------------------------------------- kernels

@dataclass
class KernelImage:
    """A kernel DSO as perf loads it from kallsyms (and kcore beside it)."""

    short_name: str
    long_name: str
    table: SymbolTable
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # kcore maps: (start, end, pgoff)
    span: tuple[int, int] | None = None  # without kcore: the kernel map as fixed up by its symbols

    def map_ip(self, ip: int) -> int | None:
        """perf's map_ip of ``ip`` in the kernel's maps; None when no map holds it."""
        if self.segments:
            i = bisect_right([s[0] for s in self.segments], ip) - 1
            if i >= 0 and ip < self.segments[i][1]:
                start, _end, pgoff = self.segments[i]
                return ip - start + pgoff
            return None
        if self.span is not None and not self.span[0] <= ip < self.span[1]:
            return None
        return ip

    def address(self, off: int) -> int:
        """The address of map-space offset ``off`` (inverse of :meth:`map_ip`)."""
        for start, end, pgoff in self.segments:
            if pgoff <= off < pgoff + (end - start):
                return off - pgoff + start
        return off


def kcore_segments(path: str) -> list[tuple[int, int, int]]:
    """(vaddr, vaddr + memsz, file offset) of a kcore copy's PT_LOAD segments ([] if unreadable)."""
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        with open(path, "rb") as f:
            elf = ELFFile(f)
            segs = [(int(p["p_vaddr"]), int(p["p_vaddr"]) + int(p["p_memsz"]), int(p["p_offset"]))
                    for p in elf.iter_segments() if p["p_type"] == "PT_LOAD" and p["p_memsz"]]
    except (OSError, ELFError, ValueError, KeyError):
        return []
    return sorted(segs)


def load_kernel_image(kallsyms: str, short_name: str, *, ref_name: str | None = None,
                      ref_addr: int | None = None, kcore: bool = True) -> KernelImage:
    """The kernel DSO of a kallsyms file; with ``kcore`` and a kcore file beside it, perf's kcore form."""
    ks = load_kallsyms(kallsyms)
    kpath = os.path.join(os.path.dirname(kallsyms), "kcore")
    segs = kcore_segments(kpath) if kcore and os.path.isfile(kpath) else []
    if segs:
        starts = [s[0] for s in segs]
        syms: list[Symbol] = []
        every = sorted([*ks.kernel, *(s for mod in ks.modules.values() for s in mod)], key=lambda s: s.start)
        for s in every:
            i = bisect_right(starts, s.start) - 1
            if i < 0 or s.start >= segs[i][1]:
                continue  # perf drops symbols outside kcore's maps
            start, end, pgoff = segs[i]
            delta = start - pgoff
            syms.append(Symbol(s.start - delta, min(s.end, end) - delta, s.name, s.binding))
        return KernelImage(short_name, kpath, SymbolTable(syms), segs)
    table = ks.kernel_table(ref_name, ref_addr)
    span = (table.symbols[0].start, table.symbols[-1].end) if len(table) else None
    return KernelImage(short_name, short_name, table, [], span)


def kernel_dso_name(machine_pid: int) -> str:
    """perf's kernel DSO name of a machine."""
    if machine_pid == HOST_PID:
        return "[kernel.kallsyms]"
    if machine_pid == DEFAULT_GUEST_PID:
        return "[guest.kernel.kallsyms]"
    return f"[guest.kernel.kallsyms.{machine_pid}]"


def guest_kallsyms_path(trace_path: str, kcore_dir: str | None, machine_pid: int,
                        guestkallsyms: str | None, guestmount: str | None,
                        guest_kcore_dirs: dict[int, str] | None = None) -> str | None:
    """The kallsyms perf 6.1 loads for a guest machine: ``kcore_dir__PID`` beside the data (perf inject
    copied it there; with ``--guest-data FILE,PID`` FILE's kcore_dir, ``guest_kcore_dirs``), the default
    guest's ``--guestkallsyms``, else ``GUESTMOUNT/PID/proc/kallsyms``."""
    if guest_kcore_dirs and machine_pid in guest_kcore_dirs:
        cand = os.path.join(guest_kcore_dirs[machine_pid], "kallsyms")
        if os.path.isfile(cand):
            return cand
    if machine_pid != DEFAULT_GUEST_PID:
        base = os.path.dirname(str(kcore_dir)) if kcore_dir else (
            trace_path if os.path.isdir(trace_path) else os.path.dirname(trace_path))
        cand = os.path.join(base, f"kcore_dir__{machine_pid}", "kallsyms")
        if os.path.isfile(cand):
            return cand
        if guestmount:
            cand = os.path.join(guestmount, str(machine_pid), "proc", "kallsyms")
            return cand if os.path.isfile(cand) else None
        return None
    return guestkallsyms


# ---------------------------------------------------------------------------------- VM exits

# the columns of VmExits.table, one row per exit (int64; guest_ip in two's complement)
_X_MACHINE, _X_VCPU, _X_THREAD, _X_CPU, _X_SID, _X_TIME, _X_GIP, _X_ESID, _X_ETIME, _X_MPID, _X_GTHREAD = range(11)
# the columns of VmExits.guest, one per CPU + 1 (cpu -1: a per-thread recording's)
_G_SET, _G_MACHINE, _G_MPID, _G_VCPU, _G_THREAD, _G_IP = range(6)


def _pair_exits(flags, ip, addr, sid, time, cpu, th, mid, mp, vc, guest, open_row, table, n):  # pragma: no cover - compiled
    """:class:`VmExits` over a batch of VM entry and exit samples (in export order): the new exits
    from column ``n`` of ``table`` on; returns the columns used.  ``guest`` (per CPU + 1) and
    ``open_row`` (per host thread id) carry from batch to batch; ``table`` has room for every exit."""
    for i in range(flags.shape[0]):
        f = flags[i]
        t = th[i]
        if f & VMEXIT:
            c = cpu[i] + 1
            if addr[i] == 0:  # guest side: guest ip => 0
                guest[_G_SET, c] = 1
                guest[_G_MACHINE, c] = mid[i]
                guest[_G_MPID, c] = mp[i]
                guest[_G_VCPU, c] = vc[i]
                guest[_G_THREAD, c] = t
                guest[_G_IP, c] = ip[i]
                continue
            if guest[_G_SET, c]:
                guest[_G_SET, c] = 0
                table[_X_MACHINE, n] = guest[_G_MACHINE, c]
                table[_X_MPID, n] = guest[_G_MPID, c]
                table[_X_VCPU, n] = guest[_G_VCPU, c]
                table[_X_GTHREAD, n] = guest[_G_THREAD, c]
                table[_X_GIP, n] = guest[_G_IP, c]
            else:
                table[_X_MACHINE, n] = 0
                table[_X_MPID, n] = -1
                table[_X_VCPU, n] = -1
                table[_X_GTHREAD, n] = 0
                table[_X_GIP, n] = 0
            table[_X_THREAD, n] = t
            table[_X_CPU, n] = cpu[i]
            table[_X_SID, n] = sid[i]
            table[_X_TIME, n] = time[i]
            table[_X_ESID, n] = 0
            table[_X_ETIME, n] = 0
            open_row[t] = n
            n += 1
        elif f & VMENTRY and ip[i] != 0:  # host side: host ip => 0
            r = open_row[t]
            if r >= 0:
                table[_X_ESID, r] = sid[i]
                table[_X_ETIME, r] = time[i]
                open_row[t] = -1
    return n


if numba is not None:
    _pair_exits = numba.njit(cache=True, nogil=True)(_pair_exits)


def _grown(a: np.ndarray, size: int, fill: int) -> np.ndarray:
    """``a`` with at least ``size`` columns (its last axis, at least doubled; the new ones ``fill``)."""
    if size <= a.shape[-1]:
        return a
    out = np.full((*a.shape[:-1], max(size, 2 * a.shape[-1])), fill, np.int64)
    out[..., :a.shape[-1]] = a
    return out


class VmExits:
    """VM exits paired with the next VM entry of their host VCPU thread, in export order.

    perf splits a VM exit into two branch samples: the guest side (guest ip => 0, in the
    guest machine) and the host side (0 => the host's exit handler, on the host VCPU
    thread), and a VM entry into the host side (host ip => 0) and the guest side
    (0 => guest ip).  An exit is the host-side exit sample; its guest ip, machine and
    VCPU are those of the guest-side sample just before it on the same CPU.  A batch's
    entries and exits are paired by one compiled walk (:func:`_pair_exits`: tens of
    thousands of them per million samples, a Python call each before).
    """

    def __init__(self, reason_of: Callable[[int, int, int, int, int], tuple[str, str]]) -> None:
        self.reason_of = reason_of  # (machine pid, VCPU, guest thread id, guest ip, time) -> (reason, source)
        self.table = np.zeros((11, 0), np.int64)  # the exits so far: columns self.table[:, :self.n]
        self.n = 0
        self.guest = np.zeros((6, 0), np.int64)  # per CPU + 1: its last guest-side exit, not yet taken
        self.open_row = np.zeros(0, np.int64)  # per host thread id: its exit waiting for the next entry (-1)
        self._tracepoints: list[tuple[int, int, str]] = []  # (host thread id, time, reason) of kvm:kvm_exit

    def samples(self, flags: np.ndarray, ip: np.ndarray, addr: np.ndarray, sid: np.ndarray, time: np.ndarray,
                cpu: np.ndarray, thread_id: np.ndarray, machine_id: np.ndarray, machine_pid: np.ndarray,
                vcpu: np.ndarray) -> None:
        """A batch of samples in export order (those without a VM entry or exit flag are passed over);
        int64 columns of one length (ips in two's complement)."""
        cols = [np.ascontiguousarray(c, dtype=np.int64) for c in
                (flags, ip, addr, sid, time, cpu, thread_id, machine_id, machine_pid, vcpu)]
        if not len(cols[0]):
            return
        if int(cols[5].min()) < -1 or int(cols[6].min()) < 0:
            raise ValueError("VM exits: a CPU below -1 or a negative thread id")
        self.guest = _grown(self.guest, int(cols[5].max()) + 2, 0)
        self.open_row = _grown(self.open_row, int(cols[6].max()) + 1, -1)
        self.table = _grown(self.table, max(self.n + int(np.count_nonzero(cols[0] & VMEXIT)), 1024), 0)
        self.n = int(_pair_exits(*cols, self.guest, self.open_row, self.table, self.n))

    def sample(self, sid: int, flags: int, ip: int, addr: int, time: int, cpu: int, thread_id: int,
               machine_id: int, machine_pid: int, vcpu: int) -> None:
        """One sample (:meth:`samples` of one row)."""
        one = [np.array([v & 0xFFFFFFFFFFFFFFFF], np.uint64).view(np.int64) if k in (1, 2) else np.array([v], np.int64)
               for k, v in enumerate((flags, ip, addr, sid, time, cpu, thread_id, machine_id, machine_pid, vcpu))]
        self.samples(*one)

    @classmethod
    def warm(cls) -> None:
        """Compile :func:`_pair_exits` ahead (``ptexport.cli.precompile``: no shipped sample is a VM's)."""
        cls(lambda *a: ("", "")).sample(1, VMEXIT, 0, 0xFFFF0010, 100, 0, 1, 0, -1, -1)

    def kvm_exit(self, thread_id: int, time: int, reason: str) -> None:
        """A recorded kvm:kvm_exit tracepoint of host thread ``thread_id`` at ``time``: the reason of that
        thread's last VM exit at or before ``time`` (applied by :meth:`finish`)."""
        self._tracepoints.append((thread_id, time, reason))

    def _reasons(self) -> tuple[list[str], list[str]]:
        """Each exit's (reason, source): a kvm:kvm_exit tracepoint's, else derived from the guest code."""
        t = self.table[:, :self.n]
        reason: list[Any] = [None] * self.n
        source: list[Any] = [None] * self.n
        if self._tracepoints:
            order = np.lexsort((np.arange(self.n), t[_X_THREAD]))  # by thread, in export order within one
            th_sorted = t[_X_THREAD][order]
            for thread_id, time, why in self._tracepoints:
                lo, hi = np.searchsorted(th_sorted, [thread_id, thread_id + 1])
                if lo == hi:
                    continue
                rows = order[lo:hi]
                i = bisect_right(t[_X_TIME][rows].tolist(), time) - 1
                if i >= 0 and source[rows[i]] != "kvm_exit":
                    reason[rows[i]], source[rows[i]] = why, "kvm_exit"
        gips = (t[_X_GIP].view(np.uint64) if self.n else t[_X_GIP]).tolist()
        mps, vcs, gths, times = (t[k].tolist() for k in (_X_MPID, _X_VCPU, _X_GTHREAD, _X_TIME))
        for i in range(self.n):
            if reason[i] is None:
                reason[i], source[i] = self.reason_of(mps[i], vcs[i], gths[i], gips[i], times[i])
        return reason, source

    def columns(self) -> dict[str, Any]:
        """The vm_exits table's columns (perf's ids from 1; guest_ip as uint64)."""
        t = self.table[:, :self.n]
        reason, source = self._reasons()
        return {"id": np.arange(1, self.n + 1, dtype=np.int64), "machine_id": t[_X_MACHINE].copy(),
                "vcpu": t[_X_VCPU].copy(), "thread_id": t[_X_THREAD].copy(), "cpu": t[_X_CPU].copy(),
                "exit_id": t[_X_SID].copy(), "exit_time": t[_X_TIME].copy(),
                "guest_ip": t[_X_GIP].view(np.uint64).copy(), "entry_id": t[_X_ESID].copy(),
                "entry_time": t[_X_ETIME].copy(), "reason": reason, "reason_source": source}

    def finish(self) -> list[tuple]:
        """The rows of :meth:`columns`, as tuples."""
        cols = self.columns()
        return list(zip(*(c.tolist() if isinstance(c, np.ndarray) else c for c in cols.values())))


def kvm_exit_reason(raw: bytes | None, offset: int = 8) -> str | None:
    """The exit reason of a kvm:kvm_exit tracepoint's raw data (``exit_reason`` u32 after the 8-byte
    common fields in every kernel since 2.6.32), None when too short."""
    if raw is None or len(raw) < offset + 4:
        return None
    value = int.from_bytes(raw[offset:offset + 4], "little")
    basic = value & 0xFFFF
    name = VMX_EXIT_REASONS.get(basic, f"EXIT_REASON_{basic}")
    return name + (" (failed VM entry)" if value & (1 << 31) else "")


def _tracing_data(pd: Any) -> bytes | None:
    """The recording's tracing data (tracepoint formats), if the reader kept it."""
    for name in ("tracing_data", "tracing_data_bytes"):
        v = getattr(pd, name, None)
        if isinstance(v, (bytes, bytearray, memoryview)):
            return bytes(v)
    return None


def kvm_exit_field_offset(tracing_data: bytes | None) -> int:
    """``exit_reason``'s offset in kvm:kvm_exit records from the recording's tracing data (8 if absent)."""
    if not tracing_data:
        return 8
    i = tracing_data.find(b"name: kvm_exit\n")
    if i < 0:
        return 8
    end = tracing_data.find(b"print fmt:", i)
    block = tracing_data[i:end if end > 0 else None]
    j = block.find(b" exit_reason;")
    if j < 0:
        return 8
    k = block.find(b"offset:", j)
    try:
        return int(block[k + 7:block.find(b";", k)].strip())
    except ValueError:
        return 8



# ---------------------------------------------------------------------------------- machines

class GuestThreads(PerfThreads):
    """A guest machine's thread table: a new thread of a process creates its main thread too
    (perf's thread__init_maps shares the leader's maps), which guests without sideband need:
    their threads are only ever created by samples."""

    def findnew(self, pid: int, tid: int):
        th = self.find(pid, tid)
        if th is None:
            th = super().findnew(pid, tid)
            if pid >= 0 and pid != tid:
                super().findnew(pid, pid)
        return th


class KernelMachineState(MachineState):
    """A machine whose kernel DSO perf loads from kallsyms (+ kcore): a guest, or the host of a
    ``perf record --kcore`` recording.  User space and kernel modules resolve as on the host."""

    def __init__(self, *args: Any, kernel_image: Callable[[], KernelImage | None], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._kimage_fn = kernel_image
        self._kimage: KernelImage | None = None
        self._kimage_loaded = False
        self._kdso = 0
        self._ksyms: dict[int, int] = {}  # map-space symbol start -> symbol id
        self.guest_pid_of: dict[int, int] = {}

    @property
    def kernel_image(self) -> KernelImage | None:
        if not self._kimage_loaded:
            self._kimage_loaded = True
            self._kimage = self._kimage_fn()
        return self._kimage

    def resolve(self, pid: int, ip: int, time: int, kernel: bool | None = None) -> tuple[int, int, int, int]:
        if not ip:
            return (0, 0, 0, 0)
        if kernel is None:
            kernel = ip >= self.kernel_start
        if not kernel:
            return super().resolve(pid, ip, time, False)
        e = self.sb.map_at(pid, ip, time, kernel=True)
        if e is None:
            return (0, 0, 0, 0)
        if not e.filename.startswith(_KERNEL_DSOS):
            return super().resolve(pid, ip, time, True)  # a module map
        ki = self.kernel_image
        if ki is None:
            name = kernel_dso_name(self.pid)
            ki = self._kimage = KernelImage(name, name, SymbolTable([]))
        off = ki.map_ip(ip)
        if off is None:
            return (0, 0, 0, 0)  # outside kcore's maps (or the kernel map as its symbols fixed it up)
        if not self._kdso:
            self._kdso = self.m.dso(self.machine_id, ki.long_name, ki.short_name, "")
        dso = self._kdso
        sym = ki.table.find(off)
        if sym is None:
            unknown = self._unknown.setdefault(dso, {})
            sid = unknown.get(off)
            if sid is None:
                sid = unknown[off] = self.m.symbols.get(("unknown", dso, off), (dso, off, off, 0, "unknown"))
                self.sym_starts[sid] = off  # for the batch export's model of perf's last-lookup cache
                self.new_unknowns += 1
            return dso, sid, 0, ip
        sid = self._ksyms.get(sym.start)
        if sid is None:
            sid = self._ksyms[sym.start] = self.m.symbol(dso, sym.start, sym.end, sym.name, sym.binding)
            self.sym_starts[sid] = sym.start
        return dso, sid, off - sym.start, ki.address(sym.start)


def host_kernel_image(session: Any, kallsyms: str | None) -> Callable[[], KernelImage | None] | None:
    """The host kernel of a ``--kcore`` recording as perf loads it (None: not a kcore recording, or
    ``--kallsyms`` given, which perf then loads as kallsyms only... with kcore beside it, as kcore)."""
    kd = getattr(session.pd, "kcore_dir", None)
    if kallsyms or kd is None:
        return None
    path = os.path.join(str(kd), "kallsyms")
    if not os.path.isfile(path) or not os.path.isfile(os.path.join(str(kd), "kcore")):
        return None

    def load() -> KernelImage | None:
        try:
            return load_kernel_image(path, "[kernel.kallsyms]")
        except PtExportError:
            return None

    return load


class ThreadMemo:
    """``MachineState.threads(pid, tid)`` for the runs of one batch of a VM trace, asked once per (machine,
    pid, tid) while nothing its answer depends on has changed.

    A VM trace's samples alternate between host and guest threads every few dozen samples (every VM exit
    and entry), so the batch export asks the same few threads tens of thousands of times.  A second call
    with the same (pid, tid) changes nothing and gives the same answer as long as no thread was created
    (``len(pt.all)``), no thread, comm or comm_thread row was made (the model's next ids), no thread's
    unknown pid was learned (``pt.pid_fixes``: a main thread's pid decides its exec comm) and no sideband
    record was applied (:meth:`clear`, at every record but a host's context switch, which changes nothing
    else).  A thread whose pid is still unknown (-1) is never remembered: any ``find`` with a pid would set
    it.  The batch export of every recording uses it: a recording of several CPUs alternates between
    their threads too.
    """

    __slots__ = ("m", "memo")

    def __init__(self, model: Any) -> None:
        self.m = model
        self.memo: dict[tuple[int, int, int], tuple[tuple, int, int]] = {}

    def clear(self) -> None:
        self.memo.clear()

    def _generation(self, st: MachineState) -> tuple[int, int, int, int, int]:
        m = self.m
        return len(st.pt.all), m.threads.next_id, m.comms.next_id, m.comm_threads.next_id, st.pt.pid_fixes

    def hit(self, st: MachineState, mi: int, pid: int, tid: int) -> bool:
        """Whether :meth:`threads` would answer (mi, pid, tid) from the memo now (no call, no change)."""
        got = self.memo.get((mi, pid, tid))
        return got is not None and got[0] == self._generation(st)

    def threads(self, st: MachineState, mi: int, pid: int, tid: int) -> tuple[int, int]:
        gen = self._generation(st)
        hit = self.memo.get((mi, pid, tid))
        if hit is not None and hit[0] == gen:
            return hit[1], hit[2]
        th_id, c_id = st.threads(pid, tid)
        th = st.pt.by_tid.get(tid)
        if th is not None and th.pid != -1:
            self.memo[(mi, pid, tid)] = (self._generation(st), th_id, c_id)
        return th_id, c_id


class SideMemo(ThreadMemo):
    """``MachineState.switch_side(pid, tid)`` (a context switch's side: perf's db_export__pid_tid) asked
    once while nothing its answer depends on changes: the threads and rows of :class:`ThreadMemo`'s
    generation, and the comms, which only a sideband record changes (the exporter :meth:`clear` s it at
    every record but a host's context switch).  A second call with the same thread changes nothing and
    gives the same answer (its rows are made already).  A ``perf record -a`` recording switches among a
    few threads tens of thousands of times (thr4: 47 K switches, 94 K calls, 0.7 of 5 s of the
    exporting thread)."""

    __slots__ = ()

    def side(self, st: MachineState, pid: int, tid: int) -> tuple[int, int, bool]:
        key = (st.machine_id, pid, tid)
        hit = self.memo.get(key)
        if hit is not None and hit[0] == self._generation(st):
            return hit[1]
        got = st.switch_side(pid, tid)
        self.memo[key] = (self._generation(st), got)
        return got


@dataclass
class VmTrace:
    """What the VM side of an export reads from the trace itself, handed in by the session
    (:mod:`ptexport.session.export`): db-export decodes nothing.

    ``measure_vmcs()``: host tid -> (VMCS, TSC offset, source) of each VCPU thread, measured from
    the start of each CPU's trace (a ``vcpus`` row's last columns); ``guest_kcore(machine_pid)``:
    the guest kernel's code (an object whose ``at(ip)`` gives ``(start, end, pgoff, obj)`` with
    ``obj.read(offset, size)``), or None.  The defaults: nothing measured, no guest kernel code.
    ``measured``: that measurement already under way elsewhere (the decoding process makes it once it has
    decoded the trace: :class:`ptexport.session.decode_proc.DecodeProcess`'s ``tail``), else None (it is
    made here, on a thread of its own, beside the export).
    """

    measure_vmcs: Callable[[], dict[int, tuple[int, int, str]]] = dict
    guest_kcore: Callable[[int], Any] = lambda machine_pid: None
    measured: Future[dict[int, tuple[int, int, str]]] | None = None


class VmExport:
    """The VM side of one export: guest machine states, VCPU attribution, vcpus and vm_exits rows."""

    def __init__(self, ex: Any, guestkallsyms: str | None = None, guestmount: str | None = None,
                 trace: VmTrace | None = None) -> None:
        self.ex = ex
        self.trace = trace if trace is not None else VmTrace()
        self.s = ex.s
        self.sb = ex.s.sb
        self.guestkallsyms = guestkallsyms
        self.guestmount = guestmount
        self.hypervisors = self.sb.hypervisors()
        self.guest_ids = {i: mp for i, (mp, _v) in (self.sb.id_index or {}).items() if mp}
        self.guest_vcpu = {i: v for i, (mp, v) in (self.sb.id_index or {}).items() if mp}
        self.by_pid: dict[int, int] = {}  # machine pid -> index in ex.machines
        self.exits = VmExits(self._reason)
        self._kcode: dict[tuple[int, int], bytes] = {}  # (machine pid, guest kernel ip) -> code (kcore is fixed)
        self._ucode: dict[tuple[int, int, int], tuple[Any, bytes]] = {}  # (machine pid, id(map), ip) -> (map, code)
        self._reasons = InsnReasons()  # guest code at an exit -> exit_reason_of_insn
        self.stats: list[tuple[str, int, str, str]] = []  # (name, value, severity, description)
        self._kvm_exit_offset: int | None = None
        self._check_guests()
        # The VCPU threads' offsets (a pass of its own over the start of each CPU's trace, its packets decoded
        # and walked by compiled kernels) are measured beside the export - by the decoding process once it
        # has decoded the trace, else on a thread here - and read by vcpu_rows at the end.
        self._measured: Future[dict[int, tuple[int, int, str]]] | None = None
        if self.hypervisors:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptexport-vmcs")
            self._measured = self.trace.measured or pool.submit(self.trace.measure_vmcs)
            pool.submit(_disassembler)  # the exits' reasons at the end need capstone (its import: 40 ms)
            pool.shutdown(wait=False)  # (its thread ends with the measurement)

    @property
    def active(self) -> bool:
        return bool(self.hypervisors or self.guest_ids)

    # ------------------------------------------------------------ machines

    def state(self, machine_pid: int) -> int:
        """Index in ``ex.machines`` of guest ``machine_pid`` (created when first needed)."""
        idx = self.by_pid.get(machine_pid)
        if idx is not None:
            return idx
        ex = self.ex
        sbm = self.sb.machine(machine_pid)
        if sbm is None:
            sbm = Machine(machine_pid)
        root = os.path.join(self.guestmount, str(machine_pid)) if self.guestmount and machine_pid > 0 else ""
        pt = GuestThreads(comm_exec=ex.pt.comm_exec)
        if machine_pid != DEFAULT_GUEST_PID:
            pt.findnew(-1, machine_pid).set_comm(f"[guest/{machine_pid}]", 0, False)  # machine__init
        kallsyms = guest_kallsyms_path(str(self.s.pd.path), getattr(self.s.pd, "kcore_dir", None), machine_pid,
                                       self.guestkallsyms, self.guestmount,
                                       getattr(self.s.pd, "guest_kcore_dirs", None))
        name = kernel_dso_name(machine_pid)

        def load() -> KernelImage | None:
            if kallsyms is None:
                return None
            try:
                return load_kernel_image(kallsyms, name)
            except PtExportError:
                return None

        st = KernelMachineState(ex.m, self.s, pid=machine_pid, root_dir=root, sb=sbm, pt=pt,
                                kernel_start=1 << 63, load_kallsyms=lambda: None, elf_tabs=ex._elf_tabs,
                                kernel_image=load)
        ex.machines.append(st)
        idx = self.by_pid[machine_pid] = len(ex.machines) - 1
        return idx

    def record_machine(self, rec: Any) -> tuple[int, int] | None:
        """(index in ex.machines, VCPU) of a guest sideband record, None for the host's."""
        rid = getattr(rec, "id", None)
        mp = self.guest_ids.get(rid) if rid is not None else None
        if not mp:
            return None
        return self.state(mp), self.guest_vcpu.get(rid, -1)

    def machine_index(self, cols: Any) -> np.ndarray | None:
        """Fill ``cols.machine_pid`` (-1 host) / ``cols.vcpu`` (perf's VM split) and give each sample
        its machine's index; None when every sample is the host's."""
        cols = self.s.vcpu_columns(cols)
        n = len(cols)
        mp = np.asarray(cols.machine_pid, np.int64)
        vc = np.asarray(cols.vcpu, np.int64)
        nr = np.asarray(cols.nr) != 0
        guest = nr & (mp > 0)
        orphan = nr & ~guest  # guest code without guest sideband: perf's machine of the host pid, else pid 0
        mi = np.zeros(n, np.int64)
        out_mp = np.full(n, -1, np.int64)
        out_vc = np.where(guest, vc, -1)
        if guest.any():
            for p in few_distinct(mp[guest]).tolist():
                w = guest & (mp == p)
                mi[w] = self.state(int(p))
                out_mp[w] = p
        if orphan.any():
            w = np.flatnonzero(orphan)
            pairs = np.stack([np.asarray(cols.pid)[w], np.asarray(cols.tid)[w]], axis=1).astype(np.int64)
            uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
            inv = np.asarray(inv).reshape(-1)
            for k, (p, t) in enumerate(uniq.tolist()):
                gp = p if p > 0 and self.sb.machine(p) is not None else DEFAULT_GUEST_PID
                hit = self.sb.vcpu_of_host_thread(t) if t >= 0 else None
                rows = w[inv == k]
                mi[rows] = self.state(gp)
                out_mp[rows] = gp
                out_vc[rows] = hit[1] if hit is not None and hit[0] == p else -1
        cols.machine_pid = out_mp
        cols.vcpu = out_vc
        return mi if (guest.any() or orphan.any() or len(self.ex.machines) > 1) else None

    # ------------------------------------------------------------ VM exits

    def samples(self, cols: dict[str, Any]) -> None:
        """Note the VM entries/exits of a batch of sample rows (ids assigned)."""
        flags = np.asarray(cols["flags"], np.int64)
        w = np.flatnonzero(flags & (VMENTRY | VMEXIT))
        if not len(w):
            return
        # (a column of one value may come as that value; the exits take int64, ips in two's complement)
        take = [np.broadcast_to(cols[k], flags.shape)[w] for k in ("ip", "to_ip", "id", "time", "cpu", "thread_id",
                                                                   "machine_id", "machine_pid", "vcpu")]
        self.exits.samples(flags[w], *take)

    def _reason(self, machine_pid: int, vcpu: int, guest_thread: int, ip: int, time: int) -> tuple[str, str]:
        code = self._read_guest(machine_pid, guest_thread, ip, time)
        return self._reasons(code, ip), "instruction"  # the mnemonic does not depend on the address

    def _read_guest(self, machine_pid: int, guest_thread: int, ip: int, time: int) -> bytes:
        if not ip or machine_pid < 0:
            return b""
        if ip >> 63:
            code = self._kcode.get((machine_pid, ip))
            if code is None:
                k = self.trace.guest_kcore(machine_pid)
                hit = k.at(ip) if k is not None else None
                if hit is None:
                    code = b""
                else:
                    start, _end, pgoff, obj = hit
                    code = obj.read(ip - start + pgoff, 16)
                self._kcode[(machine_pid, ip)] = code
            return code
        idx = self.by_pid.get(machine_pid)
        if idx is None:
            return b""
        st = self.ex.machines[idx]
        pid = st.guest_pid_of.get(guest_thread)
        if pid is None:  # (asked at the end of the export: the thread table is complete)
            for th in st.pt.all:
                if th.db_id:
                    st.guest_pid_of[th.db_id] = th.pid
            pid = st.guest_pid_of.setdefault(guest_thread, -1)
        e = st.sb.map_at(pid, ip, time, kernel=False) if pid >= 0 else None
        if e is None:
            return b""
        hit = self._ucode.get((machine_pid, id(e), ip))  # the same map at the same ip: the same bytes
        if hit is not None and hit[0] is e:
            return hit[1]
        name = e.filename
        if st is not None and self.guestmount and machine_pid > 0:
            rooted = os.path.join(self.guestmount, str(machine_pid), name.lstrip("/"))
            if os.path.isfile(rooted):
                name = rooted
        obj = self.s.objects.get(name, self.s.build_id_of(e.filename, e.build_id))
        code = obj.read(ip - e.start + e.pgoff, 16)
        self._ucode[(machine_pid, id(e), ip)] = (e, code)
        return code

    def sample_record(self, rec: Any, event_name: str, thread_id: int) -> None:
        """A SAMPLE record of the recording: a kvm:kvm_exit tracepoint gives its exit's reason."""
        if event_name != "kvm:kvm_exit":
            return
        if self._kvm_exit_offset is None:
            self._kvm_exit_offset = kvm_exit_field_offset(_tracing_data(self.s.pd))
        reason = kvm_exit_reason(getattr(rec, "raw", None), self._kvm_exit_offset)
        if reason is not None:
            self.exits.kvm_exit(thread_id, rec.time or 0, reason)

    # ------------------------------------------------------------ output

    def finish(self, w: Any) -> None:
        """Write vm_exits, vcpus and the guest-data warnings (stats) at the end of the export."""
        if self.exits.n:
            w.write_columns("vm_exits", self.exits.columns())
        rows = self.vcpu_rows()
        if rows:
            w.write_rows("vcpus", rows)
        if self.stats:
            w.write_rows("stats", [(i + 1, name, -1, value, sev, desc)
                                   for i, (name, value, sev, desc) in enumerate(self.stats)])

    # ------------------------------------------------------------ vcpus, checks

    def vcpu_rows(self) -> list[tuple]:
        """One vcpus row per VCPU thread of each hypervisor process, with the VMCS its trace shows and
        the TSC offset measured from guest TSC packets (perf inject --vm-time-correlation's method)."""
        ex = self.ex
        rows = []
        host = ex.machines[0]
        measured = self._measured.result() if self._measured is not None else self.trace.measure_vmcs()
        for mpid, vcpus in sorted(self.hypervisors.items()):
            idx = self.by_pid.get(mpid)
            if idx is None and self.sb.machine(mpid) is None:
                idx = self.by_pid.get(DEFAULT_GUEST_PID)
            mid = ex.machines[idx].machine_id if idx is not None else 0
            for v, tid in sorted(vcpus.items()):
                th = host.pt.find(mpid, tid)
                vmcs, offset, source = measured.get(tid, (0, 0, "none"))
                rows.append((len(rows) + 1, mid, v, th.db_id if th is not None else 0, vmcs, offset, 0, source))
        return rows

    def _check_guests(self) -> None:
        """Guest sideband that cannot belong to this recording: counted in ``stats`` as warnings."""
        for mp in sorted(set(self.guest_ids.values())):
            if mp not in self.hypervisors:
                self.stats.append(("vm_guest_without_vcpu_threads", mp, "warning",
                                   f"guest sideband for machine pid {mp}, but the host has no process {mp} with "
                                   "'CPU n/KVM' threads: its samples stay unattributed (wrong --guest-data pid?)"))
                continue
            g = self.sb.machine(mp)
            bad = total = 0
            runs = {}
            for tl in self.sb.host.cpus.values():
                for start, end, _p, tid in tl.intervals():
                    runs.setdefault(tid, []).append((start, end if end is not None else 1 << 63))
            for v, tl in (g.cpus.items() if g is not None else ()):
                tid = self.hypervisors[mp].get(v)
                spans = sorted(runs.get(tid, []))
                starts = [a for a, _b in spans]
                for t in tl.times.tolist():
                    total += 1
                    i = bisect_right(starts, t) - 1
                    if i < 0 or t > spans[i][1]:
                        bad += 1
            if bad:
                self.stats.append(("vm_guest_switches_outside_vcpu", bad, "warning",
                                   f"{bad} of {total} guest context switches of machine {mp} fall where its VCPU "
                                   "thread is not running on the host (wrong TSC offset in --guest-data?)"))
