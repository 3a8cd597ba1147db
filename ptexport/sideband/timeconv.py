"""TSC <-> perf time conversion, bit-exact with perf's tools/perf/util/tsc.c.

perf stores the kernel's ``perf_event_mmap_page`` clock parameters in the
TIME_CONV record (and, for Intel PT, in AUXTRACE_INFO).  Perf time is::

    time_zero + (tsc >> shift) * mult + ((tsc & (2**shift - 1)) * mult >> shift)

and the inverse divides by ``mult`` in two parts (quotient and remainder) so
no 128-bit product is needed.  All arithmetic is on unsigned 64-bit values that
wrap, exactly as in C: ``time_zero`` is often "negative" (e.g.
18446744041015200657), and the results only make sense modulo 2**64.  With
``cap_user_time_short`` the TSC value is first widened to the full counter from
``time_cycles`` and ``time_mask`` (perf does that on the tsc->time side only).

The vectorised variants take numpy ``uint64`` arrays; numpy's uint64 ops wrap
the same way C does, so they agree with the scalar versions element by element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1


def perf_time_mult(rec: Any) -> int:
    """A TIME_CONV record's (or AUXTRACE_INFO's) time_mult as perf holds it: a u32 (struct
    perf_tsc_conversion), so wider values truncate; 0 (or none): the record gives no clock."""
    return int(getattr(rec, "time_mult", 0) or 0) & _U32


@dataclass(frozen=True, slots=True)
class TimeConversion:
    """Clock parameters of one recording (perf's ``struct perf_tsc_conversion``)."""

    time_shift: int
    time_mult: int
    time_zero: int
    time_cycles: int = 0
    time_mask: int = 0
    cap_user_time_zero: bool = True
    cap_user_time_short: bool = False
    source: str = "TIME_CONV"

    def __post_init__(self) -> None:
        if not 0 <= self.time_shift < 64:
            raise ValueError(f"time_shift {self.time_shift} is not in 0..63")
        if not 0 < self.time_mult < (1 << 32):
            raise ValueError(f"time_mult {self.time_mult} is not a non-zero 32-bit value")

    # -- construction ---------------------------------------------------------------

    @classmethod
    def from_time_conv(cls, rec: Any) -> "TimeConversion":
        """From a TIME_CONV record (or perfdata's ``TimeConv``); short old records lack the last fields."""
        return cls(
            time_shift=int(rec.time_shift),
            time_mult=perf_time_mult(rec),
            time_zero=int(rec.time_zero) & _U64,
            time_cycles=int(getattr(rec, "time_cycles", 0) or 0) & _U64,
            time_mask=int(getattr(rec, "time_mask", 0) or 0) & _U64,
            cap_user_time_zero=getattr(rec, "cap_user_time_zero", None) is not False,
            cap_user_time_short=bool(getattr(rec, "cap_user_time_short", False)),
            source="TIME_CONV",
        )

    @classmethod
    def from_auxtrace_info(cls, info: Any) -> "TimeConversion":
        """From Intel PT's AUXTRACE_INFO private fields (no time_cycles/time_mask there)."""
        return cls(
            time_shift=int(info.time_shift),
            time_mult=perf_time_mult(info),
            time_zero=int(info.time_zero) & _U64,
            cap_user_time_zero=bool(getattr(info, "cap_user_time_zero", True)),
            source="AUXTRACE_INFO",
        )

    # -- scalar conversions (exact, wrapping u64) ----------------------------------

    def tsc_to_perf_time(self, tsc: int) -> int:
        cyc = tsc & _U64
        if self.cap_user_time_short:
            cyc = (self.time_cycles + ((cyc - self.time_cycles) & self.time_mask)) & _U64
        quot = cyc >> self.time_shift
        rem = cyc & ((1 << self.time_shift) - 1)
        return (self.time_zero + quot * self.time_mult + ((rem * self.time_mult) >> self.time_shift)) & _U64

    def perf_time_to_tsc(self, ns: int) -> int:
        t = (ns - self.time_zero) & _U64
        quot, rem = divmod(t, self.time_mult)
        # (rem << shift) is a u64 expression in C: keep its wrap-around.
        return (((quot << self.time_shift) & _U64) + (((rem << self.time_shift) & _U64) // self.time_mult)) & _U64

    # -- vectorised -------------------------------------------------------------------

    def tsc_to_perf_time_array(self, tsc: np.ndarray) -> np.ndarray:
        cyc = np.asarray(tsc, dtype=np.uint64)
        shift = np.uint64(self.time_shift)
        mult = np.uint64(self.time_mult)
        with np.errstate(over="ignore"):
            if self.cap_user_time_short:
                cyc = np.uint64(self.time_cycles) + ((cyc - np.uint64(self.time_cycles)) & np.uint64(self.time_mask))
            quot = cyc >> shift
            rem = cyc & np.uint64((1 << self.time_shift) - 1)
            return np.uint64(self.time_zero) + quot * mult + ((rem * mult) >> shift)

    def perf_time_to_tsc_array(self, ns: np.ndarray) -> np.ndarray:
        t = np.asarray(ns, dtype=np.uint64)
        shift = np.uint64(self.time_shift)
        mult = np.uint64(self.time_mult)
        with np.errstate(over="ignore"):
            t = t - np.uint64(self.time_zero)
            quot = t // mult
            rem = t % mult
            return (quot << shift) + (rem << shift) // mult

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "time_shift": self.time_shift,
            "time_mult": self.time_mult,
            "time_zero": self.time_zero,
            "time_cycles": self.time_cycles,
            "time_mask": self.time_mask,
            "cap_user_time_zero": self.cap_user_time_zero,
            "cap_user_time_short": self.cap_user_time_short,
        }
