"""Assembling a case: binutils (``as``, ``ld -Ttext ORG``, ``objcopy -O binary``, ``nm``).

The body is assembled in Intel syntax as 64-, 32- or 16-bit code (``@mode``) at ``@org``; the result
is a flat code image plus the symbol table (every label the case's ``@at``/``@after`` lines name).
:data:`ASSEMBLE_HOOKS` lets a family add more code (``@section``: flowctl.py) from the linked ELF.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .case import Case, CaseError


@dataclass
class Image:
    code: bytes
    org: int
    labels: dict[str, int]
    regions: list = field(default_factory=list)   # more code: (addr, bytes, path) (see @section)


# Functions (case, workdir, elf_path, image) run after assembling (e.g. extra code sections).
ASSEMBLE_HOOKS: list = []


def assemble(case: Case, workdir: Path) -> Image:
    """Assemble the case at its org with ``as``/``ld``; a flat image plus the labels."""
    workdir.mkdir(parents=True, exist_ok=True)
    src = case.path.read_text()
    head = {64: ".code64", 32: ".code32", 16: ".code16"}[case.mode]
    asm = workdir / f"{case.name}.s"
    asm.write_text(f"\t.intel_syntax noprefix\n\t{head}\n\t.text\n" + src + "\n")
    obj, elf, flat = (workdir / f"{case.name}.{ext}" for ext in ("o", "elf", "flat"))
    as_flags = ["--64"]
    ld_flags = ["-m", "elf_x86_64", *case.extra.get("ld_flags", [])]
    cmds = [["as", *as_flags, "-o", str(obj), str(asm)],
            ["ld", *ld_flags, "-static", "-nostdlib", "--no-relax", "-Ttext", hex(case.org),
             "-e", hex(case.org), "-o", str(elf), str(obj)],
            ["objcopy", "-O", "binary", "-j", ".text", str(elf), str(flat)]]
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise CaseError(f"{case.name}: {cmd[0]} failed: {r.stderr.strip()}")
    labels = {}
    r = subprocess.run(["nm", str(elf)], capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            labels[parts[2]] = int(parts[0], 16)
    image = Image(flat.read_bytes(), case.org, labels)
    for hook in ASSEMBLE_HOOKS:
        hook(case, workdir, elf, image)
    return image
