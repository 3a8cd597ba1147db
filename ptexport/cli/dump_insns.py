"""``ptexport dump insns``: the instruction flow in libipt ptxed's format.

Raw dumps, like ptxed::

    ptexport dump insns --raw trace.pt --image code.bin:0x1000 [--cpu 6/142] [--event:ip] ...

``--image FILE:ADDR`` may repeat: an ELF file is loaded by its PT_LOAD
segments with ADDR as its base (ptxed ``--elf``), any other file as raw bytes
at ADDR (ptxed ``--raw``); ``FILE:OFFSET:ADDR`` maps the file from OFFSET.
The ptxed options the libipt tests use are accepted under ptxed's names.

Raw mode walks the plain TNT/TIP stretches of a trace in a compiled kernel
(:mod:`ptexport.raw.insn_compiled`) once the trace is big enough for that to pay
(:mod:`ptexport.raw.backend`); the output is the reference decoder's
line for line.  ``--reference`` (or ``PTEXPORT_RAW_REFERENCE=1``) decodes with
the reference alone, ``PTEXPORT_RAW_COMPILED=1`` compiled from the start.
"""

from __future__ import annotations

import argparse

from ptexport.errors import InputError, UsageError

NAME = "insns"
HELP = "print the instruction flow (ptxed format)"


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def add_arguments(parser) -> None:
    parser.add_argument("perf_data", nargs="?", help="perf.data file (not with --raw)")
    parser.add_argument("--symfs", help="root of a copy of the traced system's files")
    parser.add_argument("--buildid-dir", dest="buildid_dir", help="build-id cache (~/.debug)")
    parser.add_argument("--kcore", help="perf record --kcore directory (kcore, kallsyms)")
    parser.add_argument("--vmlinux", help="vmlinux for kernel code")
    parser.add_argument("--kallsyms", help="kallsyms for the vmlinux KASLR offset")
    parser.add_argument("--guest-kcore", dest="guest_kcore",
                        help="kcore directory of the guest (code run in VMX non-root mode)")
    parser.add_argument("--guest-vmlinux", dest="guest_vmlinux", help="vmlinux of the guest")
    parser.add_argument("--guest-kallsyms", dest="guest_kallsyms", help="kallsyms of the guest")
    parser.add_argument("--kernel-start", dest="kernel_start", type=_int,
                        default=0xFFFF800000000000,
                        help="lowest kernel address (perf.data input; default %(default)#x)")
    parser.add_argument("--raw", metavar="FILE.pt", help="raw Intel PT trace file")
    parser.add_argument("--image", metavar="FILE[:OFFSET]:ADDR", action="append", default=[],
                        help="code image: ELF by segments at base ADDR, else raw bytes at ADDR")
    parser.add_argument("--cpu", metavar="F/M[/S]", help="CPU family/model[/stepping] for errata")
    parser.add_argument("--quiet", "-q", action="store_true", help="print only errors and stats")
    parser.add_argument("--stat", action="store_true", help="print instruction (block) counts")
    parser.add_argument("--stat:insn", dest="stat_insn", action="store_true")
    parser.add_argument("--stat:blocks", dest="stat_blocks", action="store_true")
    parser.add_argument("--event:ip", dest="event_ip", action="store_true")
    parser.add_argument("--event:time", dest="event_time", action="store_true")
    parser.add_argument("--event:tick", dest="event_tick", action="store_true")
    parser.add_argument("--event:iflags", dest="event_iflags", action="store_true")
    parser.add_argument("--resync-on-error", dest="resync_on_error", action="store_true")
    parser.add_argument("--block-decoder", dest="block_decoder", action="store_true")
    parser.add_argument("--insn-decoder", dest="insn_decoder", action="store_true")
    parser.add_argument("--block:show-blocks", dest="show_blocks", action="store_true")
    parser.add_argument("--block:end-on-call", dest="end_on_call", action="store_true")
    parser.add_argument("--block:end-on-jump", dest="end_on_jump", action="store_true")
    parser.add_argument("--offset", dest="print_offset", action="store_true")
    parser.add_argument("--reference", action="store_true",
                        help="raw mode: decode with the reference (pure Python) walker only; "
                             "also PTEXPORT_RAW_REFERENCE=1")
    for n in range(4):
        parser.add_argument(f"--filter:addr{n}_cfg", dest=f"addr{n}_cfg", type=_int, default=0)
        parser.add_argument(f"--filter:addr{n}_a", dest=f"addr{n}_a", type=_int, default=0)
        parser.add_argument(f"--filter:addr{n}_b", dest=f"addr{n}_b", type=_int, default=0)
    # Timing configuration (libipt's pt_config timing fields).
    parser.add_argument("--nom-freq", type=_int)
    parser.add_argument("--mtc-freq", type=_int)
    parser.add_argument("--cpuid-0x15.eax", dest="cpuid_15_eax", type=_int)
    parser.add_argument("--cpuid-0x15.ebx", dest="cpuid_15_ebx", type=_int)
    parser.add_argument("--insn:keep-tcal-on-ovf", dest="keep_tcal", action="store_true")
    parser.add_argument("--block:keep-tcal-on-ovf", dest="keep_tcal", action="store_true")
    # perf_event sideband (ptxed's --pevent:* and --sb:* options).
    parser.add_argument("--pevent:primary", "--pevent", dest="pevent_primary", action="append",
                        default=[], metavar="FILE", help="primary perf_event sideband file")
    parser.add_argument("--pevent:secondary", dest="pevent_secondary", action="append",
                        default=[], metavar="FILE")
    parser.add_argument("--pevent:sample-type", dest="pevent_sample_type", type=_int)
    parser.add_argument("--pevent:time-zero", dest="pevent_time_zero", type=_int)
    parser.add_argument("--pevent:time-shift", dest="pevent_time_shift", type=_int)
    parser.add_argument("--pevent:time-mult", dest="pevent_time_mult", type=_int)
    parser.add_argument("--pevent:kernel-start", dest="pevent_kernel_start", type=_int)
    parser.add_argument("--pevent:sysroot", dest="pevent_sysroot")
    parser.add_argument("--sb:compact", "--sb", dest="sb_compact", action="store_true")
    parser.add_argument("--sb:verbose", dest="sb_verbose", action="store_true")
    parser.add_argument("--sb:filename", dest="sb_filename", action="store_true")
    parser.add_argument("--sb:offset", dest="sb_offset", action="store_true")
    parser.add_argument("--sb:time", dest="sb_time", action="store_true")
    parser.add_argument("--sb:switch", dest="sb_switch", action="store_true")
    parser.add_argument("--sb:warn", dest="sb_warn", action="store_true")


