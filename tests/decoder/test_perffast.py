"""The compiled perf-mode decoder equals the reference (perfmode + PerfSession.decode_queue).

Differential: every column of every row, the setup failures and the per-step
items of each queue, on generated traces of every program and encoding
variant, on the quipper recording, and on seeded random corruptions and
truncations of their AUX data.
"""

from __future__ import annotations

import io
import random
import shutil

import numpy as np
import pytest

from ptxtest import QUIPPER, slow_after
from ptexport.cli import main
from ptexport import jit
from ptexport.decoder import backend
from ptexport.decoder.compiled import decoder as perffast
from ptexport.decoder.constants import PERIOD_INSTRUCTIONS, PERIOD_MTC, PERIOD_NONE, PERIOD_TICKS
from ptexport.pt import perfpkt_compiled
from ptexport.perfdata import open_perf_data
from ptexport.session.perfsession import DecodeConfig, open_session
from ptexport.samples.columns import COLUMNS as _COLUMNS, EV_CBR, EV_ERROR, EV_INSTRUCTION
from ptexport.pt.perfpkt import tokenize
from ptexport.samples.itrace import parse_itrace

pytestmark = pytest.mark.skipif(not jit.available(), reason="numba not installed")

_MASK = (1 << 64) - 1

VARIANTS = [
    ("loops",),
    ("calls",),
    ("threads",),
    ("forkexec",),
    ("calls", "--timing", "cyc", "--cbr", "30"),
    ("loops", "--timing", "tsc"),
    ("calls", "--mtc-period", "9", "--psb-period", "1024"),
    ("threads", "--ovf", "3", "--corrupt", "3", "--truncate", "2"),
    ("threads", "--per-thread"),
    ("threads", "--cpus", "2"),
    ("calls", "--ptwrite", "fup", "--power"),
    ("loops", "--ptwrite", "nofup"),
    ("calls", "--kcore"),
    ("loops", "--pipe"),
    ("calls", "--no-retcomp", "--ip-compression", "mixed", "--tnt", "long"),
    ("bigcode",),  # new code all along: the walk's kernel (decoder/codewalk_compiled.py) finds each block
    ("bigcode", "--corrupt", "3", "--psb-period", "1024"),
    ("bigcode", "--cpus", "4", "--preempt", "300"),  # 4 CPU queues, one block cache (shared_blocks)
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    made = {}

    def make(variant, branches=8000):
        if (variant, branches) not in made:
            d = tmp_path_factory.mktemp("synth")
            assert main(["synth", "--out", str(d), "--branches", str(branches), "--program", *variant],
                        out=io.StringIO()) == 0
            # --kcore: a directory; --vm: the host's recording (its guest code unread: non-root ips only)
            made[(variant, branches)] = next((d / n for n in ("perf.data", "host.data") if (d / n).exists()), d)
        return made[(variant, branches)]

    return make


def _byte_edits(rng: random.Random, cut: bool = False):
    """An AUX buffer mutation for :func:`assert_same_queues`: 1-12 edits (three in ten delete up to 64
    bytes, the others overwrite one), and with ``cut`` half the time the buffer cut short."""

    def mutate(data: bytes) -> bytes:
        b = bytearray(data)
        if not b:
            return data
        for _ in range(rng.randint(1, 12)):
            i = rng.randrange(len(b))
            if rng.random() < 0.3:
                del b[i:i + rng.randint(1, 64)]
            else:
                b[i] = rng.randrange(256)
        if cut and rng.random() < 0.5:
            b = b[:rng.randrange(len(b) + 1)]
        return bytes(b)

    return mutate


def _norm(v):
    seq = v.tolist() if isinstance(v, np.ndarray) else list(v)  # lists: no float detour in numpy
    return [int(x) & _MASK for x in seq]


def assert_same_queues(path, itrace="be", mutate=None):
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))
        assert perffast.supported(s.decode_context()) is None
        if mutate is not None:
            orig = s._buffers
            done: dict[bytes, bytes] = {}  # the same damage for both decoders

            def buffers(bufs):
                out = orig(bufs)
                for b in out:
                    data = bytes(b.data)
                    if data not in done:
                        done[data] = mutate(data)
                    b.data = done[data]
                return out

            s._buffers = buffers
        total = 0
        for q, (key, bufs) in enumerate(s.queues()):
            ref = s.decode_queue(q, key, bufs)
            fast = perffast.decode_queue(s.decode_context(), q, key, bufs)
            assert len(fast) == len(ref), key
            for c in _COLUMNS:
                assert _norm(fast.cols[c]) == _norm(ref.cols[c]), (key, c)
            assert fast.setup_failures == ref.setup_failures
            assert fast.items_err.tolist() == list(ref.items_err)
            assert fast.items_ts.tolist() == list(ref.items_ts)
            total += len(ref)
        return total


@pytest.mark.parametrize("variant", slow_after(VARIANTS), ids=lambda v: "-".join(x.strip("-") for x in v))
def test_fast_equals_reference_on_generated(traces, variant):
    assert assert_same_queues(traces(variant)) > 7000


@pytest.mark.parametrize("itrace", slow_after(["b", "e", "ce", "re", "cre", "be-o", "be-l", "bep", "p"]))
def test_fast_equals_reference_itrace(traces, itrace):
    assert_same_queues(traces(("threads", "--ovf", "3", "--corrupt", "3", "--truncate", "2")), itrace)


