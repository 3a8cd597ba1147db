"""Symbols of an ELF object, the way perf 6.1's report/export sees them.

perf keeps an object's symbols in *file-offset* space: a symbol's start is
its ``st_value`` moved from its section's address to the section's file
offset, so ``ip - map.start + map.pgoff`` (perf's ``map_ip``) finds it in
executables and shared objects alike.

Which symbols perf 6.1 loads (``.symtab``, else ``.dynsym``; dso__load_sym),
in table order, into its red-black tree of the object:

- functions (``FUNC``, GNU ``IFUNC``) and data objects (``OBJECT``) with a
  name, defined in a section;
- labels (``NOTYPE``) with a name, defined in a section whose name contains
  "text" or "data", and neither hidden nor internal; so the assembler labels
  of ``.text`` count and those of ``.init``/``.fini`` do not.

Then, in address order (ties in table order; ``symbols__fixup_end``): a
symbol without a size ends where the next one starts (data objects count:
the last code symbol ends where the first data object starts), the last one
at the page after the page it starts in; and of the symbols that share a
start one is kept (``symbols__fixup_duplicate``/``choose_best_symbol``): a
sized one over one of size 0, non-weak over weak, global over not global,
fewer leading underscores, the longer name, else the first.

Then, if the table gave any symbol, the PLT's (``dso__synthesize_plt_symbols``
as of 6.1): with a ``.dynsym``, a ``.rela.plt`` (else ``.rel.plt``) linked
to it and a ``.plt``, the entries of ``.plt`` after its header (header and
entry size: ``.plt``'s ``sh_entsize``, 16 on x86-64) are named
``NAME@plt``, STB_GLOBAL, one per relocation in table order, NAME its
symbol's.  perf 6.1 names no header (PLT0), nothing in ``.plt.sec`` (IBT:
the calls go there, while the names sit on the lazy ``.plt`` stubs) nor in
``.plt.got``; the same for lazy binding and ``-z now``.  The PLT symbols are
added after the fixups: they keep their sizes, and a symbol stretched over
``.plt`` (``_init`` of size 0 in ``.init``, just before it) stays.  Then two
symbols overlap, and which one an address gets depends on which perf's
``symbols__find`` meets first going down its tree: the table then keeps
that tree, built as perf builds it (:class:`_RBTree`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ptexport.errors import ImageError
from ptexport.images.demangle import demangle

_BINDING = {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2, "STB_GNU_UNIQUE": 10, "STB_LOOS": 10}


@dataclass(frozen=True, slots=True)
class Symbol:
    start: int  # file-offset space
    end: int
    name: str
    binding: int


OPEN_END = 1 << 64  # the end of a last symbol of size 0, until a map gives it one (kallsyms tables)


class SymbolTable:
    """Sorted symbols with ``find(offset)``.

    ``open_end``: the last symbol had no size; its ``end`` is :data:`OPEN_END`,
    and the caller ends it where the map it looked it up through ends.
    ``tree``: perf's red-black tree of an ELF's symbols when some overlap
    (see :func:`perf_table`); ``find`` then searches it as perf does.
    """

    def __init__(self, symbols: list[Symbol], *, presorted: bool = False, tree: "_RBTree | None" = None,
                 starts: list[int] | None = None) -> None:
        self.symbols = symbols if presorted else sorted(symbols, key=lambda s: (s.start, s.name))
        # (``starts``: the symbols' starts when the caller has them: a table of symbols made as they
        # are looked up, kallsyms.ArrayKallsyms)
        self._starts = starts if starts is not None else [s.start for s in self.symbols]
        self.open_end = bool(self.symbols) and self.symbols[-1].end == OPEN_END
        self._tree = tree

    def __len__(self) -> int:
        return len(self.symbols)

    def find(self, offset: int) -> Symbol | None:
        if self._tree is not None:
            e = self._tree.find(offset)
            return None if e is None else e[4]
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        s = self.symbols[i]
        # perf's symbols__find: start <= ip < end, or ip == start for a symbol of size 0
        return s if offset < s.end or offset == s.start else None


EMPTY = SymbolTable([])


def load_elf_symbols(path: str, demangled: bool = True) -> SymbolTable:
    """The symbols of the ELF file at ``path`` (.symtab, else .dynsym) and of its PLT, as perf 6.1 keeps them:
    their names demangled (``images/demangle.py``), except a kernel module's (``demangled`` False: perf's
    ``demangle_kernel`` is off)."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            sections = list(elf.iter_sections())
            table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
            if table is None:
                return EMPTY
            raw = _table_symbols_array(elf, table, sections)
            if raw is None:
                raw = _table_symbols(table, sections)
            if demangled:  # perf's names are demangled ones (and its duplicates are chosen by them)
                for r in raw:
                    r[2] = demangle(r[2])
            # perf 6.1 synthesizes PLT symbols only when the table gave it some
            plt = _plt_symbols(elf, sections, demangled) if raw else []
    except (OSError, ELFError, ValueError) as e:
        raise ImageError(f"cannot read symbols: {e}", source=path) from e
    return perf_table(raw, plt)