def _parse_image(spec: str):
    parts = spec.rsplit(":", 2)
    try:
        if len(parts) == 3:
            return parts[0], int(parts[1], 0), int(parts[2], 0)
        if len(parts) == 2:
            return parts[0], None, int(parts[1], 0)
    except ValueError:
        pass
    raise UsageError(f"--image: expected FILE[:OFFSET]:ADDR, got {spec!r}")


def build(args):
    """(InsnDecoder, PtxedOptions, warnings) for ``args`` (raw mode)."""
    from ptexport.raw.insn import InsnDecoder
    from ptexport.raw.query import DecoderConfig
    from ptexport.images.image import Image
    from ptexport.pt.errata import NO_ERRATA, UnknownCpuError, errata_for_cpu, parse_cpu

    warnings = []
    errata = NO_ERRATA
    if args.cpu:
        fam, model, step = parse_cpu(args.cpu)
        try:
            errata = errata_for_cpu(fam, model, step)
        except UnknownCpuError:
            warnings.append("[0, 0: config error: unknown cpu]")
    image = Image("raw")
    for spec in args.image:
        path, off, addr = _parse_image(spec)
        if off is None:
            image.add_file(path, addr)
        else:
            image.add_raw(path, addr, offset=off)
    try:
        with open(args.raw, "rb") as f:
            buf = f.read()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=args.raw) from e
    filters = [(getattr(args, f"addr{n}_cfg"), getattr(args, f"addr{n}_a"),
                getattr(args, f"addr{n}_b")) for n in range(4)]
    filters = [f for f in filters if f[0]]
    from ptexport.pt.time import TimingConfig

    timing = TimingConfig(mtc_freq=args.mtc_freq or 0, nom_freq=args.nom_freq or 0,
                          cpuid_0x15_eax=args.cpuid_15_eax or 0,
                          cpuid_0x15_ebx=args.cpuid_15_ebx or 0,
                          skl168=bool(getattr(errata, "skl168", False)))
    config = DecoderConfig(errata, keep_tcal_on_ovf=args.keep_tcal, timing=timing,
                           enable_iflags_events=args.event_iflags,
                           enable_tick_events=args.event_tick, addr_filter=filters,
                           source=args.raw)
    dec = InsnDecoder(buf, image, config)
    return dec, _options(args), warnings


