#!/usr/bin/env python3
"""Benchmark: iterate every record of a sideband-heavy perf.data and compare with `perf report --stats`.

    python3 bench/bench_records.py                 # make a >= 1 M record file with perf, then measure
    python3 bench/bench_records.py --keep DIR      # ... and keep it as DIR/sideband.data
    python3 bench/bench_records.py --file X.data   # measure an existing file

The file is a system-wide `perf record -a -e dummy --switch-events` of `perf bench sched pipe` (two
context switches per loop, one SWITCH_CPU_WIDE record each); when perf cannot record here, a file of the
same shape is written by hand. Prints wall and CPU times (best of --repeat; CPU = user+sys of this
process and its children, which is steadier than wall time on a shared machine) and the ratios
ours / perf for: the header walk (`iter_headers`, the fast path), `records()` (every record parsed into
an object) and `records()` plus reading each record's time and cpu; exit status 1 when the
counts differ from perf's.  Output paths (`--keep`, `--json`) that exist are refused unless `--force`;
`--tiny` is a quick check (a few thousand records).
"""

from __future__ import annotations

import argparse
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

# a checkout without ptexport installed works too (appended: an installed ptexport comes first)
sys.path.append(str(Path(__file__).resolve().parents[1]))

from _common import add_options, need_file, need_perf, one_line_errors, parse, ratio, workdir, write_json  # noqa: E402
from ptexport.perfdata import open_perf_data  # noqa: E402


def make_with_perf(path: Path, loops: int) -> bool:
    cmd = ["perf", "record", "-q", "-a", "-e", "dummy", "--switch-events", "-o", str(path), "--",
           "perf", "bench", "sched", "pipe", "-l", str(loops)]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return r.returncode == 0 and path.exists()


def make_by_hand(path: Path, n: int) -> None:
    """SWITCH_CPU_WIDE records with a pid/tid/time/cpu/identifier trailer, one attr (dummy, sample_id_all)."""
    st = 2 | 4 | 128 | 65536  # TID | TIME | CPU | IDENTIFIER
    attr = struct.pack("<IIQQQQQ", 1, 136, 9, 1, st, 4, 1 << 18 | 1 << 26) + bytes(136 - 48)
    rec = struct.Struct("<IHHiiiiQIIQ")
    chunks = []
    for i in range(n):
        chunks.append(rec.pack(15, 1 << 13 if i & 1 else 0, 48, 100 + i % 7, 100 + i % 7, i % 50, i % 50,
                               1000 + i, i & 1, 0, 10))
        if i % 10000 == 9999:
            chunks.append(struct.pack("<IHH", 68, 0, 8))
    data = b"".join(chunks)
    ids = struct.pack("<Q", 10)
    ids_off = 104
    attrs_off = ids_off + len(ids)
    data_off = attrs_off + 136 + 16
    head = struct.pack("<8sQQQQQQQQ4Q", b"PERFILE2", 104, 152, attrs_off, 152, data_off, len(data), 0, 0, 0, 0, 0, 0)
    path.write_bytes(head + ids + attr + struct.pack("<QQ", ids_off, 8) + data)