@pytest.mark.parametrize("itrace", slow_after(["bep", "pe", "bwe", "we", "bxwpe"]))
def test_fast_equals_reference_power_events(traces, itrace):
    n = assert_same_queues(traces(("calls", "--ptwrite", "fup", "--power", "--cbr", "30")), itrace)
    assert n >= (7000 if "b" in itrace else 0)


# Instruction samples: periods in instructions (iNi, iN), in TSC ticks (iNt) and in time (iNus/iNns:
# ticks too), alone and with branches/errors/power events (their order in a state), on small traces
# (the reference decodes i1i at ~3 K samples/s).
FAULTY_SMALL = ("threads", "--ovf", "3", "--corrupt", "3", "--truncate", "2")


@pytest.mark.parametrize("itrace", slow_after(["i1i", "i7i", "i2", "i", "i30ns", "i10t", "bei5i", "ce-oi3i", "bepi3i"]))
def test_fast_equals_reference_instructions(traces, itrace):
    n = assert_same_queues(traces(FAULTY_SMALL, 2000), itrace)
    assert n > (2000 if itrace in ("i1i", "i2", "ce-oi3i", "bepi3i", "bei5i") else 0)


@pytest.mark.parametrize("variant, itrace", slow_after([
    (("calls", "--timing", "cyc", "--cbr", "30"), "i10t"),  # tick periods on CYC-refined timestamps
    (("calls", "--timing", "cyc", "--cbr", "30"), "bei4i"),
    (("calls", "--mtc-period", "9", "--psb-period", "1024"), "i20ns"),
    (("calls", "--ptwrite", "fup", "--power"), "bpwxei3i"),
    (("calls", "--kcore"), "i3i"),
    (("calls", "--no-retcomp", "--ip-compression", "mixed", "--tnt", "long"), "i1i"),
], unpack=True), ids=lambda v: v if isinstance(v, str) else "-".join(x.strip("-") for x in v))
def test_fast_equals_reference_instructions_variants(traces, variant, itrace):
    assert assert_same_queues(traces(variant, 1500), itrace) > 0


# --itrace=sN (perf's initial skip, applied by the session): each queue holds a CBR back (code 1,
# SESS_CBR_SEEN kept) while it synthesized fewer than N samples; N past every sample holds all back.
POWER = ("calls", "--ptwrite", "fup", "--power", "--cbr", "30")
CYC_CBR = ("calls", "--timing", "cyc", "--cbr", "30")


@pytest.mark.parametrize("variant, itrace", slow_after([
    (POWER, "s3bep"),
    (POWER, "s50bep"),
    (POWER, "s1p"),
    (POWER, "s-1bep"),  # perf's ULONG_MAX: every CBR held back
    (POWER, "s20bpwxei3i"),
    (CYC_CBR, "s7bep"),
    (CYC_CBR, "s1000pe"),
    (CYC_CBR, "s100bei5i"),
    (FAULTY_SMALL, "s10be"),
    (FAULTY_SMALL, "s5bepi3i"),
    (("threads", "--cpus", "2", "--timing", "cyc", "--cbr", "30"), "s5bep"),
    (("calls", "--power", "--cbr", "30", "--timing", "cyc", "--psb-period", "1024"), "s2000bep"),
    (("threads", "--per-thread"), "s40bep"),
], keep=2, unpack=True), ids=lambda v: v if isinstance(v, str) else "-".join(x.strip("-") for x in v))
def test_fast_equals_reference_initial_skip(traces, variant, itrace):
    assert assert_same_queues(traces(variant, 3000), itrace) > 0


@pytest.mark.parametrize("skip, rest", [(3, "bep"), (40, "bepi7i"), (1000, "be"), (7, "bex")])
def test_session_initial_skip_equal_reference(traces, monkeypatch, skip, rest):
    """decode() with sN: compiled (serial, worker pool; PSB segments without p) == reference, and
    count_samples agrees; the samples kept are those without sN but the first N (errors and CBRs aside)."""
    from ptexport.session import parallel
    itrace = f"s{skip}{rest}"
    path = traces(("threads", "--cpus", "2", "--timing", "cyc", "--cbr", "30", "--psb-period", "512"), 4000)
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))
        ctx = s.decode_context()
        assert backend.compiled_for(ctx)
        assert backend.segmentable(ctx) == ("p" not in rest and "i" not in rest)  # held-back CBRs need the queue's samples before
        counted = parallel.count_samples(s, 2)
        # without p the count is the unskipped one less N (no CBR held back): counted without streaming
        assert parallel.count_samples(s, 1) == parallel._count_streamed(s, 1) == counted
        _queues_equal(parallel.decode_queues(s, 1), parallel.decode_queues(s, 2, min_segment_bytes=600))
    fast = _session_cols(path, itrace)
    pooled = _session_cols(path, itrace, jobs=2)
    unskipped = _session_cols(path, rest)
    from ptexport.session import queues_compiled as perffast_order
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)
    monkeypatch.setattr(perffast_order, "numba", None)
    ref = _session_cols(path, itrace)
    assert fast == ref
    assert pooled == ref
    errors = ref["kind"].count(EV_ERROR)
    assert counted == (len(ref["kind"]) - errors, errors)

    def samples(cols):
        return [(k, t, ip, a) for k, t, ip, a in zip(cols["kind"], cols["tsc"], cols["ip"], cols["addr"])
                if k not in (EV_ERROR, EV_CBR)]

    assert len(samples(unskipped)) > skip
    assert samples(ref) == samples(unskipped)[skip:]


