"""Call trees: per-thread stacks into calls and call paths, with perf's thread-stack semantics.

:class:`CallTree` takes branch samples (numpy columns, batch after batch, in
export order) and yields perf's ``calls`` and ``call_paths`` rows with perf's
ids; :class:`CallPathTable` is the call path tree it numbers.
"""

from ptexport.calltree.callpath import CallPathTable
from ptexport.calltree.threadstack import (
    CALL_RETURN_NO_CALL,
    CALL_RETURN_NO_RETURN,
    CALL_RETURN_NON_CALL,
    CALLS_COLUMNS,
    SAMPLE_COLUMNS,
    CallTree,
)

__all__ = [
    "CallTree",
    "CallPathTable",
    "CALLS_COLUMNS",
    "SAMPLE_COLUMNS",
    "CALL_RETURN_NO_CALL",
    "CALL_RETURN_NO_RETURN",
    "CALL_RETURN_NON_CALL",
]
