"""ptexport: decode Intel Processor Trace recordings and export them into SQL databases.

The package is laid out by pipeline stage (see DESIGN.md section 2):

    perfdata   perf.data reader: header, attrs, feature sections, records
    sideband   machines, threads, comms, maps over time, per-CPU timelines
    pt         Intel PT packets, timing
    flow       instruction flow over code images
    images     ELF / kcore / raw images, symbols
    samples    --itrace sample synthesis
    calltree   per-thread call stacks -> calls and call paths
    export     SQLite and PostgreSQL writers
    pipeline   segments and the multiprocessing decoder
    synth      the sample-trace generator
    cli        the command line, the only place that prints
"""

__version__ = "0.1.0"
