"""The call tree cut by thread: shards built where the work runs, stitched into the serial tree's rows.

perf's call tree is a stack per thread (per thread and CPU for the idle task), and threads never share
a stack; what they share is numbering: a call's id is taken when it returns (or when its first callee
does), a call path's when a call first needs it, both in the order of the branches over all threads.
:class:`ShardedCallTree` has :class:`~ptexport.calltree.threadstack_compiled.CallTree`'s interface and
rows, and splits its work that way:

* each batch's branches are cut by thread into ``shards`` parts; a round of batches (``step_rows``
  branches or more) is a task per shard (:func:`tree_step`, a pure function of its arguments: a retry
  on another worker gives the same result) that resumes the shard's stacks from the state its last
  step left, runs the compiled tree over its parts with ids of its own (above :data:`LOCAL`), and
  hands back its rows and its stacks (only the calls still open at its end, and the call paths they
  use: small); the export goes on while a round is out;
* every branch carries its position in the whole stream (its key), and every id a shard gives out
  carries the key of the branch that gave it; this process ranks the shards' ids by key
  (:meth:`_stitch`) - the order the serial tree gives them in - and renumbers the rows and the
  stacks the shards carry on (the calls open across the boundary keep their ids);
* call paths are found again by content ((parent, symbol, ip)) in one table here, in key order:
  a path several shards made gets one id, the one the first of them would have got in the serial tree;
* the rows are cut at the batches' keys and handed out batch by batch (:meth:`take_call_batches`), as
  the serial tree's take_calls gives them after each batch: the writer gets the same batches.

The executor is anything with ``submit(fn, *args) -> future`` (``future.result()``, ``future.done()``):
the dask cluster's (:class:`~ptexport.session.cluster.DaskTrees`, ``--cluster-trees``), or
:class:`InlineExecutor` (tests, one process).  docs/scaling.md has what it costs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ptexport.calltree.stats import CallStats, symbol_stats
from ptexport.calltree.threadstack import CALLS_COLUMNS, SAMPLE_COLUMNS
from ptexport.calltree import threadstack_compiled as tc
from ptexport.jit import numba

#: A shard's own ids (calls, call paths) count on from here; the stitched ones stay below.
LOCAL = 1 << 62
#: Branches a round of steps takes at least (each round is a task per shard and a round trip), and
#: the branches that may wait while a round is out (then the export waits for it).
STEP_ROWS = 1 << 18
MAX_QUEUED = 1 << 21

_O_ID, _O_CP, _O_PCP, _O_PARENT = (CALLS_COLUMNS.index(c) for c in ("id", "call_path_id", "parent_call_path_id",
                                                                     "parent_id"))
_O_KEY, _O_FRESH, _FRESH_OWN, _FRESH_PARENT = tc.O_KEY, tc.O_FRESH, tc.FRESH_OWN, tc.FRESH_PARENT
_E_DBID, _P_DBID, _P_PARENT, _P_SYM, _P_IP = tc.E_DBID, tc.P_DBID, tc.P_PARENT, tc.P_SYM, tc.P_IP


@dataclasses.dataclass(frozen=True)
class TreeParams:
    """What every shard's tree is made with (the serial tree's arguments)."""

    kernel_start: int = 1 << 63
    x86: bool = True
    retpoline_syms: tuple[int, ...] = ()


def take_raw(tree: tc.CallTree) -> tuple[np.ndarray, np.ndarray]:
    """The calls rows (every output column, O_KEY and O_FRESH among them) and the call path rows (with
    the key that exported each) ``tree`` made so far, as matrices; given away."""
    calls = tree.O[:int(tree.G[tc.G_NOUT])].copy()
    paths = tree.PO[:int(tree.G[tc.G_NPO])].copy()
    tree.G[tc.G_NOUT] = tree.G[tc.G_NPO] = 0
    return calls, paths


def tree_state(tree: tc.CallTree) -> dict[str, np.ndarray]:
    """``tree``'s stacks as they stand, compact, for a tree that goes on elsewhere (:func:`resume`):
    each slot's key and counters, its entries bottom first, and the call path nodes they use with
    their ancestors (the root first).  Ids (entries' call ids, nodes' call path ids) are kept as they are."""
    nslots = len(tree.slots)
    ncp = int(tree.G[tc.G_NCP])
    ent, nodes = tc._live(tree.E, tree.S, tree.P, nslots, ncp)
    renum = np.full(ncp, -1, dtype=np.int64)
    renum[nodes] = np.arange(len(nodes))
    P = tree.P[nodes].copy()
    P[1:, tc.P_PARENT] = renum[P[1:, tc.P_PARENT]]
    E = tree.E[ent].copy()
    E[:, tc.E_CP] = renum[E[:, tc.E_CP]]
    S = tree.S[:nslots].copy()
    cnt = np.where(S[:, tc.S_INIT] != 0, S[:, tc.S_CNT], 0)
    starts = np.cumsum(cnt) - cnt
    prev = np.arange(len(ent), dtype=np.int64) - 1
    prev[starts[cnt > 0]] = -1
    E[:, tc.E_PREV] = prev
    S[:, tc.S_TOP] = np.where(cnt > 0, starts + cnt - 1, -1)
    keys = np.array(list(tree.slots), dtype=np.int64).reshape(-1, 2)
    return {"keys": keys, "S": S, "E": E, "P": P}


def resume(state: Mapping[str, np.ndarray] | None, *, first_call_id: int, first_call_path_id: int,
           root_call_path_id: int = 0, **kwargs: Any) -> tc.CallTree:
    """A compiled tree that goes on from :func:`tree_state` (None: a new one); its new call ids count on
    from ``first_call_id``, its new call path ids from ``first_call_path_id``."""
    tree = tc.CallTree(root_call_path_id=root_call_path_id, **kwargs)
    if state is not None:
        E, S, P, keys = state["E"], state["S"], state["P"], state["keys"]
        if len(E) > tree.E.shape[0]:
            tree.E = tc._grow(tree.E, len(E))
        tree.E[:len(E)] = E
        tree.G[tc.G_NE] = len(E)
        if len(S) > tree.S.shape[0]:
            tree.S = tc._grow(tree.S, len(S))
        tree.S[:len(S)] = S
        tree.slots = {(int(t), int(c)): i for i, (t, c) in enumerate(keys.tolist())}
        if len(P) + 8 > tree.P.shape[0]:
            tree.P = tc._grow(tree.P, len(P) + 8)
            tree.PO = tc._grow(tree.PO, tree.P.shape[0])
            tree.cpd = np.zeros(tc._index_size(tree.P.shape[0]), dtype=np.int64)
        tree.P[:len(P)] = P
        tree.G[tc.G_NCP] = len(P)
        tc._rebuild_index(tree.P, tree.G, tree.cpd)
    tree.G[tc.G_CALL_ID] = first_call_id
    tree.G[tc.G_CP_ID] = first_call_path_id
    return tree


def tree_step(params: TreeParams, state: Mapping[str, np.ndarray] | None, root_id: int,
              part: list[Mapping[str, Any]] | None, flush: tuple[np.ndarray, np.ndarray] | None
              ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """One shard's step: its stacks resumed from ``state`` (None: none yet; ``root_id``: the root's call
    path id, 0 while none has one), its branches run (``part``: a part of each batch, columns with
    ``key`` among them; a column of one value may be that value), then its
    stacks of ``flush`` flushed ((slot keys (thread id, CPU key), the key of each flush), in order).
    Returns the calls and call path rows (shard ids above LOCAL, every output column) and the state."""
    parts = part or []
    n = sum(len(p["ref"]) for p in parts)
    tree = resume(state, first_call_id=LOCAL, first_call_path_id=LOCAL, root_call_path_id=root_id,
                  kernel_start=params.kernel_start, x86=params.x86, retpoline_syms=params.retpoline_syms,
                  capacity=max(1024, n // 4))  # room for the calls without growing
    for p in parts:
        m = len(p["ref"])
        # a column of one value came as that value; the keys of consecutive branches as the first's
        # (arrays that crossed the network may be read-only: the kernel is compiled ahead for writable ones)
        cols = {k: np.full(m, v) if np.ndim(v) == 0 else _writable(v) for k, v in p.items() if k != "key"}
        key = p["key"]
        cols["key"] = np.arange(int(key), int(key) + m, dtype=np.int64) if np.ndim(key) == 0 else _writable(key)
        tree.process_batch(cols)
    if flush is not None:
        slots, keys = flush
        known = [(tree.slots.get((int(t), int(c))), int(k)) for (t, c), k in zip(slots.tolist(), keys.tolist())]
        known = [(s, k) for s, k in known if s is not None]
        if known:
            tree._flush([s for s, _ in known], [k for _, k in known])
    calls, paths = take_raw(tree)
    return calls, paths, tree_state(tree)


class InlineExecutor:
    """Runs each task at once, here (one process; the tests' and a machine without a cluster's)."""

    class _Done:
        def __init__(self, value: Any) -> None:
            self.value = value

        def result(self) -> Any:
            return self.value

        def done(self) -> bool:
            return True

    def submit(self, fn: Any, *args: Any) -> Any:
        return self._Done(fn(*args))


if numba is not None:
    @numba.njit(cache=True, nogil=True)
    def _rehash(T, n, H):
        for r in range(n):
            H[tc._cp_slot(T, H, T[r, _P_PARENT], T[r, _P_SYM], T[r, _P_IP])] = r + 1

    @numba.njit(cache=True, nogil=True)
    def _intern(T, H, C, par, k1, k2, lid, mapbase, pmap, out):
        """Give the shards' exported call paths (in key order) their ids: ``C`` = [last id, root id,
        rows in T, the first id's base]; a path seen before keeps its id, a new one
        takes the next and a row in ``out``; ``pmap`` (each shard's local ids from ``mapbase``) is
        filled as it goes.  Returns the rows put in ``out``."""
        nout = 0
        for r in range(len(par)):
            p = par[r]
            if p >= LOCAL:
                p = pmap[mapbase[r] + p - LOCAL - 1]
            if par[r] == 0:  # the root (only it has no parent)
                if C[1] == 0:
                    C[0] += 1
                    C[1] = C[0]
                    out[nout, 0] = C[1]
                    out[nout, 1] = 0
                    out[nout, 2] = k1[r]
                    out[nout, 3] = k2[r]
                    nout += 1
                gid = C[1]
            else:
                i = tc._cp_slot(T, H, p, k1[r], k2[r])  # (T: the tree's call path table layout)
                if H[i] != 0:
                    gid = T[H[i] - 1, _P_DBID]
                else:
                    C[0] += 1
                    gid = C[0]
                    row = C[2]
                    C[2] += 1
                    T[row, _P_PARENT] = p
                    T[row, _P_SYM] = k1[r]
                    T[row, _P_IP] = k2[r]
                    T[row, _P_DBID] = gid
                    H[i] = row + 1
                    out[nout, 0] = gid
                    out[nout, 1] = p
                    out[nout, 2] = k1[r]
                    out[nout, 3] = k2[r]
                    nout += 1
            pmap[mapbase[r] + lid[r] - LOCAL - 1] = gid
        return nout


    @numba.njit(cache=True, nogil=True)
    def _fresh_keys(calls, out, at):
        """The key of each call id the shard gave, in the order it gave them (a row's own before its
        parent's), into ``out`` from ``at``; returns where it stopped."""
        for r in range(calls.shape[0]):
            f = calls[r, _O_FRESH]
            if f & _FRESH_OWN:
                out[at] = calls[r, _O_KEY]
                at += 1
            if f & _FRESH_PARENT:
                out[at] = calls[r, _O_KEY]
                at += 1
        return at

    @numba.njit(cache=True, nogil=True)
    def _renumber(calls, E, P, cmap, cbase, pmap, pbase):
        """The shard's own ids (above LOCAL) in its rows and the stacks it carries on replaced by the
        stitched ones: call ids by ``cmap[cbase + id - LOCAL - 1]``, call path ids by ``pmap``'s."""
        for r in range(calls.shape[0]):
            for c in (_O_ID, _O_PARENT):
                v = calls[r, c]
                if v > LOCAL:
                    calls[r, c] = cmap[cbase + v - LOCAL - 1]
            for c in (_O_CP, _O_PCP):
                v = calls[r, c]
                if v > LOCAL:
                    calls[r, c] = pmap[pbase + v - LOCAL - 1]
        for r in range(E.shape[0]):
            v = E[r, _E_DBID]
            if v > LOCAL:
                E[r, _E_DBID] = cmap[cbase + v - LOCAL - 1]
        for r in range(P.shape[0]):
            v = P[r, _P_DBID]
            if v > LOCAL:
                P[r, _P_DBID] = pmap[pbase + v - LOCAL - 1]


def _writable(a: np.ndarray) -> np.ndarray:
    return a if a.flags.writeable and a.flags.c_contiguous else np.array(a)


class ShardedCallTree:
    """:class:`~ptexport.calltree.threadstack_compiled.CallTree`'s rows from ``shards`` shards of threads
    whose steps run on ``executor`` (see the module's docstring)."""

    #: process_batch waits on its shards (and sorts in numpy): other threads run meanwhile.
    releases_gil = True

    def __init__(self, executor: Any, shards: int, *, kernel_start: int = 1 << 63, x86: bool = True,
                 retpoline_syms: Iterable[int] = (), first_call_id: int = 0, first_call_path_id: int = 0,
                 root_call_path_id: int = 0, stats: bool = False) -> None:
        if numba is None:  # pragma: no cover
            raise ImportError("the sharded CallTree needs numba (a dependency of ptexport: reinstall it)")
        self.executor = executor
        self.shards = max(1, int(shards))
        self.params = TreeParams(int(kernel_start), bool(x86), tuple(sorted({int(s) for s in retpoline_syms if s})))
        self.states: list[dict[str, np.ndarray] | None] = [None] * self.shards
        self.slots: dict[tuple[int, int], int] = {}  # (thread id, CPU key) -> order made (the serial tree's)
        self.next_key = 0  # the key of the next branch (its position among all branches)
        self.call_id = int(first_call_id)
        first = max(int(first_call_path_id), int(root_call_path_id))
        self.C = np.array([first, int(root_call_path_id), 0, first], dtype=np.int64)  # see _intern
        # the paths with a parent, in the compiled tree's call path layout with ids for nodes: parent id,
        # symbol, ip, id (tc._cp_slot finds them)
        self.T = np.zeros((1024, tc.P_COLS), dtype=np.int64)
        self.H = np.zeros(tc._index_size(self.T.shape[0]), dtype=np.int64)
        self.syms = np.zeros(1024, dtype=np.int64)  # symbol of each call path id from base + 1 on (take_stats)
        self._calls: list[np.ndarray] = []
        self._paths: list[np.ndarray] = []
        self.call_stats = CallStats() if stats else None
        self.steps = 0  # tasks run (the benchmark's count)
        self.step_rows = STEP_ROWS
        self.max_queued = MAX_QUEUED
        self._queued: dict[int, list[dict[str, Any]]] = {}  # shard -> its parts of the batches not sent
        self._queued_rows = 0
        self._queued_ends: list[int] = []  # the key after each batch queued
        self._round: list[tuple[int, Any]] = []  # (shard, future) of the round out
        self._round_ends: list[int] = []

    @property
    def last_call_id(self) -> int:
        return self.call_id

    # ------------------------------------------------------------ branches
    def _note_slots(self, thread_id: np.ndarray, cpu: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> None:
        """The batch's new stacks (thread id, CPU key) noted in the order the serial tree makes them
        (ascending keys, batch after batch): its flush order."""
        idle = (pid == 0) & (tid == 0)
        packed = (thread_id << 20) | (np.where(idle, np.maximum(cpu, 0), -1) + 1)
        heads = packed[np.concatenate(([True], packed[1:] != packed[:-1]))]  # a key per run of one thread
        for key in np.unique(heads).tolist():
            self.slots.setdefault((key >> 20, (key & 0xFFFFF) - 1), len(self.slots))

    def process_batch(self, batch: Mapping[str, np.ndarray]) -> None:
        names = [c for c in SAMPLE_COLUMNS if c in batch]
        n = len(batch["ref"]) if "ref" in batch else 0
        if not n:
            return

        def i64(name: str) -> np.ndarray:
            if name in batch:
                c = np.asarray(batch[name])
                return c.view(np.int64) if c.dtype == np.uint64 else c.astype(np.int64, copy=False)
            return np.full(n, SAMPLE_COLUMNS[name], dtype=np.int64)

        thread = i64("thread_id")
        self._note_slots(thread, i64("cpu"), i64("pid"), i64("tid"))
        shard = thread % self.shards
        first = self.next_key
        self.next_key += n
        cols = {c: np.asarray(batch[c]) for c in names}
        # a column of one value goes as that value (a shard's task crosses the network)
        cols = {c: v[0] if c != "ref" and n > 1 and v[0] == v[-1] and (v == v[0]).all() else v for c, v in cols.items()}
        if (shard == shard[0]).all():
            parts = [(int(shard[0]), dict(cols, key=np.int64(first)))]
        else:
            order = np.argsort(shard, kind="stable")
            bounds = np.searchsorted(shard[order], np.arange(self.shards + 1))
            cols = {c: v[order] if np.ndim(v) else v for c, v in cols.items()}
            key = order + first
            parts = [(g, {**{c: v[a:b] if np.ndim(v) else v for c, v in cols.items()}, "key": key[a:b]})
                     for g, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())) if b > a]
        for g, part in parts:
            self._queued.setdefault(g, []).append(part)
        self._queued_rows += n
        self._queued_ends.append(self.next_key)
        self._pump(wait=self._queued_rows >= self.max_queued)

    def _pump(self, wait: bool = False) -> None:
        """The round out stitched if it is back (``wait``: once it is), and the next one sent if enough
        branches wait for it: the export goes on while the shards work."""
        if self._round:
            if not wait and not all(f.done() for _, f in self._round):
                return
            self._finish()
        if self._queued_rows >= self.step_rows:
            self._send([(g, parts, None) for g, parts in sorted(self._queued.items())])

    def flush_all(self, order: Iterable[int] | None = None) -> None:
        """Every stack flushed, in the serial tree's order: ``order``'s threads first (each one's slots
        in key order), then the others in the order they were made."""
        seq: list[tuple[int, int]] = []
        if order is not None:
            by_thread: dict[int, list[tuple[int, int]]] = {}
            for k in sorted(self.slots):
                by_thread.setdefault(k[0], []).append(k)
            for t in order:
                seq.extend(by_thread.pop(t, []))
        seen = set(seq)
        seq.extend(k for k in sorted(self.slots, key=self.slots.__getitem__) if k not in seen)
        self._finish()  # every branch through its shard first
        if not seq:
            return
        keys = np.arange(self.next_key, self.next_key + len(seq), dtype=np.int64)
        self.next_key += len(seq)
        slot_keys = np.array(seq, dtype=np.int64).reshape(-1, 2)
        shard = slot_keys[:, 0] % self.shards
        self._send([(g, None, (slot_keys[w], keys[w])) for g in range(self.shards)
                    if self.states[g] is not None and len(w := np.flatnonzero(shard == g))], [self.next_key])
        self._finish()

    # ------------------------------------------------------------ stitching
    def _send(self, jobs: list[tuple[int, Any, Any]], ends: list[int] | None = None) -> None:
        """A round: each shard's step on the branches queued for it (and its stacks flushed); ``ends``:
        the key after each batch (or flush) it covers, where its rows are cut into each one's."""
        self._round_ends = self._queued_ends if ends is None else ends
        self._queued, self._queued_rows, self._queued_ends = {}, 0, []
        self._round = [(g, self.executor.submit(tree_step, self.params, self.states[g], int(self.C[1]), part, flush))
                       for g, part, flush in jobs]
        self.steps += len(self._round)

    def _finish(self) -> None:
        """The round out waited for and stitched, and the queued branches sent (and waited for)."""
        while self._round or self._queued_rows:
            if not self._round:
                self._send([(g, parts, None) for g, parts in sorted(self._queued.items())])
            results = [(g, *f.result()) for g, f in self._round]
            self._round = []
            self._stitch(results, self._round_ends)

    def _stitch(self, results: list[tuple[int, np.ndarray, np.ndarray, dict[str, np.ndarray]]], ends: list[int]) -> None:
        O_KEY = tc.O_KEY
        # (what crossed the network may be read-only; the kernels take writable arrays, as compiled ahead)
        results = [(g, _writable(calls), _writable(paths), {k: _writable(v) for k, v in state.items()})
                   for g, calls, paths, state in results]
        # call ids: each shard's, in the order it gave them (own before parent's in a row), ranked by key
        allkeys = np.empty(2 * sum(len(calls) for _, calls, _, _ in results), dtype=np.int64)
        cbase, at = [], 0
        for _, calls, _, _ in results:
            cbase.append(at)
            at = _fresh_keys(calls, allkeys, at)
        ids = np.arange(self.call_id + 1, self.call_id + 1 + at, dtype=np.int64)
        if len(results) > 1:
            cmap = np.empty(at, dtype=np.int64)
            cmap[np.argsort(allkeys[:at], kind="stable")] = ids
        else:
            cmap = ids  # one shard: the order it gave them in
        self.call_id += at
        # call paths: every shard's exports, in key order, found or added in this process's table
        pkeys = [paths[:, 4] for _, _, paths, _ in results]
        pcounts = [len(k) for k in pkeys]
        pbase = np.cumsum([0] + pcounts[:-1])
        allp = np.concatenate([paths for _, _, paths, _ in results]) if results else np.zeros((0, 5), np.int64)
        order = np.argsort(np.concatenate(pkeys), kind="stable") if len(results) > 1 else np.arange(len(allp))
        mapbase = np.repeat(pbase, pcounts)  # where each path's shard's ids start in pmap
        pmap = np.zeros(len(allp), dtype=np.int64)
        if len(allp):
            self._reserve(len(allp))
            out = np.zeros((len(allp), 4), dtype=np.int64)
            srt = allp[order]
            nout = _intern(self.T, self.H, self.C, srt[:, 1], srt[:, 2], srt[:, 3], srt[:, 0],
                           mapbase[order], pmap, out)
            if nout:
                new = out[:nout]
                self._paths.append(new)
                self._note_syms(new)
        rows = []
        for j, (g, calls, _, state) in enumerate(results):
            _renumber(calls, state["E"], state["P"], cmap, cbase[j], pmap, int(pbase[j]))
            root = int(state["P"][0, tc.P_DBID]) if len(state["P"]) else 0
            if root == 0 and self.C[1]:
                state["P"][0, tc.P_DBID] = self.C[1]
            self.states[g] = state
            rows.append(calls)
        calls = np.concatenate(rows) if len(rows) > 1 else rows[0]
        if len(rows) > 1:
            calls = calls[np.argsort(calls[:, O_KEY], kind="stable")]  # the serial tree's order
        # each batch's rows apart (those its branches popped), as the serial tree hands them out batch by
        # batch: the writer gets the same batches (where its late rows go depends on them)
        cuts = np.searchsorted(calls[:, O_KEY], np.asarray(ends[:-1], dtype=np.int64))
        self._calls.extend(np.split(calls, cuts))

    def _reserve(self, more: int) -> None:
        need = int(self.C[2]) + more
        if need > self.T.shape[0]:
            self.T = tc._grow(self.T, need)
        if 2 * need > len(self.H):
            self.H = np.zeros(tc._index_size(self.T.shape[0]), dtype=np.int64)
            _rehash(self.T, int(self.C[2]), self.H)

    def _note_syms(self, new: np.ndarray) -> None:
        top = int(new[-1, 0]) - int(self.C[3])
        if top >= len(self.syms):
            self.syms = tc._grow(self.syms, top + 1)
        self.syms[new[:, 0] - int(self.C[3])] = new[:, 2]

    # ------------------------------------------------------------ rows
    def take_calls(self) -> dict[str, np.ndarray]:
        """The calls rows stitched so far (rows of the batches whose round is back), in one."""
        if self._calls:
            m = np.concatenate(self._calls) if len(self._calls) > 1 else self._calls[0]
        else:
            m = np.zeros((0, tc.O_COLS), dtype=np.int64)
        self._calls = []
        return self._columns(m)

    def take_call_batches(self) -> list[dict[str, np.ndarray]]:
        """The calls rows stitched so far, batch by batch (and the flush's): what the serial tree's
        take_calls gave after each (empty ones left out)."""
        out = [self._columns(m) for m in self._calls if len(m)]
        self._calls = []
        return out

    def _columns(self, m: np.ndarray) -> dict[str, np.ndarray]:
        return tc.calls_columns(m, self.call_stats)

    def take_call_paths(self) -> dict[str, np.ndarray]:
        m = np.concatenate(self._paths) if self._paths else np.zeros((0, 4), dtype=np.int64)
        self._paths = []
        return tc.call_path_columns(m)

    def take_stats(self) -> dict[str, dict[str, np.ndarray]]:
        if self.call_stats is None:
            return {}
        cps = self.call_stats.rows()
        base = int(self.C[3])
        cp_symbol = np.zeros(int(self.C[0]) + 1, dtype=np.int64)
        cp_symbol[base + 1:] = self.syms[1:int(self.C[0]) - base + 1]
        return {"call_path_stats": cps, "symbol_stats": symbol_stats(cps, cp_symbol)}


def warm() -> None:
    """Compile the stitching kernels ahead (``ptexport.cli.precompile``): two threads in two shards."""
    from ptexport.calltree.threadstack_compiled import warm_batch

    tree = ShardedCallTree(InlineExecutor(), 2)
    batch = warm_batch()
    batch["thread_id"] = np.arange(len(batch["ref"])) % 2 + 1
    tree.process_batch(batch)
    tree.flush_all()
    tree.take_calls()
    tree.take_call_paths()
    tree._reserve(2 * len(tree.H))  # the call path table grown (a rehash)
