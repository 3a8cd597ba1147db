"""The compiled perf decoder backend: the numba twin of :func:`ptexport.decoder.reference.queue.decode_queue`.

:func:`decode_queue` returns what the reference's ``decode_queue`` returns
(rows with perf's samples, setup failures, and the per-step items the
session's merge needs) for ``--itrace`` selections made of branches (``b``,
``c``, ``r``), instructions (``i`` with a period in instructions ``iN``/``iNi``
or in time ``iNt``/``iNus``/``iNns``), transactions (``x``), ptwrite (``w``),
power events (``p``: PSB, CBR, MWAIT, PWRE, EXSTOP, PWRX) and errors (``e``,
with ``-o``/``-l``), timed or timeless (no TSC, or ``Z``: one context per
queue, the thread and maps of the end), in perf's hop and leap modes too (``q``,
``qq``: no code walked) and Event Trace (``I``: CFE/EVD samples, and RFLAGS.IF in
every sample's flags when the recording has it) - everything but skips (``s``); the
decoder itself is :mod:`ptexport.decoder.compiled.kernel`, a port of
:mod:`ptexport.decoder.reference.decoder` (which stays the readable reference; the
differential tests in ``tests/decoder/test_perffast.py`` hold them equal).

How code is read.  The kernel answers perf's ``walk_insn`` from a table of
basic blocks keyed by IP.  IP -> code depends on the address space the
walker sees (the process current on the CPU at the last sample, the maps at
that time), so there is one table per *context* (pid, whether a thread is
known, which map generation of that pid and the kernel is live); the kernel
stops when the sample time leaves the TSC range of its context, and Python
switches tables.  Guest (non-root) code has a second table per *guest
context*, what ``MapLookup.guest`` (decoder/context.py) reads: the guest machine
of the host process, the guest process current on the host thread's VCPU
(guest sideband) and the generation of that guest's maps.  A miss (a block
not in the table yet), a walk the table cannot answer (code that cannot be
read, a block crossing a mapping's end) or a PSB found inside a packet
returns to Python, which asks the
walker (:class:`~ptexport.decoder.codewalk_compiled.PerfCodeWalker`, the reference's walk with
its instructions decoded by a kernel) or re-tokenizes, and the kernel re-runs that decode step from a snapshot.
A walk bounded by an instruction count (the next instruction sample is due
inside the block) stops at the boundary the block's row keeps for that
instruction; the walk after it starts a block of its own (the rest).

The backend reads the session only through a
:class:`~ptexport.decoder.context.DecodeContext`; it has the reference's entry
points (:func:`supported`, :func:`decode_queue`, see
:mod:`ptexport.decoder.reference.queue`), and :mod:`ptexport.decoder.backend`
picks between the two (without numba, :func:`supported` says why not and the
reference decodes).  See docs/architecture.md.
"""

from __future__ import annotations

from bisect import bisect_right

import threading
import weakref
from typing import Any

import numpy as np

from ptexport.decoder.compiled import kernel as K
from ptexport import jit
from ptexport.decoder.codewalk_compiled import PerfCodeWalker
from ptexport.decoder.context import TIMELESS_MAP_TIME, DecodeContext, queue_tid
from ptexport.decoder.filters import QueueTimeFilter, psb_positions
from ptexport.pt.perfpkt import PacketColumns
from ptexport.pt.perfpkt_compiled import tokenize as tokenize_fast
from ptexport.decoder.constants import EVD_ROW, PERIOD_TICKS

_MASK64 = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1
_STACK = 1 << 16
_OUT_CAP = 1 << 18
# Bytes of trace tokenized at a time: the tokens take ~14 bytes per trace byte (more while the
# window slides), so this bounds the decoder's memory (4 MB gave ~60 MB peaks; 1 MB ~15 MB).
_WINDOW = 1 << 20


def supported(ctx: DecodeContext) -> str | None:
    """None when this backend reproduces the reference's rows for the session's options; else why not.

    Every sample period type compiles: perf (intel_pt_alloc_queue) and the
    session give instruction samples a period in instructions or TSC ticks
    (iNus/iNns converted) and no period without them; the kernel follows the
    reference for the others (none with ``i``, MTC, a period with branches
    only) all the same.  ``sN`` compiles: a CBR held back (code 1) is decided
    by the session as the reference's is.  Event Trace compiles.  So only a
    numba that cannot load leaves a session to the reference.
    """
    return jit.unavailable_reason() or None


def segmentable(ctx: DecodeContext) -> bool:
    """True when a queue may be decoded in PSB segments joined by state (session/parallel.py),
    given that this backend decodes the session (:func:`supported`).

    Not with instruction samples every N instructions: their period counter
    carries across PSBs (perf resets it only at a sample), so a segment decoded
    from its PSB samples other instructions than the serial decoder and never
    joins.  With a period in time (``iNus``, ``iNt``: perf's ticks) they are: the
    period's state is the timestamp's window of the last sample
    (``LAST_MASKED_TS``, compared by the join) and each PSB restarts the period
    (``CONT_PERIOD``), so a segment agrees with the serial decoder from its first
    period boundary on.  The instructions since the last sample (its period, its
    IPC) are then raw totals (``P_RAW_INSN``), made differences in perf's order
    after the join, as a branch sample's IPC is.
    Hop and leap modes (``q``, ``qq``) are: their state is all in the kernel's
    state array as every mode's is.  A segment decoded from its PSB reports
    that PSB and then its ip (perf's resample) where the serial decoder hops
    over the PSB in one state; the two agree from the next packet with an ip
    (hop) or the next PSB (leap), where the join takes over.  Event Trace sessions
    are: RFLAGS.IF, what waits for an FUP and the EVDs before a CFE are kernel state
    the join compares, and each PSB+ restates RFLAGS.IF (MODE.Exec).
    With ``sN`` and power events neither: whether a CBR is held back
    (:func:`kernel._synth`) depends on the samples of the queue before it,
    which a segment decoded from its PSB does not know.
    """
    it = ctx.itrace
    if it.initial_skip and it.pwr_events:
        return False
    return not it.instructions or ctx.params.period_type == PERIOD_TICKS


