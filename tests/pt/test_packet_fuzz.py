"""Seeded fuzz test: random and mutated packet streams never end in a traceback or a hang.

Every decoder entry point (packet iterator, bulk columns, ptdump rendering
with timing/last-IP tracking) must either finish or raise a PtExportError
subclass; decoding always makes progress, so each run is bounded.
"""

from __future__ import annotations

import random
import time

from ptxtest import LIBIPT
from ptexport.errors import PacketError, PtExportError
from ptexport.pt.errata import Errata
from ptexport.pt.packets import PacketDecoder, decode_columns, iter_packets
from ptexport.raw.ptdump import PtdumpOptions, ptdump_lines
from ptexport.pt.time import TimingConfig

SEED = 20261122
ALL_ERRATA = Errata(skd007=True, skz84=True, skl168=True)
OPTS = [
    PtdumpOptions(),
    PtdumpOptions(show_last_ip=True, show_exec_mode=True, no_sync=True, errata=ALL_ERRATA),
    PtdumpOptions(track_time=True, show_time=True, show_time_as_delta=True,
                  timing=TimingConfig(mtc_freq=3, nom_freq=4, cpuid_0x15_eax=1, cpuid_0x15_ebx=4)),
    PtdumpOptions(track_time=True, show_tcal=True, keep_tcal_on_ovf=True,
                  timing=TimingConfig(mtc_freq=9, cpuid_0x15_eax=2, cpuid_0x15_ebx=1, skl168=True)),
]


def _seeds() -> list[bytes]:
    files = sorted((LIBIPT / "ptt").glob("*.pt")) if LIBIPT.exists() else []
    seeds = [f.read_bytes() for f in files[:: max(1, len(files) // 40)]]
    seeds.append(bytes.fromhex("0282") * 8 + bytes.fromhex("0223"))
    return seeds


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        if op < 0.4 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op < 0.6 and b:
            del b[rng.randrange(len(b)) :]
        elif op < 0.8:
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif b:
            i = rng.randrange(len(b))
            j = rng.randrange(len(b))
            b[i:i] = b[j : j + rng.randint(1, 16)]
    return bytes(b)


def _exercise(buf: bytes, opts: PtdumpOptions) -> int:
    n = 0
    for item in iter_packets(buf, errata=opts.errata, source="fuzz"):
        assert isinstance(item, (tuple, PacketError))
        n += 1
        assert n <= 2 * len(buf) + 2  # progress: never more items than bytes (+ errors)
    cols, errs = decode_columns(buf, errata=opts.errata)
    assert len(cols["offset"]) + len(errs) <= 2 * len(buf) + 2
    lines = 0
    for _ in ptdump_lines(buf, opts, source="fuzz"):
        lines += 1
        assert lines <= 8 * len(buf) + 16
    dec = PacketDecoder(buf, opts.errata)
    while dec.sync_forward() >= 0:
        try:
            while dec.next() is not None:
                pass
            break
        except PacketError:
            continue
    return n


def test_fuzz_no_traceback_no_hang():
    rng = random.Random(SEED)
    seeds = _seeds()
    deadline = time.monotonic() + 60
    runs = 0
    for i in range(3000):
        if i % 3 == 0:
            buf = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
            if rng.random() < 0.5:
                buf = bytes.fromhex("0282") * 8 + buf
        else:
            buf = _mutate(rng, rng.choice(seeds))
        opts = OPTS[i % len(OPTS)]
        try:
            _exercise(buf, opts)
        except PtExportError:
            pass  # a typed error is an acceptable outcome
        runs += 1
        assert time.monotonic() < deadline, f"fuzzing too slow after {runs} runs"
    assert runs == 3000


def test_fuzz_pevent_sideband():
    from ptexport.errors import InputError
    from ptexport.pt.pevent import PeventConfig, SidebandPrinter, load_pevent

    rng = random.Random(SEED + 1)
    sbs = sorted((LIBIPT / "pevent").glob("*.sb")) if LIBIPT.exists() else []
    seeds = [f.read_bytes() for f in sbs] or [bytes(64)]
    ok = bad = 0
    for i in range(1500):
        data = _mutate(rng, rng.choice(seeds))
        cfg = PeventConfig(sample_type=rng.choice([0, 0x4, 0x6, 0x102C6, rng.getrandbits(20)]),
                           time_shift=rng.randrange(4), time_mult=rng.randrange(0, 3))
        try:
            recs = load_pevent(data, cfg, "fuzz.sb")
        except InputError:
            bad += 1
            continue
        pr = SidebandPrinter([recs], verbose=bool(i & 1), show_offset=True, show_time=True)
        assert sum(1 for _ in pr.lines_until(None)) >= len(recs)
        ok += 1
    assert ok and bad
