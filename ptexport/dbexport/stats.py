"""The ``stats`` table of an export: what the recording lost and what decoding could not use.

One row per (name, cpu) with a severity (``info``, ``warning``, ``data_loss``,
``error``), written at the end of the export:

* ``lost_records`` / ``lost_samples``: PERF_RECORD_LOST (sideband records the
  kernel dropped) and PERF_RECORD_LOST_SAMPLES, summed per cpu;
* ``truncated_aux``, ``aux_partial``, ``aux_collision``, ``aux_overwrite``:
  PERF_RECORD_AUX records with those flags, per cpu (perf reports "Lost trace
  data" at a truncated one);
* ``overflows`` (OVF packets: the CPU dropped trace) and ``lost_data`` ("Lost
  trace data") among the decode errors written, per cpu;
* ``decode_errors`` (all, cpu -1) and ``decode_errors.<kind>`` per kind and cpu;
* ``skipped_records`` (records of types the reader does not know) and
  ``skipped_features`` (header features without a parser), cpu -1;
* ``file_cut`` (cpu -1, severity ``warning``): the recording was cut (perf killed, disk
  full) and read up to the cut; the value is the byte offset where the file ends
  (``perfdata.reader.FileCut``; a cut AUXTRACE payload also gets a "No more data"
  decode error at its end). Not ``data_loss``: the value is an offset, not a count.

Nothing lost, no errors: no rows.

Decode-error kinds are named by :data:`ERROR_KINDS` (``decode_errors.kind``; perf's INTEL_PT_ERR_*
code itself is ``decode_errors.code``).
"""

from __future__ import annotations

from typing import Any

from ptexport.samples.columns import (
    ERR_BADPKT,
    ERR_INTERN,
    ERR_LOST,
    ERR_MISMAT,
    ERR_NELOOP,
    ERR_NODATA,
    ERR_NOINSN,
    ERR_NOMEM,
    ERR_OVR,
    ERR_UNK,
)

# perf's intel_pt error codes (INTEL_PT_ERR_*) -> decode_errors.kind
ERROR_KINDS = {
    ERR_NOMEM: "no_memory",
    ERR_INTERN: "internal",
    ERR_BADPKT: "bad_packet",
    ERR_NODATA: "no_data",
    ERR_NOINSN: "no_insn",
    ERR_MISMAT: "mismatch",
    ERR_OVR: "overflow",
    ERR_LOST: "lost_data",
    ERR_UNK: "unknown",
    ERR_NELOOP: "never_ending_loop",
}

_AUX_FLAGS = (  # PERF_AUX_FLAG_*: bit, name, severity, description
    (0x01, "truncated_aux", "data_loss", "AUX records with the TRUNCATED flag: the AUX buffer was full, trace lost"),
    (0x02, "aux_overwrite", "info", "AUX records with the OVERWRITE flag (snapshot mode: older data overwritten)"),
    (0x04, "aux_partial", "warning", "AUX records with the PARTIAL flag (the record holds a partial packet)"),
    (0x08, "aux_collision", "data_loss", "AUX records with the COLLISION flag: sample data collided, trace lost"),
)


def error_kind(code: int) -> str:
    """decode_errors.kind of perf's error code."""
    return ERROR_KINDS.get(int(code), f"code_{int(code)}")


class ExportStats:
    """Counters collected during an export, turned into ``stats`` rows at the end."""

    def __init__(self) -> None:
        self.errors: dict[tuple[str, int], int] = {}  # (kind, cpu) -> decode errors written

    def error(self, code: int, cpu: int) -> None:
        key = (error_kind(code), cpu)
        self.errors[key] = self.errors.get(key, 0) + 1

    def rows(self, session: Any) -> list[tuple[str, int, int, str, str]]:
        """(name, cpu, value, severity, description) of every non-zero counter."""
        out: list[tuple[str, int, int, str, str]] = []
        sb = session.sb
        for kind, name, desc in (("LOST", "lost_records", "sideband records the kernel dropped (PERF_RECORD_LOST)"),
                                 ("LOST_SAMPLES", "lost_samples", "samples the kernel dropped (PERF_RECORD_LOST_SAMPLES)")):
            per: dict[int, int] = {}
            for e in getattr(sb, "lost", ()) or ():
                if e.kind == kind:
                    per[e.cpu] = per.get(e.cpu, 0) + e.count
            out += [(name, cpu, n, "data_loss", desc) for cpu, n in sorted(per.items()) if n]
        aux = getattr(sb, "aux_events", None) or {}
        for bit, name, sev, desc in _AUX_FLAGS:
            for cpu, evs in sorted(aux.items()):
                n = sum(1 for e in evs if e.flags & bit)
                if n:
                    out.append((name, cpu, n, sev, desc))
        for kind, name, desc in (("overflow", "overflows", "OVF packets: the CPU dropped trace (decode errors)"),
                                 ("lost_data", "lost_data", "'Lost trace data' decode errors (truncated AUX data)")):
            out += [(name, cpu, n, "data_loss", desc)
                    for (k, cpu), n in sorted(self.errors.items()) if k == kind]
        total = sum(self.errors.values())
        if total:
            out.append(("decode_errors", -1, total, "error", "rows in decode_errors"))
            out += [(f"decode_errors.{k}", cpu, n, "error", f"decode errors of kind {k}")
                    for (k, cpu), n in sorted(self.errors.items())]
        pd = session.pd
        rstats = getattr(pd, "stats", None)
        unknown = int(getattr(rstats, "unknown", 0) or 0) if rstats is not None else 0
        if unknown:
            out.append(("skipped_records", -1, unknown, "warning", "records of unknown types, skipped"))
        cut = getattr(pd, "cut", None)
        if cut is not None:
            out.append(("file_cut", -1, int(cut.offset), "warning",
                        f"the file ends at this offset, cut{' ' + cut.where if getattr(cut, 'where', '') else ''} "
                        f"({cut.records} records and {cut.aux_bytes} AUX bytes before it were read)"))
        feats = len(getattr(pd, "unknown_features", None) or ())
        if feats:
            out.append(("skipped_features", -1, feats, "warning", "header features without a parser, skipped"))
        return out
