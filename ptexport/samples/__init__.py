"""Sample synthesis: perf's --itrace sample kinds and flag bits.

- :mod:`.flags` - ``PERF_IP_FLAG_*`` (:class:`~.flags.IpFlag`), perf script's flag text
  (:func:`~.flags.format_flags`), perf 6.1's ``branch_types`` rows.
- :mod:`.itrace` - ``--itrace`` parsing exactly as perf 6.1 (:func:`~.itrace.parse_itrace`),
  perf's defaults and the export default (``bep``).
- :mod:`.text` - perf script's line format and CSV lines for branch samples.
"""