# Sample period types: perf (intel_pt_alloc_queue) gives instruction samples a period in instructions
# or ticks and leaves it unset without them; the session does the same (never MTC).  The decoders
# follow perf's intel_pt_decoder for every type all the same: forced here, they agree.
@pytest.mark.parametrize("variant", [("calls", "--timing", "mtc", "--mtc-period", "5"), FAULTY_SMALL + ("--cpus", "2"),
                                     CYC_CBR], ids=["mtc", "faulty-2cpus", "cyc"])
@pytest.mark.parametrize("itrace, period_type, period", slow_after([
    ("i", PERIOD_MTC, 0), ("bei", PERIOD_MTC, 0), ("bepi", PERIOD_MTC, 7),  # a sample at an MTC after an insn
    ("i", PERIOD_NONE, 0), ("bei", PERIOD_NONE, 5),  # instruction samples without a period: none
    ("be", PERIOD_INSTRUCTIONS, 3), ("be", PERIOD_TICKS, 1000), ("bep", PERIOD_MTC, 0),  # no instruction samples
], keep=2, unpack=True))
def test_fast_equals_reference_period_types(traces, monkeypatch, variant, itrace, period_type, period):
    from ptexport.session import perfsession
    orig = perfsession.PerfSession.decode_context

    def forced(self):
        self.params.period_type, self.params.period = period_type, period
        return orig(self)

    monkeypatch.setattr(perfsession.PerfSession, "decode_context", forced)
    n = assert_same_queues(traces(variant, 3000), itrace)
    assert n > (1000 if "b" in itrace else -1)


# Hop and leap modes (--itrace=q, qq: perf's intel_pt_hop_trace; ips from FUP/TIP/PSB+ only, no code
# walked), with branches, errors, instructions (period 1) and power events, over the generator's
# programs, layouts, timings, faults and VMs.
HOP_VARIANTS = [
    ("loops",),
    ("calls", "--timing", "cyc", "--cbr", "30"),
    ("calls", "--mtc-period", "9", "--psb-period", "1024"),
    ("threads", "--cpus", "2", "--preempt", "500"),
    ("threads", "--per-thread"),
    FAULTY_SMALL,
    ("forkexec", "--cpus", "2", "--ovf", "3", "--corrupt", "3", "--psb-period", "1024"),
    ("calls", "--ptwrite", "fup", "--power"),
    ("events", "--power", "--ovf", "2"),
    ("calls", "--no-retcomp", "--ip-compression", "mixed", "--tnt", "long"),
    ("calls", "--vm", "mixed"),
    ("calls", "--kcore"),
]


@pytest.mark.parametrize("variant", slow_after(HOP_VARIANTS, keep=3), ids=lambda v: "-".join(x.strip("-") for x in v))
@pytest.mark.parametrize("quick", ["q", "qq"])
def test_fast_equals_reference_hop_leap(traces, variant, quick):
    path = traces(variant)
    n = 0
    for kinds in ("b", "bei", "bepwx"):
        n += assert_same_queues(path, kinds + quick)
    assert n > (50 if quick == "q" else 1)  # (leap: about a sample per PSB)


@pytest.mark.parametrize("itrace", slow_after(["bq", "beqq", "ceq", "iq", "beiqq", "be-oq", "pq"]))
def test_fast_equals_reference_hop_leap_itrace(traces, itrace):
    assert_same_queues(traces(MULTI), itrace) > 0


@pytest.mark.parametrize("seed", slow_after(range(4), keep=1))
def test_fast_equals_reference_hop_leap_on_damaged_aux(traces, seed):
    """Hop and leap through errors: a leap scans for a PSB from inside a packet (re-tokenizing)."""
    rng = random.Random(100 + seed)
    path = traces(("calls",)) if seed % 2 else QUIPPER

    mutate = _byte_edits(rng)
    assert_same_queues(path, "beiqq" if seed >= 2 else "beiq", mutate=mutate)


def test_block_rests_equal_decoded_blocks(traces, monkeypatch):
    """The blocks where walks go on after an instruction sample (rests of known blocks, taken from their
    boundaries) are the blocks decoding the code there gives."""
    path = traces(FAULTY_SMALL, 2000)

    def blocks():
        with open_perf_data(str(path)) as pd:
            s = open_session(pd, DecodeConfig(itrace=parse_itrace("i3i")))
            out = {}
            for q, (key, bufs) in enumerate(s.queues()):
                qd = perffast.QueueDecoder(s.decode_context(), q, key, bufs)
                qd.run()
                b = qd.blocks
                for k, row in b.index.items():
                    cnt, nbytes, op, br, ln, rel, b0, n = b.bk[row].tolist()
                    out[k] = (cnt, nbytes, op, br, ln, rel, b.bnd[b0:b0 + n].tolist())
            return out

    derived = blocks()
    monkeypatch.setattr(perffast._Blocks, "rest", lambda self, name, offset, room: None)
    decoded = blocks()
    assert derived == decoded
    assert sum(v[0] > 1 for v in derived.values()) > 10


@pytest.mark.parametrize("itrace", slow_after(["i100", "bei3i"]))
def test_fast_equals_reference_instructions_on_quipper(itrace):
    assert assert_same_queues(QUIPPER, itrace) > 0


def test_fast_equals_reference_on_quipper():
    assert assert_same_queues(QUIPPER) > 0


