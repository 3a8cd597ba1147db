"""``ptexport dump packets`` on bad input and options: typed errors, offsets, recovery."""

from __future__ import annotations

import io

from ptexport.cli import main

PSB = bytes.fromhex("0282") * 8


def run(argv):
    out = io.StringIO()
    rc = main(argv, out)
    return rc, [" ".join(line.split()) for line in out.getvalue().splitlines()]


def test_missing_file(tmp_path, capsys):
    rc, _ = run(["dump", "packets", "--raw", str(tmp_path / "nope.pt")])
    assert rc == 1
    assert "nope.pt: cannot read" in capsys.readouterr().err


def test_corrupted_stream_reports_offset_and_resyncs(tmp_path):
    data = PSB + bytes.fromhex("0223 2d3412 05 00") + PSB + bytes.fromhex("0223 0d")
    f = tmp_path / "bad.pt"
    f.write_bytes(data)
    rc, lines = run(["dump", "packets", "--raw", str(f)])
    assert rc == 0
    assert lines == [
        "0000000000000000 psb",
        "0000000000000010 psbend",
        "0000000000000012 tip 1: ????????????1234",
        "[15: error decoding packet: unknown opcode]",
        "0000000000000017 psb",
        "0000000000000027 psbend",
        "0000000000000029 tip 0: ????????????????",
    ]


def test_truncated_stream_stops_like_ptdump(tmp_path):
    f = tmp_path / "trunc.pt"
    f.write_bytes(PSB + bytes.fromhex("0223 19 0102"))  # TSC cut short
    rc, lines = run(["dump", "packets", "--raw", str(f)])
    assert rc == 0 and lines == ["0000000000000000 psb", "0000000000000010 psbend"]


def test_unknown_cpu_warns_and_goes_on(tmp_path):
    f = tmp_path / "t.pt"
    f.write_bytes(PSB)
    rc, lines = run(["dump", "packets", "--raw", str(f), "--cpu", "0/0"])
    assert rc == 0
    assert lines == ["[0: failed to determine errata: unknown cpu]", "0000000000000000 psb"]


def test_bad_options(tmp_path, capsys):
    f = tmp_path / "t.pt"
    f.write_bytes(PSB)
    assert run(["dump", "packets", "--raw", str(f), "--time", "--tcal"])[0] == 2
    assert run(["dump", "packets", "--raw", str(f), "--cpu", "six/x"])[0] == 2
    err = capsys.readouterr().err
    assert "either --time or --tcal" in err and "--cpu" in err


def test_no_offset_raw_bytes_and_no_pad(tmp_path):
    f = tmp_path / "t.pt"
    f.write_bytes(PSB + bytes.fromhex("00 0223"))
    rc, lines = run(["dump", "packets", "--raw", str(f), "--no-offset", "--no-pad", "--raw-bytes"])
    assert rc == 0
    assert lines == ["02820282028202820282028202820282 psb", "0223 psbend"]


def test_bad_sideband_file(tmp_path, capsys):
    f = tmp_path / "t.pt"
    f.write_bytes(PSB)
    sb = tmp_path / "x-pevent-primary,sample-type=0x4.sb"
    sb.write_bytes(bytes.fromhex("01000000 0000 4000") + bytes(10))
    rc, _ = run(["dump", "packets", "--raw", str(f), "--pevent:primary", str(sb), "--sb:compact"])
    assert rc == 1
    assert "+0x0: sideband record: bad record size 64" in capsys.readouterr().err


def test_raw_file_range(tmp_path):
    f = tmp_path / "r.pt"
    f.write_bytes(bytes(4) + PSB + bytes.fromhex("0223 0d") + PSB)
    rc, lines = run(["dump", "packets", "--raw", f"{f}:4-0x17"])
    assert rc == 0
    assert lines == ["0000000000000000 psb", "0000000000000010 psbend", "0000000000000012 tip 0: ????????????????"]
    rc, lines = run(["dump", "packets", "--raw", f"{f}:0x17"])
    assert lines == ["0000000000000000 psb"]
    assert run(["dump", "packets", "--raw", f"{f}:0x100"])[0] == 1
