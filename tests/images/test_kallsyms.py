"""kallsyms as columns (images/kallsyms.ArrayKallsyms) against perf's load a line at a time
(parse_kallsyms_lines, the reference): the same kernel and module tables, answers, references and
raw symbols, on random files in the kernel's shape (duplicate starts of every binding, modules
between kernel symbols, ``$`` locals, types perf skips) and on this machine's own kallsyms; files
in another shape are left to the line parser."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ptexport.errors import ImageError
from ptexport.images import kallsyms as K


def _rows(syms) -> list[tuple]:
    return [(s.start, s.end, s.name, s.binding) for s in syms]


def _ksyms(syms) -> list[tuple]:
    return [(s.start, s.end, s.name, s.binding, s.module) for s in syms]


def _same(text: str, probes: list[int], refs: tuple[str, ...] = ("_text", "_stext", "nosuch")) -> None:
    fast = K.parse_kallsyms(text)
    ref = K.parse_kallsyms_lines(text)
    assert isinstance(fast, K.ArrayKallsyms)
    assert _ksyms(fast.kernel) == _ksyms(ref.kernel)
    assert {k: _ksyms(v) for k, v in fast.modules.items()} == {k: _ksyms(v) for k, v in ref.modules.items()}
    assert _ksyms(fast.raw) == _ksyms(ref.raw)
    assert fast.refs == ref.refs
    for name in refs:
        for addr in (0xFFFFFFFF81000000, 0xFFFFFFFF9F000000):
            a, b = fast.kernel_table(name, addr), ref.kernel_table(name, addr)
            assert _rows(a.symbols) == _rows(b.symbols) and len(a) == len(b) and a.open_end == b.open_end
            for off in probes:
                x, y = a.find(off), b.find(off)
                assert (x is None) == (y is None) and (x is None or _rows([x]) == _rows([y])), hex(off)
    for mod in ref.modules:
        a, b = fast.module_table(mod, 0xFFFFFFFFC0000000), ref.module_table(mod, 0xFFFFFFFFC0000000)
        assert _rows(a.symbols) == _rows(b.symbols)
    assert _rows(fast.module_table("[none]", 0).symbols) == []


def _random_kallsyms(rng: random.Random, n: int) -> tuple[str, list[int]]:
    lines = ["ffffffff81000000 T _stext", "ffffffff81000000 T _text"]
    addr = 0xFFFFFFFF81000000
    mods = [f"[{m}]" for m in ("kvm", "kvm_intel", "nf-tables", "xfs")]
    probes = []
    for i in range(n):
        if rng.random() < 0.7:
            addr += rng.choice((0, 0, 16, 64, 4096, 100))
        typ = rng.choice("TtTtWwDdBbrRAaUu")
        name = rng.choice(("", "_", "__", "$x")) + f"s{i}_{rng.randrange(99)}" * rng.choice((1, 2))
        mod = rng.choice(mods) if rng.random() < 0.15 else None
        lines.append(f"{addr:016x} {typ} {name}" + (f"\t{mod}" if mod else ""))
        probes += [addr, addr + 1, addr - 1]
    rng.shuffle(lines) if rng.random() < 0.3 else None
    return "\n".join(lines) + ("\n" if rng.random() < 0.8 else ""), probes


@pytest.mark.parametrize("seed", range(8))
def test_random_files_give_the_reference_symbols(seed):
    rng = random.Random(seed)
    text, probes = _random_kallsyms(rng, 3000)
    _same(text, probes)


def test_this_machines_kallsyms():
    path = Path("/proc/kallsyms")
    try:
        text = path.read_text(encoding="latin-1")
    except OSError:
        pytest.skip("no /proc/kallsyms")
    if not text.strip() or set(text.split()[0]) == {"0"}:
        pytest.skip("/proc/kallsyms hides its addresses here")
    rng = random.Random(5)
    ref = K.parse_kallsyms_lines(text)
    probes = [s.start + rng.choice((0, 1, -1)) for s in rng.sample(ref.kernel, min(2000, len(ref.kernel)))]
    _same(text, probes)


@pytest.mark.parametrize("text", [
    "ffffffff81000000 T _text\nffffffff81000010  t two_spaces\n",     # another shape: the line parser
    "ffffffff81000000 T _text\n81000010 t short_address\n",
    "ffffffff81000000 T _text\nffffffff81000010 t name trailing\n",
    "ffffffff81000000 T _text\nffffffff81000010 t name\tnot_a_module\n",
    "ffffffff81000000 T _text\r\nffffffff81000010 t crlf\r\n",
    "ffffffffffffff00 T near_the_top\n",
    "",
])
def test_other_shapes_are_the_line_parsers(text):
    got = K.parse_kallsyms(text)
    ref = K.parse_kallsyms_lines(text)
    assert not isinstance(got, K.ArrayKallsyms) or not text
    assert _ksyms(got.kernel) == _ksyms(ref.kernel) and got.refs == ref.refs


def test_a_bad_address_is_the_line_parsers_error(tmp_path):
    p = tmp_path / "kallsyms"
    p.write_text("ffffffff81000000 T _text\nffffffffzz000010 t bad\n")
    with pytest.raises(ImageError, match="line 2: bad address"):
        K.load_kallsyms(str(p))


def test_load_reads_the_file_into_columns(tmp_path):
    text, _ = _random_kallsyms(random.Random(9), 200)
    p = tmp_path / "kallsyms"
    p.write_text(text, encoding="latin-1")
    got = K.load_kallsyms(str(p))
    assert isinstance(got, K.ArrayKallsyms) and _ksyms(got.kernel) == _ksyms(K.parse_kallsyms_lines(text).kernel)
