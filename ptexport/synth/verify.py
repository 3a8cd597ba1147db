"""Check a generated trace against perf: run ``perf script`` and compare with the ground truth.

Used by the tests and by ``ptexport synth --check``.  perf's branch lines are
parsed from ``perf script --itrace=b -F pid,tid,cpu,time,flags,ip,addr --ns``
(the ``--itrace=cr`` view is the same lines filtered to calls and returns).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ptexport.errors import SynthError
from ptexport.synth.model import EV_NAMES, KIND_NAMES
from ptexport.synth.replay import expand_truth

_LINE = re.compile(
    r"^\s*(-?\d+)/(-?\d+)\s+\[(-?\d+)\]\s+(\d+)\.(\d+):\s+(.*?)\s+([0-9a-f]+) =>\s+([0-9a-f]+)\s*$")
KIND_OF_FLAGS = {name: i for i, name in enumerate(KIND_NAMES)}


@dataclass
class PerfBranches:
    pid: np.ndarray
    tid: np.ndarray
    cpu: np.ndarray
    time: np.ndarray
    flags: list[str]
    from_ip: np.ndarray
    to_ip: np.ndarray
    other: list[str] = field(default_factory=list)   # lines that are not branches (errors...)
    stderr: str = ""


def perf_script(perf_data: Path, itrace: str, fields: str = "pid,tid,cpu,time,flags,ip,addr",
                extra: list[str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    perf = shutil.which("perf")
    if perf is None:
        raise SynthError("perf is not installed (Debian: apt-get install linux-perf)")
    cmd = [perf, "script", "-i", str(Path(perf_data).resolve()), f"--itrace={itrace}", "-F", fields,
           "--ns"]
    cmd += extra or []
    cwd = str(Path(perf_data).parent)
    if is_pipe_format(perf_data):
        # perf 6.1 reads a pipe-mode file given with -i FILE at a wrong offset after the
        # first AUXTRACE record (it lseeks with a position 16 bytes short); through a real
        # pipe, as perf record -o - | perf script -i - runs, it is right.
        cmd[cmd.index("-i") + 1] = "-"
        with open(perf_data, "rb") as src:
            cat = subprocess.Popen(["cat"], stdin=src, stdout=subprocess.PIPE)
            try:
                return subprocess.run(cmd, stdin=cat.stdout, capture_output=True, text=True,
                                      timeout=timeout, cwd=cwd)
            finally:
                cat.stdout.close()
                cat.wait()
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def is_pipe_format(perf_data: Path) -> bool:
    """A pipe-mode perf.data: the 16-byte header of ``perf record -o -``."""
    p = Path(perf_data)
    if p.is_dir():
        return False
    with open(p, "rb") as f:
        head = f.read(16)
    return len(head) == 16 and head[:8] == b"PERFILE2" and int.from_bytes(head[8:], "little") == 16


def parse_branches(text: str) -> PerfBranches:
    pid, tid, cpu, sec, nsec, flags, frm, to, other = [], [], [], [], [], [], [], [], []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            if line.strip():
                other.append(line)
            continue
        pid.append(int(m[1]))
        tid.append(int(m[2]))
        cpu.append(int(m[3]))
        sec.append(int(m[4]))
        nsec.append(int(m[5]))
        flags.append(" ".join(m[6].split(" ")) if m[6] else "")
        frm.append(int(m[7], 16))
        to.append(int(m[8], 16))
    time = np.array(sec, dtype=np.int64) * 1_000_000_000 + np.array(nsec, dtype=np.int64)
    return PerfBranches(np.array(pid), np.array(tid), np.array(cpu), time, flags,
                        np.array(frm, dtype=np.uint64), np.array(to, dtype=np.uint64), other)


def load_truth(out_dir: Path) -> tuple[dict[str, np.ndarray], dict]:

    d = np.load(Path(out_dir) / "truth.npz")
    meta = json.loads((Path(out_dir) / "truth.json").read_text())
    return expand_truth({k: d[k] for k in d.files}), meta


@dataclass
class Comparison:
    compared: int
    mismatches: int
    first_mismatch: str
    max_time_error_ns: int
    monotonic: bool

    @property
    def ok(self) -> bool:
        return self.mismatches == 0


def compare_branches(truth: dict[str, np.ndarray], perf: PerfBranches, *, per: str = "cpu",
                     kinds: set[int] | None = None) -> Comparison:
    """Compare line for line within each CPU (``per="cpu"``) or thread (``per="tid"``).

    A line matches when tid, cpu, from, to and kind agree.  Also reports the
    largest |perf time - true time| and whether perf's times are monotonic
    per CPU (per thread for ``per="tid"``).
    """
    pk = np.array([KIND_OF_FLAGS.get(f, 255) for f in perf.flags], dtype=np.int32)
    tk = truth["kind"].astype(np.int32)
    tsel = np.ones(len(tk), bool)
    psel = np.ones(len(pk), bool)
    if kinds is not None:
        tsel = np.isin(tk, list(kinds))
        psel = np.isin(pk, list(kinds))
    key_t = truth[per][tsel]
    key_p = (perf.cpu if per == "cpu" else perf.tid)[psel]
    mism = 0
    first = ""
    compared = 0
    max_err = 0
    mono = True
    cols_t = {k: truth[k][tsel] for k in ("time", "cpu", "tid", "from_ip", "to_ip")}
    cols_t["kind"] = tk[tsel]
    cols_p = {"time": perf.time[psel], "cpu": perf.cpu[psel], "tid": perf.tid[psel],
              "from_ip": perf.from_ip[psel], "to_ip": perf.to_ip[psel], "kind": pk[psel]}
    for key in sorted(set(key_t.tolist()) | set(key_p.tolist())):
        it = np.nonzero(key_t == key)[0]
        ip = np.nonzero(key_p == key)[0]
        n = min(len(it), len(ip))
        bad = np.zeros(n, bool)
        for c in ("cpu", "tid", "from_ip", "to_ip", "kind"):
            bad |= cols_t[c][it[:n]].astype(np.int64) != cols_p[c][ip[:n]].astype(np.int64)
        nb = int(bad.sum()) + abs(len(it) - len(ip))
        if nb and not first:
            j = int(np.argmax(bad)) if bad.any() else n
            def row(cols, idx, j=j):
                if j >= len(idx):
                    return "(none)"
                return " ".join(f"{c}={int(cols[c][idx[j]]):#x}" if "ip" in c else
                                f"{c}={int(cols[c][idx[j]])}" for c in cols)
            first = f"{per} {key} line {j}: truth [{row(cols_t, it)}] perf [{row(cols_p, ip)}]"
        mism += nb
        compared += n
        if n:
            err = np.abs(cols_t["time"][it[:n]].astype(np.int64) - cols_p["time"][ip[:n]])
            max_err = max(max_err, int(err.max()))
            if np.any(np.diff(cols_p["time"][ip]) < 0):
                mono = False
    return Comparison(compared, mism, first, max_err, mono)


_INSN = re.compile(r"^\s*(-?\d+)\s+\[(-?\d+)\]\s+([0-9a-f]+)\s*$")


def compare_instructions(out_dir: Path, perf_data: Path | None = None, per: str = "cpu"
                         ) -> Comparison:
    """``perf script --itrace=i1i`` against truth_insns.npz, line for line per CPU (or tid)."""
    d = np.load(Path(out_dir) / "truth_insns.npz")
    proc = perf_script(perf_data or Path(out_dir) / "perf.data", "i1i", fields="tid,cpu,ip")
    if proc.returncode:
        raise SynthError(f"perf script failed: {proc.stderr.strip()[:500]}")
    tid, cpu, ip = [], [], []
    bad_lines = 0
    for line in proc.stdout.splitlines():
        m = _INSN.match(line)
        if not m:
            bad_lines += bool(line.strip())
            continue
        tid.append(int(m[1]))
        cpu.append(int(m[2]))
        ip.append(int(m[3], 16))
    tid_a, cpu_a, ip_a = np.array(tid), np.array(cpu), np.array(ip, dtype=np.uint64)
    mism = bad_lines
    first = ""
    compared = 0
    key_t = d["cpu"] if per == "cpu" else d["tid"]
    key_p = cpu_a if per == "cpu" else tid_a
    for c in sorted(set(key_t.tolist()) | set(key_p.tolist())):
        it = np.nonzero(key_t == c)[0]
        ip_ = np.nonzero(key_p == c)[0]
        n = min(len(it), len(ip_))
        bad = (d["ip"][it[:n]] != ip_a[ip_[:n]]) | (d["tid"][it[:n]] != tid_a[ip_[:n]])
        nb = int(bad.sum()) + abs(len(it) - len(ip_))
        if nb and not first:
            j = int(np.argmax(bad)) if bad.any() else n
            first = (f"{per} {c} line {j}: truth "
                     f"{(int(d['tid'][it[j]]), hex(int(d['ip'][it[j]]))) if j < len(it) else None}"
                     f" perf {(int(tid_a[ip_[j]]), hex(int(ip_a[ip_[j]]))) if j < len(ip_) else None}")
        mism += nb
        compared += n
    return Comparison(compared, mism, first, 0, True)


_ERR = re.compile(r"instruction trace error type \d+ time (\d+)\.(\d+) cpu (-?\d+) pid (-?\d+) "
                  r"tid (-?\d+) ip (0x[0-9a-f]+|0) code (\d+): (.*)$")


def parse_errors(lines: list[str]) -> list[dict]:
    """perf's ``instruction trace error`` lines (from ``--itrace=be`` output)."""
    out = []
    for line in lines:
        m = _ERR.search(line)
        if m:
            out.append({"time": int(m[1]) * 1_000_000_000 + int(m[2].ljust(9, "0")[:9]),
                        "cpu": int(m[3]), "tid": int(m[5]), "ip": int(m[6], 16),
                        "code": int(m[7]), "text": m[8]})
    return out


