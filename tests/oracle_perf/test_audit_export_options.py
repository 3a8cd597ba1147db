"""Issue #5 item 2: export options in perf's words, each against perf's own export of the same trace.

No other test runs ``ptexport TRACE --db`` with ``--cpu``, ``--no-calls``, ``--symfs`` or ``--buildid-dir``;
here each must give the rows perf 6.1's export-to-sqlite.py writes with the matching perf script option
(``-C``, "branches" without "calls", ``--symfs``, ``perf --buildid-dir``), table for table, ids included.
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import subprocess

import pytest

from ptxtest import needs_perf, perf_python_env
from ptexport.cli import main

EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
PERF_TABLES = ["machines", "threads", "comms", "comm_threads", "dsos", "symbols", "selected_events", "samples",
               "calls", "call_paths", "context_switches", "branch_types"]


def _have_exporter() -> bool:
    if not os.path.exists(EXPORTER):
        return False
    return subprocess.run(["/usr/bin/python3", "-c", "import PySide2.QtSql"], capture_output=True).returncode == 0


pytestmark = [needs_perf, pytest.mark.skipif(not _have_exporter(), reason="perf's export-to-sqlite.py needs PySide2")]


def perf_export(trace, db, *opts: str, calls: bool = True, pre: tuple[str, ...] = ()) -> None:
    r = subprocess.run(["perf", *pre, "script", "-i", str(trace), "--itrace=bep", *opts, "-s", EXPORTER, str(db), "branches",
                        *(["calls"] if calls else [])], capture_output=True, text=True, timeout=600,
                       env=perf_python_env())
    assert r.returncode == 0, r.stderr[-2000:]


def rows(db, table: str, cols: list[str] | None = None) -> list[tuple]:
    with sqlite3.connect(db) as c:
        if cols is None:
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
        if not cols:
            return []
        q = ",".join(f'"{x}"' for x in cols)
        return [tuple(None if v == "" else v for v in r) for r in c.execute(f"SELECT {q} FROM {table} ORDER BY id")]


def assert_same(ours, theirs) -> None:
    for t in PERF_TABLES:
        with sqlite3.connect(theirs) as c:
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({t})")]
        assert rows(ours, t, cols) == rows(theirs, t, cols), t


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--branches", "20000",
                 "--seed", "12"], out=io.StringIO()) == 0
    return d


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["0", "1"])
def test_cpu_equals_perf_script_C(trace, tmp_path, cpu):
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    perf_export(trace / "perf.data", theirs, "-C", cpu)
    assert main([str(trace / "perf.data"), "--db", str(ours), "-q", "--cpu", cpu], out=io.StringIO()) == 0
    assert_same(ours, theirs)
    with sqlite3.connect(ours) as c:
        assert {r[0] for r in c.execute("SELECT DISTINCT cpu FROM samples WHERE id > 0")} == {int(cpu)}


@pytest.mark.slow
def test_no_calls_equals_perf_branches_only(trace, tmp_path):
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    perf_export(trace / "perf.data", theirs, calls=False)
    assert main([str(trace / "perf.data"), "--db", str(ours), "-q", "--no-calls"], out=io.StringIO()) == 0
    for t in ("samples", "threads", "comms", "symbols", "dsos", "branch_types"):
        assert rows(ours, t, [r[1] for r in sqlite3.connect(theirs).execute(f"PRAGMA table_info({t})")]) == \
            rows(theirs, t), t
    with sqlite3.connect(ours) as c:
        assert c.execute("SELECT COUNT(*) FROM calls WHERE id > 0").fetchone()[0] == 0
        assert c.execute("SELECT COUNT(*) FROM samples WHERE id > 0").fetchone()[0] > 10000


def _moved(trace, tmp_path):
    """The trace with its program moved away from the path its MMAP2 records name."""
    d = tmp_path / "moved"
    shutil.copytree(trace, d)
    (d / "threads").unlink()  # ptexport also looks beside perf.data; perf does not
    recorded = str(trace / "threads")  # synth names the absolute output directory
    keep = tmp_path / "threads.keep"
    shutil.move(recorded, keep)  # the recorded path no longer holds it
    return d, recorded, keep


@pytest.mark.slow
def test_symfs_equals_perf_symfs(trace, tmp_path):
    d, recorded, keep = _moved(trace, tmp_path)
    try:
        symfs = tmp_path / "symfs"
        (symfs / recorded.lstrip("/")).parent.mkdir(parents=True)
        shutil.copy(keep, symfs / recorded.lstrip("/"))
        theirs, ours, bare = tmp_path / "perf.db", tmp_path / "ours.db", tmp_path / "bare.db"
        perf_export(d / "perf.data", theirs, "--symfs", str(symfs))
        assert main([str(d / "perf.data"), "--db", str(ours), "-q", "--symfs", str(symfs)], out=io.StringIO()) == 0
        assert_same(ours, theirs)
        with sqlite3.connect(ours) as c:
            assert c.execute("SELECT COUNT(*) FROM symbols WHERE id > 0").fetchone()[0] >= 3
        # without --symfs nothing decodes: errors
        assert main([str(d / "perf.data"), "--db", str(bare), "-q"], out=io.StringIO()) == 0
        with sqlite3.connect(bare) as c:
            assert c.execute("SELECT COUNT(*) FROM decode_errors WHERE id > 0").fetchone()[0] > 0
    finally:
        shutil.move(str(keep), trace / "threads")


@pytest.mark.slow
def test_buildid_dir_equals_perf_buildid_dir(trace, tmp_path):
    d, recorded, keep = _moved(trace, tmp_path)
    try:
        bid = _build_id(keep)
        cache = tmp_path / "debug"
        target = cache / ".build-id" / bid[:2] / bid[2:]
        target.parent.mkdir(parents=True)
        shutil.copy(keep, target)
        theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
        perf_export(d / "perf.data", theirs, pre=("--buildid-dir", str(cache)))  # perf's global option
        assert main([str(d / "perf.data"), "--db", str(ours), "-q", "--buildid-dir", str(cache)],
                    out=io.StringIO()) == 0
        assert_same(ours, theirs)
        with sqlite3.connect(ours) as c:
            assert c.execute("SELECT COUNT(*) FROM symbols WHERE id > 0").fetchone()[0] >= 3
    finally:
        shutil.move(str(keep), trace / "threads")


def _build_id(path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "Build ID:" in line:
            return line.split("Build ID:")[1].strip()
    pytest.skip("the generated program has no build id")


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory):
    """Enough trace per CPU (several 64 KB segments) for --jobs to cut queues at PSBs; overflows too."""
    d = tmp_path_factory.mktemp("big")
    assert main(["synth", "--out", str(d), "--program", "threads", "--cpus", "2", "--branches", "400000",
                 "--seed", "12", "--ovf", "3", "--preempt", "5000"], out=io.StringIO()) == 0
    return d / "perf.data"


@pytest.mark.slow
def test_jobs_gives_the_same_database(big_trace, tmp_path, monkeypatch):
    """--jobs 3: queues decoded by worker processes (16 KB PSB segments), under this process or under the
    decoding child, every table equal to --jobs 1's."""
    from ptexport.session import parallel
    used = []
    real = parallel._segment_streams

    def spy(*a, **k):
        r = real(*a, **k)
        used.append(r is not None)
        return r

    monkeypatch.setattr(parallel, "_segment_streams", spy)
    monkeypatch.setattr(parallel, "MIN_SEGMENT_BYTES", 1 << 16)  # workers from 128 KB of trace (not 2 MB)
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 1 << 14)  # in 16 KB segments (not 64 KB)
    ours, child, plain = tmp_path / "ours.db", tmp_path / "child.db", tmp_path / "plain.db"
    assert main([str(big_trace), "--db", str(plain), "-q", "--jobs", "1"], out=io.StringIO()) == 0
    assert not used
    with monkeypatch.context() as m:
        m.setenv("PTEXPORT_DECODE_PROCESS", "0")  # the workers under this process (the spy sees them)
        assert main([str(big_trace), "--db", str(ours), "-q", "--jobs", "3"], out=io.StringIO()) == 0
    assert used == [True]  # the worker pool decoded it
    # as users run it: a decoding child with 2 workers of its own (the spy runs in the child)
    assert main([str(big_trace), "--db", str(child), "-q", "--jobs", "3"], out=io.StringIO()) == 0
    with sqlite3.connect(plain) as c:
        tables = [t for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if t not in ("schema_version", "ptexport_migrations")]  # these hold the time of writing
        assert c.execute("SELECT COUNT(*) FROM samples").fetchone()[0] > 300_000
        assert c.execute("SELECT COUNT(*) FROM decode_errors WHERE id > 0").fetchone()[0] > 0
    for t in tables:
        assert _all_rows(ours, t) == _all_rows(plain, t), t
        assert _all_rows(child, t) == _all_rows(plain, t), t


