"""Kernel symbols from a kallsyms file, the way perf 6.1 loads them.

perf reads ``/proc/kallsyms``-format text (``ADDR TYPE NAME [MODULE]``) into
one sorted list (``dso__load_all_kallsyms``): text, weak, data and bss
symbols (types T, W, D, B in either case; ARM ``$`` locals skipped), each of
size 0 with a binding from its type letter (W weak, upper case global, else
local).  It then gives every zero-size symbol the start of the next one as
its end, except across a kernel/module boundary, where it rounds the end up
past the next page, and the last symbol ends a page past its page
(``symbols__fixup_end``); of symbols with one start it keeps the best
(``symbols__fixup_duplicate``: sized, not weak, global, fewer leading
underscores, longer name).  The kernel's symbols move by the relocation
delta (kallsyms' ``_text`` minus the recording's ``[kernel.kallsyms]_text``
map address); a module's are made relative to its map.

Which file perf uses: see :func:`find_kallsyms` (vmlinux files, which perf
tries before the host's kallsyms, are not read yet).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from ptexport.errors import ImageError
from ptexport.images.symbols import Symbol, SymbolTable

_KO_SUFFIX = re.compile(r"\.ko(\.(gz|xz|zst|bz2))?$")


def kmod_name(path: str) -> str:
    """perf's DSO name of a kernel module file: ``[base]`` without .ko, '-' as '_'."""
    base = path.rsplit("/", 1)[-1]
    if base.startswith("[") and base.endswith("]"):
        return base
    base = _KO_SUFFIX.sub("", base)
    return "[" + base.replace("-", "_") + "]"


@dataclass(slots=True)
class _KSym:
    start: int
    end: int
    name: str
    binding: int
    module: str | None  # "[mod]" or None for the kernel


def _binding(t: str) -> int:
    if t in "Ww":
        return 2
    return 1 if t.isupper() else 0


def _underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


def _better(a: _KSym, b: _KSym) -> bool:
    """perf's choose_best_symbol: True when ``a`` wins."""
    sa, sb = a.end - a.start, b.end - b.start
    if sb == 0 and sa > 0:
        return True
    if sa == 0 and sb > 0:
        return False
    wa, wb = a.binding == 2, b.binding == 2
    if wb and not wa:
        return True
    if wa and not wb:
        return False
    ga, gb = a.binding == 1, b.binding == 1
    if ga and not gb:
        return True
    if gb and not ga:
        return False
    ua, ub = _underscores(a.name), _underscores(b.name)
    if ub > ua:
        return True
    if ua > ub:
        return False
    return len(a.name) >= len(b.name)


def _roundup(x: int, n: int) -> int:
    return (x + n - 1) // n * n


@dataclass
class Kallsyms:
    """Symbols of a kallsyms file, split into the kernel's and each module's (absolute addresses)."""

    kernel: list[_KSym]
    modules: dict[str, list[_KSym]]
    raw: list[_KSym]  # as read (size 0, "name\t[module]"), for a failed load
    refs: dict[str, int]  # first address of each kernel symbol name (for the relocation delta)

    def kernel_table(self, ref_name: str | None = None, ref_addr: int | None = None) -> SymbolTable:
        """The kernel DSO's symbols, moved by the relocation delta: kallsyms' address of the
        recording's reference symbol (``_text`` of ``[kernel.kallsyms]_text``) minus the recorded one."""
        delta = 0
        if ref_name is not None and ref_addr is not None:
            if ref_name not in self.refs:
                # perf's kallsyms__delta fails after every symbol went into the DSO: they stay there
                # as read, size 0 (found only at their exact address), module ones included
                # (named "sym\t[mod]"); of one address we keep the first.
                seen: dict[int, _KSym] = {}
                for r in self.raw:
                    seen.setdefault(r.start, r)
                return SymbolTable([Symbol(r.start, r.start, r.name, r.binding) for r in seen.values()])
            delta = self.refs[ref_name] - ref_addr
        return SymbolTable([Symbol(s.start - delta, s.end - delta, s.name, s.binding) for s in self.kernel])

    def module_table(self, module: str, map_start: int, map_pgoff: int = 0) -> SymbolTable:
        """A module DSO's symbols, relative to its map (as if read from the .ko)."""
        return SymbolTable([Symbol(s.start - map_start + map_pgoff, s.end - map_start + map_pgoff, s.name,
                                   s.binding) for s in self.modules.get(module, ())])


