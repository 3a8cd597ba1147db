"""Code images: ELF files, kcore/kallsyms, raw binaries, symbols, build-id cache.

    from ptexport.images.image import Image
    from ptexport.images.section import SectionCache
    from ptexport.images.lookup import ObjectFinder

    cache = SectionCache()                  # files mapped once, shared by all images
    img = Image("pid-42", cache)            # one address space
    img.add_file("a.out", 0x400000)         # ELF by PT_LOAD segments at base (ptxed --elf), else raw
    img.add_raw("code.bin", 0x1000, offset=0, size=None)   # raw bytes (ptxed --raw)
    img.read(0x401000, 15)                  # bytes, crossing adjacent sections; b"" if unmapped

    finder = ObjectFinder(symfs=None, buildid_dir="~/.debug", kcore_dir=None, vmlinux=None)
    finder.find("/usr/lib/libc.so.6", build_id_hex)   # symfs, build-id cache, recorded path
    finder.kernel_image()                   # kcore copy, or vmlinux moved by kallsyms' _stext

``symbols`` (function symbols in perf's file-offset space) serves the export.
"""