def _session(args):
    """The pevent sideband session for ``args``, or None."""
    import os

    from ptexport.cli.dump_packets import _pevent_config
    from ptexport.raw.pevent_session import PeventSession
    from ptexport.pt.pevent import SidebandPrinter, load_pevent

    files = [(p, True) for p in args.pevent_primary] + [(p, False) for p in args.pevent_secondary]
    if not files:
        return None
    records = []
    for path, primary in files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", source=path) from e
        records.extend(load_pevent(data, _pevent_config(path, args), path, primary))
    printer = SidebandPrinter([], verbose=args.sb_verbose,
                              compact=args.sb_compact or not args.sb_verbose,
                              show_filename=args.sb_filename, show_offset=args.sb_offset,
                              show_time=args.sb_time, warn=args.sb_warn,
                              enabled=not args.quiet and (args.sb_compact or args.sb_verbose))
    root = args.pevent_sysroot or os.path.dirname(os.path.abspath(files[0][0]))
    return PeventSession(records, printer, kernel_start=args.pevent_kernel_start, root=root,
                         show_switch=args.sb_switch)


class _SbRec:
    """A perf.data sideband record in the shape the pevent session applies."""

    __slots__ = ("type", "misc", "tsc", "fields", "sample", "filename", "offset")

    def __init__(self, rec, tsc, fields, sample, filename):
        self.type = rec.type
        self.misc = rec.misc
        self.tsc = tsc
        self.fields = fields
        self.sample = sample
        self.filename = filename
        self.offset = rec.offset


def _perf_streams(args, opts_factory):
    """Yield (label, InsnDecoder, PeventSession) per AUX queue of a perf.data file."""
    import os

    from ptexport.raw.insn import InsnDecoder
    from ptexport.raw.pevent_session import PeventSession
    from ptexport.images.image import Image
    from ptexport.images.lookup import ObjectFinder
    from ptexport.images.section import SectionCache
    from ptexport.perfdata import open_perf_data

    path = args.perf_data
    base = os.path.dirname(os.path.abspath(path))
    finder = ObjectFinder(symfs=args.symfs, buildid_dir=args.buildid_dir,
                          kcore_dir=args.kcore, vmlinux=args.vmlinux, kallsyms=args.kallsyms)
    with open_perf_data(path) as pd:
        tc = pd.time_conv
        to_tsc = (lambda t: tc.perf_time_to_tsc(t)) if tc is not None else (lambda t: t)
        build_ids = {}
        for entry in (pd.features.get("build_id") or []):
            if hasattr(entry, "filename"):
                bid = bytes(entry.build_id)
                if len(bid) > 20 and not any(bid[20:]):
                    bid = bid[:20]          # perf pads SHA-1 build-ids to 24 bytes
                build_ids[entry.filename] = bid.hex() or None

        def resolve(name):
            found = finder.find(name, build_ids.get(name))
            if found is None and not os.path.isabs(name):
                cand = os.path.join(base, name)
                found = cand if os.path.isfile(cand) else None
            return found

        cpuid = pd.features.get("cpuid")          # "GenuineIntel,6,142,10"
        global_recs = []
        cpu_recs: dict = {}
        aux: dict = {}
        for rec in pd.records():
            sid = rec.sample_id
            t = rec.type
            time = sid.time if sid is not None and sid.time is not None else 0
            cpu = sid.cpu if sid is not None else None
            sample = [("pid", sid.pid), ("tid", sid.tid)] if sid is not None and sid.pid is not None else []
            if t in (1, 10):
                fields = [("pid", rec.pid), ("tid", rec.tid), ("addr", rec.addr), ("len", rec.len),
                          ("pgoff", rec.pgoff), ("filename", rec.filename)]
                global_recs.append(_SbRec(rec, to_tsc(time), fields, sample, path))
            elif t == 3:
                global_recs.append(_SbRec(rec, to_tsc(time), [("pid", rec.pid), ("tid", rec.tid)],
                                          sample, path))
            elif t in (4, 7):
                global_recs.append(_SbRec(rec, to_tsc(time), [("pid", rec.pid), ("ppid", rec.ppid),
                                                              ("tid", rec.tid), ("ptid", rec.ptid)],
                                          sample, path))
            elif t == 12:
                cpu_recs.setdefault(cpu, []).append(
                    _SbRec(rec, to_tsc(time), [("pid", rec.pid), ("tid", rec.tid)], sample, path))
            elif t in (14, 15):
                fields = []
                if t == 15:
                    fields = [("next pid" if rec.out else "prev pid", rec.next_prev_pid)]
                cpu_recs.setdefault(cpu, []).append(_SbRec(rec, to_tsc(time), fields, sample, path))
            elif t == 71:  # AUXTRACE
                key = rec.cpu if rec.cpu is not None and rec.cpu >= 0 else ("tid", rec.tid)
                aux.setdefault(key, []).append(bytes(pd.aux_data(rec)))
        cache = SectionCache()
        select = None
        if args.guest_kcore or args.guest_vmlinux:
            guest = ObjectFinder(kcore_dir=args.guest_kcore, vmlinux=args.guest_vmlinux,
                                 kallsyms=args.guest_kallsyms).kernel_image(Image("guest", cache))

            def select(cr3, non_root, vmcs):
                return guest if non_root else None
        kernel = None
        if args.kcore or args.vmlinux:
            kernel = finder.kernel_image(Image("kernel", cache))
        for key in sorted(aux, key=str):
            buf = b"".join(aux[key])
            recs = global_recs + cpu_recs.get(key if not isinstance(key, tuple) else None, [])
            recs.sort(key=lambda r: (r.tsc, r.offset))
            session = PeventSession(recs, None, kernel_start=args.kernel_start, resolve=resolve,
                                    cache=cache)
            if kernel is not None:
                session.set_kernel(kernel)
            label = f"cpu {key}" if not isinstance(key, tuple) else f"tid {key[1]}"
            dec = InsnDecoder(buf, Image("none", cache), opts_factory(label, cpuid),
                              select_image=select)
            yield label, dec, session


