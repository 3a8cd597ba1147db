"""IPC (insn_count/cyc_count) with a CYC threshold equals perf 6.1's (issue #14, item 2).

With ``cyc_thresh=N`` (N > 0) the hardware sends a CYC only once 2^(N-1) cycles have
passed, so not every packet that could carry a CYC has one.  perf's decoder then lets a
CYC count toward a sample's IPC only when it comes right before the packet being walked
(intel_pt_walk_trace drops ``sample_cyc`` at any other packet; a new walk starts as if
after a PAD).  Without that rule a CYC followed by an MTC, a PSB+ or the end of a walk
still counted: ptexport gave a call 25 insns / 13 cycles and its return 3 / 15 where perf
gives 0 / 0 and 28 / 28.

* the generator's ``--cyc-thresh``: the attr's config carries it, perf reads no CYC below
  the threshold, and MTCs get their CYC too (so CYC, MTC, TNT orders occur);
* the compiled decoder equals the reference one on threshold traces, and both honour the
  threshold (decoding the same queues as if it were 0 gives other cycle counts);
* ``samples`` and ``calls`` insn/cyc counts equal perf's export-to-sqlite.py over a sweep of
  thresholds, MTC periods and PSB periods (100 K branches each; 1 M in the ``slow`` test).
"""

from __future__ import annotations

import io
import re
import sqlite3
import subprocess

import numpy as np
import pytest

from decoder.test_perffast import assert_same_queues
from oracle_perf.test_export_parity import EXPORTER, needs_exporter
from ptxtest import needs_perf, perf_python_env
from ptexport.cli import main
from ptexport import jit
from ptexport.perfdata import open_perf_data
from ptexport.session import perfsession
from ptexport.session.perfsession import DecodeConfig, open_session
from ptexport.samples.itrace import parse_itrace

# id -> ptexport synth options; every one has CYC timing
SWEEP = {
    "calls-t1-mtc0-psb2k": "--program calls --cyc-thresh 1 --mtc-period 0 --psb-period 2048",
    "calls-t3-mtc3-psb8k": "--program calls --cyc-thresh 3 --mtc-period 3 --psb-period 8192",
    "loops-t2-mtc0-psb2k": "--program loops --cyc-thresh 2 --mtc-period 0 --psb-period 2048",
    "loops-t6-mtc6-psb64k": "--program loops --cyc-thresh 6 --mtc-period 6 --psb-period 65536",
    "calls-t5-mtc9-psb4k-cbr": "--program calls --cyc-thresh 5 --mtc-period 9 --psb-period 4096 --cbr 18",
}
LARGE = {
    "calls-t4-mtc3-psb4k": "--program calls --cyc-thresh 4 --mtc-period 3 --psb-period 4096",
    "loops-t1-mtc6-psb16k": "--program loops --cyc-thresh 1 --mtc-period 6 --psb-period 16384",
}


def synth(out, opts: str, branches: str) -> None:
    args = ["synth", "--out", str(out), "--branches", branches, "--seed", "3", "--timing", "cyc", *opts.split()]
    assert main(args, out=io.StringIO()) == 0


# ---------------------------------------------------------------- the generator


@needs_perf
@pytest.mark.parametrize("thresh", [0, 4])
def test_synth_cyc_threshold_holds_cycs_back(tmp_path, thresh):
    synth(tmp_path, f"--program calls --cyc-thresh {thresh} --mtc-period 0", "3000")
    data = str(tmp_path / "perf.data")
    evlist = subprocess.run(["perf", "evlist", "-v", "-i", data], capture_output=True, text=True, check=True).stdout
    config = int(re.search(r"intel_pt//\S*: .*?config: (0x[0-9a-f]+)", evlist).group(1), 16)
    assert config & 0x2 and (config >> 19) & 0xF == thresh  # cyc, cyc_thresh (config:19-22)
    dump = subprocess.run(["perf", "script", "-D", "-i", data], capture_output=True, text=True, check=True).stdout
    kinds = re.findall(r"^\.\s+[0-9a-f]+:\s+(?:[0-9a-f]{2} )+\s+(CYC 0x[0-9a-f]+|MTC|TNT|TIP)\b", dump, re.M)
    cycs = [int(k[4:], 16) for k in kinds if k.startswith("CYC")]
    assert len(cycs) > 500
    assert min(cycs) >= (1 << (thresh - 1) if thresh else 1)
    # a threshold makes MTCs CYC-eligible: some MTC has its CYC right before it
    cyc_mtc = sum(1 for a, b in zip(kinds, kinds[1:]) if a.startswith("CYC") and b == "MTC")
    assert (cyc_mtc > 50) if thresh else (cyc_mtc == 0)


def test_synth_cyc_threshold_needs_cyc_timing(tmp_path, capsys):
    assert main(["synth", "--out", str(tmp_path), "--timing", "mtc", "--cyc-thresh", "2"], out=io.StringIO()) != 0
    err = capsys.readouterr().err
    assert "--cyc-thresh needs --timing cyc" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------- both decoders


def _cyc_counts(path, threshold: int | None) -> np.ndarray:
    """The reference decoder's cyc_cnt column over all queues (``threshold`` overrides the attr's)."""
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        if threshold is not None:
            s.params.cyc_threshold = threshold
        return np.concatenate([np.asarray(s.decode_queue(q, key, bufs).cols["cyc_cnt"], dtype=np.int64)
                               for q, (key, bufs) in enumerate(s.queues())])


