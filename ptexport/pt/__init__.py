"""Intel PT packets: the packet decoders (libipt's and perf's view), timing, VM time.

Layers (libipt's, bottom up):

    packets     bytes -> Packet(offset, size, kind, p0, p1, p2); sync_forward; PacketDecoder;
                iter_packets (errors yielded, resync at the next PSB); decode_columns
    packets_compiled  the numba-compiled twin of packets (decode_columns; perf_timestamps)
    perfpkt     perf's tokenization of the same bytes (what perf's decoder sees); perfpkt_compiled its twin
    vmtime      perf inject --vm-time-correlation (VMX TSC offsets from the trace)
    lastip      last-IP reconstruction (IP compression)
    time        TSC/MTC/TMA/CYC/CBR time estimate and calibration (libipt pt_time)
    errata      CPU family/model -> errata flags
    pevent      perf_event sideband files for ptdump's --pevent/--sb:* printing

ptdump/ptxed output and the libipt-style query and instruction decoders are in ptexport.raw.

Twins (X / X_compiled: same public names, same results) are listed in
docs/architecture.md.  This package never sees perf.data, SQL or the CLI
(import-linter contract).
"""
