"""Code images: ELF files, kcore/kallsyms, raw binaries, symbols, build-id cache."""
