"""Salvage where little or nothing is there (issue #14): cuts before the data, before the records that make
decoding possible, and headers perf record did not finish.

Per offset class, for ``ptexport info``, ``ptexport dump branches`` and the export:

* inside the file header, the attrs or an attr's ids: nothing can be read; a one-line typed error naming
  the file, the offset where it ends and the part; exit 1; no database is created;
* at the start of the data or inside the AUXTRACE_INFO record (pipe mode: anywhere before it): ``info``
  describes the attrs; decoding has nothing to work on: a one-line error saying so (exit 1);
* after AUXTRACE_INFO, before the first sideband: everything there is exported (no samples), with the
  ``file_cut`` stats row; perf 6.1's export-to-sqlite.py on a repaired copy (the header's data size fixed)
  writes the same rows;
* a header whose data size is 0 (perf record killed before it rewrote the header at exit: perf writes the
  feature bits at start, the feature sections and the final header at exit): the records are read to the
  end of the file, or to the feature table when perf got as far as writing the feature sections (read as
  features then), or to a zeroed table it did not get to write; a finished recording without records (its
  feature table at the data offset) is whole. perf 6.1 refuses all of these (it processes nothing when the
  data size is 0: "failed to process sample"); older perf read to the end of the file;
* a data size that ends inside a record (perf record counts only the writes that succeeded: a full disk
  leaves a torn write behind the data): the records inside the data size are read, a payload up to the
  data end, like perf (which reads the data size, and stops at a record it cuts);
* ``--strict``: each of these is a one-line error (a cut in the feature sections only drops those
  sections, as without it).
"""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import struct
import subprocess

import pytest

from ptexport.cli import main
from ptexport.errors import TruncatedError
from ptexport.perfdata import perf_data_from_bytes
from ptexport.synth.generate import SynthOptions, synthesize
from ptxtest import HAVE_PERF, perf_python_env

T_AUXTRACE = 71
T_AUXTRACE_INFO = 70
T_HEADER_ATTR = 64
AUXTRACE_HEADER = 48
EXPORT_SCRIPT = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"


@pytest.fixture(scope="module")
def rec(tmp_path_factory):
    d = tmp_path_factory.mktemp("salvage_open")
    return {mode: synthesize(str(d / mode), SynthOptions(program="calls", branches=2000, cpus=2, seed=11,
                                                         pipe=mode == "pipe")).perf_data
            for mode in ("file", "pipe")}


def _layout(data: bytes):
    with perf_data_from_bytes(data) as pd:
        rows = [(r.offset, r.offset + (r.header_size + r.size if r.type == T_AUXTRACE else r.size), r.type,
                 r.size if r.type == T_AUXTRACE else 0) for r in pd.records()]
        return dict(pd.header), rows, {k: repr(v) for k, v in pd.features.items()}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv, out)
    assert "Traceback" not in err.getvalue()
    return rc, out.getvalue(), err.getvalue()


def _commands(path, db) -> dict[str, list[str]]:
    return {"info": ["info", str(path)], "dump": ["dump", "branches", "--csv", str(path)],
            "export": ["export", str(path), "--db", str(db), "-q"]}


def _one_error(rc: int, err: str, path, n: int, *words: str) -> None:
    assert rc == 1 and err.count("\n") == 1, err
    assert err.startswith(f"ptexport: error: {path}+{n:#x}: "), err
    for w in words:
        assert w in err, (w, err)


# ------------------------------------------------------------------------------ before the data section


