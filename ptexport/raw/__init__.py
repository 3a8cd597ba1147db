"""libipt-style decoders: ptdump and ptxed output of raw traces (``dump packets/insns --raw``).

perf's decoder (for perf.data exports) is :mod:`ptexport.decoder`; this package
follows libipt instead, line for line with its ptdump and ptxed.  The stack:

    from ptexport.raw.query import DecoderConfig
    from ptexport.raw.insn import InsnDecoder
    from ptexport.raw.ptxed import PtxedOptions, ptxed_lines

    dec = InsnDecoder(trace_bytes, image, DecoderConfig(errata))   # image: read(ip, n), generation
    for line in ptxed_lines(dec, PtxedOptions(event_ip=True)):      # libipt ptxed's output
        print(line)

    # or drive it yourself, libipt style:
    status = dec.sync_forward()                 # next PSB; FlowError(EOS) at the end
    while True:
        while status & EVENT_PENDING:
            ev, status = dec.take_event()       # Event: .type, .ip, payload fields
        ips = dec.next_run()                    # fast path: plain instructions up to a branch
        ip, size, iclass, speculative, status = dec.next()   # one instruction
    # errors: FlowError(code) with dec.offset; dec.resync() (next IP) or dec.sync_forward() (next PSB)

Layers (libipt's): ``evdecoder.EventDecoder`` (packets -> events, binding rules,
OVF/errata handling), ``query.QueryDecoder`` (TNT cache, indirect targets,
events), ``insn.InsnDecoder`` (code walk, return stack, event binding to
instructions), ``insn_class`` (capstone + opcode table, ``InsnCache`` =
instruction and basic-block cache), ``pevent_session`` (perf_event sideband
-> which process image is live), ``ptxed`` (text output), ``ptdump`` (packet
lines).  Errors and status flags are in ``status``; events and their queue in
``events``.  ``insn_compiled.Walker`` walks plain stretches compiled (the twin
of the reference's fast path, same output); ``backend`` says when it is used.
See docs/architecture.md.
"""
