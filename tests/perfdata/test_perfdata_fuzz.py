"""Seeded fuzzing: truncations and byte flips of real and synthetic perf.data files.

Only PtExportError subclasses may escape, each naming a byte offset; nothing may hang.
"""

from __future__ import annotations

import io
import random
import signal
import struct
import subprocess

import pytest
from ptxtest import HAVE_PERF

import perfdata_writer as W
from ptexport.errors import PtExportError
from ptexport.perfdata import PerfData, perf_data_from_bytes
from ptexport.perfdata.constants import RecordType as RT
from test_perfdata_synthetic import (
    kernel_records,
    trailer_a,
    two_attr_file,
    user_records,
    ST_A,
    SID_ALL,
)

SEED = 20261122


def _exercise(pd: PerfData, full: bool = False) -> None:
    for r in pd.records():
        if r.type == RT.AUXTRACE:
            pd.aux_data(r)
        pd.machine_pid_of(r)
        r.name, r.cpumode, r.time  # noqa: B018 - properties must not raise
    pd.stats  # noqa: B018
    if full:  # the other passes over the same (mutated) bytes
        for _ in pd.iter_headers():
            pass
        for _ in pd.records(types=(RT.COMM, RT.SWITCH_CPU_WIDE)):
            pass
        for _ in pd.ordered_records():
            pass


def _bases(tmp_path_factory) -> dict[str, bytes]:
    import zstandard

    a = W.attr(sample_type=ST_A, flags=SID_ALL)
    comm = b"".join(W.record(RT.COMM, struct.pack("<ii", i, i) + W.cstr(f"c{i}"), trailer=trailer_a(i, i, i, 0, 10))
                    for i in range(20))
    z = zstandard.ZstdCompressor().compress(comm)
    bases = {
        "kernel": two_attr_file(kernel_records()),
        "user": W.file_mode([(W.attr(type=8, sample_type=ST_A, flags=SID_ALL), [10, 11, 4242])], user_records()),
        "compressed": W.file_mode([(a, [10])], W.record(RT.COMPRESSED, z[:40], pad=False)
                                  + W.record(RT.COMPRESSED, z[40:], pad=False)),
        "runs": W.file_mode([(a, [10])], b"".join(
            W.record(RT.SWITCH_CPU_WIDE if i % 97 else RT.EXIT,
                     struct.pack("<ii", i, i) if i % 97 else struct.pack("<iiiiQ", i, 1, i, 1, i),
                     trailer=trailer_a(1, 1, i, 0, 10)) for i in range(400))),
        "pipe": W.pipe_mode(W.header_attr(a, [10]) + comm[:300]
                            + W.record(RT.AUXTRACE, struct.pack("<QQQIII4x", 8, 0, 0, 0, 1, 0)) + b"\x02\x82" * 4),
    }
    if HAVE_PERF:
        p = tmp_path_factory.mktemp("fuzz") / "small.data"
        r = subprocess.run(["perf", "record", "-q", "-e", "task-clock", "-c", "200000", "--switch-events", "-o",
                            str(p), "--", "ls", "/usr/lib"], capture_output=True)
        if r.returncode == 0 and p.stat().st_size < 64 << 10:
            bases["perf"] = p.read_bytes()
    return bases


def _mutants(data: bytes, rng: random.Random, n: int):
    for i in range(n):
        d = bytearray(data)
        mode = i % 3
        if mode == 0:
            d = d[:rng.randrange(len(d))]
        elif mode == 1:
            for _ in range(rng.randint(1, 4)):
                j = rng.randrange(len(d))
                d[j] = rng.randrange(256)
        else:
            # flip inside the record headers region more often: sizes and types
            j = rng.randrange(len(d))
            d[j:j + 2] = rng.choice([b"\x00\x00", b"\xff\xff", b"\x08\x00", b"\x07\x00", b"\x01\x00"])
        yield bytes(d)


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return _bases(tmp_path_factory)


def _alarm(seconds: int):
    def handler(signum, frame):
        raise AssertionError("fuzz case hung")

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    return old


@pytest.mark.slow
@pytest.mark.perf  # a base file made by perf record
def test_fuzz_files_only_typed_errors_with_offsets(bases):
    rng = random.Random(SEED)
    per_base = 3600 // len(bases)
    cases = errors = 0
    old = _alarm(120)
    try:
        for name, data in sorted(bases.items()):
            for mutant in _mutants(data, rng, per_base):
                cases += 1
                try:
                    pd = perf_data_from_bytes(mutant, f"{name}.data")
                    _exercise(pd, full=cases % 4 == 0)
                    for e in pd.feature_errors:
                        assert "+0x" in str(e)
                except PtExportError as e:
                    errors += 1
                    assert e.offset is not None or "+0x" in str(e), f"{name}: no offset in {e}"
                    assert str(e).startswith(f"{name}.data"), str(e)
                # any other exception fails the test with its traceback
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert cases >= 3000
    assert errors > cases // 10  # the mutations do hit the checks


@pytest.mark.perf  # a base file made by perf record
def test_fuzz_streams(bases):
    rng = random.Random(SEED + 1)
    data = bases["pipe"]
    old = _alarm(60)
    try:
        for mutant in _mutants(data, rng, 400):
            try:
                pd = PerfData("-", stream=io.BufferedReader(io.BytesIO(mutant)))
                _exercise(pd)
            except PtExportError as e:
                assert e.offset is not None, str(e)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.perf  # a base file made by perf record
def test_every_truncation_of_a_small_file_names_offset_and_record(bases):
    data = bases["kernel"]
    start = struct.unpack_from("<Q", data, 40)[0]
    end = start + struct.unpack_from("<Q", data, 48)[0]
    for cut in range(start + 1, end):
        pd = perf_data_from_bytes(data[:cut], "cut.data")
        with pytest.raises(PtExportError) as ei:
            list(pd.records())
        e = ei.value
        assert start <= e.offset <= cut and e.what.startswith("record"), str(e)