@pytest.mark.parametrize("seed", slow_after(range(8)))
def test_fast_equals_reference_on_damaged_aux(traces, seed):
    rng = random.Random(seed)
    path = traces(("calls",)) if seed % 2 else QUIPPER
    itrace = "bei7i" if seed >= 6 else "be"  # instruction periods through errors and resyncs

    mutate = _byte_edits(rng, cut=True)
    assert_same_queues(path, itrace, mutate=mutate)


def test_tokenizer_equals_reference(traces):
    rng = random.Random(7)
    with open_perf_data(str(traces(("calls", "--timing", "cyc", "--cbr", "30")))) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        datas = [bytes(pd.aux_data(b)) for _, bufs in s.queues() for b in bufs]
    # (Random bytes are left out: the reference tokenizer raises OverflowError on a CYC
    # packet whose payload passes 64 bits; the compiled one wraps it like perf's u64.)
    datas.append(bytes(b ^ (rng.randrange(256) if rng.random() < 0.01 else 0) for b in datas[0]))
    for data in datas:
        for d in (data, data[: len(data) // 3], data[5:]):
            a, b = tokenize(d), perfpkt_compiled.tokenize(d)
            for c in ("kind", "count", "payload", "pos", "size"):
                assert np.array_equal(getattr(a, c), getattr(b, c)), c


# Event Trace (--itrace=I; recordings made with --event-trace: CFE.INTR at timer interrupts, every third
# a page fault with an EVD, CFE.IRET before each return to user space, RFLAGS.IF in MODE.Exec): evt and
# iflag samples, the EVD rows before an evt row, and RFLAGS.IF's D/t bits in every sample's flags.
EVENT_TRACE = [
    ("threads", "--cpus", "2", "--preempt", "400", "--event-trace", "--seed", "5"),
    ("threads", "--per-thread", "--preempt", "300", "--event-trace", "--seed", "5"),
    ("threads", "--cpus", "2", "--preempt", "350", "--ovf", "3", "--timing", "cyc", "--event-trace", "--seed", "5"),
    ("calls", "--preempt", "250", "--power", "--ptwrite", "fup", "--cbr", "30", "--event-trace"),
]


@pytest.mark.parametrize("variant", slow_after(EVENT_TRACE), ids=lambda v: "-".join(x.strip("-") for x in v[:5]))
@pytest.mark.parametrize("itrace", ["I", "bI", "be", "iI", "Ibe", "Ii3i", "Ibepwx", "Ibeq"])
def test_fast_equals_reference_event_trace(traces, variant, itrace):
    n = assert_same_queues(traces(variant, 3000), itrace)
    assert n > (3000 if "b" in itrace and "q" not in itrace else 20)


def test_event_trace_rows_carry_evds_and_interrupt_flags(traces):
    """The compiled rows have what the parity above compares on: EVD rows (kind -2) before evt rows,
    iflag rows, and branches flagged D (interrupts disabled) and t (toggled)."""
    from ptexport.samples.columns import EV_BRANCH, EV_EVT, EV_IFLAG
    from ptexport.samples.flags import IpFlag
    with open_perf_data(str(traces(EVENT_TRACE[0], 3000))) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("Ibe")))
        kinds, flags = [], []
        for q, (key, bufs) in enumerate(s.queues()):
            rows = perffast.decode_queue(s.decode_context(), q, key, bufs)
            kinds += rows.cols["kind"].tolist()
            flags += rows.cols["flags"].tolist()
    evd = [i for i, k in enumerate(kinds) if k == -2]
    assert evd and all(kinds[i + 1] in (-2, EV_EVT) for i in evd)
    assert kinds.count(EV_EVT) > 20 and kinds.count(EV_IFLAG) > 0
    dt = int(IpFlag.INTR_DISABLE | IpFlag.INTR_TOGGLE)
    assert any(k == EV_BRANCH and f & dt == dt for k, f in zip(kinds, flags))


@pytest.mark.parametrize("seed", slow_after(range(4), keep=1))
def test_fast_equals_reference_event_trace_on_damaged_aux(traces, seed):
    """Event Trace through errors and resyncs: CFE/EVD/MODE.Exec waiting when an OVF or a resync
    clears them, CFE/EVD where a TIP must come (resync), too many EVDs after a damaged byte."""
    rng = random.Random(200 + seed)
    path = traces(EVENT_TRACE[seed % 2], 3000)

    mutate = _byte_edits(rng)
    assert_same_queues(path, "Ibei5i" if seed >= 2 else "Ibe", mutate=mutate)


# ---------------------------------------------------------------- session level

def _session_cols(path, itrace="be", jobs=1):
    with open_perf_data(str(path)) as pd:
        cols = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace))).decode(jobs)
    # optional columns (the EVD rows of event-trace sessions) are None in both or equal
    return {c: None if getattr(cols, c) is None else _norm(getattr(cols, c)) for c in cols.__dataclass_fields__}


MULTI = ("threads", "--cpus", "2", "--ovf", "2", "--corrupt", "2", "--truncate", "2")


def test_session_fast_order_and_pool_equal_reference(traces, monkeypatch):
    """decode(): compiled queues + compiled heap order + worker pool == pure-Python reference."""
    path = traces(MULTI)
    fast = _session_cols(path)
    pooled = _session_cols(path, jobs=2)
    from ptexport.session import queues_compiled as perffast_order
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)
    monkeypatch.setattr(perffast_order, "numba", None)
    ref = _session_cols(path)
    assert len(ref["kind"]) > 7000
    assert fast == ref
    assert pooled == ref


