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

import numpy as np

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


def parse_kallsyms(text: str, source: str = "kallsyms") -> "Kallsyms | ArrayKallsyms":
    """The symbols of kallsyms text: :class:`ArrayKallsyms` (columns, made by numpy) for the file as
    the kernel writes it, else :func:`parse_kallsyms_lines` (the same symbols, a line at a time)."""
    fast = ArrayKallsyms.parse(text.encode("latin-1"))
    return fast if fast is not None else parse_kallsyms_lines(text, source)


def parse_kallsyms_lines(text: str, source: str = "kallsyms") -> Kallsyms:
    """perf's kallsyms load, a line at a time (the reference of :class:`ArrayKallsyms`)."""
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


def load_kallsyms(path: str) -> "Kallsyms | ArrayKallsyms":
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ImageError(f"cannot read kallsyms: {e.strerror or e}", source=path) from e
    fast = ArrayKallsyms.parse(data)
    return fast if fast is not None else parse_kallsyms_lines(data.decode("latin-1"), path)


# ------------------------------------------------------------------ columns
#
# A host's /proc/kallsyms has 100-200 K lines: a line at a time, the load and the kernel's symbol
# table took 0.8 s of Python (perf: tens of ms).  The kernel writes each line as 16 hex digits, a
# space, the type letter, a space, the name, and for a module's symbol a tab and "[module]": in
# that shape the columns come from numpy and Symbol objects only for the symbols looked up.

_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF", 10):
    _HEX[_c] = _i
_KEEP_TYPE = np.zeros(256, bool)  # perf keeps text, weak, data and bss symbols
for _c in b"TWDBtwdb":
    _KEEP_TYPE[_c] = True
_BINDING = np.zeros(256, np.int8)  # W/w weak (2), other upper case global (1), else local (0)
for _c in range(65, 91):
    _BINDING[_c] = 1
_BINDING[ord("W")] = _BINDING[ord("w")] = 2


class _LazySymbols:
    """A table's symbols, each made when asked for (``SymbolTable.symbols``, read only)."""

    def __init__(self, starts: list[int], ends: list[int], names: "_Names", idx: np.ndarray, binding: list[int]) -> None:
        self.starts, self.ends, self.names, self.idx, self.binding = starts, ends, names, idx, binding

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> Symbol:
        return Symbol(self.starts[i], self.ends[i], self.names[int(self.idx[i])], self.binding[i])

    def __iter__(self):  # noqa: ANN204
        return (self[i] for i in range(len(self)))


class _Names:
    """The names of a kallsyms file's lines, by line, made when asked for."""

    def __init__(self, text: str, lo: np.ndarray, hi: np.ndarray) -> None:
        self.text, self.lo, self.hi = text, lo.tolist(), hi.tolist()

    def __getitem__(self, i: int) -> str:
        return self.text[self.lo[i]:self.hi[i]]


