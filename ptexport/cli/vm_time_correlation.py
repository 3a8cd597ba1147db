"""``ptexport vm-time-correlation TRACE [--dry-run] [--offset SPEC] [-o OUT]``: find the VMX
TSC offset of each VMCS in a host Intel PT recording and translate guest TSC packets to
host time, like ``perf inject --vm-time-correlation``.

With ``--dry-run`` nothing is written; the report lists what perf prints (``VMCS: 0x..  TSC
Offset 0x..`` for each offset found, and perf's ERROR lines).  Without it a corrected copy
is written to ``--output`` (perf rewrites the input in place; we never modify the input).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ptexport.errors import InputError, UsageError
from ptexport.perfdata import open_perf_data
from ptexport.perfdata.constants import PERF_RECORD_MISC_SWITCH_OUT, RecordType
from ptexport.pt.vmtime import VmBuffer, VmTimeConfig, VmTimeCorrelator, parse_offsets

NAME = "vm-time-correlation"
HELP = "find the VMX TSC offset per VMCS and correct guest TSC packets (perf inject --vm-time-correlation)"


def add_arguments(parser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="host perf.data file or --kcore directory")
    parser.add_argument("--dry-run", action="store_true",
                        help="only report the offsets found (perf's dry-run)")
    parser.add_argument("--offset", action="append", default=[], metavar="SPEC",
                        help="TSC offset to use, perf's syntax: OFFSET[:VMCS[,VMCS]...] "
                             "(repeatable; without :VMCS it applies to every VMCS)")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="where to write the corrected copy (required without --dry-run)")
    parser.add_argument("--vcpus", action="store_true",
                        help="also list each VMCS with the host thread(s) that ran it (from "
                             "the context switches) and the VCPU its 'CPU n/KVM' name gives")


def correlate(trace: str, spec: str = "") -> tuple[list[str], dict, object]:
    """Run the correlation; returns (messages, {source file: [(file offset, new payload)]},
    the correlator)."""
    try:
        default, per = parse_offsets(spec)
    except ValueError as e:
        raise UsageError(f"bad --offset {spec!r}: {e}") from e
    patches: dict[str, list[tuple[int, int]]] = {}
    with open_perf_data(trace) as pd:
        info = pd.auxtrace_info
        if info is None or not hasattr(info, "pmu_type"):
            raise InputError("no Intel PT AUXTRACE_INFO: not an intel_pt recording", source=str(trace))
        pt_attrs = [a for a in pd.attrs if a.type == info.pmu_type]
        config = pt_attrs[0].config if pt_attrs else 0
        bits = info.mtc_freq_bits or 0
        mtc_period = (config & bits) >> ((bits & -bits).bit_length() - 1) if bits else 0
        cfg = VmTimeConfig(mtc_period=mtc_period, tsc_ctc_ratio_n=info.tsc_ctc_ratio_n or 0,
                           tsc_ctc_ratio_d=info.tsc_ctc_ratio_d or 0, default_offset=default,
                           offsets=per)
        queues: dict[tuple, list] = {}
        for rec in pd.records(types=[RecordType.AUXTRACE]):
            key = ("cpu", rec.cpu) if rec.cpu not in (-1, 0xFFFFFFFF) else ("thread", rec.tid)
            queues.setdefault(key, []).append(rec)
        corr = VmTimeCorrelator(cfg)
        main = pd.sources[0]
        for key in sorted(queues, key=lambda k: (k[0] != "cpu", k[1])):
            recs = queues[key]
            bufs = [VmBuffer(bytes(pd.aux_data(r)), r.reference, i > 0) for i, r in enumerate(recs)]
            for p in corr.run_queue(bufs, key):
                rec = recs[p.buffer]
                patches.setdefault(rec.src or main, []).append((rec.data_offset + p.pos + 1, p.new))
    return corr.messages, patches, corr


def vcpu_table(trace: str, corr) -> list[dict]:
    """Each VMCS seen with the host threads that ran it: the VMCS packet's time and CPU
    give the thread switched in there (SWITCH_CPU_WIDE); a thread named ``CPU n/KVM`` is
    VCPU n of its process (perf inject's rule)."""
    import bisect
    import re

    comms: dict[int, tuple[int, str]] = {}
    ins: dict[int, list[tuple[int, int, int]]] = {}
    with open_perf_data(trace) as pd:
        tc = pd.time_conv
        for rec in pd.records(types=[RecordType.COMM, RecordType.SWITCH_CPU_WIDE]):
            if rec.type == RecordType.COMM:
                comms[rec.tid] = (rec.pid, rec.comm)
            elif not rec.misc & PERF_RECORD_MISC_SWITCH_OUT and rec.sample_id is not None:
                sid = rec.sample_id
                ins.setdefault(sid.cpu, []).append((sid.time or 0, sid.pid, sid.tid))
    if tc is None:
        return []
    for v in ins.values():
        v.sort()
    seen: dict[tuple, int] = {}
    for queue, tsc, vmcs in corr.vmcs_seen:
        cpu = queue[1] if isinstance(queue, tuple) and queue[0] == "cpu" else None
        timeline = ins.get(cpu, [])
        k = bisect.bisect_right(timeline, (tc.tsc_to_perf_time(tsc), 1 << 62, 0)) - 1
        pid, tid = (timeline[k][1], timeline[k][2]) if k >= 0 else (-1, -1)
        seen[(vmcs, pid, tid)] = seen.get((vmcs, pid, tid), 0) + 1
    rows = []
    for (vmcs, pid, tid), n in sorted(seen.items()):
        comm = comms.get(tid, (pid, ""))[1]
        m = re.match(r"CPU (\d+)/KVM$", comm)
        info = corr.vmcs_table.get(vmcs)
        rows.append({"vmcs": vmcs, "pid": pid, "tid": tid, "comm": comm,
                     "vcpu": int(m.group(1)) if m else None, "vmcs_packets": n,
                     "tsc_offset": info.tsc_offset if info is not None and info.tsc_offset else None})
    return rows


def vcpu_report(trace: str, corr) -> list[str]:
    lines = []
    for r in vcpu_table(trace, corr):
        vcpu = f"VCPU {r['vcpu']}" if r["vcpu"] is not None else "VCPU ?"
        off = f"TSC Offset {r['tsc_offset']:#x}" if r["tsc_offset"] is not None else "TSC Offset ?"
        lines.append(f"VMCS {r['vmcs']:#x}: pid {r['pid']} tid {r['tid']} ({r['comm'] or '?'}) "
                     f"{vcpu}, {r['vmcs_packets']} VMCS packets, {off}")
    return lines


def run(args, out) -> int:
    if not args.dry_run and not args.output:
        raise UsageError("give --output OUT for the corrected copy, or --dry-run")
    messages, patches, corr = correlate(args.trace, " ".join(args.offset))
    for m in messages:
        out.write(m + "\n")
    if args.vcpus:
        for line in vcpu_report(args.trace, corr):
            out.write(line + "\n")
    if args.dry_run:
        return 0
    src, dst = Path(args.trace), Path(args.output)
    if dst.exists():
        raise UsageError(f"{dst} exists; choose a new --output")
    try:
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)
        for name, plist in patches.items():
            target = dst / Path(name).relative_to(src) if src.is_dir() else dst
            with open(target, "r+b") as f:
                for off, value in plist:
                    f.seek(off)
                    f.write(value.to_bytes(7, "little"))
    except OSError as e:
        raise InputError(f"cannot write the corrected copy: {e.strerror}", source=str(dst)) from e
    n = sum(len(p) for p in patches.values())
    out.write(f"{n} TSC packets translated, written to {dst}\n")
    return 0


