"""Every bench/ and scripts/ tool, run at its tiny size: it still works against today's code and schema,
its report is sane, and it never overwrites an output the user named without --force.

Each tool runs as the user runs it (``python3 bench/NAME.py ...``, a separate process).  For each:

* refused: an output path that exists (a sentinel file or folder) makes it exit 2 with one line on
  stderr, before any work, and the sentinel is untouched;
* replaced: the tiny run with ``--force`` over the same sentinel exits 0 and writes a fresh report
  (``--json``), whose keys, counts and ratios are checked.

The tools that compare with perf are skipped without perf (CI installs it).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import struct
import subprocess
import sys
from numbers import Real
from pathlib import Path

import pytest
from ptxtest import HAVE_PERF, QUIPPER, REPO, needs_perf

PERF_EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"

BENCH = REPO / "bench"
SENTINEL = "the user's file: must survive a run without --force\n"
TIMEOUT = 600


def run_tool(tool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python3 TOOL ARGS`` in ``cwd``, its temporary files in ``cwd/tmp`` (checked empty afterwards)."""
    tmp = cwd / "tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TMPDIR=str(tmp))
    r = subprocess.run([sys.executable, str(REPO / tool), *args], cwd=cwd, capture_output=True, text=True,
                       timeout=TIMEOUT, env=env)
    assert not list(tmp.iterdir()), f"{tool} left temporary files: {sorted(p.name for p in tmp.iterdir())}"
    return r


def sentinel(path: Path) -> Path:
    path.write_text(SENTINEL)
    return path


def assert_refused(r: subprocess.CompletedProcess, path: Path) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "already exists" in lines[0] and "--force" in lines[0] and path.name in lines[0], lines[0]
    assert r.stdout == "", "a refused run must not start working"


def assert_ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]


def is_number(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool) and v == v  # not NaN


def positive(v) -> bool:
    return is_number(v) and v > 0


def refused_then_forced(tool: str, tiny: list[str], tmp_path: Path) -> dict:
    """Run ``tool`` over an existing --json file: refused, then replaced with --force; its report."""
    report = sentinel(tmp_path / "report.json")
    r = run_tool(tool, *tiny, "--json", str(report), cwd=tmp_path)
    assert_refused(r, report)
    assert report.read_text() == SENTINEL
    r = run_tool(tool, *tiny, "--json", str(report), "--force", cwd=tmp_path)
    assert_ok(r)
    data = json.loads(report.read_text())
    assert isinstance(data, dict) and data
    return data


# ---------------------------------------------------------------- bench/ tools with perf


@pytest.mark.slow
@needs_perf
def test_bench_decode(tmp_path):
    rep = refused_then_forced("bench/bench_decode.py", ["--tiny"], tmp_path)
    assert rep["branches"] > 1000  # --tiny asks 2000; the generator's program rounds up
    for who in ("perf", "ptexport"):
        assert positive(rep[who]["wall_s"]) and positive(rep[who]["branches_per_s"])
        assert positive(rep[who]["peak_rss_bytes"])
    assert positive(rep["ratio_wall"]) and positive(rep["ratio_cpu"])
    assert rep["ratio_wall"] == pytest.approx(rep["perf"]["wall_s"] / rep["ptexport"]["wall_s"])


