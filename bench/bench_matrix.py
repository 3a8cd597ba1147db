#!/usr/bin/env python3
"""The benchmark matrix (issue #13): what a new user meets, measured in one run, as ratios against perf 6.1.

    python3 bench/bench_matrix.py                        # everything, 10 M branches (tens of minutes)
    python3 bench/bench_matrix.py --branches 1M --skip-venv --json matrix.json
    python3 bench/bench_matrix.py --tiny                 # a quick check that it works (--skip-venv implied)

Parts, each on inputs made once in this run (a temporary directory, or ``--keep DIR``):

1. fresh install (``--skip-venv`` skips it: minutes): a copy of the working tree as a user's checkout
   (``git ls-files -co --exclude-standard``), a new venv, the README's ``pip install .`` (timed), a check
   that the venv takes the compiled path (``ptexport.jit.available()``, numba's cache files installed with
   the package, no "slow reference path" warning), then the README's ``ptexport
   sample_data/loops/perf.data --db loops.sqlite`` twice (first run after install vs warm run, and the
   numba cache files the first run wrote: any is a compile the install did not do ahead), and the same
   for a ``--first-branches`` trace;
2. decode, on one single-thread ``--branches`` trace (``ptexport synth --program calls``): ``dump
   branches --count`` and text output to /dev/null, ``--jobs 1`` and ``--jobs 2``, against ``perf
   script --itrace=b > /dev/null`` (and perf printing ptexport's fields, ``-F pid,tid,cpu,time,ip,addr,flags``);
   the branch counts must agree with perf's.  The decoder's scaling, ``--count`` with ``--jobs 2``
   against ``--jobs 1``, also on a ``--scale-branches`` trace (40 M): at 10 M the start-up (imports,
   numba's cache, the sideband: the same in both) is half of the ``--jobs 2`` run (the medians of
   five alternated runs of each; the row's note gives the ratio less the start-up row's figure too);
   then the other ``--itrace`` modes (instruction samples by instructions, time and ticks, call
   chains, quick decoding, an initial skip, timestamps ignored, and Event Trace on a recording of its
   own), ``dump branches --count`` against ``perf script`` printing them, the sample counts checked
   against perf's (medians of 3 alternated runs where perf takes under 5 s); and the code footprint:
   ``--count`` on a ``--code-branches`` trace of a big program (``bigcode``, ~45 K instructions, where
   the others run a few hundred: a new block every ~100 branches, as a real recording's program,
   libraries and kernel give) against perf; and the multi-queue scaling: ``--count`` with ``--jobs 2``
   against ``--jobs 1`` on two ``--queue-branches`` recordings of the ``threads`` program (4 threads),
   one with a queue per CPU (4 CPUs, preempted every 20 K instructions) and one with a queue per thread
   (``--per-thread``), the counts checked equal;
3. export, on the same trace: ``ptexport TRACE --db`` with ``--jobs 1`` and ``--jobs 2`` against perf's
   export-to-sqlite.py (``--itrace=bep ... branches calls``), with each one's peak RSS, and ``--jobs 2``
   against ``--jobs 1`` (the note says how many cores ``--jobs 1`` keeps busy: it decodes on a thread of
   its own); the sample counts must agree;
4. VM export: a ``synth --vm mixed`` recording with its guest sideband injected (as bench_vm.py makes
   it) against a host-only trace of the same branch count, time per sample (medians of three alternated
   runs of each; the note gives each export's call paths: the generated guest's call tree is far wider
   than the calls program's, 202 K paths against 51 at 1 M branches, as perf's exporter finds it, and
   the call tree's work per sample grows with it; the README venv's first VM export must write no
   numba cache file: no shipped sample is a VM's, so a compile there is a kernel only a VM recording
   reaches, left out of the compiling ahead at install); then memory: the export's peak RSS at 1 M
   branches and at ``--rss-branches`` (100 M, the issue's "flat from 1 M to 100 M": a few minutes, its
   database removed after);
5. raw mode: ``dump insns --raw FILE.pt --quiet --stat`` on the real simplept-adl ring buffer (ptxed's
   0.30 s input; its binary is not carried, so the flow stops at each TIP: the figure is the time for
   the whole 2 MiB) and on a generated raw dump with its ELF (instructions/s), against ptxed.

Every ptexport and perf command is a separate process: start-up, imports and numba's cache loading
count, as for a user.  The ``ptexport`` of parts 2-5 is the README venv's (what the README's first
command installs; with ``--skip-venv`` the console script beside this Python, never a version
manager's shim: ``_common.measured``); the generator (``ptexport synth``) is this checkout's.
Before the timed runs of parts 2-5 a tiny trace goes through the same commands (numba's cache
checked or filled; the first run after install is part 1's business); the last of them
is the start-up row, the floor under every ptexport figure.  Each row gives
wall and CPU seconds (user+sys of the process and the children it waited for: on a loaded machine the
CPU ratio is the steadier one), the ratio, the issue's target and whether it is met.  Exit status 1
when a check fails (counts that differ from perf's, the slow path in the venv), 0 otherwise: a missed
target is a figure, not a failure.  Output paths (``--keep``, ``--json``) that exist are refused unless
``--force``; ``--tiny`` is 20 k branches, no venv, a 128 KiB slice of the real raw trace.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench_decode
import bench_export
import bench_rawdump
import bench_vm
from _common import (EXE_ENV, PERF_EXPORTER, add_options, measured, need_perf, one_line_errors, parse, parse_count,
                     perf_env, ratio, run_timed, workdir, write_json)

REPO = Path(__file__).resolve().parent.parent
#: The README's first command, split into its two halves.
README_INSTALL = ["pip", "install", "."]
README_RUN = ["ptexport", "sample_data/loops/perf.data", "--db", "loops.sqlite"]
SLOW_PATH = "slow reference path"  # ptexport's warning when numba is not usable
PERF_FIELDS = "pid,tid,cpu,time,ip,addr,flags"  # what ``dump branches`` prints
SIMPLEPT = Path(os.environ.get("PTEXPORT_SHARED", REPO.parent / "shared")) / "testdata" / "real" / "simplept-adl"
SIMPLEPT_CPU = "6/151/2"  # PROVENANCE.md: ptxed --cpu 6/151/2 (Alder Lake-S)
TINY_RAW_SLICE = 128 << 10
WARM_BRANCHES = 2000
VM_RUNS = 3  # VM and host-only exports, alternated (the VM row compares their medians)
FLAT_BASE = 1_000_000  # the memory part's small trace (branches)
SCALE_RUNS = 5  # --count --jobs 1 and 2 at the scaling row's size, alternated (its row compares their medians)
#: Runs of each --itrace mode and of perf's, alternated (the row compares medians), where perf's first run
#: takes under MODE_QUICK_S seconds: the rows near 1x, where one run's noise (+-30 % here) decides the verdict.
MODE_RUNS = 3
MODE_QUICK_S = 5.0
#: What a run makes in its work folder (--keep DIR --force replaces these, and only these).
RUN_FILES = ("decode", "code", "scale", "first", "checkout", "venv", "pip-install.log", "warm", "warm-vm", "perf.db",
             "ours-j1.sqlite", "ours-j2.sqlite", "event-trace", "vm", "host", "memory", "raw-hotloop", "raw-calls",
             "simplept-slice.pt")

# The issue's targets (DESIGN.md section 6): (what, test on the ratio, text).
TARGETS = {
    "first_run": (lambda r: r <= 1.5, "<= 1.5x warm"),
    "scaling": (lambda r: r >= 1.7, ">= 1.7x"),
    "export_scaling": (lambda r: r >= 1.4, ">= 1.4x"),
    "text": (lambda r: r >= 1.5, ">= 1.5x perf"),
    "modes": (lambda r: r >= 1.0, ">= 1.0x perf"),
    "export": (lambda r: r >= 30, ">= 30x perf (10M)"),
    "rss": (lambda mib: mib < 400, "< 400 MB"),
    "flat": (lambda r: r <= 1.5, "<= 1.5x (flat)"),
    "vm": (lambda r: r <= 1.5, "<= 1.5x host"),
    "raw": (lambda r: r >= 1 / 3, "within 3x ptxed"),
}


class Matrix:
    """The table's rows and the checks that failed."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.problems: list[str] = []

    def row(self, part: str, what: str, ours: tuple[float, float] | None, ref: tuple[float, float] | None,
            rat: float | None, target: str | None = None, *, cpu_ratio: float | None = None,
            value: str = "", note: str = "") -> dict:
        """One line: ``ours``/``ref`` are (wall s, CPU s); ``rat`` the figure the target judges."""
        met = None
        if target is not None and rat is not None:
            met = bool(TARGETS[target][0](rat))
        r = {"part": part, "what": what, "wall_s": ours[0] if ours else None, "cpu_s": ours[1] if ours else None,
             "ref_wall_s": ref[0] if ref else None, "ref_cpu_s": ref[1] if ref else None, "ratio": rat,
             "ratio_cpu": cpu_ratio, "target": TARGETS[target][1] if target else None, "met": met,
             "value": value, "note": note}
        self.rows.append(r)
        return r

    def print(self) -> None:
        def f(v: float | None, fmt: str) -> str:
            return format(v, fmt) if v is not None else "-".rjust(int(fmt.split(".")[0]))

        head = (f"{'part':7} {'measure':44} {'wall s':>8} {'CPU s':>7} {'ref wall':>8} {'ref CPU':>7} "
                f"{'ratio':>7} {'(CPU)':>7}  {'target':18} ok")
        print(head)
        print("-" * len(head))
        for r in self.rows:
            ok = {True: "yes", False: "NO", None: ""}[r["met"]]
            print(f"{r['part']:7} {r['what'][:44]:44} {f(r['wall_s'], '8.2f')} {f(r['cpu_s'], '7.2f')} "
                  f"{f(r['ref_wall_s'], '8.2f')} {f(r['ref_cpu_s'], '7.2f')} {f(r['ratio'], '7.3g')} "
                  f"{f(r['ratio_cpu'], '7.3g')}  {(r['target'] or r['value'])[:18]:18} {ok}"
                  + (f"  {r['note']}" if r["note"] else ""))


