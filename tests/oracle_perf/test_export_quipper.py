"""``ptexport TRACE --db DB`` on a real recording equals perf 6.1's export-to-sqlite.py.

The quipper recording (kernel + user, binaries missing) exercises what generated
traces do not: non-PT ``cycles`` samples interleaved with the synthesized ones,
switches perf drops (threads it has not found, or without a comm), threads only
samples name (``:TID`` comms), perf's placeholder "unknown" symbols, the
``[kernel.kallsyms]`` DSO with the header's build-id, and ``--kallsyms``.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess

import pytest

from ptxtest import QUIPPER, needs_perf, perf_python_env
from ptexport.cli import main
from ptexport.images.kallsyms import kmod_name, parse_kallsyms
from ptexport.dbexport.threads import PerfThreads

EXPORTER = "/usr/lib/perf-core/scripts/python/export-to-sqlite.py"
TABLES = ["machines", "threads", "comms", "comm_threads", "dsos", "symbols", "selected_events", "samples",
          "calls", "call_paths", "context_switches", "branch_types", "cbr"]
KTEXT = 0xFFFFFFFFB9600000  # the recording's [kernel.kallsyms]_text map


def _have_exporter() -> bool:
    if not os.path.exists(EXPORTER) or not QUIPPER.exists():
        return False
    return subprocess.run(["/usr/bin/python3", "-c", "import PySide2.QtSql"], capture_output=True).returncode == 0


needs_exporter = pytest.mark.skipif(not _have_exporter(), reason="needs perf's export-to-sqlite.py, "
                                    "python3-pyside2.qtsql and the quipper recording")


def _rows(db, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return [tuple(None if v == "" else v for v in r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def _columns(db, table: str) -> list[str]:
    return [r[1] for r in _rows(db, f"PRAGMA table_info({table})")]


def _export_pair(tmp, extra: list[str]):
    theirs, ours = tmp / "perf.db", tmp / "ours.db"
    subprocess.run(["perf", "script", *extra, "-i", str(QUIPPER), "--itrace=bep", "-s", EXPORTER, str(theirs),
                    "branches", "calls"], check=True, capture_output=True, timeout=600, env=perf_python_env())
    assert main([str(QUIPPER), "--db", str(ours), "-q", *extra], out=io.StringIO()) == 0
    return theirs, ours


def _psb_to_ip_masked(db, rows: list[tuple], cols: list[str]) -> list[tuple]:
    """Samples with to_ip cleared on PSB rows (see test_psb_to_ip)."""
    psb = {r[0] for r in _rows(db, "SELECT id FROM selected_events WHERE name = 'psb'")}
    ev, to = cols.index("evsel_id"), cols.index("to_ip")
    return [tuple(0 if (c == to and r[ev] in psb) else v for c, v in enumerate(r)) for r in rows]


def _assert_same(theirs, ours) -> None:
    for table in TABLES:
        cols = _columns(theirs, table)
        assert _columns(ours, table)[: len(cols)] == cols, f"{table}: column order"
        a = _rows(theirs, f"SELECT {','.join(cols)} FROM {table} ORDER BY id")
        b = _rows(ours, f"SELECT {','.join(cols)} FROM {table} ORDER BY id")
        if table == "samples":
            a, b = _psb_to_ip_masked(theirs, a, cols), _psb_to_ip_masked(ours, b, cols)
        assert b == a, table
    views = [r[0] for r in _rows(theirs, "SELECT name FROM sqlite_master WHERE type = 'view'")]
    for view in views:
        if view == "samples_view":
            continue  # shows to_ip (compared above)
        assert _rows(ours, f"SELECT * FROM {view}") == _rows(theirs, f"SELECT * FROM {view}"), view


@pytest.fixture(scope="module")
def quipper_dbs(tmp_path_factory):
    return _export_pair(tmp_path_factory.mktemp("quipper"), [])


@needs_perf
@needs_exporter
def test_quipper_equals_perf_export(quipper_dbs):
    theirs, ours = quipper_dbs
    _assert_same(theirs, ours)
    # What makes this recording different, checked in figures.
    assert _rows(ours, "SELECT count(*) FROM context_switches")[0][0] == 60  # of 152 SWITCH_CPU_WIDE
    assert _rows(ours, "SELECT tid FROM threads ORDER BY id") == [(-1,), (0,), (3174,), (1760,), (28,)]
    assert _rows(ours, "SELECT comm FROM comms WHERE comm LIKE ':%' ORDER BY id") == [(":1760",), (":28",)]
    assert _rows(ours, "SELECT count(*) FROM samples s JOIN selected_events e ON e.id = s.evsel_id "
                       "WHERE e.name = 'cycles' AND s.cpu = -1")[0][0] == 15
    assert _rows(ours, "SELECT short_name, build_id FROM dsos WHERE id = 1") == [
        ("[kernel.kallsyms]", "672679ceaecf17b7a879e56c56802afc568aa242")]
    assert _rows(ours, "SELECT count(*) FROM symbols WHERE name = 'unknown' AND sym_start = sym_end")[0][0] == 151


@needs_perf
@needs_exporter
def test_psb_to_ip(quipper_dbs):
    theirs, ours = quipper_dbs
    sql = "SELECT s.id, s.to_ip FROM samples s JOIN selected_events e ON e.id = s.evsel_id WHERE e.name = 'psb'"
    assert _rows(ours, sql) == _rows(theirs, sql)


def _kallsyms_text(kernel_ips: list[int], delta: int, upto: int | None = None) -> str:
    """A kallsyms file around the recording's kernel addresses, relocated by ``delta``."""
    lines = [f"{KTEXT + delta:016x} T _text", f"{KTEXT + delta:016x} T _stext"]
    kinds = "TtWtD"
    kernel_ips = sorted(kernel_ips)[:upto]
    for k, ip in enumerate(kernel_ips):
        if k % 3 == 0:
            continue  # left to perf's "unknown" placeholder (inside the previous symbol)
        start = ip - (0, 1, 5, 0x10, 0x40)[k % 5]
        lines.append(f"{start + delta:016x} {kinds[k % 5]} func_{k}")
        if k % 7 == 1:
            lines.append(f"{start + delta:016x} t __alias_{k}")  # a duplicate start: perf keeps one
    lines.append(f"{max(kernel_ips) + delta + 0x100:016x} T last_kernel")
    lines.append(f"{0xFFFFFFFFC0C00010:016x} t joy_open\t[joydev]")
    return "\n".join(lines) + "\n"


