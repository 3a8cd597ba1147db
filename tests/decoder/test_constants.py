"""The two perf decoder backends use the same numbers (issue #15: one constants module both import).

The reference (:mod:`ptexport.decoder.reference.decoder`) and the compiled
kernel (:mod:`ptexport.decoder.compiled.kernel`) take their packet states,
type bits, flags, instruction classes and period kinds from
:mod:`ptexport.decoder.constants`, and perf's error codes and the sample kinds
from :mod:`ptexport.samples.columns`; whatever else they both define (perf's
errnos, loop limits) must agree too.  The kernel's state layout (indices into
its state array) is declared name by name and must count 0, 1, 2, ...
"""

from __future__ import annotations

import numpy as np

from ptexport.decoder import constants as C
from ptexport.decoder.compiled import kernel as K
from ptexport.decoder.reference import decoder as R
from ptexport.pt import perfpkt_compiled
from ptexport.samples import columns
from ptexport.samples.flags import IpFlag

_MASK64 = (1 << 64) - 1
# The kernel's namespace holds the packet kinds of these names; their packet states are NAME_ST there.
_STATES_RENAMED = ("TNT", "TIP", "TIP_PGD", "FUP")


def _ints(mod) -> dict[str, int]:
    return {n: int(v) & _MASK64 for n, v in vars(mod).items()
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and not n.startswith("__")}


def test_names_both_backends_define_have_the_same_value():
    ref, ker = _ints(R), _ints(K)
    packet_kinds = set(_ints(perfpkt_compiled))
    common = set(ref) & set(ker)
    clashes = {n for n in common if n in packet_kinds and ker[n] == _ints(perfpkt_compiled)[n]}
    assert clashes == set(_STATES_RENAMED)
    assert {n: (ref[n], ker[n]) for n in common - clashes if ref[n] != ker[n]} == {}
    assert len(common - clashes) > 50  # states, T_*, F_*, OP_*, BR_*, PERIOD_*, ERR_*, errnos
    for n in _STATES_RENAMED:
        assert ker[f"{n}_ST"] == ref[n] == getattr(C, n)


def test_both_backends_take_the_shared_tables_from_the_constants_module():
    shared = _ints(C)
    for mod in (R, K):
        mine = _ints(mod)
        assert {n: (v, mine[n]) for n, v in shared.items() if n in mine and n not in _STATES_RENAMED
                and mine[n] != v} == {}
    # The kernel knows every packet state (RESAMPLE: hop and leap modes, --itrace=q/qq).
    states = ("NO_PSB", "NO_IP", "ERR_RESYNC", "IN_SYNC", "TNT_CONT", "FUP_NO_TIP", "FUP_IN_PSB", "RESAMPLE")
    assert set(states) <= set(_ints(K))


def test_kernel_sample_kinds_and_error_codes_are_the_contracts():
    contract = _ints(columns)
    ker = _ints(K)
    ev = {n for n in ker if n.startswith("EV_")}
    err = {n for n in ker if n.startswith("ERR_") and n != "ERR_RESYNC"}
    assert {"EV_BRANCH", "EV_ERROR", "EV_INSTRUCTION", "EV_PSB"} <= ev
    assert {"ERR_INTERN", "ERR_NELOOP"} <= err
    assert {n: (ker[n], contract.get(n)) for n in ev | err if ker[n] != contract.get(n)} == {}
    # The kernel's own row kinds are not sample kinds.
    assert {ker["K_BUDGET"], ker["K_SETUP_FAIL"]}.isdisjoint(v for n, v in contract.items() if n.startswith("EV_"))


def test_kernel_sample_flags_are_perfs():
    fl = {n: v for n, v in _ints(K).items() if n.startswith("FL_")}
    assert len(fl) == 15  # (INTR_DISABLE, INTR_TOGGLE: Event Trace)
    assert {n: v for n, v in fl.items() if int(IpFlag[n[3:]]) != v} == {}


def test_kernel_state_layout_counts_up_from_zero():
    names = list(vars(K))
    layout = names[names.index("IDX"):names.index("S_SIZE") + 1]
    assert [getattr(K, n) for n in layout] == list(range(len(layout)))
    assert K.NSTATE < K.S_SIZE
    assert not set(layout) & set(vars(perfpkt_compiled))
