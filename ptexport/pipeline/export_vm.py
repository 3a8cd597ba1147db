"""Virtual machines in the export: guest machines as perf's db-export writes them, and what perf loses.

perf 6.1 (``perf script -s export-to-sqlite.py`` on a ``perf inject --guest-data``
recording, or on a host recording with ``--guestkallsyms``) exports guest code
into guest machines:

* a guest's records (ID_INDEX entries with a machine_pid) build that guest's own
  thread table (perf's rules per machine, :mod:`ptexport.pipeline.perfthreads`);
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
from dataclasses import dataclass, field
from typing import Any

from ptexport.images.kallsyms import load_kallsyms
from ptexport.images.symbols import Symbol, SymbolTable
from ptexport.samples.flags import IpFlag

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
    global _CAPSTONE
    if not code:
        return UNKNOWN_REASON
    if _CAPSTONE is None:
        import capstone

        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        _CAPSTONE = md
    for insn in _CAPSTONE.disasm(code[:16], ip, 1):
        name = insn.mnemonic
        if name == "mov":
            ops = [o.strip() for o in insn.op_str.split(",")]
            if any(o.startswith("cr") for o in ops):
                return "CR_ACCESS"
            if any(o.startswith("dr") for o in ops):
                return "DR_ACCESS"
        for prefix in ("rep ", "repe ", "repne "):
            if name.startswith(prefix):
                name = name[len(prefix):]
        return _INSN_REASONS.get(name, OTHER_REASON)
    return UNKNOWN_REASON


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
                        guestkallsyms: str | None, guestmount: str | None) -> str | None:
    """The kallsyms perf 6.1 loads for a guest machine: ``kcore_dir__PID`` beside the data (perf inject
    copied it there), the default guest's ``--guestkallsyms``, else ``GUESTMOUNT/PID/proc/kallsyms``."""
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

@dataclass
class _Exit:
    row: list  # the vm_exits row, completed at the next VM entry


class VmExits:
    """VM exits paired with the next VM entry of their host VCPU thread, in export order.

    perf splits a VM exit into two branch samples: the guest side (guest ip => 0) and the
    host side (0 => the host's exit handler), and a VM entry into the host side (host
    ip => 0) and the guest side (0 => guest ip).  An exit is the host-side exit sample;
    its guest ip is that of the guest-side one just before it on the same CPU.
    """

    def __init__(self, reason_of: Any) -> None:
        self.reason_of = reason_of  # (machine_pid, vcpu, host tid, guest ip, time) -> reason
        self.rows: list[list] = []
        self._guest_ip: dict[int, int] = {}  # cpu -> guest ip of its last guest-side exit
        self._open: dict[int, list] = {}  # host tid -> its exit waiting for the next entry
        self._tracepoint: dict[int, list[tuple[int, str]]] = {}  # host tid -> (time, reason) of kvm_exit

    def sample(self, sid: int, flags: int, ip: int, addr: int, time: int, cpu: int, host_tid: int,
               thread_id: int, machine_id: int, machine_pid: int, vcpu: int, host_side: bool) -> None:
        if flags & VMEXIT:
            if not host_side:
                self._guest_ip[cpu] = ip
                return
            gip = self._guest_ip.pop(cpu, 0)
            row = [len(self.rows) + 1, machine_id, vcpu, thread_id, cpu, sid, time, gip, 0, 0,
                   None, None, host_tid, machine_pid]
            self.rows.append(row)
            self._open[host_tid] = row
        elif flags & VMENTRY and host_side:
            row = self._open.pop(host_tid, None)
            if row is not None:
                row[8], row[9] = sid, time

    def kvm_exit(self, host_tid: int, time: int, reason: str) -> None:
        """A recorded kvm:kvm_exit tracepoint of host thread ``host_tid``: the reason of its last exit."""
        row = self._open.get(host_tid)
        if row is None:
            for r in reversed(self.rows):
                if r[12] == host_tid:
                    row = r
                    break
        if row is not None and row[6] <= time and row[11] != "kvm_exit":
            row[10], row[11] = reason, "kvm_exit"

    def finish(self) -> list[tuple]:
        out = []
        for r in self.rows:
            if r[10] is None:
                r[10], r[11] = self.reason_of(r[13], r[2], r[12], r[7], r[6])
            out.append(tuple(r[:12]))
        return out


def kvm_exit_reason(raw: bytes | None, offset: int = 8) -> str | None:
    """The exit reason of a kvm:kvm_exit tracepoint's raw data (``exit_reason`` u32 after the 8-byte
    common fields in every kernel since 2.6.32), None when too short."""
    if raw is None or len(raw) < offset + 4:
        return None
    value = int.from_bytes(raw[offset:offset + 4], "little")
    basic = value & 0xFFFF
    name = VMX_EXIT_REASONS.get(basic, f"EXIT_REASON_{basic}")
    return name + (" (failed VM entry)" if value & (1 << 31) else "")


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


__all__ = [
    "KernelImage", "load_kernel_image", "kcore_segments", "kernel_dso_name", "guest_kallsyms_path",
    "exit_reason_of_insn", "VmExits", "kvm_exit_reason", "kvm_exit_field_offset", "VMX_EXIT_REASONS",
    "OTHER_REASON", "UNKNOWN_REASON",
]
