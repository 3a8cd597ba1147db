"""The compiled decoder kernel runs without numba's reference counting (issue #5, speed).

With NRT on, every call between kernel functions increfs and decrefs each array
argument with an atomic instruction: that was about three quarters of the
kernel's CPU time.  The kernel allocates nothing, so it is compiled with NRT off.
"""

from __future__ import annotations

import pytest

from ptexport import jit
from ptexport.decoder.compiled import kernel as K
pytestmark = pytest.mark.skipif(not jit.available(), reason="numba not installed")


def test_every_kernel_function_is_compiled_without_nrt():
    import numba.core.registry

    jitted = {name: obj for name, obj in vars(K).items()
              if isinstance(obj, numba.core.registry.CPUDispatcher)}
    assert {"run", "tab_find", "tab_insert", "cursor", "_walk", "_walk_insn", "_decode", "_synth"} <= set(jitted)
    assert {name for name, d in jitted.items() if d.targetoptions.get("_nrt") is not False} == set()
