"""perf's Intel PT decoder, the reference backend: plain Python, read line by line against perf's
``intel-pt-decoder.c`` and ``intel-pt.c``; the oracle the compiled backend is held equal to.

- :mod:`.decoder` - :class:`~.decoder.PerfDecoder`, perf's packet/instruction state machine;
- :mod:`.queue` - one AUX queue decoded into perf's synthesized samples (``intel_pt_sample()``).

The entry points are the ones every backend has (docs/architecture.md, "Twins"); the choice between
backends is :mod:`ptexport.decoder.backend`'s.
"""

from ptexport.decoder.reference.queue import decode_queue, supported

__all__ = ["decode_queue", "supported"]
