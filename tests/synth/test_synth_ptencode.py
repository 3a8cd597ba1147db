"""The PT encoder's packets read back with ptexport's own packet decoder (pt/), field by field."""

from __future__ import annotations

import random

import pytest

from ptexport.pt.lastip import LastIp
from ptexport.pt.packets import iter_packets
from ptexport.synth.ptencode import IP_MODES, PacketWriter


def _packets(buf):
    out = list(iter_packets(bytes(buf)))
    assert all(hasattr(p, "kind") for p in out), [p for p in out if not hasattr(p, "kind")]
    return out


@pytest.mark.parametrize("mode", ["short", "long"])
def test_tnt_bits_round_trip(mode):
    rng = random.Random(7)
    bits = [rng.random() < 0.5 for _ in range(5000)]
    w = PacketWriter(tnt_mode=mode)
    w.psb()
    w.psbend()
    for b in bits:
        w.tnt(b)
    w.flush_tnt()
    got = []
    for p in _packets(w.buf):
        if p.name.startswith("tnt"):
            assert p.name == ("tnt.8" if mode == "short" else "tnt.64")
            assert 1 <= p.tnt_count <= (6 if mode == "short" else 47)
            got += [bool(p.tnt_bits >> (p.tnt_count - 1 - i) & 1) for i in range(p.tnt_count)]
    assert got == bits


@pytest.mark.parametrize("mode", IP_MODES)
def test_ip_compression_round_trip(mode):
    rng = random.Random(3)
    bases = [0x401000, 0x7FFF_F7A0_0000, 0x5555_5555_4000, 0xFFFF_FFFF_8100_0000]
    ips = [rng.choice(bases) + rng.randrange(0, 1 << rng.choice((8, 20, 36))) for _ in range(3000)]
    ips = [ip if ip >> 47 in (0, (1 << 17) - 1) else ip & ((1 << 47) - 1) for ip in ips]
    w = PacketWriter(ip_mode=mode, seed=5)
    w.psb()
    w.psbend()
    for ip in ips:
        w.tip(ip)
    w.tip_pgd(None)
    last = LastIp()
    got = []
    for p in _packets(w.buf):
        if p.name in ("tip", "tip.pgd"):
            last.update(p.ip, p.ipc)
            got.append(last.query())
    assert got == ips + [None]
    if mode == "mixed":
        assert set(w.ipbytes_used) == {0, 1, 2, 3, 4, 6}
    if mode == "full":
        assert set(w.ipbytes_used) == {0, 6}


def test_other_packets_round_trip():
    w = PacketWriter()
    w.psb()
    w.tsc(0x65DD0839710)
    w.tma(0x1234, 300)
    w.cbr(20)
    w.mode_exec64()
    w.fup(0x401000)
    w.psbend()
    w.mtc(0x56)
    for c in (0, 5, 31, 32, 1000, 1 << 20):
        w.cyc(c)
    w.ptwrite(0xDEADBEEF12345678, 8, True)
    w.ptwrite(0x1234, 4, False)
    w.mwait(3, 1)
    w.pwre(True, 2, 1)
    w.exstop(True)
    w.exstop(False)
    w.pwrx(2, 3, 4)
    w.ovf()
    w.pad(3)
    got = [(p.name, p.p0, p.p1, p.p2) for p in _packets(w.buf)]
    assert got == [
        ("psb", 0, 0, 0), ("tsc", 0x65DD0839710, 0, 0), ("tma", 0x1234, 300, 0),
        ("cbr", 20, 0, 0), ("mode.exec", 1, 0, 0), ("fup", 0x401000, 2, 0),
        ("psbend", 0, 0, 0), ("mtc", 0x56, 0, 0),
        ("cyc", 0, 0, 0), ("cyc", 5, 0, 0), ("cyc", 31, 0, 0), ("cyc", 32, 0, 0),
        ("cyc", 1000, 0, 0), ("cyc", 1 << 20, 0, 0),
        ("ptw", 0xDEADBEEF12345678, 1, 1), ("ptw", 0x1234, 0, 0),
        ("mwait", 3, 1, 0), ("pwre", 2, 1, 1), ("exstop", 1, 0, 0), ("exstop", 0, 0, 0),
        ("pwrx", 2, 3, 4), ("ovf", 0, 0, 0), ("pad", 0, 0, 0), ("pad", 0, 0, 0), ("pad", 0, 0, 0),
    ]
