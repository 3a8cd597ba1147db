"""Symbol names as perf shows them (images/demangle.py): binutils' demangler for C++ and Rust, perf's
own OCaml and Java rules; a PLT entry's name demangled before "@plt", in perf's 1024-byte buffer."""

from __future__ import annotations

import pytest

from ptexport.images import demangle as D

needs_bfd = pytest.mark.skipif(not D.have_demangler(), reason="no binutils libbfd here")


@needs_bfd
@pytest.mark.parametrize("mangled,shown", [
    ("_ZN3foo3barEl", "foo::bar"),                              # no parameter list
    ("_ZN3foo3bazIiEEvT_", "foo::baz<int>"),                    # no return type
    ("_ZNK3Foo3getEv", "Foo::get"),                              # no const
    ("_ZZ4mainE5local", "main::local"),
    ("_ZTV3Foo", "vtable for Foo"),
    ("_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"),  # Rust legacy: the hash dropped
    ("_RNvCs1234_4test3foo", "test::foo"),                       # Rust v0
    ("_ZNSt6vectorIiSaIiEE9push_backERKi@plt", "std::vector<int, std::allocator<int> >::push_back@plt"),
    ("main", "main"),
    ("my__func", "my__func"),
])
def test_binutils_names(mangled, shown):
    assert D.demangle(mangled) == shown


@pytest.mark.parametrize("mangled,shown", [
    ("camlStdlib__array__map_154", "Stdlib.array.map_154"),
    ("camlStdlib__bytes__$2b$2b_2205", "Stdlib.bytes.++_2205"),
    ("camlStdlib__anon_fn$5bstdlib$2eml$3a334$2c0$2d$2d54$5d_1453", "Stdlib.anon_fn[stdlib.ml:334,0--54]_1453"),
    ("camllower", None),            # "caml" and an upper-case letter only
    ("caml", None),
])
def test_ocaml_names(mangled, shown):
    assert D.ocaml_demangle(mangled) == shown


@pytest.mark.parametrize("mangled,shown", [
    ("Ljava/lang/Object;bar(I)V", "java.lang.Object.bar(int)"),
    ("Ljava/lang/String;indexOf(Ljava/lang/String;I)I", "java.lang.String.indexOf(java.lang.String, int)"),
    ("La/B;c([[IZ)V", "a.B.c(int[][], boolean)"),
    ("La/B;c(J)[Ljava/lang/Object;", "a.B.c(long)"),            # the return type left out
    ("no_parens", None),
    ("foo(I)V", None),                                           # no class: '(' outside a function name
    ("La/B;c(Q)V", "a.B.c(Q)"),
])
def test_java_names(mangled, shown):
    assert D.java_demangle(mangled) == shown


def test_java_names_end_where_perfs_buffer_does():
    name = "La;b(" + "Z" * 20 + ")V"  # "boolean, " per Z: longer than three times the name
    got = D.java_demangle(name)
    assert got is not None and len(got) == 3 * len(name) and got.startswith("a.b(boolean, boolean")


def test_without_libbfd_names_stay_and_one_line_says_so(monkeypatch, capsys):
    monkeypatch.setattr(D, "_loaded", True)
    monkeypatch.setattr(D, "_bfd", None)
    monkeypatch.setattr(D, "_warned", False)
    assert D.demangle("_ZN3foo3barEl") == "_ZN3foo3barEl"
    assert D.demangle("_ZN3foo3bazEv") == "_ZN3foo3bazEv"
    assert D.demangle("camlFoo__bar") == "Foo.bar"
    assert capsys.readouterr().err.count("libbfd was not found") == 1
