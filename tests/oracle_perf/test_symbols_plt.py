"""PLT entries named as perf 6.1 names them (``NAME@plt``), in an executable and its shared library.

The test programs (src/pltt_main.c, src/pltt_lib.c) are built here with gcc
and no libc: ``libpltt.so`` and an executable that calls its functions
through the PLT and reads its variable through the GOT (or a copy
relocation); the library calls its own exported functions through its PLT
too.  The generator's emulator loads the library, applies the relocations
and binds the PLT lazily through its own lazy binder (or at load with ``-z
now``); the recording names the files, and the export's symbols, calls,
call_paths and samples are compared with perf's export-to-sqlite.py, and
``perf script -F ip,sym,symoff`` with the export's samples.

Variants: lazy binding, ``-z now``, IBT (``-fcf-protection=full``: calls go
to ``.plt.sec``, which perf 6.1 does not name), a stripped executable whose
``.dynsym`` defines nothing (perf 6.1 then loads no symbol and synthesizes no
PLT symbols either), a stripped one whose ``.dynsym`` defines only the copied
variable (an OBJECT: PLT names again), a PIE (GOT, RELATIVE relocations), and
an ``_init`` of size 0 before ``.plt`` that perf stretches over it, where
perf's red-black tree decides between ``_init`` and the PLT entry.  Also: the
end perf gives a last symbol of size 0, and the tree itself.
"""

from __future__ import annotations

import io
import random
import subprocess
from pathlib import Path

import pytest

from ptexport.cli import main
from ptexport.images.symbols import _RBTree
from ptxtest import HAVE_PERF, perf_python_env
from test_symbols_perf import TABLES, _have_exporter, _have_tools, exports, perf_cols, rows, table

SRC = Path(__file__).parent / "symbols_src"
CFLAGS = ["-O1", "-nostdlib", "-fno-stack-protector", "-fno-asynchronous-unwind-tables",
          "-Wl,--build-id=sha1"]
NO_PIE = ["-fno-pie", "-no-pie"]



def _skip_without_perf() -> None:
    if not HAVE_PERF:
        pytest.skip("perf (Debian linux-perf) is not installed")
    if not _have_tools():
        pytest.skip("the test programs need gcc and strip (binutils)")
    if not _have_exporter():
        pytest.skip("perf's export-to-sqlite.py needs python3-pyside2.qtsql")


# name: (options of both objects, of the executable only, strip the executable after tracing)
VARIANTS = {
    "lazy": (["-fcf-protection=none"], NO_PIE, False),
    "now": (["-fcf-protection=none", "-Wl,-z,now"], NO_PIE, False),
    "ibt": (["-fcf-protection=full"], NO_PIE, False),
    "stripped": (["-fcf-protection=none"], [*NO_PIE, "-DNO_DATA"], True),
    "stripped_data": (["-fcf-protection=none"], NO_PIE, True),
    "pie": (["-fcf-protection=none"], ["-fPIC", "-pie"], False),
    # an _init of size 0 just before .plt, stretched over it (perf 6.1 adds the PLT symbols after)
    "init": (["-fcf-protection=none"], [*NO_PIE, "-DINIT", "-DDUPS=2"], False),
    "init_ibt": (["-fcf-protection=full"], [*NO_PIE, "-DINIT"], False),
    # one PLT entry: perf's tree search meets _init first, so the entry is "_init+0x20" ...
    "init_one": (["-fcf-protection=none"], [*NO_PIE, "-DINIT", "-DONE_CALL"], False),
    # ... unless one erased alias reshaped the tree: then it meets "pltt_loop@plt" first
    "init_one_dup": (["-fcf-protection=none"], [*NO_PIE, "-DINIT", "-DONE_CALL", "-DDUPS=1"], False),
}
SLOW = {"now", "stripped_data", "init", "init_ibt"}  # the default run keeps one of each kind
PARAMS = [pytest.param(v, marks=pytest.mark.slow) if v in SLOW else v for v in VARIANTS]
EXE, LIB, RESOLVER = "pltt", "libpltt.so", "ptx-lazy-binder.so"


