"""Sample-trace generator: real programs emulated, encoded as Intel PT, written as perf.data.

Public API::

    from ptexport.synth.generate import SynthOptions, synthesize
    res = synthesize("out", SynthOptions(program="calls", branches=1_000_000, cpus=2))
    # out/perf.data, out/<ELFs>, out/truth.npz, out/truth.json[, out/truth_insns.npz]

    from ptexport.synth.verify import load_truth, perf_script, parse_branches, compare_branches

Modules, bottom up:

    emulate    run a static x86-64 program in unicorn: threads (clone), fork, execve,
               PTWRITE; the result is per-thread *slices* of blocks cut at system calls
    blocks     capstone: what each block ends with (jcc, jmp, call, ret, syscall...)
    ptencode   Intel PT packet encoder (PacketWriter): IP compression, TNT, timing, events
    model      ground-truth kinds, the recording's constants (TSC, time conversion), SynthOptions
    engine     scheduling on CPUs, per-CPU (or per-thread) encoding, ground truth
    perfwrite  perf.data writer (file and pipe mode): attrs, records, feature sections
    sideband   the records perf record writes around the PT data, kcore_dir, the file layout
    faults     corrupted bytes and truncated AUX areas at known offsets
    replay     large traces: one program round encoded once and copied (timing patched)
    generate   synthesize(): the one entry point, over all of the above
    verify     run perf script / perf report -D and compare with the ground truth
    vm, vm_code, vm_verify   host + guest traces (VMCS/PIP, guest sideband)

Each module imports only those listed above it (no circles).

Ground truth (truth.npz): one row per branch perf reports with ``--itrace=b``:
``time`` (perf ns: for a branch that makes no packet, the time of the packet before
it, which is all perf can know), ``exec_time`` (when it ran), ``tsc``, ``cpu``,
``tid``, ``from_ip``, ``to_ip``, ``kind`` (index into ``model.KIND_NAMES``, the
flags text perf prints); ``ev_*`` arrays for PTWRITE and power events.  A replayed
trace stores ``head_*``/``unit_*``/``tail_*`` parts; ``verify.load_truth`` expands them.
"""