@pytest.mark.parametrize("itrace", ["bepq", "beipqq"])
def test_session_hop_leap_equal_reference(traces, monkeypatch, itrace):
    """decode() in hop/leap mode: compiled queues, heap order and worker pool == the reference."""
    path = traces(MULTI + ("--psb-period", "512"))
    fast = _session_cols(path, itrace)
    pooled = _session_cols(path, itrace, jobs=2)
    from ptexport.session import queues_compiled as perffast_order
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")
    monkeypatch.setattr(perffast_order, "numba", None)
    ref = _session_cols(path, itrace)
    assert len(ref["kind"]) > 10
    assert fast == ref
    assert pooled == ref


def test_session_event_trace_equals_reference(traces, monkeypatch):
    """decode() of an Event Trace session: compiled queues, heap order and worker pool == the reference,
    the EVD columns (SampleColumns.evd_*) included."""
    path = traces(EVENT_TRACE[2], 3000)
    fast = _session_cols(path, "Ibe")
    pooled = _session_cols(path, "Ibe", jobs=2)
    from ptexport.session import queues_compiled as perffast_order
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")
    monkeypatch.setattr(perffast_order, "numba", None)
    ref = _session_cols(path, "Ibe")
    assert ref["evd_row"] and len(ref["kind"]) > 3000
    assert fast == ref
    assert pooled == ref


@pytest.mark.parametrize("itrace,variant", [("Ibe", EVENT_TRACE[2]), ("bI", EVENT_TRACE[0])])
def test_dump_count_equals_dump_lines_event_trace(traces, itrace, variant):
    path = traces(variant, 3000)
    lines, counted, pooled = io.StringIO(), io.StringIO(), io.StringIO()
    assert main(["dump", "branches", str(path), f"--itrace={itrace}", "--jobs", "1"], out=lines) == 0
    assert main(["dump", "branches", "--count", str(path), f"--itrace={itrace}", "--jobs", "1"], out=counted) == 0
    assert main(["dump", "branches", "--count", str(path), f"--itrace={itrace}", "--jobs", "2"], out=pooled) == 0
    text = lines.getvalue().splitlines()
    n_err = sum("instruction trace error" in t for t in text)
    assert counted.getvalue() == f"{len(text) - n_err} samples, {n_err} errors\n"
    assert pooled.getvalue() == counted.getvalue()


@pytest.mark.parametrize("itrace", ["b", "be", "ce", "bei9i", "beq", "bipqq", "s30bep", "s5bei9i"])
def test_dump_count_equals_dump_lines(traces, itrace):
    path = traces(MULTI)
    lines, counted, pooled = io.StringIO(), io.StringIO(), io.StringIO()
    assert main(["dump", "branches", str(path), f"--itrace={itrace}", "--jobs", "1"], out=lines) == 0
    assert main(["dump", "branches", "--count", str(path), f"--itrace={itrace}", "--jobs", "1"], out=counted) == 0
    assert main(["dump", "branches", "--count", str(path), f"--itrace={itrace}", "--jobs", "2"], out=pooled) == 0
    text = lines.getvalue().splitlines()
    n_err = sum("instruction trace error" in t for t in text)
    assert counted.getvalue() == f"{len(text) - n_err} samples, {n_err} errors\n"
    assert pooled.getvalue() == counted.getvalue()


# ------------------------------------------------------- PSB segments in parallel

SEGMENTED = [  # short PSB periods: many places to cut
    ("calls", "--psb-period", "1024"),
    ("calls", "--timing", "cyc", "--cbr", "30", "--psb-period", "1024"),
    ("calls", "--no-retcomp", "--ip-compression", "mixed", "--tnt", "long", "--psb-period", "1024"),
    MULTI + ("--psb-period", "512"),
    ("calls", "--ovf", "3", "--corrupt", "3", "--truncate", "2", "--psb-period", "1024"),
    ("calls", "--power", "--cbr", "30", "--timing", "cyc", "--psb-period", "1024"),
]


def _queues_equal(a_parts, b_parts):
    assert len(a_parts) == len(b_parts)
    for a, b in zip(a_parts, b_parts):
        for c in _COLUMNS:
            assert _norm(a.cols[c]) == _norm(b.cols[c]), c
        assert np.asarray(a.items_err).tolist() == np.asarray(b.items_err).tolist()
        assert np.asarray(a.items_ts).tolist() == np.asarray(b.items_ts).tolist()
        assert a.setup_failures == b.setup_failures


@pytest.mark.slow
@pytest.mark.parametrize("variant", SEGMENTED + [None], ids=lambda v: "quipper" if v is None else "-".join(
    x.strip("-") for x in v))