@needs_perf
@needs_exporter
def test_quipper_kallsyms_equals_perf_export(quipper_dbs, tmp_path):
    theirs, _ = quipper_dbs
    ips = [r[0] % (1 << 64) for r in _rows(theirs, "SELECT sym_start FROM symbols WHERE dso_id = 1")]
    ks = tmp_path / "kallsyms"
    ks.write_text(_kallsyms_text(ips, 0x200000))
    theirs_k, ours_k = _export_pair(tmp_path, ["--kallsyms", str(ks)])
    _assert_same(theirs_k, ours_k)
    named = _rows(ours_k, "SELECT count(*) FROM symbols WHERE dso_id = 1 AND name <> 'unknown'")[0][0]
    assert named > 10


@needs_perf
@needs_exporter
def test_quipper_short_kallsyms_shrinks_kernel_map(quipper_dbs, tmp_path):
    """perf fits the kernel map to the loaded symbols: later kernel addresses past them have no DSO."""
    theirs, _ = quipper_dbs
    ips = [r[0] % (1 << 64) for r in _rows(theirs, "SELECT sym_start FROM symbols WHERE dso_id = 1")]
    ks = tmp_path / "kallsyms"
    ks.write_text(_kallsyms_text(ips, -0x1000, upto=len(ips) // 2))
    theirs_k, ours_k = _export_pair(tmp_path, ["--kallsyms", str(ks)])
    _assert_same(theirs_k, ours_k)
    assert _rows(ours_k, "SELECT count(*) FROM samples WHERE ip < 0 AND dso_id = 0")[0][0] > 0


@needs_perf
@needs_exporter
def test_quipper_kallsyms_without_ref_symbol(quipper_dbs, tmp_path):
    """No _text function in the file: perf's kallsyms__delta fails after the symbols went into the DSO,
    so they stay unsized and match only their exact addresses."""
    theirs, _ = quipper_dbs
    ips = [r[0] % (1 << 64) for r in _rows(theirs, "SELECT sym_start FROM symbols WHERE dso_id = 1")]
    ks = tmp_path / "kallsyms"
    ks.write_text(_kallsyms_text(ips, 0).replace(" T _text", " D _text"))
    theirs_k, ours_k = _export_pair(tmp_path, ["--kallsyms", str(ks)])
    _assert_same(theirs_k, ours_k)
    named = _rows(ours_k, "SELECT sym_start = sym_end FROM symbols WHERE dso_id = 1 AND name <> 'unknown'")
    assert named and all(r == (1,) for r in named)


# ----------------------------------------------------------------------------- no perf needed

def test_kallsyms_fixups():
    ks = parse_kallsyms(
        "ffffffff81000000 T _text\n"
        "ffffffff81000000 t _stext\n"       # same start: the later one got the size (fixup_end runs first)
        "ffffffff81000100 T strong_fn\n"
        "ffffffff81000100 W weak_fn\n"      # same start: the sized one wins, however weak
        "ffffffff81000200 d some_data\n"
        "ffffffff81000300 r rodata_skipped\n"
        "ffffffff81000400 t $x\n"
        "ffffffff81000500 T last_fn\n"
        "ffffffffc0000010 t mod_fn\t[my-mod]\n")
    tab = ks.kernel_table("_text", 0xFFFFFFFF80000000)  # relocated by -0x1000000
    names = [(hex(s.start), hex(s.end), s.name, s.binding) for s in tab.symbols]
    assert names == [
        ("0xffffffff80000000", "0xffffffff80000100", "_stext", 0),
        ("0xffffffff80000100", "0xffffffff80000200", "weak_fn", 2),
        ("0xffffffff80000200", "0xffffffff80000500", "some_data", 0),
        # the last kernel symbol before a module's ends a page on, rounded up
        ("0xffffffff80000500", "0xffffffff80002000", "last_fn", 1),
    ]
    mod = ks.module_table("[my_mod]", 0xFFFFFFFFC0000000)
    assert [(s.start, s.end, s.name) for s in mod.symbols] == [(0x10, 0x1000 + 0x1000, "mod_fn")]
    assert kmod_name("/lib/modules/4.14/kernel/sound/snd-seq.ko.xz") == "[snd_seq]"


def test_perf_threads_comm_rules():
    pt = PerfThreads(comm_exec=False)
    th = pt.findnew(5, 7)
    assert th.comm.name == ":7" and not th.comm_set
    assert pt.main_thread(th) is None  # find, not findnew
    pt.on_comm(5, 5, "app", 100, False)
    main = pt.find(5, 5)
    assert pt.main_thread(th) is main and main.comms[0].name == "app" and main.comms[0].start == 100
    pt.on_comm(5, 5, "app2", 200, True)
    assert pt.comm_exec and pt.exec_comm(main).name == "app2"
    pt.on_fork(5, 9, 5, 5, 300)
    child = pt.find(5, 9)
    assert child.comm_set and child.comm.name == "app2" and not child.comm.exec
    old = pt.find(5, 9)
    pt.on_fork(5, 9, 5, 5, 400)  # tid reused: a new thread
    assert pt.find(5, 9) is not old
    assert pt.find(0, 0).comm.name == "swapper" and pt.find(0, 0).comm_set


def test_find_kallsyms_order(tmp_path, monkeypatch):
    from ptexport.images import kallsyms as k

    monkeypatch.setattr(k, "running_kernel_build_id", lambda notes="": b"\x01" * 20)
    monkeypatch.setattr(k, "kallsyms_restricted", lambda: False)
    kcore = tmp_path / "kcore_dir"
    kcore.mkdir()
    (kcore / "kallsyms").write_text("")
    cache = tmp_path / "debug"
    bid = b"\x02" * 20
    (cache / "[kernel.kallsyms]" / bid.hex()).mkdir(parents=True)
    (cache / "[kernel.kallsyms]" / bid.hex() / "kallsyms").write_text("")
    assert k.find_kallsyms("/x/kallsyms", str(kcore), None, bid) == "/x/kallsyms"
    assert k.find_kallsyms(None, str(kcore), "/symfs", bid) == str(kcore / "kallsyms")
    assert k.find_kallsyms(None, None, "/symfs", None) is None  # no host files under --symfs
    assert k.find_kallsyms(None, None, None, None) == "/proc/kallsyms"  # no build-id: perf's last resort
    assert k.find_kallsyms(None, None, None, b"\x01" * 20) == "/proc/kallsyms"  # the running kernel
    assert k.find_kallsyms(None, None, None, bid, str(cache)) == str(cache / "[kernel.kallsyms]" / bid.hex() /
                                                                  "kallsyms")
    assert k.find_kallsyms(None, None, None, b"\x03" * 20, str(cache)) is None  # "No kallsyms or vmlinux"
    monkeypatch.setattr(k, "kallsyms_restricted", lambda: True)
    assert k.find_kallsyms(None, None, None, None) is None


def test_perf_threads_exec_comm_prefers_later_comm_over_timeless_first():
    pt = PerfThreads(comm_exec=True)
    pt.on_comm(10, 10, "bash", 0, False)  # synthesized at time 0
    pt.on_comm(10, 10, "worker", 500, False)
    th = pt.find(10, 10)
    assert pt.exec_comm(th).name == "worker"  # thread__exec_comm's "second_last" rule
    pt.on_comm(10, 10, "tool", 900, True)
    assert pt.exec_comm(th).name == "tool"
    t2 = pt.findnew(10, 11)
    assert pt.exec_comm(pt.main_thread(t2)).name == "tool"
    assert PerfThreads(comm_exec=False).exec_comm(th).name == "tool"  # the current comm without COMM_EXEC
