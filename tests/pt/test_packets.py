"""Unit tests of the packet layer: one per packet kind, errors, sync, errata, last-IP, timing."""

from __future__ import annotations

import pytest

from ptexport.errors import PacketError, PtExportError
from ptexport.pt.errata import Errata, UnknownCpuError, errata_for_cpu, parse_cpu
from ptexport.pt.lastip import LastIp
from ptexport.pt.packets import (
    Packet,
    PacketDecoder,
    PacketKind as K,
    decode_columns,
    decode_packet,
    iter_packets,
    sync_forward,
)
from ptexport.raw.ptdump import packet_fields
from ptexport.pt.time import TimeCal, TimeTracker, TimingConfig

PSB = bytes.fromhex("0282") * 8
PSBEND = bytes.fromhex("0223")


def one(hexbytes: str, **kw) -> Packet:
    b = bytes.fromhex(hexbytes.replace(" ", ""))
    p = decode_packet(b, 0, **kw)
    assert p.size == len(b), p
    return p


def show(p: Packet) -> str:
    op, pl, tid, tpl = packet_fields(p)
    return " ".join(x for x in (op, pl, tid, tpl) if x)


@pytest.mark.parametrize(
    "hexbytes,kind,fields,text",
    [
        ("00", K.PAD, (0, 0, 0), "pad"),
        ("22", K.TNT_8, (0b0001, 4), "tnt.8 ...!"),
        ("04", K.TNT_8, (0, 1), "tnt.8 ."),
        ("02a3 0100 0000 0080", K.TNT_64, (1, 47), None),
        ("0d", K.TIP, (0, 0), "tip 0: ????????????????"),
        ("2d 3412", K.TIP, (0x1234, 1), "tip 1: ????????????1234"),
        ("4d 78563412", K.TIP, (0x12345678, 2), "tip 2: ????????12345678"),
        ("71 0010 0000 0080", K.TIP_PGE, (0x800000001000, 3), "tip.pge 3: ffff800000001000"),
        ("81 0010 0000 0080", K.TIP_PGD, (0x800000001000, 4), "tip.pgd 4: ????800000001000"),
        ("dd 0010 0000 0000 00ff", K.FUP, (0xFF00000000001000, 6), "fup 6: ff00000000001000"),
        ("0243 fafa0a000000", K.PIP, (0xAFAFA0, 0), "pip afafa0 cr3 0000000000afafa0"),
        ("0243 fbfa0a000000", K.PIP, (0xAFAFA0, 1), "pip afafa0, nr cr3 0000000000afafa0"),
        ("9901", K.MODE_EXEC, (1,), "mode.exec cs.l"),
        ("9906", K.MODE_EXEC, (6,), "mode.exec cs.d, if"),
        ("9923", K.MODE_TSX, (3,), "mode.tsx intx, abrt"),
        ("0283", K.STOP, (), "stop"),
        ("0203 2400", K.CBR, (0x24,), "cbr 24"),
        ("19 45230100000000", K.TSC, (0x12345,), "tsc 12345"),
        ("5994", K.MTC, (0x94,), "mtc 94"),
        ("0273 1200 00 3401", K.TMA, (0x12, 0x134), "tma 12, 134"),
        ("bf04", K.CYC, (0x17 | (2 << 5),), None),
        ("03", K.CYC, (0,), "cyc 0"),
        ("02c8 cdab000000", K.VMCS, (0xABCD000,), "vmcs abcd000 vmcs 000000000abcd000"),
        ("02f3", K.OVF, (), "ovf"),
        ("0282" * 8, K.PSB, (), "psb"),
        ("0223", K.PSBEND, (), "psbend"),
        ("02c388 a1b2c3d4e542222a", K.MNT, (0x2A2242E5D4C3B2A1,), "mnt 2a2242e5d4c3b2a1"),
        ("0292 efcdab90", K.PTW, (0x90ABCDEF, 0, 1), "ptw 0: 90abcdef, ip"),
        ("0232 efcdab9078563412", K.PTW, (0x1234567890ABCDEF, 1, 0), "ptw 1: 1234567890abcdef"),
        ("0262", K.EXSTOP, (0,), "exstop"),
        ("02e2", K.EXSTOP, (1,), "exstop ip"),
        ("02c2 0b000000 01000000", K.MWAIT, (0xB, 1), "mwait 0000000b, 00000001"),
        ("0222 0800", K.PWRE, (0, 0, 1), "pwre c1.1, hw"),
        ("0222 0010", K.PWRE, (1, 0, 0), "pwre c2.1"),
        ("02a2 05 01000000", K.PWRX, (0, 5, 1), "pwrx int: c1, c6"),
        ("02a2 05 08000000", K.PWRX, (0, 5, 8), "pwrx hw: c1, c6"),
        ("0263 81", K.BBP, (1, 1), None),
        ("02b3", K.BEP, (1,), None),
        ("0213 0100", K.CFE, (1, 0, 0), None),
        ("0213 81 0e", K.CFE, (1, 14, 1), "cfe 1: 14, ip type intr"),
        ("0213 05 ce", K.CFE, (5, 0xCE, 0), "cfe 5: ce type sipi"),
        ("0253 02 aa0bf00000000000", K.EVD, (2, 0xF00BAA), "evd 2: f00baa type vmxr"),
        ("d9 20 a1", K.TRIG, (0xA1, -1, 2), "trig a1, mult"),
        ("d9 e0 a1 1700", K.TRIG, (0xA1, 23, 7), "trig a1, ip, mult, icnt: 23"),
    ],
)
def test_packet_kind(hexbytes, kind, fields, text):
    p = one(hexbytes)
    assert p.kind == kind
    assert (p.p0, p.p1, p.p2)[: len(fields)] == fields
    if text is not None:
        assert show(p) == text


