"""Function symbols of an ELF object, the way perf's report/export sees them.

perf keeps an object's symbols in *file-offset* space: a symbol's start is
its ``st_value`` moved from its section's address to the section's file
offset, so ``ip - map.start + map.pgoff`` (perf's ``map_ip``) finds it in
executables and shared objects alike.

Which symbols count, as perf 6.1 loads them (``.symtab``, else ``.dynsym``):

- functions (``FUNC``, GNU ``IFUNC``) with a name, defined in a code section;
- labels (``NOTYPE``) with a name, defined in a section whose name contains
  "text", and neither hidden nor internal; so the assembler labels of
  ``.text`` count and those of ``.init``/``.fini`` do not.

Then, in address order (ties in table order): a symbol without a size ends
where the next one starts, the last one where the map it is found through ends
(what perf 6.1's export shows; ``symbols__fixup_end``); and of the symbols that share a
start one is kept (perf's ``symbols__fixup_duplicate``/``choose_best_symbol``):
a sized one over one of size 0, non-weak over weak, global over not global,
fewer leading underscores, the longer name, else the first.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ptexport.errors import ImageError

_BINDING = {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2, "STB_GNU_UNIQUE": 10, "STB_LOOS": 10}


@dataclass(frozen=True, slots=True)
class Symbol:
    start: int  # file-offset space
    end: int
    name: str
    binding: int


OPEN_END = 1 << 64  # the end of a last symbol of size 0, until a map gives it one


class SymbolTable:
    """Sorted symbols with ``find(offset)``.

    ``open_end``: the last symbol had no size; its ``end`` is :data:`OPEN_END`,
    and the caller ends it where the map it looked it up through ends.
    """

    def __init__(self, symbols: list[Symbol]) -> None:
        self.symbols = sorted(symbols, key=lambda s: (s.start, s.name))
        self._starts = [s.start for s in self.symbols]
        self.open_end = bool(self.symbols) and self.symbols[-1].end == OPEN_END

    def __len__(self) -> int:
        return len(self.symbols)

    def find(self, offset: int) -> Symbol | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        s = self.symbols[i]
        # perf's symbols__find: start <= ip < end, or ip == start for a symbol of size 0
        return s if offset < s.end or offset == s.start else None


EMPTY = SymbolTable([])


def load_elf_symbols(path: str) -> SymbolTable:
    """Function symbols of the ELF file at ``path`` (.symtab, else .dynsym), as perf keeps them."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            sections = list(elf.iter_sections())
            table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
            if table is None:
                return EMPTY
            raw: list[list] = []  # [start, end, name, binding] in table order
            for sym in table.iter_symbols():
                name = sym.name
                shndx = sym["st_shndx"]
                if not name or not isinstance(shndx, int) or shndx >= len(sections):
                    continue  # undefined, absolute or common
                typ = sym["st_info"]["type"]
                if typ == "STT_NOTYPE":
                    if sym["st_other"]["visibility"] in ("STV_HIDDEN", "STV_INTERNAL"):
                        continue
                    if "text" not in sections[shndx].name:
                        continue
                elif typ not in ("STT_FUNC", "STT_GNU_IFUNC") or not sections[shndx]["sh_flags"] & 0x4:
                    continue  # a function outside code (SHF_EXECINSTR) is not among perf 6.1's
                sec = sections[shndx]
                start = sym["st_value"] - sec["sh_addr"] + sec["sh_offset"]
                bind = sym["st_info"]["bind"]
                binding = bind if isinstance(bind, int) else _BINDING.get(bind, 1)
                raw.append([start, start + sym["st_size"], name, binding])
    except (OSError, ELFError, ValueError) as e:
        raise ImageError(f"cannot read symbols: {e}", source=path) from e
    return SymbolTable(perf_fixup(raw))


def perf_fixup(raw: list[list]) -> list[Symbol]:
    """perf's symbols__fixup_end then symbols__fixup_duplicate on ``[start, end, name, binding]``
    entries in table order (sorted here by start, stably, as perf's symbol tree keeps them)."""
    raw.sort(key=lambda r: r[0])
    for prev, cur in zip(raw, raw[1:]):
        if prev[1] == prev[0]:
            prev[1] = cur[0]
    if raw and raw[-1][1] == raw[-1][0]:
        raw[-1][1] = OPEN_END  # perf 6.1 ends it with the map it is found through (see SymbolTable.open_end)
    out: list[Symbol] = []
    best: list | None = None
    for r in raw:
        if best is not None and best[0] == r[0]:
            if not _first_wins(best, r):
                best = r
            continue
        if best is not None:
            out.append(Symbol(best[0], best[1], best[2], best[3]))
        best = r
    if best is not None:
        out.append(Symbol(best[0], best[1], best[2], best[3]))
    return out


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