def count_lines(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> int:
    """Lines ``cmd`` prints, read in chunks (untimed: a check, not a figure)."""
    proc = subprocess.Popen(measured(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    n = 0
    while chunk := proc.stdout.read(1 << 20):
        n += chunk.count(b"\n")
    if proc.wait():
        raise SystemExit(f"bench_matrix: {' '.join(cmd)} failed with exit status {proc.returncode}")
    return n


# ---------------------------------------------------------------- 1. fresh install


def user_checkout(dest: Path) -> int:
    """Copy the working tree's files as a checkout has them (tracked and untracked, not ignored)."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    n = 0
    for name in filter(None, names):
        src = REPO / name
        if not os.path.lexists(src):
            continue  # tracked but deleted in the working tree: not in a checkout of it either
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)
        n += 1
    return n


def user_env(venv: Path) -> dict[str, str]:
    """The environment of a user who activated ``venv``: nothing of this checkout's setup."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "NUMBA_", "PTEXPORT_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def cache_files(venv: Path) -> dict[str, int]:
    """numba's cache files (index and data) under the venv's ptexport package: path -> mtime (ns)."""
    return {str(p): p.stat().st_mtime_ns for p in venv.glob("lib/python*/site-packages/ptexport/**/__pycache__/*")
            if p.suffix in (".nbi", ".nbc")}


def first_and_warm(m: Matrix, label: str, cmd: list[str], db: Path, cwd: Path, env: dict[str, str],
                   venv: Path) -> dict:
    """``cmd`` (writes ``db``) run twice in the venv: the first run vs the warm one."""
    runs = {}
    for name in ("first", "warm"):
        db.unlink(missing_ok=True)
        before = cache_files(venv)
        r = run_timed(cmd, cwd, env)
        # a compile writes its data file and rewrites the function's index: new or changed files
        r["numba_cache_files_written"] = sum(before.get(k) != t for k, t in cache_files(venv).items())
        r["slow_path_warning"] = SLOW_PATH in r["stderr"]
        if r["slow_path_warning"]:
            m.problems.append(f"{label}: the venv decoded on the slow reference path")
        r["samples"] = bench_export.count_samples(db)
        runs[name] = {k: v for k, v in r.items() if k != "stderr"}
    f, w = runs["first"], runs["warm"]
    print(f"{label}: first run {f['wall_s']:.2f} s wall {f['cpu_s']:.2f} s CPU ({f['numba_cache_files_written']} "
          f"numba cache files written), warm run {w['wall_s']:.2f} s wall {w['cpu_s']:.2f} s CPU, {w['samples']} samples")
    m.row("venv", f"{label}: first run vs warm run", (f["wall_s"], f["cpu_s"]), (w["wall_s"], w["cpu_s"]),
          ratio(f["wall_s"], w["wall_s"]), "first_run", cpu_ratio=ratio(f["cpu_s"], w["cpu_s"]),
          note=f"{f['numba_cache_files_written']} numba cache files written by the first run")
    return {**runs, "ratio_wall": ratio(f["wall_s"], w["wall_s"]), "ratio_cpu": ratio(f["cpu_s"], w["cpu_s"])}


def part_venv(m: Matrix, work: Path, first_trace: Path, branches: int) -> dict:
    src, venv = work / "checkout", work / "venv"
    src.mkdir()
    files = user_checkout(src)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = user_env(venv)
    pip = [str(venv / "bin" / README_INSTALL[0]), *README_INSTALL[1:]]
    log = work / "pip-install.log"
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(pip, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        raise SystemExit(f"bench_matrix: {' '.join(README_INSTALL)} failed in the fresh venv: {tail}")
    installed = len(cache_files(venv))
    print(f"fresh venv: {files} files checked out, {' '.join(README_INSTALL)} in {wall:.1f} s wall "
          f"({ru.ru_utime + ru.ru_stime:.1f} s CPU), {installed} numba cache files installed with the package")
    probe = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import ptexport; from ptexport import jit; "
                            "print(jit.available(), ptexport.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True)
    compiled, _, where = probe.stdout.strip().partition(" ")
    if probe.returncode or compiled != "True":
        m.problems.append(f"venv: jit.available() is {compiled or probe.stderr.strip()[-200:]!r}")
    if not where.startswith(str(venv)):
        m.problems.append(f"venv: ptexport imported from {where!r}, not from the venv")
    if not installed:
        m.problems.append("venv: no numba cache files were installed with the package (compiling ahead failed)")
    m.row("venv", f"{' '.join(README_INSTALL)} (fresh venv)", (wall, ru.ru_utime + ru.ru_stime), None, None,
          value=f"{installed} cache files")
    exe = str(venv / "bin" / "ptexport")
    readme = first_and_warm(m, "README run", [exe, *README_RUN[1:]], src / README_RUN[3], src, env, venv)
    big = first_and_warm(m, f"{branches}-branch trace", [exe, str(first_trace), "--db", "venv.sqlite"],
                         first_trace.parent / "venv.sqlite", first_trace.parent, env, venv)
    return {"files": files, "install_wall_s": wall, "install_cpu_s": ru.ru_utime + ru.ru_stime,
            "numba_cache_files_installed": installed, "perffast_available": compiled == "True",
            "ptexport_module": where, "readme_run": readme, "first_trace": big}


# ---------------------------------------------------------------- 2.-5. warm-up, decode, export, VM, raw


def decode_cmds(trace: Path) -> dict[str, tuple[list[str], bool]]:
    """name -> (command, prints the count)."""
    base = ["ptexport", "dump", "branches", "--itrace=b"]
    return {f"{kind} --jobs {j}": ([*base, *(["--count"] if kind == "count" else []), "--jobs", str(j), str(trace)],
                                   kind == "count")
            for kind in ("count", "text") for j in (1, 2)}


def export_cmd(trace: Path, db: Path, jobs: int | None) -> list[str]:
    return ["ptexport", str(trace), "--db", str(db), "-q", *(["--jobs", str(jobs)] if jobs else [])]


def warm_up(m: Matrix, work: Path) -> dict:
    """The commands of parts 2-4 on tiny traces: numba's cache of this checkout checked (or filled).
    The last ``--count --jobs 1`` there is ptexport's start-up: what every figure below includes."""
    t0 = time.perf_counter()
    trace = bench_decode.generate(work / "warm", WARM_BRANCHES, "calls")
    cmds = decode_cmds(trace)
    for cmd, _ in cmds.values():
        run_timed(cmd, trace.parent)
    start = run_timed(cmds["count --jobs 1"][0], trace.parent)
    m.row("decode", f"start-up: dump branches --count, {WARM_BRANCHES} br", (start["wall_s"], start["cpu_s"]),
          None, None, note="imports and numba's cache loading, in every ptexport figure")
    for j in (1, 2):
        run_timed(export_cmd(trace, work / "warm" / f"w{j}.sqlite", j), trace.parent)
    inj, _ = bench_vm.prepare(work / "warm-vm", WARM_BRANCHES, "mixed", 21)
    run_timed(export_cmd(inj, inj.parent / "w.sqlite", None), inj.parent)
    print(f"warm-up on {WARM_BRANCHES}-branch traces: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return {"wall_s": start["wall_s"], "cpu_s": start["cpu_s"], "peak_rss_kib": start["peak_rss_kib"]}


def part_decode(m: Matrix, trace: Path) -> dict:
    cwd = trace.parent
    rep: dict = {}
    with open(os.devnull, "wb") as null:
        for name, cmd in (("perf script --itrace=b", ["perf", "script", "--itrace=b", "-i", str(trace)]),
                          (f"perf script --itrace=b -F {PERF_FIELDS}",
                           ["perf", "script", "--itrace=b", "--ns", "-F", PERF_FIELDS, "-i", str(trace)])):
            wall, cpu, rss, _ = bench_decode.measure(cmd, null, cwd)
            rep[name] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": rss}
        counts = {}
        for name, (cmd, counted) in decode_cmds(trace).items():
            wall, cpu, rss, out = bench_decode.measure(cmd, subprocess.PIPE if counted else null, cwd)
            rep[name] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": rss}
            if counted:
                found = re.match(rb"(\d+) samples", out)
                if not found:
                    raise SystemExit(f"bench_matrix: unexpected output of {' '.join(cmd)}: {out[:200]!r}")
                counts[name] = rep[name]["branches"] = int(found[1])
    perf_n = count_lines(["perf", "script", "--itrace=b", "--ns", "-F", PERF_FIELDS, "-i", str(trace)], cwd)
    rep["perf_branches"] = perf_n
    agree = all(n == perf_n for n in counts.values())
    if not agree:
        m.problems.append(f"decode: perf printed {perf_n} branches, ptexport counted {counts}")
    n = perf_n
    print(f"decode: {n} branches, perf and ptexport {'agree' if agree else 'DISAGREE'}")
    pb, pf = rep["perf script --itrace=b"], rep[f"perf script --itrace=b -F {PERF_FIELDS}"]
    m.row("decode", "perf script --itrace=b > /dev/null", (pb["wall_s"], pb["cpu_s"]), None, None,
          value=f"{n / pb['wall_s'] / 1e6:.2f} M br/s")
    for name in decode_cmds(trace):
        r = rep[name]
        r["ratio_to_perf"], r["ratio_cpu_to_perf"] = ratio(pb["wall_s"], r["wall_s"]), ratio(pb["cpu_s"], r["cpu_s"])
        what = f"dump branches --{name}" if name.startswith("count") else f"dump branches {name.split(' ', 1)[1]} > null"
        m.row("decode", f"{what} vs perf", (r["wall_s"], r["cpu_s"]), (pb["wall_s"], pb["cpu_s"]),
              r["ratio_to_perf"], "text" if name.startswith("text") else None, cpu_ratio=r["ratio_cpu_to_perf"],
              value=f"{n / r['wall_s'] / 1e6:.2f} M br/s")
    for kind in ("count", "text"):
        one, two = rep[f"{kind} --jobs 1"], rep[f"{kind} --jobs 2"]
        rep[f"{kind}_scaling"] = ratio(one["wall_s"], two["wall_s"])
        # (the text: --jobs 1 decodes and formats on two threads already, and --jobs 2 runs the same way)
        m.row("decode", f"{kind}: --jobs 2 vs --jobs 1", (two["wall_s"], two["cpu_s"]), (one["wall_s"], one["cpu_s"]),
              rep[f"{kind}_scaling"], "scaling" if kind == "count" else None,
              note="" if kind == "count" else "--jobs 1 formats on a thread of its own: both use 2 cores")
    t = rep["text --jobs 1"]
    m.row("decode", f"text --jobs 1 vs perf -F {PERF_FIELDS}", (t["wall_s"], t["cpu_s"]), (pf["wall_s"], pf["cpu_s"]),
          ratio(pf["wall_s"], t["wall_s"]), "text", cpu_ratio=ratio(pf["cpu_s"], t["cpu_s"]),
          note="perf printing the same fields")
    rep["branches"] = n
    return rep


#: --itrace modes beyond b (issue #13 item 4), each ``dump branches --count --itrace=MODE`` against ``perf script
#: --itrace=MODE > /dev/null`` on the decode trace: (letters, what they ask for)
MODES = (("i1000i", "instructions, period 1000 instructions"), ("i10us", "instructions, period 10 us"),
         ("i100t", "instructions, period 100 ticks"), ("i1000ig", "instructions with call chains"),
         ("qb", "quick decoding (branches of TIP/FUP only)"), ("bs1000", "the first 1000 samples skipped"),
         ("bZ", "timestamps ignored (a timeless decode)"))
ET_BRANCHES = 1_000_000  # the Event Trace recording's (the generator emulates it: ~0.2 M branches/s)


def count_samples_printed(cmd: list[str], cwd: Path) -> int:
    """Samples ``perf script`` prints: its lines less the call chain lines under them (a tab first)."""
    n = 0
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd) as p:
        for line in p.stdout:
            n += line[:1] != b"\t" and bool(line.strip())
    return n


def part_modes(m: Matrix, work: Path, trace: Path, tiny: bool) -> dict:
    """Item 4: every --itrace mode on the compiled path, each against perf on the same input (the
    decode trace; Event Trace on a generated recording of its own)."""
    rep: dict = {}
    runs = [(mode, what, trace) for mode, what in MODES]
    et = work / "event-trace"
    subprocess.run(["ptexport", "synth", "--out", str(et), "--program", "calls", "--branches",
                    str(WARM_BRANCHES if tiny else ET_BRANCHES), "--event-trace", "--preempt", "20000",
                    "--elf-path", "."], check=True, stdout=subprocess.DEVNULL)
    runs.append(("bI", "Event Trace: branches and interrupt events", et / "perf.data"))
    with open(os.devnull, "wb") as null:
        for mode, what, path in runs:
            cwd = path.parent
            perf_cmd = ["perf", "script", f"--itrace={mode}", "-i", str(path)]
            ours = ["ptexport", "dump", "branches", "--count", f"--itrace={mode}", str(path)]
            perf_runs, our_runs = [], []
            while True:  # alternated; where perf takes under MODE_QUICK_S (the rows near 1x), MODE_RUNS of each
                perf_runs.append(bench_decode.measure(perf_cmd, null, cwd)[:2])
                ow, oc, _, out = bench_decode.measure(ours, subprocess.PIPE, cwd)
                our_runs.append((ow, oc))
                if len(our_runs) >= MODE_RUNS or perf_runs[0][0] >= MODE_QUICK_S:
                    break
            pw, pc = (statistics.median(x) for x in zip(*perf_runs))
            ow, oc = (statistics.median(x) for x in zip(*our_runs))
            found = re.match(rb"(\d+) samples", out)
            n = int(found[1]) if found else None
            perf_n = count_samples_printed(perf_cmd, cwd)
            if n != perf_n:
                m.problems.append(f"modes: --itrace={mode}: perf printed {perf_n} samples, ptexport counted {n}")
            rep[mode] = r = {"what": what, "trace": str(path), "perf_wall_s": pw, "perf_cpu_s": pc, "wall_s": ow,
                             "cpu_s": oc, "samples": n, "perf_samples": perf_n, "ratio_to_perf": ratio(pw, ow)}
            m.row("modes", f"--itrace={mode}: {what}", (ow, oc), (pw, pc), r["ratio_to_perf"], "modes",
                  cpu_ratio=ratio(pc, oc), value=f"{n} samples",
                  note=", ".join(x for x in ("" if path == trace else f"{WARM_BRANCHES if tiny else ET_BRANCHES} branches",
                                             f"medians of {len(our_runs)} alternated runs" if len(our_runs) > 1 else "")
                                 if x))
            r["runs"] = len(our_runs)
    return rep


#: the code footprint row's program: 3,000 functions, ~45 K instructions (sample_data/src/bigcode.c)
BIG_CODE = "bigcode"


#: the code footprint rows: the big program on one CPU, and on 4 CPUs preempted every 20 K branches (a
#: queue per CPU, each running much the same code, as a ``perf record -a`` of a machine's CPUs)
CODE_VARIANTS = (("", (), "a new block decoded every ~100 branches"),
                 ("4 CPUs", ("--cpus", "4", "--preempt", "20000"), "a queue per CPU, the same code on each"))


def part_code(m: Matrix, work: Path, branches: int) -> dict:
    """A trace whose program is big (``bigcode``: ~45 K instructions against a few hundred for ``calls``):
    every new block is decoded on the way, as in a real recording of a program, its libraries and the
    kernel; and the same program on 4 CPUs.  ``dump branches --count`` with ``--jobs 1`` and ``--jobs
    2`` against ``perf script --itrace=b``, the counts checked against perf's."""
    rep: dict = {"branches": branches, "program": BIG_CODE}
    for name, extra, what in CODE_VARIANTS:
        trace = bench_decode.generate(work / ("code" + (f"-{extra[1]}cpus" if extra else "")), branches, BIG_CODE,
                                      extra)
        cwd = trace.parent
        part = rep if not name else rep.setdefault(name, {"branches": branches, "options": list(extra)})
        with open(os.devnull, "wb") as null:
            pw, pc, _, _ = bench_decode.measure(["perf", "script", "--itrace=b", "-i", str(trace)], null, cwd)
        perf_n = count_lines(["perf", "script", "--itrace=b", "--ns", "-F", PERF_FIELDS, "-i", str(trace)], cwd)
        part["perf"] = {"wall_s": pw, "cpu_s": pc, "branches": perf_n}
        for j in (1, 2):
            cmd = ["ptexport", "dump", "branches", "--count", "--jobs", str(j), str(trace)]
            wall, cpu, _, out = bench_decode.measure(cmd, subprocess.PIPE, cwd)
            found = re.match(rb"(\d+) samples", out)
            n = int(found[1]) if found else None
            if n != perf_n:
                m.problems.append(f"code footprint{' ' + name if name else ''}: perf printed {perf_n} branches, "
                                  f"ptexport --jobs {j} counted {n}")
            part[f"jobs {j}"] = r = {"wall_s": wall, "cpu_s": cpu, "branches": n, "ratio_to_perf": ratio(pw, wall)}
            m.row("code", f"{BIG_CODE} (45 K insns){' on ' + name if name else ''}: --count --jobs {j} vs perf",
                  (wall, cpu), (pw, pc), r["ratio_to_perf"], "modes", cpu_ratio=ratio(pc, cpu),
                  value=f"{perf_n} branches", note=what if j == 1 else "")
    return rep


def part_scaling(m: Matrix, work: Path, branches: int, startup_s: float | None = None) -> dict:
    """``dump branches --count`` with ``--jobs 2`` against ``--jobs 1`` on a trace big enough that the
    start-up both pay (the row above: imports, numba's cache) does not hide the decoder's scaling."""
    trace = bench_decode.generate(work / "scale", branches, "calls")
    rep: dict = {"runs": SCALE_RUNS}
    # alternated, the median of each: --jobs 2 runs on both cores of a shared machine, and one run of it
    # moved by a third from the next (40 M branches: 5.9 s, then 7.9 s)
    runs: dict[int, list[tuple[float, float, int | None]]] = {1: [], 2: []}
    for _ in range(SCALE_RUNS):
        for j in (1, 2):
            cmd = decode_cmds(trace)[f"count --jobs {j}"][0]
            wall, cpu, _rss, out = bench_decode.measure(cmd, subprocess.PIPE, trace.parent)
            found = re.match(rb"(\d+) samples", out)
            runs[j].append((wall, cpu, int(found[1]) if found else None))
    for j, rs in runs.items():
        walls, cpus, counts = zip(*rs)
        rep[f"jobs {j}"] = {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
                            "walls_s": list(walls), "branches": counts[0] if len(set(counts)) == 1 else None}
    one, two = rep["jobs 1"], rep["jobs 2"]
    counted = {j: sorted({r[2] for r in rs}, key=str) for j, rs in runs.items()}
    if len({c for cs in counted.values() for c in cs}) != 1 or None in counted[1]:
        m.problems.append(f"scaling: --jobs 1 counted {counted[1]}, --jobs 2 {counted[2]}")
    rep["scaling"] = ratio(one["wall_s"], two["wall_s"])
    note = f"{one['branches']} branches; medians of {SCALE_RUNS} alternated runs"
    if startup_s is not None and two["wall_s"] > startup_s:
        # the same less the start-up row's figure (imports, numba's cache: one process's in both)
        rep["startup_s"] = startup_s
        rep["scaling_after_startup"] = ratio(one["wall_s"] - startup_s, two["wall_s"] - startup_s)
        note += f"; {rep['scaling_after_startup']:.2f}x after the start-up ({startup_s:.2f} s)"
    m.row("decode", f"count at {branches / 1e6:g} M: --jobs 2 vs 1", (two["wall_s"], two["cpu_s"]),
          (one["wall_s"], one["cpu_s"]), rep["scaling"], "scaling", note=note)
    return rep


#: the multi-queue scaling rows (issue #13 item 3): a multi-threaded program's recording with a queue per
#: CPU (perf record -a) and with a queue per thread (perf record --per-thread), (name, synth options)
QUEUE_LAYOUTS = (("4 CPUs", ("--cpus", "4", "--preempt", "20000")), ("per thread", ("--per-thread",)))
QUEUE_RUNS = 3


def part_queues(m: Matrix, work: Path, branches: int) -> dict:
    """``dump branches --count`` with ``--jobs 2`` against ``--jobs 1`` on recordings of several AUX
    queues (the ``threads`` program: 4 threads), a queue per CPU and a queue per thread: the queues (and
    their PSB segments) are the work units shared between this process and the workers."""
    rep: dict = {"branches": branches, "runs": QUEUE_RUNS}
    for name, extra in QUEUE_LAYOUTS:
        trace = bench_decode.generate(work / ("queues-" + name.replace(" ", "-")), branches, "threads",
                                      (*extra, "--replay", "off"))
        runs: dict[int, list[tuple[float, float, int | None]]] = {1: [], 2: []}
        for _ in range(QUEUE_RUNS):
            for j in (1, 2):
                cmd = ["ptexport", "dump", "branches", "--count", "--jobs", str(j), str(trace)]
                wall, cpu, _rss, out = bench_decode.measure(cmd, subprocess.PIPE, trace.parent)
                found = re.match(rb"(\d+) samples", out)
                runs[j].append((wall, cpu, int(found[1]) if found else None))
        part: dict = {"options": list(extra)}
        for j, rs in runs.items():
            walls, cpus, counts = zip(*rs)
            part[f"jobs {j}"] = {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
                                 "walls_s": list(walls), "branches": counts[0] if len(set(counts)) == 1 else None}
        counted = {c for rs in runs.values() for _w, _c, c in rs}
        if len(counted) != 1 or None in counted:
            m.problems.append(f"queues ({name}): --jobs 1 and 2 counted {sorted(counted, key=str)}")
        one, two = part["jobs 1"], part["jobs 2"]
        part["scaling"] = ratio(one["wall_s"], two["wall_s"])
        rep[name] = part
        m.row("decode", f"count, threads on {name}: --jobs 2 vs 1", (two["wall_s"], two["cpu_s"]),
              (one["wall_s"], one["cpu_s"]), part["scaling"], "scaling",
              note=f"{one['branches']} branches, a queue per {'CPU' if 'CPUs' in name else 'thread'}; "
                   f"medians of {QUEUE_RUNS} alternated runs")
    return rep


def part_export(m: Matrix, trace: Path, work: Path) -> dict:
    cwd = trace.parent
    perf_db = work / "perf.db"
    perf_db.unlink(missing_ok=True)
    pw, prss, pcpu = bench_export.timed(["perf", "script", "-i", str(trace), "--itrace=bep", "-s", PERF_EXPORTER,
                                         str(perf_db), "branches", "calls"], env=perf_env(), cwd=cwd)
    n_perf = bench_export.count_samples(perf_db)
    rep: dict = {"perf": {"wall_s": pw, "cpu_s": pcpu, "peak_rss_kib": prss, "samples": n_perf,
                          "db_bytes": perf_db.stat().st_size}}
    m.row("export", "perf export-to-sqlite.py branches calls", (pw, pcpu), None, None,
          value=f"{prss / 1024:.0f} MiB RSS")
    for j in (1, 2):
        db = work / f"ours-j{j}.sqlite"
        db.unlink(missing_ok=True)
        wall, rss, cpu = bench_export.timed(export_cmd(trace, db, j), cwd=cwd)
        n = bench_export.count_samples(db)
        if n != n_perf:
            m.problems.append(f"export --jobs {j}: {n} samples, perf's exporter {n_perf}")
        rep[f"jobs {j}"] = r = {"wall_s": wall, "cpu_s": cpu, "peak_rss_kib": rss, "samples": n,
                                "db_bytes": db.stat().st_size, "ratio_to_perf": ratio(pw, wall),
                                "ratio_cpu_to_perf": ratio(pcpu, cpu)}
        m.row("export", f"ptexport --db --jobs {j} vs perf", (wall, cpu), (pw, pcpu), r["ratio_to_perf"], "export",
              cpu_ratio=r["ratio_cpu_to_perf"], value=f"{n / wall / 1e3:.0f} K samples/s")
        m.row("export", f"ptexport --db --jobs {j}: peak RSS MiB", None, None, rss / 1024, "rss",
              note=f"perf's {prss / 1024:.0f} MiB; largest one process")
    one, two = rep["jobs 1"], rep["jobs 2"]
    rep["scaling"] = ratio(one["wall_s"], two["wall_s"])
    m.row("export", "ptexport --db: --jobs 2 vs --jobs 1", (two["wall_s"], two["cpu_s"]), (one["wall_s"], one["cpu_s"]),
          rep["scaling"], "export_scaling",
          note=f"--jobs 1 decodes on a thread of its own: {one['cpu_s'] / one['wall_s']:.2f} cores busy")
    print(f"export: {n_perf} samples (perf), ptexport " + ", ".join(
        f"--{k} {rep[k]['samples']}" for k in ("jobs 1", "jobs 2")))
    return rep


def part_memory(m: Matrix, work: Path, branches: int) -> dict:
    """The export's peak RSS at 1 M branches and at ``branches`` (100 M by default: the issue's "flat from
    1 M to 100 M"), each a trace of the generator's calls program, the database written and removed."""
    rep: dict = {}
    sizes = sorted({min(FLAT_BASE, max(1, branches // 10)), branches})
    for n in sizes:
        trace = bench_decode.generate(work / "memory", n, "calls")
        db = trace.parent / "export.sqlite"
        db.unlink(missing_ok=True)
        wall, rss, cpu = bench_export.timed(export_cmd(trace, db, None), cwd=trace.parent)
        rep[str(n)] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_kib": rss, "samples": bench_export.count_samples(db)}
        db.unlink()
        shutil.rmtree(trace.parent)
        m.row("memory", f"ptexport --db at {n / 1e6:g} M branches: peak RSS MiB", None, None, rss / 1024, "rss",
              note=f"{rep[str(n)]['samples']} samples in {wall:.0f} s")
    if len(sizes) == 2:
        lo, hi = (rep[str(n)]["peak_rss_kib"] for n in sizes)
        rep["growth"] = ratio(hi, lo)
        m.row("memory", f"peak RSS at {sizes[1] / 1e6:g} M vs {sizes[0] / 1e6:g} M branches", None, None,
              rep["growth"], "flat", note=f"{sizes[1] // sizes[0]}x the branches")
    return rep


def table_rows(db: Path, table: str) -> int:
    """Rows of ``table`` in the SQLite database ``db`` (id 0, perf's "unknown" row, included)."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def part_vm(m: Matrix, work: Path, branches: int) -> dict:
    inj, meta = bench_vm.prepare(work / "vm", branches, "mixed", 21)
    host = bench_decode.generate(work / "host", meta["branches"], "calls")
    rep: dict = {"vm_branches": meta["branches"], "runs": VM_RUNS}
    # alternated, the median of each: one run of a ~2 s export moves by 10-20% on a shared machine
    runs: dict[str, list[tuple[float, int, float]]] = {"vm": [], "host": []}
    # The README venv's first VM export compiles nothing (no shipped sample is a VM's: what only a VM
    # recording reaches is compiled ahead by warm-ups of its own; a compile costs its first export ~1 s)
    venv = work / "venv"
    before = cache_files(venv) if venv.is_dir() else None
    for k in range(VM_RUNS):
        for name, trace in (("vm", inj), ("host", host)):
            db = trace.parent / "export.sqlite"
            db.unlink(missing_ok=True)
            runs[name].append(bench_export.timed(export_cmd(trace, db, None), cwd=trace.parent))
            if k == 0 and name == "vm" and before is not None:
                written = sorted(Path(f).name for f, t in cache_files(venv).items() if before.get(f) != t)
                rep["numba_cache_files_written_first_vm"] = len(written)
                if written:
                    m.problems.append(f"VM export: the README venv's first one compiled {', '.join(written)}")
    for name, trace in (("vm", inj), ("host", host)):
        walls, rsss, cpus = zip(*runs[name])
        db = trace.parent / "export.sqlite"
        rep[name] = {"trace": str(trace), "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
                     "walls_s": list(walls), "peak_rss_kib": max(rsss), "samples": bench_export.count_samples(db),
                     "calls": table_rows(db, "calls"), "call_paths": table_rows(db, "call_paths")}
    v, h = rep["vm"], rep["host"]
    per = {k: (v[k] / v["samples"], h[k] / h["samples"]) for k in ("wall_s", "cpu_s")}
    rep["ratio_per_sample"] = ratio(*per["wall_s"])
    rep["ratio_cpu_per_sample"] = ratio(*per["cpu_s"])
    print(f"VM export: {v['samples']} samples (guest sideband injected) in {v['wall_s']:.2f} s; host-only "
          f"{h['samples']} samples in {h['wall_s']:.2f} s")
    m.row("vm", "VM (mixed) export vs host-only, per sample", (v["wall_s"], v["cpu_s"]), (h["wall_s"], h["cpu_s"]),
          rep["ratio_per_sample"], "vm", cpu_ratio=rep["ratio_cpu_per_sample"],
          note=f"{v['samples']} vs {h['samples']} samples, {v['call_paths']} vs {h['call_paths']} call paths; "
               f"medians of {VM_RUNS} alternated runs")
    return rep


def raw_run(cmd: list[str], warm: bool) -> tuple[float, float, int, int]:
    """(wall, CPU, instructions, error lines) of ``dump insns --raw ... --stat``; ``warm``: run once before."""
    if warm:
        bench_rawdump.timed(cmd)
    wall, cpu, text = bench_rawdump.timed(cmd)
    found = re.search(r"insn:\s*(\d+)", text)
    if not found:
        raise SystemExit(f"bench_matrix: no 'insn:' line from {' '.join(cmd)}")
    errors = sum(1 for line in text.splitlines() if line.startswith("[") and "error" in line)
    return wall, cpu, int(found[1]), errors


def part_raw(m: Matrix, work: Path, branches: int, hot_branches: int, tiny: bool) -> dict:
    p = bench_rawdump.PTXED
    ptxed_rate = p["insns"] / p["seconds"]
    ptexport = ["ptexport", "dump", "insns", "--quiet", "--stat"]
    rep: dict = {"ptxed": dict(p)}
    real = SIMPLEPT / "ptout.0"
    if real.is_file():
        raw = real
        if tiny:  # a slice: the command and its parsing checked, in seconds
            raw = work / "simplept-slice.pt"
            raw.write_bytes(real.read_bytes()[:TINY_RAW_SLICE])
        share = raw.stat().st_size / real.stat().st_size
        wall, cpu, insns, errors = raw_run([*ptexport, "--raw", str(raw), "--cpu", SIMPLEPT_CPU], not tiny)
        ref = p["seconds"] * share
        rep["simplept"] = {"bytes": raw.stat().st_size, "wall_s": wall, "cpu_s": cpu, "insns": insns,
                           "error_lines": errors, "ptxed_s": ref, "ratio": ratio(ref, wall),
                           "ratio_cpu": ratio(ref, cpu)}
        m.row("raw", f"simplept-adl {raw.stat().st_size >> 10} KiB, no image: time", (wall, cpu), (ref, ref),
              ratio(ref, wall), "raw", cpu_ratio=ratio(ref, cpu),
              note=f"{insns} insns, {errors} errors (binary not carried; ptxed: 234.6 M insns)")
    else:
        rep["simplept"] = {"skipped": f"{real} not found"}
        m.row("raw", "simplept-adl", None, None, None, note=f"skipped: {real} not found")
    # the loop-heavy shape the issue names (compute loops: one TNT bit per ~33 instructions), and
    # the branch-heavy one (calls: ~5 instructions per branch) for reference
    for key, program, n, extra in (("generated", "hotloop", hot_branches, ("--tnt", "long", "--timing", "tsc")),
                                   ("generated_calls", "calls", branches, ())):
        raw, elf = bench_rawdump.make_raw(work / f"raw-{program}", n, 3, program, extra)
        wall, cpu, insns, errors = raw_run([*ptexport, "--raw", str(raw), "--image", f"{elf}:0"], not tiny)
        if errors:
            m.problems.append(f"raw: {errors} decode errors on the generated raw trace ({program})")
        rep[key] = {"program": program, "bytes": raw.stat().st_size, "wall_s": wall, "cpu_s": cpu, "insns": insns,
                    "error_lines": errors, "insns_per_s": insns / wall,
                    "ratio": ratio(insns / wall, ptxed_rate), "ratio_cpu": ratio(insns / cpu, ptxed_rate)}
        m.row("raw", f"generated {program} {raw.stat().st_size / 1e6:.2f} MB + ELF: insns/s", (wall, cpu), None,
              rep[key]["ratio"], "raw" if program == "hotloop" else None, cpu_ratio=rep[key]["ratio_cpu"],
              value=f"{insns / wall / 1e6:.1f} M insns/s",
              note=f"{insns} insns ({insns / raw.stat().st_size:.0f}/byte); ptxed {ptxed_rate / 1e6:.0f} M/s")
    return rep


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="See the module docstring (python3 -m pydoc bench/bench_matrix.py) for what "
                                        "each part runs.")
    ap.add_argument("--branches", type=parse_count, default=10_000_000,
                    help="branches of the decode and export trace (default 10M; k/M suffixes)")
    ap.add_argument("--first-branches", type=parse_count, default=1_000_000,
                    help="branches of the trace run first in the fresh venv (default 1M; the decode trace when "
                         "equal to --branches)")
    ap.add_argument("--vm-branches", type=parse_count, default=1_000_000,
                    help="branches of the VM trace and of its host-only twin (default 1M)")
    ap.add_argument("--hot-branches", type=parse_count, default=12_000_000,
                    help="branches of the loop-heavy generated raw dump (default 12M: about 2 MB, ~370 M "
                         "instructions, the shape of ptxed's reference trace)")
    ap.add_argument("--raw-branches", type=parse_count, default=2_000_000,
                    help="branches of the generated raw dump (default 2M: about 2 MB, ptxed's input size)")
    ap.add_argument("--scale-branches", type=parse_count, default=40_000_000,
                    help="branches of the trace the decoder's --jobs 2 / --jobs 1 scaling is also measured on "
                         "(default 40M; 0: only on --branches)")
    ap.add_argument("--queue-branches", type=parse_count, default=10_000_000,
                    help="branches of the two multi-queue recordings (4 threads: a queue per CPU, a queue per "
                         "thread) whose --jobs 2 / --jobs 1 scaling is measured (default 10M: ~70 s to generate "
                         "each; 0: skip)")
    ap.add_argument("--rss-branches", type=parse_count, default=100_000_000,
                    help="branches of the trace whose export's peak RSS is compared with 1M's (default 100M: "
                         "minutes, ~7 GB of SQLite written and removed; 0: skip)")
    ap.add_argument("--code-branches", type=parse_count, default=1_000_000,
                    help=f"branches of the big program's trace ({BIG_CODE}: ~45 K instructions; default 1M)")
    ap.add_argument("--skip-venv", action="store_true", help="skip the fresh install (part 1: minutes)")
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"branches": 20_000, "scale_branches": 30_000, "rss_branches": 30_000,
                                 "queue_branches": 20_000,
                                 "code_branches": WARM_BRANCHES,
                                 "vm_branches": WARM_BRANCHES, "raw_branches": WARM_BRANCHES,
                                 "hot_branches": WARM_BRANCHES,
                                 "skip_venv": True})
    need_perf(ap, exporter=True)
    sys.stdout.reconfigure(line_buffering=True)  # in order with the generators' lines on stderr
    with one_line_errors(ap), workdir(args.keep, "bench_matrix.") as work:
        return run(args, work)


def run(args: argparse.Namespace, work: Path) -> int:
    m = Matrix()
    t0 = time.perf_counter()
    for name in RUN_FILES:  # --keep DIR with --force: this run's files are replaced, nothing else
        path = work / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
    load = [os.getloadavg()[0]]
    report: dict = {"branches_asked": args.branches, "cores": os.cpu_count(), "tiny": bool(args.tiny)}
    trace = bench_decode.generate(work / "decode", args.branches, "calls")
    if args.skip_venv:
        report["venv"] = {"skipped": True}
    else:
        first = trace if args.first_branches == args.branches else \
            bench_decode.generate(work / "first", args.first_branches, "calls")
        report["venv"] = part_venv(m, work, first, args.first_branches)
        os.environ[EXE_ENV] = str(work / "venv" / "bin" / "ptexport")  # every later row measures the README's install
    report["measured"] = measured(["ptexport"])[0]
    print(f"measured: {report['measured']}")
    if not args.tiny:
        report["startup"] = warm_up(m, work)
    report["decode"] = part_decode(m, trace)
    report["modes"] = part_modes(m, work, trace, args.tiny)
    report["code"] = part_code(m, work, args.code_branches)
    if args.scale_branches:
        report["scaling"] = part_scaling(m, work, args.scale_branches,
                                         report["startup"]["wall_s"] if "startup" in report else None)
    if args.queue_branches:
        report["queues"] = part_queues(m, work, args.queue_branches)
    report["export"] = part_export(m, trace, work)
    report["vm"] = part_vm(m, work, args.vm_branches)
    if args.rss_branches:
        report["memory"] = part_memory(m, work, args.rss_branches)
    report["raw"] = part_raw(m, work, args.raw_branches, args.hot_branches, args.tiny)
    load.append(os.getloadavg()[0])
    print()
    print(f"matrix: {report['decode']['branches']} branches (decode, export), {report['vm']['vm_branches']} (VM), "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at the start and {load[1]:.1f} at the end, "
          f"{time.perf_counter() - t0:.0f} s in all; ratios > 1 mean ptexport is faster, except first run, VM "
          f"and RSS" + (" (--tiny: the figures measure start-up, not throughput)" if args.tiny else ""))
    m.print()
    for p in m.problems:
        print(f"PROBLEM: {p}")
    report.update(load_average=load, rows=m.rows, problems=m.problems,
                  targets_missed=[r["what"] for r in m.rows if r["met"] is False])
    write_json(args.json, report)
    return 1 if m.problems else 0


if __name__ == "__main__":
    sys.exit(main())