def best(fn, repeat: int) -> tuple[float, float, object]:
    """Best wall time and best CPU time (this process plus its children) of ``repeat`` runs."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        c0 = _cpu()
        t = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(_cpu() - c0)
    return min(walls), min(cpus), out


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def perf_stats(path: Path):
    def run():
        return subprocess.run(["perf", "report", "--stats", "-i", str(path)], capture_output=True, text=True,
                              check=True).stdout

    return run


def parse_stats(out: str) -> dict[str, int]:
    counts, on = {}, False
    for line in out.splitlines():
        if line.startswith("Aggregated stats"):
            on = True
            continue
        parts = line.split()
        if on and len(parts) >= 3 and parts[1] == "events:":
            if parts[0] != "TOTAL":
                counts[parts[0]] = int(parts[2])
        elif on and counts:
            break
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, help="an existing perf.data (default: make one)")
    ap.add_argument("--records", type=int, default=1_000_000, help="records to aim for when making the file")
    ap.add_argument("--repeat", type=int, default=3)
    add_options(ap, keep=True)
    args = parse(ap, argv, tiny={"records": 2000, "repeat": 1})
    if args.file and args.keep:
        ap.error("--file and --keep exclude each other (--keep keeps a generated file)")
    need_file(ap, args.file)
    need_perf(ap)
    with one_line_errors(ap):
        return make_and_run(args)


def make_and_run(args: argparse.Namespace) -> int:
    if args.file:
        return run(args, args.file)
    with workdir(args.keep, "bench_records.") as work:
        path = work / "sideband.data"
        path.unlink(missing_ok=True)  # --keep DIR with --force: replaced
        how = "perf record -a -e dummy --switch-events -- perf bench sched pipe"
        if not make_with_perf(path, max(1000, args.records // 4)):
            how = "written by hand (perf record is not permitted here)"
            make_by_hand(path, args.records)
        print(f"file: {path} ({path.stat().st_size / 1e6:.1f} MB), {how}")
        return run(args, path)


def _x(r: float | None) -> str:
    return f"{r:6.2f}x" if r is not None else f"{'n/a':>7s}"


def run(args: argparse.Namespace, path: Path) -> int:
    perf_t, perf_c, perf_out = best(perf_stats(path), args.repeat)
    theirs = parse_stats(perf_out)

    def walk():
        with open_perf_data(path) as pd:
            n = sum(1 for _ in pd.iter_headers())
            return n, dict(pd.stats)

    def parse_all():
        with open_perf_data(path) as pd:
            return sum(1 for _ in pd.records())

    def parse_fields():
        with open_perf_data(path) as pd:
            acc = 0
            for r in pd.records():
                t = r.time
                if t is not None:
                    acc += t + (r.cpu or 0)
            return acc

    walk_t, walk_c, (n, ours) = best(walk, args.repeat)
    rec_t, rec_c, _ = best(parse_all, max(1, args.repeat - 1))
    fld_t, fld_c, _ = best(parse_fields, 1)
    total = sum(theirs.values())
    if not total:
        raise SystemExit(f"perf report --stats counted no records in {path}")
    print(f"records: {n} (perf counts {total}); counts equal perf's: {ours == theirs}")
    print(f"{'':26s} {'wall':>8s} {'us/rec':>7s} {'ratio':>6s}   {'cpu':>8s} {'ratio':>6s}")
    print(f"{'perf report --stats':26s} {perf_t:7.3f}s {perf_t / total * 1e6:7.2f} {1:6.2f}x  "
          f"{perf_c:7.3f}s {1:6.2f}x")
    for label, t, c in (("iter_headers (fast path)", walk_t, walk_c), ("records()", rec_t, rec_c),
                        ("records() + time/cpu", fld_t, fld_c)):
        print(f"{label:26s} {t:7.3f}s {t / total * 1e6:7.2f} {_x(ratio(t, perf_t))}  {c:7.3f}s {_x(ratio(c, perf_c))}")
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    write_json(args.json, {
        "records": n, "perf_records": total, "counts_equal": ours == theirs, "file_bytes": path.stat().st_size,
        "load_average": os.getloadavg()[0], "cores": os.cpu_count(),
        "runs": {label: {"wall_s": t, "cpu_s": c, "us_per_record": t / total * 1e6 if total else None,
                         "ratio_wall": ratio(t, perf_t), "ratio_cpu": ratio(c, perf_c)}
                 for label, t, c in (("perf report --stats", perf_t, perf_c), ("iter_headers", walk_t, walk_c),
                                     ("records", rec_t, rec_c), ("records_time_cpu", fld_t, fld_c))},
    })
    return 0 if ours == theirs else 1


if __name__ == "__main__":
    sys.exit(main())
