"""A recording decoded into sample batches (perf's queues, --jobs processes) and one export end to end."""

import os


def default_jobs() -> int:
    """``--jobs`` when not given: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1