def perf_dump(perf_data: Path) -> str:
    """The text of ``perf report -D`` (records and PT packets with their offsets)."""
    perf = shutil.which("perf")
    if perf is None:
        raise SynthError("perf is not installed")
    proc = subprocess.run([perf, "report", "-D", "-i", str(perf_data)], capture_output=True,
                          text=True, timeout=600)
    return proc.stdout


def dump_offsets(dump: str, needle: str) -> list[tuple[int, int]]:
    """(cpu, offset in that CPU's AUX stream) of every packet line of a ``perf report -D``
    text containing ``needle`` (e.g. "OVF", "Bad packet!")."""
    base = 0
    cpu = -1
    out = []
    aux = re.compile(r"PERF_RECORD_AUXTRACE size: (0x[0-9a-f]+|0)\s+offset: (0x[0-9a-f]+|0)"
                     r".*cpu: (-?\d+)")
    for line in dump.splitlines():
        m = aux.search(line)
        if m:
            base = int(m[2], 16)
            cpu = int(m[3])
            continue
        if needle in line and line.startswith(".  "):
            out.append((cpu, base + int(line.split(":")[0][3:], 16)))
    return out


def aux_truncations(dump: str) -> list[tuple[int, int]]:
    """(cpu, end offset) of every AUX record with the TRUNCATED flag in a ``perf report -D`` text."""
    out = []
    pat = re.compile(r"^(-?\d+) .*PERF_RECORD_AUX offset: (0x[0-9a-f]+|0) size: (0x[0-9a-f]+) "
                     r"flags: (0x[0-9a-f]+)")
    for line in dump.splitlines():
        m = pat.search(line)
        if m and int(m[4], 16) & 1:
            out.append((int(m[1]), int(m[2], 16) + int(m[3], 16)))
    return out


