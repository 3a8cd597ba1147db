"""Files made here by perf itself (software events: no PT hardware needed), read back and compared with
`perf report --stats` and `perf script -D` of the same file."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from ptxtest import HAVE_PERF, REPO

import perf_oracle as P
from ptexport.perfdata import open_perf_data

pytestmark = [pytest.mark.perf, pytest.mark.slow,  # slow: one fixture records ~9 s with perf for all of them
              pytest.mark.skipif(not HAVE_PERF, reason="perf (Debian linux-perf) is not installed")]

# A short busy command (faults, mmaps) that also blocks once, so every recording has context switches
# (a cached `ls -R` alone may run its whole time slice untouched on a loaded machine: no SWITCH record).
WORK = ["sh", "-c", "ls -R /usr/lib/python3 > /dev/null; sleep 0.02"]
REC = ["perf", "record", "-q", "-e", "task-clock", "-c", "100000", "--switch-events"]


def _perf_record(args: list[str], out: Path | None = None, stdout=None) -> None:
    r = subprocess.run(args, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.PIPE, text=False)
    if r.returncode != 0:
        msg = r.stderr.decode(errors="replace").strip()
        pytest.fail(f"{' '.join(args)} failed ({r.returncode}): {msg[-500:]}")


def _can_record(d: Path) -> None:
    """Skip (not fail) only when this machine does not let perf open events."""
    r = subprocess.run(["perf", "record", "-q", "-e", "task-clock", "-o", str(d / "probe.data"), "--", "true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1:] or [str(r.returncode)]
        pytest.skip(f"perf record cannot open events here ({last[0]}); perf_event_paranoid/capabilities?")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("perfmade")
    _can_record(d)
    files: dict[str, Path] = {}
    files["plain"] = d / "plain.data"
    _perf_record(REC + ["-o", str(files["plain"]), "--"] + WORK)
    files["system_wide"] = d / "sys.data"
    _perf_record(["perf", "record", "-q", "-a", "-e", "dummy", "--switch-events", "-o", str(files["system_wide"]),
                  "--", "sleep", "0.2"])
    files["compressed"] = d / "z.data"
    _perf_record(REC + ["-z", "-o", str(files["compressed"]), "--"] + WORK)
    files["callgraph_fp"] = d / "fp.data"
    _perf_record(["perf", "record", "-q", "-e", "task-clock", "-c", "200000", "--call-graph", "fp", "-o",
                  str(files["callgraph_fp"]), "--"] + WORK)
    files["callgraph_dwarf"] = d / "dwarf.data"
    _perf_record(["perf", "record", "-q", "-e", "task-clock", "-c", "500000", "--call-graph", "dwarf,1024", "-o",
                  str(files["callgraph_dwarf"]), "--"] + WORK)
    files["pipe"] = d / "pipe.data"
    with open(files["pipe"], "wb") as f:
        _perf_record(REC + ["-o", "-", "--"] + WORK, stdout=f)
    files["inject_pipe"] = d / "inject.data"
    with open(files["inject_pipe"], "wb") as f:
        subprocess.run(["perf", "inject", "-i", str(files["plain"]), "-o", "-"], stdout=f, check=True,
                       stderr=subprocess.DEVNULL)
    files["stat_record"] = d / "stat.data"
    _perf_record(["perf", "stat", "record", "-o", str(files["stat_record"]), "-e",
                  "task-clock,context-switches", "--"] + WORK)
    files["threads_dir"] = d / "threads.data"
    _perf_record(REC + ["--threads", "-o", str(files["threads_dir"]), "--"] + WORK)
    return files


KINDS = ["plain", "system_wide", "compressed", "callgraph_fp", "callgraph_dwarf", "pipe", "inject_pipe",
         "stat_record", "threads_dir"]


@pytest.mark.parametrize("kind", KINDS)
def test_stats_equal_perf_report_stats(made, kind):
    path = made[kind]
    with open_perf_data(path) as pd:
        recs = [(r.offset, r.type, r.misc, r.size if r.type != 71 else r.header_size) for r in pd.records()]
        n = len(recs)
        ours = dict(pd.stats)
        if not pd.is_pipe or path.is_file():
            with open_perf_data(path) as again:
                assert list(again.iter_headers()) == recs  # the fast path sees the same records
                assert dict(again.stats) == ours
    assert ours == P.perf_stats(path)
    assert n == sum(v for k, v in ours.items() if k != "COMPRESSED")


def _key(pd, r):
    return (r.offset - (16 if pd.is_pipe else 0), r.type, r.size if r.type != 71 else r.header_size)


@pytest.mark.parametrize("kind", KINDS)
def test_records_and_samples_equal_perf_script_D(made, kind):
    path = made[kind]
    dump = P.perf_dump(path)
    with open_perf_data(path) as pd:
        recs = list(pd.records())
        assert pd.is_pipe == kind.endswith("pipe")
        assert len(pd.attrs) >= 1 and all(a.ids for a in pd.attrs)
        files = {None: str(path)} if pd.dir_path is None else {}
        if pd.dir_path is not None:
            assert pd.features["dir_format"] == 1 and len(pd.sources) > 1
        # every raw event perf dumps, with its offset, type and size (per file for directories)
        ours = Counter((Path(r.src).name if r.src else "data", *_key(pd, r)) for r in recs)
        theirs = Counter((Path(d.file).name if pd.dir_path is not None else "data", d.offset, d.type, d.size)
                         for d in dump)
        assert ours == theirs
        del files
        # every sample's fields
        our_samples = sorted((r.offset - (16 if pd.is_pipe else 0), r.pid, r.tid, r.ip, r.period or 0, r.time,
                              r.misc & 0xFFFF, tuple(r.callchain or ())) for r in recs if r.name == "SAMPLE")
        their_samples = sorted((d.offset, d.sample["pid"], d.sample["tid"], d.sample["ip"], d.sample["period"],
                                d.time, d.sample["misc"], tuple(d.callchain)) for d in dump if d.sample)
        assert our_samples == their_samples
        assert len(our_samples) > 0 or kind in ("system_wide", "stat_record")
        if kind == "callgraph_fp":
            assert all(s[-1] for s in our_samples)
        if kind == "callgraph_dwarf":
            by_off = {d.offset: d for d in dump if d.sample}
            names = ["AX", "BX", "CX", "DX", "SI", "DI", "BP", "SP", "IP", "FLAGS", "CS", "SS", "R8", "R9", "R10",
                     "R11", "R12", "R13", "R14", "R15"]
            n = 0
            for r in recs:
                if r.name != "SAMPLE":
                    continue
                d = by_off[r.offset]
                if d.regs:
                    assert dict(zip(names, r.user_regs)) == d.regs
                    n += 1
                # the stack area as recorded (the attr's size) and, as perf reports its size, the part the
                # kernel filled (dyn_size: 0 for a sample taken where no user stack could be copied)
                assert len(r.user_stack) == r.attr.sample_stack_user
                assert r.user_stack_dyn_size == d.ustack_size <= r.attr.sample_stack_user
            assert n > 0
        # mmap/comm/switch summaries
        by_key: dict = {}
        for d in dump:
            by_key.setdefault((Path(d.file).name if pd.dir_path is not None else "data", d.offset, d.type),
                              []).append(d)
        for r in recs:
            if r.name not in ("MMAP2", "COMM", "FORK", "EXIT"):
                continue
            cands = by_key[(Path(r.src).name if r.src else "data", r.offset - (16 if pd.is_pipe else 0), r.type)]
            if r.name == "MMAP2":
                assert any(c.summary.rstrip().endswith(r.filename) and f"{r.pid}/{r.tid}:" in c.summary
                           for c in cands)
            elif r.name == "COMM":
                assert any(f"{r.comm}:{r.pid}/{r.tid}" in c.summary for c in cands)
            else:
                assert any(f"({r.pid}:{r.tid}):({r.ppid}:{r.ptid})" in c.summary for c in cands)


def test_switch_events_and_system_wide_fields(made):
    with open_perf_data(made["system_wide"]) as pd:
        sw = [r for r in pd.records() if r.name == "SWITCH_CPU_WIDE"]
        assert sw and all(r.cpu is not None and r.time for r in sw)
        assert {r.out for r in sw} == {True, False}
        assert pd.features["nrcpus"].nr_cpus_online >= 1
    with open_perf_data(made["plain"]) as pd:
        sw = [r for r in pd.records() if r.name == "SWITCH"]
        assert sw and {r.out for r in sw} == {True, False}
        assert pd.attrs[0].context_switch and pd.attrs[0].name == "task-clock"


def test_compressed_feature_and_offsets(made):
    with open_perf_data(made["compressed"]) as pd:
        comp = pd.features["compressed"]
        assert comp.type == 1 and comp.mmap_len > 0
        inner = [r for r in pd.records() if r.inner_offset is not None]
        assert inner and all(r.offset >= pd.header["data_offset"] for r in inner)
        assert [r.inner_offset for r in inner] == sorted(r.inner_offset for r in inner)


def test_stdin_pipe_from_perf_record(made, tmp_path):
    """`perf record -o - | tee FILE | python` reading '-': the stream gives what perf reads from FILE."""
    copy = tmp_path / "tee.data"
    code = ("import json, sys; from ptexport.perfdata import open_perf_data\n"
            "pd = open_perf_data('-')\n"
            "names = [a.name for a in pd.attrs]\n"
            "n = sum(1 for _ in pd.records())\n"
            "print(json.dumps({'stats': dict(pd.stats), 'n': n, 'names': names, 'pipe': pd.is_pipe}))\n")
    cmd = shlex.join(REC + ["-o", "-", "--"] + WORK) + f" 2>/dev/null | tee {copy} | {sys.executable} -c \"{code}\""
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0 and not copy.stat().st_size:
        pytest.skip("perf record -o - cannot record here")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["pipe"] and got["names"] == ["task-clock"]
    assert got["stats"] == P.perf_stats(copy)


def test_kcore_directory_made_from_a_real_file(made, tmp_path):
    """perf record --kcore needs a readable /proc/kcore; build the same layout around a real data file."""
    d = tmp_path / "kc.data"
    (d / "kcore_dir").mkdir(parents=True)
    (d / "data").write_bytes(made["plain"].read_bytes())
    (d / "kcore_dir" / "kallsyms").write_text("ffffffff81000000 T _text\n")
    (d / "kcore_dir" / "modules").write_text("")
    (d / "kcore_dir" / "kcore").write_bytes(b"\x7fELF")
    with open_perf_data(d) as pd, open_perf_data(made["plain"]) as ref:
        assert pd.kcore_dir == d / "kcore_dir"
        assert dict(pd.stats) == dict(ref.stats) == P.perf_stats(d)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "threads_dir"])
def test_ordered_records_follow_perfs_delivery_order(made, kind):
    """perf script -D dumps kernel records as its ordered-events queue delivers them."""
    path = made[kind]
    theirs = [(d.offset, d.type, d.size) for d in P.perf_dump(path) if d.type < 64]
    with open_perf_data(path) as pd:
        ours = [_key(pd, r) for r in pd.ordered_records() if r.type < 64]
        assert dict(pd.stats) == P.perf_stats(path)
    assert ours == theirs


def test_perf_stat_record_values(made):
    """STAT_CONFIG / STAT / STAT_ROUND of `perf stat record` against the table `perf script -D` prints."""
    path = made["stat_record"]
    out = P.run(["perf", "script", "-D", "-i", str(path)])
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[0].lstrip("-").isdigit() and parts[2].isdigit():
            table[parts[6]] = tuple(int(x) for x in parts[:6])
    with open_perf_data(path) as pd:
        recs = list(pd.records())
        names = {}
        for r in recs:
            if r.name == "EVENT_UPDATE" and r.event_name:
                names[r.event_id] = r.event_name
        for a in pd.attrs:
            names.setdefault(a.ids[0] if a.ids else None, a.name)
        stats = [r for r in recs if r.name == "STAT"]
        (rnd,) = [r for r in recs if r.name == "STAT_ROUND"]
        assert [r.name for r in recs].count("STAT_CONFIG") == 1
        assert len(stats) == len(table) == 2
        for st in stats:
            a = pd.attr_for_id(st.stat_id)
            cpu, thread_pid, val, ena, run, t = table[a.name]
            assert (st.cpu, st.val, st.ena, st.run, rnd.time) == (cpu, val, ena, run, t)
        tm = [r for r in recs if r.name == "THREAD_MAP"][0]
        assert tm.entries[0][0] == table[pd.attrs[0].name][1]


def _mmap2_summary(r) -> str:
    prot = ("r" if r.prot & 1 else "-") + ("w" if r.prot & 2 else "-") + ("x" if r.prot & 4 else "-")
    prot += "s" if r.flags & 1 else "p"
    pg = f"{r.pgoff:#x}" if r.pgoff else "0"
    return (f"MMAP2 {r.pid}/{r.tid}: [{r.addr:#x}({r.len:#x}) @ {pg} {r.maj:02x}:{r.min:02x} {r.ino} "
            f"{r.ino_generation}]: {prot} {r.filename}")


@pytest.mark.parametrize("kind", ["system_wide", "plain", "pipe"])
def test_sideband_fields_equal_perf_script_D(made, kind):
    """MMAP2, SWITCH*, FORK/EXIT, ID_INDEX, THREAD_MAP and CPU_MAP fields as perf prints them."""
    path = made[kind]
    dump = P.perf_dump(path)
    by_key: dict = {}
    for d in dump:
        by_key.setdefault((d.offset, d.type), []).append(d)
    checked = Counter()
    with open_perf_data(path) as pd:
        for r in pd.records():
            (d,) = by_key[(r.offset - (16 if pd.is_pipe else 0), r.type)]
            text = " ".join(d.summary.split())
            if r.name == "MMAP2" and r.build_id is None:
                assert text == _mmap2_summary(r)
            elif r.name in ("SWITCH", "SWITCH_CPU_WIDE"):
                words = ["SWITCH_CPU_WIDE" if r.cpu_wide else "SWITCH", "OUT" if r.out else "IN"]
                if r.out and r.preempt:
                    words.append("preempt")
                if r.cpu_wide:
                    words += ["next" if r.out else "prev", "pid/tid:", f"{r.next_prev_pid}/{r.next_prev_tid}"]
                assert text == " ".join(words)
            elif r.name in ("FORK", "EXIT"):
                assert text == f"{r.name}({r.pid}:{r.tid}):({r.ppid}:{r.ptid})"
            elif r.name == "ID_INDEX":
                lines = [" ".join(x.split()) for x in d.lines if x.startswith(" ... id:")]
                assert lines == [f"... id: {e.id} idx: {e.idx} cpu: {e.cpu} tid: {e.tid}" for e in r.entries]
            elif r.name == "THREAD_MAP":
                assert text == f"THREAD_MAP nr: {len(r.entries)} thread: " + " ".join(str(p) for p, _ in r.entries)
            elif r.name == "CPU_MAP":
                cpus = r.cpus
                want = f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 and cpus == list(range(cpus[0], cpus[-1] + 1)) \
                    else ",".join(map(str, cpus))
                assert text == f"CPU_MAP: {want}"
            else:
                continue
            checked[r.name] += 1
    assert checked["ID_INDEX"] == 1 and checked["MMAP2"] > 0
    assert checked["SWITCH_CPU_WIDE" if kind == "system_wide" else "SWITCH"] > 0


@pytest.mark.parametrize("kind", ["plain", "system_wide", "compressed", "callgraph_fp", "callgraph_dwarf", "pipe",
                                  "inject_pipe"])
def test_attrs_equal_perf_header_only(made, kind):
    from ptexport.perfdata.constants import AttrFlag, ReadFormat, SampleType

    path = made[kind]
    events = P.header_events(P.perf_header(path))
    flag_names = {f.name.lower() for f in AttrFlag}
    with open_perf_data(path) as pd:
        assert len(events) == len(pd.attrs)
        for ev, a in zip(events, pd.attrs):
            assert (a.name, a.ids) == (ev["name"], [int(x) for x in ev["id"].split(", ")])
            assert (a.type, a.size, a.config) == (int(ev.get("type", "0")), int(ev["size"]),
                                                  int(ev.get("config", "0"), 0))
            assert a.sample_period == int(ev["sample_period"])
            assert "|".join(b.name for b in SampleType if a.sample_type & b) == ev["sample_type"]
            assert "|".join(b.name for b in ReadFormat if a.read_format & b) == ev["read_format"]
            assert set(a.flag_names()) == {k for k, v in ev.items() if k in flag_names and v == "1"}
            assert a.sample_regs_user == int(ev.get("sample_regs_user", "0"), 0)
            assert a.sample_stack_user == int(ev.get("sample_stack_user", "0"))


@pytest.mark.parametrize("kind", ["system_wide", "compressed", "pipe", "threads_dir"])
def test_records_of_chosen_types(made, kind):
    path = made[kind]
    want = {10, 15, 9, 14, 68}  # MMAP2, SWITCH_CPU_WIDE, SAMPLE, SWITCH, FINISHED_ROUND
    with open_perf_data(path) as pd:
        full = [(r.offset, r.inner_offset, r.type, repr(r.fields())) for r in pd.records()]
        stats = dict(pd.stats)
        some = [(r.offset, r.inner_offset, r.type, repr(r.fields())) for r in pd.records(types=want)]
        assert some == [x for x in full if x[2] in want] and dict(pd.stats) == stats
        o_full = [(r.offset, r.type) for r in pd.ordered_records()]
        o_some = [(r.offset, r.type) for r in pd.ordered_records(types={10, 15, 9, 14})]
        assert o_some == [x for x in o_full if x[1] in {10, 15, 9, 14}]
