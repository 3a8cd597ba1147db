"""Intel PT packets: the packet decoder, ptdump-style printing, timing.

Layers (libipt's, bottom up):

    packets     bytes -> Packet(offset, size, kind, p0, p1, p2); sync_forward; PacketDecoder;
                iter_packets (errors yielded, resync at the next PSB); decode_columns
    fastdecode  the same as numpy columns from a numba-compiled twin (decode_columns_fast)
    lastip      last-IP reconstruction (IP compression)
    time        TSC/MTC/TMA/CYC/CBR time estimate and calibration (libipt pt_time)
    errata      CPU family/model -> errata flags
    ptdump      ptdump-format lines for a raw buffer
    pevent      perf_event sideband files for ptdump's --pevent/--sb:* printing

This package never sees perf.data, SQL or the CLI (import-linter contract).
"""
