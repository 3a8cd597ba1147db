"""Call trees: per-thread stacks into calls and call paths, with perf's thread-stack semantics."""
