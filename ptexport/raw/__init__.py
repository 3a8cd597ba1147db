"""Instruction flow: walking traced code over images, the block cache, ptxed-style output.

Two decoders live here.  ``perfmode`` (perf's state machine, for perf.data
exports) is documented in its module.  The libipt-style stack is:

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
-> which process image is live), ``ptxed`` (text output).  Errors and status
flags are in ``status``; events and their queue in ``events``.
"""
