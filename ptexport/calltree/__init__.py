"""Call trees: per-thread stacks into calls and call paths, with perf's thread-stack semantics.

:class:`CallTree` takes branch samples (numpy columns, batch after batch, in
export order) and yields perf's ``calls`` and ``call_paths`` rows with perf's
ids; :class:`CallPathTable` is the call path tree it numbers.  It is the
reference; :func:`make_call_tree` gives its numba-compiled twin
:class:`ptexport.calltree.threadstack_compiled.CallTree` (same name, same interface, same
rows, several times faster) when numba is installed.  See docs/architecture.md (twins).
"""

from ptexport.calltree.callpath import CallPathTable
from ptexport.calltree.threadstack import (
    CALL_RETURN_NO_CALL,
    CALL_RETURN_NO_RETURN,
    CALL_RETURN_NON_CALL,
    CALLS_COLUMNS,
    SAMPLE_COLUMNS,
    CallTree,
    is_x86_retpoline,
    perf_flush_order,
)

def make_call_tree(**kwargs):
    """The fastest call tree available: numba's when installed, else the reference one."""
    from ptexport.calltree import threadstack_compiled  # lazy: loads numba (start-up time)

    if threadstack_compiled.numba is not None:
        kwargs.pop("call_paths", None)
        return threadstack_compiled.CallTree(**kwargs)
    return CallTree(**kwargs)


__all__ = [
    "make_call_tree",
    "CallTree",
    "CallPathTable",
    "perf_flush_order",
    "is_x86_retpoline",
    "CALLS_COLUMNS",
    "SAMPLE_COLUMNS",
    "CALL_RETURN_NO_CALL",
    "CALL_RETURN_NO_RETURN",
    "CALL_RETURN_NON_CALL",
]
