"""The sideband and file layout of a generated recording: what ``perf record -e intel_pt//u``
would have written around the PT data.

Records are collected with a sort key (perf time, then order of creation)
and written time-ordered with FINISHED_ROUND records in between; the PT
streams go in AUXTRACE records split at PSB boundaries, each followed by
the AUX record the kernel would have emitted for that part of the buffer.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ptexport.errors import SynthError
from ptexport.perfdata.constants import (
    PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_SWITCH_OUT, PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    PERF_RECORD_MISC_USER, AttrFlag,
    AuxFlag,
    AttrType, Feature, IntelPTConfig, RecordType, SampleType, SoftwareEvent,
)
from ptexport.synth import model as G
from ptexport.synth.model import SynthOptions
from ptexport.synth.engine import Placed
from ptexport.synth.perfwrite import (
    Attr, PerfDataWriter, attr_flags, aux_body, auxtrace_info_record, build_id_record, comm_body,
    feat_cmdline, feat_event_desc, feat_nrcpus, feat_pmu_mappings, feat_string, feat_u64,
    finished_round, itrace_start_body, mmap2_body, record, sample_id, switch_cpu_wide_body,
    task_body, time_conv_record,
)

SAMPLE_TYPE = (SampleType.IP | SampleType.TID | SampleType.TIME | SampleType.CPU
               | SampleType.IDENTIFIER)
AUX_CHUNK = 64 * 1024
CPUID = "GenuineIntel,6,142,10"


def pt_config(opts) -> int:
    c = (1 << IntelPTConfig.PT) | (1 << IntelPTConfig.BRANCH) | (1 << IntelPTConfig.TSC)
    if opts.timing in ("mtc", "cyc"):
        c |= (1 << IntelPTConfig.MTC) | (opts.mtc_period << IntelPTConfig.MTC_PERIOD)
    if opts.timing == "cyc":
        c |= 1 << IntelPTConfig.CYC
        c |= getattr(opts, "cyc_thresh", 0) << IntelPTConfig.CYC_THRESH
    if not opts.retcomp:
        c |= 1 << IntelPTConfig.NORETCOMP
    if opts.ptwrite != "off":
        c |= 1 << IntelPTConfig.PTW
    if opts.ptwrite == "fup":
        c |= 1 << IntelPTConfig.FUP_ON_PTW
    if opts.power:
        c |= 1 << IntelPTConfig.PWR_EVT
    if getattr(opts, "event_trace", False):
        c |= 1 << IntelPTConfig.EVENT  # event_trace (perf's INTEL_PT_CFG_EVT_EN)
    psb = max(0, min(15, opts.psb_period.bit_length() - 12))
    c |= psb << IntelPTConfig.PSB_PERIOD
    return c


def sample_type_for(opts) -> int:
    # perf record --per-thread does not sample the CPU
    return SAMPLE_TYPE & ~SampleType.CPU if opts.per_thread else SAMPLE_TYPE


def make_attrs(opts, nstreams: int) -> tuple[Attr, Attr]:
    ncpu = nstreams
    st = sample_type_for(opts)
    pt = Attr(type=G.PMU_TYPE, config=pt_config(opts), sample_type=st,
              flags=attr_flags(AttrFlag.DISABLED, AttrFlag.INHERIT, AttrFlag.EXCLUDE_KERNEL,
                               AttrFlag.EXCLUDE_HV, AttrFlag.ENABLE_ON_EXEC,
                               AttrFlag.SAMPLE_ID_ALL),
              name="intel_pt//u", ids=[100 + c for c in range(ncpu)], aux_watermark=0x100000)
    dummy = Attr(type=AttrType.SOFTWARE, config=SoftwareEvent.DUMMY, sample_type=st,
                 flags=attr_flags(AttrFlag.DISABLED, AttrFlag.INHERIT, AttrFlag.EXCLUDE_KERNEL,
                                  AttrFlag.EXCLUDE_HV, AttrFlag.MMAP, AttrFlag.COMM,
                                  AttrFlag.ENABLE_ON_EXEC, AttrFlag.TASK,
                                  AttrFlag.SAMPLE_ID_ALL, AttrFlag.MMAP2, AttrFlag.COMM_EXEC,
                                  *(() if opts.per_thread else (AttrFlag.CONTEXT_SWITCH,))),
                 name="dummy:u", ids=[200 + c for c in range(ncpu)])
    return pt, dummy


def auxtrace_priv(opts, pt: Attr) -> list[int]:
    priv = [0] * 17
    priv[0] = G.PMU_TYPE
    priv[1], priv[2], priv[3] = G.TIME_SHIFT, G.TIME_MULT, G.TIME_ZERO
    priv[4] = 1                                   # cap_user_time_zero
    priv[5] = 1 << IntelPTConfig.TSC
    priv[6] = 1 << IntelPTConfig.NORETCOMP
    priv[7] = 0 if opts.per_thread else 3         # context switch events, CPU wide
    priv[8] = 0                                   # not snapshot mode
    priv[9] = 0 if opts.per_thread else 1         # per-CPU mmaps
    priv[10] = 1 << IntelPTConfig.MTC
    priv[11] = 0xF << IntelPTConfig.MTC_PERIOD
    priv[12], priv[13] = G.TSC_CTC_N, G.TSC_CTC_D
    priv[14] = 1 << IntelPTConfig.CYC
    priv[15] = G.MAX_NONTURBO_RATIO
    priv[16] = 0                                  # no address filter
    if getattr(opts, "event_trace", False):
        priv.append(1)                            # cap_event_trace (perf >= 5.18: after the filter)
    return priv


class _Records:
    def __init__(self, pt: Attr, dummy: Attr, stream_of) -> None:
        self.items: list[tuple[int, int, bytes]] = []
        self.pt = pt
        self.dummy = dummy
        self.n = 0
        self.stream_of = stream_of     # (cpu, tid) -> index of the event instance

    def add(self, tsc: int, rtype: int, misc: int, body: bytes, *, pid: int, tid: int, cpu: int,
            pt_event: bool = False) -> None:
        ns = G.tsc_to_ns(tsc)
        ident = (self.pt if pt_event else self.dummy).ids[self.stream_of(cpu, tid)]
        data = record(rtype, misc, body + sample_id(self.pt.sample_type, pid, tid, ns, cpu, ident))
        self.items.append((ns, self.n, data))
        self.n += 1

    def add_raw(self, tsc: int, data) -> None:
        self.items.append((G.tsc_to_ns(tsc), self.n, data))
        self.n += 1


def write_perf_data(path: Path, opts, emu, placed, encoders, elf_names: dict[int, str]) -> None:
    if opts.per_thread:
        tids = sorted(emu.threads)
        index = {t: i for i, t in enumerate(tids)}
        pt, dummy = make_attrs(opts, len(tids))
        recs = _Records(pt, dummy, lambda cpu, tid: index.get(tid, 0))
    else:
        pt, dummy = make_attrs(opts, opts.cpus)
        recs = _Records(pt, dummy, lambda cpu, tid: cpu)
    first = min(p.start for p in placed)
    t0 = first - 5000
    main_tid = min(emu.threads)
    main = emu.threads[main_tid]

    def maps_for(prog, pid, tid, t, cpu):
        # the executable's code, then its shared libraries' (as ld.so maps them before the start)
        for image in prog.images():
            for seg in image.exec_segments():
                start = seg.vaddr & ~0xFFF
                end = (seg.vaddr + seg.memsz + 0xFFF) & ~0xFFF
                recs.add(t, RecordType.MMAP2, PERF_RECORD_MISC_USER,
                         mmap2_body(pid, tid, start, end - start, seg.offset - (seg.vaddr - start),
                                    elf_names[id(image)], ino=1000 + emu.programs.index(image)),
                         pid=pid, tid=tid, cpu=cpu)

    first_cpu = next(p.cpu for p in sorted(placed, key=lambda p: p.start) if p.sl.tid == main_tid)
    recs.add(t0, RecordType.COMM, PERF_RECORD_MISC_COMM_EXEC, comm_body(main.pid, main.tid,
             main.comm), pid=main.pid, tid=main.tid, cpu=first_cpu)
    maps_for(main.program, main.pid, main.tid, t0 + 100, first_cpu)

    # thread creation, exec and exit, from the slices
    last_of: dict[int, Placed] = {}
    for p in placed:
        sl = p.sl
        last_of[sl.tid] = p
        if sl.new_tid is not None:
            child = emu.threads[sl.new_tid]
            recs.add(p.end + 10, RecordType.FORK, 0,
                     task_body(child.pid, child.ppid if child.forked else child.pid, child.tid,
                               child.ptid, G.tsc_to_ns(p.end + 10)),
                     pid=child.pid, tid=child.tid, cpu=p.cpu)
        if sl.exec_program is not None:
            info = emu.threads[sl.tid]
            recs.add(p.end + 20, RecordType.COMM, PERF_RECORD_MISC_COMM_EXEC,
                     comm_body(sl.pid, sl.tid, sl.exec_program.name[:15]),
                     pid=sl.pid, tid=sl.tid, cpu=p.cpu)
            maps_for(sl.exec_program, sl.pid, sl.tid, p.end + 30, p.cpu)
    for tid, p in last_of.items():
        info = emu.threads[tid]
        if p.sl.resume_ip is None:
            recs.add(p.end + 50, RecordType.EXIT, 0,
                     task_body(info.pid, info.ppid if info.forked or tid == info.pid else info.pid,
                               info.tid, info.ptid, G.tsc_to_ns(p.end + 50)),
                     pid=info.pid, tid=info.tid, cpu=p.cpu)

    # context switches and itrace_start, per CPU
    started: set[tuple[int, int]] = set()
    by_cpu: dict[int, list] = {}
    for p in placed:
        by_cpu.setdefault(p.cpu, []).append(p)
    for cpu, plist in by_cpu.items():
        if opts.per_thread:
            break
        plist.sort(key=lambda p: p.start)
        cur_pid, cur_tid = 0, 0
        prev_end = None
        preempted = False
        for p in plist:
            sl = p.sl
            if sl.tid != cur_tid:
                t_out = (prev_end + 100) if prev_end is not None else p.start - 300
                misc = PERF_RECORD_MISC_SWITCH_OUT
                if preempted:
                    misc |= PERF_RECORD_MISC_SWITCH_OUT_PREEMPT
                recs.add(t_out, RecordType.SWITCH_CPU_WIDE, misc,
                         switch_cpu_wide_body(sl.pid, sl.tid), pid=cur_pid, tid=cur_tid,
                         cpu=cpu)
                recs.add(p.start - 100, RecordType.SWITCH_CPU_WIDE, 0,
                         switch_cpu_wide_body(cur_pid, cur_tid), pid=sl.pid, tid=sl.tid, cpu=cpu)
                if (sl.tid, cpu) not in started:
                    started.add((sl.tid, cpu))
                    recs.add(p.start - 90, RecordType.ITRACE_START, 0,
                             itrace_start_body(sl.pid, sl.tid), pid=sl.pid, tid=sl.tid, cpu=cpu,
                             pt_event=True)
                cur_pid, cur_tid = sl.pid, sl.tid
            prev_end = p.end
            preempted = sl.sysno == -1
        if opts.workload and prev_end is not None:
            # the workload done, the CPU goes idle (after its threads' EXIT): perf's current thread on it
            # at the end is the idle task, not the workload's
            recs.add(prev_end + 100, RecordType.SWITCH_CPU_WIDE, PERF_RECORD_MISC_SWITCH_OUT,
                     switch_cpu_wide_body(0, 0), pid=cur_pid, tid=cur_tid, cpu=cpu)
            recs.add(prev_end + 150, RecordType.SWITCH_CPU_WIDE, 0,
                     switch_cpu_wide_body(cur_pid, cur_tid), pid=0, tid=0, cpu=cpu)

    if opts.per_thread:
        for tid, info in sorted(emu.threads.items()):
            p0 = min((p for p in placed if p.sl.tid == tid), key=lambda p: p.start)
            recs.add(p0.start - 90, RecordType.ITRACE_START, 0, itrace_start_body(info.pid, tid),
                     pid=info.pid, tid=tid, cpu=p0.cpu, pt_event=True)

    # the PT data: per CPU (or per thread), split at PSBs into AUXTRACE chunks, each with its AUX record
    for enc in encoders:
        buf = enc.w.buf
        if not buf:
            continue
        cpu = enc.cpu
        trunc = dict(enc.truncated_at)
        bounds = {o: t for o, t in enc.psb_marks}
        bounds.update(trunc)
        bounds[len(buf)] = enc.end_time + 200
        cuts = sorted(bounds)
        start = 0
        k = 0
        while start < len(buf):
            # the chunk ends at the last boundary within AUX_CHUNK, or at a truncation
            k += 1
            while (k + 1 < len(cuts) and cuts[k] not in trunc
                   and cuts[k + 1] - start <= AUX_CHUNK):
                k += 1
            end = cuts[k]
            t_end = bounds[end]
            t_start = bounds[start]
            flags = AuxFlag.TRUNCATED if end in trunc else 0
            chunk = bytes(buf[start:end])
            # reference = the TSC when perf read the buffer
            if opts.per_thread:
                idx = tids.index(enc.tid)
                recs.add_raw(t_start, ("AUXTRACE", chunk, start, t_end + 100, idx, enc.tid, -1))
                pid = emu.threads[enc.tid].pid
                recs.add(t_end, RecordType.AUX, 0, aux_body(start, len(chunk), flags),
                         pid=pid, tid=enc.tid, cpu=0, pt_event=True)
            else:
                # perf record -a: tid -1; perf record -- PROGRAM: the workload's pid (its thread map's first)
                recs.add_raw(t_start, ("AUXTRACE", chunk, start, t_end + 100, cpu, main.pid if opts.workload else -1,
                                       cpu))
                recs.add(t_end, RecordType.AUX, 0, aux_body(start, len(chunk), flags),
                         pid=-1 & 0xFFFFFFFF, tid=-1 & 0xFFFFFFFF, cpu=cpu, pt_event=True)
            start = end

    features = {
        Feature.BUILD_ID: b"".join(build_id_record(-1, prog.build_id, elf_names[id(prog)])
                                   for prog in emu.programs if prog.build_id),
        Feature.HOSTNAME: feat_string("ptexport-synth"),
        Feature.OSRELEASE: feat_string("6.1.0-synth"),
        Feature.VERSION: feat_string("6.1.187"),
        Feature.ARCH: feat_string("x86_64"),
        Feature.NRCPUS: feat_nrcpus(max(opts.cpus, 1)),
        Feature.CPUDESC: feat_string("Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz"),
        Feature.CPUID: feat_string(CPUID),
        Feature.TOTAL_MEM: feat_u64(16 * 1024 * 1024),
        Feature.CMDLINE: feat_cmdline(["/usr/bin/perf", "record", "-e", "intel_pt//u", "--",
                                       elf_names[id(emu.programs[0])]]),
        Feature.EVENT_DESC: feat_event_desc([pt, dummy]),
        Feature.PMU_MAPPINGS: feat_pmu_mappings([(4, "cpu"), (1, "software"),
                                                 (2, "tracepoint"), (G.PMU_TYPE, "intel_pt")]),
    }

    recs.items.sort(key=lambda x: (x[0], x[1]))
    try:
        f = open(path, "wb")
    except OSError as e:
        raise SynthError(f"cannot write {path}: {e.strerror}") from e
    with f:
        if opts.pipe:
            # perf record -o -: attrs and features as records, no feature sections, no
            # AUXTRACE index (perf queues each AUXTRACE buffer as it reads it)
            pipe_feats = {k: v for k, v in features.items()
                          if k not in (Feature.BUILD_ID, Feature.AUXTRACE)}
            w = PerfDataWriter(f, [pt, dummy], pipe=True, features=pipe_feats)
            for prog in emu.programs:
                if prog.build_id:
                    w.write(build_id_record(-1, prog.build_id, elf_names[id(prog)]))
            # the end of the features (HEADER_LAST_FEATURE, as perf writes it)
            w.write(record(RecordType.HEADER_FEATURE, 0, struct.pack("<Q", Feature.PMU_CAPS + 1)))
            w.write(record(RecordType.FINISHED_INIT, 0, b""))
        else:
            w = PerfDataWriter(f, [pt, dummy])
        w.write(auxtrace_info_record(auxtrace_priv(opts, pt)))
        w.write(time_conv_record(G.TIME_SHIFT, G.TIME_MULT, G.TIME_ZERO))
        since_round = 0
        for _ns, _n, data in recs.items:
            if isinstance(data, tuple):
                _tag, chunk, off, ref, idx, tid, cpu = data
                w.write_auxtrace(chunk, offset=off, reference=ref, idx=idx, tid=tid, cpu=cpu)
            else:
                w.write(data)
            since_round += 1
            if since_round >= 200:
                w.write(finished_round())
                since_round = 0
        w.write(finished_round())
        w.close(features)


def write_kcore_dir(path: Path) -> None:
    """The ``kcore_dir`` of ``perf record --kcore``: kallsyms, modules and kcore.

    The generated traces are user space only, so these describe a tiny kernel
    that no sample falls in; perf only opens them to map kernel addresses.
    """
    import struct

    try:
        path.mkdir(parents=True, exist_ok=True)
        base = 0xFFFFFFFF81000000
        syms = [(base, "T", "_stext"), (base, "T", "_text"), (base + 0x1000, "T", "__switch_to"),
                (base + 0x2000, "T", "entry_SYSCALL_64"), (base + 0x100000, "T", "_etext")]
        (path / "kallsyms").write_text("".join(f"{a:016x} {t} {n}\n" for a, t, n in syms))
        (path / "modules").write_text("")
        # ELF64 core file with one PT_LOAD of zeroed "kernel text"
        text = b"\xcc" * 0x1000
        ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 4, 62, 1,
                           0, 64, 0, 0, 64, 56, 1, 64, 0, 0)
        phdr = struct.pack("<IIQQQQQQ", 1, 5, 64 + 56, base, 0, len(text), len(text), 0x1000)
        (path / "kcore").write_bytes(ehdr + phdr + text)
    except OSError as e:
        raise SynthError(f"cannot write {path}: {e.strerror}") from e


def perf_data_path(out_dir: Path, opts: SynthOptions) -> Path:
    """Where the recording goes: OUT/perf.data, or OUT/data with OUT/kcore_dir for --kcore."""
    if opts.kcore:
        write_kcore_dir(out_dir / "kcore_dir")
        return out_dir / "data"
    return out_dir / "perf.data"