def _i64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


class FastRows:
    """The reference's ``Rows`` (decoder/reference/queue.py), as arrays (``cols`` maps column name -> numpy array)."""

    def __init__(self, cols: dict[str, np.ndarray], setup_failures: list[int],
                 items_err: np.ndarray, items_ts: np.ndarray, branch_count: int = 0) -> None:
        self.cols = cols
        self.branch_count = branch_count  # count-only decoding: branch rows counted, not kept
        self.setup_failures = setup_failures
        self.items_err = items_err
        self.items_ts = items_ts

    def __len__(self) -> int:
        return len(self.cols["kind"])


class _Table:
    """One context's block table (open addressing; see kernel.tab_find)."""

    def __init__(self, size: int = 1 << 12) -> None:
        self.hk = np.zeros(size, np.int64)
        self.hv = np.full(size, -1, np.int64)
        self.n = 0


class _Blocks:
    """Blocks of code objects: rows of BK and boundary offsets BND, shared by every table of every
    queue decoder of a session in this process (:func:`shared_blocks`).

    A block is what decoding an object's bytes from an offset to the next branch gives, whichever
    queue, thread or address space runs it: a recording's CPU queues (and the parent's joins of PSB
    segments) learn each block once, not once a queue.  Code is keyed by its object's ``key`` (two
    files of one name, e.g. a host's and a guest's libc of other build-ids, are two keys).
    """

    def __init__(self) -> None:
        self.bk = np.zeros((1024, K.BK_SIZE), np.int64)
        self.bnd = np.zeros(1 << 14, np.int64)
        self.n = 0
        self.nb = 0
        self.index: dict[tuple[str, int], int] = {}  # (object key, file offset) -> block row
        # object key -> {file offset of an instruction inside a block: (block row << 24) | its index there}
        self.inner: dict[str, dict[int, int]] = {}
        # learning a block is several steps (the threads of one process may decode at once: the
        # coordinator's joins beside its export)
        self.lock = threading.Lock()

    def add_row(self, head: tuple[int, int, int, int, int, int], bounds: Any) -> int:
        """A new row: its head and its instructions' boundaries (a list or an array)."""
        k = len(bounds)
        if self.n >= len(self.bk):
            self.bk = np.concatenate([self.bk, np.zeros_like(self.bk)])
        while self.nb + k > len(self.bnd):
            self.bnd = np.concatenate([self.bnd, np.zeros_like(self.bnd)])
        i = self.n
        self.bk[i] = head + (self.nb, k)
        self.bnd[self.nb:self.nb + k] = bounds
        self.nb += k
        self.n += 1
        return i

    def learn(self, key: str, offset: int, cnt: int, nbytes: int, insn: Any, bounds: np.ndarray) -> int:
        """A block decoded at ``offset`` of object ``key``: its row, and where walks starting at each of its
        instructions (:meth:`rest`) find it.  Another block may have one of them already: either gives
        the same rest (decoding from an instruction is the same whichever block it was met in, up to
        the same branch)."""
        row = self.add_row((cnt, nbytes, insn.op, insn.branch, insn.length, insn.rel), bounds)
        self.index[(key, offset)] = row
        if len(bounds) >= _INNER_MAX:  # (16 M instructions without a branch: its rests are decoded anew)
            return row
        inner = self.inner.get(key)
        if inner is None:
            inner = self.inner[key] = {}
        code = row << 24
        inner.update(zip((bounds + offset).tolist(), range(code + 1, code + len(bounds) + 1)))
        return row

    def rest(self, name: str, offset: int, room: int) -> int | None:
        """The row of the block starting at instruction ``offset`` of an object inside a known block
        (the rest of it, where a walk goes on after an instruction sample), None if there is none or it
        would reach ``room`` bytes (the mapping's end).  Taken from the known block's boundaries:
        decoding each rest anew would cost a block's instructions squared."""
        inner = self.inner.get(name)
        got = inner.get(offset) if inner is not None else None
        if got is None:
            return None
        prow, j = got >> 24, got & (_INNER_MAX - 1)
        cnt, nbytes, op, br, length, rel, b0, n = self.bk[prow].tolist()
        bnd = self.bnd[b0 + j - 1:b0 + n]
        d = int(bnd[0])
        if nbytes - d >= room:
            return None
        row = self.add_row((cnt - j, nbytes - d, op, br, length, rel), bnd[1:] - d)
        self.index[(name, offset)] = row
        return row


_INNER_MAX = 1 << 24  # an instruction's index in its block, in the low bits of ``_Blocks.inner``'s values
_SHARED_BLOCKS: "weakref.WeakKeyDictionary[Any, _Blocks]" = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared_blocks(objects: Any) -> _Blocks:
    """The block cache of the session whose code objects are ``objects`` (its registry), in this
    process: made with the first queue decoder, gone with the session."""
    with _SHARED_LOCK:
        try:
            got = _SHARED_BLOCKS.get(objects)
            if got is None:
                got = _SHARED_BLOCKS[objects] = _Blocks()
        except TypeError:  # a registry that cannot be a weak key (a test's stand-in): a cache of its own
            got = _Blocks()
        return got