def parse_kallsyms(text: str, source: str = "kallsyms") -> Kallsyms:
    syms: list[_KSym] = []
    refs: dict[str, int] = {}
    raw: list[_KSym] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if len(parts) < 3:
            continue
        try:
            addr = int(parts[0], 16)
        except ValueError as e:
            raise ImageError(f"line {lineno}: bad address {parts[0]!r}", source=source) from e
        t, name = parts[1], parts[2]
        module = parts[3] if len(parts) > 3 and parts[3].startswith("[") else None
        if module is None and t in "TtWw":  # kallsyms__get_function_start takes functions only
            refs.setdefault(name, addr)
        if t.upper() not in "TWDB" or len(t) != 1 or name.startswith("$"):
            continue
        syms.append(_KSym(addr, addr, name, _binding(t), module))
        raw.append(_KSym(addr, addr, name + ("\t" + module if module else ""), _binding(t), module))
    # perf's rb-tree order: by start; equal starts keep insertion order.
    syms.sort(key=lambda s: s.start)
    for prev, cur in zip(syms, syms[1:]):
        if prev.end == prev.start:
            if (prev.module is None) != (cur.module is None):
                prev.end = _roundup(prev.end + 4096, 4096)
            else:
                prev.end = cur.start
    if syms and syms[-1].end == syms[-1].start:
        syms[-1].end = _roundup(syms[-1].start, 4096) + 4096
    dedup: list[_KSym] = []
    for s in syms:
        if dedup and dedup[-1].start == s.start:
            if not _better(dedup[-1], s):
                dedup[-1] = s
            continue
        dedup.append(s)
    kernel = [s for s in dedup if s.module is None]
    modules: dict[str, list[_KSym]] = {}
    for s in dedup:
        if s.module is not None:
            modules.setdefault(s.module.replace("-", "_"), []).append(s)
    return Kallsyms(kernel, modules, raw, refs)


def load_kallsyms(path: str) -> Kallsyms:
    try:
        with open(path, encoding="latin-1") as f:
            return parse_kallsyms(f.read(), path)
    except OSError as e:
        raise ImageError(f"cannot read kallsyms: {e.strerror or e}", source=path) from e


def running_kernel_build_id(notes: str = "/sys/kernel/notes") -> bytes | None:
    """The GNU build-id note of the running kernel, or None."""
    try:
        with open(notes, "rb") as f:
            data = f.read()
    except OSError:
        return None
    off = 0
    while off + 12 <= len(data):
        namesz, descsz, typ = struct.unpack_from("<III", data, off)
        off += 12
        name = data[off: off + namesz]
        off += (namesz + 3) & ~3
        desc = data[off: off + descsz]
        off += (descsz + 3) & ~3
        if typ == 3 and name.rstrip(b"\0") == b"GNU":
            return desc
    return None


def kallsyms_restricted() -> bool:
    """perf's ``symbol__read_kptr_restrict``: /proc/kallsyms addresses hidden from us?"""
    try:
        with open("/proc/sys/kernel/kptr_restrict") as f:
            value = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        value = 0
    privileged = hasattr(os, "geteuid") and os.geteuid() == 0
    if privileged:
        return value >= 2
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            paranoid = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        paranoid = 2
    return value != 0 or paranoid > 1


def find_kallsyms(explicit: str | None, kcore_dir: str | None, symfs: str | None,
                  build_id: bytes | None, buildid_dir: str | None = None) -> str | None:
    """The kallsyms file perf 6.1 uses for the host kernel DSO (when no vmlinux is used), or None.

    perf's ``dso__load_kernel_sym`` and ``dso__find_kallsyms``: ``--kallsyms FILE``, else the
    recording's kcore_dir kallsyms (perf sets it as if given); nothing else with ``--symfs``;
    a kernel without build-id falls back to the running kernel's ``/proc/kallsyms``; one whose
    build-id is the running kernel's uses it too; else the build-id cache's
    ``[kernel.kallsyms]/BUILDID/kallsyms`` or nothing ("No kallsyms or vmlinux with build-id").
    """
    if explicit:
        return explicit
    if kcore_dir:
        cand = os.path.join(str(kcore_dir), "kallsyms")
        if os.path.exists(cand):
            return cand
    if symfs:
        return None
    proc = "/proc/kallsyms"
    host_ok = os.access(proc, os.R_OK) and not kallsyms_restricted()
    if not build_id:
        return proc if host_ok else None
    if running_kernel_build_id() == build_id:
        return proc if host_ok else None
    cache = buildid_dir or os.path.join(os.path.expanduser("~"), ".debug")
    cand = os.path.join(cache, "[kernel.kallsyms]", build_id.hex(), "kallsyms")
    return cand if os.path.exists(cand) else None
