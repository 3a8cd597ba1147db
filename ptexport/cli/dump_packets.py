"""``ptexport dump packets``: Intel PT packets as libipt's ptdump prints them.

    ptexport dump packets TRACE                     # perf.data: per CPU / per AUX buffer
    ptexport dump packets --raw FILE.pt [--cpu F/M[/S]] [ptdump options]

Each packet line starts with the packet's offset as 16 hex digits.  With
perf.data the offset is within the CPU's AUX stream (the concatenation of
its AUXTRACE buffers), and a header line names each buffer.
"""

from __future__ import annotations

import os
import re

from ptexport.errors import InputError, UsageError

NAME = "packets"
HELP = "print Intel PT packets (ptdump format) of a perf.data or a raw trace"


def add_arguments(parser) -> None:
    parser.add_argument("trace", metavar="TRACE",
                        help="perf.data file, or with --raw a raw .pt file[:FROM[-TO]] (a byte range)")
    parser.add_argument("--raw", action="store_true", help="TRACE is a raw Intel PT dump")
    parser.add_argument("--per-cpu", action="store_true",
                        help="perf.data: decode each CPU's AUX buffers as one stream (offsets in "
                             "that stream), as perf's decoder does, instead of buffer by buffer")
    parser.add_argument("--cpu", metavar="F/M[/S]",
                        help="decode for this CPU family/model[/stepping] (errata); 'none' = spec")
    parser.add_argument("--perf-time", action="store_true",
                        help="perf.data: show perf's timestamp (TSC units) on TSC/TMA/MTC packets")
    g = parser.add_argument_group("ptdump options")
    g.add_argument("--no-sync", action="store_true", help="assume a sync point at offset 0")
    g.add_argument("--quiet", action="store_true", help="print nothing but errors")
    g.add_argument("--no-pad", action="store_true", help="hide PAD packets")
    g.add_argument("--no-timing", action="store_true", help="hide timing packets")
    g.add_argument("--no-cyc", action="store_true", help="hide CYC packets and ignore them for time")
    g.add_argument("--no-offset", action="store_true", help="no offset column")
    g.add_argument("--raw-bytes", action="store_true", help="show the raw packet bytes")
    g.add_argument("--lastip", action="store_true", help="show the last IP on IP packets")
    g.add_argument("--exec-mode", action="store_true", help="show the execution mode on mode.exec")
    g.add_argument("--time", action="store_true", help="show the estimated TSC on timing packets")
    g.add_argument("--tcal", action="store_true", help="show time calibration")
    g.add_argument("--time-delta", action="store_true", help="show time as deltas")
    g.add_argument("--no-tcal", action="store_true", help="skip time calibration")
    g.add_argument("--no-wall-clock", action="store_true", help="relative time without a TSC")
    g.add_argument("--keep-tcal-on-ovf", action="store_true", help="keep calibration over OVF")
    g.add_argument("--mtc-freq", type=lambda s: int(s, 0), default=0, metavar="N")
    g.add_argument("--nom-freq", type=lambda s: int(s, 0), default=0, metavar="N")
    g.add_argument("--cpuid-0x15.eax", dest="cpuid_eax", type=lambda s: int(s, 0), default=0,
                   metavar="N")
    g.add_argument("--cpuid-0x15.ebx", dest="cpuid_ebx", type=lambda s: int(s, 0), default=0,
                   metavar="N")
    s = parser.add_argument_group("perf_event sideband (raw mode)")
    s.add_argument("--pevent:primary", "--pevent", dest="pevent_primary", action="append",
                   default=[], metavar="FILE",
                   help="perf_event sideband file of the traced cpu; sample-type/time-zero/"
                        "time-shift/time-mult are taken from its name when present")
    s.add_argument("--pevent:secondary", dest="pevent_secondary", action="append", default=[],
                   metavar="FILE", help="sideband file of another cpu")
    s.add_argument("--pevent:sample-type", dest="pevent_sample_type", type=lambda s: int(s, 0))
    s.add_argument("--pevent:time-zero", dest="pevent_time_zero", type=lambda s: int(s, 0))
    s.add_argument("--pevent:time-shift", dest="pevent_time_shift", type=lambda s: int(s, 0))
    s.add_argument("--pevent:time-mult", dest="pevent_time_mult", type=lambda s: int(s, 0))
    s.add_argument("--sb:compact", "--sb", dest="sb_compact", action="store_true")
    s.add_argument("--sb:verbose", dest="sb_verbose", action="store_true")
    s.add_argument("--sb:filename", dest="sb_filename", action="store_true")
    s.add_argument("--sb:offset", dest="sb_offset", action="store_true")
    s.add_argument("--sb:time", dest="sb_time", action="store_true")
    s.add_argument("--sb:warn", dest="sb_warn", action="store_true")


