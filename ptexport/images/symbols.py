"""Function symbols of an ELF object, the way perf's report/export sees them.

perf keeps an object's symbols in *file-offset* space: a symbol's start is
its ``st_value`` moved from its section's address to the section's file
offset, so ``ip - map.start + map.pgoff`` (perf's ``map_ip``) finds it in
executables and shared objects alike.  Functions (and GNU ifuncs) and labels
in executable sections count; a symbol without a size ends where the next
one starts (perf's ``symbols__fixup_end``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ptexport.errors import ImageError

_BINDING = {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2}


@dataclass(frozen=True, slots=True)
class Symbol:
    start: int  # file-offset space
    end: int
    name: str
    binding: int


class SymbolTable:
    """Sorted symbols with ``find(offset)``."""

    def __init__(self, symbols: list[Symbol]) -> None:
        self.symbols = sorted(symbols, key=lambda s: (s.start, s.name))
        self._starts = [s.start for s in self.symbols]

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
    """Function symbols of the ELF file at ``path`` (.symtab, else .dynsym)."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            sections = list(elf.iter_sections())
            table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
            if table is None:
                return EMPTY
            raw: list[tuple[int, int, str, int]] = []
            for sym in table.iter_symbols():
                name = sym.name
                typ = sym["st_info"]["type"]
                shndx = sym["st_shndx"]
                if not name or not isinstance(shndx, int) or shndx >= len(sections):
                    continue
                sec = sections[shndx]
                executable = bool(sec["sh_flags"] & 0x4)  # SHF_EXECINSTR
                if typ not in ("STT_FUNC", "STT_GNU_IFUNC") and not (typ == "STT_NOTYPE" and executable):
                    continue
                if not executable:
                    continue
                start = sym["st_value"] - sec["sh_addr"] + sec["sh_offset"]
                raw.append((start, sym["st_size"], name, _BINDING.get(sym["st_info"]["bind"], 1)))
    except (OSError, ELFError, ValueError) as e:
        raise ImageError(f"cannot read symbols: {e}", source=path) from e
    raw.sort(key=lambda r: (r[0], -r[1], r[2]))
    # perf keeps one symbol per start address (the first, preferring a sized one).
    dedup: list[tuple[int, int, str, int]] = []
    for r in raw:
        if dedup and dedup[-1][0] == r[0]:
            continue
        dedup.append(r)
    out = []
    for i, (start, size, name, binding) in enumerate(dedup):
        end = start + size
        if not size:
            end = dedup[i + 1][0] if i + 1 < len(dedup) else start + 1
        out.append(Symbol(start, end, name, binding))
    return SymbolTable(out)
