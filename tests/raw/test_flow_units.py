"""Unit tests of the flow building blocks: classifier, return stack, caches, images, queue."""

from __future__ import annotations

import pytest

from ptexport.errors import ImageError
from ptexport.raw import insn_class as ic
from ptexport.raw.events import EVB_FUP, EVB_TIP, Event, EventQueue
from ptexport.raw.retstack import CAPACITY, RetStack, RetStackEmpty
from ptexport.images.image import Image
from ptexport.images.section import SectionCache
from ptxtest import corpus_build, corpus_image
from rawcolumns import flow_batches  # tests/raw/rawcolumns.py


@pytest.mark.parametrize(
    "hexbytes,mode,expect",
    [
        ("90", 64, (1, ic.OTHER, ic.NONE, None)),
        ("e8 10 00 00 00", 64, (5, ic.CALL, ic.NONE, 0x10)),
        ("e8 fb ff ff ff", 64, (5, ic.CALL, ic.NONE, -5)),
        ("ff d0", 64, (2, ic.CALL, ic.NONE, None)),          # call *%rax
        ("ff 18", 64, (2, ic.FAR_CALL, ic.NONE, None)),      # lcall *(%rax)
        ("9a 00 00 00 00 08 00", 32, (7, ic.FAR_CALL, ic.NONE, None)),
        ("c3", 64, (1, ic.RETURN, ic.NONE, None)),
        ("c2 08 00", 64, (3, ic.RETURN, ic.NONE, None)),
        ("cb", 64, (1, ic.FAR_RETURN, ic.NONE, None)),
        ("48 cf", 64, (2, ic.FAR_RETURN, ic.IRET, None)),    # iretq
        ("eb fe", 64, (2, ic.JUMP, ic.NONE, -2)),
        ("e9 00 01 00 00", 64, (5, ic.JUMP, ic.NONE, 0x100)),
        ("ff e0", 64, (2, ic.JUMP, ic.NONE, None)),          # jmp *%rax
        ("ff 28", 64, (2, ic.FAR_JUMP, ic.NONE, None)),      # ljmp *(%rax)
        ("74 05", 64, (2, ic.COND_JUMP, ic.NONE, 5)),
        ("0f 85 00 02 00 00", 64, (6, ic.COND_JUMP, ic.NONE, 0x200)),
        ("e2 fe", 64, (2, ic.COND_JUMP, ic.NONE, -2)),       # loop
        ("e3 00", 64, (2, ic.COND_JUMP, ic.NONE, 0)),        # jrcxz
        ("0f 05", 64, (2, ic.FAR_CALL, ic.SYSCALL, None)),
        ("48 0f 07", 64, (3, ic.FAR_RETURN, ic.SYSRET, None)),
        ("0f 34", 32, (2, ic.FAR_CALL, ic.SYSENTER, None)),
        ("0f 35", 32, (2, ic.FAR_RETURN, ic.SYSEXIT, None)),
        ("cd 80", 64, (2, ic.FAR_CALL, ic.INT, None)),
        ("cc", 64, (1, ic.FAR_CALL, ic.INT3, None)),
        ("0f 22 d8", 64, (3, ic.OTHER, ic.MOV_CR3, None)),   # mov %rax,%cr3
        ("0f 22 d0", 64, (3, ic.OTHER, ic.NONE, None)),      # mov %rax,%cr2
        ("0f 01 c2", 64, (3, ic.FAR_RETURN, ic.VMLAUNCH, None)),
        ("0f 01 c3", 64, (3, ic.FAR_RETURN, ic.VMRESUME, None)),
        ("0f c7 30", 64, (3, ic.OTHER, ic.VMPTRLD, None)),
        ("f3 0f ae e0", 64, (4, ic.PTWRITE, ic.NONE, None)),
        ("f3 48 0f ae 20", 64, (5, ic.PTWRITE, ic.NONE, None)),
        ("f3 0f 01 ca", 64, (4, ic.FAR_RETURN, ic.ERETU, None)),
        ("f2 0f 01 ca", 64, (4, ic.FAR_RETURN, ic.ERETS, None)),
        ("d5 00 a1 0d 10 00 00 00 00 00 00", 64, (11, ic.JUMP, ic.JMPABS, None)),
        ("48 c7 c0 00 00 00 00", 64, (7, ic.OTHER, ic.NONE, None)),
        ("48", 32, (1, ic.OTHER, ic.NONE, None)),            # dec %eax in 32-bit mode
    ],
)
def test_classify(hexbytes, mode, expect):
    code = bytes.fromhex(hexbytes.replace(" ", ""))
    assert ic.decode(code + b"\x90" * 4, 0x1000, mode) == expect