class _Tokens:
    """A window of a queue's buffers as the kernel's arrays (PK packets, BI buffers, BD bytes).

    Every buffer has its BI row (reference timestamp, consecutive, trace
    number, offset, length); only the buffers in the window are tokenized
    (PSTART/PEND -1 outside it), so memory stays bounded however big the
    queue: the kernel asks for more (R_MORE) when it moves past the window.
    """

    def __init__(self, buffers: list[Any], window: int | None = None) -> None:
        self.meta = buffers
        self.window = _WINDOW if window is None else window
        nb = len(buffers)
        self.cols: dict[int, Any] = {}
        bi = np.zeros((nb, K.BI_SIZE), np.int64)
        for i, b in enumerate(buffers):
            bi[i, K.BI_REF] = b.ref_timestamp
            bi[i, K.BI_CONSEC] = int(b.consecutive)
            bi[i, K.BI_TRACE_NR] = b.trace_nr
            bi[i, K.BI_OFFSET] = b.offset
            bi[i, K.BI_DLEN] = len(b.data)
        bi[:, K.BI_PSTART] = -1
        bi[:, K.BI_PEND] = -1
        self.bi = bi
        self.lo = self.hi = 0
        self.pk: np.ndarray | None = None  # no window yet: the decoder's setup loads where it starts

    def load(self, first: int, need: int = -1) -> None:
        """Window = buffers from ``first`` on, at least ``window`` bytes and up to ``need``."""
        nb = len(self.meta)
        lo = max(0, min(first, nb))
        hi = lo
        size = 0
        bi = self.bi
        while hi < nb and (size < self.window or hi <= need or hi == lo):
            size += int(bi[hi, K.BI_DLEN])
            hi += 1
        if (lo, hi) == (self.lo, self.hi) and self.pk is not None:
            return  # the window it has
        for i in list(self.cols):
            if not lo <= i < hi:
                del self.cols[i]
        for i in range(lo, hi):
            if i not in self.cols:
                self.cols[i] = tokenize_fast(self.meta[i].data)
        self.lo, self.hi = lo, hi
        self.build()

    def build(self) -> None:
        bi = self.bi
        bi[:, K.BI_PSTART] = -1
        bi[:, K.BI_PEND] = -1
        n = sum(len(self.cols[i]) for i in range(self.lo, self.hi))
        pk = np.empty((4, n), np.int64)
        at = 0
        dat = 0
        datas = []
        for i in range(self.lo, self.hi):
            c = self.cols[i]
            m = len(c)
            pk[0, at:at + m] = c.kind
            pk[1, at:at + m] = c.count
            pk[2, at:at + m] = c.payload.view(np.int64)
            pk[3, at:at + m] = c.pos
            bi[i, K.BI_PSTART] = at
            bi[i, K.BI_PEND] = at + m
            bi[i, K.BI_DSTART] = dat
            datas.append(self.meta[i].data)
            at += m
            dat += int(bi[i, K.BI_DLEN])
        self.pk = pk
        self.bd = np.frombuffer(b"".join(datas), dtype=np.uint8) if dat else np.zeros(1, np.uint8)

    def index_at(self, b: int, byte: int) -> int:
        """Index of the packet of buffer ``b`` (loaded) that starts at or before ``byte``."""
        c = self.cols[b]
        j = int(np.searchsorted(c.pos, byte, side="right")) - 1
        return int(self.bi[b, K.BI_PSTART]) + max(j, 0)

    def retokenize(self, b: int, at: int) -> None:
        """the reference decoder's ``_index_at``: the packets of buffer ``b`` from byte ``at`` re-tokenized."""
        c = self.cols[b]
        j = int(np.searchsorted(c.pos, at, side="left"))
        tail = tokenize_fast(self.meta[b].data[at:])

        self.cols[b] = PacketColumns(
            kind=np.concatenate([c.kind[:j], tail.kind]), count=np.concatenate([c.count[:j], tail.count]),
            payload=np.concatenate([c.payload[:j], tail.payload]), pos=np.concatenate([c.pos[:j], tail.pos + at]),
            size=np.concatenate([c.size[:j], tail.size]))
        self.build()


