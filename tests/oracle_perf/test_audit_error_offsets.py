"""Issue #4 perf parity: "the same error records at the same trace offsets".

perf script's error lines carry no offset; perf's decoder log does (``--itrace=...d`` writes intel_pt.log:
every packet with its offset in the CPU's AUX stream, then "ERROR: ..." and the error record).  The offset
of each error is that of the last packet the decoder logged for its queue before the ERROR line; the
export's decode_errors rows must have the same (cpu, offset, code) in the same order per CPU.  "Lost trace
data" (code 8) is no decoder error: perf makes it from a truncated AUX record, at no trace offset, so only
its place in the order is compared.
"""

from __future__ import annotations

import io
import re
import sqlite3
import subprocess

import pytest

from ptxtest import needs_perf
from ptexport.cli import main

VARIANTS = {
    "calls-ovf": ("--program", "calls", "--ovf", "3"),
    "threads-ovf-cyc": ("--program", "threads", "--cpus", "2", "--ovf", "4", "--timing", "cyc"),
    "forkexec-corrupt": ("--program", "forkexec", "--cpus", "2", "--corrupt", "3", "--timing", "cyc",
                         "--psb-period", "1024"),
    "calls-truncated": ("--program", "calls", "--truncate", "2", "--psb-period", "1024"),
    "events-ptwrite-ovf": ("--program", "events", "--ptwrite", "fup", "--ovf", "2"),
}

LOST = 8  # perf's INTEL_PT_ERR_LOST
_QUEUE = re.compile(r"^queue (\d+) decoding cpu (-?\d+)")
_PACKET = re.compile(r"^  ([0-9a-f]{8}):  ")
_ERROR = re.compile(r"^ instruction trace error type \d+ time \S+ cpu (-?\d+) .* code (\d+): ")


def perf_error_offsets(data, cwd) -> list[tuple[int, int, int]]:
    """(cpu, offset, code) of every error perf's decoder logged, in log order."""
    subprocess.run(["perf", "script", "-i", str(data), "--itrace=bed", "-F", "pid,tid,cpu,time,ip,addr,flags"],
                   capture_output=True, text=True, check=True, cwd=cwd)
    queue, last, out = None, {}, []
    with open(cwd / "intel_pt.log", errors="replace") as f:
        for line in f:
            m = _QUEUE.match(line)
            if m:
                queue = int(m[1])
                continue
            m = _PACKET.match(line)
            if m:
                last[queue] = int(m[1], 16)
                continue
            m = _ERROR.match(line)
            if m:
                code = int(m[2])
                out.append((int(m[1]), None if code == LOST else last.get(queue, -1), code))
    return out


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_error_offsets_equal_perfs_decoder_log(tmp_path, variant):
    assert main(["synth", "--out", str(tmp_path), "--branches", "20000", "--seed", "7", *VARIANTS[variant]],
                out=io.StringIO()) == 0
    data = tmp_path / "perf.data"
    theirs = perf_error_offsets(data, tmp_path)
    assert theirs, "the variant makes perf report errors"
    db = tmp_path / "t.db"
    assert main([str(data), "--db", str(db), "-q"], out=io.StringIO()) == 0
    with sqlite3.connect(db) as c:
        mine = [(cpu, None if code == LOST else off, code) for cpu, off, code in
                c.execute('SELECT cpu, "offset", code FROM decode_errors WHERE id > 0 ORDER BY id')]
    for cpu in sorted({e[0] for e in theirs} | {e[0] for e in mine}):
        assert [e for e in mine if e[0] == cpu] == [e for e in theirs if e[0] == cpu], f"cpu {cpu}"


def _psbs(data) -> dict[int, list[int]]:
    """cpu -> offsets of the PSB packets in its AUX stream (its AUXTRACE buffers one after another), from
    perf's packet dump (perf script -D)."""
    r = subprocess.run(["perf", "script", "-i", str(data), "-D"], capture_output=True, text=True, check=True)
    out: dict[int, list[int]] = {}
    end: dict[int, int] = {}
    cpu = base = None
    for line in r.stdout.splitlines():
        m = re.search(r"PERF_RECORD_AUXTRACE size: (\S+)\s.*\scpu: (-?\d+)", line)
        if m:
            cpu = int(m[2])
            base = end.get(cpu, 0)
            end[cpu] = base + int(m[1], 0)
            continue
        m = re.match(r"^\.\s+([0-9a-f]{8}):\s.*\sPSB\s*$", line)
        if m and cpu is not None:
            out.setdefault(cpu, []).append(base + int(m[1], 16))
    return out


@needs_perf
def test_error_segment_and_kind_as_the_schema_documents(tmp_path):
    """segment: the index of the last PSB at or before the error's offset in its cpu's AUX stream (from
    perf's own packet dump); kind: the name of perf's code, the code in ``code``."""
    assert main(["synth", "--out", str(tmp_path), "--branches", "20000", "--seed", "7",
                 *VARIANTS["forkexec-corrupt"]], out=io.StringIO()) == 0
    db = tmp_path / "t.db"
    assert main([str(tmp_path / "perf.data"), "--db", str(db), "-q"], out=io.StringIO()) == 0
    with sqlite3.connect(db) as c:
        rows = c.execute('SELECT cpu, segment, "offset", kind, code, message FROM decode_errors WHERE id > 0').fetchall()
    assert rows and any(off > 1024 for _, _, off, _, _, _ in rows)  # errors past the first PSB segment (period 1024)
    assert all(seg > 0 for _, seg, off, _, _, _ in rows if off > 1024)
    assert all(not kind.isdigit() for _, _, _, kind, _, _ in rows)
    names = {3: "bad_packet", 5: "no_insn", 6: "mismatch", 7: "overflow", 8: "lost_data"}
    assert {(code, kind) for *_, kind, code, _ in rows} <= set(names.items())
    assert {m for *_, code, m in rows if code == 3} == {"Bad packet"}
    psbs = _psbs(tmp_path / "perf.data")
    for cpu, seg, off, *_ in rows:
        want = sum(1 for p in psbs[cpu] if p <= off) - 1
        assert seg == want, (cpu, off, seg, want)
