"""Seeded end-to-end fuzzing: damaged recordings through the whole command, not only the reader.

tests/perfdata/test_perfdata_fuzz.py shows the reader names every malformed record; a record can also
parse and still carry a value the later stages cannot take (a clock shift of 64, a page offset past
2^63, a thread id that is nobody's).  Here a field of one record - of a kind picked first, so the few
user records (TIME_CONV, AUXTRACE_INFO, ID_INDEX) are hit as often as the many MMAP2s - gets an edge
value, and the recording goes through ``dump branches`` and the export: only a PtExportError may end
a command (as its exit code), and a failed export leaves no database.
"""

from __future__ import annotations

import io
import random
import shutil
from pathlib import Path

import pytest

from ptxtest import REPO, SHARED
from ptexport.cli import main
from ptexport.perfdata import open_perf_data

SEED = 20261202
#: values a damaged or hostile field takes: the ends of each width, the sign bits, shifts past 63
EDGES = (0, 1, 63, 64, 65, 200, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 1 << 32, 1 << 40, (1 << 63) - 1, 1 << 63,
         (1 << 64) - 4096, (1 << 64) - 1)
RECORDINGS = {
    "threads": REPO / "sample_data" / "threads" / "perf.data",
    "forkexec": REPO / "sample_data" / "forkexec" / "perf.data",
    "hase-loopy": SHARED / "testdata" / "real" / "hase-loopy-bdw-2018b" / "perf.data",
}


def _records(path: Path) -> dict[int, list[tuple[int, int]]]:
    """(offset, size) of each record in the data section, by type."""
    out: dict[int, list[tuple[int, int]]] = {}
    with open_perf_data(path) as pd:
        for r in pd.records():
            out.setdefault(int(r.type), []).append((int(r.offset), int(r.size)))
    return out


def _damage(raw: bytes, records: dict[int, list[tuple[int, int]]], rng: random.Random) -> tuple[bytes, str]:
    kind = rng.choice(sorted(records))
    off, size = rng.choice(records[kind])
    b = bytearray(raw)
    what = []
    for _ in range(rng.randrange(1, 3)):
        width = rng.choice((4, 8))
        if size - 8 < width:
            continue
        field = off + 8 + rng.randrange(0, size - 8 - width + 1) // width * width
        value = rng.choice(EDGES) & ((1 << 8 * width) - 1)
        b[field:field + width] = value.to_bytes(width, "little")
        what.append(f"type {kind} record at {off:#x}: {width} bytes at +{field - off} = {value:#x}")
    return bytes(b), "; ".join(what)


def _cases(n: int):
    rng = random.Random(SEED)
    found = {name: p for name, p in RECORDINGS.items() if p.is_file()}
    assert "threads" in found and "forkexec" in found
    for i in range(n):
        yield i, rng.choice(sorted(found)), random.Random(rng.random())


@pytest.fixture(scope="module")
def inputs():
    return {name: (p.read_bytes(), _records(p), p) for name, p in RECORDINGS.items() if p.is_file()}


@pytest.mark.parametrize("block", range(4))
def test_a_damaged_field_ends_in_a_typed_error_or_a_result(inputs, tmp_path, capsys, block):
    per_block = 12
    for i, name, rng in list(_cases(4 * per_block))[block * per_block:(block + 1) * per_block]:
        raw, records, src = inputs[name]
        data, what = _damage(raw, records, rng)
        d = tmp_path / f"case{i}"
        d.mkdir()
        for elf in src.parent.iterdir():  # the sample programs' ELFs beside the recording
            if elf.is_file() and elf.name != "perf.data" and elf.stat().st_size < 4 << 20:
                shutil.copy(elf, d / elf.name)
        trace = d / "perf.data"
        trace.write_bytes(data)
        db = d / "out.sqlite"
        for argv in (["dump", "branches", "--count", str(trace)], ["dump", "branches", "--itrace=cre", str(trace)],
                     [str(trace), "--db", str(db), "-q", "--jobs", "1"]):
            try:
                rc = main(argv, out=io.StringIO())
            except Exception as e:  # pragma: no cover - what the test is for
                pytest.fail(f"{name} with {what}: {' '.join(argv[:3])} raised {type(e).__name__}: {e}")
            err = capsys.readouterr().err
            assert rc in (0, 1), f"{name} with {what}: {' '.join(argv[:3])} exit {rc}: {err[-300:]}"
            if "--db" in argv:
                left = sorted(p.name for p in d.iterdir() if p.name.startswith("out") or ".ptexport" in p.name)
                assert left == (["out.sqlite"] if rc == 0 else []), (name, what, left, err[-300:])


#: perf_record_auxtrace: the header, then size, offset, reference (u64), idx, tid, cpu, reserved (u32); the
#: trace data follows the record (its header's size is this: 48)
AUXTRACE_FIELDS_END = 48


@pytest.mark.parametrize("value", [(1 << 64) - 4096])  # the sign bit and near the top (1 << 63: the same classes)
@pytest.mark.parametrize("kind", ["MMAP2", "AUXTRACE_INFO", "AUXTRACE", "TIME_CONV"])
def test_every_u64_field_past_int64(tmp_path, capsys, kind, value):
    """Each 8-byte field of a kind of record in turn set past int64: perf's u64 values (an address,
    length or page offset, a trailer's time, Intel PT's parameters, a buffer's reference TSC), which
    numpy's int64 columns and the compiled decoder's state cannot hold.  Every MMAP2, the first of
    the others."""
    from ptexport.perfdata.constants import RecordType as RT

    src = RECORDINGS["threads"]
    raw = src.read_bytes()
    records = _records(src).get(int(RT[kind]), [])
    assert records
    if kind != "MMAP2":
        records = records[:1]
    shutil.copy(src.parent / "threads", tmp_path / "threads")
    for off, size in records:
        fields = list(range(off + 8, off + size - 7, 8))
        if kind == "AUXTRACE":  # its fields, and 8 places in the trace data after them (not all 1820: 3 minutes)
            fixed = [f for f in fields if f < off + AUXTRACE_FIELDS_END]
            data = fields[len(fixed):]
            fields = fixed + data[:: max(1, len(data) // 8)][:8]
        for field in fields:
            b = bytearray(raw)
            b[field:field + 8] = value.to_bytes(8, "little")
            trace = tmp_path / "perf.data"
            trace.write_bytes(bytes(b))
            db = tmp_path / "out.sqlite"
            for argv in (["dump", "branches", "--count", str(trace)], [str(trace), "--db", str(db), "-q", "--jobs", "1"]):
                try:
                    rc = main(argv, out=io.StringIO())
                except Exception as e:  # pragma: no cover - what the test is for
                    pytest.fail(f"{kind} at {off:#x}, +{field - off} = {value:#x}: {argv[1] if '--db' in argv else argv[0]} "
                                f"raised {type(e).__name__}: {e}")
                err = capsys.readouterr().err
                assert rc in (0, 1, 2), err[-300:]  # 2: no longer an Intel PT recording (AUXTRACE_INFO's type)
                assert rc == 0 or err.startswith(f"ptexport: error: {trace}"), err[-300:]
            db.unlink(missing_ok=True)
