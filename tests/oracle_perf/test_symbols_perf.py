"""ELF symbols as perf 6.1 keeps them: the export's symbols, calls, call_paths and samples equal perf's.

The test program (src/syms.c, src/labels.S) has every kind of symbol perf
chooses between or drops: aliases at one address (weak/strong, global/local,
leading underscores, longer name, equal length), NOTYPE labels of assembly
code (in .text, in a section without "text" in its name, hidden, at a sized
function's address, last in the code), a function without a size, code in
.init/.fini, a function symbol in .data.  It is built here with gcc, traced by
the generator, and the recording exported by perf's export-to-sqlite.py and by
ptexport; also stripped (no symbols) and with .dynsym only.

perf's per-DSO last-lookup cache (dso__find_symbol's last_find_result, which
db-export's "unknown" symbols can take over) is tested with src/lastfind.S:
blocks without symbols jumping up to branches, down, and up to plain code, on
their own and with a fork+exec'd second program interleaved by preemption;
the batch and the per-sample export both equal perf's there.
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from ptexport.cli import main
from ptexport.dbexport.exporter import ExportConfig
from ptexport.session.export import export_trace
from ptexport.session.perfsession import PerfSession
from ptexport.samples.itrace import export_default
from ptxtest import needs_perf, perf_python_env

SRC = Path(__file__).parent / "symbols_src"
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


@pytest.mark.slow
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


def _reference(d: Path) -> Path:
    """The per-sample (reference) export of ``d``'s recording."""
    ref = d / "ours_ref.db"
    export_trace(str(d / "perf.data"), str(ref), ExportConfig(itrace=export_default(), calls=True, force=True,
                                                              reference=True))
    return ref


def _assert_tables_equal(theirs: Path, *ours: Path, what: str = "") -> None:
    for name in TABLES:
        cols = perf_cols(theirs, name)
        want = table(theirs, name, cols)
        for db in ours:
            assert table(db, name, cols) == want, f"{what} {db.name}: {name}"


def _cached_unknowns(db: Path, side: str = "") -> list[tuple]:
    """Samples perf answered with an "unknown" below the address (perf's per-DSO last-lookup cache):
    (sample id, dso id, address) for ``side`` "" (ip) or "to_" (addr)."""
    return rows(db, f"SELECT s.id, s.{side}dso_id, s.{side}ip FROM samples s "
                    f"JOIN symbols y ON y.id = s.{side}symbol_id "
                    f"WHERE y.name = 'unknown' AND s.{side}sym_offset > 0 ORDER BY s.id")


def test_unknown_symbol_cache_quirk(tmp_path):
    """db-export's "unknown" for a sample's ip (in .init, no symbol) becomes the DSO's cached answer for
    the branch target above it (_start's, a branch itself), so the next sample there gets it."""
    theirs, ours = exports(trace(tmp_path, "sym_quirk", ["-static", "-DQUIRK"], False))
    assert _cached_unknowns(theirs), "the program no longer shows the cache rule"
    _assert_tables_equal(theirs, ours, _reference(theirs.parent), what="quirk")


# name: (assembler options, synth options, strip the recorded copies)
LASTFIND = {
    # blocks without symbols, hubs with: perf answers some hub samples with a block's "unknown"
    "mixed": ([], [], False),
    # stripped; a fork whose child execs a second program (two DSOs, their lookups interleaved on one
    # CPU by preemption); a preemption at a hub gives a trace-begin sample whose addr hits the cache
    "fork-preempt": (["-DFORK"], ["--cpus", "1", "--preempt", "51"], True),
}


def lastfind_trace(tmp: Path, variant: str) -> Path:
    asflags, synth, strip = LASTFIND[variant]
    work = tmp / variant
    work.mkdir()
    base = ["gcc", "-nostdlib", "-static", "-fno-pie", "-no-pie", "-Wl,--build-id=sha1"]
    progs = [("lastfind", asflags)] + ([("lastfind_child", ["-DCHILD"])] if "-DFORK" in asflags else [])
    for name, flags in progs:
        subprocess.run([*base, *flags, "-o", str(work / name), str(SRC / "lastfind.S")], check=True,
                       capture_output=True, timeout=120)
    d = work / "trace"
    assert main(["synth", "--out", str(d), "--program", str(work / "lastfind"), "--branches", "1500", *synth],
                out=io.StringIO()) == 0
    if strip:
        for name, _ in progs:
            subprocess.run(["strip", str(d / name)], check=True, capture_output=True)
    return d


def _addresses(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    with open(path, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return {sym.name: sym["st_value"] for sym in symtab.iter_symbols() if sym.name in names}


@pytest.fixture(scope="module")
def lastfind(tmp_path_factory) -> dict[str, tuple[Path, Path, Path]]:
    tmp = tmp_path_factory.mktemp("lastfind")
    out = {}
    for v in LASTFIND:
        theirs, ours = exports(lastfind_trace(tmp, v))
        out[v] = (theirs, ours, _reference(theirs.parent))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(LASTFIND))
def test_last_lookup_cache_equals_perf(lastfind, variant):
    """symbols, samples, calls and call_paths equal perf's, from the batch and the per-sample export."""
    theirs, ours, ref = lastfind[variant]
    _assert_tables_equal(theirs, ours, ref, what=variant)


def test_last_lookup_cache_is_exercised(lastfind):
    """perf's own answers, so the program keeps testing the rule: hits after jumps up, none after
    jumps down, on both the ip and the addr side, in two DSOs."""
    theirs, _, _ = lastfind["mixed"]
    hubs = _addresses(theirs.parent / "lastfind", ("hub_lo", "hub_hi", "hub_hi2"))
    hits = _cached_unknowns(theirs)
    assert len(hits) >= 10  # the first runs of the up-blocks whose jump is not at their start
    assert {ip for _, _, ip in hits} == {hubs["hub_hi"], hubs["hub_hi2"]}  # addresses with a symbol of their own
    at = rows(theirs, "SELECT s.ip, y.name FROM samples s JOIN symbols y ON y.id = s.symbol_id")
    assert {n for ip, n in at if ip == hubs["hub_lo"]} == {"hub_lo"}  # jumps down: no cached "unknown"
    assert {n for ip, n in at if ip == hubs["hub_hi"]} == {"hub_hi", "unknown"}  # later rounds: the symbol
    theirs, _, _ = lastfind["fork-preempt"]
    hits = _cached_unknowns(theirs)
    assert len({dso for _, dso, _ in hits}) == 2, "cached answers in both programs"
    assert _cached_unknowns(theirs, "to_"), "a trace-begin sample's addr answered from the cache"


@pytest.mark.slow
def test_last_lookup_cache_across_batches(lastfind, monkeypatch):
    """Batches of 3 samples: the cache's answer outlives the batch whose branch started it
    (export_fast.DsoLastFind.pending), and the export still equals perf's."""
    whole = PerfSession.iter_batches
    monkeypatch.setattr(PerfSession, "iter_batches", lambda self, jobs=1, batch_rows=0: whole(self, jobs, 3))
    for variant, (theirs, _, _) in lastfind.items():
        ours = theirs.parent / "ours_batches3.db"
        export_trace(str(theirs.parent / "perf.data"), str(ours),
                     ExportConfig(itrace=export_default(), calls=True, force=True))
        _assert_tables_equal(theirs, ours, what=f"{variant} in batches of 3")
