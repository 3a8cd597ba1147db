"""CPU model -> Intel PT errata flags (libipt's pt_cpu_errata).

Only SKD007 and SKZ84 change how packets are read (packets.py); the others
change how the query/flow decoders interpret them (ptexport.raw):

- BDM70: a PSB+ may contain an FUP/MODE that does not belong to it.
- BDM64: a TSX abort may leave the trace with a bad TIP/TNT.
- SKD007: a 2-byte CYC followed by OVF: the OVF overlaps the CYC.
- SKD022: VM entry on a TIP.PGD lacks its IP.
- SKD010: a PSB+ may contain a FUP that repeats an FUP before it.
- SKL014: TIP.PGD without IP on a filtered ... (status/IP filtering).
- APL12: PSB+ after a TIP.PGE is off by one packet.
- APL11: a TIP.PGD may be missing after a disabling OVF.
- SKL168: a CYC may precede an MTC that it should follow (timing only).
- SKZ84: VMX TSC scaling/offsetting corrupts packets (TMA reserved bits).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ptexport.errors import UsageError


@dataclass(frozen=True)
class Errata:
    bdm70: bool = False
    bdm64: bool = False
    skd007: bool = False
    skd022: bool = False
    skd010: bool = False
    skl014: bool = False
    apl12: bool = False
    apl11: bool = False
    skl168: bool = False
    skz84: bool = False

    def names(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


NO_ERRATA = Errata()

_BDM = Errata(bdm70=True, bdm64=True)
_SKL = Errata(bdm70=True, skd007=True, skd022=True, skd010=True, skl014=True, skl168=True)
_SKX = Errata(bdm70=True, skl014=True, skd022=True, skz84=True)
_ICX = Errata(bdm70=True, skd022=True, skz84=True)
_CNL = Errata(bdm70=True, skl014=True, skd022=True)
_ADL = Errata(bdm70=True, skd022=True, apl11=True)
_APL = Errata(apl12=True, apl11=True)
_ATOM = Errata(apl11=True)

# (family, model) -> errata.  Family 6 unless stated.
_TABLE: dict[tuple[int, int], Errata] = {}
for _m in (0x3D, 0x47, 0x4F, 0x56):
    _TABLE[(6, _m)] = _BDM
for _m in (0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6):
    _TABLE[(6, _m)] = _SKL
for _m in (0x55, 0x6A, 0x6C):
    _TABLE[(6, _m)] = _SKX
for _m in (0x8F, 0xAD, 0xAE, 0xCF):
    _TABLE[(6, _m)] = _ICX
_TABLE[(0x13, 0x01)] = _ICX
for _m in (0x66, 0x7D, 0x7E, 0x8C, 0x8D, 0xA7, 0xA8):
    _TABLE[(6, _m)] = _CNL
for _m in (0x97, 0x9A, 0xBF, 0xB7, 0xB5, 0xAA, 0xAC, 0xBA, 0xCC, 0xBD, 0xC5, 0xC6, 0xD5):
    _TABLE[(6, _m)] = _ADL
for _m in (0x01, 0x03):
    _TABLE[(0x12, _m)] = _ADL
for _m in (0x5C, 0x5F):
    _TABLE[(6, _m)] = _APL
for _m in (0x7A, 0x86, 0x96, 0x9C, 0xB6, 0xAF, 0xDD):
    _TABLE[(6, _m)] = _ATOM


class UnknownCpuError(UsageError):
    """libipt knows no errata for this CPU (ptdump warns and goes on without)."""


def errata_for_cpu(family: int, model: int, stepping: int = 0) -> Errata:
    """The errata libipt applies for an Intel CPU; UnknownCpuError if not in the table."""
    try:
        return _TABLE[(family, model)]
    except KeyError:
        raise UnknownCpuError(f"unknown cpu {family}/{model}/{stepping}") from None


def parse_cpu(text: str) -> tuple[int, int, int]:
    """Parse ptdump's ``--cpu f/m[/s]`` (decimal or 0x-hex parts)."""
    parts = text.split("/")
    if len(parts) not in (2, 3):
        raise UsageError(f"--cpu: expected family/model[/stepping], got {text!r}")
    try:
        vals = [int(p, 0) for p in parts]
    except ValueError:
        raise UsageError(f"--cpu: bad number in {text!r}") from None
    if len(vals) == 2:
        vals.append(0)
    return vals[0], vals[1], vals[2]


def errata_from_cpuid(cpuid: str) -> Errata:
    """Errata for perf's CPUID header string (``GenuineIntel,6,78,3``); none if not Intel or unknown."""
    parts = [p.strip() for p in cpuid.split(",")]
    if len(parts) < 3 or parts[0] != "GenuineIntel":
        return NO_ERRATA
    try:
        fam, model = int(parts[1], 0), int(parts[2], 0)
        step = int(parts[3], 0) if len(parts) > 3 else 0
        return errata_for_cpu(fam, model, step)
    except (ValueError, UnknownCpuError):
        return NO_ERRATA