def _all_rows(db, table: str) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()


def test_jobs_must_be_positive(trace, tmp_path):
    err = io.StringIO()
    assert main([str(trace / "perf.data"), "--db", str(tmp_path / "x.db"), "--jobs", "0"], out=err) != 0
    assert not (tmp_path / "x.db").exists()


CHAIN_VARIANTS = {
    "threads-2cpus": ("--program", "threads", "--cpus", "2", "--branches", "20000", "--seed", "12",
                      "--psb-period", "1024"),
    "calls-deep": ("--program", "calls", "--branches", "30000", "--seed", "5", "--psb-period", "512"),
    "events-power-ptwrite": ("--program", "events", "--branches", "20000", "--seed", "3", "--power",
                             "--ptwrite", "fup", "--cbr", "20"),
    "calls-deep-g4": ("--program", "calls", "--branches", "30000", "--seed", "5", "--psb-period", "512"),
}
CHAIN_ITRACE = {"calls-deep-g4": "bepg4"}  # chains cut at 4 entries (context, ip, 3 returns); else bepg


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(CHAIN_VARIANTS))
def test_callchains_equal_perfs(tmp_path, variant):
    """--callchains: the database of perf script --itrace=bepg -s export-to-sqlite.py DB branches calls
    callchains, table for table (samples.call_path_id of psb/cbr/power/ptwrite samples, the call paths of
    their chains numbered among the calls' ones; branch samples keep 0 as in perf)."""
    d = tmp_path / "t"
    assert main(["synth", "--out", str(d), *CHAIN_VARIANTS[variant]], out=io.StringIO()) == 0
    theirs, ours = tmp_path / "perf.db", tmp_path / "ours.db"
    itrace = CHAIN_ITRACE.get(variant, "bepg")
    r = subprocess.run(["perf", "script", "-i", str(d / "perf.data"), f"--itrace={itrace}", "-s", EXPORTER, str(theirs),
                        "branches", "calls", "callchains"], capture_output=True, text=True, timeout=600,
                       env=perf_python_env())
    assert r.returncode == 0, r.stderr[-2000:]
    assert main([str(d / "perf.data"), "--db", str(ours), "-q", "--callchains", f"--itrace={itrace}"],
                out=io.StringIO()) == 0
    assert_same(ours, theirs)
    with sqlite3.connect(ours) as c:
        n, deep = c.execute("SELECT COUNT(*), MAX(p.parent_id) FROM samples s JOIN call_paths p "
                            "ON p.id = s.call_path_id WHERE s.call_path_id > 0").fetchone()
    assert n >= 4, n
    assert deep > 1  # some chains go below the root


def test_callchains_need_the_call_tree(trace, tmp_path):
    assert main([str(trace / "perf.data"), "--db", str(tmp_path / "x.db"), "-q", "--callchains", "--no-calls"],
                out=io.StringIO()) != 0
    assert not (tmp_path / "x.db").exists()