_EVENT = re.compile(r"^\s*(-?\d+)\s+\[(-?\d+)\]\s+(\d+)\.(\d+):\s+(ptwrite|mwait|pwre|exstop|pwrx):"
                    r"\s+(.*?)\s+([0-9a-f]+)\s*$")
_NUM = re.compile(r"([a-z -]+):\s+(0x[0-9a-f]+|\d+)")


def parse_events(text: str) -> dict[str, np.ndarray]:
    """PTWRITE and power event samples of ``perf script --itrace=wp -F tid,cpu,time,synth,ip,event``
    as arrays shaped like the truth's ``ev_*`` (payloads packed as the generator packs them)."""

    rows = []
    for line in text.splitlines():
        m = _EVENT.match(line)
        if not m:
            continue
        f = {k.strip().split()[-1] if k.strip() else k: int(v, 0) for k, v in _NUM.findall(m[6])}
        kind = m[5]
        if kind == "ptwrite":
            payload = f.get("payload", 0)
        elif kind == "mwait":
            payload = f.get("hints", 0) | f.get("extensions", 0) << 8
        elif kind == "pwre":
            payload = f.get("hw", 0) << 8 | f.get("cstate", 0) << 4 | f.get("sub-cstate", 0)
        elif kind == "pwrx":
            payload = f.get("cstate", 0) << 4 | f.get("reason", 0)
            m2 = re.search(r"deepest cstate: (\d+) last cstate: (\d+)", m[6])
            if m2:
                payload = int(m2[1]) << 8 | int(m2[2]) << 4 | f.get("reason", 0)
        else:
            payload = 0
        rows.append((int(m[3]) * 1_000_000_000 + int(m[4]), int(m[2]), int(m[1]), int(m[7], 16),
                     EV_NAMES.index(kind), payload))
    cols = list(zip(*rows)) if rows else [[]] * 6
    return {"ev_time": np.array(cols[0], np.int64), "ev_cpu": np.array(cols[1], np.int32),
            "ev_tid": np.array(cols[2], np.int32), "ev_ip": np.array(cols[3], np.int64),
            "ev_kind": np.array(cols[4], np.uint8), "ev_payload": np.array(cols[5], np.uint64)}
