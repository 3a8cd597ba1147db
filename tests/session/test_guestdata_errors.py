"""Bad ``--guest-data`` arguments and guest files: one-line errors naming the file and the cause (exit
code 2 for usage, 1 for a malformed file), no traceback; the export then leaves no database behind.

Two guests: a second --guest-data whose PID has no VCPU threads is refused (as perf inject refuses
it); two --guest-data for one PID are refused before any file is read (two real guests:
test_guestdata_two_guests.py).
"""

from __future__ import annotations

import struct

import pytest

from ptexport.errors import UsageError
from ptexport.perfdata.constants import AttrFlag, AttrType, RecordType, SoftwareEvent
from ptexport.session.guestdata import GuestDataSpec, parse_guest_data, parse_guest_data_list
from ptexport.synth.perfwrite import Attr, PerfDataWriter, attr_flags, record, time_conv_record
from ptexport.synth.vm import ST

from guestdatatest import make, run
from ptxtest import needs_perf


def test_parse_perf_forms():
    assert parse_guest_data("g.data,4000") == GuestDataSpec("g.data", 4000, 0, 1.0)
    assert parse_guest_data("g.data,0x10,0xfffff9a288e4bf00,0.5") == GuestDataSpec("g.data", 16, 0xfffff9a288e4bf00,
                                                                                    0.5)
    assert parse_guest_data("g.data,010,010") == GuestDataSpec("g.data", 8, 8)  # strtoul base 0: octal
    assert parse_guest_data("g.data,7,-1").offset == (1 << 64) - 1  # strtoull wraps a minus sign


@pytest.mark.parametrize("text,words", [
    ("", "no guest perf.data file name"),
    ("g.data", "no guest machine PID"),
    ("g.data,", "PID '' is not a number"),
    ("g.data,abc", "PID 'abc' is not a number"),
    ("g.data,0", "must be a process id above 0"),
    ("g.data,12x", "PID '12x' is not a number"),
    ("g.data,4000,zz", "OFFSET 'zz' is not a number"),
    ("g.data,4000,0x1g", "OFFSET '0x1g' is not a number"),
    ("g.data,4000,0x10000000000000000", "does not fit in 64 bits"),
    ("g.data,4000,0,x", "SCALE 'x' is not a number"),
    ("g.data,4000,0,0", "must be a positive finite number"),
    ("g.data,4000,0,-2", "must be a positive finite number"),
    ("g.data,4000,0,inf", "must be a positive finite number"),
    ("g.data,4000,0,1,2", "5 fields"),
])
def test_parse_errors(text, words):
    with pytest.raises(UsageError) as e:
        parse_guest_data(text)
    assert words in str(e.value) and "--guest-data" in str(e.value)


def test_same_pid_twice():
    with pytest.raises(UsageError, match="machine PID 4000 given twice"):
        parse_guest_data_list(["a.data,4000", "b.data,0xfa0"])
    assert len(parse_guest_data_list(["a.data,4000", "b.data,4001"])) == 2


def _no_sideband(path):
    """A guest perf.data with attrs, ids, ID_INDEX and TIME_CONV but no sideband record."""
    dummy = Attr(type=AttrType.SOFTWARE, config=SoftwareEvent.DUMMY, sample_type=ST,
                 flags=attr_flags(AttrFlag.SAMPLE_ID_ALL, AttrFlag.MMAP2, AttrFlag.COMM), name="dummy:u", ids=[300])
    with open(path, "wb") as f:
        w = PerfDataWriter(f, [dummy])
        w.write(record(RecordType.ID_INDEX, 0, struct.pack("<QQQQQ", 1, 300, 0, 0, (1 << 64) - 1)))
        w.write(time_conv_record(32, 1 << 31, 0))
        w.write(record(RecordType.FINISHED_INIT, 0, b""))
        w.close({})


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    import shutil

    if shutil.which("perf") is None:
        pytest.skip("perf (Debian linux-perf) is not installed: perf inject makes the reference")
    return make(tmp_path_factory.mktemp("gd_errors"), "user", branches=1000)


def _bad_cases(t, tmp):
    _no_sideband(tmp / "empty.data")
    (tmp / "text.data").write_text("not a perf.data file\n")
    return [
        (f"{tmp / 'missing.data'},{t.pid}", 2, ["missing.data", "no such file or directory"]),
        (f"{t.guest},1234", 2, ["no VCPU threads", "pid 1234", str(t.host)]),
        (f"{t.guest},{t.pid},nope", 2, ["OFFSET 'nope' is not a number"]),
        (f"{t.guest},{t.pid},0,zero", 2, ["SCALE 'zero' is not a number"]),
        (f"{tmp / 'empty.data'},{t.pid}", 1, ["empty.data", "no sideband records"]),
        (f"{tmp / 'text.data'},{t.pid}", 1, ["text.data", "bad magic", "the guest perf.data of --guest-data"]),
    ]


@needs_perf
def test_dump_errors(trace, tmp_path, capsys):
    for spec, rc, words in _bad_cases(trace, tmp_path):
        got, text = run(["dump", "branches", trace.host, "--guest-data", spec])
        err = capsys.readouterr().err
        assert got == rc, (spec, err)
        assert text == "" and "Traceback" not in err and err.startswith("ptexport: error: "), (spec, err)
        assert all(w in err for w in words), (spec, err)


@needs_perf
def test_second_guest_without_vcpu_threads(trace, capsys):
    """Two --guest-data: the second guest's PID runs no VCPU in this host recording."""
    got, _ = run(["dump", "branches", trace.host, "--guest-data", trace.spec,
                  "--guest-data", f"{trace.guest},{trace.pid + 1}"])
    err = capsys.readouterr().err
    assert got == 2 and f"pid {trace.pid + 1}" in err and "no VCPU threads" in err


@needs_perf
def test_pipe_mode_host_refused(trace, tmp_path, capsys):
    """perf inject looks through the host's COMMs before it merges (it cannot on a pipe): so does ptexport."""
    from ptexport.synth.generate import SynthOptions, synthesize

    res = synthesize(tmp_path / "p", SynthOptions(branches=300, pipe=True, replay="off"))
    got, _ = run(["dump", "branches", res.perf_data, "--guest-data", trace.spec])
    err = capsys.readouterr().err
    assert got == 2 and "pipe-mode stream" in err and "Traceback" not in err, err
