"""ELF symbols as perf 6.1 keeps them: the export's symbols, calls, call_paths and samples equal perf's.

The test program (src/syms.c, src/labels.S) has every kind of symbol perf
chooses between or drops: aliases at one address (weak/strong, global/local,
leading underscores, longer name, equal length), NOTYPE labels of assembly
code (in .text, in a section without "text" in its name, hidden, at a sized
function's address, last in the code), a function without a size, code in
.init/.fini, a function symbol in .data.  It is built here with gcc, traced by
the generator, and the recording exported by perf's export-to-sqlite.py and by
ptexport; also stripped (no symbols) and with .dynsym only.
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from ptexport.cli import main
from ptxtest import needs_perf, perf_python_env

SRC = Path(__file__).parent / "src"
EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
CFLAGS = ["-O1", "-nostdlib", "-fno-pie", "-no-pie", "-fcf-protection=none", "-fno-stack-protector",
          "-fno-asynchronous-unwind-tables", "-Wl,--build-id=sha1"]
TABLES = ["symbols", "calls", "call_paths", "samples"]


def _have_exporter() -> bool:
    if not os.path.exists(EXPORTER) or shutil.which("perf") is None:
        return False
    proc = subprocess.run(["/usr/bin/python3", "-c", "import PySide2.QtSql"], capture_output=True)
    return proc.returncode == 0


def _have_tools() -> bool:
    return all(shutil.which(t) for t in ("gcc", "strip"))


pytestmark = [
    needs_perf,
    pytest.mark.skipif(not _have_tools(), reason="the test program needs gcc and strip (binutils)"),
    pytest.mark.skipif(not _have_exporter(), reason="perf's export-to-sqlite.py needs python3-pyside2.qtsql"),
]

# name: (gcc options, strip after tracing)
VARIANTS = {
    "full": (["-static"], False),
    "tail": (["-static", "-DTAIL", "-DPAD", "-DDATA_FN"], False),
    "stripped": (["-static"], True),
    # exported dynamic symbols, no interpreter: an ET_EXEC the emulator runs; stripped to .dynsym
    "dynsym": (["-Wl,-E", "-Wl,--no-dynamic-linker"], True),
}


def build(out: Path, name: str, options: list[str]) -> Path:
    prog = out / name
    subprocess.run(["gcc", *CFLAGS, *options, "-o", str(prog), str(SRC / "syms.c"), str(SRC / "labels.S")],
                   check=True, capture_output=True, timeout=120)
    return prog


def trace(tmp: Path, name: str, options: list[str], strip: bool) -> Path:
    prog = build(tmp, name, options)
    d = tmp / f"{name}.trace"
    assert main(["synth", "--out", str(d), "--program", str(prog), "--branches", "1500"], out=io.StringIO()) == 0
    if strip:  # the recording names d/NAME: strip the copy both exporters read (its build-id stays)
        subprocess.run(["strip", str(d / name)], check=True, capture_output=True)
    return d


def exports(d: Path) -> tuple[Path, Path]:
    theirs, ours = d / "perf.db", d / "ours.db"
    subprocess.run(["perf", "script", "-i", str(d / "perf.data"), "--itrace=bep", "-s", EXPORTER, str(theirs),
                    "branches", "calls"], check=True, capture_output=True, timeout=600, env=perf_python_env())
    assert main([str(d / "perf.data"), "--db", str(ours), "-q"], out=io.StringIO()) == 0
    return theirs, ours


def rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def table(db: Path, name: str, cols: list[str]) -> list[tuple]:
    return rows(db, f"SELECT {','.join(cols)} FROM {name} ORDER BY id")


def perf_cols(db: Path, name: str) -> list[str]:
    return [r[1] for r in rows(db, f"PRAGMA table_info({name})")]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("symbols")
    return {v: exports(trace(tmp, f"sym_{v}", *VARIANTS[v])) for v in VARIANTS}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_tables_equal_perf(traces, variant):
    theirs, ours = traces[variant]
    for name in TABLES:
        cols = perf_cols(theirs, name)
        assert table(ours, name, cols) == table(theirs, name, cols), f"{variant}: {name}"


def test_the_rules_are_exercised(traces):
    """perf's own choices, so the program keeps testing what it is meant to."""
    theirs, _ = traces["full"]
    syms = {name: (start, end) for start, end, name in rows(theirs, "SELECT sym_start, sym_end, name FROM symbols")}
    for chosen, dropped in [("strong_fn", "weak_alias"), ("under_fn", "__under_fn"), ("glob_alias", "loc_fn"),
                            ("abcdef", "ab"), ("tie2", "tie1"), ("wk_longer_name", "wk1"),
                            ("sized_asm_entry", "sized_asm")]:
        assert chosen in syms and dropped not in syms, (chosen, dropped)
    for gone in ("_init", "_fini", "my_label", "hid_label"):
        assert gone not in syms, gone  # .init/.fini labels, a section without "text", a hidden label
    assert syms["again"][1] > syms["again"][0] and syms["exit"][1] > syms["exit"][0]  # labels get a size
    assert syms["other_label"][1] == syms["my_func"][0]  # to the next symbol kept, past the dropped my_label
    assert rows(theirs, "SELECT count(*) FROM symbols WHERE name = 'unknown' AND sym_start = sym_end")[0][0] >= 3
    # the last symbol (size 0) ends with its map, not at the next symbol (data_fn) nor a page after it
    theirs, _ = traces["tail"]
    (start, end), = rows(theirs, "SELECT sym_start, sym_end FROM symbols WHERE name = 'exit'")
    assert end - start > 0x2000 and end % 0x1000 == 0
    theirs, _ = traces["stripped"]
    assert {n for (n,) in rows(theirs, "SELECT name FROM symbols")} == {"unknown"}
    theirs, _ = traces["dynsym"]
    names = {n for (n,) in rows(theirs, "SELECT name FROM symbols")}
    assert "tie1" in names and "again" not in names  # .dynsym's order and no locals


