"""``ptexport info``: checked against perf 6.1's own report of the same files.

The quipper recording is compared with the numbers perf prints for it (kept in
this file so the test runs without perf too) and, where perf is installed,
with perf's live output; files that perf records here (software events,
--switch-events, -a, -z, pipe mode, perf inject) are compared record type by
record type with ``perf report --stats``.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest

from ptxtest import HAVE_PERF, needs_perf, slow_after
from ptexport.cli import main
from ptexport.perfdata.constants import AttrFlag
from ptexport.sideband.summary import AUXTRACE_INFO_FIELDS

# perf report --stats on perf.data.intel_pt-4.14 (perf 6.1)
QUIPPER_STATS = {
    "TOTAL": 257, "MMAP": 56, "COMM": 3, "EXIT": 1, "SAMPLE": 15, "MMAP2": 10, "AUX": 10, "ITRACE_START": 2,
    "SWITCH_CPU_WIDE": 152, "FINISHED_ROUND": 4, "AUXTRACE_INFO": 1, "AUXTRACE": 2, "TIME_CONV": 1,
}
# perf script -D: PERF_RECORD_AUXTRACE_INFO type: 1
QUIPPER_AUXTRACE_INFO = {
    "PMU Type": "6", "Time Shift": "31", "Time Muliplier": "1789569706", "Time Zero": "18446744041015200657",
    "Cap Time Zero": "1", "TSC bit": "0x400", "NoRETComp bit": "0x800", "Have sched_switch": "3",
    "Snapshot mode": "0", "Per-cpu maps": "1", "MTC bit": "0x200", "MTC freq bits": "0x3c000",
    "TSC:CTC numerator": "100", "TSC:CTC denominator": "2", "CYC bit": "0x2", "Max non-turbo ratio": "12",
    "Filter string len.": "0",
}


_ATTR_FLAG_NAMES = {f.name.lower() for f in AttrFlag}


def run_info(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    rc = main(["info", *args], out=out)
    return rc, out.getvalue()


def info_json(path) -> dict:
    rc, text = run_info("--json", str(path))
    assert rc == 0
    return json.loads(text)


def perf_stats(path) -> dict[str, int]:
    out = subprocess.run(["perf", "report", "--stats", "-i", str(path)], capture_output=True, text=True,
                         timeout=120).stdout
    stats = {}
    for line in out.split("Aggregated stats:", 1)[1].splitlines():
        if line.rstrip().endswith("stats:"):
            break  # per-event sections follow
        m = re.match(r"\s*(\S+) events:\s+(\d+)", line)
        if m:
            stats[m.group(1)] = int(m.group(2))
    return stats


def parse_auxtrace_info_lines(lines) -> dict[str, str]:
    """'Label   value' lines as perf script -D prints them (some labels are followed by one space only)."""
    labels = sorted((label for _k, label in AUXTRACE_INFO_FIELDS), key=len, reverse=True)
    out = {}
    for line in lines:
        line = line.strip()
        for label in labels:
            if line.startswith(label):
                out[label] = line[len(label):].strip()
                break
    return out


def text_auxtrace_info(text: str) -> dict[str, str]:
    block = text.split("# AUXTRACE_INFO\n", 1)[1].split("\n#", 1)[0]
    return parse_auxtrace_info_lines(block.splitlines())


def check_header_against_perf(path, r: dict) -> None:
    """Features and events of ``ptexport info --json`` against ``perf report --header-only -I``."""
    hdr = subprocess.run(["perf", "report", "--header-only", "-I", "-i", str(path)], capture_output=True,
                         text=True, timeout=60).stdout
    fields = dict(re.findall(r"^# ([a-z ]+?)\s*: (.*)$", hdr, re.M))
    f = r["features"]
    for perf_name, ours in (("hostname", "hostname"), ("os release", "osrelease"), ("arch", "arch"),
                            ("cpuid", "cpuid"), ("cpudesc", "cpudesc")):
        if perf_name in fields:
            assert fields[perf_name] == f[ours], perf_name
    if "cmdline" in fields:
        cmd = f["cmdline"] if isinstance(f["cmdline"], str) else " ".join(f["cmdline"])
        assert fields["cmdline"].strip() == cmd.strip()
    if "nrcpus online" in fields:
        assert int(fields["nrcpus online"]) == f["nrcpus"]["nr_cpus_online"]
    events = re.findall(r"^# event : name = ([^,]+), , id = \{ ([\d, ]+) \}(.*)$", hdr, re.M)
    assert events, hdr[:300]
    assert [e[0] for e in events] == [e["name"] for e in r["events"]]
    for (name, ids, rest), ev in zip(events, r["events"]):
        assert [int(i) for i in ids.split(",")] == ev["ids"], name
        m = re.search(r"config = (0x[0-9a-f]+)", rest)
        assert (int(m.group(1), 16) if m else 0) == ev["config"], name
        assert f"sample_type = {ev['sample_type']}," in rest
        perf_flags = {k for k, v in re.findall(r"(\w+) = (\d+)", rest) if k in _ATTR_FLAG_NAMES}
        assert perf_flags == set(ev["flags"]), name


# --------------------------------------------------------------------------------------------- quipper


def test_quipper_json(quipper):
    r = info_json(quipper)
    assert r["records"] == QUIPPER_STATS
    assert r["aux_bytes"] == {"cpu 0": 0x2FD0, "cpu 3": 0x21A00} and r["aux_buffers"] == 2
    pt = r["events"][0]
    assert (pt["name"], pt["type"], pt["pmu"], pt["config"]) == ("intel_pt//", 6, "intel_pt", 0x300E601)
    assert pt["intel_pt"] == {"pt": 1, "mtc": 1, "tsc": 1, "branch": 1, "mtc_period": 3, "psb_period": 3}
    assert pt["ids"] == [124, 125, 126, 127] and pt["sample_type"] == "IP|TID|TIME|CPU|IDENTIFIER"
    assert [e["name"] for e in r["events"]] == ["intel_pt//", "cycles", "dummy:u", "dummy:u"]
    assert "context_switch" in r["events"][2]["flags"] and "intel_pt" not in r["events"][1]
    info = r["auxtrace_info"]
    assert (info["time_mult"], info["time_zero"], info["tsc_ctc_ratio_n"], info["max_non_turbo_ratio"]) == (
        1789569706, 18446744041015200657, 100, 12)
    f = r["features"]
    assert (f["hostname"], f["osrelease"], f["arch"], f["cpuid"]) == ("localhost", "4.14.18", "x86_64", "GenuineIntel,6,78,3")
    assert len(f["build_id"]) == 66
    host = r["sideband"]["machines"][0]
    assert (host["pid"], host["kind"], host["mmaps"], host["kernel_mmaps"]) == (-1, "host", 10, 56)
    echo = [p for p in host["process_list"] if p["pid"] == 3174][0]
    assert (echo["comm"], echo["comms"], echo["mmaps"], echo["end"]) == ("echo", ["echo", "perf"], 10, 641258039091)
    assert sum(c["switch_in"] + c["switch_out"] for c in host["cpus"].values()) == 152
    assert r["sideband"]["aux_records"]["3"] == {"records": 9, "bytes": 0x21A00, "truncated": 0}
    assert r["sideband"]["time_conv"]["source"] == "AUXTRACE_INFO"
    # first/last timed record: SWITCH_CPU_WIDE at 641255848111 (tsc 0xbc4cacb751 in perf's intel_pt.log)
    assert r["sideband"]["tsc_range"][0] == 0xBC4CACB751 and r["sideband"]["hypervisors"] == {}


def test_quipper_text(quipper):
    rc, text = run_info(str(quipper))
    assert rc == 0
    assert "intel_pt//: type 6 (intel_pt), config 0x300e601 [pt,mtc,tsc,branch,mtc_period=3,psb_period=3]" in text
    assert text_auxtrace_info(text).items() >= QUIPPER_AUXTRACE_INFO.items()
    counts = dict(re.findall(r"^\s+(\S+) events:\s+(\d+)$", text, re.M))
    assert {k: int(v) for k, v in counts.items()} == QUIPPER_STATS
    assert re.search(r"cpu 3\s+137728 bytes", text)
    assert re.search(r"pid\s+3174 echo\s+threads\s+1 mmaps\s+10", text)
    assert "TSC range:  0xbc4cacb751 .. " in text


@needs_perf
def test_quipper_against_live_perf(quipper):
    r = info_json(quipper)
    assert r["records"] == perf_stats(quipper)
    check_header_against_perf(quipper, r)
    # perf script -D prints AUXTRACE_INFO among the first records
    proc = subprocess.Popen(["perf", "script", "-D", "-i", str(quipper)], stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.DEVNULL)
    block, inside = [], False
    for line in proc.stdout:
        if "PERF_RECORD_AUXTRACE_INFO" in line:
            inside = True
        elif inside:
            if not line.strip():
                break
            block.append(line)
    proc.kill()
    proc.wait()
    _, text = run_info(str(quipper))
    perf_info = parse_auxtrace_info_lines(block)
    assert len(perf_info) == len(AUXTRACE_INFO_FIELDS)
    assert text_auxtrace_info(text) == perf_info


# ------------------------------------------------------------------------------- files perf makes here

RECORDINGS = {
    "software": ["-e", "task-clock", "--", "true"],
    "switch": ["-e", "task-clock", "--switch-events", "--", "sleep", "0.01"],
    "system_wide": ["-a", "--switch-events", "-e", "cpu-clock", "-c", "200000", "--", "sleep", "0.03"],
    "compressed": ["-z", "-e", "task-clock", "--", "ls", "/"],
    "directory": ["--threads", "-e", "task-clock", "--", "ls", "/"],  # data/ + data.N files
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    if not HAVE_PERF:
        pytest.skip("perf (Debian linux-perf) is not installed")
    d = tmp_path_factory.mktemp("perfdata")
    files = {}
    for name, args in RECORDINGS.items():
        out = d / f"{name}.data"
        r = subprocess.run(["perf", "record", "-q", "-o", str(out), *args], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=120)
        files[name] = out if r.returncode == 0 else f"perf record {' '.join(args)} failed: {r.stderr.decode()[:200]}"
    # pipe mode: perf record -o - and perf inject -o -
    with open(d / "pipe.data", "wb") as fh:
        subprocess.run(["perf", "record", "-q", "-e", "task-clock", "-o", "-", "--", "true"], stdout=fh,
                       stderr=subprocess.DEVNULL, check=True, timeout=120)
    files["pipe"] = d / "pipe.data"
    with open(d / "inject.data", "wb") as fh:
        subprocess.run(["perf", "inject", "-i", str(files["switch"]), "-o", "-"], stdout=fh,
                       stderr=subprocess.DEVNULL, check=True, timeout=120)
    files["inject"] = d / "inject.data"
    return files


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("name", slow_after([*RECORDINGS, "pipe", "inject"]))
def test_record_counts_equal_perf_report_stats(recordings, name):
    if isinstance(recordings[name], str):
        pytest.skip(recordings[name])
    r = info_json(recordings[name])
    assert r["records"] == perf_stats(recordings[name])
    if name not in ("pipe", "inject", "directory"):
        check_header_against_perf(recordings[name], r)
    assert r["pipe_mode"] == (name in ("pipe", "inject"))
    if name == "compressed":
        assert r["records"]["COMPRESSED"] >= 1
    if name == "directory":
        assert recordings[name].is_dir() and r["records"]["SAMPLE"] >= 1


@pytest.mark.slow  # the recordings fixture runs perf record ~7 s
@needs_perf
def test_sideband_summary_of_perf_made_files(recordings):
    r = info_json(recordings["switch"])
    procs = r["sideband"]["machines"][0]["process_list"]
    sleep = [p for p in procs if p["comm"] == "sleep"]
    assert len(sleep) == 1 and sleep[0]["mmaps"] >= 3  # sleep, ld.so, libc (+vdso)
    # per-thread switch records (no CPU in sample_id): switch-ins are timeline points on "cpu -1"
    n_in = sum(c["switch_in"] for c in r["sideband"]["machines"][0]["cpus"].values())
    assert n_in * 2 == r["records"]["SWITCH"]
    r = info_json(recordings["system_wide"])
    host = r["sideband"]["machines"][0]
    assert set(host["cpus"]) == {str(c) for c in range(r["features"]["nrcpus"]["nr_cpus_online"])}
    assert sum(c["switch_in"] + c["switch_out"] for c in host["cpus"].values()) == r["records"]["SWITCH_CPU_WIDE"]
    assert host["processes"] > 10  # -a synthesizes every process
    assert r["records"]["FORK"] >= host["threads"] - host["processes"]


@pytest.mark.slow  # the recordings fixture runs perf record ~7 s
@needs_perf
def test_stdin_pipe_mode(recordings, monkeypatch):
    data = recordings["pipe"].read_bytes()

    class Stdin:
        buffer = io.BytesIO(data)

    monkeypatch.setattr(sys, "stdin", Stdin())
    rc, text = run_info("-")
    assert rc == 0
    assert "# - (pipe mode)" in text
    counts = {k: int(v) for k, v in re.findall(r"^\s+(\S+) events:\s+(\d+)$", text, re.M)}
    assert counts == perf_stats(recordings["pipe"])


@pytest.mark.slow
@needs_perf
def test_real_pipe_from_perf_record():
    cmd = (f"perf record -q -e task-clock -o - -- true 2>/dev/null | "
           f"{sys.executable} -c 'import sys; from ptexport.cli import main; sys.exit(main())' info --json -")
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["pipe_mode"] and rep["records"]["SAMPLE"] >= 1 and rep["records"]["ATTR"] >= 1


# ------------------------------------------------------------------------------------------ bad input


def _bad_inputs(src: bytes) -> dict[str, bytes]:
    import struct

    data_off = struct.unpack_from("<Q", src, 40)[0]
    bad_size = bytearray(src)
    struct.pack_into("<H", bad_size, data_off + 6, 4)  # first record claims 4 bytes
    return {
        "garbage": bytes(range(256)) * 2,
        "empty": b"",
        "short_header": src[:50],
        "truncated_data": src[: data_off + 100],
        "bad_record_size": bytes(bad_size),
    }


@pytest.mark.parametrize("kind", slow_after(["garbage", "empty", "short_header", "truncated_data", "bad_record_size"]))
def test_bad_input_gives_one_line_typed_error(quipper, tmp_path, kind):
    path = tmp_path / f"{kind}.data"
    path.write_bytes(_bad_inputs(quipper.read_bytes())[kind])
    cmd = [sys.executable, "-c", "import sys; from ptexport.cli import main; sys.exit(main())", "info", str(path)]
    if kind == "truncated_data":  # a cut file is described up to the cut (tests/perfdata/test_info_cut.py)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "# CUT" in r.stdout and "Traceback" not in r.stderr
        assert r.stderr.startswith(f"ptexport: {path} cut at offset {path.stat().st_size}: ")
        cmd.append("--strict")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ptexport: error: ")
    assert f"{path}+0x" in lines[0]  # names the file and the byte offset


def test_bad_input_in_process_and_missing_file(tmp_path, capsys):
    path = tmp_path / "x.data"
    path.write_bytes(b"PERFILE2" + bytes(20))
    assert run_info(str(path))[0] == 1
    assert run_info(str(tmp_path / "missing.data"))[0] != 0
    err = capsys.readouterr().err
    assert err.count("ptexport: error:") == 2 and "Traceback" not in err


def test_record_type_names_are_perfs():
    from ptexport.sideband.summary import record_type_name

    # tools/perf/util/event.c perf_event__names (perf 6.1), index = record type
    perf_names = {
        1: "MMAP", 2: "LOST", 3: "COMM", 4: "EXIT", 5: "THROTTLE", 6: "UNTHROTTLE", 7: "FORK", 8: "READ",
        9: "SAMPLE", 10: "MMAP2", 11: "AUX", 12: "ITRACE_START", 13: "LOST_SAMPLES", 14: "SWITCH",
        15: "SWITCH_CPU_WIDE", 16: "NAMESPACES", 17: "KSYMBOL", 18: "BPF_EVENT", 19: "CGROUP", 20: "TEXT_POKE",
        21: "AUX_OUTPUT_HW_ID", 64: "ATTR", 65: "EVENT_TYPE", 66: "TRACING_DATA", 67: "BUILD_ID",
        68: "FINISHED_ROUND", 69: "ID_INDEX", 70: "AUXTRACE_INFO", 71: "AUXTRACE", 72: "AUXTRACE_ERROR",
        73: "THREAD_MAP", 74: "CPU_MAP", 75: "STAT_CONFIG", 76: "STAT", 77: "STAT_ROUND", 78: "EVENT_UPDATE",
        79: "TIME_CONV", 80: "FEATURE", 81: "COMPRESSED", 82: "FINISHED_INIT",
    }
    assert {t: record_type_name(t) for t in perf_names} == perf_names
    assert record_type_name(99) == "UNKNOWN_99"


@pytest.mark.slow  # the recordings fixture runs perf record ~7 s
@needs_perf
def test_truncated_pipe_on_stdin_salvaged_or_one_line_error(recordings):
    from ptexport.perfdata import open_perf_data

    data = recordings["pipe"].read_bytes()
    with open_perf_data(recordings["pipe"]) as pd:  # inside a record: a pipe cut between two reads as whole
        n = next(r.offset for r in pd.records() if r.offset >= len(data) // 2) + 5
    cmd = [sys.executable, "-c", "import sys; from ptexport.cli import main; sys.exit(main())", "info", "-"]
    r = subprocess.run(cmd, input=data[:n], capture_output=True, timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 0 and err.startswith(f"ptexport: - cut at offset {n}: describing the ")
    assert err.count("\n") == 1 and "AUX bytes before it; cut inside the 8-byte header of data record" in err
    r = subprocess.run(cmd + ["--strict"], input=data[:n], capture_output=True, timeout=120)
    err = r.stderr.decode()
    assert r.returncode != 0 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("ptexport: error: -+0x")
