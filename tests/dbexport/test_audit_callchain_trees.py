"""--callchains reads the call tree's stacks and numbers chain call paths in its table: the compiled
call tree (calltree/fast.py) and the reference one (calltree/threadstack.py) must agree on both."""

from __future__ import annotations

import numpy as np
import pytest

from ptexport.calltree import CallTree
from ptexport.jit import available
from ptexport.dbexport.callchains import chain_addresses
from ptexport.samples.flags import IpFlag

CALL = int(IpFlag.BRANCH | IpFlag.CALL)
RET = int(IpFlag.BRANCH | IpFlag.RETURN)
JMP = int(IpFlag.BRANCH)


def _batch(rows):
    cols = ("time", "ip", "addr", "flags", "ref", "thread_id", "cpu", "pid", "tid", "insn_len", "from_sym", "to_sym",
            "to_sym_start", "trace_nr")
    return {c: np.array([r[i] for r in rows], dtype=np.uint64 if c in ("ip", "addr", "to_sym_start") else np.int64)
            for i, c in enumerate(cols)}


@pytest.mark.skipif(not available(), reason="the compiled call tree needs numba")
def test_stacks_and_chain_paths_agree():
    from ptexport.calltree.threadstack_compiled import CallTree as FastCallTree

    rng = np.random.default_rng(5)
    trees = [CallTree(root_call_path_id=1, first_call_path_id=1), FastCallTree(root_call_path_id=1, first_call_path_id=1)]
    depth = {1: 0, 2: 0}
    ref = 0
    for step in range(3000):
        tid = int(rng.integers(1, 3))
        ref += 1
        kind = rng.choice(3, p=[0.45, 0.35, 0.2])
        sym = int(rng.integers(1, 12))
        ip = 0x400000 + 0x100 * sym + int(rng.integers(0, 0x80))
        if kind == 0:
            flags, addr = CALL, 0x400000 + 0x100 * int(rng.integers(1, 12))
        elif kind == 1 and depth[tid]:
            flags, addr = RET, ip + 0x20
        else:
            flags, addr = JMP, ip + 4
        depth[tid] += 1 if flags == CALL else -1 if flags == RET else 0
        row = (ref * 10, ip, addr, flags, ref, tid, 0, 100, 100 + tid, 5, sym, addr >> 8 & 0xF, addr & ~0xFF, 1)
        for t in trees:
            t.process_batch(_batch([row]))
        if step % 7 == 0:
            stacks = [t.stack_return_addresses(tid, 0, 100, 100 + tid) for t in trees]
            assert stacks[0] == stacks[1]
            addrs = chain_addresses(ip, stacks[0], 17, 1 << 63)
            assert addrs[0] == ip and addrs[1:] == stacks[0][:15]  # 17 slots: context, ip, 15 returns
            nodes = [(a >> 8 & 0xF if a & 1 else 0, a) for a in reversed(addrs)]
            assert trees[0].call_path_id(nodes) == trees[1].call_path_id(nodes)
    assert max(len(t.stack_return_addresses(1, 0, 100, 101)) for t in trees) > 0
    paths = [t.take_call_paths() for t in trees]
    for k in ("id", "parent_id", "symbol_id", "ip"):
        assert np.array_equal(np.asarray(paths[0][k], np.int64), np.asarray(paths[1][k], np.int64)), k
    assert len(paths[0]["id"]) > 20


def test_chain_addresses_are_perfs_thread_stack_sample():
    ks = 1 << 63
    k = [ks + 0x10, ks + 0x20]
    u = [0x1000, 0x2000, 0x3000]
    assert chain_addresses(0x5, u, 17, ks) == [0x5, *u]
    assert chain_addresses(0x5, u, 3, ks) == [0x5, 0x1000]  # ctx, ip, one return address
    assert chain_addresses(0x5, u, 1, ks) == []
    # kernel ip over a user stack: a USER marker takes a slot
    assert chain_addresses(k[0], u, 4, ks) == [k[0], 0x1000]
    assert chain_addresses(k[0], u, 3, ks) == [k[0]]  # no room for the marker and an address
    assert chain_addresses(k[0], [k[1], *u], 6, ks) == [k[0], k[1], 0x1000, 0x2000]