def test_segments_decoded_in_parallel_equal_serial(traces, variant):
    """Queues cut at PSBs (small segments: many joins), decoded by 4 workers, stitched == serial."""
    from ptexport.session import parallel
    path = QUIPPER if variant is None else traces(variant)
    stats = []  # each session's DecodeStats
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        serial = parallel.decode_queues(s, 1)
        par = parallel.decode_queues(s, 4, min_segment_bytes=600)
        _queues_equal(serial, par)
        stats.append(s.decode_stats)
    with open_perf_data(str(path)) as pd:  # with power events (export's default: bep)
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("bep")))
        serial = parallel.decode_queues(s, 1)
        par = parallel.decode_queues(s, 4, min_segment_bytes=600)
        _queues_equal(serial, par)
        assert parallel.count_samples(s, 4, min_segment_bytes=600) == parallel.count_samples(s, 1)
        stats.append(s.decode_stats)
    # the joins agreed (no segment decoded twice); not with CBR+CYC: since perf 6.1.y restarts CYC
    # counting at a CBR change, a decoder started at a PSB times CYC packets from that PSB's CBR,
    # the serial one from its last MTC, and the two can stay apart for a whole segment.
    if variant is not None and "--cbr" not in variant:
        assert sum(st.matched for st in stats) > 0
        assert sum(st.redone for st in stats) == 0


def _segments_equal_serial(path, itrace: str, min_bytes: int = 4000):
    """The queues of ``path`` decoded in PSB segments by 4 workers == serial, counted alike; the
    session's DecodeStats (joins agreed / segments decoded again) and the serial parts."""
    from ptexport.session import parallel
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace(itrace)))
        assert backend.compiled_for(s.decode_context()) and backend.segmentable(s.decode_context())
        serial = parallel.decode_queues(s, 1)
        par = parallel.decode_queues(s, 4, min_segment_bytes=min_bytes)
        _queues_equal(serial, par)
        assert parallel.count_samples(s, 4, min_segment_bytes=min_bytes) == parallel.count_samples(s, 1)
        return s.decode_stats, serial


@pytest.mark.parametrize("itrace", ["beq", "beqq", "bepq"])
@pytest.mark.parametrize("variant", [SEGMENTED[0], SEGMENTED[3], SEGMENTED[4]], ids=["calls", "multi", "faults"])
def test_hop_leap_segments_decoded_in_parallel_equal_serial(traces, variant, itrace):
    """Hop and leap modes in PSB segments: stitched == serial, and the joins agree (segmentable).

    A segment decoded from its PSB reports that PSB and then its ip (perf's resample) where the serial
    decoder hops over the PSB in one state, so a join agrees from the next PSB on (leap) or the next
    packet (hop): segments here hold several PSBs."""
    st, _ = _segments_equal_serial(traces(variant, 40000), itrace)
    assert st.matched > 0 and st.redone == 0


@pytest.mark.parametrize("itrace", ["Ibe", "bepI"])
@pytest.mark.parametrize("variant", [EVENT_TRACE[0], ("calls", "--preempt", "250", "--ptwrite", "fup", "--event-trace")],
                         ids=["threads", "calls-ptwrite"])
def test_event_trace_segments_decoded_in_parallel_equal_serial(traces, variant, itrace):
    """Event Trace in PSB segments: RFLAGS.IF, MODE.Exec/CFE waiting for an FUP and the EVDs before
    a CFE are joined state (session/parallel.py's _cmp_mask/_same_state); stitched == serial, and the
    joins agree (every PSB+ states RFLAGS.IF in its MODE.Exec; no --power or --cbr here: CBR packets keep
    CYC_REF_TIMESTAMP apart, see the test above)."""
    st, _ = _segments_equal_serial(traces(variant + ("--psb-period", "1024"), 40000), itrace)
    assert st.matched > 0 and st.redone == 0


@pytest.mark.parametrize("itrace", ["bei100t", "i1us", "ei300tg", "bepi1us"])
@pytest.mark.parametrize("variant", [SEGMENTED[0], ("calls", "--timing", "cyc", "--psb-period", "1024"), SEGMENTED[3],
                                     SEGMENTED[4]], ids=["calls", "cyc", "multi", "faults"])
def test_time_period_instruction_segments_decoded_in_parallel_equal_serial(traces, variant, itrace):
    """Instruction samples with a period in time in PSB segments: a segment decoded from its PSB
    samples from its first period boundary on as the serial decoder does (the period's window,
    LAST_MASKED_TS, is joined state; each PSB restarts the period), and the instructions since the last
    sample (the period, the IPC with CYC) are raw totals made differences after the join: stitched ==
    serial, and the joins agree."""
    st, serial = _segments_equal_serial(traces(variant, 40000), itrace)
    assert sum(int((np.asarray(p.cols["kind"]) == EV_INSTRUCTION).sum()) for p in serial) > 200
    assert st.matched > st.redone


def test_instruction_queues_whole_in_worker_pool(traces, monkeypatch):
    """Instruction samples every N instructions: no PSB segments (the period count carries across PSBs),
    compiled whole queues in workers == serial == the reference."""
    from ptexport.session import parallel
    path = traces(MULTI + ("--psb-period", "512"), 3000)
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("bei7i")))
        assert backend.compiled_for(s.decode_context()) and not backend.segmentable(s.decode_context())
        serial = parallel.decode_queues(s, 1)
        par = parallel.decode_queues(s, 4, min_segment_bytes=600)
        _queues_equal(serial, par)
        assert parallel.count_samples(s, 4, min_segment_bytes=600) == parallel.count_samples(s, 1)
    fast = _session_cols(path, "bei7i", jobs=2)
    assert fast["kind"].count(2) > 1000  # instruction samples (EV_INSTRUCTION)
    from ptexport.session import queues_compiled as perffast_order
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)
    monkeypatch.setattr(perffast_order, "numba", None)
    assert _session_cols(path, "bei7i") == fast