def use_reference(args) -> bool:
    """Raw mode on the reference walker only (``--reference`` or PTEXPORT_RAW_REFERENCE=1)?"""
    import os

    return bool(getattr(args, "reference", False)) or os.environ.get("PTEXPORT_RAW_REFERENCE", "") not in ("", "0")


def run(args, out) -> int:
    from ptexport.raw.ptxed import ptxed_lines
    from ptexport.raw.backend import compiled_walker

    if not args.raw:
        if not args.perf_data:
            raise UsageError("dump insns: give a perf.data file, or --raw FILE.pt --image FILE:ADDR")
        return _run_perf(args, out)
    dec, opts, warnings = build(args)
    for line in warnings:
        out.write(line + "\n")
    write = out.write
    session = _session(args)
    sideband = session.on_event if session is not None else None
    fast = None if use_reference(args) else compiled_walker(dec, opts, dec.query.evdec.buf,
                                                                   sideband=session is not None)
    for line in ptxed_lines(dec, opts, sideband, fast=fast):
        write(line + "\n")
    return 0


def _run_perf(args, out) -> int:
    """The libipt-style flow of each AUX queue of a perf.data file, one after the other."""
    from ptexport.raw.ptxed import ptxed_lines
    from ptexport.raw.query import DecoderConfig
    from ptexport.pt.errata import NO_ERRATA, UnknownCpuError, errata_for_cpu, parse_cpu

    errata_memo: dict = {}

    def errata_for(cpuid):
        """--cpu, else the recording's CPUID feature (as perf uses it)."""
        spec = args.cpu
        if not spec and isinstance(cpuid, str):
            parts = cpuid.split(",")
            if len(parts) >= 3 and parts[0] == "GenuineIntel":
                spec = "/".join(parts[1:4])
        if spec not in errata_memo:
            try:
                errata_memo[spec] = errata_for_cpu(*parse_cpu(spec)) if spec else NO_ERRATA
            except (UnknownCpuError, UsageError):
                out.write("[0, 0: config error: unknown cpu]\n")
                errata_memo[spec] = NO_ERRATA
        return errata_memo[spec]

    opts = _options(args)
    # perf's recovery: after an error, go on at the next IP the trace gives, with
    # an empty return stack (not at the next PSB as ptxed does).
    opts.resync_on_error = True

    def config(label, cpuid=None):
        return DecoderConfig(errata_for(cpuid), enable_iflags_events=args.event_iflags,
                             enable_tick_events=args.event_tick, source=f"{args.perf_data} {label}")

    write = out.write
    for label, dec, session in _perf_streams(args, config):
        write(f"[{label}]\n")
        for line in ptxed_lines(dec, opts, session.on_event):
            write(line + "\n")
    return 0


def _options(args):
    """ptxed's output options from ``args``."""
    from ptexport.raw.ptxed import PtxedOptions

    return PtxedOptions(
        quiet=args.quiet, stat=args.stat, stat_insn=args.stat_insn,
        stat_blocks=args.stat_blocks, event_ip=args.event_ip, event_time=args.event_time,
        event_tick=args.event_tick, event_iflags=args.event_iflags,
        resync_on_error=args.resync_on_error, block_decoder=args.block_decoder,
        show_blocks=args.show_blocks, end_on_call=args.end_on_call,
        end_on_jump=args.end_on_jump, print_offset=args.print_offset)