@pytest.mark.slow
@needs_perf
def test_bench_export_keep_dir(tmp_path):
    """--keep DIR: refused when DIR exists; with --force the run's files in it are replaced, others kept."""
    keep = tmp_path / "kept"
    keep.mkdir()
    other = sentinel(keep / "notes.txt")
    old_db = sentinel(keep / "ours.sqlite")
    r = run_tool("bench/bench_export.py", "--tiny", "--keep", str(keep), cwd=tmp_path)
    assert_refused(r, keep)
    assert old_db.read_text() == SENTINEL and sorted(p.name for p in keep.iterdir()) == ["notes.txt", "ours.sqlite"]
    report = tmp_path / "export.json"
    r = run_tool("bench/bench_export.py", "--tiny", "--keep", str(keep), "--json", str(report), "--force",
                 cwd=tmp_path)
    assert_ok(r)
    assert other.read_text() == SENTINEL
    rep = json.loads(report.read_text())
    assert set(rep["runs"]) == {"perf", "ptexport"}
    n = rep["samples"]
    assert n > 1000 and rep["runs"]["perf"]["samples"] == n == rep["runs"]["ptexport"]["samples"]
    for run in rep["runs"].values():
        assert positive(run["wall_s"]) and positive(run["db_bytes_per_sample"]) and positive(run["peak_rss_kib"])
    assert set(rep["ratios"]) >= {"speed", "db_size", "peak_rss", "cpu"}
    assert all(positive(v) for v in rep["ratios"].values()), rep["ratios"]
    # the kept folder holds what the run made, and the database is a real, complete export
    assert {"perf.data", "perf.db", "ours.sqlite", "perf.json"} <= {p.name for p in keep.iterdir()}
    con = sqlite3.connect(keep / "ours.sqlite")
    try:
        assert con.execute("SELECT COUNT(*) FROM samples WHERE id > 0").fetchone()[0] == n
        assert con.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1
    finally:
        con.close()
    # a later --skip-perf run on the kept trace takes perf's figures from the perf.json beside it
    before = {p.name: p.stat().st_mtime_ns for p in keep.iterdir() if p.is_file()}
    again = tmp_path / "again.json"
    r = run_tool("bench/bench_export.py", "--file", str(keep / "perf.data"), "--skip-perf", "--json", str(again),
                 cwd=tmp_path)
    assert_ok(r)
    assert "perf (earlier run)" in r.stdout and "speed ratio ptexport/perf" in r.stdout
    rep = json.loads(again.read_text())
    assert rep["perf_from_earlier_run"] is True and rep["samples"] == n and positive(rep["ratios"]["speed"])
    assert {p.name: p.stat().st_mtime_ns for p in keep.iterdir() if p.is_file()} == before  # --file: read only


@needs_perf
def test_bench_records(tmp_path):
    rep = refused_then_forced("bench/bench_records.py", ["--tiny"], tmp_path)
    assert rep["counts_equal"] is True
    assert rep["records"] == rep["perf_records"] > 1000
    assert set(rep["runs"]) == {"perf report --stats", "iter_headers", "records", "records_time_cpu"}
    for run in rep["runs"].values():
        assert is_number(run["wall_s"]) and run["wall_s"] >= 0 and positive(run["us_per_record"])
        assert run["ratio_wall"] is None or is_number(run["ratio_wall"])
    assert rep["runs"]["perf report --stats"]["ratio_wall"] == pytest.approx(1.0)


@pytest.mark.slow
@needs_perf
def test_bench_vm(tmp_path):
    rep = refused_then_forced("bench/bench_vm.py", ["--tiny"], tmp_path)
    acc = rep["acceptance"]
    assert acc["mismatching_lines"] == 0
    assert acc["perf_samples"] == acc["ptexport_samples"] == rep["generated_branches"] > 1000
    assert 0 < acc["perf_guest_samples"] < acc["perf_samples"]  # mixed: guest and host branches
    assert acc["perf_errors"] == acc["ptexport_errors"]
    assert rep["throughput"]["branches"] == rep["in_process"]["branches"] == rep["generated_branches"]
    assert positive(rep["throughput"]["ratio"])
    ref = rep["reference"]
    assert ref["branches"] == rep["generated_branches"]  # --tiny: the reference decoder on the same trace
    assert positive(ref["ratio"]) and positive(ref["reference_s"]) and positive(ref["compiled_s"])


