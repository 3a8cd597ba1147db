"""Rows of the event-trace payload tables (``evt``, ``evd``, ``iflag``) from a sample's payload word.

perf 6.1's exporters have no handler for these synthesized events (``synth_data``
stops at cbr); the rows hold what perf's raw records carry
(``perf_synth_intel_evt`` / ``perf_synth_intel_iflag_chg``), decoded the way
``perf script -F +synth`` prints them.
"""

from __future__ import annotations


def evt_row(sid: int, cfe: int) -> tuple[int, int, int, bool, int]:
    """(id, type, vector, ip_flag, evd_count) of an ``evt`` sample whose payload is perf's CFE word
    (type bits 0-4, IP bit 7, vector bits 8-15, EVD count from bit 16: perfsession.cfe_word)."""
    return (sid, cfe & 0x1F, (cfe >> 8) & 0xFF, bool(cfe >> 7 & 1), cfe >> 16)


def iflag_row(sid: int, payload: int) -> tuple[int, bool, bool]:
    """(id, iflag, via_branch) of an ``iflag`` sample (payload: new IF bit 0, via a branch bit 1)."""
    return (sid, bool(payload & 1), bool(payload >> 1 & 1))