def _table_symbols(table, sections: list) -> list[list]:
    """``[start, end, name, binding]`` of the symbols perf 6.1's dso__load_sym inserts, in table order."""
    raw: list[list] = []
    for sym in table.iter_symbols():
        name = sym.name
        shndx = sym["st_shndx"]
        if not name or not isinstance(shndx, int) or shndx >= len(sections):
            continue  # undefined, absolute or common
        typ = sym["st_info"]["type"]
        sec = sections[shndx]
        if typ == "STT_NOTYPE":
            if sym["st_other"]["visibility"] in ("STV_HIDDEN", "STV_INTERNAL"):
                continue
            if "text" not in sec.name and "data" not in sec.name:
                continue
        elif typ not in ("STT_FUNC", "STT_LOOS", "STT_OBJECT"):  # pyelftools names STT_GNU_IFUNC (10) STT_LOOS
            continue
        start = sym["st_value"] - sec["sh_addr"] + sec["sh_offset"]
        bind = sym["st_info"]["bind"]
        binding = bind if isinstance(bind, int) else _BINDING.get(bind, 1)
        raw.append([start, start + sym["st_size"], name, binding])
    return raw


_SYM_DTYPES = {  # Elf64_Sym / Elf32_Sym, little-endian
    64: np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                  ("size", "<u8")]),
    32: np.dtype([("name", "<u4"), ("value", "<u4"), ("size", "<u4"), ("info", "u1"), ("other", "u1"),
                  ("shndx", "<u2")]),
}
# a symbol's binding as _table_symbols gets it from pyelftools: its STB name through _BINDING (an
# unknown name: 1), a value pyelftools has no name for as is
_BIND_OF = np.array([0, 1, 2, 1, 4, 5, 6, 7, 8, 9, 10, 11, 1, 1, 14, 1], np.int64)
_STT_NOTYPE, _STT_OBJECT, _STT_FUNC, _STT_GNU_IFUNC = 0, 1, 2, 10
_SHN_ABS, _SHN_COMMON = 0xFFF1, 0xFFF2


