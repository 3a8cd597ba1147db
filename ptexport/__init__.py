"""ptexport: decode Intel Processor Trace recordings and export them into SQL databases.

The package is laid out in layers, bottom to top; each imports only those below it
(docs/architecture.md; checked by import-linter):

    errors, jit    the exception tree; numba, when it loads (the one place that asks)
    perfdata       perf.data reader: header, attrs, feature sections, records
    sideband       machines, threads, comms, maps over time, per-CPU timelines
    images         ELF / kcore / raw images, symbols
    pt             Intel PT packets (reference and compiled twins), timing, VM time
    raw            libipt-style decoders over raw traces: query, insn, ptxed, ptdump
    samples        the decode -> export contract (SampleColumns), --itrace, perf script's format
    decoder        perf's decoder: reference/ (the oracle) and compiled/ (numba) backends
    calltree       per-thread call stacks -> calls and call paths
    writers        SQLite and PostgreSQL writers, schema, migrations
    dbexport       perf's db-export semantics: ids, machines, VMs, symbols, stats
    session        a perf.data session: queues, the parallel decoder, the export run
    synth          the sample-trace generator
    cli            the command line, the only place that prints
"""

__version__ = "0.1.0"
