"""Sections: file contents mapped once and shared between images.

A :class:`Section` is a byte range of a file (or an in-memory buffer).  The
:class:`SectionCache` hands out one :class:`Section` per (path, offset, size)
so that many images (one per process or address space) share the bytes, the
way libipt's image section cache does.  Files are memory-mapped lazily on the
first read.
"""

from __future__ import annotations

import mmap
import os
from typing import Optional

from ptexport.errors import ImageError


class Section:
    """``size`` bytes of ``path`` starting at file offset ``offset`` (or of ``data``)."""

    __slots__ = ("path", "offset", "size", "_data")

    def __init__(self, path: str | None, offset: int, size: int, data: bytes | None = None):
        self.path = path
        self.offset = offset
        self.size = size
        self._data: Optional[memoryview] = memoryview(data) if data is not None else None

    @property
    def data(self) -> memoryview:
        """The section's bytes (mapped on first use)."""
        if self._data is None:
            self._data = _map_file(self.path, self.offset, self.size)
        return self._data

    def __repr__(self) -> str:
        return f"Section({self.path!r}, {self.offset:#x}, {self.size:#x})"


def _map_file(path: str | None, offset: int, size: int) -> memoryview:
    if path is None:
        raise ImageError("section has neither a file nor data")
    try:
        with open(path, "rb") as f:
            fsize = os.fstat(f.fileno()).st_size
            if offset < 0 or offset > fsize:
                raise ImageError(f"offset {offset:#x} is beyond the end of the file ({fsize:#x})",
                                 source=path)
            size = min(size, fsize - offset)
            if size == 0:
                return memoryview(b"")
            # mmap needs page-aligned offsets.
            base = offset - offset % mmap.ALLOCATIONGRANULARITY
            mm = mmap.mmap(f.fileno(), size + (offset - base), access=mmap.ACCESS_READ, offset=base)
            return memoryview(mm)[offset - base: offset - base + size]
    except OSError as e:
        raise ImageError(f"cannot read: {e.strerror}", source=path) from e


class SectionCache:
    """One :class:`Section` per (file, offset, size), shared by all images."""

    def __init__(self) -> None:
        self._sections: dict[tuple[str, int, int], Section] = {}

    def get(self, path: str, offset: int = 0, size: int | None = None) -> Section:
        path = os.path.abspath(path)
        if size is None:
            try:
                size = os.path.getsize(path) - offset
            except OSError as e:
                raise ImageError(f"cannot read: {e.strerror}", source=path) from e
        key = (path, offset, size)
        sec = self._sections.get(key)
        if sec is None:
            sec = self._sections[key] = Section(path, offset, size)
        return sec

    def __len__(self) -> int:
        return len(self._sections)
