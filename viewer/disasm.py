"""Disassembly of a branch's target block: from the branch target to the next branch on that CPU.

The code comes from the object file (its path, perf's build-id cache
``~/.debug/.build-id/xx/rest`` or ``~/.debug/<path>/<build-id>/elf``) or, for
the kernel, from ``/proc/kcore``; capstone decodes it.  No Qt here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .db import Session

MAX_BLOCK = 16384
U64 = (1 << 64) - 1


@dataclass
class Block:
    sample_id: int
    cpu: int
    start_ip: int            # runtime address of the branch target
    end_ip: int              # runtime address of the next branch (included)
    file_addr: int | None    # address of start_ip in the object file (ELF virtual address)
    short_name: str
    long_name: str
    build_id: str
    is_kernel: bool
    root_dir: str = ""       # a guest machine's root directory (its files seen from the host)


class NoBlock(Exception):
    """Why a branch has no block to show (not an error: a message for the pane)."""


def branch_block(s: Session, sample_id: int) -> Block:
    """Where the block that starts at the branch target of ``sample_id`` lies."""
    rows = s.rows(
        "SELECT samples.cpu, samples.to_ip, samples.to_dso_id, samples.to_symbol_id, samples.to_sym_offset, "
        "symbols.sym_start, dsos.short_name, dsos.long_name, dsos.build_id, samples.evsel_id, "
        "(SELECT root_dir FROM machines WHERE machines.id = dsos.machine_id AND machines.pid <> -1) "
        "FROM samples LEFT JOIN dsos ON dsos.id = samples.to_dso_id "
        "LEFT JOIN symbols ON symbols.id = samples.to_symbol_id WHERE samples.id = :i", {"i": sample_id})
    if not rows:
        raise NoBlock(f"no sample {sample_id}")
    cpu, to_ip, dso, sym, off, sym_start, short, long, build_id, evsel, root_dir = rows[0]
    if not dso:
        raise NoBlock("the branch target is in an unknown object")
    nxt = s.rows("SELECT ip, dso_id FROM samples WHERE id > :i AND cpu = :c AND evsel_id = :e ORDER BY id LIMIT 1",
                 {"i": sample_id, "c": cpu, "e": evsel})
    if not nxt:
        raise NoBlock("no later branch on this CPU: the block end is unknown")
    end_ip, end_dso = nxt[0]
    start = int(to_ip) & U64
    end = int(end_ip) & U64
    if end_dso != dso:
        raise NoBlock("the next branch is in another object: cannot disassemble across objects")
    if end < start or end - start > MAX_BLOCK:
        raise NoBlock(f"block {start:#x}..{end:#x} is not a plausible straight-line block")
    is_kernel = (short or "").startswith("[kernel") or (long or "").startswith("[kernel")
    file_addr = None
    if sym and sym_start is not None:
        file_addr = ((int(sym_start) & U64) + int(off or 0)) & U64
    elif is_kernel:
        file_addr = start
    return Block(sample_id, int(cpu), start, end, file_addr, short or "", long or "", build_id or "", is_kernel,
                 root_dir or "")


def candidate_files(block: Block, roots: Sequence[str | os.PathLike[str]] = ()) -> list[Path]:
    """Object files that may hold the block's code, best first."""
    home = Path(os.environ.get("PERF_BUILDID_DIR", Path.home() / ".debug"))
    out: list[Path] = []
    bid = block.build_id.lower()
    if bid and len(bid) > 2:
        out += [home / ".build-id" / bid[:2] / bid[2:] / "elf", home / ".build-id" / bid[:2] / bid[2:]]
        if block.long_name.startswith("/"):
            out.append(home / block.long_name.lstrip("/") / bid / "elf")
    if block.is_kernel:
        if not block.root_dir:          # the host's kernel only: a guest's is not in our /proc/kcore
            out += [Path("/proc/kcore")]
    elif block.long_name.startswith("/"):
        if block.root_dir:
            out.append(Path(block.root_dir) / block.long_name.lstrip("/"))
        for r in roots:
            out.append(Path(r) / block.long_name.lstrip("/"))
        if not block.root_dir:
            out.append(Path(block.long_name))
    return out


def read_code(path: Path, vaddr: int, size: int) -> bytes:
    """``size`` bytes at ELF virtual address ``vaddr`` of ``path`` (through its PT_LOAD segments)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with path.open("rb") as f:
            elf = ELFFile(f)
            for seg in elf.iter_segments():
                if seg["p_type"] != "PT_LOAD":
                    continue
                lo = seg["p_vaddr"]
                if lo <= vaddr < lo + seg["p_filesz"]:
                    n = min(size, lo + seg["p_filesz"] - vaddr)
                    f.seek(seg["p_offset"] + vaddr - lo)
                    return f.read(n)
    except (OSError, ELFError) as e:
        raise NoBlock(f"{path}: {e}") from e
    raise NoBlock(f"{path}: address {vaddr:#x} is in no loadable segment")


def elf_is_64(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(5)
    return len(head) < 5 or head[4] != 1


def disassemble(code: bytes, ip: int, end_ip: int | None = None, is64: bool = True) -> list[str]:
    """Lines 'address  bytes  instruction' from ``ip`` up to and including the one at ``end_ip``."""
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if is64 else capstone.CS_MODE_32)
    lines = []
    for insn in md.disasm(code, ip):
        raw = " ".join(f"{b:02x}" for b in insn.bytes)
        lines.append(f"{insn.address:16x}  {raw:<45} {insn.mnemonic} {insn.op_str}".rstrip())
        if end_ip is not None and insn.address >= end_ip:
            break
    return lines


def disassemble_branch(s: Session, sample_id: int, roots: Sequence[str | os.PathLike[str]] = ()) -> list[str]:
    """The target block of a branch sample as text lines (a reason line when it cannot be shown)."""
    try:
        block = branch_block(s, sample_id)
    except NoBlock as e:
        return [f"No disassembly: {e}"]
    size = block.end_ip - block.start_ip + 16
    tried = []
    for path in candidate_files(block, roots):
        if not path.is_file() or not os.access(path, os.R_OK):
            tried.append(str(path))
            continue
        addr = block.start_ip if path.name == "kcore" else block.file_addr
        if addr is None:
            return [f"No disassembly: no symbol for {block.start_ip:#x} in {block.short_name}"]
        try:
            code = read_code(path, addr, size)
            lines = disassemble(code, block.start_ip, block.end_ip, elf_is_64(path))
        except NoBlock as e:
            return [f"No disassembly: {e}"]
        head = f"{block.short_name}: {block.start_ip:#x}..{block.end_ip:#x} from {path}"
        return [head] + lines
    return [f"No disassembly: object file for {block.long_name or block.short_name} "
            f"(build id {block.build_id or 'none'}) not found; tried: {', '.join(tried) or 'nothing'}"]
