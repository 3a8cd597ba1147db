"""``ptexport synth --out DIR``: generate an Intel PT perf.data with known contents."""

from __future__ import annotations

import argparse
import time

from ptexport.errors import SynthError

NAME = "synth"
HELP = "generate a realistic Intel PT perf.data (and its ground truth) by emulating a program"


def _positive(text: str) -> int:
    try:
        v = int(text.replace("_", "").replace("k", "000").replace("M", "000000"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory: perf.data, the program ELFs, truth.npz, truth.json")
    p.add_argument("--program", default="loops", metavar="NAME",
                   help="sample program (loops, calls, threads, forkexec, events, hotloop) or a path to a static "
                        "x86-64 ELF (default: loops)")
    p.add_argument("--branches", type=_positive, default=20_000, metavar="N",
                   help="about how many branches the trace holds (default 20000; k/M suffixes)")
    g = p.add_argument_group("encoding")
    g.add_argument("--no-retcomp", dest="retcomp", action="store_false",
                   help="no return compression (intel_pt/noretcomp=1/): every RET is a TIP")
    g.add_argument("--tnt", choices=("short", "long"), default="long", help="TNT packet size")
    g.add_argument("--ip-compression", dest="ip_mode", default="auto",
                   choices=("auto", "full", "sext48", "upd48", "mixed"),
                   help="IP compression of TIP/FUP packets: smallest valid (auto), always 8 "
                        "bytes (full), 6-byte forms, or any valid form at random (mixed)")
    g.add_argument("--psb-period", type=_positive, default=4096, metavar="BYTES",
                   help="bytes of trace between PSB+ (default 4096)")
    g.add_argument("--ptwrite", choices=("off", "fup", "nofup"), default="off",
                   help="PTW packets for the program's PTWRITE instructions, with a FUP "
                        "(fup_on_ptw) or without (try --program events)")
    g.add_argument("--power", action="store_true",
                   help="power events (pwr_evt): MWAIT, PWRE, EXSTOP and PWRX around the "
                        "program's TPAUSE waits, CBR in PSB+")
    t = p.add_argument_group("timing")
    t.add_argument("--timing", choices=("tsc", "mtc", "cyc"), default="mtc",
                   help="TSC in PSB+ only; plus MTC with TMA (default); plus CYC")
    t.add_argument("--mtc-period", type=int, default=3, metavar="P",
                   help="MTC every 2^P crystal clocks (default 3)")
    t.add_argument("--cyc-thresh", type=int, default=0, metavar="N",
                   help="CYC threshold (with --timing cyc): a CYC packet only once 2^(N-1) cycles "
                        "have passed since the last one (default 0: at every chance)")
    t.add_argument("--cbr", type=int, default=0, metavar="RATIO",
                   help="emit CBR packets with this core:bus ratio (the max non-turbo ratio is 20)")
    s = p.add_argument_group("layout")
    s.add_argument("--cpus", type=_positive, default=1, help="CPUs to schedule threads on")
    s.add_argument("--per-thread", action="store_true",
                   help="perf record --per-thread layout: one AUX buffer per thread, no CPU")
    s.add_argument("--workload", action="store_true",
                   help="the AUXTRACE buffers of the CPU queues carry the workload's pid, as perf record -- PROGRAM "
                        "writes them (default: -1, as perf record -a does); a timeless decode (--itrace=Z) then "
                        "decodes each CPU queue when the workload exits")
    s.add_argument("--preempt", type=int, default=0, metavar="N",
                   help="a timer interrupt every N instructions: FUP + TIP.PGD ('tr end async'), "
                        "other threads run (preempted switch-out)")
    s.add_argument("--event-trace", action="store_true",
                   help="Event Trace (intel_pt/event_trace=1/, needs --preempt): CFE.INTR (+EVD CR2 "
                        "for page faults) bound to the interrupt's FUP, CFE.IRET before tracing resumes, "
                        "RFLAGS.IF in MODE.Exec")
    s.add_argument("--pipe", action="store_true",
                   help="pipe-mode perf.data, as perf record -o - writes it")
    s.add_argument("--kcore", action="store_true",
                   help="the perf record --kcore directory form: OUT/data and OUT/kcore_dir/")
    s.add_argument("--no-migrate", dest="migrate", action="store_false",
                   help="threads stay on their first CPU")
    s.add_argument("--elf-path", default="", metavar="DIR",
                   help="directory the MMAP2 records name for the ELFs (default: the absolute "
                        "output directory)")
    e = p.add_argument_group("faults (per CPU stream; perf reports each as a decoder error)")
    e.add_argument("--ovf", type=int, default=0, metavar="N",
                   help="N internal buffer overflows: OVF, packets lost, FUP where tracing goes on")
    e.add_argument("--corrupt", type=int, default=0, metavar="N",
                   help="N corrupted spots: a bad-packet byte and PADs up to the next PSB")
    e.add_argument("--truncate", type=int, default=0, metavar="N",
                   help="N truncated AUX areas (AUX record flag TRUNCATED, data up to the next "
                        "PSB missing)")
    p.add_argument("--replay", choices=("auto", "on", "off"), default="auto",
                   help="encode one round of the program and replay it (fast, for large "
                        "--branches; auto: above 2 M branches)")
    p.add_argument("--seed", type=int, default=1, help="seed for the random choices")
    p.add_argument("--check", action="store_true",
                   help="afterwards run perf script and compare it with the ground truth")
    from ptexport.cli.vm_time_correlation import add_synth_vm_arguments
    add_synth_vm_arguments(p)


def run(args, out) -> int:
    if getattr(args, "vm", None):
        from ptexport.cli.vm_time_correlation import run_synth_vm
        return run_synth_vm(args, out)
    from ptexport.synth.generate import SynthOptions, synthesize

    opts = SynthOptions(program=args.program, branches=args.branches, retcomp=args.retcomp,
                        tnt=args.tnt, ip_mode=args.ip_mode, timing=args.timing,
                        mtc_period=args.mtc_period, cyc_thresh=args.cyc_thresh, cbr=args.cbr, cpus=args.cpus,
                        psb_period=args.psb_period, seed=args.seed, migrate=args.migrate,
                        per_thread=args.per_thread, workload=args.workload, ovf=args.ovf, corrupt=args.corrupt,
                        truncate=args.truncate, replay=args.replay, pipe=args.pipe,
                        kcore=args.kcore, ptwrite=args.ptwrite, power=args.power,
                        preempt=args.preempt, event_trace=args.event_trace,
                        elf_path=args.elf_path)
    t0 = time.monotonic()
    res = synthesize(args.out, opts)
    dt = time.monotonic() - t0
    print(f"{res.perf_data}: {res.branches} branches, {res.pt_bytes} bytes of PT, "
          f"{dt:.2f} s ({res.branches / max(dt, 1e-9) / 1e6:.2f} M branches/s)", file=out)
    if args.check:
        from ptexport.synth.verify import compare_branches, load_truth, parse_branches, perf_script

        proc = perf_script(res.perf_data, "b")
        if proc.returncode:
            raise SynthError(f"perf script failed: {proc.stderr.strip()[:500]}")
        truth, _meta = load_truth(res.out_dir)
        per = "tid" if args.per_thread else "cpu"
        cmp = compare_branches(truth, parse_branches(proc.stdout), per=per)
        if _meta.get("errors"):
            print(f"{len(_meta['errors'])} faults placed (see truth.json 'errors'); check them "
                  "with perf script --itrace=be", file=out)
        print(f"perf script --itrace=b: {cmp.compared} lines compared, {cmp.mismatches} "
              f"mismatches, max time error {cmp.max_time_error_ns} ns"
              + ("" if cmp.ok else f"; first: {cmp.first_mismatch}"), file=out)
        return 0 if cmp.ok else 1
    return 0


