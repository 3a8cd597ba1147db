"""perf's db-export semantics: samples and sideband records in, rows in perf's order out.

- :mod:`.exporter` - :class:`~.exporter.DbExporter` (the state of one export: ids, rows,
  perf's delivery order) and :class:`~.exporter.ExportConfig`;
- :mod:`.samples_compiled` / :mod:`.samples` - the sample loop, twins by the same name
  ``export_samples``: whole batches with numpy, and one sample at a time (the oracle);
- :mod:`.machine`, :mod:`.threads`, :mod:`.vm` - machines, perf's thread table, guests and VM exits;
- :mod:`.callchains`, :mod:`.decode_errors`, :mod:`.payloads`, :mod:`.stats`, :mod:`.progress`.

It imports only layers below it (samples, call trees, writers, images, sideband, perf.data):
what it needs from the trace itself comes from the session (:mod:`ptexport.session.export`).
See docs/architecture.md.
"""
