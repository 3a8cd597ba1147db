"""``ptexport info`` on cut recordings (issue #14: perf killed, disk full).

Recordings from ``ptexport synth`` (file and pipe mode) and, where perf is installed, a zstd-compressed
one perf 6.1 made, are cut at offsets of every class: inside the file header, the attrs, an attr's ids,
at the start of the data, inside a record's header or body, between records, inside an AUXTRACE payload,
inside the feature sections.  Oracles come from the whole file's record layout:

* a cut before the data (or, in pipe mode, before the first HEADER_ATTR record is whole) is a one-line
  typed error naming the file and the offset where it ends; exit 1;
* elsewhere: exit 0, one warning line on stderr, and ``cut`` in the JSON report saying where the file ends
  (the offset, the part, the record the cut falls into and its type), the records before it as the whole
  file's first records, the AUX bytes as the whole payloads plus the bytes present of a cut one;
* ``--strict``: every cut is a one-line error; a whole file reports ``cut: null``.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
import subprocess
import sys

import pytest

from ptexport.cli import main
from ptexport.perfdata import open_perf_data
from ptexport.synth.generate import SynthOptions, synthesize
from ptxtest import needs_perf

T_AUXTRACE = 71
T_HEADER_ATTR = 64
AUXTRACE_HEADER = 48


@pytest.fixture(scope="module")
def rec(tmp_path_factory):
    d = tmp_path_factory.mktemp("infocut")
    return {mode: synthesize(str(d / mode), SynthOptions(program="calls", branches=1500, cpus=2, seed=5,
                                                         pipe=mode == "pipe")).perf_data
            for mode in ("file", "pipe")}


def _layout(path):
    """(header dict, [(offset, end, type, payload size)]) of a whole recording."""
    with open_perf_data(path) as pd:
        rows = []
        for r in pd.records():
            if r.type == T_AUXTRACE:
                rows.append((r.offset, r.offset + r.header_size + r.size, r.type, r.size))
            else:
                rows.append((r.offset, r.offset + r.size, r.type, 0))
        return dict(pd.header), rows


def _info(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["info", *argv], out)
    assert "Traceback" not in err.getvalue()
    return rc, out.getvalue(), err.getvalue()


def _points(header: dict, rows, size: int, pipe: bool, wide: bool) -> list[int]:
    pts = {0, 5, 8, 16, size - 1}
    if not pipe:
        a_off, a_size, attr_size = header["attrs_offset"], header["attrs_size"], header["attr_size"]
        pts |= {60, 103, 104, a_off + 1, a_off + attr_size + 7, a_off + a_size - 1, a_off + a_size,
                header["data_offset"] - 1}
        d_end = header["data_offset"] + header["data_size"]
        pts |= {d_end + 3, d_end + 16, (d_end + size) // 2}
    for off, end, _t, psize in rows if wide else rows[:6] + rows[-4:]:
        pts |= {off, off + 3, off + 8, end - 1}
    for off, end, _t, psize in rows:
        if psize:
            pts |= {off + 20, off + AUXTRACE_HEADER, off + AUXTRACE_HEADER + psize // 3, end - 5, end}
    if wide:
        pts |= set(range(0, size, 7))
    return sorted(p for p in pts if 0 <= p < size)


def _expect(header, rows, n: int, pipe: bool):
    """What a cut at n leaves: (error?, whole records, partial AUXTRACE row or None, containing row or None,
    part)."""
    whole = [r for r in rows if r[1] <= n]
    partial = next((r for r in rows if r[3] and r[0] + AUXTRACE_HEADER <= n < r[1]), None)
    inside = next((r for r in rows if r[0] < n < r[1]), None)
    if pipe:
        error = not any(r[2] == T_HEADER_ATTR for r in whole)
        part = "payload" if partial else "data"
    else:
        error = n < header["data_offset"]
        d_end = header["data_offset"] + header["data_size"]
        part = "features" if n >= d_end else "payload" if partial else "data"
    return error, whole, partial, inside, part


def _check_cut(path, data: bytes, header, rows, n: int, pipe: bool, strict_too: bool) -> None:
    cut_path = path.parent / f"cut-{path.parent.name}.data"
    cut_path.write_bytes(data[:n])
    error, whole, partial, inside, part = _expect(header, rows, n, pipe)
    rc, out, err = _info("--json", str(cut_path))
    if error:
        assert rc == 1 and out == "", (n, err)
        assert err.count("\n") == 1 and err.startswith(f"ptexport: error: {cut_path}+{n:#x}: "), (n, err)
        return
    assert rc == 0, (n, err)
    r = json.loads(out)
    boundary = pipe and inside is None  # nothing marks the end of a pipe cut between two records
    if boundary:
        assert r["cut"] is None and err == "", n
    else:
        c = r["cut"]
        assert c is not None, n
        assert err == (f"ptexport: {cut_path} cut at offset {n}: describing the {c['records_before']} records "
                       f"and {c['aux_bytes']} AUX bytes before it; cut {c['where']}\n")
        assert (c["offset"], c["part"]) == (n, part), (n, c)
        n_records = len(whole) + (partial is not None)
        assert c["records_before"] == n_records == r["records"]["TOTAL"], (n, c)
        aux = sum(row[3] for row in whole) + (n - partial[0] - AUXTRACE_HEADER if partial else 0)
        assert c["aux_bytes"] == aux == sum(r["aux_bytes"].values()), (n, c)
        if part == "payload":
            assert (c["record_offset"], c["record_type"], c["partial_present"], c["partial_size"]) == \
                (partial[0], "AUXTRACE", n - partial[0] - AUXTRACE_HEADER, partial[3])
            assert c["where"].startswith(f"inside the payload of data record {len(whole)} (AUXTRACE at ")
        elif part == "data" and inside is not None:
            assert c["record_offset"] == inside[0] and c["record_index"] == len(whole), (n, c)
            if n - inside[0] >= 8:
                assert c["where"].startswith(f"inside data record {len(whole)} ("), (n, c)
            else:
                assert c["where"].startswith(f"inside the 8-byte header of data record {len(whole)} "), (n, c)
        elif part == "data":  # file mode, at a record boundary
            assert c["record_offset"] is None and c["record_index"] is None, (n, c)
            assert c["where"].startswith(f"between two data records, after {len(whole)} data record" if whole
                                         else "at the start of the data section, before its first record"), (n, c)
        else:
            assert c["where"].startswith("inside the ") and "feature" in c["where"], (n, c)
    if strict_too and not boundary and part != "features":
        rc, out, err = _info("--strict", str(cut_path))
        assert rc == 1 and out == "" and err.count("\n") == 1 and err.startswith(f"ptexport: error: {cut_path}"), n
    elif strict_too and part == "features":  # the records are whole: a strict reader leaves the cut sections out
        rc, out, err = _info("--strict", "--json", str(cut_path))
        assert rc == 0 and err == "" and json.loads(out)["cut"] is None, n


def _sweep(path, pipe: bool, wide: bool) -> int:
    data = path.read_bytes()
    header, rows = _layout(path)
    pts = _points(header, rows, len(data), pipe, wide)
    for k, n in enumerate(pts):
        _check_cut(path, data, header, rows, n, pipe, strict_too=k % 4 == 0)
    return len(pts)


@pytest.mark.parametrize("mode", ["file", "pipe"])
def test_info_cut_offset_classes(rec, mode):
    assert _sweep(rec[mode], mode == "pipe", wide=False) >= 40


@pytest.mark.soak
@pytest.mark.parametrize("mode", ["file", "pipe"])
def test_info_cut_wide_sweep(rec, mode):
    """Every 7th offset and around every record."""
    assert _sweep(rec[mode], mode == "pipe", wide=True) > 500


def test_info_whole_file_has_no_cut(rec):
    for mode in ("file", "pipe"):
        rc, out, err = _info("--json", "--strict", str(rec[mode]))
        assert rc == 0 and err == "" and json.loads(out)["cut"] is None
        rc, text, _ = _info(str(rec[mode]))
        assert rc == 0 and "# CUT" not in text


def test_info_cut_text_and_stdin(rec, tmp_path, monkeypatch):
    """The text report's CUT section carries the JSON's facts; a cut pipe read from stdin says the same."""
    data = rec["pipe"].read_bytes()
    _header, rows = _layout(rec["pipe"])
    aux = next(r for r in rows if r[3])
    n = aux[0] + AUXTRACE_HEADER + 100
    path = tmp_path / "cut.data"
    path.write_bytes(data[:n])
    rc, out, _err = _info("--json", str(path))
    c = json.loads(out)["cut"]
    rc, text, _err = _info(str(path))
    assert rc == 0
    lines = text.splitlines()
    i = lines.index("# CUT: the file is cut (perf record killed, or the disk full): what follows is what is "
                    "before the cut")
    assert lines[i + 1] == f"  ends at offset   : {n} ({n:#x})"
    assert lines[i + 2] == f"  cut              : {c['where']}"
    assert lines[i + 3] == f"  read before it   : {c['records_before']} records, {c['aux_bytes']} AUX bytes"
    assert "100 of " in c["where"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data[:n])))
    rc, out, err = _info("--json", "-")
    assert rc == 0 and err.startswith(f"ptexport: - cut at offset {n}: ")
    c2 = json.loads(out)["cut"]
    assert {k: v for k, v in c2.items() if k not in ("source", "cause")} == \
        {k: v for k, v in c.items() if k not in ("source", "cause")}


def test_info_cut_entry_point_no_traceback(rec, tmp_path):
    """Through the real entry point: a cut in the attrs (error) and in a payload (report), no traceback."""
    data = rec["file"].read_bytes()
    header, rows = _layout(rec["file"])
    aux = next(r for r in rows if r[3])
    for n, rc_want in ((header["attrs_offset"] + 10, 1), (aux[0] + AUXTRACE_HEADER + 64, 0)):
        path = tmp_path / f"c{n}.data"
        path.write_bytes(data[:n])
        r = subprocess.run([sys.executable, "-c", "import sys; from ptexport.cli import entry; entry()", "info",
                            str(path)], capture_output=True, text=True, timeout=120)
        assert r.returncode == rc_want and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1
        if rc_want:
            assert r.stderr.startswith(f"ptexport: error: {path}+{n:#x}: attrs: the file ends at {n:#x}, inside attr 0")
        else:
            assert "# CUT" in r.stdout and r.stderr.startswith(f"ptexport: {path} cut at offset {n}: describing the ")
            assert "AUX bytes before it; cut inside the payload of data record" in r.stderr


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("mode", ["file", "pipe"])
def test_info_cut_compressed_perf_recording(tmp_path, mode):
    """A zstd-compressed recording perf 6.1 made (-z; file mode, and pipe mode written to a file), cut at 25
    offsets through its data: exit 0, the cut offset (a pipe cut between two records reads as whole),
    record counts by type never above the whole file's, their total the cut's count."""
    path = tmp_path / "z.data"
    cmd = ["perf", "record", "-q", "-z", "-e", "task-clock", "-c", "100000", "--switch-events", "-o",
           "-" if mode == "pipe" else str(path), "--", "ls", "-R", "/usr/lib/python3/dist-packages"]
    with open(path, "ab") as f:
        r = subprocess.run(cmd, stdout=f if mode == "pipe" else subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        pytest.skip(f"perf record cannot record here: {r.stderr[-200:]!r}")
    data = path.read_bytes()
    d_off, d_size = (16, len(data) - 16) if mode == "pipe" else struct.unpack_from("<QQ", data, 40)
    rc, out, _ = _info("--json", str(path))
    whole = json.loads(out)["records"]
    assert whole.get("COMPRESSED", 0) >= 1
    cut_path = tmp_path / "cut.data"
    cuts = 0
    for k in range(25):
        n = d_off + 1 + (d_size - 2) * k // 24
        cut_path.write_bytes(data[:n])
        rc, out, err = _info("--json", str(cut_path))
        if mode == "pipe" and rc == 1:  # cut before the first HEADER_ATTR is whole
            assert err.startswith(f"ptexport: error: {cut_path}+{n:#x}: cut: ") and "no event attr before the cut" in err
            continue
        assert rc == 0, (n, err)
        rep = json.loads(out)
        assert all(v <= whole.get(name, 0) for name, v in rep["records"].items() if name != "TOTAL"), n
        c = rep["cut"]
        if c is None:
            assert mode == "pipe" and err == "", n
            continue
        cuts += 1
        assert c["offset"] == n and c["part"] == "data" and c["records_before"] == rep["records"]["TOTAL"]
        assert err.startswith(f"ptexport: {cut_path} cut at offset {n}: ")
    assert cuts >= 20


def _perf_stats(path) -> dict[str, int]:
    import re

    out = subprocess.run(["perf", "report", "--stats", "-i", str(path)], capture_output=True, text=True,
                         timeout=120).stdout
    stats = {}
    for line in out.split("Aggregated stats:", 1)[1].splitlines():
        if line.rstrip().endswith("stats:"):
            break
        m = re.match(r"\s*(\S+) events:\s+(\d+)", line)
        if m:
            stats[m.group(1)] = int(m.group(2))
    return stats


@needs_perf
def test_info_cut_counts_equal_perf_on_repaired_copy(rec, tmp_path):
    """File mode, cut inside sideband records: our counts on the cut file are ``perf report --stats`` on a
    repaired copy (the records before the cut, the header's data size fixed, the feature sections behind
    them); perf 6.1 fails on the cut file itself ("failed to process sample", no stats)."""
    full = rec["file"].read_bytes()
    header, rows = _layout(rec["file"])
    d_off, d_end = header["data_offset"], header["data_offset"] + header["data_size"]
    nfeat = bin(header["features"]).count("1")
    kernel = [r for r in rows if r[2] < 64]
    for row in kernel[1:3] + kernel[-2:]:
        n = row[0] + 11
        cut_path = tmp_path / "cut.data"
        cut_path.write_bytes(full[:n])
        rc, out, _err = _info("--json", str(cut_path))
        assert rc == 0
        mine = json.loads(out)["records"]
        end = row[0]  # the last whole record ends where the cut one starts
        rep = bytearray(full[:end])
        struct.pack_into("<Q", rep, 48, end - d_off)
        feats = bytearray(full[d_end:])
        for k in range(nfeat):
            o, _s = struct.unpack_from("<QQ", feats, 16 * k)
            struct.pack_into("<Q", feats, 16 * k, o - (d_end - end))
        rep_path = tmp_path / "rep.data"
        rep_path.write_bytes(bytes(rep + feats))
        assert mine == _perf_stats(rep_path), n
