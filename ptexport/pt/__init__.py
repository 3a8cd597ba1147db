"""Intel PT packets: the packet decoder, ptdump-style printing, timing."""