def build(out: Path, common: list[str], exe_only: list[str]) -> Path:
    out.mkdir()
    lib = out / LIB
    subprocess.run(["gcc", *CFLAGS, *common, "-fPIC", "-shared", "-o", str(lib), str(SRC / "pltt_lib.c")],
                   check=True, capture_output=True, timeout=120)
    prog = out / EXE
    subprocess.run(["gcc", *CFLAGS, *common, *exe_only, "-o", str(prog), str(SRC / "pltt_main.c"),
                    f"-L{out}", "-lpltt"], check=True, capture_output=True, timeout=120)
    return prog


def trace(tmp: Path, variant: str) -> Path:
    common, exe_only, strip = VARIANTS[variant]
    prog = build(tmp / variant, common, exe_only)
    d = tmp / f"{variant}.trace"
    assert main(["synth", "--out", str(d), "--program", str(prog), "--branches", "600"], out=io.StringIO()) == 0
    if strip:  # the recording names d/pltt: strip the copy both exporters read (its build-id stays)
        subprocess.run(["strip", str(d / EXE)], check=True, capture_output=True)
    return d


class _Traces(dict):
    """Each variant traced and exported (perf's database, ours) when a test first asks for it."""

    def __init__(self, tmp: Path) -> None:
        super().__init__()
        self.tmp = tmp

    def __missing__(self, variant: str) -> tuple[Path, Path]:
        self[variant] = exports(trace(self.tmp, variant))
        return self[variant]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> _Traces:
    _skip_without_perf()
    return _Traces(tmp_path_factory.mktemp("plt"))


