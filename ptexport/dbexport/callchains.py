"""``--callchains``: ``samples.call_path_id`` of perf's ``export-to-sqlite.py ... callchains``.

perf 6.1 with ``--itrace=...g`` gives every synthesized sample except branches and
transactions (those go through intel_pt_prep_b_sample) a call chain read off the
thread's stack (thread_stack__sample): the sample's ip, then the return
addresses from the top of the stack down, with a context marker where user and
kernel addresses alternate, at most ``callchain_sz + 1`` entries in all.  With
``calls`` the stack is the call/return processor's (thread_stack__event stops
early when thread_stack__process is in use), as it stands after the samples
before this one: the call tree here, run up to the sample.  The exporter
(db-export's call_path_from_sample) walks the chain caller first, resolves each
address (symbol ids as perf hands them out), and finds or creates the call path
root -> ... -> the sample's ip in the call tree's own call path table (perf shares
the call/return processor's root), exporting it at once: its id interleaves with
the call paths of calls.  Branch samples keep call path 0, as in perf.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

_USER, _KERNEL = 0, 1


def chain_addresses(ip: int, rets: list[int], sz: int, kernel_start: int) -> list[int]:
    """The addresses of perf's thread_stack__sample chain (context markers left out), callee first."""
    if sz < 2:
        return []
    last = _KERNEL if ip >= kernel_start else _USER
    out = [ip]
    i = 2
    for r in rets:
        if i >= sz:
            break
        ctx = _KERNEL if r >= kernel_start else _USER
        if ctx != last:
            if i >= sz - 1:
                break
            i += 1  # the marker's slot
            last = ctx
        out.append(r)
        i += 1
    return out


def apply_callchains(ct: Any, machines: Sequence[Any], callchain_sz: int, samples: dict[str, np.ndarray],
                     tree: Mapping[str, np.ndarray] | None, chains: dict[str, np.ndarray]) -> None:
    """Run the call tree ``ct`` over ``tree`` (this batch's branches) in pieces, setting each chain sample's
    ``call_path_id`` in ``samples`` when the tree stands where perf's stood at it.  ``machines``: the
    export's machine states (a chain's ``mi`` indexes them); ``callchain_sz``: --itrace's ``g`` size."""
    sz = callchain_sz + 1
    refs = tree["ref"] if tree is not None else np.zeros(0, np.int64)
    done = 0
    sids = chains["sid"].tolist()
    cps: list[int] = []
    cols = {k: chains[k].tolist() for k in ("thread_id", "cpu", "pid", "tid", "ip", "time", "trace_nr", "mi")}
    for k, sid in enumerate(sids):
        cut = int(np.searchsorted(refs, sid))
        if cut > done:
            ct.process_batch({c: v[done:cut] for c, v in tree.items()})
            done = cut
        thread_id, cpu, pid, tid = cols["thread_id"][k], cols["cpu"][k], cols["pid"][k], cols["tid"][k]
        ct.set_trace_nr(thread_id, cols["trace_nr"][k], cpu=cpu, pid=pid, tid=tid)
        st = machines[cols["mi"][k]]
        ks = st.kernel_start
        ip = cols["ip"][k] & 0xFFFFFFFFFFFFFFFF
        addrs = chain_addresses(ip, ct.stack_return_addresses(thread_id, cpu, pid, tid), sz, ks)
        nodes: list[tuple[int, int]] = []
        for a in reversed(addrs):  # caller first (callchain_param.order = ORDER_CALLER)
            _dso, sym, _off, _start = st.resolve(pid, a, cols["time"][k], a >= ks)
            nodes.append((sym, a))
        cps.append(ct.call_path_id(nodes) if nodes else 0)
    if tree is not None and done < len(refs):
        ct.process_batch({c: v[done:] for c, v in tree.items()})
    if sids:
        pos = np.searchsorted(samples["id"], np.asarray(sids, samples["id"].dtype))
        cp = samples["call_path_id"].copy()
        cp[pos] = cps
        samples["call_path_id"] = cp


def check_config(calls: bool, reference: bool) -> Any:
    """The configurations --callchains supports (an error message, else None)."""
    if not calls:
        return "--callchains needs the call tree (perf's stack then comes from thread_stack__event): drop --no-calls"
    if reference:
        return "--callchains is not in the reference export loop"
    return None