def test_reference_queues_in_worker_pool(traces, monkeypatch):
    """The reference backend (options the compiled decoder does not cover): whole queues in workers == serial."""
    from ptexport.session import parallel
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")
    with open_perf_data(str(traces(MULTI))) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("bei10000is3")))
        assert not backend.compiled_for(s.decode_context())
        serial = parallel.decode_queues(s, 1)
        pooled = parallel.decode_queues(s, 2)
        assert len(serial) == 2
        for a, b in zip(serial, pooled):
            for c in _COLUMNS:
                assert _norm(a.cols[c]) == _norm(b.cols[c]), c


def test_token_window_slides(traces, monkeypatch):
    """A one-buffer token window (memory bound) gives the same rows as the reference."""
    monkeypatch.setattr(perffast, "_WINDOW", 1)
    path = traces(("calls", "--ovf", "2", "--truncate", "2", "--branches", "20000"))
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        assert max(len(b) for _, b in s.queues()) > 1
    assert_same_queues(path)


# ------------------------------------------------- timeless decoding (no TSC, or --itrace=Z)
#
# perf decodes a timeless queue late (a per-thread queue at its thread's EXIT, the others at the end):
# the thread of a CPU queue is the one current on its CPU at the end (no context switch is followed),
# code is read in the maps of the end, no time filter runs and samples have no time.


@pytest.mark.parametrize("variant", slow_after(VARIANTS), ids=lambda v: "-".join(x.strip("-") for x in v))
def test_fast_equals_reference_timeless(traces, variant):
    # (forkexec: the code of the processes that exec'd is not in the maps of the end: mostly errors)
    assert assert_same_queues(traces(variant), "beZ") > (100 if variant[0] == "forkexec" else 7000)


@pytest.mark.parametrize("variant, itrace", slow_after([
    (MULTI, "bepZ"),
    (MULTI, "ceZ"),
    (MULTI, "creZ"),
    (MULTI, "be-oZ"),
    (MULTI, "be-lZ"),
    (("forkexec", "--cpus", "2"), "beZ"),  # exec: the maps of the end are not those of the start
    (("forkexec", "--per-thread"), "beZ"),
    (("threads", "--per-thread", "--ovf", "2", "--truncate", "2"), "bepZ"),
    (("calls", "--ptwrite", "fup", "--power", "--cbr", "30"), "bxwpeZ"),
    (("calls", "--timing", "cyc", "--cbr", "30"), "bepZ"),
], unpack=True), ids=lambda v: v if isinstance(v, str) else "-".join(x.strip("-") for x in v))
def test_fast_equals_reference_timeless_itrace(traces, variant, itrace):
    assert assert_same_queues(traces(variant), itrace) > 100


@pytest.mark.parametrize("variant, itrace", slow_after([
    (FAULTY_SMALL, "bei5iZ"),
    (FAULTY_SMALL, "i3iZ"),
    (FAULTY_SMALL, "i10tZ"),
    (("threads", "--per-thread"), "i7iZ"),
], unpack=True), ids=lambda v: v if isinstance(v, str) else "-".join(x.strip("-") for x in v))
def test_fast_equals_reference_timeless_instructions(traces, variant, itrace):
    assert assert_same_queues(traces(variant, 2000), itrace) > 0


def test_timeless_cpu_queue_has_the_thread_of_the_end(traces):
    """The inputs above do exercise it: a timed CPU queue changes threads, a timeless one has the
    thread current on its CPU at the end throughout, and no time."""
    path = traces(("threads", "--cpus", "2"))
    with open_perf_data(str(path)) as pd:
        timed = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        tl = open_session(pd, DecodeConfig(itrace=parse_itrace("beZ")))
        assert tl.timeless and not timed.timeless
        for q, (key, bufs) in enumerate(tl.queues()):
            assert key[0] == "cpu"
            a = perffast.decode_queue(timed.decode_context(), q, key, bufs)
            b = perffast.decode_queue(tl.decode_context(), q, key, bufs)
            assert len(set(a.cols["tid"].tolist())) > 1
            assert set(zip(b.cols["pid"].tolist(), b.cols["tid"].tolist())) == {tl.decode_context().end_who(key[1])}
            assert not b.cols["time"].any() and a.cols["time"].all()


@pytest.fixture(scope="module")
def no_tsc(tmp_path_factory):
    """Recordings whose intel_pt event has no TSC (config without the TSC bit: perf's timeless decoding
    without Z).  ``ptexport synth`` has no such option (its traces always carry TSC): the generator's
    pt_config is patched, so the trace keeps its TSC packets and only the recording says "no TSC"."""
    from ptexport.perfdata.constants import IntelPTConfig
    from ptexport.synth import sideband

    made = {}

    def make(*variant):
        if variant not in made:
            d = tmp_path_factory.mktemp("notsc")
            orig = sideband.pt_config
            with pytest.MonkeyPatch.context() as m:
                m.setattr(sideband, "pt_config", lambda opts: orig(opts) & ~(1 << IntelPTConfig.TSC))
                assert main(["synth", "--out", str(d), "--branches", "6000", "--program", *variant],
                            out=io.StringIO()) == 0
            made[variant] = d / "perf.data"
        return made[variant]

    return make


@pytest.mark.parametrize("variant", [("threads", "--cpus", "2", "--ovf", "2", "--truncate", "1"),
                                     ("threads", "--per-thread")], ids=["cpus", "per-thread"])
