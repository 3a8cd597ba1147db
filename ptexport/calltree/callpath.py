"""The call path tree: perf's ``call_path`` nodes and their export ids.

A call path is a node (parent, symbol, ip): the chain of functions from the
root to a call.  As in perf's call-path.c, ``ip`` is kept only when the symbol
is unknown (symbol id 0) and is 0 otherwise, so every call of a function from
the same path shares one node.  Whether a node is "in the kernel" is decided
from the address before that zeroing (``ip >= kernel_start``).

Nodes get their database id when first exported (perf's
``db_export__call_path``), parents first; the root is exported as id 1 with
parent 0, symbol 0, ip 0, which is what perf's database viewer expects.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CallPathTable", "ROOT"]

#: Internal index of the root node.
ROOT = 0


class CallPathTable:
    """All call path nodes of one export, with lazily assigned export ids."""

    __slots__ = ("kernel_start", "parent", "sym", "ip", "in_kernel", "db_id", "_index", "last_db_id", "_rows")

    def __init__(self, kernel_start: int = 1 << 63, *, first_db_id: int = 0, root_db_id: int = 0) -> None:
        """``root_db_id``: the root's id when the caller has already written its row (then not exported)."""
        self.kernel_start = kernel_start
        self.parent: list[int] = [-1]
        self.sym: list[int] = [0]
        self.ip: list[int] = [0]
        self.in_kernel: list[bool] = [False]
        self.db_id: list[int] = [root_db_id]
        self._index: dict[tuple[int, int, int], int] = {}
        self.last_db_id = max(first_db_id, root_db_id)
        self._rows: list[tuple[int, int, int, int]] = []

    def __len__(self) -> int:
        return len(self.parent)

    def findnew(self, parent: int, sym: int, ip: int) -> int:
        """The node (parent, sym, ip), created if new (perf's ``call_path__findnew``)."""
        if sym:
            key = (parent, sym, 0)
        else:
            key = (parent, 0, ip)
        node = self._index.get(key)
        if node is None:
            node = len(self.parent)
            self._index[key] = node
            self.parent.append(parent)
            self.sym.append(key[1])
            self.ip.append(key[2])
            self.in_kernel.append(ip >= self.kernel_start)
            self.db_id.append(0)
        return node

    def export(self, node: int) -> int:
        """The export id of ``node``, exporting it (and unexported parents) first."""
        db_id = self.db_id[node]
        if db_id:
            return db_id
        chain = []
        while node >= 0 and not self.db_id[node]:
            chain.append(node)
            node = self.parent[node]
        for n in reversed(chain):
            self.last_db_id += 1
            self.db_id[n] = self.last_db_id
            p = self.parent[n]
            self._rows.append((self.last_db_id, self.db_id[p] if p >= 0 else 0, self.sym[n], self.ip[n]))
        return self.db_id[chain[0]]

    def take_rows(self) -> dict[str, np.ndarray]:
        """``call_paths`` rows exported since the last call: id, parent_id, symbol_id, ip."""
        rows = self._rows
        self._rows = []
        if rows:
            arr = np.array(rows, dtype=np.uint64)
        else:
            arr = np.zeros((0, 4), dtype=np.uint64)
        return {
            "id": arr[:, 0].astype(np.int64),
            "parent_id": arr[:, 1].astype(np.int64),
            "symbol_id": arr[:, 2].astype(np.int64),
            "ip": arr[:, 3],
        }