class ArrayKallsyms:
    """:class:`Kallsyms` as columns (the same symbols, tables and answers: ``tests/images/test_kallsyms.py``)."""

    def __init__(self, text: str, names: _Names, mod_name: list[str | None], line: np.ndarray,
                 start: np.ndarray, end: np.ndarray, binding: np.ndarray, module: np.ndarray,
                 kept_lines: np.ndarray, typ: np.ndarray) -> None:
        self._text = text
        self._names = names
        self._mod_name = mod_name  # module index -> "[name]" as written
        self._line, self._start, self._end = line, start, end  # deduplicated symbols, by start
        self._binding, self._module = binding, module  # module index, -1: the kernel
        self._kept = kept_lines  # the lines perf reads, in file order (for ``raw``)
        self._typ = typ  # every line's type letter
        self._refs: dict[str, int | None] = {}

    @classmethod
    def parse(cls, data: bytes) -> "ArrayKallsyms | None":
        """The columns of ``data`` in the kernel's shape, None otherwise (the line parser then)."""
        b = np.frombuffer(data, np.uint8)
        nl = np.flatnonzero(b == 10)
        lo = np.concatenate(([0], nl + 1)).astype(np.int64)
        hi = np.concatenate((nl, [len(b)])).astype(np.int64)
        nonempty = hi > lo
        lo, hi = lo[nonempty], hi[nonempty]
        n = len(lo)
        if not n or (hi - lo < 20).any():
            return None
        if (b[lo + 16] != 32).any() or (b[lo + 18] != 32).any():
            return None
        # no other blank than those two spaces and a tab before a "[module]"
        blank = np.flatnonzero((b == 32) | (b == 9) | (b == 13) | (b == 11) | (b == 12))
        owner = np.searchsorted(lo, blank, side="right") - 1
        per_line = np.bincount(owner, minlength=n)
        tabs = b[blank] == 9
        tab_at = np.full(n, -1, np.int64)
        tab_at[owner[tabs]] = blank[tabs]
        if ((per_line - (tab_at >= 0)) != 2).any():
            return None
        has_mod = tab_at >= 0
        if has_mod.any():
            after = tab_at[has_mod] + 1
            if (after >= hi[has_mod]).any() or (b[after] != ord("[")).any():
                return None
        digits = _HEX[b[lo[:, None] + np.arange(16)]]
        if (digits == 255).any() or (digits[:, :13] == 15).all(axis=1).any():
            return None  # (an address in the last 8 K of the address space: ends past 2^64 in Python ints)
        addr = np.zeros(n, np.uint64)
        for k in range(16):
            addr = (addr << np.uint64(4)) | digits[:, k].astype(np.uint64)
        typ = b[lo + 17]
        name_lo = lo + 19
        name_hi = np.where(has_mod, tab_at, hi)
        if (name_hi <= name_lo).any():
            return None
        text = data.decode("latin-1")
        names = _Names(text, name_lo, name_hi)
        # modules: "[name]" after the tab
        mod_idx = np.full(n, -1, np.int64)
        mod_name: list[str | None] = []
        if has_mod.any():
            rows = np.flatnonzero(has_mod)
            labels = [text[a:z] for a, z in zip((tab_at[rows] + 1).tolist(), hi[rows].tolist())]
            index: dict[str, int] = {}
            mod_idx[rows] = [index.setdefault(x, len(index)) for x in labels]
            mod_name = list(index)
        dollar = b[name_lo] == ord("$")
        kept = np.flatnonzero(_KEEP_TYPE[typ] & ~dollar)
        order = kept[np.argsort(addr[kept], kind="stable")]  # perf's rb-tree: by start, ties in file order
        start = addr[order]
        mod = mod_idx[order]
        m = len(order)
        end = start.copy()
        if m:
            nxt = start[1:]
            cross = (mod[:-1] < 0) != (mod[1:] < 0)
            page = np.uint64(4096)
            end[:-1] = np.where(cross, (start[:-1] + np.uint64(4096) + page - np.uint64(1)) // page * page, nxt)
            end[-1] = (start[-1] + page - np.uint64(1)) // page * page + page
        binding = _BINDING[typ[order]]
        keep = np.ones(m, bool)
        if m > 1:
            dup = np.flatnonzero(start[1:] == start[:-1]) + 1
            if len(dup):  # perf's symbols__fixup_duplicate: of one start, the best (choose_best_symbol)
                keep[dup] = False
                cls._best_of_runs(order, start, end, binding, names, keep)
        sel = np.flatnonzero(keep) if not keep.all() else None
        if sel is not None:
            order, start, end, binding, mod = order[sel], start[sel], end[sel], binding[sel], mod[sel]
        return cls(text, names, mod_name, order, start, end, binding, mod, kept, typ)

    @staticmethod
    def _best_of_runs(order: np.ndarray, start: np.ndarray, end: np.ndarray, binding: np.ndarray,
                      names: _Names, keep: np.ndarray) -> None:
        """Of each run of one start (all but its first already dropped from ``keep``), keep the one
        perf keeps: the survivor so far against each next in turn (:func:`_better`)."""
        m = len(start)
        later = np.zeros(m + 1, bool)
        later[1:m] = start[1:] == start[:-1]  # not the first of its start
        for i in np.flatnonzero(~later[:m] & later[1:]).tolist():
            j = i + 1
            while later[j]:
                j += 1
            if j - i > 1:
                best = i
                for k in range(i + 1, j):
                    a = _KSym(int(start[best]), int(end[best]), names[int(order[best])], int(binding[best]), None)
                    c = _KSym(int(start[k]), int(end[k]), names[int(order[k])], int(binding[k]), None)
                    if not _better(a, c):
                        best = k
                keep[i:j] = False
                keep[best] = True

    # the interface of Kallsyms ------------------------------------------------

    def _ref(self, name: str) -> int | None:
        """The first address of kernel function ``name`` (perf's kallsyms__get_function_start)."""
        if name not in self._refs:
            found = re.search(rf"^([0-9a-fA-F]{{16}}) [TtWw] {re.escape(name)}$", self._text, re.M)
            self._refs[name] = int(found[1], 16) if found else None
        return self._refs[name]

    @property
    def refs(self) -> dict[str, int]:
        """Every kernel function's first address (what :meth:`kernel_table` asks :meth:`_ref` for)."""
        out: dict[str, int] = {}
        line = np.flatnonzero(np.isin(self._typ, np.frombuffer(b"TtWw", np.uint8)))
        for i in line.tolist():
            nm = self._names[i]
            if nm not in out and self._text[self._names.hi[i]:self._names.hi[i] + 1] != "\t":
                out[nm] = int(self._text[self._names.lo[i] - 19:self._names.lo[i] - 3], 16)
        return out

    def _symbols(self, rows: np.ndarray, delta: int) -> _LazySymbols:
        return _LazySymbols([s - delta for s in self._start[rows].tolist()],
                            [e - delta for e in self._end[rows].tolist()], self._names, self._line[rows],
                            self._binding[rows].tolist())

    def _table(self, rows: np.ndarray, delta: int) -> SymbolTable:
        syms = self._symbols(rows, delta)
        return SymbolTable(syms, presorted=True, starts=syms.starts)  # type: ignore[arg-type]

    def kernel_table(self, ref_name: str | None = None, ref_addr: int | None = None) -> SymbolTable:
        """:meth:`Kallsyms.kernel_table`."""
        delta = 0
        if ref_name is not None and ref_addr is not None:
            ref = self._ref(ref_name)
            if ref is None:
                return Kallsyms([], {}, self.raw, {}).kernel_table(ref_name, ref_addr)
            delta = ref - ref_addr
        return self._table(np.flatnonzero(self._module < 0), delta)

    def module_table(self, module: str, map_start: int, map_pgoff: int = 0) -> SymbolTable:
        """:meth:`Kallsyms.module_table`."""
        idx = [k for k, x in enumerate(self._mod_name) if x is not None and x.replace("-", "_") == module]
        if not idx:
            return SymbolTable([])
        return self._table(np.flatnonzero(np.isin(self._module, idx)), map_start - map_pgoff)

    def _ksyms(self, rows: np.ndarray) -> list[_KSym]:
        mod = [None if k < 0 else self._mod_name[k] for k in self._module[rows].tolist()]
        return [_KSym(s, e, self._names[i], bd, md) for s, e, i, bd, md in
                zip(self._start[rows].tolist(), self._end[rows].tolist(), self._line[rows].tolist(),
                    self._binding[rows].tolist(), mod)]

    @property
    def kernel(self) -> list[_KSym]:
        return self._ksyms(np.flatnonzero(self._module < 0))

    @property
    def modules(self) -> dict[str, list[_KSym]]:
        out: dict[str, list[_KSym]] = {}
        for s in self._ksyms(np.flatnonzero(self._module >= 0)):
            out.setdefault(s.module.replace("-", "_"), []).append(s)  # type: ignore[union-attr]
        return out

    @property
    def raw(self) -> list[_KSym]:
        """The kept lines as read (size 0, "name\t[module]")."""
        out = []
        for i in self._kept.tolist():
            lo, hi = self._names.lo[i], self._names.hi[i]
            line_end = self._text.find("\n", hi)
            full = self._text[lo:line_end if line_end >= 0 else len(self._text)]
            addr = int(self._text[lo - 19:lo - 3], 16)
            mod = full.split("\t", 1)[1] if "\t" in full else None
            out.append(_KSym(addr, addr, full, int(_BINDING[self._typ[i]]), mod))
        return out


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
