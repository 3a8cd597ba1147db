"""Finding the code of recorded objects: symfs, build-id cache, vdso, kcore, vmlinux.

perf records object *names* and *build-ids*; the bytes live elsewhere by the
time one decodes.  :class:`ObjectFinder` looks where perf looks:

1. ``--symfs`` root + the recorded path (a copy of the traced system);
2. the build-id cache (``~/.debug``): ``.build-id/xx/yyyy...`` links and
   ``<path>/<build-id>/{elf,vdso,kallsyms}`` entries;
3. the recorded path itself, if its build-id matches (or none was recorded).

The kernel comes from a kcore copy (``perf record --kcore`` directory, or a
``[kernel.kcore]`` cache entry), whose PT_LOAD segments are at the kernel's
virtual addresses, or from a vmlinux moved by the KASLR offset that
``kallsyms`` gives (its ``_stext`` against vmlinux's).
"""

from __future__ import annotations

import os
from typing import Iterable

from ptexport.errors import ImageError
from ptexport.images.image import Image


def elf_build_id(path: str) -> str | None:
    """The GNU build-id of an ELF file as lower-case hex, or None."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            for sec in elf.iter_sections():
                if sec["sh_type"] != "SHT_NOTE":
                    continue
                for note in sec.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return str(note["n_desc"]).lower()
    except (OSError, ELFError, ValueError, KeyError):
        return None
    return None


def read_kallsyms(path: str) -> list[tuple[int, str, str]]:
    """(address, type, name) of a /proc/kallsyms-format file, in file order."""
    out = []
    try:
        with open(path, "r", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) < 3:
                    continue
                try:
                    out.append((int(parts[0], 16), parts[1], parts[2]))
                except ValueError:
                    raise ImageError(f"line {lineno}: bad address {parts[0]!r}", source=path,
                                     what="kallsyms") from None
    except OSError as e:
        raise ImageError(f"cannot read: {e.strerror}", source=path) from e
    return out


class ObjectFinder:
    """Resolve recorded (path, build-id) pairs to files holding their bytes."""

    def __init__(self, symfs: str | None = None, buildid_dir: str | None = None,
                 kcore_dir: str | None = None, vmlinux: str | None = None,
                 kallsyms: str | None = None) -> None:
        self.symfs = symfs
        self.buildid_dir = os.path.expanduser(buildid_dir or "~/.debug")
        self.kcore_dir = kcore_dir
        self.vmlinux = vmlinux
        self.kallsyms = kallsyms
        self._memo: dict[tuple[str, str | None], str | None] = {}

    def candidates(self, path: str, build_id: str | None) -> Iterable[str]:
        """Where ``path`` (with ``build_id``) may be found, best first."""
        bid = build_id.lower() if build_id else None
        base = os.path.basename(path)
        if self.symfs:
            yield os.path.join(self.symfs, path.lstrip("/"))
            yield os.path.join(self.symfs, base)
        if bid:
            cache = self.buildid_dir
            link = os.path.join(cache, ".build-id", bid[:2], bid[2:])
            for leaf in ("elf", "vdso", "debug"):
                yield os.path.join(link, leaf) if os.path.isdir(link) else link
            name = path.strip("/") if not path.startswith("[") else path
            for leaf in ("elf", "vdso"):
                yield os.path.join(cache, name, bid, leaf)
        if not path.startswith("["):
            yield path

    def find(self, path: str, build_id: str | None = None) -> str | None:
        """The first candidate that exists and whose build-id matches (when both are known)."""
        key = (path, build_id)
        if key in self._memo:
            return self._memo[key]
        found = None
        for cand in self.candidates(path, build_id):
            if not os.path.isfile(cand):
                continue
            if build_id:
                have = elf_build_id(cand)
                if have is not None and have != build_id.lower():
                    continue
            found = cand
            break
        self._memo[key] = found
        return found

    # -- the kernel ------------------------------------------------------------
    def kernel_image(self, image: Image | None = None) -> Image:
        """The kernel's code: a kcore copy, else vmlinux (KASLR-adjusted by kallsyms)."""
        image = image if image is not None else Image("kernel")
        if self.kcore_dir:
            kcore = os.path.join(self.kcore_dir, "kcore")
            if os.path.isfile(kcore):
                image.add_elf(kcore)
                return image
        if self.vmlinux:
            offset = 0
            kallsyms = self.kallsyms or (os.path.join(self.kcore_dir, "kallsyms")
                                         if self.kcore_dir else None)
            if kallsyms and os.path.isfile(kallsyms):
                offset = self._kaslr_offset(self.vmlinux, kallsyms)
            self._add_vmlinux(image, self.vmlinux, offset)
            return image
        raise ImageError("no kernel image: give a kcore directory or a vmlinux",
                         source=self.kcore_dir or "<kernel>")

    @staticmethod
    def _kaslr_offset(vmlinux: str, kallsyms: str) -> int:
        from elftools.elf.elffile import ELFFile
        from elftools.elf.sections import SymbolTableSection

        run = {name: addr for addr, _, name in read_kallsyms(kallsyms)}
        if "_stext" not in run:
            return 0
        with open(vmlinux, "rb") as f:
            elf = ELFFile(f)
            for sec in elf.iter_sections():
                if isinstance(sec, SymbolTableSection):
                    for sym in sec.get_symbol_by_name("_stext") or ():
                        return run["_stext"] - sym["st_value"]
        return 0

    @staticmethod
    def _add_vmlinux(image: Image, vmlinux: str, offset: int) -> None:
        from ptexport.images.image import _elf_load_segments

        for vaddr, off, filesz, _ in _elf_load_segments(vmlinux):
            if filesz:
                image.add_raw(vmlinux, (vaddr + offset) & 0xFFFFFFFFFFFFFFFF, offset=off,
                              size=filesz)
