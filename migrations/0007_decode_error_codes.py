"""decode_errors.code (perf's error code), and kind as a name where an older ptexport wrote the code number.

Older exports put perf's INTEL_PT_ERR_* number in ``kind`` and 0 in ``segment``; the code moves to the new
``code`` column and ``kind`` gets its name.  ``segment`` stays as written: the PSB segment needs the trace.
"""

# perf's INTEL_PT_ERR_* codes -> decode_errors.kind (as pipeline/export_stats.py names them)
KINDS = {1: "no_memory", 2: "internal", 3: "bad_packet", 4: "no_data", 5: "no_insn", 6: "mismatch", 7: "overflow",
         8: "lost_data", 9: "unknown", 10: "never_ending_loop"}


def migrate(db):
    if "decode_errors" not in db.tables():
        return
    db.add_column("decode_errors", "code", 0)
    for code, name in KINDS.items():
        db.execute("UPDATE decode_errors SET code = ?, kind = ? WHERE kind = ?", (code, name, str(code)))