def _table_symbols_array(elf: ELFFile, table: Any, sections: list) -> list[list] | None:
    """:func:`_table_symbols` from the table's bytes by numpy (a little-endian ELF's standard symbol
    records; None otherwise, or for a name pyelftools would read past its string table): a library's
    ``.dynsym`` or a program's ``.symtab`` of tens of thousands of symbols took pyelftools ~50 us each."""
    bits = elf.elfclass
    dt = _SYM_DTYPES.get(bits)
    if dt is None or not elf.little_endian or table["sh_entsize"] != dt.itemsize:
        return None
    n = table["sh_size"] // dt.itemsize
    data = table.data()
    if len(data) < n * dt.itemsize:
        return None
    syms = np.frombuffer(data, dt, count=n)
    link = table["sh_link"]
    if not 0 <= link < len(sections):
        return None
    strtab = sections[link].data()
    nsec = len(sections)
    sec_addr = np.array([sec["sh_addr"] for sec in sections] + [0], np.uint64)
    sec_off = np.array([sec["sh_offset"] for sec in sections] + [0], np.uint64)
    text_or_data = np.array([("text" in sec.name or "data" in sec.name) for sec in sections] + [False])
    shndx = syms["shndx"].astype(np.int64)
    defined = (shndx != 0) & (shndx != _SHN_ABS) & (shndx != _SHN_COMMON) & (shndx < nsec)
    typ = syms["info"] & 0xF
    vis = syms["other"] & 7
    sec = np.where(defined, shndx, nsec)
    label = (typ == _STT_NOTYPE) & (vis != 1) & (vis != 2) & text_or_data[sec]
    kept = defined & (label | (typ == _STT_FUNC) | (typ == _STT_GNU_IFUNC) | (typ == _STT_OBJECT))
    kept &= syms["name"] != 0  # (offset 0 of a string table is its empty string)
    rows = np.flatnonzero(kept)
    value = syms["value"][rows].astype(np.uint64)
    size = syms["size"][rows].astype(np.uint64)
    if len(rows) and (int(value.max()) >= 1 << 62 or int(size.max()) >= 1 << 62
                      or int(sec_off.max()) >= 1 << 62 or int(sec_addr.max()) >= 1 << 62):
        return None  # (addresses past 2^62: Python's integers, the line-by-line way)
    start = (value.astype(np.int64) - sec_addr[sec[rows]].astype(np.int64) + sec_off[sec[rows]].astype(np.int64))
    end = start + size.astype(np.int64)
    binding = _BIND_OF[syms["info"][rows] >> 4]
    out = []
    for i, a, z, bd in zip(syms["name"][rows].tolist(), start.tolist(), end.tolist(), binding.tolist()):
        j = strtab.find(b"\0", i)
        if i >= len(strtab) or j < 0:
            return None  # pyelftools reads the file past the table: the slow way
        if j == i:
            continue  # an empty name
        out.append([a, z, strtab[i:j].decode("utf-8", errors="replace"), bd])
    return out


# perf 6.1's PLT layout of the machines it knows: (header size, entry size); others: .plt's sh_entsize
_PLT_SIZES = {"EM_ARM": (20, 12), "EM_AARCH64": (32, 16), "EM_SPARC": (48, 12), "EM_SPARCV9": (128, 32)}


def _plt_symbols(elf: ELFFile, sections: list, demangled: bool = True) -> list[list]:
    """perf 6.1's dso__synthesize_plt_symbols: ``[start, end, "NAME@plt", STB_GLOBAL]`` for each
    ``.rela.plt`` (else ``.rel.plt``) entry, in its order, on ``.plt``'s entries after its header."""
    dynsym_idx = next((i for i, sec in enumerate(sections) if sec.name == ".dynsym"), None)
    if dynsym_idx is None or sections[dynsym_idx]["sh_type"] != "SHT_DYNSYM":
        return []
    rel = elf.get_section_by_name(".rela.plt") or elf.get_section_by_name(".rel.plt")
    plt = elf.get_section_by_name(".plt")
    if rel is None or plt is None or rel["sh_link"] != dynsym_idx:
        return []
    if rel["sh_type"] not in ("SHT_RELA", "SHT_REL") or not rel["sh_entsize"]:
        return []
    dynsym = sections[dynsym_idx]
    strtab_idx = dynsym["sh_link"]
    if not 0 < strtab_idx < len(sections) or not sections[strtab_idx]["sh_size"]:
        return []
    header, entry = _PLT_SIZES.get(elf["e_machine"], (plt["sh_entsize"], plt["sh_entsize"]))
    offset = plt["sh_offset"] + header
    names = _plt_names_array(elf, rel, dynsym, sections[strtab_idx])
    if names is None:
        nsyms = dynsym.num_symbols()
        names = [dynsym.get_symbol(r["r_info_sym"]).name if r["r_info_sym"] < nsyms else ""
                 for r in rel.iter_relocations()]
    out = []
    for name in names:
        # perf demangles the name, then prints "NAME@plt" into a buffer of 1024 bytes
        full = f"{demangle(name) if demangled else name}@plt".encode("utf-8", errors="surrogateescape")[:1023]
        out.append([offset, offset + entry, full.decode("utf-8", errors="replace"), 1])
        offset += entry
    return out


