"""Sample synthesis: perf's --itrace sample kinds and flag bits."""