def test_classify_bad_bytes():
    assert ic.decode(b"\x06", 0, 64) is None        # push %es: invalid in 64-bit mode
    assert ic.decode(b"\xe8\x00", 0, 64) is None     # truncated call


def test_binding_predicates():
    assert ic.binds_to_pip(ic.OTHER, ic.MOV_CR3)
    assert ic.binds_to_pip(ic.FAR_JUMP, ic.NONE)
    assert not ic.binds_to_pip(ic.JUMP, ic.NONE)
    assert ic.binds_to_vmcs(ic.OTHER, ic.VMPTRLD)
    assert ic.changes_cpl(ic.SYSCALL) and not ic.changes_cpl(ic.NONE)
    assert ic.is_iret(ic.SYSRET) and ic.is_vmentry(ic.VMRESUME)


def test_insn_cache_decodes_each_ip_once():
    image = Image()
    image.add_bytes(bytes.fromhex("90 90 c3"), 0x4000)
    reads = []

    def read(ip, n):
        reads.append(ip)
        return image.read(ip, n)

    cache = ic.InsnCache()
    for _ in range(3):
        assert cache.lookup("as", 64, 0x4001, read) == (1, ic.OTHER, ic.NONE, None)
    assert cache.lookup("as", 64, 0x9000, read) == ic.InsnCache.NOMAP
    assert reads.count(0x4001) == 1
    # Another address space or mode is another entry.
    cache.lookup("other", 64, 0x4001, read)
    assert reads.count(0x4001) == 2


def test_retstack_lifo_and_capacity():
    rs = RetStack()
    with pytest.raises(RetStackEmpty):
        rs.pop()
    for i in range(CAPACITY + 10):
        rs.push(i)
    assert len(rs) == CAPACITY
    assert rs.pop() == CAPACITY + 9
    # the oldest entries were dropped
    while len(rs) > 1:
        rs.pop()
    assert rs.pop() == 10
    assert rs.is_empty()


def test_event_queue_bindings():
    q = EventQueue()
    a = q.enqueue(EVB_TIP, Event("exec_mode"))
    b = q.enqueue(EVB_FUP, Event("tsx"))
    assert q.pending(EVB_FUP) and q.find(EVB_TIP, "exec_mode") is a
    assert q.dequeue(EVB_FUP) is b           # from the middle of the queue
    assert q.dequeue(EVB_FUP) is None
    assert q.dequeue(EVB_TIP) is a
    for _ in range(6):
        assert q.enqueue(EVB_TIP) is not None
    assert q.enqueue(EVB_TIP) is None        # full


def test_image_overlap_and_cross_section_reads(tmp_path):
    f = tmp_path / "code.bin"
    f.write_bytes(bytes(range(16)))
    cache = SectionCache()
    img = Image(cache=cache)
    img.add_raw(str(f), 0x1000)
    img.add_raw(str(f), 0x1004, offset=8, size=4)   # hides 0x1004..0x1007
    assert img.read(0x1000, 10) == bytes([0, 1, 2, 3, 8, 9, 10, 11, 8, 9])
    assert img.read(0x2000, 4) == b""
    assert img.read(0x100f, 4) == bytes([15])
    # The cache shares one section per (file, offset, size).
    img2 = Image(cache=cache)
    img2.add_raw(str(f), 0x5000)
    assert len(cache) == 2


def test_image_elf_segments_at_base(tmp_path):
    import shutil
    import subprocess

    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    src = tmp_path / "t.c"
    src.write_text("int main(void) { return 42; }\n")
    exe = tmp_path / "t"
    subprocess.run(["gcc", "-O0", "-o", str(exe), str(src)], check=True)
    from elftools.elf.elffile import ELFFile

    with open(exe, "rb") as fh:
        elf = ELFFile(fh)
        loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        low = min(s["p_vaddr"] for s in loads)
        first = min(loads, key=lambda s: s["p_vaddr"])
        fh.seek(first["p_offset"])
        head = fh.read(16)
    img = Image()
    img.add_file(str(exe), 0x400000)
    assert img.read(0x400000 + (first["p_vaddr"] - low), 16) == head


def test_image_errors(tmp_path):
    img = Image()
    with pytest.raises(ImageError):
        img.add_file(str(tmp_path / "missing"), 0)
    bad = tmp_path / "bad.elf"
    bad.write_bytes(b"\x7fELF" + b"\x00" * 8)
    with pytest.raises(ImageError):
        img.add_file(str(bad), 0)


