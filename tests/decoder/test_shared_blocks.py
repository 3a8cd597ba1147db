"""The compiled decoder's block cache, shared by the queue decoders of a session in one process.

A block (an object's bytes decoded from an offset to the next branch) is the same whichever queue
runs it, so a recording's CPU queues learn each block once.  Objects are told apart by identity:
two files of one name (a host's and a guest's library with other build-ids) never share blocks.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from ptexport import jit
from ptexport.cli import main
from ptexport.decoder.codewalk import CodeObject, CodeObjects
from ptexport.decoder.compiled import decoder as perffast
from ptexport.perfdata import open_perf_data
from ptexport.samples.columns import COLUMNS
from ptexport.samples.itrace import parse_itrace
from ptexport.session.perfsession import DecodeConfig, open_session

pytestmark = pytest.mark.skipif(not jit.available(), reason="numba not installed")


@pytest.fixture(scope="module")
def per_cpu_bigcode(tmp_path_factory):
    """The big program (3,000 functions) on 4 CPUs, preempted: every queue runs much the same code."""
    d = tmp_path_factory.mktemp("bigcode4")
    assert main(["synth", "--out", str(d), "--program", "bigcode", "--branches", "60000", "--cpus", "4",
                 "--preempt", "3000"], out=io.StringIO()) == 0
    return d / "perf.data"


def _decode_all(path, itrace, fresh):
    """Every queue's rows, and the block caches used (one per queue with ``fresh``)."""
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))
        out, caches = [], []
        for q, (key, bufs) in enumerate(s.queues()):
            qd = perffast.QueueDecoder(s.decode_context(), q, key, bufs)
            if fresh:
                qd.blocks = perffast._Blocks()
            rows = qd.run()
            out.append({c: np.asarray(rows.cols[c]).tolist() for c in COLUMNS})
            if all(qd.blocks is not c for c in caches):
                caches.append(qd.blocks)
        return out, caches


@pytest.mark.parametrize("itrace", ["be", "i7i"])
def test_queues_learn_each_block_once_with_the_same_rows(per_cpu_bigcode, itrace):
    shared, one = _decode_all(per_cpu_bigcode, itrace, fresh=False)
    apart, many = _decode_all(per_cpu_bigcode, itrace, fresh=True)
    assert len(shared) == len(apart) >= 4
    assert shared == apart
    assert len(one) == 1 and len(many) == len(apart)
    learned_apart = sum(b.n for b in many)
    # the queues run much the same code: learned once, the blocks are far fewer
    assert one[0].n < 0.8 * learned_apart, (one[0].n, learned_apart)
    assert one[0].n >= max(b.n for b in many)


def test_a_session_has_one_cache_and_another_session_its_own(per_cpu_bigcode):
    with open_perf_data(str(per_cpu_bigcode)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("b")))
        (k0, b0), (k1, b1) = s.queues()[:2]
        a = perffast.QueueDecoder(s.decode_context(), 0, k0, b0)
        b = perffast.QueueDecoder(s.decode_context(), 1, k1, b1)
        assert a.blocks is b.blocks
    with open_perf_data(str(per_cpu_bigcode)) as pd:
        s2 = open_session(pd, DecodeConfig(itrace=parse_itrace("b")))
        k, bufs = s2.queues()[0]
        assert perffast.QueueDecoder(s2.decode_context(), 0, k, bufs).blocks is not a.blocks


# Two functions at the same offset of two files of one name: ``mov eax, 1; ret`` and
# ``nop; nop; nop; jmp +0`` (other lengths, other branch kinds).
_CODE_A = b"\xb8\x01\x00\x00\x00\xc3" + b"\x90" * 58
_CODE_B = b"\x90\x90\x90\xeb\x00" + b"\x90" * 59


class _OneMapping:
    """A lookup that maps [0x400000, 0x400040) to ``obj`` at file offset 0 (user space of a thread)."""

    def __init__(self, obj):
        self.obj = obj
        self.pid, self.tid, self.time = 1, 1, 0

    def __call__(self, ip, kernel):
        return (0x400000, 0x400040, 0, self.obj) if 0x400000 <= ip < 0x400040 and not kernel else None


def _two_builds(tmp_path):
    """Two files of one name and other build-ids, each in a build-id cache, as perf's registry finds them."""
    objects = CodeObjects(buildid_dir=str(tmp_path))
    out = []
    for bid, code in ((bytes.fromhex("ab" * 20), _CODE_A), (bytes.fromhex("cd" * 20), _CODE_B)):
        h = bid.hex()
        f = tmp_path / ".build-id" / h[:2] / h[2:]
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(code)
        out.append(objects.get("/usr/lib/libc.so.6", bid))
    return objects, out


def test_the_registry_keys_files_of_one_name_apart(tmp_path):
    objects, (a, b) = _two_builds(tmp_path)
    assert a is not b and a.name == b.name
    assert (a.key, b.key) == ("/usr/lib/libc.so.6", "/usr/lib/libc.so.6#1")
    assert objects.get("/usr/lib/libc.so.6", bytes.fromhex("cd" * 20)) is b
    assert CodeObject("x", None).key == "x"


def test_files_of_one_name_never_share_blocks(per_cpu_bigcode, tmp_path):
    _, (a, b) = _two_builds(tmp_path)
    with open_perf_data(str(per_cpu_bigcode)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("b")))
        key, bufs = s.queues()[0]
        qd = perffast.QueueDecoder(s.decode_context(), 0, key, bufs)
        qd.blocks = perffast._Blocks()
        rows, walks = [], []
        for obj in (a, b, a):
            lookup = _OneMapping(obj)
            qd.lookup = lookup
            qd.walker.lookup = lookup
            qd.walker.have_thread = True
            assert qd._block(0x400000)
            rows.append(qd.blocks.index[(obj.key, 0)])
            qd.table = perffast._Table(16)  # the next object's view: a new table
            walks.append(qd.walker.walk(0x400000, 0, 0, False)[:3])  # the walker's own cache too
        assert rows[0] == rows[2] != rows[1]
        cnt_a, len_a = qd.blocks.bk[rows[0]][:2].tolist()
        cnt_b, len_b = qd.blocks.bk[rows[1]][:2].tolist()
        assert (cnt_a, len_a) == (2, 5)  # mov, ret (the bytes up to the branch)
        assert (cnt_b, len_b) == (4, 3)  # three nops, jmp
        assert walks == [(0, 2, 0x400005), (0, 4, 0x400003), (0, 2, 0x400005)]


def test_a_registry_that_cannot_be_a_weak_key_gets_a_cache_of_its_own():
    assert perffast.shared_blocks({}) is not perffast.shared_blocks({})
    registry = CodeObjects()
    assert perffast.shared_blocks(registry) is perffast.shared_blocks(registry)
