"""The perf decoder: Intel PT packets and sideband in, perf's samples out (docs/architecture.md).

- :mod:`~ptexport.decoder.context`: :class:`DecodeContext`, all a backend reads of a session
  (built by ``PerfSession.decode_context()``), and the code walker's view of memory;
- :mod:`~ptexport.decoder.backend`: the one place that picks a backend for a session, and says why;
- :mod:`~ptexport.decoder.reference` (the oracle, plain Python: ``decoder`` is perf's
  intel-pt-decoder.c, ``queue`` its intel-pt.c sample synthesis) and
  :mod:`~ptexport.decoder.compiled` (numba), with the same entry points
  ``supported(ctx)`` and ``decode_queue(ctx, ...)``;
- :mod:`~ptexport.decoder.constants` (numbers both backends import), :mod:`~ptexport.decoder.codewalk`
  (perf's instruction walk), :mod:`~ptexport.decoder.filters` (perf's decoder-side ``--time``),
  :mod:`~ptexport.decoder.guest` (guest machines' code and threads).
"""
