"""Sample-trace generator: real programs emulated, encoded as Intel PT, written as perf.data."""
