"""An image: one address space made of sections mapped at addresses.

Like libipt's ``pt_image``: sections added later hide the parts of earlier
sections they overlap.  Loaders:

* :meth:`Image.add_raw` - a file's bytes at an address (ptxed ``--raw``);
* :meth:`Image.add_elf` - an ELF file by its PT_LOAD segments, optionally
  relocated so that its lowest segment starts at ``base`` (ptxed ``--elf``);
* :meth:`Image.add_file` - ELF if the file starts with the ELF magic, raw
  otherwise (``ptexport dump insns --image FILE:ADDR``).
"""

from __future__ import annotations

import bisect
from typing import Iterable

from ptexport.errors import ImageError
from ptexport.images.section import Section, SectionCache

_ELF_MAGIC = b"\x7fELF"


class Image:
    """Sections mapped at virtual addresses; reads never cross unmapped gaps."""

    def __init__(self, name: str = "image", cache: SectionCache | None = None) -> None:
        self.name = name
        self.cache = cache if cache is not None else SectionCache()
        # Sorted, non-overlapping (start, end, section, section_offset).
        self._starts: list[int] = []
        self._maps: list[tuple[int, int, Section, int]] = []
        # Bumped on every change, so caches built on the image can notice.
        self.generation = 0

    # -- building -------------------------------------------------------
    def add_section(self, section: Section, vaddr: int, *, sec_offset: int = 0,
                    size: int | None = None) -> None:
        """Map ``size`` bytes of ``section`` from ``sec_offset`` at ``vaddr``."""
        if size is None:
            size = section.size - sec_offset
        if size <= 0:
            return
        start, end = vaddr, vaddr + size
        kept: list[tuple[int, int, Section, int]] = []
        for (s, e, sec, off) in self._maps:
            if e <= start or s >= end:
                kept.append((s, e, sec, off))
                continue
            if s < start:
                kept.append((s, start, sec, off))
            if e > end:
                kept.append((end, e, sec, off + (end - s)))
        kept.append((start, end, section, sec_offset))
        kept.sort(key=lambda m: m[0])
        self._maps = kept
        self._starts = [m[0] for m in kept]
        self.generation += 1

    def clear(self) -> None:
        """Unmap everything (an exec'd process starts over)."""
        self._maps = []
        self._starts = []
        self.generation += 1

    def add_bytes(self, data: bytes, vaddr: int, name: str = "<bytes>") -> None:
        self.add_section(Section(name, 0, len(data), data=bytes(data)), vaddr)

    def add_raw(self, path: str, vaddr: int, *, offset: int = 0, size: int | None = None) -> None:
        """Map a file's bytes (``offset``, ``size`` within the file) at ``vaddr``."""
        self.add_section(self.cache.get(path, offset, size), vaddr)

    def add_elf(self, path: str, base: int | None = None) -> None:
        """Map an ELF file's PT_LOAD segments (relocated so the lowest starts at ``base``)."""
        segments = list(_elf_load_segments(path))
        if not segments:
            raise ImageError("no loadable segments", source=path, what="ELF")
        bias = 0
        if base:
            bias = base - min(vaddr for (vaddr, _, _, _) in segments)
        for vaddr, file_off, filesz, memsz in segments:
            if filesz:
                self.add_raw(path, vaddr + bias, offset=file_off, size=filesz)
            if memsz > filesz:
                self.add_bytes(bytes(memsz - filesz), vaddr + bias + filesz, name=f"{path}:bss")

    def add_file(self, path: str, vaddr: int) -> None:
        """ELF by segments at base ``vaddr`` if it is an ELF file, else raw bytes at ``vaddr``."""
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise ImageError(f"cannot read: {e.strerror}", source=path) from e
        if magic == _ELF_MAGIC:
            self.add_elf(path, vaddr)
        else:
            self.add_raw(path, vaddr)

    # -- reading --------------------------------------------------------
    def find(self, addr: int) -> tuple[int, int, Section, int] | None:
        """The mapping (start, end, section, section offset) holding ``addr``."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            m = self._maps[i]
            if addr < m[1]:
                return m
        return None

    def read(self, addr: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``addr``, continuing into adjacent sections; b"" if unmapped."""
        out = b""
        while size > 0:
            m = self.find(addr)
            if m is None:
                break
            s, e, sec, off = m
            n = min(size, e - addr)
            lo = off + (addr - s)
            out += bytes(sec.data[lo:lo + n])
            addr += n
            size -= n
        return out

    def mappings(self) -> Iterable[tuple[int, int, Section, int]]:
        return iter(self._maps)

    def __len__(self) -> int:
        return len(self._maps)


def _elf_load_segments(path: str):
    """(vaddr, file offset, filesz, memsz) of each PT_LOAD segment."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            segs = []
            for seg in elf.iter_segments():
                if seg["p_type"] != "PT_LOAD":
                    continue
                segs.append((seg["p_vaddr"], seg["p_offset"], seg["p_filesz"], seg["p_memsz"]))
            return segs
    except OSError as e:
        raise ImageError(f"cannot read: {e.strerror}", source=path) from e
    except (ELFError, ValueError, KeyError) as e:
        raise ImageError(f"bad ELF file: {e}", source=path, what="ELF") from e