def test_fast_equals_reference_without_tsc(no_tsc, variant, monkeypatch):
    path = no_tsc(*variant)
    with open_perf_data(str(path)) as pd:
        assert open_session(pd, DecodeConfig(itrace=parse_itrace("be"))).timeless
    assert assert_same_queues(path, "bep") > 5000
    # dump branches: the compiled path prints what the reference prints
    fast, ref = io.StringIO(), io.StringIO()
    assert main(["dump", "branches", str(path), "--itrace=be"], out=fast) == 0
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")
    assert main(["dump", "branches", str(path), "--itrace=be"], out=ref) == 0
    assert fast.getvalue() == ref.getvalue() and len(fast.getvalue().splitlines()) > 5000


@pytest.mark.parametrize("variant", [MULTI, ("threads", "--per-thread", "--ovf", "2", "--truncate", "2")],
                         ids=["cpus", "per-thread"])
def test_session_timeless_equals_reference(traces, variant, monkeypatch):
    """decode() and dump branches, --itrace=bepZ: compiled (serial, worker pool, PSB segments) == reference."""
    from ptexport.session import parallel
    path = traces(variant)
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("bepZ")))
        assert backend.choose(s.decode_context()) == backend.Choice(True)
        _queues_equal(parallel.decode_queues(s, 1), parallel.decode_queues(s, 4, min_segment_bytes=600))
    fast = _session_cols(path, "bepZ")
    pooled = _session_cols(path, "bepZ", jobs=2)
    text = io.StringIO()
    assert main(["dump", "branches", str(path), "--itrace=bepZ"], out=text) == 0
    monkeypatch.setenv("PTEXPORT_REFERENCE", "1")  # the reference backend (decoder/backend.py)
    ref = _session_cols(path, "bepZ")
    ref_text = io.StringIO()
    assert main(["dump", "branches", str(path), "--itrace=bepZ"], out=ref_text) == 0
    assert len(ref["kind"]) > 7000
    assert fast == ref
    assert pooled == ref
    assert text.getvalue() == ref_text.getvalue()


@pytest.mark.slow
@pytest.mark.perf
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf inject makes the VM recording")
def test_fast_equals_reference_timeless_vm(tmp_path):
    """Guest code (kernel and user, guest sideband injected by perf) decoded timeless: the guest
    thread on the VCPU thread of the end, the guest maps of the end."""
    from vmexporttest import make_vm_trace
    vm = make_vm_trace(tmp_path, guest="mixed", seed=3, branches=4000)
    assert assert_same_queues(vm.data, "beZ") > 3000
    assert assert_same_queues(vm.data, "bepZ") > 3000


def test_backends_have_the_same_entry_points():
    """Both backends take a DecodeContext through the same entry points (decoder/backend.py calls either)."""
    import inspect

    from ptexport.decoder.reference import queue as reference_queue

    for name in ("supported", "decode_queue"):
        ref, comp = inspect.signature(getattr(reference_queue, name)), inspect.signature(getattr(perffast, name))
        assert [(p.name, p.default) for p in ref.parameters.values()] == \
            [(p.name, p.default) for p in comp.parameters.values()], name


def test_backend_choice_says_why(traces, monkeypatch):
    """decoder/backend.py takes the compiled backend, else says why the reference."""
    with open_perf_data(str(traces(("loops",)))) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("be")))
        assert backend.choose(s.decode_context()) == backend.Choice(True)
        assert backend.choose(open_session(pd, DecodeConfig(itrace=parse_itrace("bes3"))).decode_context()).compiled
        with monkeypatch.context() as m:  # a mode the compiled backend says it does not compile
            m.setattr(perffast, "supported", lambda ctx: "this mode is not compiled yet (test)")
            choice = backend.choose(s.decode_context())
        assert not choice.compiled and "(test)" in choice.reason and choice.module.__name__.endswith("reference.queue")
        monkeypatch.setenv("PTEXPORT_REFERENCE", "1")
        choice = backend.choose(s.decode_context())
        assert not choice.compiled and "PTEXPORT_REFERENCE" in choice.reason
        monkeypatch.delenv("PTEXPORT_REFERENCE")
        monkeypatch.setattr(jit, "numba", None)
        monkeypatch.setattr(jit, "PROBLEM", "numba cannot be imported (test)")
        assert backend.choose(s.decode_context()) == backend.Choice(False, "numba cannot be imported (test)")


@pytest.mark.parametrize("variant", SEGMENTED[:4], ids=lambda v: "-".join(x.strip("-") for x in v))
def test_counting_that_stops_at_every_buffer_to_release_pages_counts_the_same(traces, variant, monkeypatch):
    """dump branches --count --jobs 1 stops the kernel every RELEASE_BUFFERS AUX buffers and drops the
    trace read so far from the resident set: with a stop at every buffer, the same samples and errors
    (and the pages were released each time)."""
    from ptexport.session import parallel
    path = traces(variant, 300_000)  # AUX buffers of 64 KiB: several a queue
    with open_perf_data(str(path)) as pd:
        s = open_session(pd, DecodeConfig(itrace=parse_itrace("bep")))
        whole = parallel.count_samples(s, 1)
        released = []
        real = pd.release_pages
        monkeypatch.setattr(pd, "release_pages", lambda: (released.append(1), real())[1])
        monkeypatch.setattr(parallel, "RELEASE_BUFFERS", 1)
        assert parallel.count_samples(s, 1) == whole
        nbufs = sum(len(b) for _, b in s.queues())
        assert nbufs > len(s.queues()) and len(released) >= nbufs - len(s.queues())
