"""An ELF's symbols read by numpy (images/symbols._table_symbols_array, _plt_names_array) against the
pyelftools walk (_table_symbols, the reference), on this machine's own libraries and programs; and
perf's rule for GNU IFUNC symbols (kept, as functions: pyelftools names their type STT_LOOS)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from ptexport.images import symbols as S
from ptxtest import REPO


def _elfs(limit: int) -> list[str]:
    found = []
    for pattern in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/*.so*", "/usr/bin/*"):
        for p in sorted(glob.glob(pattern)):
            if os.path.isfile(p) and not os.path.islink(p) and len(found) < limit:
                with open(p, "rb") as f:
                    if f.read(4) == b"\x7fELF":
                        found.append(p)
    return found


@pytest.mark.parametrize("chunk", range(4))
def test_the_systems_objects_give_the_references_symbols(chunk):
    paths = _elfs(160)[chunk::4]
    if not paths:
        pytest.skip("no ELF objects here")
    tables = 0
    for p in paths:
        with open(p, "rb") as f:
            elf = ELFFile(f)
            sections = list(elf.iter_sections())
            for name in (".symtab", ".dynsym"):
                table = elf.get_section_by_name(name)
                if table is None:
                    continue
                got = S._table_symbols_array(elf, table, sections)
                assert got is not None and got == S._table_symbols(table, sections), (p, name)
                tables += 1
            rel = elf.get_section_by_name(".rela.plt") or elf.get_section_by_name(".rel.plt")
            dyn = elf.get_section_by_name(".dynsym")
            if rel is not None and dyn is not None:
                nsyms = dyn.num_symbols()
                want = [dyn.get_symbol(r["r_info_sym"]).name if r["r_info_sym"] < nsyms else ""
                        for r in rel.iter_relocations()]
                assert S._plt_names_array(elf, rel, dyn, sections[dyn["sh_link"]]) == want, p
    assert tables > 0


def test_ifunc_symbols_are_functions():
    """perf's elf_sym__is_function takes STT_GNU_IFUNC (10); the sample program bigcode has one
    (``ifunc_alias``, global, on a local function's start: perf keeps the global one of the two)."""
    table = S.load_elf_symbols(str(REPO / "sample_data" / "src" / "bigcode"))
    names = {s.name: s for s in table.symbols}
    assert "ifunc_alias" in names and "f1005" not in names
    assert names["ifunc_alias"].end - names["ifunc_alias"].start == 16


@pytest.mark.skipif(not shutil.which("as") or not shutil.which("ld"), reason="needs binutils (as, ld)")
def test_an_ifunc_of_every_table_kind(tmp_path):
    src = tmp_path / "t.s"
    src.write_text(".text\n.globl _start\n_start: ret\n.globl f\n.type f, @gnu_indirect_function\nf: nop\nret\n"
                   ".size f, 2\n.type g, @function\ng: ret\n.size g, 1\n")
    subprocess.run(["as", "-o", str(tmp_path / "t.o"), str(src)], check=True)
    subprocess.run(["ld", "-o", str(tmp_path / "t"), str(tmp_path / "t.o")], check=True)
    names = [s.name for s in S.load_elf_symbols(str(tmp_path / "t")).symbols]
    assert "f" in names and "g" in names
    with open(tmp_path / "t", "rb") as f:
        elf = ELFFile(f)
        sections = list(elf.iter_sections())
        table = elf.get_section_by_name(".symtab")
        assert S._table_symbols_array(elf, table, sections) == S._table_symbols(table, sections)


def test_an_unusual_table_is_read_the_slow_way(tmp_path):
    """A big-endian or odd-sized table: None from the array reader (the pyelftools walk then)."""
    path = Path(REPO / "sample_data" / "src" / "calls")
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sections = list(elf.iter_sections())
        table = elf.get_section_by_name(".symtab")

        class Odd:
            def __getitem__(self, k):
                return 17 if k == "sh_entsize" else table[k]

            def data(self):
                return table.data()

        assert S._table_symbols_array(elf, Odd(), sections) is None
        assert S._table_symbols_array(elf, table, sections) == S._table_symbols(table, sections)
