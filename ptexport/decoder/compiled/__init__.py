"""perf's Intel PT decoder, the compiled backend: the reference's rules as numba kernels.

- :mod:`.kernel` - the state machine over token columns (one call runs until output is full or input
  is needed), the state as a declared int64 layout;
- :mod:`.decoder` - queues driven through the kernel: buffers, code blocks, sideband, errors.

The entry points are the reference's (docs/architecture.md, "Twins"); the choice between backends
is :mod:`ptexport.decoder.backend`'s.
"""

from ptexport.decoder.compiled.decoder import decode_queue, supported

__all__ = ["decode_queue", "supported"]
