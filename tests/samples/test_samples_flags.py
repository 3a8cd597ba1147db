"""perf's flag bits and names: perf 6.1 strings, checked by rule and against perf itself."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from ptexport.samples.flags import (
    PERF_BRANCH_TYPES,
    IpFlag,
    distinct_flags,
    format_flags,
    format_flags_array,
    format_flags_field,
)
from ptxtest import needs_perf

B, C, R, O = IpFlag.BRANCH, IpFlag.CALL, IpFlag.RETURN, IpFlag.CONDITIONAL
S, Y, I, A = IpFlag.SYSCALLRET, IpFlag.ASYNC, IpFlag.INTERRUPT, IpFlag.TX_ABORT
TB, TE, X = IpFlag.TRACE_BEGIN, IpFlag.TRACE_END, IpFlag.IN_TX


def test_bit_values_are_perf_abi():
    assert [int(f) for f in IpFlag] == [1 << i for i in range(15)]
    assert int(IpFlag.VMEXIT) == 4096 and int(IpFlag.INTR_TOGGLE) == 16384


@pytest.mark.parametrize(
    "flags,text",
    [
        (B | C, "call".ljust(15) + "".rjust(6)),
        (B | R, "return".ljust(15) + "".rjust(6)),
        (B | O, "jcc".ljust(15) + "".rjust(6)),
        (B, "jmp".ljust(15) + "".rjust(6)),
        (B | C | I, "int".ljust(15) + "".rjust(6)),
        (B | R | I, "iret".ljust(15) + "".rjust(6)),
        (B | C | S, "syscall".ljust(15) + "".rjust(6)),
        (B | R | S, "sysret".ljust(15) + "".rjust(6)),
        (B | C | Y | I, "hw int".ljust(15) + "".rjust(6)),
        (B | A, "tx abrt".ljust(15) + "".rjust(6)),
        (B | TB, "tr strt".ljust(15) + "".rjust(6)),
        (B | TE, "tr end".ljust(15) + "".rjust(6)),
        (B | C | IpFlag.VMENTRY, "vmentry".ljust(15) + "".rjust(6)),
        (B | C | IpFlag.VMEXIT, "vmexit".ljust(15) + "".rjust(6)),
        (B | Y | TE, "tr end  " + "async".ljust(7) + "".rjust(6)),
        (B | C | TB, "tr strt " + "call".ljust(7) + "".rjust(6)),
        (B | O | X, "jcc".ljust(15) + "(x)".rjust(6)),
        (B | O | X | IpFlag.INTR_DISABLE | IpFlag.INTR_TOGGLE, "jcc".ljust(15) + "(xDt)".rjust(6)),
        (B | R | TE | IpFlag.INTR_DISABLE, "tr end  " + "return".ljust(7) + "(D)".rjust(6)),
        (B | C | Y | IpFlag.VMEXIT, "bcyh"),  # 4131: perf has no name for it
        (0, ""),
        (B | (1 << 20), "b?"),
    ],
)
def test_format_flags_perf_strings(flags, text):
    assert format_flags(int(flags)) == text


def test_field_padding_like_perf_script():
    assert format_flags_field(B | Y | TE) == "  tr end  async" + " " * 9
    assert format_flags_field(0) == " " * 24


def test_format_flags_array_maps_each_value():
    vals = np.array([3, 5, 3, 4131], dtype=np.uint32)
    assert format_flags_array(vals) == [format_flags(3), format_flags(5), format_flags(3), "bcyh"]
    assert format_flags_array(np.array([], dtype=np.int64)) == []


@pytest.mark.parametrize("values", [
    [B | C, B | R, B | O, B | O, B, B | C | TB, 0, B | Y | I],       # a branch batch's few masks
    [1 << 19, 3, (1 << 20) - 1],                                     # up to the table's largest
    [1 << 20, 1, 1 << 40],                                           # past it: sorted out instead
    [-1, 2, 2, -1],                                                  # (not perf's, but a column may say so)
    [7],
])
def test_distinct_flags_equals_numpy_unique(values):
    rng = np.random.default_rng(len(values))
    col = rng.choice(np.array(values, np.int64), 5000)
    uniq, inv = distinct_flags(col)
    want_u, want_inv = np.unique(col, return_inverse=True)
    assert uniq.tolist() == want_u.tolist()
    assert inv.tolist() == want_inv.ravel().tolist()
    assert (uniq[inv] == col).all()


def test_distinct_flags_of_nothing():
    uniq, inv = distinct_flags(np.zeros(0, np.int64))
    assert len(uniq) == 0 and len(inv) == 0


def test_perf_branch_types_rows():
    assert PERF_BRANCH_TYPES[0] == (0, "no branch")
    names = dict(PERF_BRANCH_TYPES)
    assert len(PERF_BRANCH_TYPES) == len(names) == 42
    assert names[int(B | C | Y | I)] == "hardware interrupt"
    assert names[int(B | C | IpFlag.VMEXIT)] == "vm exit"
    assert names[int(B | C | TB)] == "trace begin / call"
    assert names[int(B | Y | TE)] == "asynchronous branch / trace end"
    assert names[256] == "trace begin / no branch"
    assert int(B | TB | TE) not in names and 4131 not in names  # perf 6.1 has no row for a VM exit


def test_exporter_uses_the_same_perf_rows():
    from ptexport.writers.branch_types import PERF_BRANCH_TYPES as EXPORT_ROWS

    assert dict(EXPORT_ROWS) == dict(PERF_BRANCH_TYPES)


@needs_perf
def test_branch_types_are_perf_61_rows(quipper, tmp_path):
    db = tmp_path / "q.db"
    subprocess.run(
        ["perf", "script", "--itrace=be", "-i", str(quipper), "-s",
         "/usr/lib/perf-core/scripts/python/export-to-sqlite.py", str(db), "branches"],
        capture_output=True, check=True, cwd=tmp_path,
        # perf's embedded Python finds its prefix through PATH: keep pyenv's python out of it
        env=dict(os.environ, PATH="/usr/local/bin:/usr/bin:/bin"),
    )
    import sqlite3

    with sqlite3.connect(db) as con:
        perf_rows = sorted(con.execute("SELECT id, name FROM branch_types"))
    assert perf_rows == sorted(PERF_BRANCH_TYPES)


@needs_perf
def test_matches_perf_script_on_real_trace(quipper):
    out = subprocess.run(
        ["perf", "script", "--itrace=be", "-F", "time,cpu,pid,tid,ip,addr,flags", "-i", str(quipper)],
        capture_output=True, text=True, check=True,
    ).stdout
    lines = [ln for ln in out.splitlines() if "=>" in ln]
    # The flags field follows "time: "; the ip comes after it; perf derives it from the
    # numeric values the decoder set: trace begin, hw interrupt, async trace end.
    fields = {ln.split(":", 1)[1][1:25] for ln in lines}
    expected = {
        format_flags_field(B | TB),
        format_flags_field(B | C | Y | I),
        format_flags_field(B | Y | TE),
    }
    assert fields == expected
