"""Names of events recorded without one: ptexport derives them as perf 6.1 does (evsel__name).

The oracle is perf itself: a file-mode and a pipe-mode perf.data holding only nameless attrs (no
event_desc), listed by ``perf evlist -i FILE`` and ``cat FILE | perf evlist -i -``; ptexport's names for
the same files must be the same, line for line.
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from ptexport.perfdata.attr import perf_event_name
from ptexport.perfdata.constants import AttrFlag, SampleType
from ptexport.perfdata.reader import PerfData

needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="perf 6.1 (linux-perf) is not installed")

ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7: perf 6.1 refuses larger attrs whose ABI it does not know
SAMPLE_TYPE = SampleType.IP | SampleType.TID | SampleType.TIME | SampleType.IDENTIFIER
HW, SW, TP, CACHE, RAW, BP = 0, 1, 2, 3, 4, 5


def _flags(*, ku=0, precise=0, hg=0) -> int:
    """ku: bits exclude_user/kernel/hv (1/2/4); hg: exclude_host/exclude_guest (1/2)."""
    f = 0
    for i, bit in enumerate((AttrFlag.EXCLUDE_USER, AttrFlag.EXCLUDE_KERNEL, AttrFlag.EXCLUDE_HV)):
        if ku >> i & 1:
            f |= 1 << bit
    for i, bit in enumerate((AttrFlag.EXCLUDE_HOST, AttrFlag.EXCLUDE_GUEST)):
        if hg >> i & 1:
            f |= 1 << bit
    return f | precise << AttrFlag.PRECISE_IP


def _attr(type_: int, config: int, flags: int = 0, bp_type: int = 0, bp_addr: int = 0) -> bytes:
    raw = struct.pack("<IIQQQQQIIQQQQIiQIHHIIQ", type_, ATTR_SIZE, config, 1, SAMPLE_TYPE, 0, flags,
                      0, bp_type, bp_addr, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert len(raw) == ATTR_SIZE
    return raw


def _file_mode(attrs: list[bytes]) -> bytes:
    """PERFILE2 with the attrs (one id each), a data section of one FINISHED_ROUND and no features."""
    ids_off = 104 + len(attrs) * (ATTR_SIZE + 16)
    section = b"".join(a + struct.pack("<QQ", ids_off + 8 * k, 8) for k, a in enumerate(attrs))
    ids = b"".join(struct.pack("<Q", 100 + k) for k in range(len(attrs)))
    data_off = ids_off + len(ids)
    header = struct.pack("<8sQQQQQQQQ4Q", b"PERFILE2", 104, ATTR_SIZE + 16, 104, len(section), data_off, 8,
                         0, 0, 0, 0, 0, 0)
    return header + section + ids + struct.pack("<IHH", 68, 0, 8)


def _pipe_mode(attrs: list[bytes]) -> bytes:
    """The pipe header, one HEADER_ATTR record per attr (one id each) and a FINISHED_ROUND."""
    out = struct.pack("<8sQ", b"PERFILE2", 16)
    for k, a in enumerate(attrs):
        out += struct.pack("<IHH", 64, 0, 8 + ATTR_SIZE + 8) + a + struct.pack("<Q", 100 + k)
    return out + struct.pack("<IHH", 68, 0, 8)


# (type, config, flags, bp_type, bp_addr): every branch of perf's naming, modifiers on each kind
CASES = (
    [(HW, c, 0, 0, 0) for c in range(11)]
    + [(HW, (4 << 32) | 9, 0, 0, 0), (HW, (1 << 32) | 0, 0, 0, 0), (HW, (8 << 32) | 77, 0, 0, 0),
       (HW, 1 << 40, _flags(ku=1), 0, 0), (HW, 0xFFFFFFFF, 0, 0, 0)]
    + [(SW, c, 0, 0, 0) for c in range(13)] + [(SW, 1 << 32, 0, 0, 0)]
    + [(CACHE, t | op << 8 | res << 16, 0, 0, 0) for t in range(8) for op in range(4) for res in range(3)]
    + [(CACHE, 0x1 | 1 << 8 | 1 << 16 | 5 << 32, _flags(ku=2), 0, 0), (CACHE, 0x7FFFFF, 0, 0, 0)]
    + [(RAW, c, 0, 0, 0) for c in (0, 0x1234, 0xFFFFFFFFFFFFFFFF)]
    + [(BP, 0, 0, bt, addr) for bt in range(8) for addr in (0, 0xFFFF0000)]
    + [(BP, 0, _flags(ku=1, precise=1), 3, 0x1000)]
    + [(t, 0, 0, 0, 0) for t in (6, 8, 99, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)]
    + [(t, 0, _flags(ku=3, precise=2, hg=1), 0, 0) for t in (6, 0xFFFFFFFF)]
    # every modifier combination, on four kinds
    + [(t, c, _flags(ku=ku, precise=p, hg=hg), 3 if t == BP else 0, 0x40 if t == BP else 0)
       for t, c in ((HW, 0), (SW, 9), (CACHE, 0x10002), (RAW, 0x1C2), (BP, 0))
       for ku in range(8) for p in range(4) for hg in range(4)]
)


def _attrs(cases=CASES) -> list[bytes]:
    return [_attr(t, c, f, bt, addr) for t, c, f, bt, addr in cases]


def _ours(path) -> list[str]:
    with PerfData(path) as pd:
        assert all(a.name is None for a in pd.attrs)
        return [pd.event_name(a) for a in pd.attrs]


@needs_perf
def test_file_mode_names_equal_perf_evlist(tmp_path):
    path = tmp_path / "nameless.data"
    path.write_bytes(_file_mode(_attrs()))
    r = subprocess.run(["perf", "evlist", "-i", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-500:]
    theirs = r.stdout.splitlines()
    assert len(theirs) == len(CASES)
    assert _ours(path) == theirs


@needs_perf
def test_pipe_mode_names_equal_perf_evlist_through_a_pipe(tmp_path):
    """Tracepoints too: perf refuses a file-mode tracepoint without tracing data, not a pipe."""
    cases = CASES + [(TP, 1, 0, 0, 0), (TP, 0x1234, _flags(ku=1, hg=2), 0, 0)]
    path = tmp_path / "nameless.pipe"
    path.write_bytes(_pipe_mode(_attrs(cases)))
    with open(path, "rb") as f:
        cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
        r = subprocess.run(["perf", "evlist", "-i", "-"], stdin=cat.stdout, capture_output=True, text=True,
                           timeout=60)
        cat.stdout.close()
        cat.wait()
    assert r.returncode == 0, r.stderr[-500:]
    theirs = [line for line in r.stdout.splitlines() if not line.startswith("# Tip")]
    assert len(theirs) == len(cases)
    assert _ours(path) == theirs


def test_recorded_names_win(tmp_path):
    """An event_desc name is kept as recorded, whatever the attr would be named."""
    from perfdata_writer import file_mode as writer_file_mode

    attrs = [(_attr(HW, 0, _flags(ku=6)), [7])]
    name = b"my-cycles:u\0"
    name += bytes(-len(name) % 8)
    desc = struct.pack("<II", 1, ATTR_SIZE) + _attr(HW, 0, _flags(ku=6)) + struct.pack("<II", 1, len(name))
    desc += name + struct.pack("<Q", 7)
    path = tmp_path / "named.data"
    path.write_bytes(writer_file_mode(attrs, b"", {12: desc}))
    with PerfData(path) as pd:
        assert [pd.event_name(a) for a in pd.attrs] == ["my-cycles:u"]
        assert perf_event_name(pd.attrs[0]) == "cycles:u"


def test_known_names():
    """A few names as perf prints them for common recordings (spelled out, independent of perf)."""
    from ptexport.perfdata.attr import EventAttr

    def name(t, c, **kw):
        return perf_event_name(EventAttr(_attr(t, c, _flags(**kw))))

    assert name(HW, 0, hg=2) == "cycles"          # perf record -e cycles: exclude_guest set by default
    assert name(HW, 0) == "cycles:HG"
    assert name(SW, 9, ku=6) == "dummy:u"         # the quipper recordings' sideband event
    assert name(SW, 9, ku=6, hg=2) == "dummy:uH"
    assert name(HW, 1, precise=3, hg=2) == "instructions:pppH"
    assert name(CACHE, 0x10000, hg=2) == "L1-dcache-load-misses"
    assert name(CACHE, 0x00104, hg=2) == "invalid-cache"   # L1-icache has no stores
    assert name(RAW, 0x1C2, ku=1, hg=1) == "raw 0x1c2:khG"
    assert name(8, 0x300E601) == "unknown attr type: 8"
    assert name(0xFFFFFFFF, 0) == "unknown attr type: -1"


@needs_perf
def test_guest_attr_names_equal_perf_inject(tmp_path):
    """--guest-data names the guest's events as perf inject's output does: its new evsels have no name, so
    the injected file's event_desc holds perf's derived one (exclude_host set, exclude_guest clear)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
    from guestdatatest import make

    from ptexport.perfdata.reader import open_perf_data
    from ptexport.session.guestdata import apply_guest_data, parse_guest_data

    t = make(tmp_path, "mixed", branches=500)
    guest = t.gen / "guest.data" / "data"
    raw = bytearray(guest.read_bytes())
    entry, attrs_off, attrs_size = struct.unpack_from("<QQQ", raw, 16)
    for k in range(attrs_size // entry):  # the guest's events exclude user space and sample with precise_ip 2
        (flags,) = struct.unpack_from("<Q", raw, attrs_off + k * entry + 40)
        struct.pack_into("<Q", raw, attrs_off + k * entry + 40, flags | _flags(ku=1, precise=2))
    guest.write_bytes(bytes(raw))
    injected = tmp_path / "injected.data"
    r = subprocess.run(["perf", "inject", "-i", str(t.work / "host.data" / "data"), f"--guest-data={t.spec}",
                        "-o", str(injected)], capture_output=True, text=True, cwd=t.work, timeout=120)
    assert r.returncode == 0, r.stderr[-500:]
    with open_perf_data(t.host) as host, open_perf_data(injected) as theirs:
        ours = apply_guest_data(host, [parse_guest_data(t.spec)])
        assert [a.name for a in ours.attrs] == [a.name for a in theirs.attrs]
        assert any(a.name.endswith(":khppG") for a in ours.attrs)