def test_flow_batches_equal_ptxed_lines(tmp_path):
    """The columnar form carries the same instructions, events and errors as the text."""
    import numpy as np

    from ptexport.raw.insn import InsnDecoder
    from ptexport.raw.ptxed import PtxedOptions, format_event, ptxed_lines
    from ptexport.raw.query import DecoderConfig

    # Corpus cases: a TNT loop, errors (no-map) with resync, a transaction (speculative rows).
    for name in ("loop-tnt-short", "nomap-tip-resync", "tsx-abort"):
        built = corpus_build(name, tmp_path / name)
        trace = built.pt_path.read_bytes()

        def fresh():
            return InsnDecoder(trace, corpus_image(built), DecoderConfig())

        opts = PtxedOptions(resync_on_error=True)
        want = list(ptxed_lines(fresh(), opts))
        batches = list(flow_batches(fresh(), batch_rows=4))
        assert all(len(b) <= 4 + 64 for b in batches)
        got = []
        for b in batches:
            marks = sorted([(r, 0, i) for i, (r, _) in enumerate(b.events)]
                           + [(e[0], 0, 1000 + i) for i, e in enumerate(b.errors)])
            row = 0
            for r, _, idx in marks:
                while row < r:
                    got.append(("? " if b.speculative[row] else "") + f"{int(b.ip[row]):016x}")
                    row += 1
                if idx < 1000:
                    ev = b.events[idx][1]
                    if not ev.status_update:
                        got.append(format_event(ev, opts))
                else:
                    _, off, ip, code, kind = b.errors[idx - 1000]
                    from ptexport.raw.status import ERRSTR
                    got.append(f"[{off:x}, {ip:x}: {kind}: {ERRSTR[code]}]")
            while row < len(b):
                got.append(("? " if b.speculative[row] else "") + f"{int(b.ip[row]):016x}")
                row += 1
            assert b.ip.dtype == np.uint64 and b.iclass.dtype == np.uint8
            assert len(b.size) == len(b.ip) and (b.size[: len(b)] > 0).all()
        assert got == want, name
        assert want == built.expected, name


def test_pip_selects_the_address_space(tmp_path):
    """PIP (and VMCS) events let the caller switch images: host vs guest code."""
    from ptexport.raw.insn import InsnDecoder
    from ptexport.raw.ptxed import PtxedOptions, ptxed_lines
    from ptexport.raw.query import DecoderConfig

    built = corpus_build("pip-far-syscall", tmp_path)   # mov cr3 (PIP), then a far transfer
    host = corpus_image(built, "host")
    other = Image("cr3 cdcdc0")                 # nothing mapped in the other address space
    seen = []

    def select(cr3, nr, vmcs):
        seen.append((cr3, nr, vmcs))
        return other if cr3 == 0xCDCDC0 else None

    trace = built.pt_path.read_bytes()
    plain = list(ptxed_lines(InsnDecoder(trace, host, DecoderConfig()), PtxedOptions()))
    assert plain == built.expected and plain[-1] == "[disabled]"
    dec = InsnDecoder(trace, host, DecoderConfig(), select_image=select)
    lines = list(ptxed_lines(dec, PtxedOptions()))
    assert seen == [(0xCDCDC0, False, None)]
    assert lines[:3] == plain[:3]
    assert lines[2] == "[paging, cr3: 0000000000cdcdc0]"
    assert "error: no memory mapped at this address" in lines[3]


def test_guest_code_keeps_its_image_across_host_switches(tmp_path):
    """After a PIP with NR=1 the guest image stays live even if the host image changes."""
    from ptexport.raw.insn import InsnDecoder
    from ptexport.raw.ptxed import PtxedOptions, ptxed_lines
    from ptexport.raw.query import DecoderConfig

    built = corpus_build("pip-far-syscall", tmp_path)
    trace = bytearray(built.pt_path.read_bytes())
    pip = trace.index(b"\x02\x43")
    assert pip > trace.index(b"\x02\x23")     # the PIP after the PSB+
    trace[pip + 2] |= 1                         # PIP.NR: the far transfer enters the guest
    host = corpus_image(built, "host")
    guest = corpus_image(built, "guest")

    dec = InsnDecoder(bytes(trace), host, DecoderConfig(),
                      select_image=lambda cr3, nr, vmcs: guest if nr else None)
    lines = list(ptxed_lines(dec, PtxedOptions()))
    assert "[paging, cr3: 0000000000cdcdc0, nr]" in lines
    assert [x for x in lines if "paging" not in x] == [x for x in built.expected if "paging" not in x]
    assert lines[-1] == "[disabled]"
    assert dec.image is guest and dec.host_image is host
    dec.set_image(Image("another host"))        # a host context switch
    assert dec.image is guest