@pytest.mark.slow
@pytest.mark.skipif(not jit.available(), reason="numba not installed")
@pytest.mark.parametrize("opts", ["--program calls --cyc-thresh 3 --mtc-period 0 --psb-period 1024",
                                  pytest.param("--program loops --cyc-thresh 1 --mtc-period 2 --cbr 30",
                                               marks=pytest.mark.slow),
                                  pytest.param("--program threads --cpus 2 --preempt 500 --cyc-thresh 6 --mtc-period 1",
                                               marks=pytest.mark.slow)])
def test_fast_equals_reference_with_cyc_threshold(tmp_path, opts):
    synth(tmp_path, opts, "8000")
    path = tmp_path / "perf.data"
    assert assert_same_queues(path) > 7000
    ours = _cyc_counts(path, None)
    as_if_none = _cyc_counts(path, 0)
    assert len(ours) == len(as_if_none)
    # the threshold decides: fewer samples carry cycles, and their counts move to later samples
    assert (ours > 0).sum() < (as_if_none > 0).sum()
    assert ours.sum() == pytest.approx(as_if_none.sum(), rel=0.05)


def test_params_take_the_threshold_only_with_cyc(tmp_path):
    synth(tmp_path, "--program loops --cyc-thresh 5", "500")
    with open_perf_data(str(tmp_path / "perf.data")) as pd:
        assert open_session(pd, DecodeConfig(itrace=parse_itrace("be"))).params.cyc_threshold == 5

    class Attr:
        def __init__(self, config):
            self.type, self.config, self.sample_type = 8, config, 0x4

    class Info:
        pmu_type, noretcomp_bit, mtc_freq_bits, tsc_ctc_ratio_n, tsc_ctc_ratio_d = 8, 0x800, 0x3C000, 80, 1
        max_non_turbo_ratio, tsc_bit, cap_user_time_zero = 20, 0x400, 1

    def thresh(config):
        p, _ = perfsession._params(Info, [Attr(config)], "GenuineIntel,6,142,10", parse_itrace("be"), None)
        return p.cyc_threshold

    assert thresh(0x2603 | 5 << 19) == 5
    assert thresh(0x2601 | 5 << 19) == 0  # cyc off: perf ignores CycThresh
    assert thresh(0x2603) == 0


# ---------------------------------------------------------------- against perf's export


def _export_both(tmp_path_factory, variants: dict[str, str], branches: str):
    """variant -> (perf's database, ours); perf's exporters run two at a time beside ours."""
    done, procs = {}, {}
    try:
        for v, opts in variants.items():
            d = tmp_path_factory.mktemp(v)
            synth(d / "trace", opts, branches)
            while sum(p.poll() is None for p in procs.values()) >= 2:
                next(p for p in procs.values() if p.poll() is None).wait(timeout=900)
            procs[v] = subprocess.Popen(
                ["perf", "script", "-i", str(d / "trace" / "perf.data"), "--itrace=bep", "-s", EXPORTER,
                 str(d / "perf.db"), "branches", "calls"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=perf_python_env())
            assert main([str(d / "trace" / "perf.data"), "--db", str(d / "ours.db"), "-q"], out=io.StringIO()) == 0
            done[v] = (d / "perf.db", d / "ours.db")
        for v, p in procs.items():
            _, err = p.communicate(timeout=900)
            assert p.returncode == 0, f"perf's exporter failed on {v}: {err[-2000:]!r}"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    return done


def _compare(theirs, ours) -> dict[str, int]:
    con = sqlite3.connect(ours)
    try:
        con.execute("ATTACH DATABASE ? AS perf", (str(theirs),))
        one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        out = {
            "samples": one("SELECT count(*) FROM perf.samples"),
            "ipc samples": one("SELECT count(*) FROM perf.samples WHERE cyc_count > 0"),
            "calls": one("SELECT count(*) FROM perf.calls"),
        }
        assert one("SELECT count(*) FROM main.samples") == out["samples"]
        assert one("SELECT count(*) FROM main.calls") == out["calls"]
        for table, cols in (("samples", ("time", "ip", "to_ip", "branch_type")),
                            ("calls", ("call_time", "return_time", "call_path_id"))):
            differs = " OR ".join(f"a.{c} IS NOT b.{c}" for c in ("insn_count", "cyc_count", *cols))
            bad = con.execute(
                f"SELECT a.id, a.insn_count, a.cyc_count, b.insn_count, b.cyc_count FROM main.{table} a "
                f"JOIN perf.{table} b USING (id) WHERE {differs} ORDER BY a.id").fetchall()
            out[f"{table} differing"] = len(bad)
            assert not bad, f"{table}: {len(bad)} rows differ from perf's, first (id, ours insn/cyc, perf's): {bad[:3]}"
    finally:
        con.close()
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return _export_both(tmp_path_factory, SWEEP, "100k")


@pytest.mark.slow
@needs_perf
@needs_exporter
@pytest.mark.parametrize("variant", list(SWEEP))
def test_ipc_counts_equal_perf_export(sweep, variant):
    counts = _compare(*sweep[variant])
    print(f"\n{variant}: {counts}")
    assert counts["samples"] >= 100_000
    assert counts["ipc samples"] > 1000
    assert counts["calls"] > (10_000 if "calls" in variant else 0)


@needs_perf
@needs_exporter
@pytest.mark.slow
def test_ipc_counts_equal_perf_export_at_one_million_branches(tmp_path_factory):
    for variant, dbs in _export_both(tmp_path_factory, LARGE, "1M").items():
        counts = _compare(*dbs)
        print(f"\n{variant}: {counts}")
        assert counts["samples"] >= 1_000_000
        assert counts["ipc samples"] > 10_000