def test_cut_before_the_data_is_a_clean_error_everywhere(rec, tmp_path):
    """Inside the header, inside each attr, inside the ids, just before the data: info, dump branches and
    the export (with and without --strict) give the same one-line error; no database is left."""
    data = rec["file"].read_bytes()
    header, _rows, _f = _layout(data)
    a_off, a_size, attr_size, d_off = (header["attrs_offset"], header["attrs_size"], header["attr_size"],
                                       header["data_offset"])
    ids_off = struct.unpack_from("<Q", data, a_off + attr_size - 16)[0]
    cases = [(3, "header", "inside the header"), (60, "header", "inside the 104-byte header"),
             (a_off + 5, "attrs", "inside attr 0 of the attrs section"),
             (a_off + a_size - 1, "attrs", f"inside attr {a_size // attr_size - 1} of the attrs section"),
             (ids_off + 3, "attr 0", "inside the ids of attr 0")]
    if d_off - 1 not in {c[0] for c in cases}:
        cases.append((d_off - 1, "", "cut before the data section"))
    for n, what, words in cases:
        path = tmp_path / "cut.data"
        path.write_bytes(data[:n])
        db = tmp_path / "cut.db"
        for name, argv in _commands(path, db).items():
            for strict in ([], ["--strict"]):
                rc, out, err = _run(argv + strict)
                _one_error(rc, err, path, n, words, "no records to read", f"{what}: " if what else "")
                assert out == "" and not os.path.exists(db), (name, n)


@pytest.mark.parametrize("mode", ["file", "pipe"])
def test_cut_before_auxtrace_info(rec, tmp_path, mode):
    """Cut before the AUXTRACE_INFO record is whole: info describes what is there (pipe mode: once an attr
    is whole), decoding says there is nothing to decode (one line, the offset, exit 1, no database)."""
    data = rec[mode].read_bytes()
    _header, rows, _f = _layout(data)
    info_row = next(r for r in rows if r[2] == T_AUXTRACE_INFO)
    first_attr_end = next((r[1] for r in rows if r[2] == T_HEADER_ATTR), None)
    points = [info_row[0], info_row[0] + 3, info_row[0] + 40, info_row[1] - 1]
    if mode == "pipe":
        points += [17, 40, rows[2][0] + 30, rows[5][0] + 9]
    for n in sorted(set(points)):
        path = tmp_path / "cut.data"
        path.write_bytes(data[:n])
        db = tmp_path / "cut.db"
        cmds = _commands(path, db)
        boundary = mode == "pipe" and n in {r[0] for r in rows}  # a pipe cut between records reads as whole
        rc, out, err = _run(cmds["info"])
        if mode == "pipe" and n < first_attr_end:
            _one_error(rc, err, path, n, "no event attr before the cut, nothing to describe")
        elif boundary:
            assert rc == 0 and "# CUT" not in out and err == "", (n, err)
        else:
            assert rc == 0 and "# CUT" in out and err.startswith(f"ptexport: {path} cut at offset {n}: "), (n, err)
        for name in ("dump", "export"):
            rc, out, err = _run(cmds[name])
            if boundary:
                assert rc == 2 and err == (f"ptexport: error: {path}: no Intel PT AUXTRACE_INFO: not an intel_pt "
                                           "recording (or a pipe-mode recording cut before that record)\n"), err
            else:
                _one_error(rc, err, path, n, "no Intel PT AUXTRACE_INFO record before the cut, nothing to decode")
            assert out == "" and not os.path.exists(db), (name, n)


def _repair_boundary(full: bytes, n: int) -> bytes:
    """A file-mode copy perf reads in place of full[:n] cut at a record boundary: the data size fixed and
    the feature sections moved behind the data."""
    d_off, d_size = struct.unpack_from("<QQ", full, 40)
    out = bytearray(full[:n])
    struct.pack_into("<Q", out, 48, n - d_off)
    feats = bytearray(full[d_off + d_size:])
    for k in range(bin(int.from_bytes(full[72:104], "little")).count("1")):
        o, _s = struct.unpack_from("<QQ", feats, 16 * k)
        struct.pack_into("<Q", feats, 16 * k, o + n - (d_off + d_size))
    return bytes(out + feats)


