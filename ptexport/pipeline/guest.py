"""Guest (virtual machine) code for the perf-mode walker, perf's way.

perf decodes non-root (guest) code from a guest machine (intel-pt.c
intel_pt_walk_next_insn's ``nr`` branch, intel_pt_get_guest):

* the machine is the one keyed by the pid of the host thread running the VCPU
  (the hypervisor process, e.g. QEMU); when there is none, perf's default guest
  (DEFAULT_GUEST_KERNEL_ID, pid 0 here) set up by --guestkallsyms/--guestmodules;
* an ip with bit 63 set is guest kernel code, else guest user code
  (intel_pt_nr_cpumode, which assumes 64-bit guests);
* guest kernel code comes from the guest's kcore copy: ``kcore_dir__PID`` next to
  the data of a recording made by ``perf inject --guest-data`` (perf inject copies
  the guest's kcore_dir there), else the kcore beside --guestkallsyms;
* guest user code needs the guest thread current on the VCPU, known only with
  guest sideband; without it guest user code cannot be read (-EINVAL).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ptexport.pipeline.codewalk import KcoreCode

DEFAULT_GUEST_PID = 0  # perf's DEFAULT_GUEST_KERNEL_ID machine


class GuestSpaces:
    """Guest machines' kernel code (kcore copies), found once per machine pid."""

    def __init__(self, pd: Any, sideband: Any, guest_kcore_dir: str | None = None) -> None:
        self.sb = sideband
        self.guest_kcore_dir = guest_kcore_dir
        kd = getattr(pd, "kcore_dir", None)
        if kd is not None:
            self.base = Path(kd).parent
        else:
            p = Path(str(getattr(pd, "path", ".")))
            self.base = p if p.is_dir() else p.parent
        self._kcore: dict[int, KcoreCode | None] = {}

    @property
    def have_guest_sideband(self) -> bool:
        """True when guest records were merged (perf's have_guest_sideband: ID_INDEX machine_pid)."""
        return any(mp for mp, _v in (self.sb.id_index or {}).values())

    def machine_pid(self, host_pid: int) -> int:
        """The guest machine run by host process ``host_pid`` (perf's machines__find_guest)."""
        if host_pid > 0 and self.sb.machine(host_pid) is not None:
            return host_pid
        return DEFAULT_GUEST_PID

    def kcore(self, machine_pid: int) -> KcoreCode | None:
        if machine_pid in self._kcore:
            return self._kcore[machine_pid]
        cands = []
        if machine_pid != DEFAULT_GUEST_PID:
            cands.append(self.base / f"kcore_dir__{machine_pid}" / "kcore")
        if self.guest_kcore_dir:
            cands.append(Path(self.guest_kcore_dir) / "kcore")
        code = None
        for c in cands:
            if c.is_file():
                code = KcoreCode(str(c), f"[guest.kcore.{machine_pid}]")
                break
        self._kcore[machine_pid] = code
        return code


def host_kcore(pd: Any) -> KcoreCode | None:
    """The host kernel's kcore copy of a ``perf record --kcore`` directory, if any."""
    kd = getattr(pd, "kcore_dir", None)
    if kd is None:
        return None
    path = os.path.join(str(kd), "kcore")
    return KcoreCode(path, "[kernel.kcore]") if os.path.isfile(path) else None