class QueueDecoder:
    """The fast decoder for one AUX queue of a :class:`PerfSession`."""

    def __init__(self, ctx: DecodeContext, qnum: int, key: tuple[str, int], bufs: list[Any],
                 count_only: bool = False, window: int | None = None) -> None:
        self.count_only = count_only
        self.ctx = ctx
        self.qnum = qnum
        self.key = key
        self.per_cpu = key[0] == "cpu"
        self.cpu = key[1] if self.per_cpu else -1
        self.qtid = -1 if self.per_cpu else key[1]
        self.lookup = ctx.new_lookup()
        self.walker = PerfCodeWalker(self.lookup, ctx.kernel_start)
        # window: bytes tokenized at a time, from where setup() starts (a plan of PSB segments, one
        # decoder per queue made before any worker starts, tokenizes nothing: 128 CPU queues, 128 MB)
        self.tokens = _Tokens(ctx.buffers(bufs), window)
        self.timeless = ctx.timeless
        self.cur = ctx.cpu_timeline(self.cpu) if self.per_cpu and not ctx.timeless else None
        self._cur_lists: tuple[list[int], list[int], list[int]] | None = None  # (_who's)
        self._tsc_at: dict[int, int] = {}  # (_tsc_at_or_after's)
        # Timeless decoding: perf decodes the queue late (at its thread's EXIT or at the end), with the
        # maps of then and, for a CPU queue, the thread current on the CPU then: one context throughout.
        self.end_who = ctx.end_who(self.cpu, queue_tid(bufs)) if self.per_cpu and ctx.timeless else (-1, -1)
        self.map_time = TIMELESS_MAP_TIME if ctx.timeless else 0
        objects = getattr(self.lookup, "objects", None)
        self.blocks = shared_blocks(objects) if objects is not None else _Blocks()
        self.tables: dict[tuple, _Table] = {}
        self.gtables: dict[tuple, _Table] = {}  # guest code, per guest context
        self.gtable = self.table = _Table(16)
        self._guest_machines = bool(ctx.sb.guests())
        self._guest_map_changes: dict[tuple[int, int], np.ndarray] = {}
        self.fail_names: list[str] = []
        self.fail_ids: dict[str, int] = {}
        self._map_changes: dict[int, list[int]] = {}
        self._kernel_changes: np.ndarray | None = None

    # ------------------------------------------------------------ contexts

    def _who(self, tsc: int) -> tuple[int, int, int, int]:
        """(pid, tid, lo, hi): who is current at ``tsc`` and the TSC range where that holds."""
        if not self.per_cpu:
            t = self.ctx.sb.thread(self.qtid)
            return (t.pid if t is not None else -1), self.qtid, -(1 << 63), _I64_MAX
        if self.timeless:
            return self.end_who[0], self.end_who[1], -(1 << 63), _I64_MAX
        cur = self._cur_lists
        if cur is None:  # the timeline as lists: a bisect, not numpy's calls (a switch every few dozen rows)
            c = self.cur
            assert c is not None  # a per-CPU queue has its CPU's timeline
            cur = self._cur_lists = (c.tsc.tolist(), c.pid.tolist(), c.tid.tolist())
        ts = cur[0]
        i = bisect_right(ts, tsc) - 1
        lo = ts[i] if i >= 0 else -(1 << 63)
        hi = ts[i + 1] if i + 1 < len(ts) else _I64_MAX
        if i < 0:
            return -1, -1, lo, hi
        return cur[1][i], cur[2][i], lo, min(hi, _I64_MAX)

    def _tsc_at_or_after(self, t: int) -> int:
        """The smallest TSC whose perf time is >= ``t`` (0 for times before TSC 0, as the
        sideband of old perf versions has: records at time 0; at most the int64 state's maximum).
        Remembered: the map changes that bound a context are the same few times at every switch."""
        got = self._tsc_at.get(t)
        if got is None:
            got = self._tsc_at[t] = self._tsc_at_or_after_now(t)
        return got

    def _tsc_at_or_after_now(self, t: int) -> int:
        tc = self.ctx.tc
        c = tc.perf_time_to_tsc(t)
        if c > _I64_MAX:
            # perf's u64 arithmetic wrapped: ``t`` lies before TSC 0 (old perf versions write
            # sideband at time 0; time_zero may itself be a wrapped negative value)
            return 0
        for _ in range(64):
            if c > 0 and tc.tsc_to_perf_time(c - 1) >= t:
                c -= 1
            else:
                break
        for _ in range(64):
            if tc.tsc_to_perf_time(c) < t:
                c += 1
            else:
                break
        return c

    @staticmethod
    def _machine_changes(machine: Any, pid: int) -> np.ndarray:
        """Perf times at which the maps seen by ``pid`` of ``machine`` (its own and the kernel's) change."""
        times = set()
        for e in machine.kernel_maps.entries:
            times.add(e.valid_from)
            times.add(e.valid_to)
        if pid >= 0:
            for e in machine.maps(pid).entries:
                times.add(e.valid_from)
                times.add(e.valid_to)
        return np.array(sorted(t for t in times if 0 <= t < (1 << 63)), dtype=np.int64)

    def _changes(self, pid: int) -> list[int]:
        """Perf times at which the host maps seen by ``pid`` change (sorted, a list for bisect)."""
        got = self._map_changes.get(pid)
        if got is None:
            got = self._map_changes[pid] = self._machine_changes(self.ctx.sb.host, pid).tolist()
        return got

    def _guest_context(self, pid: int, tid: int, time: int, lo: int, hi: int) -> tuple[tuple, int, int]:
        """(key, lo, hi): the guest address space ``MapLookup.guest`` reads for host thread ``tid``
        of process ``pid`` at perf time ``time``, and the TSC range inside [lo, hi) where it holds."""
        ctx = self.ctx
        mpid = self.lookup.guests.machine_pid(pid)
        if not self._guest_machines:
            return ("g", mpid), lo, hi  # no guest sideband: the guest's kcore only, static
        gpid = -1
        vc = self.lookup.vcpus
        hit = vc.vcpu_of(tid) if vc.enabled and tid >= 0 else None
        if hit is not None:
            m = ctx.sb.machine(hit[0])
            tl = m.cpus.get(hit[1]) if m is not None else None
            if tl is not None and len(tl):
                i = tl.index_at(time)  # the point guest_pid_at_time reads
                if i >= 0:
                    gpid = int(tl._pids[i])
                    if not ctx.timeless:
                        lo = max(lo, self._tsc_at_or_after(int(tl._times[i])))
                if i + 1 < len(tl) and not ctx.timeless:
                    hi = min(hi, self._tsc_at_or_after(int(tl._times[i + 1])))
        gen = -1
        m = ctx.sb.machine(mpid)
        if m is not None and not ctx.timeless:
            ch = self._guest_map_changes.get((mpid, gpid))
            if ch is None:
                ch = self._guest_map_changes[(mpid, gpid)] = self._machine_changes(m, gpid)
            gen = int(np.searchsorted(ch, time, side="right"))
            if gen > 0:
                lo = max(lo, self._tsc_at_or_after(int(ch[gen - 1])))
            if gen < len(ch):
                hi = min(hi, self._tsc_at_or_after(int(ch[gen])))
        return ("g", mpid, gpid, gen), lo, hi

    def _context(self, tsc: int, S: np.ndarray) -> None:
        """Point the walker and the kernel at the context of a sample at ``tsc``."""
        pid, tid, lo, hi = self._who(tsc)
        have_thread = tid >= 0 or not self.per_cpu
        if self.timeless:
            time = self.map_time  # maps as perf has them when it decodes the queue (the end): one generation
            gen = -1
        else:
            time = self.ctx.perf_time(tsc)
            ch = self._changes(pid)
            g = bisect_right(ch, time)
            gen = g
            if g > 0:
                lo = max(lo, self._tsc_at_or_after(ch[g - 1]))
            if g < len(ch):
                hi = min(hi, self._tsc_at_or_after(ch[g]))
        gkey, lo, hi = self._guest_context(pid, tid, time, lo, hi)
        self.lookup.pid = pid
        self.lookup.tid = tid
        self.lookup.time = time
        self.walker.have_thread = have_thread
        S[K.HAVE_THREAD] = int(have_thread)
        # The kernel's state is int64: a range end beyond it means "no end".
        S[K.CTX_LO] = min(max(lo, -_I64_MAX - 1), _I64_MAX)
        S[K.CTX_HI] = min(max(hi, -_I64_MAX - 1), _I64_MAX)
        self._select((pid, have_thread, gen), gkey)

    def _select(self, ctx: tuple, gctx: tuple) -> None:
        t = self.tables.get(ctx)
        if t is None:
            t = self.tables[ctx] = _Table()
        self.table = t
        g = self.gtables.get(gctx)
        if g is None:
            g = self.gtables[gctx] = _Table(1 << 8)
        self.gtable = g

    # -------------------------------------------------------------- code

    def _fail_id(self) -> int:
        name = self.walker.fail_obj
        if name is None:
            return -1
        i = self.fail_ids.get(name)
        if i is None:
            i = self.fail_ids[name] = len(self.fail_names)
            self.fail_names.append(name)
        return i

    def _block(self, ip: int, nr: bool = False) -> bool:
        """Put the block at ``ip`` in the current table (guest code: the guest table) if it can be
        cached; False if not."""
        w = self.walker
        if nr:
            hit = self.lookup.guest(ip, bool(ip >> 63))  # the walker's rule (intel_pt_nr_cpumode)
        else:
            kernel = ip >= w.kernel_start
            if not w.have_thread and not kernel:
                return False
            hit = self.lookup(ip, kernel)
        if hit is None:
            return False
        start, end, pgoff, obj = hit
        offset = ip - start + pgoff
        blocks = self.blocks
        with blocks.lock:
            name = obj.key
            row = blocks.index.get((name, offset))
            if row is None:
                row = blocks.rest(name, offset, end - ip)
            if row is None:
                # the walk with its instruction boundaries; a block that leaves this mapping is not cached
                err, cnt, new_ip, insn, bounds, one_map = w.block_array(ip, nr, hit)
                if not one_map:
                    return False
                row = blocks.learn(name, offset, cnt, new_ip - ip, insn, bounds)
        t = self.gtable if nr else self.table
        if 2 * (t.n + 1) > len(t.hk):
            big = _Table(2 * len(t.hk))
            for k, v in zip(t.hk[t.hv >= 0].tolist(), t.hv[t.hv >= 0].tolist()):
                K.tab_insert(big.hk, big.hv, k, v)
            big.n = t.n
            t.hk, t.hv = big.hk, big.hv
        K.tab_insert(t.hk, t.hv, _i64(ip), row)
        t.n += 1
        return True

    def _need(self, S: np.ndarray) -> None:
        ip = int(S[K.NEED_IP]) & _MASK64
        to_ip = int(S[K.NEED_TO]) & _MASK64
        mx = int(S[K.NEED_MAX])
        nr = bool(S[K.NEED_NR])
        if self._block(ip, nr):
            return  # (walks bounded by a count too: the kernel stops inside a block by its boundaries)
        err, cnt, new_ip, insn = self.walker.walk(ip, to_ip, mx, nr)
        S[K.INJ_VALID] = 1
        S[K.INJ_IP] = _i64(ip)
        S[K.INJ_TO] = _i64(to_ip)
        S[K.INJ_MAX] = mx
        S[K.INJ_NR] = int(nr)
        S[K.INJ_ERR] = err
        S[K.INJ_CNT] = cnt
        S[K.INJ_NEWIP] = _i64(new_ip)
        S[K.INJ_OP] = insn.op
        S[K.INJ_BR] = insn.branch
        S[K.INJ_LEN] = insn.length
        S[K.INJ_REL] = _i64(insn.rel)
        S[K.INJ_FAIL] = self._fail_id()

    # -------------------------------------------------------------- run

    def _init_state(self) -> tuple[np.ndarray, np.ndarray]:
        ctx = self.ctx
        p = ctx.params
        it = ctx.itrace
        S = np.zeros(K.S_SIZE, np.int64)
        F = np.zeros(K.F_SIZE, np.float64)
        S[K.BUF] = -1
        S[K.KIND] = 1  # Pkt.PAD
        S[K.LAST_PKT] = 1
        S[K.LASTFAIL] = -1
        S[K.P_RETCOMP] = int(p.return_compression)
        S[K.P_BRANCH_ENABLE] = int(p.branch_enable)
        S[K.P_MTC_SHIFT] = p.mtc_period
        S[K.P_CTC_REM_MASK] = (1 << p.mtc_period) - 1
        n, d = p.tsc_ctc_ratio_n, (p.tsc_ctc_ratio_d if p.tsc_ctc_ratio_n else 0)
        S[K.P_CTC_N] = n
        S[K.P_CTC_D] = d
        S[K.P_CTC_MULT] = n // d if d and not n % d else 0
        S[K.P_MNTR] = p.max_non_turbo_ratio
        F[K.F_MNTR] = float(p.max_non_turbo_ratio)
        S[K.P_PERIOD_TYPE] = p.period_type
        S[K.P_PERIOD] = p.period
        if p.period_type == PERIOD_TICKS and p.period:
            ticks = 1 << (p.period.bit_length() - 1)
            S[K.P_PERIOD_TICKS] = ticks
            S[K.P_PERIOD_MASK] = ~(ticks - 1)
        S[K.P_INSNS] = int(it.instructions)
        S[K.P_FUP_NLIP] = int(p.fup_with_nlip)
        S[K.P_CYC_THRESH] = p.cyc_threshold
        S[K.P_QUICK] = p.quick
        S[K.P_KERNEL_START] = _i64(ctx.kernel_start)
        S[K.P_FILTER] = ctx.branches_filter
        S[K.P_BRANCHES] = int(it.branches)
        S[K.P_ERRORS] = int(it.errors)
        S[K.P_ERR_MINUS_O] = int("o" in it.error_minus)
        S[K.P_ERR_MINUS_L] = int("l" in it.error_minus)
        S[K.P_EST_TSC] = int(ctx.est_tsc)
        S[K.P_TIMELESS] = int(ctx.timeless)
        S[K.P_PER_CPU] = int(self.per_cpu)
        S[K.P_PWR] = int(it.pwr_events)
        S[K.P_TX] = int(it.transactions)
        S[K.P_PTW] = int(it.ptwrites)
        S[K.P_EVENT_TRACE] = int(ctx.event_trace)
        S[K.P_INTR_EVENTS] = int(it.intr_events)
        S[K.P_EVT_ATTR] = int(ctx.evt_attr)
        S[K.SESS_CBR_SEEN] = -1  # perf starts from UINT_MAX
        S[K.P_SKIP] = min(it.initial_skip, _I64_MAX)  # --itrace=sN (s-1: perf's ULONG_MAX)
        S[K.P_COUNT_ONLY] = int(self.count_only)
        S[K.P_STOP_BUF] = -1
        return S, F

    def setup(self, at: tuple[int, int] | None = None) -> None:
        """Fresh decoder state; ``at`` = (buffer, byte): start there (at a PSB) as at a new trace."""
        if at is None and (self.tokens.lo != 0 or self.tokens.pk is None):
            self.tokens.load(0)
        S, F = self._init_state()
        self.S, self.F = S, F
        self.snap = np.zeros(K.S_SIZE, np.int64)
        self.ev = np.zeros((2, K.MAX_EVDS), np.int64)  # EVDs waiting for their CFE (type, payload)
        self.fsnap = np.zeros(K.F_SIZE, np.float64)
        self.stk = np.zeros(_STACK, np.int64)
        cap = 1 << 12 if self.count_only else _OUT_CAP
        self.out = np.zeros((K.O_SIZE, cap), np.int64)
        self.items = np.zeros((2, cap), np.int64)
        self.chunks: list[np.ndarray] = []
        self.ichunks: list[np.ndarray] = []
        self.rows_before = 0  # rows and items handed out by take()
        self.items_before = 0
        # perf's setup: no thread for a CPU queue (timeless: the one current at the end); a per-thread
        # queue has its thread.
        if self.per_cpu and not self.timeless:
            pid, have_thread = -1, False
        else:
            pid, tid = self._who(0)[:2]
            have_thread = tid >= 0 or not self.per_cpu
        self.lookup.pid = pid
        self.lookup.tid = -1
        self.lookup.time = self.map_time
        self.walker.have_thread = have_thread
        S[K.HAVE_THREAD] = int(have_thread)
        gkey = self._guest_context(pid, -1, self.map_time, 0, 0)[0]
        # (timeless: the host table of the whole queue; the guest one may differ, by the VCPU thread)
        self._select((pid, have_thread, -1) if self.timeless else ("setup", pid, have_thread), ("setup",) + gkey)
        # --time: perf's decoder-side time filter (not for PSB segments: sessions with ranges are not cut)
        tf = self.tf = self.ctx.time_filter() if at is None else None
        if tf is not None:
            S[K.TF_ON] = 1
            self._tf_sync(tf)
            if tf.sel_start and tf.sel_timestamp:
                self._fast_forward(tf.sel_timestamp)  # perf's setup: to the last PSB before the start
        if at is not None:
            b, byte = at
            tok = self.tokens
            tok.load(b)
            bi = tok.bi
            S[K.BUF] = b
            S[K.IDX] = tok.index_at(b, byte)
            S[K.REF_TIMESTAMP] = bi[b, K.BI_REF]
            S[K.BUF_TIMESTAMP] = bi[b, K.BI_REF]
            S[K.ST_TRACE_NR] = bi[b, K.BI_TRACE_NR]
            # A guess of what the serial decoder has here (it records the offset when it walks
            # over this PSB; a sync does not): joins are checked state by state anyway.
            S[K.ST_PSB_OFFSET] = bi[b, K.BI_OFFSET] + byte

    # ------------------------------------------------------------ --time

    def _tf_sync(self, tf: QueueTimeFilter) -> None:
        S = self.S
        S[K.SEL_START] = int(tf.sel_start)
        S[K.SEL_TS] = tf.sel_timestamp

    def time_filter(self) -> None:
        """R_TF: perf's intel_pt_time_filter for the state just decoded (start or end passed, or a fast
        forward due); the kernel then samples it or not (HAVE_SAMPLE) or ends the queue (PH_DONE)."""
        S, tf = self.S, self.tf
        assert tf is not None  # the kernel asks only with a --time filter (TF_ON)
        verdict, ff = tf.filter(int(S[K.PTQ_TS]), int(S[K.FF_TS]))
        S[K.FF_TS] = ff
        self._tf_sync(tf)
        if verdict == "stop":
            S[K.PHASE] = K.PH_DONE
        else:
            S[K.HAVE_SAMPLE] = int(verdict == "keep")
            if verdict == "ff":
                self._fast_forward(ff)

    def _fast_forward(self, timestamp: int) -> None:
        """perf's intel_pt_fast_forward (see decoder/filters.fast_forward, the reference decoder's):
        to the last buffer whose first PSB is before ``timestamp``, then to the last PSB before it in
        the buffer the decoder is in; repositioning forgets the IP, the timestamp and TMA."""

        S, tok = self.S, self.tokens
        bufs = tok.meta
        cur = int(S[K.BUF])
        target = -1
        for i in range(max(cur, -1) + 1, len(bufs)):
            if not len(bufs[i].data):
                continue
            first = next(iter(psb_positions(bufs[i], 0)), None)
            if first is None or first[1] is None:
                continue
            if first[1] >= timestamp:
                break
            target = i
        if target >= 0:
            ref = bufs[target].ref_timestamp
            j = cur
            while True:  # perf: next buffer (repositioned) until the buffer timestamp matches
                j += 1
                while j < len(bufs) and not len(bufs[j].data):
                    j += 1
                if j >= len(bufs):
                    return
                if bufs[j].ref_timestamp == ref:
                    break
            if tok.bi[j, K.BI_PSTART] < 0:
                tok.load(j, j)
            bi = tok.bi
            S[K.BUF] = j
            S[K.IDX] = bi[j, K.BI_PSTART]
            S[K.BUF_TIMESTAMP] = bi[j, K.BI_REF]
            S[K.REF_TIMESTAMP] = bi[j, K.BI_REF]
            S[K.ST_TRACE_NR] = bi[j, K.BI_TRACE_NR]
            self._reposition()
        b, byte = K.cursor(S, tok.pk, tok.bi)
        if not 0 <= b < len(bufs):
            return
        for pos, tsc in psb_positions(bufs[b], byte):
            if tsc is None or tsc >= timestamp:
                break
            S[K.IDX] = tok.index_at(b, pos)
            self._reposition()

    def _reposition(self) -> None:
        S = self.S
        S[K.STEP] = 0
        S[K.IP] = 0
        S[K.PKT_STATE] = K.NO_PSB
        S[K.TIMESTAMP] = 0
        S[K.HAVE_TMA] = 0

    def drive(self, single: bool = False, stop: tuple[int, int] | None = None) -> int:
        """Run the kernel until the queue ends (R_DONE), ``stop`` (R_STOP) or one step (R_STEP)."""
        S = self.S
        S[K.P_SINGLE] = int(single)
        S[K.P_STOP_BUF], S[K.P_STOP_BYTE] = stop if stop is not None else (-1, 0)
        tok = self.tokens
        while True:
            r = self.kernel_run()
            if r == K.R_DONE or r == K.R_STOP or r == K.R_STEP:
                return r
            if r == K.R_NEED:
                self._need(S)
            elif r == K.R_CTX:
                self._context(int(S[K.CTX_TSC]), S)
            elif r == K.R_OUTFULL:
                o, it = self._hand_out()
                self.chunks.append(o)
                self.ichunks.append(it)
            elif r == K.R_RETOK:
                tok.retokenize(int(S[K.RETOK_BUF]), int(S[K.RETOK_POS]))
            elif r == K.R_MORE:
                self.slide(int(S[K.MORE_BUF]))
            elif r == K.R_TF:
                self.time_filter()
            if S[K.STACK_DEPTH] > _STACK:
                raise OverflowError("return stack deeper than the fast decoder's")

    def kernel_run(self) -> int:
        """One call of the compiled decoder over the current window and tables (an R_* code)."""
        tok = self.tokens
        return K.run(self.S, self.F, self.snap, self.fsnap, tok.pk, tok.bi, tok.bd, self.stk, self.table.hk,
                     self.table.hv, self.gtable.hk, self.gtable.hv, self.blocks.bk, self.blocks.bnd, self.out,
                     self.items, self.ev)

    def slide(self, need: int, first: int | None = None) -> None:
        """Move the token window to start at the current buffer (or ``first``) and reach ``need``."""
        S = self.S
        tok = self.tokens
        cur = int(S[K.BUF])
        first = (cur if cur >= 0 else 0) if first is None else first
        old = int(tok.bi[cur, K.BI_PSTART]) if 0 <= cur < len(tok.bi) else -1
        tok.load(first, need)
        if old >= 0 and tok.bi[cur, K.BI_PSTART] >= 0:
            S[K.IDX] += int(tok.bi[cur, K.BI_PSTART]) - old

    def counts(self) -> tuple[int, int]:
        """(rows, items) produced so far, including those already taken."""
        return (self.rows_before + sum(c.shape[1] for c in self.chunks) + int(self.S[K.NOUT]),
                self.items_before + sum(c.shape[1] for c in self.ichunks) + int(self.S[K.NITEM]))

    def _hand_out(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows and items in the output arrays, taken out of them (NOUT, NITEM back to 0).  An array
        at least half full is handed out whole, a new one taking its place (the rows are not copied:
        10 M rows are 1.4 GB); a fuller copy would pin the whole array for a few rows."""
        S = self.S
        n, m = int(S[K.NOUT]), int(S[K.NITEM])
        if 2 * n >= self.out.shape[1]:
            o = self.out[:, :n]
            self.out = np.empty_like(self.out)  # (the kernel writes every field of a row it adds)
        else:
            o = self.out[:, :n].copy()
        if 2 * m >= self.items.shape[1]:
            it = self.items[:, :m]
            self.items = np.empty_like(self.items)
        else:
            it = self.items[:, :m].copy()
        S[K.NOUT] = 0
        S[K.NITEM] = 0
        return o, it

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """Raw rows and items produced since the last take (the caller's own: nothing here refers to them)."""
        o, it = self._hand_out()
        chunks = self.chunks + [o]
        ichunks = self.ichunks + [it]
        o = np.concatenate(chunks, axis=1) if len(chunks) > 1 else chunks[0]
        it = np.concatenate(ichunks, axis=1) if len(ichunks) > 1 else ichunks[0]
        self.chunks, self.ichunks = [], []
        self.rows_before += o.shape[1]
        self.items_before += it.shape[1]
        return o, it

    def position(self) -> tuple[int, int]:
        b, byte = K.cursor(self.S, self.tokens.pk, self.tokens.bi)
        return int(b), int(byte)

    def lastfail_name(self) -> str | None:
        i = int(self.S[K.LASTFAIL])
        return self.fail_names[i] if i >= 0 else None

    def run(self) -> FastRows:
        self.setup()
        self.drive()
        rows = self._rows(*self.take())
        rows.branch_count = int(self.S[K.NBRANCH])
        return rows

    def _rows(self, o: np.ndarray, it: np.ndarray) -> FastRows:
        ctx = self.ctx
        kind = o[K.O_KIND]
        setup = kind == K.K_SETUP_FAIL
        obj_map = np.array([ctx.obj_id(n) for n in self.fail_names] + [-1], dtype=np.int64)
        setup_failures = [int(obj_map[i]) for i in o[K.O_OBJ][setup].tolist()]
        if setup_failures:  # (take() gave a copy: without setup rows its rows serve as they are)
            o = o[:, ~setup]
        evd = o[K.O_KIND] == K.K_EVD
        if evd.any():  # Event Trace: an EVD row of the evt row after it, as the reference marks it
            o[K.O_KIND, evd] = EVD_ROW  # (o is take()'s copy)
        n = o.shape[1]
        tsc = o[K.O_TSC].astype(np.uint64)
        who = o[K.O_WHO_TSC].astype(np.uint64)
        if self.per_cpu and self.timeless:
            pid = np.full(n, self.end_who[0], np.int64)
            tid = np.full(n, self.end_who[1], np.int64)
        elif self.per_cpu:
            c = self.cur
            assert c is not None  # a timed per-CPU queue has its CPU's timeline
            idx = np.searchsorted(c.tsc, who, side="right") - 1
            ok = idx >= 0
            pid = np.full(n, -1, np.int64)
            tid = np.full(n, -1, np.int64)
            pid[ok] = c.pid[idx[ok]]
            tid[ok] = c.tid[idx[ok]]
        else:
            t = ctx.sb.thread(self.qtid)
            pid = np.full(n, t.pid if t is not None else -1, np.int64)
            tid = np.full(n, self.qtid, np.int64)
        time = np.zeros(n, np.int64) if ctx.timeless else ctx.tc.tsc_to_perf_time_array(tsc).astype(np.int64)
        obj = o[K.O_OBJ]
        cols = {
            "kind": o[K.O_KIND], "tsc": tsc, "time": time, "cpu": np.full(n, self.cpu, np.int64), "pid": pid,
            "tid": tid, "ip": o[K.O_IP].view(np.uint64), "addr": o[K.O_ADDR].view(np.uint64),
            "flags": o[K.O_FLAGS], "insn_cnt": o[K.O_INSN], "cyc_cnt": o[K.O_CYC], "period": o[K.O_PERIOD],
            "code": o[K.O_CODE], "payload": o[K.O_PAYLOAD].view(np.uint64), "queue": np.full(n, self.qnum, np.int64),
            "offset": o[K.O_OFFSET], "nr": o[K.O_NR], "insn_len": o[K.O_INSN_LEN], "trace_nr": o[K.O_TRACE_NR],
            "obj": np.where(obj >= 0, obj_map[obj], -1), "step": o[K.O_STEP],
        }
        return FastRows(cols, setup_failures, it[0].astype(bool), it[1].copy())


def decode_queue(ctx: DecodeContext, qnum: int, key: tuple[str, int], bufs: list[Any],
                 count_only: bool = False) -> FastRows:
    """The reference's ``decode_queue(ctx, qnum, key, bufs)``, compiled (see :func:`supported`).

    ``count_only``: branch samples are counted in ``branch_count`` instead of
    kept (errors are still rows; no per-step items).
    """
    return QueueDecoder(ctx, qnum, key, bufs, count_only).run()