@pytest.mark.perf  # perf's export of a repaired copy
def test_cut_before_the_first_sideband_exports_what_is_there(rec, tmp_path):
    """Cut inside the MMAP2 record after AUXTRACE_INFO, TIME_CONV and COMM: dump branches has no sample (one
    warning line); the export is complete-as-salvaged: the file_cut row at the cut, no decode error, and
    (perf installed) the rows perf 6.1's export-to-sqlite.py writes for the records before the cut."""
    full = rec["file"].read_bytes()
    _header, rows, _f = _layout(full)
    mmap_row = next(r for r in rows if r[2] == 10)
    n = mmap_row[0] + 50
    path = tmp_path / "cut.data"
    path.write_bytes(full[:n])
    rc, out, err = _run(["dump", "branches", "--csv", str(path)])
    assert rc == 0 and out.count("\n") == 1 and err.startswith(f"ptexport: {path} cut at offset {n}: decoding the ")
    db = tmp_path / "cut.db"
    rc, _out, err = _run(["export", str(path), "--db", str(db), "-q"])
    assert rc == 0 and err.startswith(f"ptexport: {path} cut at offset {n}: exporting the ") and err.count("\n") == 1
    con = sqlite3.connect(db)
    assert con.execute("select cpu, value, severity from stats where name = 'file_cut'").fetchall() == \
        [(-1, n, "warning")]
    assert con.execute("select count(*) from decode_errors").fetchone() == (0,)
    tables = ("samples", "comms", "threads", "comm_threads", "dsos", "symbols", "calls")
    mine = {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in tables}
    assert mine["samples"] == 1  # perf's id-0 placeholder row only
    if not HAVE_PERF or not os.path.exists(EXPORT_SCRIPT):
        return
    rep = tmp_path / "rep.data"
    rep.write_bytes(_repair_boundary(full, mmap_row[0]))
    pdb = tmp_path / "perf.db"
    r = subprocess.run(["perf", "script", "-i", str(rep), "-s", EXPORT_SCRIPT, str(pdb), "branches", "calls"],
                       capture_output=True, text=True, timeout=120, env=perf_python_env())
    assert r.returncode == 0, r.stderr[-500:]
    pcon = sqlite3.connect(pdb)
    theirs = {t: pcon.execute(f"select count(*) from {t}").fetchone()[0] for t in tables}
    assert mine == theirs


# ------------------------------------------------------------------------ headers perf did not finish


def _zero_size(data: bytes) -> bytearray:
    z = bytearray(data)
    struct.pack_into("<Q", z, 48, 0)
    return z


def test_data_size_zero_killed_while_recording(rec):
    """No feature sections: the records to the end of the file, a cut last one (or payload) as any cut."""
    full = rec["file"].read_bytes()
    header, rows, _f = _layout(full)
    d_end = header["data_offset"] + header["data_size"]
    z = _zero_size(full)
    for n in sorted({d_end, rows[3][1], rows[3][1] + 5} | {r[0] + AUXTRACE_HEADER + 77 for r in rows if r[3]}):
        pd = perf_data_from_bytes(z[:n], salvage=True)
        got = [(r.offset, r.type) for r in pd.records()]
        whole = [(r[0], r[2]) for r in rows if r[1] <= n]
        part = [(r[0], r[2]) for r in rows if r[3] and r[0] + AUXTRACE_HEADER <= n < r[1]]
        assert got == whole + part, n
        c = pd.cut
        assert c.offset == n and c.data_size_zero and "data size is 0" in c.where and pd.features == {}
        assert c.part == ("payload" if part else "data")
        with pytest.raises(TruncatedError, match=r"\+0x30: header: the header's data size is 0"):
            perf_data_from_bytes(z[:n])


