"""Object lookup like perf: symfs, build-id cache, recorded path; kernel from kcore/vmlinux."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ptexport.errors import ImageError
from ptexport.images.lookup import ObjectFinder, elf_build_id, read_kallsyms

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    d = tmp_path_factory.mktemp("obj")
    src = d / "t.c"
    src.write_text("int main(void) { return 7; }\n")
    out = d / "t"
    subprocess.run(["gcc", "-O0", "-Wl,--build-id", "-o", str(out), str(src)], check=True)
    return out


def test_build_id_read(exe):
    bid = elf_build_id(str(exe))
    assert bid and len(bid) == 40 and int(bid, 16) >= 0
    assert elf_build_id(__file__) is None


def test_build_id_cache_and_symfs(exe, tmp_path):
    bid = elf_build_id(str(exe))
    recorded = "/usr/bin/traced-tool"          # not on this machine
    # perf's cache layout: ~/.debug/<path>/<bid>/elf with a .build-id link to it.
    entry = tmp_path / "debug" / recorded.strip("/") / bid
    entry.mkdir(parents=True)
    shutil.copy(exe, entry / "elf")
    link = tmp_path / "debug" / ".build-id" / bid[:2]
    link.mkdir(parents=True)
    os.symlink(entry, link / bid[2:])
    f = ObjectFinder(buildid_dir=str(tmp_path / "debug"))
    got = f.find(recorded, bid)
    assert got is not None and elf_build_id(got) == bid
    # A build-id that matches nothing finds nothing.
    assert ObjectFinder(buildid_dir=str(tmp_path / "debug")).find(recorded, "00" * 20) is None
    # symfs wins and is checked against the build-id.
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy(exe, root / "usr/bin/traced-tool")
    f2 = ObjectFinder(symfs=str(root), buildid_dir=str(tmp_path / "none"))
    assert f2.find(recorded, bid) == str(root / "usr/bin/traced-tool")
    assert f2.find(recorded, "11" * 20) is None


def test_kernel_from_kcore_and_vmlinux(exe, tmp_path):
    from elftools.elf.elffile import ELFFile

    with open(exe, "rb") as fh:
        elf = ELFFile(fh)
        seg = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD" and s["p_filesz"])
        fh.seek(seg["p_offset"])
        head = fh.read(8)
        stext = elf.get_section_by_name(".symtab").get_symbol_by_name("main")[0]["st_value"]
    kdir = tmp_path / "kcore_dir"
    kdir.mkdir()
    shutil.copy(exe, kdir / "kcore")
    img = ObjectFinder(kcore_dir=str(kdir)).kernel_image()
    assert img.read(seg["p_vaddr"], 8) == head
    # vmlinux with a kallsyms that puts _stext (here: main's address) 0x1000000 higher.
    ks = tmp_path / "kallsyms"
    ks.write_text(f"{stext + 0x1000000:016x} T _stext\n")
    vm = tmp_path / "vmlinux"
    data = bytearray(exe.read_bytes())
    vm.write_bytes(bytes(data))
    # rename main -> _stext is not needed: the finder reads _stext from vmlinux's symtab,
    # so give the vmlinux a symbol of that name via objcopy when available.
    if shutil.which("objcopy"):
        subprocess.run(["objcopy", "--redefine-sym", "main=_stext", str(vm)], check=True)
        img2 = ObjectFinder(vmlinux=str(vm), kallsyms=str(ks)).kernel_image()
        assert img2.read(seg["p_vaddr"] + 0x1000000, 8) == head
    with pytest.raises(ImageError):
        ObjectFinder().kernel_image()


def test_read_kallsyms(tmp_path):
    p = tmp_path / "kallsyms"
    p.write_text("ffffffff81000000 T _stext\nffffffff81000010 t helper [mod]\n")
    assert read_kallsyms(str(p))[0] == (0xFFFFFFFF81000000, "T", "_stext")
    p.write_text("zz T bad\n")
    with pytest.raises(ImageError):
        read_kallsyms(str(p))