@pytest.mark.slow
@needs_perf
def test_bench_matrix(tmp_path):
    """The matrix at --tiny (no fresh venv): every part ran on one input each, counts equal perf's."""
    rep = refused_then_forced("bench/bench_matrix.py", ["--tiny"], tmp_path)
    assert rep["tiny"] is True and rep["venv"] == {"skipped": True}
    assert rep["problems"] == []
    dec = rep["decode"]
    n = dec["branches"]
    assert n == dec["perf_branches"] >= 20_000  # --tiny asks 20 k; the generator's program rounds up
    assert dec["count --jobs 1"]["branches"] == dec["count --jobs 2"]["branches"] == n
    for name in ("count --jobs 1", "count --jobs 2", "text --jobs 1", "text --jobs 2"):
        run = dec[name]
        assert positive(run["wall_s"]) and positive(run["cpu_s"]) and positive(run["peak_rss_bytes"])
        assert run["ratio_to_perf"] == pytest.approx(dec["perf script --itrace=b"]["wall_s"] / run["wall_s"])
    assert dec["count_scaling"] == pytest.approx(dec["count --jobs 1"]["wall_s"] / dec["count --jobs 2"]["wall_s"])
    modes = rep["modes"]  # every other --itrace mode against perf, counts equal (checked into problems)
    assert {"i1000i", "i10us", "i100t", "i1000ig", "qb", "bs1000", "bZ", "bI"} <= set(modes)
    for mode, r in modes.items():
        assert r["samples"] == r["perf_samples"] and positive(r["wall_s"]) and positive(r["perf_wall_s"]), mode
        assert r["ratio_to_perf"] == pytest.approx(r["perf_wall_s"] / r["wall_s"])
    assert modes["i1000ig"]["samples"] == modes["i1000i"]["samples"] > 0 and modes["bI"]["samples"] > 0
    code = rep["code"]  # the big program (sample_data/src/bigcode.c): counts equal perf's both ways
    assert code["program"] == "bigcode" and code["jobs 1"]["branches"] == code["jobs 2"]["branches"] == \
        code["perf"]["branches"] >= 2000
    assert code["jobs 1"]["ratio_to_perf"] == pytest.approx(code["perf"]["wall_s"] / code["jobs 1"]["wall_s"])
    cpus = code["4 CPUs"]  # the same program on 4 CPUs: a queue each (the shared block cache's case)
    assert cpus["options"][:2] == ["--cpus", "4"]
    assert cpus["jobs 1"]["branches"] == cpus["jobs 2"]["branches"] == cpus["perf"]["branches"] >= 2000
    assert cpus["jobs 2"]["ratio_to_perf"] == pytest.approx(cpus["perf"]["wall_s"] / cpus["jobs 2"]["wall_s"])
    sc = rep["scaling"]  # the decoder's scaling on a trace of its own (--tiny: 30 k branches)
    assert sc["jobs 1"]["branches"] == sc["jobs 2"]["branches"] >= 30_000
    assert sc["scaling"] == pytest.approx(sc["jobs 1"]["wall_s"] / sc["jobs 2"]["wall_s"])
    assert len(sc["jobs 1"]["walls_s"]) == len(sc["jobs 2"]["walls_s"]) == sc["runs"] >= 3  # alternated runs' medians
    qs = rep["queues"]  # several AUX queues: a queue per CPU and a queue per thread, --jobs 1 against 2
    assert set(qs) == {"branches", "runs", "4 CPUs", "per thread"}
    for name in ("4 CPUs", "per thread"):
        q = qs[name]
        assert q["jobs 1"]["branches"] == q["jobs 2"]["branches"] >= 20_000
        assert q["scaling"] == pytest.approx(q["jobs 1"]["wall_s"] / q["jobs 2"]["wall_s"])
        assert len(q["jobs 1"]["walls_s"]) == len(q["jobs 2"]["walls_s"]) == qs["runs"] >= 3
    exp = rep["export"]
    assert exp["perf"]["samples"] == exp["jobs 1"]["samples"] == exp["jobs 2"]["samples"] >= n
    assert exp["scaling"] == pytest.approx(exp["jobs 1"]["wall_s"] / exp["jobs 2"]["wall_s"])
    for key, run in exp.items():
        if key != "scaling":
            assert positive(run["wall_s"]) and positive(run["cpu_s"]) and positive(run["peak_rss_kib"])
    vm = rep["vm"]
    assert vm["vm"]["samples"] >= vm["vm_branches"] > 1000 and vm["host"]["samples"] >= vm["vm_branches"]
    assert positive(vm["ratio_per_sample"]) and positive(vm["ratio_cpu_per_sample"])
    assert len(vm["vm"]["walls_s"]) == len(vm["host"]["walls_s"]) == vm["runs"] >= 3  # medians of alternated runs
    mem = rep["memory"]  # peak RSS at a tenth of --rss-branches (--tiny: 3 k) and at it (30 k)
    assert mem["3000"]["samples"] > 1000 and mem["30000"]["samples"] > 10 * 1000
    assert mem["growth"] == pytest.approx(mem["30000"]["peak_rss_kib"] / mem["3000"]["peak_rss_kib"])
    raw = rep["raw"]
    assert raw["generated"]["program"] == "hotloop" and raw["generated_calls"]["program"] == "calls"
    for gen in (raw["generated"], raw["generated_calls"]):
        assert gen["insns"] > 1000 and gen["error_lines"] == 0 and positive(gen["insns_per_s"]) and positive(gen["ratio"])
    if "skipped" not in raw["simplept"]:
        assert raw["simplept"]["bytes"] == 128 << 10 and positive(raw["simplept"]["ratio"])
    # the table: every part, each target judged on its figure, and the figures are the runs'
    rows = rep["rows"]
    assert {r["part"] for r in rows} == {"decode", "modes", "code", "export", "vm", "memory", "raw"}
    judged = [r for r in rows if r["target"]]
    assert len(judged) >= 10 and all(isinstance(r["met"], bool) and is_number(r["ratio"]) for r in judged)
    assert rep["targets_missed"] == [r["what"] for r in judged if not r["met"]]
    scaling = next(r for r in rows if r["what"] == "count: --jobs 2 vs --jobs 1")
    assert scaling["ratio"] == dec["count_scaling"] and scaling["target"] == ">= 1.7x"
    assert scaling["met"] is (dec["count_scaling"] >= 1.7)
    for name in ("4 CPUs", "per thread"):
        row = next(r for r in rows if r["what"] == f"count, threads on {name}: --jobs 2 vs 1")
        assert row["ratio"] == qs[name]["scaling"] and row["met"] is (qs[name]["scaling"] >= 1.7)
    row = next(r for r in rows if r["what"] == "ptexport --db: --jobs 2 vs --jobs 1")
    assert row["ratio"] == exp["scaling"] and row["target"] == ">= 1.4x"