def test_every_kind_is_covered():
    kinds = {K.PAD, K.TNT_8, K.TNT_64, K.TIP, K.TIP_PGE, K.TIP_PGD, K.FUP, K.PIP, K.MODE_EXEC,
             K.MODE_TSX, K.STOP, K.CBR, K.TSC, K.MTC, K.TMA, K.CYC, K.VMCS, K.OVF, K.PSB,
             K.PSBEND, K.MNT, K.PTW, K.EXSTOP, K.MWAIT, K.PWRE, K.PWRX, K.BBP, K.BEP, K.CFE,
             K.EVD, K.TRIG}
    assert kinds | {K.BIP, K.INVALID} == set(K)


def test_named_accessors():
    p = one("2d 3412")
    assert (p.ip, p.ipc, p.name) == (0x1234, 1, "tip")
    t = one("22")
    assert t.tnt_taken() == [False, False, False, True]
    assert one("0243 fbfa0a000000").nr
    assert one("0292 efcdab90").has_ip


def test_bip_only_inside_a_block():
    buf = PSB + bytes.fromhex("0263 00") + bytes.fromhex("0c 44332211") + bytes.fromhex("0233") + bytes.fromhex("0c")
    pk = [p for p in iter_packets(buf)]
    kinds = [p.kind for p in pk]
    assert kinds == [K.PSB, K.BBP, K.BIP, K.BEP, K.TNT_8]
    assert (pk[2].p0, pk[2].p1) == (1, 0x11223344)


@pytest.mark.parametrize(
    "hexbytes,reason",
    [
        ("05", "bad-opcode"),
        ("02ff", "bad-opcode"),
        ("02c3 77", "bad-opcode"),
        ("ad 00", "bad-packet"),  # reserved IPC 5
        ("99 40", "bad-packet"),  # reserved MODE leaf
        ("02d2 00000000", "bad-packet"),  # PTW payload size 2 is reserved
        ("0273 0101 01 0100", "bad-packet"),  # TMA reserved byte
        ("02a3 0000 0000 0000", "bad-packet"),  # TNT-64 without stop bit
        ("19 0000", "eos"),
        ("4d 1234", "eos"),
        ("07 ff", "eos"),
        ("02", "eos"),
        ("0282 0282 0282 0282 7d00 0000 0000 0000", "bad-packet"),
    ],
)
def test_bad_packets(hexbytes, reason):
    b = bytes.fromhex(hexbytes.replace(" ", ""))
    with pytest.raises(PacketError) as ei:
        decode_packet(b, 0, source="aux cpu 3")
    assert ei.value.reason == reason
    assert ei.value.offset == 0
    assert str(ei.value).startswith("aux cpu 3+0x0: packet: ")


def test_errata_skz84_makes_bad_tma_invalid():
    p = one("0273 0101 01 0100 00", errata=Errata(skz84=True))
    assert p.kind == K.INVALID and p.size == 8


def test_errata_skd007_cyc_overlapping_ovf():
    buf = bytes.fromhex("f702f3")
    assert decode_packet(buf, 0).kind == K.CYC
    p = decode_packet(buf, 0, errata=Errata(skd007=True))
    assert (p.kind, p.size, p.offset) == (K.OVF, 3, 0)


def test_errata_table():
    assert errata_for_cpu(6, 0x4E).skd007
    assert errata_for_cpu(6, 0x5C).apl12
    assert errata_for_cpu(0x13, 1).skz84
    with pytest.raises(UnknownCpuError):
        errata_for_cpu(0, 0)
    assert parse_cpu("6/142") == (6, 142, 0)
    assert parse_cpu("0x6/0x8e/9") == (6, 142, 9)


def test_sync_forward_finds_psb_partly_consumed():
    # An MNT whose payload swallows the first half of a PSB; after the error at
    # the truncated PSB, sync finds the PSB that starts inside the MNT.
    buf = bytes(6) + PSB + bytes.fromhex("02c388") + PSB + bytes.fromhex("7d0010") + bytes(5)
    assert sync_forward(buf, 0) == 6
    dec = PacketDecoder(buf)
    assert dec.sync_forward() == 6
    assert dec.sync_forward() == 25
    assert sync_forward(buf, 26) == -1


