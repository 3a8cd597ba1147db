"""Sideband model: machines, threads, comms, memory maps and per-CPU timelines over time."""