def _plt_names_array(elf: ELFFile, rel: Any, dynsym: Any, strtab_sec: Any) -> list[str] | None:
    """The names of the relocations' symbols as pyelftools gives them (``""`` past the table), from the
    sections' bytes by numpy; None where that is not the plain little-endian layout."""
    bits = elf.elfclass
    dt = _SYM_DTYPES.get(bits)
    is_rela = rel["sh_type"] == "SHT_RELA"
    size = (24 if is_rela else 16) if bits == 64 else (12 if is_rela else 8)
    if dt is None or not elf.little_endian or rel["sh_entsize"] != size or dynsym["sh_entsize"] != dt.itemsize:
        return None
    data = rel.data()
    n = rel["sh_size"] // size
    if len(data) < n * size:
        return None
    words = np.frombuffer(data, np.dtype("<u8" if bits == 64 else "<u4"), count=n * size // (8 if bits == 64 else 4))
    info = words.reshape(n, -1)[:, 1]
    idx = (info >> np.uint64(32)) if bits == 64 else (info >> np.uint32(8))
    nsyms = dynsym["sh_size"] // dt.itemsize
    syms = np.frombuffer(dynsym.data(), dt, count=nsyms)
    strtab = strtab_sec.data()
    out = []
    for i in idx.tolist():
        if i >= nsyms:
            out.append("")
            continue
        o = int(syms["name"][i])
        j = strtab.find(b"\0", o)
        if o >= len(strtab) or j < 0:
            return None
        out.append(strtab[o:j].decode("utf-8", errors="replace"))
    return out


def perf_table(raw: list[list], plt: list[list] = ()) -> SymbolTable:
    """perf 6.1's symbol tree of a DSO from ``[start, end, name, binding]`` entries in table
    order: inserted one by one, then ``symbols__fixup_end``, ``symbols__fixup_duplicate``, then
    the PLT symbols ``plt`` inserted (they keep their sizes and may lie inside a stretched symbol).

    When no two symbols overlap, any search finds the one symbol holding an address and a
    bisection does; otherwise the table keeps perf's red-black tree, whose shape decides which
    of two overlapping symbols perf's ``symbols__find`` meets first."""
    if not raw:
        return SymbolTable([Symbol(*r) for r in plt]) if plt else EMPTY
    order = sorted(raw, key=lambda r: r[0])  # stable: equal starts in insertion order, as in the tree
    for prev, cur in zip(order, order[1:]):
        if prev[1] == prev[0]:
            prev[1] = cur[0]
    last = order[-1]
    if last[1] == last[0]:
        last[1] = (last[0] + 4095) // 4096 * 4096 + 4096  # roundup(start, 4096) + 4096
    erased: list[int] = []  # ids of the entries symbols__fixup_duplicate erases, in its order
    kept: list[list] = []
    cur = order[0]
    for nxt in order[1:]:
        if cur[0] == nxt[0]:
            loser, cur = (nxt, cur) if _first_wins(cur, nxt) else (cur, nxt)
            erased.append(id(loser))
            continue
        kept.append(cur)
        cur = nxt
    kept.append(cur)
    merged = sorted(kept + list(plt), key=lambda r: r[0])  # PLT entries after equal starts: stable
    overlap = any(a[1] > b[0] for a, b in zip(merged, merged[1:]))
    symbols = []
    for r in merged:
        symbols.append(Symbol(r[0], r[1], r[2], r[3]))
        r.append(symbols[-1])  # what the tree's search answers
    if not overlap:
        return SymbolTable(symbols, presorted=True)
    tree = _RBTree()
    nodes = {id(r): tree.insert(r) for r in raw}
    for key in erased:
        tree.erase(nodes[key])
    for r in plt:
        tree.insert(r)
    return SymbolTable(symbols, presorted=True, tree=tree)


def _underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


def _first_wins(a: list, b: list) -> bool:
    """perf's choose_best_symbol: does ``a`` stay over ``b`` (both at one address)?"""
    sa, sb = a[1] - a[0], b[1] - b[0]
    if (sa == 0) != (sb == 0):
        return sa > 0
    wa, wb = a[3] == 2, b[3] == 2  # STB_WEAK
    if wa != wb:
        return wb
    ga, gb = a[3] == 1, b[3] == 1  # STB_GLOBAL
    if ga != gb:
        return ga
    ua, ub = _underscores(a[2]), _underscores(b[2])
    if ua != ub:
        return ua < ub
    return len(a[2]) >= len(b[2])


class _Node:
    __slots__ = ("entry", "left", "right", "parent", "red")

    def __init__(self, entry: list, parent: "_Node | None") -> None:
        self.entry = entry  # [start, end, name, binding, Symbol]
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.parent = parent
        self.red = True


class _RBTree:
    """The Linux kernel's red-black tree (lib/rbtree.c) as perf's symbol tree uses it: keys are
    symbol starts, an equal key goes right.  Insertion and erasure rebalance exactly as the
    kernel's do (the textbook algorithms with the in-order successor), so the shape is perf's."""

    def __init__(self) -> None:
        self.root: _Node | None = None

    def find(self, ip: int) -> list | None:
        """perf's symbols__find: the first node met on the way down that holds ``ip``."""
        n = self.root
        while n is not None:
            start, end = n.entry[0], n.entry[1]
            if ip < start:
                n = n.left
            elif ip > end or (ip == end and ip != start):
                n = n.right
            else:
                return n.entry
        return None

    def _rotate_left(self, x: _Node) -> None:
        y = x.right
        x.right = y.left
        if y.left is not None:
            y.left.parent = x
        self._replace(x, y)
        y.left = x
        x.parent = y

    def _rotate_right(self, x: _Node) -> None:
        y = x.left
        x.left = y.right
        if y.right is not None:
            y.right.parent = x
        self._replace(x, y)
        y.right = x
        x.parent = y

    def _replace(self, old: _Node, new: _Node | None) -> None:
        """Put ``new`` where ``old`` hangs from its parent."""
        p = old.parent
        if p is None:
            self.root = new
        elif p.left is old:
            p.left = new
        else:
            p.right = new
        if new is not None:
            new.parent = p

    def insert(self, entry: list) -> _Node:
        parent, n, left = None, self.root, False
        while n is not None:
            parent = n
            left = entry[0] < n.entry[0]
            n = n.left if left else n.right
        z = new = _Node(entry, parent)
        if parent is None:
            self.root = z
        elif left:
            parent.left = z
        else:
            parent.right = z
        while z.parent is not None and z.parent.red:
            p = z.parent
            g = p.parent
            if p is g.left:
                u = g.right
                if u is not None and u.red:
                    p.red = u.red = False
                    g.red = True
                    z = g
                    continue
                if z is p.right:
                    z = p
                    self._rotate_left(z)
                    p = z.parent
                p.red, g.red = False, True
                self._rotate_right(g)
            else:
                u = g.left
                if u is not None and u.red:
                    p.red = u.red = False
                    g.red = True
                    z = g
                    continue
                if z is p.left:
                    z = p
                    self._rotate_right(z)
                    p = z.parent
                p.red, g.red = False, True
                self._rotate_left(g)
        self.root.red = False
        return new

    def erase(self, z: _Node) -> None:
        if z.left is None or z.right is None:
            x = z.right if z.left is None else z.left
            xp = z.parent
            removed_red = z.red
            self._replace(z, x)
        else:
            y = z.right
            while y.left is not None:
                y = y.left
            removed_red = y.red
            x = y.right
            if y.parent is z:
                xp = y
            else:
                xp = y.parent
                self._replace(y, x)
                y.right = z.right
                y.right.parent = y
            self._replace(z, y)
            y.left = z.left
            y.left.parent = y
            y.red = z.red
        if not removed_red:
            self._erase_fixup(x, xp)

    def _erase_fixup(self, x: _Node | None, xp: _Node | None) -> None:
        while x is not self.root and (x is None or not x.red):
            if x is xp.left:
                w = xp.right
                if w.red:
                    w.red, xp.red = False, True
                    self._rotate_left(xp)
                    w = xp.right
                if (w.left is None or not w.left.red) and (w.right is None or not w.right.red):
                    w.red = True
                    x, xp = xp, xp.parent
                    continue
                if w.right is None or not w.right.red:
                    w.left.red, w.red = False, True
                    self._rotate_right(w)
                    w = xp.right
                w.red, xp.red = xp.red, False
                w.right.red = False
                self._rotate_left(xp)
                x = self.root
            else:
                w = xp.left
                if w.red:
                    w.red, xp.red = False, True
                    self._rotate_right(xp)
                    w = xp.left
                if (w.left is None or not w.left.red) and (w.right is None or not w.right.red):
                    w.red = True
                    x, xp = xp, xp.parent
                    continue
                if w.left is None or not w.left.red:
                    w.right.red, w.red = False, True
                    self._rotate_left(w)
                    w = xp.left
                w.red, xp.red = xp.red, False
                w.left.red = False
                self._rotate_right(xp)
                x = self.root
        if x is not None:
            x.red = False