def symbols_by_dso(db: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for dso, name in rows(db, "SELECT d.short_name, s.name FROM symbols s JOIN dsos d ON d.id = s.dso_id"):
        out.setdefault(dso, set()).add(name)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("variant", PARAMS)
def test_tables_equal_perf(traces, variant):
    theirs, ours = traces[variant]
    for name in TABLES:
        cols = perf_cols(theirs, name)
        assert table(ours, name, cols) == table(theirs, name, cols), f"{variant}: {name}"


@pytest.mark.parametrize("variant", PARAMS)
def test_perf_script_sym_symoff(traces, variant):
    """perf script -F ip,sym,symoff against the export's samples of the branches event."""
    theirs, ours = traces[variant]
    proc = subprocess.run(["perf", "script", "-i", str(theirs.parent / "perf.data"), "--itrace=be",
                           "-F", "ip,sym,symoff"],
                          check=True, capture_output=True, text=True, timeout=600, env=perf_python_env())
    want = [" ".join(line.split()) for line in proc.stdout.splitlines() if line.strip()]
    got = [f"{ip:x} [unknown]" if name == "unknown" else f"{ip:x} {name}+{off:#x}"
           for ip, name, off in rows(ours, "SELECT s.ip, y.name, s.sym_offset FROM samples s "
                                           "JOIN symbols y ON y.id = s.symbol_id "
                                           "JOIN selected_events e ON e.id = s.evsel_id "
                                           "WHERE e.name LIKE 'branches%' ORDER BY s.id")]
    assert len(want) > 500
    assert got == want


CALLS = {"pltt_add@plt", "pltt_mul@plt", "pltt_bump@plt", "pltt_loop@plt"}


def _named_plt(syms: dict[str, set[str]], db: Path) -> None:
    assert CALLS <= syms[EXE]  # the executable's calls into the library
    assert {"pltt_add@plt", "pltt_mul@plt"} <= syms[LIB]  # the library's calls to itself
    # an entry of .plt is one entry long (16 bytes); the header (PLT0) has no name
    sizes = {e - s for s, e, n in rows(db, "SELECT sym_start, sym_end, name FROM symbols") if n.endswith("@plt")}
    assert sizes == {16}


def _lazy(syms: dict[str, set[str]], db: Path) -> None:
    _named_plt(syms, db)
    # lazy binding: each function's first call runs PLT0 (no name: "unknown" at the start of
    # .plt) and the lazy binder
    assert "unknown" in syms[EXE] and syms[RESOLVER] == {"unknown"}


def _now(syms: dict[str, set[str]], db: Path) -> None:
    _named_plt(syms, db)
    assert RESOLVER not in syms  # -z now: bound at load, no lazy binder


def _ibt(syms: dict[str, set[str]], db: Path) -> None:
    # the calls run through .plt.sec, which perf 6.1 leaves unnamed; its names sit on .plt's lazy
    # stubs, which run once per function (the first call, on its way to the lazy binder)
    assert "unknown" in syms[EXE] and CALLS <= syms[EXE]
    counts = rows(db, "SELECT count(*) FROM samples s JOIN symbols y ON y.id = s.symbol_id "
                      "WHERE y.name LIKE '%@plt' GROUP BY s.dso_id, y.name")
    assert counts and {n for (n,) in counts} == {1}


def _stripped(syms: dict[str, set[str]], db: Path) -> None:
    # the executable's .dynsym defines nothing: perf loads no symbol of it and synthesizes no PLT names
    assert syms[EXE] == {"unknown"} and "pltt_add@plt" in syms[LIB]


def _stripped_data(syms: dict[str, set[str]], db: Path) -> None:
    # its .dynsym defines the library's variable copied in (an OBJECT): PLT names again
    assert syms[EXE] == CALLS | {"unknown"}


def _init(syms: dict[str, set[str]], db: Path) -> None:
    # _init (size 0) is stretched over .plt; with four entries the search meets them before _init
    assert CALLS | {"_init"} <= syms[EXE]


def _init_one(syms: dict[str, set[str]], db: Path) -> None:
    assert "_init" in syms[EXE] and not any(n.endswith("@plt") for n in syms[EXE])
    # the samples at the PLT entry are _init's, far into it
    (off,), = rows(db, "SELECT max(s.sym_offset) FROM samples s JOIN symbols y ON y.id = s.symbol_id "
                       "WHERE y.name = '_init'")
    assert off >= 0x20


def _init_one_dup(syms: dict[str, set[str]], db: Path) -> None:
    assert {"_init", "pltt_loop@plt"} <= syms[EXE]


CHECKS = {"lazy": _lazy, "now": _now, "pie": _lazy, "ibt": _ibt, "stripped": _stripped,
          "stripped_data": _stripped_data, "init": _init, "init_ibt": _ibt, "init_one": _init_one,
          "init_one_dup": _init_one_dup}


@pytest.mark.parametrize("variant", PARAMS)
def test_plt_names_as_perf_shows_them(traces, variant):
    """perf's own names, so each program keeps testing what it is meant to."""
    theirs, _ = traces[variant]
    CHECKS[variant](symbols_by_dso(theirs), theirs)


def test_last_symbol_ends_a_page_on(tmp_path):
    """The last symbol of size 0 ends at the page after the one it starts in (perf's
    symbols__fixup_end), here before its map ends; perf's export equals ours."""
    _skip_without_perf()
    prog = tmp_path / "last"
    subprocess.run(["gcc", "-nostdlib", "-static", "-no-pie", "-Wl,--build-id=sha1", "-o", str(prog),
                    str(SRC / "last_label.S")], check=True, capture_output=True, timeout=120)
    d = tmp_path / "last.trace"
    assert main(["synth", "--out", str(d), "--program", str(prog), "--branches", "30"], out=io.StringIO()) == 0
    theirs, ours = exports(d)
    cols = perf_cols(theirs, "symbols")
    assert table(ours, "symbols", cols) == table(theirs, "symbols", cols)
    (start, end), = rows(theirs, "SELECT sym_start, sym_end FROM symbols WHERE name = 'last'")
    assert end == (start + 4095) // 4096 * 4096 + 4096 and end - start > 0x1000


def _check_rb(tree: _RBTree) -> list[int]:
    """The red-black invariants; the keys in order."""
    keys: list[int] = []

    def walk(n, parent) -> int:
        if n is None:
            return 1
        assert n.parent is parent
        if n.red:
            assert not (n.left and n.left.red) and not (n.right and n.right.red)
        left = walk(n.left, n)
        keys.append(n.entry[0])
        right = walk(n.right, n)
        assert left == right
        return left + (not n.red)

    assert tree.root is None or not tree.root.red
    walk(tree.root, None)
    return keys


def test_rbtree_keeps_order_and_balance():
    """perf's symbol tree (as ptexport rebuilds it): inserts (equal keys go right), erasures."""
    rng = random.Random(7)
    for _ in range(40):
        tree, live = _RBTree(), []
        for _ in range(rng.randrange(1, 120)):
            if live and rng.random() < 0.3:
                node = live.pop(rng.randrange(len(live)))
                tree.erase(node)
            else:
                key = rng.randrange(50)
                live.append(tree.insert([key, key, "", 1]))
            assert _check_rb(tree) == sorted(n.entry[0] for n in live)
        for n in live:  # every key is found where the search goes
            assert tree.find(n.entry[0])[0] == n.entry[0]