@pytest.mark.parametrize("variant", ["full", "tail", "dynsym"])
def test_perf_script_sym_symoff(traces, variant):
    """perf script -F ip,sym,symoff against the export's samples of the branches event."""
    theirs, ours = traces[variant]
    d = theirs.parent
    proc = subprocess.run(["perf", "script", "-i", str(d / "perf.data"), "--itrace=be", "-F", "ip,sym,symoff"],
                          check=True, capture_output=True, text=True, timeout=600, env=perf_python_env())
    want = [" ".join(line.split()) for line in proc.stdout.splitlines() if line.strip()]
    got = []
    for ip, name, off in rows(ours, "SELECT s.ip, y.name, s.sym_offset FROM samples s "
                                    "JOIN symbols y ON y.id = s.symbol_id "
                                    "JOIN selected_events e ON e.id = s.evsel_id "
                                    "WHERE e.name LIKE 'branches%' ORDER BY s.id"):
        got.append(f"{ip:x} [unknown]" if name == "unknown" else f"{ip:x} {name}+{off:#x}")
    assert len(want) > 1000
    assert got == want


@pytest.mark.xfail(strict=True, reason="perf's dso symbol cache: db-export's 'unknown' symbol for a sample's ip "
                   "becomes the cached answer for the address looked up last (the branch target) when that is "
                   "at or above it, so the next sample at that address gets 'unknown' with a large offset; "
                   "ptexport resolves each address on its own")
def test_unknown_symbol_cache_quirk(tmp_path):
    theirs, ours = exports(trace(tmp_path, "sym_quirk", ["-static", "-DQUIRK"], False))
    cols = perf_cols(theirs, "samples")
    assert table(ours, "samples", cols) == table(theirs, "samples", cols)