# -- ``ptexport synth --vm``: the VM trace generator's options (cli/synth.py hands over) ------

def add_synth_vm_arguments(p) -> None:
    """The ``--vm`` option group of ``ptexport synth``."""
    g = p.add_argument_group("virtual machines (--vm: a host recording with KVM guests, "
                             "plus the guest's perf.data)")
    g.add_argument("--vm", choices=("kernel", "user", "mixed"), default=None,
                   help="VCPU threads 'CPU n/KVM' enter a guest running guest kernel code "
                        "(perf kvm --guest --host layout), guest user code, or both")
    g.add_argument("--vcpus", type=int, default=2, metavar="N", help="VCPUs (default 2)")
    g.add_argument("--tsc-offset", action="append", default=[], metavar="OFF",
                   help="VMX TSC offset of each VCPU (give one per VCPU; default one offset "
                        "for all)")
    g.add_argument("--tsc-scale", type=float, default=1.0, metavar="RATIO",
                   help="VMX TSC scaling ratio (guest TSC = host TSC * RATIO + offset; PSB+ "
                        "then stay in host code, as perf cannot translate scaled guest TSCs)")
    g.add_argument("--machine-pid", type=int, default=4000, metavar="PID",
                   help="pid of the hypervisor process (default 4000)")


def run_synth_vm(args, out) -> int:
    """``ptexport synth --vm KIND --out DIR``: write the VM recording and maybe check it."""
    import tempfile
    import time

    from ptexport.synth.vm import VmOptions, synthesize_vm

    try:
        offsets = tuple(int(o, 0) for o in args.tsc_offset)
    except ValueError as e:
        raise UsageError(f"bad --tsc-offset: {e}") from e
    opts = VmOptions(branches=args.branches, vcpus=args.vcpus, cpus=max(args.cpus, 1),
                     machine_pid=args.machine_pid, guest=args.vm, tsc_offsets=offsets,
                     mtc_period=args.mtc_period, psb_period=args.psb_period, seed=args.seed,
                     tsc_scale=args.tsc_scale, cyc=args.timing == "cyc")
    t0 = time.monotonic()
    meta = synthesize_vm(args.out, opts)
    dt = time.monotonic() - t0
    outdir = Path(args.out)
    out.write(f"{outdir / 'host.data'}: {meta['branches']} branches ({meta['vcpus'][0]['vcpu']}.."
              f"{meta['vcpus'][-1]['vcpu']} VCPUs of pid {meta['machine_pid']}), "
              f"{meta['pt_bytes']} bytes of PT, {dt:.2f} s\n")
    out.write(f"guest sideband {outdir / 'guest.data'}, guest program {meta['gprog']}\n")
    offs = sorted({v['tsc_offset'] for v in meta['vcpus']})
    off = f"{offs[0]:#x}" if len(offs) == 1 else "OFFSET"
    if args.vm == "kernel":
        out.write(f"check: cp -r host.data h.data; perf inject -i h.data/data "
                  f"--vm-time-correlation={off} --force; "
                  "perf script -i h.data --guestkallsyms=guest.data/kcore_dir/kallsyms "
                  "--guestmodules=guest.data/kcore_dir/modules --itrace=be\n")
    else:
        out.write(f"check: cp -r host.data h.data; perf inject -i h.data/data "
                  f"--vm-time-correlation={off} --force; "
                  f"perf inject -i h.data/data --guest-data=guest.data,{meta['machine_pid']},"
                  f"{off}{'' if args.tsc_scale == 1.0 else f',{args.tsc_scale!r}'} -o inj.data; "
                  "cp -r host.data/kcore_dir inj.data/; perf script -i inj.data --itrace=be "
                  "-F+machine_pid,+vcpu,+pid,+tid,+addr --ns\n")
    if not args.check:
        return 0
    if len(offs) != 1:
        raise UsageError("--check needs one TSC offset for all VCPUs")
    from ptexport.synth.vm_verify import compare, parse, perf_pipeline

    with tempfile.TemporaryDirectory(prefix="ptexport-vm-") as work:
        guest = args.vm != "kernel"
        res = compare(outdir, parse(perf_pipeline(outdir, Path(work), inject_guest=guest)),
                      guest_sideband=guest)
    out.write(f"perf: {res['perf_branches']} branches, truth {res['truth_branches']}, "
              f"{res['mismatches']} mismatches, max time error {res['max_time_error_ns']} ns"
              + (f"; first: {res['first_mismatch']}" if res["first_mismatch"] else "") + "\n")
    for line in res["errors"]:
        out.write(line + "\n")
    ok = not res["mismatches"] and res["perf_branches"] == res["truth_branches"]
    return 0 if ok else 1