def _options(args, errata):
    from ptexport.raw.ptdump import PtdumpOptions
    from ptexport.pt.time import TimingConfig

    if args.time and args.tcal:
        raise UsageError("specify either --time or --tcal")
    timing = TimingConfig(
        mtc_freq=args.mtc_freq,
        nom_freq=args.nom_freq,
        cpuid_0x15_eax=args.cpuid_eax,
        cpuid_0x15_ebx=args.cpuid_ebx,
        skl168=errata.skl168,
    )
    return PtdumpOptions(
        show_offset=not args.no_offset,
        show_raw_bytes=args.raw_bytes,
        show_last_ip=args.lastip,
        show_exec_mode=args.exec_mode,
        track_time=args.time or args.tcal,
        show_time=args.time,
        show_tcal=args.tcal,
        show_time_as_delta=args.time_delta,
        quiet=args.quiet,
        no_pad=args.no_pad,
        no_sync=args.no_sync,
        no_tcal=args.no_tcal,
        no_wall_clock=args.no_wall_clock,
        no_timing=args.no_timing,
        no_cyc=args.no_cyc,
        keep_tcal_on_ovf=args.keep_tcal_on_ovf,
        errata=errata,
        timing=timing,
    )


def _errata(args, out):
    """(errata, warning line or None) for --cpu, as ptdump reports an unknown cpu."""
    from ptexport.pt.errata import NO_ERRATA, UnknownCpuError, errata_for_cpu, parse_cpu

    if not args.cpu or args.cpu == "none":
        return NO_ERRATA, None
    if args.cpu == "auto":
        fam, model, step = _host_cpu()
    else:
        fam, model, step = parse_cpu(args.cpu)
    try:
        return errata_for_cpu(fam, model, step), None
    except UnknownCpuError:
        return NO_ERRATA, "[0: failed to determine errata: unknown cpu]"


def _host_cpu() -> tuple[int, int, int]:
    fam = model = step = 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k == "cpu family":
                    fam = int(v)
                elif k == "model":
                    model = int(v)
                elif k == "stepping":
                    step = int(v)
                elif not line.strip() and fam:
                    break
    except OSError as e:
        raise UsageError(f"--cpu auto: cannot read /proc/cpuinfo: {e}") from e
    return fam, model, step


_SB_NAME = re.compile(r"(sample-type|time-zero|time-shift|time-mult)=(0x[0-9a-fA-F]+|\d+)")


def _pevent_config(path: str, args):
    from ptexport.pt.pevent import PeventConfig

    vals = {k: int(v, 0) for k, v in _SB_NAME.findall(os.path.basename(path))}
    def pick(opt, key, default):
        v = getattr(args, opt)
        if v is not None:
            return v
        return vals.get(key, default)
    return PeventConfig(
        sample_type=pick("pevent_sample_type", "sample-type", 0),
        time_zero=pick("pevent_time_zero", "time-zero", 0),
        time_shift=pick("pevent_time_shift", "time-shift", 0),
        time_mult=pick("pevent_time_mult", "time-mult", 1),
    )


def _sideband(args):
    files = [(p, True) for p in args.pevent_primary] + [(p, False) for p in args.pevent_secondary]
    if not files:
        return None
    from ptexport.pt.pevent import SidebandPrinter, load_pevent

    streams = []
    for path, primary in files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", source=path) from e
        streams.append(load_pevent(data, _pevent_config(path, args), path, primary))
    printer = SidebandPrinter(
        streams,
        verbose=args.sb_verbose,
        compact=args.sb_compact or not args.sb_verbose,
        show_filename=args.sb_filename,
        show_offset=args.sb_offset,
        show_time=args.sb_time,
        warn=args.sb_warn,
        enabled=not args.quiet,
    )
    return printer


def _split_range(arg: str) -> tuple[str, int, int | None]:
    """ptdump's ``FILE[:FROM[-TO]]`` (a suffix that does not parse belongs to the name)."""
    name, sep, rng = arg.rpartition(":")
    if not sep or os.path.exists(arg):
        return arg, 0, None
    a, dash, b = rng.partition("-")
    try:
        begin = int(a, 0)
        end = int(b, 0) if dash else None
    except ValueError:
        return arg, 0, None
    if end is not None and end <= begin:
        raise UsageError(f"bad range {rng!r} in {arg}")
    return name, begin, end


def _load_raw(arg: str) -> bytes:
    path, begin, end = _split_range(arg)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=path) from e
    if begin or end is not None:
        if begin >= len(data) or (end is not None and end > len(data)):
            raise InputError(f"range {begin:#x}-{(end or len(data)):#x} is outside the file "
                             f"({len(data):#x} bytes)", source=path)
        data = data[begin:end]
    return data