def test_data_size_zero_killed_after_the_features(rec, tmp_path):
    """The feature sections written, the header not rewritten: the data ends at the feature table, the
    features are read; every record and sample as in the whole file."""
    full = rec["file"].read_bytes()
    header, rows, feats = _layout(full)
    d_end = header["data_offset"] + header["data_size"]
    z = _zero_size(full)
    pd = perf_data_from_bytes(z, salvage=True)
    assert [(r.offset, r.type) for r in pd.records()] == [(r[0], r[2]) for r in rows]
    assert {k: repr(v) for k, v in pd.features.items()} == feats and pd.feature_errors == []
    assert (pd.cut.offset, pd.cut.part, pd.cut.data_size_zero) == (d_end, "data", True)
    assert f"the feature sections follow at {d_end:#x}" in pd.cut.where
    path = tmp_path / "z.data"
    path.write_bytes(z)
    rc, out, err = _run(["dump", "branches", "--csv", str(path)])
    _rc, whole, _ = _run(["dump", "branches", "--csv", str(rec["file"])])
    assert rc == 0 and out == whole and err.startswith(f"ptexport: {path} cut at offset {d_end}: ")
    rc, out, err = _run(["dump", "branches", "--csv", "--strict", str(path)])
    _one_error(rc, err, path, 0x30, "data size is 0")
    # killed while writing them: the table (written last) still zeros; the sections are not read
    zt = bytearray(z)
    zt[d_end:d_end + 16 * bin(header["features"]).count("1")] = bytes(16 * bin(header["features"]).count("1"))
    pd = perf_data_from_bytes(zt, salvage=True)
    assert [(r.offset, r.type) for r in pd.records()] == [(r[0], r[2]) for r in rows]
    assert pd.features == {} and (pd.cut.offset, pd.cut.data_size_zero) == (d_end, True)


def test_finished_recording_without_records_is_whole(rec):
    """A data size of 0 with the feature table right at the data offset is a finished, empty recording."""
    full = rec["file"].read_bytes()
    header, _rows, feats = _layout(full)
    d_off, d_end = header["data_offset"], header["data_offset"] + header["data_size"]
    empty = bytearray(full[:d_off] + full[d_end:])
    struct.pack_into("<Q", empty, 48, 0)
    for k in range(bin(header["features"]).count("1")):
        o, _s = struct.unpack_from("<QQ", empty, d_off + 16 * k)
        struct.pack_into("<Q", empty, d_off + 16 * k, o - (d_end - d_off))
    for salvage in (False, True):
        pd = perf_data_from_bytes(bytes(empty), salvage=salvage)
        assert list(pd.records()) == [] and pd.cut is None
        assert {k: repr(v) for k, v in pd.features.items()} == feats


def test_data_size_ending_inside_a_record(rec):
    """perf record's data size counts the writes that succeeded; on a full disk a torn write may follow
    the data (and no feature section). Inside a record body and inside a payload: the records within the
    data size, a payload up to the data end, the cut at the data end; --strict: the error."""
    full = rec["file"].read_bytes()
    header, rows, _f = _layout(full)
    d_off = header["data_offset"]
    aux = next(r for r in rows if r[3])
    for d_end in (rows[3][0] + 20, aux[0] + AUXTRACE_HEADER + 300):
        f = bytearray(full[:d_end + 200])  # the torn write behind the data
        struct.pack_into("<Q", f, 48, d_end - d_off)
        pd = perf_data_from_bytes(bytes(f), salvage=True)
        got = list(pd.records())
        whole = [(r[0], r[2]) for r in rows if r[1] <= d_end]
        part = [r for r in rows if r[3] and r[0] + AUXTRACE_HEADER <= d_end < r[1]]
        assert [(r.offset, r.type) for r in got] == whole + [(r[0], r[2]) for r in part]
        assert pd.cut.offset == d_end and "the header's data size ends the data there" in pd.cut.where
        if part:
            assert bytes(pd.aux_data(got[-1])) == full[part[0][0] + AUXTRACE_HEADER:d_end]
            assert pd.cut.part == "payload" and pd.cut.partial_present == 300
        else:
            assert pd.cut.record_offset == rows[3][0]
        with pytest.raises(TruncatedError, match=f"runs past the end (of the data section )?\\({d_end:#x}\\)"):
            list(perf_data_from_bytes(bytes(f)).records())