@pytest.mark.slow
@pytest.mark.postgres
@needs_perf
def test_bench_postgres(tmp_path):
    """perf's export-to-postgresql.py, ptexport (logged and unlogged load) and psql's COPY of the same rows
    (one stream, parallel, parallel + keys) on one tiny trace: the same samples in every database."""
    if not _postgres_up():
        pytest.skip("no PostgreSQL server on 127.0.0.1:5432")
    rep = refused_then_forced("bench/bench_postgres.py", ["--tiny"], tmp_path)
    assert rep["tiny"] is True and rep["problems"] == []
    (size,) = rep["sizes"].values()
    assert size["branches_asked"] == 20_000
    runs = size["runs"]
    assert set(runs) == {"perf export-to-postgresql.py", "ptexport", "ptexport, unlogged load + SET LOGGED",
                         "ceiling: psql COPY, one stream", "ceiling: psql COPY, parallel",
                         "ceiling: psql COPY, parallel + keys"}
    assert {r["samples"] for r in runs.values()} == {size["samples"]} and size["samples"] >= 20_000
    for r in runs.values():
        assert positive(r["wall_s"]) and is_number(r["cpu_s"]), r
    assert 0 < size["ceiling_keys_s"] < runs["ceiling: psql COPY, parallel + keys"]["wall_s"]
    assert size["copy_file_bytes"] > 100 * size["samples"]  # about 250 bytes a sample row in binary COPY
    rt = size["ratios"]
    assert rt["perf_over_ptexport"] == pytest.approx(runs["perf export-to-postgresql.py"]["wall_s"]
                                                     / runs["ptexport"]["wall_s"])
    assert rt["ptexport_over_ceiling"] == pytest.approx(runs["ptexport"]["wall_s"]
                                                        / runs["ceiling: psql COPY, parallel + keys"]["wall_s"])
    # every database of the run is gone
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres") as c:
        left = c.execute("SELECT datname FROM pg_database WHERE datname LIKE 'bench_pg_%'").fetchall()
    assert left == []


