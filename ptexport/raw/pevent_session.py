"""perf_event sideband for raw dumps: which code image is live when (libipt's pt_sb).

A :class:`PeventSession` holds the sideband records of one or more pevent
files (read by :mod:`ptexport.pt.pevent`), sorted by TSC.  The flow calls
:meth:`PeventSession.on_event` for every decoder event: records with a TSC
up to the event's are applied - MMAP/MMAP2 add a file section to the process
image (or, at or above ``kernel_start``, to the kernel image every process
sees), COMM.EXEC gives the process a fresh image, FORK copies the parent's,
ITRACE_START and SWITCH*.IN select the process whose image the decoder
uses.  A context switch takes effect when tracing is enabled or disabled
(the decoder cannot change address space in the middle of a traced run).
"""

from __future__ import annotations

import heapq
import os
from typing import Iterable

from ptexport.errors import ImageError
from ptexport.images.image import Image
from ptexport.images.section import SectionCache

REC_MMAP = 1
REC_LOST = 2
REC_COMM = 3
REC_EXIT = 4
REC_FORK = 7
REC_MMAP2 = 10
REC_AUX = 11
REC_ITRACE_START = 12
REC_SWITCH = 14
REC_SWITCH_CPU_WIDE = 15

MISC_SWITCH_OUT = 0x2000
MISC_COMM_EXEC = 0x2000


class PeventSession:
    def __init__(self, records: Iterable, printer=None, *, kernel_start: int | None = None,
                 root: str = ".", show_switch: bool = False,
                 cache: SectionCache | None = None, resolve=None) -> None:
        # Each file in its own order, files merged by TSC (libipt's pt_sb session).
        streams: dict[str, list] = {}
        for r in records:
            streams.setdefault(r.filename, []).append(r)
        merged = heapq.merge(*[[(r.tsc, i, r.offset, r) for r in rs]
                               for i, rs in enumerate(streams.values())])
        self.records = [m[3] for m in merged]
        self.warn = bool(printer is not None and getattr(printer, "warn", False))
        self.next = 0
        self.printer = printer
        self.kernel_start = kernel_start
        self.root = root
        self.show_switch = show_switch
        self.resolve = resolve
        self.cache = cache or SectionCache()
        self.kernel = Image("kernel", self.cache)
        self.procs: dict[int, Image] = {}
        self.current: int | None = None
        self.pending: int | None = None

    def _proc(self, pid: int) -> Image:
        """The image of process ``pid``: its own sections over the kernel's."""
        img = self.procs.get(pid)
        if img is None:
            img = self.procs[pid] = Image(f"pid-{pid}", self.cache)
            self._add_kernel(img)
        return img

    def _add_kernel(self, img: Image) -> None:
        for s, e, sec, off in self.kernel.mappings():
            img.add_section(sec, s, sec_offset=off, size=e - s)

    def _add_kernel_section(self, path: str, addr: int, pgoff: int, size: int) -> None:
        self.kernel.add_raw(path, addr, offset=pgoff, size=size)
        for img in self.procs.values():
            img.add_raw(path, addr, offset=pgoff, size=size)

    def set_kernel(self, kernel: Image) -> None:
        """Use ``kernel`` (kcore, vmlinux) as every process's kernel code."""
        self.kernel = kernel
        for img in self.procs.values():
            self._add_kernel(img)

    def _path(self, name: str) -> str | None:
        if self.resolve is not None:
            return self.resolve(name)
        if os.path.isabs(name):
            # --pevent:sysroot prefixes absolute paths too (libipt: sysroot + filename)
            return self.root.rstrip("/") + name if self.root else name
        return os.path.join(self.root, name)

    def _apply(self, r) -> list[tuple[str, str]]:
        """Apply one record; returns (severity, text) diagnostics."""
        f = dict(r.fields)
        s = dict(r.sample)
        t = r.type
        diags: list[tuple[str, str]] = []
        if t in (REC_MMAP, REC_MMAP2):
            pid, addr, size, pgoff = f["pid"], f["addr"], f["len"], f["pgoff"]
            name = f["filename"]
            if name == "[vdso]" and self.resolve is not None:
                # perf.data: the vdso comes from the build-id cache, if anywhere.
                path = self.resolve(name)
                if path is None:
                    diags.append(("warning", "image section lost"))
                    return diags
                try:
                    self._proc(pid).add_raw(path, addr, offset=pgoff, size=size)
                except ImageError:
                    diags.append(("warning", "image section lost"))
                return diags
            if name == "[vdso]":
                diags.append(("error", "bad configuration"))
                return diags
            if name.startswith("[") or name.startswith("//"):
                diags.append(("warning", "image section lost"))
                return diags
            path = self._path(name)
            try:
                if path is None or not os.path.isfile(path):
                    raise ImageError("not found", source=name)
                if self.kernel_start is not None and addr >= self.kernel_start:
                    self._add_kernel_section(path, addr, pgoff, size)
                else:
                    self._proc(pid).add_raw(path, addr, offset=pgoff, size=size)
            except ImageError:
                diags.append(("warning", "image section lost"))
        elif t >= 64:  # a perf tool record libipt does not know
            diags.append(("error", "bad configuration"))
        elif t == REC_AUX:
            if f.get("flags", 0) & 1:
                diags.append(("warning", "trace lost"))
        elif t == REC_LOST:
            diags.append(("warning", "sideband lost"))
        elif t == REC_COMM and r.misc & MISC_COMM_EXEC:
            img = self._proc(f["pid"])
            img.clear()
            self._add_kernel(img)
        elif t == REC_FORK:
            parent = self.procs.get(f["ppid"])
            pid = f["pid"]
            if pid not in self.procs:
                child = self._proc(pid)
                if parent is not None:
                    for s_, e_, sec, off in parent.mappings():
                        child.add_section(sec, s_, sec_offset=off, size=e_ - s_)
        elif t == REC_ITRACE_START:
            self.pending = f["pid"]
        elif t == REC_SWITCH:
            if not (r.misc & MISC_SWITCH_OUT) and "pid" in s:
                self.pending = s["pid"]
        elif t == REC_SWITCH_CPU_WIDE:
            if r.misc & MISC_SWITCH_OUT:
                self.pending = f.get("next pid", self.pending)
            elif "pid" in s:
                self.pending = s["pid"]
        return diags

    def on_event(self, ev, force_switch: bool = False):
        """Apply the records up to ``ev``'s time: (lines to print, new image or None)."""
        lines: list[str] = []
        if ev.has_tsc:
            recs = self.records
            while self.next < len(recs) and recs[self.next].tsc <= ev.tsc:
                r = recs[self.next]
                self.next += 1
                if self.printer is not None and self.printer.enabled:
                    lines.extend(self.printer.render(r))
                for sev, text in self._apply(r):
                    if self.warn:
                        lines.append(f"[{os.path.basename(r.filename)}:{r.offset:016x} "
                                     f"sideband {sev}: {text}]")
        image = None
        if self.pending is not None and (force_switch or ev.type in (
                "enabled", "disabled", "async_disabled")):
            pid, self.pending = self.pending, None
            if pid != self.current:
                self.current = pid
                if self.show_switch:
                    lines.append(f"[context: pid-{pid:x}]")
            image = self._proc(pid)
        return lines, image
