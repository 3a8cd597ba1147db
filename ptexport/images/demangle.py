"""Symbol names as perf 6.1 shows them: demangled (``demangle_sym`` in util/symbol-elf.c).

perf demangles the name of every symbol it reads from a user-space ELF (its ``.symtab`` or
``.dynsym``, and the name under each PLT entry before it appends ``@plt``); kernel symbols keep
theirs (``symbol_conf.demangle_kernel`` is off by default).  For each name, the first that answers:

1. binutils' ``bfd_demangle(NULL, name, DMGL_NO_OPTS)``: C++ (``_Z``), Rust (legacy ``_ZN...17h<hash>E``
   without the hash, and v0 ``_R``), D and the others libiberty's automatic style knows, without
   parameter lists or return types (``_ZN3foo3barEl`` -> ``foo::bar``, ``_ZN3foo3bazIiEEvT_`` ->
   ``foo::baz<int>``), a suffix from ``@`` kept as it is;
2. OCaml: ``caml`` and an upper-case letter, ``__`` read as ``.`` and ``$xx`` as the character of that
   hex code (``camlStdlib__array__map_154`` -> ``Stdlib.array.map_154``);
3. Java (``java_demangle_sym`` with ``JAVA_DEMANGLE_NORET``): a signature up to its last ``)``, the
   return type left out (``Ljava/lang/Object;bar(I)V`` -> ``java.lang.Object.bar(int)``).

perf is linked with binutils' demangler; here it is the system's libbfd, loaded with ctypes (binutils'
``libbfd-*.so``, which a machine with perf or a compiler has).  Without one, names that look like C++
or Rust stay mangled and one line on stderr says so (:func:`missing_demangler`).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from typing import Any

_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")

_bfd: Any = None
_loaded = False
_warned = False


def _load() -> Any:
    """binutils' bfd_demangle and libc's free, or None."""
    global _bfd, _loaded
    if _loaded:
        return _bfd
    _loaded = True
    paths = [os.environ["PTEXPORT_LIBBFD"]] if os.environ.get("PTEXPORT_LIBBFD") else []
    for d in _LIB_DIRS:
        paths += sorted(glob.glob(os.path.join(d, "libbfd*.so*")), reverse=True)
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            fn = lib.bfd_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free.restype = None
        _bfd = (fn, libc.free)
        break
    return _bfd


def have_demangler() -> bool:
    """Whether binutils' demangler (libbfd) could be loaded here."""
    return _load() is not None


def _bfd_demangle(name: str) -> str | None:
    got = _load()
    if got is None:
        return None
    fn, free = got
    try:
        raw = name.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:  # pragma: no cover - names come from bytes
        return None
    if b"\0" in raw:
        return None
    p = fn(None, raw, 0)  # DMGL_NO_OPTS
    if not p:
        return None
    try:
        return ctypes.string_at(p).decode("utf-8", errors="replace")
    finally:
        free(p)


def _hexdigit(c: str) -> int:
    return int(c, 16)


def ocaml_demangle(name: str) -> str | None:
    """perf's ocaml_demangle_sym."""
    if not (name.startswith("caml") and len(name) > 4 and "A" <= name[4] <= "Z"):
        return None
    out = []
    i, n = 4, len(name)
    hexd = "0123456789abcdefABCDEF"
    while i < n:
        if name[i] == "_" and i + 1 < n and name[i + 1] == "_":
            out.append(".")
            i += 2
        elif name[i] == "$" and i + 2 < n and name[i + 1] in hexd and name[i + 2] in hexd:
            out.append(chr((_hexdigit(name[i + 1]) << 4) | _hexdigit(name[i + 2])))
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


_BASE_TYPES = {"B": "byte", "C": "char", "D": "double", "F": "float", "I": "int", "J": "long", "S": "short",
               "Z": "boolean"}
_PREFIX, _CLASS, _FUNC, _TYPE, _CTYPE = range(5)


def java_demangle(name: str) -> str | None:
    """perf's java_demangle_sym(name, JAVA_DEMANGLE_NORET): the signature up to the return type, in
    perf's buffer of three times the name's length (what does not fit is cut off)."""
    end = name.rfind(")")
    if end < 0:
        return None
    cap = len(name.encode("utf-8", errors="surrogateescape")) * 3 + 1 - 1  # characters the buffer holds
    out: list[str] = []
    size = 0

    def put(s: str) -> None:
        nonlocal size
        room = cap - size
        if room > 0:
            out.append(s[:room])
            size += min(len(s), room)

    mode = _PREFIX
    narg = 0
    array = 0
    for i in range(end + 1):
        if size == cap:
            break
        c = name[i]
        if c == "L":
            if mode in (_PREFIX, _TYPE):
                if mode == _TYPE:
                    if narg:
                        put(", ")
                    narg += 1
                mode = _CLASS if mode == _PREFIX else _CTYPE
            else:
                put(c)
        elif c in _BASE_TYPES:
            if mode == _TYPE:
                if narg:
                    put(", ")
                put(_BASE_TYPES[c])
                while array > 0:
                    put("[]")
                    array -= 1
                array = 0
                narg += 1
            else:
                put(c)
        elif c == "V":
            if mode == _TYPE:
                put("void")
                while array > 0:
                    put("[]")
                    array -= 1
                array = 0
            else:
                put(c)
        elif c == "[":
            if mode != _TYPE:
                return None
            array += 1
        elif c == "(":
            if mode != _FUNC:
                return None
            put(c)
            mode = _TYPE
        elif c == ")":
            if mode != _TYPE:
                return None
            put(c)
            narg = 0
        elif c == ";":
            if mode not in (_CLASS, _CTYPE):
                return None
            nxt = name[i + 1] if i + 1 < len(name) else ""
            if nxt.isascii() and nxt.isalpha() and mode == _CLASS:
                put(".")
            mode = _FUNC if mode == _CLASS else _TYPE
        elif c == "/":
            if mode not in (_CLASS, _CTYPE):
                return None
            put(".")
        else:
            put(c)
    return "".join(out)


def demangle(name: str) -> str:
    """``name`` as perf shows a user-space ELF symbol's (itself where nothing demangles it)."""
    got = _bfd_demangle(name)
    if got is None:
        got = ocaml_demangle(name)
        if got is None:
            got = java_demangle(name)
    if got is None:
        if _bfd is None and name.startswith(("_Z", "_R")):
            missing_demangler()
        return name
    return got


def missing_demangler() -> None:
    """Once: C++ and Rust names stay mangled (no libbfd here)."""
    global _warned
    if not _warned:
        _warned = True
        print("ptexport: warning: binutils' libbfd was not found: C++ and Rust symbol names stay mangled "
              "(perf shows them demangled; install binutils, or set PTEXPORT_LIBBFD to its libbfd)",
              file=sys.stderr)