@pytest.mark.slow
@pytest.mark.postgres
def test_bench_viewer_postgres(tmp_path):
    """--postgres URL: the database written there by the writer, measured, kept; refused without --force."""
    if not _postgres_up():
        pytest.skip("no PostgreSQL server on 127.0.0.1:5432")
    import uuid

    import psycopg

    name = f"ptx_bench_viewer_{uuid.uuid4().hex[:8]}"
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    admin = psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True)
    try:
        admin.execute(f'CREATE DATABASE "{name}"')  # the user's database: refused without --force
        r = run_tool("bench/bench_viewer.py", "--tiny", "--postgres", url, cwd=tmp_path)
        assert r.returncode == 2 and "already exists" in r.stderr and r.stdout == "", r.stderr
        report = tmp_path / "viewer.json"
        r = run_tool("bench/bench_viewer.py", "--tiny", "--postgres", url, "--force", "--json", str(report),
                     cwd=tmp_path)
        rep = json.loads(report.read_text())
        assert r.returncode == (1 if rep["results"]["slow"] else 0), (r.stdout[-3000:], r.stderr[-3000:])
        assert "Traceback" not in r.stderr
        assert rep["dialect"] == "postgresql" and rep["samples"] == 20_000 and rep["calls"] > 1000
        m = rep["results"]["measures"]
        assert set(m) == {"queries", "qt", "perf_indexes"} and set(m["queries"]) == set(m["perf_indexes"])
        assert all(positive(x["ms"]) for part in m.values() for x in part.values())
        with psycopg.connect(url) as c:
            assert c.execute("SELECT count(*) FROM samples WHERE id > 0").fetchone()[0] == 20_000
            assert c.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 1
        left = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{name}%",)).fetchall()
        assert left == [(name,)]  # the perf-indexes copy dropped, the measured database kept
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


# ---------------------------------------------------------------- bench/ tools without perf


@pytest.mark.slow
def test_bench_rawdump(tmp_path):
    rep = refused_then_forced("bench/bench_rawdump.py", ["--tiny"], tmp_path)
    assert rep["raw_bytes"] > 1000
    dec = rep["decoders"]
    assert set(dec) == {"insn_decoder", "block_decoder"}
    assert dec["insn_decoder"]["insns"] == dec["block_decoder"]["insns"] > 1000
    assert 0 < dec["block_decoder"]["blocks"] < dec["block_decoder"]["insns"]
    for d in dec.values():
        assert d["error_lines"] == 0
        assert positive(d["insns_per_s"]) and positive(d["mb_per_s"]) and positive(d["insns_per_s_ratio_to_ptxed"])