def run(args, out) -> int:
    from ptexport.raw.ptdump import ptdump_lines

    errata, warning = _errata(args, out)
    opts = _options(args, errata)
    if args.raw:
        data = _load_raw(args.trace)
        if warning:
            print(warning, file=out)
        sb = _sideband(args)
        sb_fn = sb.lines_until if sb is not None else None
        if sb is not None:
            opts.track_time = True
        for line in ptdump_lines(data, opts, source=args.trace, sideband=sb_fn):
            print(line, file=out)
        return 0
    return _run_perf_data(args, opts, warning, out)


def _perf_errata(args, pd):
    """Errata for the recording's CPU (the CPUID feature: 'GenuineIntel,F,M,S') unless --cpu says."""
    from ptexport.pt.errata import errata_from_cpuid

    if args.cpu:
        return None
    return errata_from_cpuid(str(pd.features.get("cpuid") or ""))


def _perf_timing(args, pd, errata):
    """Timing configuration from AUXTRACE_INFO and the intel_pt attr (command-line values win)."""
    from ptexport.pt.time import TimingConfig

    info = pd.auxtrace_info
    mtc_freq, eax, ebx, nom = args.mtc_freq, args.cpuid_eax, args.cpuid_ebx, args.nom_freq
    if info is not None and hasattr(info, "tsc_ctc_ratio_n"):
        if not ebx and info.tsc_ctc_ratio_n:
            ebx = info.tsc_ctc_ratio_n
        if not eax and info.tsc_ctc_ratio_d:
            eax = info.tsc_ctc_ratio_d
        if not nom and info.max_non_turbo_ratio:
            nom = info.max_non_turbo_ratio
        if not mtc_freq:
            for attr in pd.attrs:
                if attr.type == info.pmu_type:
                    mtc_freq = info.config_terms(attr.config).get("mtc_period", 0)
                    break
    return TimingConfig(mtc_freq=mtc_freq, nom_freq=nom, cpuid_0x15_eax=eax,
                        cpuid_0x15_ebx=ebx, skl168=errata.skl168)


def _run_perf_data(args, opts, warning, out) -> int:
    """perf.data: one ptdump per AUXTRACE buffer (offsets within the buffer, as perf script -D)."""
    import dataclasses

    from ptexport.perfdata import AuxtraceRecord, open_perf_data
    from ptexport.raw.ptdump import ptdump_lines

    if args.pevent_primary or args.pevent_secondary:
        raise UsageError("--pevent sideband files go with --raw; perf.data carries its own")
    with open_perf_data(args.trace) as pd:
        errata = _perf_errata(args, pd)
        if errata is not None:
            opts = dataclasses.replace(opts, errata=errata)
        opts = dataclasses.replace(opts, timing=_perf_timing(args, pd, opts.errata),
                                   report_eos=True)
        if warning:
            print(warning, file=out)
        if args.per_cpu:
            if args.perf_time:
                raise UsageError("--perf-time goes with buffer-by-buffer dumps (no --per-cpu)")
            _dump_per_cpu(pd, opts, out)
            return 0
        for rec in pd.records():
            if not isinstance(rec, AuxtraceRecord):
                continue
            data = pd.aux_data(rec)
            print(f"# aux cpu {rec.cpu} idx {rec.idx} tid {rec.tid} aux_offset {rec.aux_offset:#x}"
                  f" size {rec.size:#x} (file offset {rec.data_offset:#x})", file=out)
            if args.perf_time:
                t = opts.timing
                opts = dataclasses.replace(opts, perf_time=(t.cpuid_0x15_ebx, t.cpuid_0x15_eax,
                                                            t.mtc_freq, rec.reference))
            for line in ptdump_lines(data, opts, source=f"aux cpu {rec.cpu}"):
                print(line, file=out)
    return 0


def _dump_per_cpu(pd, opts, out) -> None:
    from ptexport.perfdata import AuxtraceRecord
    from ptexport.raw.ptdump import ptdump_lines

    streams: dict[int, list] = {}
    for rec in pd.records():
        if isinstance(rec, AuxtraceRecord):
            streams.setdefault(rec.cpu, []).append(rec)
    for cpu, recs in streams.items():
        chunks = [bytes(pd.aux_data(r)) for r in recs]
        data = b"".join(chunks)
        print(f"# aux cpu {cpu}: {len(recs)} buffer(s), {len(data):#x} bytes", file=out)
        pos = 0
        for r, c in zip(recs, chunks):
            print(f"#   idx {r.idx} aux_offset {r.aux_offset:#x} size {len(c):#x}"
                  f" at stream offset {pos:#x}", file=out)
            pos += len(c)
        for line in ptdump_lines(data, opts, source=f"aux cpu {cpu}"):
            print(line, file=out)
