"""The batch export (export_fast) equals the per-sample one (export_ref), its oracle, table by table.

Both run over the same decoded samples, so any difference is the batch loop's:
where sideband records are applied, thread/comm ids, DSO/symbol ids in
first-reference order, kallsyms' fixed-up kernel map, payload rows, errors,
sample ids with the recording's own SAMPLE records in between.  Traces: each
kind ``ptexport synth`` makes (switches on 2 CPUs, per-thread, fork+exec,
corruption, overflows, truncation, CYC/MTC timing, power events, ptwrite,
pipe mode, kcore directory), some with other --itrace selections (timeless
``Z``, instructions, calls off), and the quipper recording (kernel and user,
cycles samples, errors) with and without kallsyms files.
"""

from __future__ import annotations

import sqlite3

import pytest

from exporttest import EXPORT_VARIANTS
from ptxtest import QUIPPER, slow_after
from ptexport.dbexport.exporter import ExportConfig
from ptexport.session.export import export_trace
from ptexport.samples.itrace import export_default, parse_itrace

_BRANCHES = "3000"
_VOLATILE = {("schema_version", "created"), ("ptexport_migrations", "applied")}

TRACES = EXPORT_VARIANTS  # tests/helpers/exporttest.py

# (trace, --itrace or None for the export default, call tree)
CASES = [(t, None, True) for t in TRACES] + [
    ("threads-2cpus-cyc", "bepZ", True),
    ("threads-per-thread-truncated", "bepZ", True),
    ("forkexec-corrupt", "bepi100", True),
    ("events-power-ptwrite", "bepwi50", False),
    ("calls-mtc-ovf", "cre", True),
]


def dump(path) -> dict[str, list[tuple]]:
    """Every table's rows in rowid order (creation timestamps blanked)."""
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {}
        for t in tables:
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            sel = ", ".join("NULL" if (t, c) in _VOLATILE else f'"{c}"' for c in cols)
            out[t] = con.execute(f'SELECT {sel} FROM "{t}" ORDER BY rowid').fetchall()
        return out
    finally:
        con.close()


def _export_both(path: str, tmp, itrace: str | None, calls: bool, kallsyms: str | None = None):
    dbs = []
    for ref in (False, True):
        db = tmp / ("ref.sqlite" if ref else "fast.sqlite")
        cfg = ExportConfig(itrace=parse_itrace(itrace) if itrace else export_default(), calls=calls, force=True,
                           kallsyms=kallsyms, reference=ref)
        export_trace(path, str(db), cfg)
        dbs.append(dump(db))
    return dbs


def _assert_equal(fast: dict, ref: dict) -> None:
    assert sorted(fast) == sorted(ref)
    for table in ref:
        assert fast[table] == ref[table], table
    assert ref["samples"], "no samples: the comparison says nothing"


@pytest.fixture(scope="module")
def trace(synth_trace):
    made: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in made:
            opts = TRACES[name]
            d = synth_trace("--branches", _BRANCHES, "--seed", "11", *opts)  # some shared with test_audit_itrace_matrix
            made[name] = str(d) if "--kcore" in opts else str(d / "perf.data")
        return made[name]

    return get


@pytest.mark.parametrize("name,itrace,calls", slow_after(CASES, unpack=True), ids=[f"{t}-{i or 'default'}{'' if c else '-nocalls'}"
                                                            for t, i, c in CASES])
def test_fast_export_equals_reference(trace, tmp_path, name, itrace, calls):
    fast, ref = _export_both(trace(name), tmp_path, itrace, calls)
    _assert_equal(fast, ref)
    if name == "forkexec-corrupt":
        assert ref["decode_errors"], "the corrupt trace must give decode errors"
    if name == "events-power-ptwrite":
        assert ref["ptwrite"] if itrace else (ref["cbr"] and ref["pwre"] and ref["exstop"])


def _kallsyms(kernel_ips: list[int], upto: int | None) -> str:
    """A kallsyms file with symbols around ``kernel_ips`` (the first ``upto`` of them)."""
    ips = sorted(kernel_ips)[:upto]
    text = 0xFFFFFFFFB9600000  # the recording's [kernel.kallsyms]_text map
    lines = [f"{text:016x} T _text"]
    for k, ip in enumerate(ips):
        if k % 3:
            lines.append(f"{ip - (0, 1, 5, 0x10)[k % 4]:016x} {'TtWt'[k % 4]} func_{k}")
    lines.append(f"{ips[-1] + 0x100:016x} T last_kernel")
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(not QUIPPER.exists(), reason="needs the quipper recording")
@pytest.mark.parametrize("kallsyms", ["none", "full", "short"])
def test_fast_export_equals_reference_on_quipper(tmp_path, kallsyms):
    ks = None
    if kallsyms != "none":
        probe = tmp_path / "probe.sqlite"
        export_trace(str(QUIPPER), str(probe), ExportConfig(itrace=export_default(), calls=False, force=True))
        con = sqlite3.connect(probe)
        ips = [r[0] & (1 << 64) - 1 for r in con.execute("SELECT ip FROM samples UNION SELECT to_ip FROM samples")]
        ips = [ip for ip in ips if ip >= 0xFFFF800000000000]
        con.close()
        ks = tmp_path / "kallsyms"
        ks.write_text(_kallsyms(ips, len(ips) // 2 if kallsyms == "short" else None))
    fast, ref = _export_both(str(QUIPPER), tmp_path, None, True, str(ks) if ks else None)
    _assert_equal(fast, ref)
    assert ref["decode_errors"] and len({r[1] for r in ref["selected_events"]}) > 2  # errors, cycles samples