@pytest.mark.slow
def test_bench_viewer_db(tmp_path):
    """The user's report: --db on an existing database overwrote it, then failed on the schema."""
    db = sentinel(tmp_path / "EXISTING.sqlite")
    r = run_tool("bench/bench_viewer.py", "--tiny", "--db", str(db), cwd=tmp_path)
    assert_refused(r, db)
    assert db.read_text() == SENTINEL
    report = tmp_path / "viewer.json"
    r = run_tool("bench/bench_viewer.py", "--tiny", "--db", str(db), "--json", str(report), "--force", cwd=tmp_path)
    rep = json.loads(report.read_text())
    # exit 1 means a measure took >= 1 s (a slow machine), which the report names; anything else is a failure
    assert r.returncode == (1 if rep["results"]["slow"] else 0), (r.stdout[-3000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr
    assert rep["samples"] == 20_000 and rep["calls"] > 1000 and rep["context_switches"] > 0
    m = rep["results"]["measures"]
    assert set(m) == {"queries", "qt", "perf_indexes"}
    assert set(m["queries"]) == set(m["perf_indexes"]) and len(m["queries"]) >= 10 and len(m["qt"]) == 3
    assert all(positive(x["ms"]) for part in m.values() for x in part.values())
    # the database is ptexport's own: written by its writer, current schema, the user's file replaced
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT version FROM schema_version").fetchone()[0] >= 1
        assert con.execute("SELECT COUNT(*) FROM samples WHERE id > 0").fetchone()[0] == 20_000
        assert con.execute("SELECT COUNT(*) FROM comms WHERE has_calls AND id > 0").fetchone()[0] == 4
        # every call nests in its caller, on the caller's thread, under the caller's call path
        bad = con.execute("""SELECT COUNT(*) FROM calls c JOIN calls p ON p.id = c.parent_id
                             WHERE c.parent_id > 0 AND (p.thread_id != c.thread_id OR c.call_time < p.call_time
                                   OR c.return_time > p.return_time OR p.call_path_id != c.parent_call_path_id)""")
        assert bad.fetchone()[0] == 0
        bad = con.execute("""SELECT COUNT(*) FROM samples s JOIN symbols y ON y.id = s.symbol_id
                             WHERE s.id > 0 AND s.ip - y.sym_start != s.sym_offset""")
        assert bad.fetchone()[0] == 0
    finally:
        con.close()
    # --reuse measures the existing database as it is
    r = run_tool("bench/bench_viewer.py", "--tiny", "--db", str(db), "--reuse", cwd=tmp_path)
    assert r.returncode == (1 if "SLOW" in r.stdout else 0), (r.stdout[-3000:], r.stderr[-3000:])
    assert "as it is (--reuse)" in r.stdout and "generated" not in r.stdout


@pytest.mark.slow
def test_bench_writer(tmp_path):
    rep = refused_then_forced("bench/bench_writer.py", ["--tiny"], tmp_path)
    assert rep["samples"] == 5000
    assert set(rep["sqlite"]) == {"btree", "bind"}
    for mode in rep["sqlite"].values():
        assert mode["calls"] == sum(min(2000, 5000 - b) // 3 for b in range(0, 5000, 2000))  # --batch 2000
        for key in ("samples_per_s", "rows_per_s", "ratio_to_perf", "db_bytes_per_sample",
                    "perf_layout_bytes_per_sample", "size_ratio_to_perf_layout"):
            assert positive(mode[key]), (key, mode[key])
    pg = rep["postgresql"]
    if _postgres_up():
        assert positive(pg["samples_per_s"]) and positive(pg["db_bytes_per_sample"]), pg
    else:
        assert "skipped" in pg or positive(pg["samples_per_s"])


@pytest.mark.slow
def test_bench_cookbook(tmp_path):
    rep = refused_then_forced("bench/bench_cookbook.py", ["--tiny"], tmp_path)
    assert rep["samples"] > 1000 and rep["runs"] == 1
    assert set(rep["export_s"]) == set(rep["bytes"]) == {"sqlite", "duckdb", "parquet"}
    cookbook = set(re.findall(r"<!-- query: (\w+) -->", (REPO / "docs" / "cookbook.md").read_text()))
    assert set(rep["queries"]) == set(rep["same_rows"]) == cookbook
    assert all(rep["same_rows"].values()), rep["same_rows"]
    for times in rep["queries"].values():
        assert set(times) == {"sqlite", "duckdb", "parquet"} and all(positive(t) for t in times.values())


def _postgres_up() -> bool:
    try:
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=2):
            return True
    except Exception:  # noqa: BLE001 - any failure: not reachable
        return False


# ---------------------------------------------------------------- scripts/


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
@pytest.mark.perf  # perf's export of the shared recording
def test_screenshots(tmp_path):
    pytest.importorskip("PySide6")
    out = tmp_path / "shots"
    out.mkdir()
    old = sentinel(out / "call_graph.png")
    r = run_tool("scripts/screenshots.py", "--out", str(out), cwd=tmp_path)
    assert_refused(r, old)
    assert old.read_text() == SENTINEL and [p.name for p in out.iterdir()] == ["call_graph.png"]
    # the pictures are named once, in the script: the refusal covers every one it writes
    other = sentinel(out / "tables.png")
    r = run_tool("scripts/screenshots.py", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 2 and other.read_text() == SENTINEL
    # with perf, its export of the shared recording is shot too (about a second more)
    with_perf = HAVE_PERF and QUIPPER.exists() and Path(PERF_EXPORTER).exists()
    r = run_tool("scripts/screenshots.py", "--out", str(out), "--force", *(["--perf"] if with_perf else []),
                 cwd=tmp_path)
    assert_ok(r)
    names = {p.stem for p in out.iterdir()}
    assert names == {"call_graph", "call_tree", "selected_branches_dialog", "branches", "time_chart", "flame_graph",
                     "top_calls", "sql_console", "tables"} | ({"perf_time_chart", "perf_call_graph"} if with_perf
                                                             else set())
    for p in out.iterdir():
        w, h = _png_size(p)
        assert w >= 200 and h >= 100, (p.name, w, h)
        assert p.stat().st_size > 5000, p.name  # a real picture, not a blank one


# ---------------------------------------------------------------- every tool


TOOLS = sorted([*(p.relative_to(REPO).as_posix() for p in BENCH.glob("bench_*.py")), "scripts/screenshots.py"])


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_has_force_and_help(tool, tmp_path):
    """Every tool (today's and any added later) takes --force and says so in --help."""
    r = run_tool(tool, "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--force" in r.stdout
    if tool.startswith("bench/"):
        assert "--tiny" in r.stdout and "--json" in r.stdout
        covered = {"bench_cluster", "bench_cookbook", "bench_decode", "bench_export", "bench_matrix", "bench_postgres", "bench_rawdump",
                   "bench_records", "bench_viewer", "bench_vm", "bench_writer"}
        assert Path(tool).stem in covered, f"{tool} has no tiny-size test in this file"


@pytest.mark.slow
def test_bench_cluster(tmp_path):
    """--jobs 1 / 2 / --scheduler local:2 / tcp:// on one trace, the per-unit costs and the projection; with
    a PostgreSQL server, the coordinator's COPY, the workers' loads and the exports into it too."""
    pytest.importorskip("distributed", reason="the cluster extra (pip install 'ptexport[cluster]')")
    pg = _postgres_up()
    rep = refused_then_forced("bench/bench_cluster.py",
                              ["--tiny", *(["--pg", "postgresql://postgres@127.0.0.1:5432"] if pg else [])], tmp_path)
    if pg:
        u = rep["per_unit"]
        assert positive(u["copy_pg_s"]) and positive(u["ship_pg_s"]) and positive(u["load_pg_s"])
        assert u["load_rows"] > rep["samples"] and u["load_tasks"] >= 2
        assert set(rep["postgres_wall_s"]) == {"pg_jobs1", "pg_tcp2_here", "pg_tcp2_workers", "pg_worker_loads"}
        assert rep["postgres_wall_s"]["pg_worker_loads"] >= 2
        assert {"postgres", "postgres_worker_loads"} <= set(rep["projection"])
    assert set(rep["wall_s"]) == {"jobs1", "jobs2", "local2", "tcp2", "tcp2_trees"}
    assert all(positive(v) for v in rep["wall_s"].values())
    assert len(set(rep["export_samples"].values())) == 1 and rep["samples"] > 1000
    u = rep["per_unit"]
    assert u["units"] >= 2 and positive(u["decode_s"]) and positive(u["join_merge_s"]) and positive(u["dbexport_s"])
    # --cluster-trees: the steps the workers would run, and what stays with the coordinator
    assert u["tree_steps"] >= 2 and positive(u["tree_steps_s"]) and positive(u["tree_here_s"])
    assert u["tree_stitch_s"] >= 0 and u["tree_wire_bytes"] > 0
    assert "sqlite_cluster_trees" in rep["projection"]
    p = rep["projection"]["sqlite"]
    assert 0 < p["serial_fraction"] < 1
    speedups = [p["workers"][w]["amdahl_speedup"] for w in ("8", "32", "128")]
    assert speedups == sorted(speedups) and speedups[-1] <= p["limit_speedup"] + 1e-9