def test_iter_packets_reports_and_resyncs():
    bad = bytes.fromhex("05")
    buf = PSB + PSBEND + bad + bytes(3) + PSB + PSBEND
    items = list(iter_packets(buf, source="x.pt"))
    errs = [i for i in items if isinstance(i, PacketError)]
    pk = [i for i in items if not isinstance(i, PacketError)]
    assert len(errs) == 1 and errs[0].offset == 18
    assert [p.offset for p in pk] == [0, 16, 22, 38]


def test_decoder_not_synced_and_end():
    dec = PacketDecoder(b"")
    with pytest.raises(PtExportError):
        dec.next()
    assert dec.sync_forward() == -1
    dec = PacketDecoder(PSBEND)
    dec.sync_set(0)
    assert dec.next().kind == K.PSBEND
    assert dec.next() is None


def test_decode_columns():
    buf = PSB + bytes.fromhex("2d3412") + PSBEND + bytes.fromhex("05") + PSB
    cols, errs = decode_columns(buf)
    assert list(cols["kind"]) == [K.PSB, K.TIP, K.PSBEND, K.PSB]
    assert list(cols["offset"]) == [0, 16, 19, 22]
    assert int(cols["p0"][1]) == 0x1234 and int(cols["p1"][1]) == 1
    assert len(errs) == 1 and errs[0].offset == 21


def test_last_ip():
    li = LastIp()
    with pytest.raises(PacketError):
        li.query()
    li.update(0x0A00CCCCDDDDEEEE, 6)
    assert li.query() == 0x0A00CCCCDDDDEEEE
    li.update(0xFFFFEEEEFFFF, 4)
    assert li.query() == 0x0A00FFFFEEEEFFFF
    li.update(0xDDDD, 1)
    assert li.query() == 0x0A00FFFFEEEEDDDD
    li.update(0xFFFFDDDDEEEE, 3)
    assert li.query() == 0xFFFFFFFFDDDDEEEE
    li.update(0xEEEEFFFF, 2)
    assert li.query() == 0xFFFFFFFFEEEEFFFF
    li.update(0, 0)
    assert li.query() is None
    li.update(0x1234, 1)
    assert li.query() == 0xFFFFFFFFEEEE1234


def test_time_tsc_tma_mtc():
    cfg = TimingConfig(mtc_freq=4, cpuid_0x15_eax=1, cpuid_0x15_ebx=4)
    t = TimeTracker(cfg)
    assert t.query_tsc()[1] == "no_time"
    t.update_tsc(0x1000)
    t.update_tma(0x10, 0x8)  # CTC 0x10, FastCounter 8 at the TSC
    assert t.query_tsc() == (0x1000, None)
    t.update_mtc(0x2)  # CTC 0x20: +0x10 CTC = +0x40 TSC from the base (0x1000 - 8)
    assert t.query_tsc() == (0x1000 - 8 + 0x40, None)


def test_time_calibration_from_cbr():
    cal = TimeCal(TimingConfig(nom_freq=4))
    cal.header_cbr(2)
    assert cal.fcr_get() == (4 << 8) // 2


def test_sync_backward_and_psb_offsets():
    from ptexport.pt.packets import psb_offsets, sync_backward

    buf = bytes(6) + PSB + PSBEND + bytes(5) + PSB + PSB[:4] + PSBEND
    # the second PSB is followed by 4 more pattern bytes: the PSB ends with the run
    assert psb_offsets(buf) == [6, 29 + 4]
    assert sync_backward(buf, len(buf)) == 33
    assert sync_backward(buf, 33) == 6
    assert sync_backward(buf, 6) == -1
    dec = PacketDecoder(buf)
    assert dec.sync_backward() == 33
    assert [p.kind for p in dec] == [K.PSB, K.PSBEND]


def test_errata_from_perf_cpuid():
    from ptexport.pt.errata import NO_ERRATA, errata_from_cpuid

    assert errata_from_cpuid("GenuineIntel,6,78,3").skd007
    assert errata_from_cpuid("AuthenticAMD,23,49,0") == NO_ERRATA
    assert errata_from_cpuid("GenuineIntel,6,1,1") == NO_ERRATA
    assert errata_from_cpuid("garbage") == NO_ERRATA


def test_decoder_copy_is_an_independent_cursor():
    import copy

    buf = PSB + bytes.fromhex("2d3412") + PSBEND
    dec = PacketDecoder(memoryview(buf))
    dec.sync_forward()
    look = copy.copy(dec)
    assert [p.kind for p in look] == [K.PSB, K.TIP, K.PSBEND]
    assert (dec.pos, dec.sync) == (0, 0)
    assert dec.next().kind == K.PSB and dec.offset == 16
