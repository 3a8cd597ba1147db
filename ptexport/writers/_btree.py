"""Write SQLite table B-trees directly: the bulk path for the big integer tables.

SQLite's own INSERT costs ~2-3 us of CPU per 23-column sample row here (record
building, B-tree descent, page management), which caps an export at a few
hundred thousand rows/s whatever the binding layer.  A rowid table filled in
rowid order needs none of that: its leaf pages can be laid down one after
the other.  This module does exactly that, following the documented file
format (https://www.sqlite.org/fileformat2.html, sections 1.3 B-tree pages,
2.1 record format):

* :class:`LeafSpool` turns int64 matrices (column 0 = rowid, strictly
  increasing) into full table-leaf pages (type 0x0D) with a numba kernel and
  appends them to a spool file; it keeps each leaf's largest rowid.  Trailing
  values equal to their column's declared DEFAULT are left out of the record
  (section 2.1: missing trailing values read as the default), as SQLite itself
  stores rows written before an ALTER TABLE ADD COLUMN;
* :func:`splice` (with the SQLite connection closed) appends the leaves to
  the database file (or, where the file system can open a hole at the start
  of a file, writes the database's pages in front of the leaves and renames
  the spool over it: the bigger file is never copied), builds the interior pages (type 0x05) above them, writes
  the top page over the table's (empty) root page and updates the header
  (page count, change counter).  The pending-byte page at 1 GiB is skipped.

After a splice the table is an ordinary SQLite table (``PRAGMA
integrity_check`` passes; indexes are built on it by SQLite).  Used only when
the table has integer columns only, the INTEGER PRIMARY KEY is column 0, the
file has no reserved bytes, no auto-vacuum and schema format 4.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ptexport.jit import numba

PENDING_BYTE = 0x40000000
#: Leaf pages :meth:`LeafSpool.merge` reads back and builds again at a time (4 MiB of 4 KiB pages).
MERGE_PAGES = 1024


def available() -> bool:
    return numba is not None


def max_payload(ncols: int) -> int:
    """The largest record of a row of ``ncols`` integer columns (column 0 the rowid, stored as NULL):
    a one-byte header size and one-byte serial types (``ncols`` < 127), 8 bytes per other column."""
    return 1 + ncols + 8 * (ncols - 1)


def fits_in_leaf(ncols: int, page_size: int) -> bool:
    """Every row of ``ncols`` integer columns fits whole in a table leaf: its payload is at most
    U - 35 bytes (fileformat2 section 1.6; U = the page size, no reserved bytes), so the page writer
    never needs an overflow page (it writes none)."""
    return ncols < 126 and max_payload(ncols) <= page_size - 35


if numba is not None:

    @numba.njit(cache=True, nogil=True, inline="always")
    def _varint_len(v):  # pragma: no cover - compiled; v >= 0 and < 2**56
        n = 1
        while v >= 0x80:
            v >>= 7
            n += 1
        return n

    @numba.njit(cache=True, nogil=True, inline="always")
    def _put_varint(buf, pos, v, n):  # pragma: no cover - compiled; n = _varint_len(v)
        buf[pos + n - 1] = v & 0x7F
        for i in range(n - 2, -1, -1):
            v >>= 7
            buf[pos + i] = (v & 0x7F) | 0x80

    @numba.njit(cache=True, nogil=True)
    def _build_leaves(mat, page_size, out, maxrow, has_def, defs):  # pragma: no cover - compiled
        """Fill ``out`` (pages * page_size bytes) with leaf pages; returns the number of pages.

        Each cell (payload size varint, rowid varint, record) is measured first and then
        written straight to its place at the page's content end."""
        n, k = mat.shape
        stypes = np.empty(k, dtype=np.int64)
        sizes = np.empty(k, dtype=np.int64)
        npages = 0
        ncell = 0
        content = page_size
        base = 0
        for r in range(n):
            rowid = mat[r, 0]
            # trailing values equal to their column's DEFAULT are left out of the record
            kk = k
            while kk > 1 and has_def[kk - 1] and mat[r, kk - 1] == defs[kk - 1]:
                kk -= 1
            # record: header (size varint + one serial type per column), then the body
            body = 0
            stypes[0] = 0  # the INTEGER PRIMARY KEY is stored as NULL, its value is the rowid
            for j in range(1, kk):
                v = mat[r, j]
                if v == 0:
                    t, sz = 8, 0
                elif v == 1:
                    t, sz = 9, 0
                elif -128 <= v <= 127:
                    t, sz = 1, 1
                elif -32768 <= v <= 32767:
                    t, sz = 2, 2
                elif -8388608 <= v <= 8388607:
                    t, sz = 3, 3
                elif -2147483648 <= v <= 2147483647:
                    t, sz = 4, 4
                elif -140737488355328 <= v <= 140737488355327:
                    t, sz = 5, 6
                else:
                    t, sz = 6, 8
                stypes[j] = t
                sizes[j] = sz
                body += sz
            hdr = 1 + kk  # kk < 127: every varint is one byte
            payload = hdr + body
            lp = _varint_len(payload)
            lr = _varint_len(rowid)
            p = lp + lr + payload
            # start a new page if this cell does not fit
            if ncell > 0 and 8 + 2 * (ncell + 1) + (page_size - content) + p > page_size:
                out[base + 3] = (ncell >> 8) & 0xFF
                out[base + 4] = ncell & 0xFF
                out[base + 5] = (content >> 8) & 0xFF
                out[base + 6] = content & 0xFF
                npages += 1
                ncell = 0
                content = page_size
            if ncell == 0:
                base = npages * page_size
                out[base:base + page_size] = 0  # (out is reused: only the pages written are cleared)
                out[base] = 0x0D
                out[base + 1] = 0
                out[base + 2] = 0
                out[base + 7] = 0
            content -= p
            q = base + content
            _put_varint(out, q, payload, lp)
            q += lp
            _put_varint(out, q, rowid, lr)
            q += lr
            out[q] = hdr
            q += 1
            for j in range(kk):
                out[q] = stypes[j]
                q += 1
            for j in range(1, kk):
                sz = sizes[j]
                v = mat[r, j]
                for b in range(sz):
                    out[q + sz - 1 - b] = (v >> (8 * b)) & 0xFF
                q += sz
            ptr = base + 8 + 2 * ncell
            out[ptr] = (content >> 8) & 0xFF
            out[ptr + 1] = content & 0xFF
            ncell += 1
            maxrow[npages] = rowid
        if ncell > 0:
            c = content if content < 65536 else 0
            out[base + 3] = (ncell >> 8) & 0xFF
            out[base + 4] = ncell & 0xFF
            out[base + 5] = (c >> 8) & 0xFF
            out[base + 6] = c & 0xFF
            npages += 1
        return npages

if numba is not None:

    @numba.njit(cache=True, nogil=True)
    def _page_cells(buf, npages, page_size):  # pragma: no cover - compiled
        """The cells of ``npages`` table leaves in ``buf`` (their headers' counts added up)."""
        n = 0
        for pg in range(npages):
            base = pg * page_size
            n += (np.int64(buf[base + 3]) << 8) | np.int64(buf[base + 4])
        return n

    @numba.njit(cache=True, nogil=True)
    def _read_leaves(buf, npages, page_size, defs, out):  # pragma: no cover - compiled
        """The rows (rowid, then the columns) of leaves :func:`_build_leaves` wrote, into ``out``;
        returns how many.  Columns it left out of a record (trailing defaults) get ``defs``."""
        k = out.shape[1]
        r = 0
        for pg in range(npages):
            base = pg * page_size
            ncell = (np.int64(buf[base + 3]) << 8) | np.int64(buf[base + 4])
            for c in range(ncell):
                ptr = base + 8 + 2 * c
                q = base + ((np.int64(buf[ptr]) << 8) | np.int64(buf[ptr + 1]))
                while buf[q] & 0x80:  # the payload's size (not needed: every record is read whole)
                    q += 1
                q += 1
                rowid = np.int64(0)
                while buf[q] & 0x80:
                    rowid = (rowid << 7) | np.int64(buf[q] & 0x7F)
                    q += 1
                rowid = (rowid << 7) | np.int64(buf[q])
                q += 1
                hdr = np.int64(buf[q])  # one byte: fewer than 127 columns
                kk = hdr - 1
                body = q + hdr
                out[r, 0] = rowid
                for j in range(1, kk):
                    t = buf[q + 1 + j]
                    if t == 8:
                        v = np.int64(0)
                    elif t == 9:
                        v = np.int64(1)
                    else:
                        sz = 6 if t == 5 else 8 if t == 6 else np.int64(t)
                        v = np.int64(0)
                        for b in range(sz):
                            v = (v << 8) | np.int64(buf[body + b])
                        body += sz
                        if sz < 8 and v >= (np.int64(1) << (8 * sz - 1)):
                            v -= np.int64(1) << (8 * sz)
                    out[r, j] = v
                for j in range(max(kk, 1), k):
                    out[r, j] = defs[j]
                r += 1
        return r

if numba is not None:

    @numba.njit(cache=True, nogil=True)
    def _int_serial(v):  # pragma: no cover - compiled
        if v == 0:
            return 8, 0
        if v == 1:
            return 9, 0
        if -128 <= v <= 127:
            return 1, 1
        if -32768 <= v <= 32767:
            return 2, 2
        if -8388608 <= v <= 8388607:
            return 3, 3
        if -2147483648 <= v <= 2147483647:
            return 4, 4
        if -140737488355328 <= v <= 140737488355327:
            return 5, 6
        return 6, 8

    @numba.njit(cache=True, nogil=True)
    def _index_record(cell, p, ent, i):  # pragma: no cover - compiled
        """Payload size varint + the record of entry ``ent[i]`` (its key columns, then the rowid) at
        cell[p:]; returns the new end.  At most 13 fields: the payload stays below 128 bytes."""
        f = ent.shape[1]
        q = p + 2 + f
        for c in range(f):
            v = ent[i, c]
            t, size = _int_serial(v)
            cell[p + 2 + c] = t
            for b in range(size):
                cell[q + size - 1 - b] = (v >> (8 * b)) & 0xFF
            q += size
        cell[p] = q - p - 1  # payload size (< 128)
        cell[p + 1] = 1 + f  # header size
        return q

    @numba.njit(cache=True, nogil=True)
    def _build_index_leaves(ent, page_size, out, seps):  # pragma: no cover - compiled
        """Index-leaf pages (0x0A) of sorted entries (rows of ``ent``: key columns, then the rowid).

        An index B-tree holds every entry once: after each full leaf the next
        entry is promoted to the parent level (``seps[i]`` = entry index between
        leaf i and i+1).  Returns (pages, separators).
        """
        n = ent.shape[0]
        cell = np.empty(2 + 9 * ent.shape[1], dtype=np.uint8)
        npages = 0
        nsep = 0
        i = 0
        while i < n:
            base = npages * page_size
            out[base] = 0x0A
            ncell = 0
            content = page_size
            last = 0
            while i < n:
                p = _index_record(cell, 0, ent, i)
                if ncell > 0 and 8 + 2 * (ncell + 1) + (page_size - content) + p > page_size:
                    break
                content -= p
                for b in range(p):
                    out[base + content + b] = cell[b]
                ptr = base + 8 + 2 * ncell
                out[ptr] = (content >> 8) & 0xFF
                out[ptr + 1] = content & 0xFF
                ncell += 1
                last = p
                i += 1
            if i == n - 1 and ncell > 1:
                # one entry left: it cannot be both a separator and the right leaf; give
                # back this leaf's last entry as the separator instead
                ncell -= 1
                content += last
                i -= 1
            out[base + 3] = (ncell >> 8) & 0xFF
            out[base + 4] = ncell & 0xFF
            out[base + 5] = (content >> 8) & 0xFF
            out[base + 6] = content & 0xFF
            npages += 1
            if i < n:
                seps[nsep] = i
                nsep += 1
                i += 1
        return npages, nsep


if numba is not None:

    @numba.njit(cache=True, nogil=True)
    def _build_table_interiors(pgnos, keys, starts, page_size, out):  # pragma: no cover - compiled
        """Table-interior pages (0x05), one per group ``starts[g]:starts[g + 1]`` of children
        (page number, largest rowid): a cell (left child, varint key) for each child but the
        last, which is the right child; cells laid from the page's end, as :func:`_interior_page`."""
        var = np.empty(9, dtype=np.uint8)
        for g in range(starts.size - 1):
            a = starts[g]
            b = starts[g + 1]
            base = g * page_size
            content = page_size
            ptr = base + 12
            for i in range(a, b - 1):
                # the cell: 4-byte big-endian child, then the key as a varint (keys < 2**56)
                v = keys[i]
                nv = 0
                if v < 0x80:
                    var[0] = v
                    nv = 1
                else:
                    while v > 0:
                        var[nv] = (v & 0x7F) | 0x80
                        v >>= 7
                        nv += 1
                    var[0] &= 0x7F
                clen = 4 + nv
                content -= clen
                q = base + content
                c = pgnos[i]
                out[q] = (c >> 24) & 0xFF
                out[q + 1] = (c >> 16) & 0xFF
                out[q + 2] = (c >> 8) & 0xFF
                out[q + 3] = c & 0xFF
                for j in range(nv):
                    out[q + 4 + j] = var[nv - 1 - j]
                out[ptr] = (content >> 8) & 0xFF
                out[ptr + 1] = content & 0xFF
                ptr += 2
            ncell = b - 1 - a
            cc = content if content < 65536 else 0
            out[base] = 0x05
            out[base + 1] = 0
            out[base + 2] = 0
            out[base + 3] = (ncell >> 8) & 0xFF
            out[base + 4] = ncell & 0xFF
            out[base + 5] = (cc >> 8) & 0xFF
            out[base + 6] = cc & 0xFF
            out[base + 7] = 0
            r = pgnos[b - 1]
            out[base + 8] = (r >> 24) & 0xFF
            out[base + 9] = (r >> 16) & 0xFF
            out[base + 10] = (r >> 8) & 0xFF
            out[base + 11] = r & 0xFF


if numba is not None:

    @numba.njit(cache=True, nogil=True, inline="always")
    def _run_less(heads, r, q):  # pragma: no cover - compiled
        """Run ``r``'s next entry before run ``q``'s, in SQLite's order (field by field)."""
        for c in range(heads.shape[1]):
            a = heads[r, c]
            b = heads[q, c]
            if a != b:
                return a < b
        return False

    @numba.njit(cache=True, nogil=True, inline="always")
    def _run_sift(heads, heap, nh, h):  # pragma: no cover - compiled
        """Sift ``heap[h]`` down among the first ``nh`` (a heap of runs by their next entries)."""
        r = heap[h]
        while True:
            a = 2 * h + 1
            if a >= nh:
                break
            b = a + 1
            if b < nh and _run_less(heads, heap[b], heap[a]):
                a = b
            if _run_less(heads, heap[a], r):
                heap[h] = heap[a]
                h = a
            else:
                break
        heap[h] = r

    @numba.njit(cache=True, nogil=True)
    def _runs_merge(buf, lens, pos, more, heap, heads, st, out):  # pragma: no cover - compiled
        """Merge the sorted runs' buffered entries (run r: ``buf[r, pos[r]:lens[r]]``) into ``out``
        through a heap of the runs (``heap[:st[0]]``, ordered by each run's next entry, copied to
        ``heads``: the comparisons stay in a few cache lines, not one in each run's buffer);
        ``st[1]`` = 1: the top's buffer was refilled.  Returns (entries written, the run whose
        buffer ran out while it has more to read, or -1: ``out`` full or every run done).  That run
        stays on top: the caller refills its buffer, sets ``st[1]`` and calls again.  A run with
        nothing more leaves the heap."""
        nh = st[0]
        w = buf.shape[2]
        if nh > 0 and st[1]:
            r = heap[0]
            for c in range(w):
                heads[r, c] = buf[r, pos[r], c]
            _run_sift(heads, heap, nh, 0)
        st[1] = 0
        o = 0
        while nh > 0 and o < out.shape[0]:
            r = heap[0]
            for c in range(w):
                out[o, c] = heads[r, c]
            o += 1
            p = pos[r] + 1
            pos[r] = p
            if p == lens[r]:
                if more[r]:
                    st[0] = nh
                    return o, r
                nh -= 1
                if nh == 0:
                    break
                heap[0] = heap[nh]
            else:
                for c in range(w):
                    heads[r, c] = buf[r, p, c]
            _run_sift(heads, heap, nh, 0)
        st[0] = nh
        return o, -1

    @numba.njit(cache=True, nogil=True)
    def _runs_heap(buf, lens, pos, heap, heads, st):  # pragma: no cover - compiled
        """The heap of the runs with buffered entries (``heap[:st[0]]``), their next entries in ``heads``."""
        nh = 0
        for r in range(lens.shape[0]):
            if pos[r] < lens[r]:
                for c in range(buf.shape[2]):
                    heads[r, c] = buf[r, pos[r], c]
                heap[nh] = r
                nh += 1
        for h in range(nh // 2 - 1, -1, -1):
            _run_sift(heads, heap, nh, h)
        st[0] = nh
        st[1] = 0

    @numba.njit(cache=True, nogil=True)
    def _records(ent, rows, buf, ends):  # pragma: no cover - compiled
        """The records (:func:`index_record`) of entries ``ent[rows]``, one after another in ``buf``
        (``ends[j]``: where record j ends)."""
        p = 0
        for j in range(rows.size):
            p = _index_record(buf, p, ent, rows[j])
            ends[j] = p


def index_records(ent: np.ndarray, rows: np.ndarray) -> list[bytes]:
    """:func:`index_record` of each entry ``ent[rows]`` (the compiled form)."""
    buf = np.empty(len(rows) * (2 + 9 * ent.shape[1]), dtype=np.uint8)
    ends = np.empty(len(rows), dtype=np.int64)
    _records(ent, rows, buf, ends)
    data = buf.tobytes()
    out = []
    a = 0
    for b in ends.tolist():
        out.append(data[a:b])
        a = b
    return out


def index_record(fields: Sequence[int]) -> bytes:
    """Python twin of the kernel's record: payload size varint + record of ``fields`` (key columns,
    then the rowid)."""
    def serial(v: int) -> tuple[int, bytes]:
        if v == 0:
            return 8, b""
        if v == 1:
            return 9, b""
        for t, size in ((1, 1), (2, 2), (3, 3), (4, 4), (5, 6), (6, 8)):
            if -(1 << (8 * size - 1)) <= v < (1 << (8 * size - 1)):
                return t, v.to_bytes(size, "big", signed=True)
        raise ValueError(v)

    types, values = zip(*(serial(int(v)) for v in fields))
    rec = bytes([1 + len(types), *types]) + b"".join(values)
    return bytes([len(rec)]) + rec


#: Key columns an index spliced from pages may have (13 fields with the rowid: records under 128 bytes).
MAX_INDEX_COLUMNS = 12


def index_entries(keys: np.ndarray, rowids: np.ndarray) -> np.ndarray:
    """The (n, columns + 1) int64 entries of ``keys`` (one column, or n x columns) and their rowids."""
    keys = np.asarray(keys, dtype=np.int64)
    return np.column_stack([keys.reshape(len(rowids), -1), np.asarray(rowids, dtype=np.int64)])


def sort_entries(ent: np.ndarray) -> np.ndarray:
    """Entries in SQLite's order for integer columns: by each key column, then the rowid."""
    if len(ent) > 1 and np.all(ent[1:, -1] > ent[:-1, -1]) and ent.shape[1] == 2:
        return ent[np.argsort(ent[:, 0], kind="stable")]  # rows in rowid order: a stable sort by key
    return ent[np.lexsort(ent.T[::-1])]


def _leaf_capacity(n: int, fields: int, page_size: int) -> int:
    """Pages enough for ``n`` entries of ``fields`` integers (the largest cells: 9 bytes a field)."""
    return n // max(1, (page_size - 8) // (4 + 9 * fields)) + 2


class LeafSpool:
    """Leaf pages of one rowid table, built from int64 batches and spooled to a file."""

    def __init__(self, path: Path, ncols: int, page_size: int, defaults: list[int | None] | None = None) -> None:
        if ncols >= 126:
            raise ValueError("too many columns for the one-byte record header")
        if not fits_in_leaf(ncols, page_size):
            raise ValueError(f"a row of {ncols} columns may need an overflow page at page size {page_size}")
        defaults = defaults or [None] * ncols
        self.has_def = np.array([d is not None for d in defaults], dtype=np.bool_)
        self.defs = np.array([0 if d is None else d for d in defaults], dtype=np.int64)
        self.path = path
        self.ncols = ncols
        self.page_size = page_size
        self.last_rowid = -1
        self.maxrows: list[np.ndarray] = []
        self.npages = 0
        self.rows = 0
        self._f = open(path, "wb")  # noqa: SIM115 - closed by close()
        # the page buffer, reused by every add: a fresh one per batch (worst case ~15 MB for the
        # samples) left the allocator's heaps fragmented, the resident set growing with the trace
        self._out = np.empty(0, dtype=np.uint8)
        self._maxrow = np.empty(0, dtype=np.int64)

    def reserve(self, last: int) -> None:
        """Record that rows up to id ``last`` are on their way (called before :meth:`add`, in order)."""
        self.last_rowid = last

    def add(self, mat: np.ndarray) -> None:
        """Build and spool the leaf pages of ``mat`` (may run in a background thread)."""
        n = mat.shape[0]
        if n == 0:
            return
        pages, maxrow = self._build(mat)
        self._f.write(pages)
        self.maxrows.append(maxrow)
        self.npages += len(maxrow)
        self.rows += n

    def _build(self, mat: np.ndarray) -> tuple[memoryview, np.ndarray]:
        """The leaf pages of ``mat`` (in the spool's buffer: written before the next build) and
        each one's largest rowid."""
        max_cell = 16 + 9 * self.ncols
        per_page = max(1, (self.page_size - 8) // (max_cell + 2))
        cap = mat.shape[0] // per_page + 2
        if self._out.size < cap * self.page_size:  # one buffer for the spool's life (adds come one at a time)
            self._out = np.empty(cap * self.page_size, dtype=np.uint8)
            self._maxrow = np.empty(cap, dtype=np.int64)
        out, maxrow = self._out, self._maxrow
        pages = _build_leaves(np.asarray(mat, dtype=np.int64), self.page_size, out, maxrow, self.has_def, self.defs)
        return memoryview(out)[: pages * self.page_size], maxrow[:pages].copy()

    def rows_from(self, rowid: int) -> int:
        """About how many spooled rows are in the pages from the first that holds ``rowid`` or a
        larger one on: what :meth:`merge` reads and builds again to put a row of that id in."""
        if not self.npages:
            return 0
        first = int(np.searchsorted(np.concatenate(self.maxrows), rowid))
        return -(-self.rows * (self.npages - first) // self.npages)

    def merge(self, late: np.ndarray) -> bool:
        """Put ``late`` (rows sorted by id, below the last one spooled) in among the spooled rows,
        as if they had come in order: the pages from the first that holds a larger id on are read
        back, merged with them and built again (in blocks of :data:`MERGE_PAGES`).  False, with
        the spool as it was, where a late id is one spooled already (SQLite reports it)."""
        if not len(late):
            return True
        if not self._f.closed:
            self._f.flush()
        ps = self.page_size
        keys = np.concatenate(self.maxrows) if self.maxrows else np.empty(0, dtype=np.int64)
        first = int(np.searchsorted(keys, int(late[0, 0])))
        tail_path = self.path.with_name(f"{self.path.name}.merge")
        new_keys: list[np.ndarray] = []
        try:
            with open(self.path, "rb") as src, open(tail_path, "wb") as dst:
                src.seek(first * ps)
                j = 0
                for start in range(first, self.npages, MERGE_PAGES):
                    n = min(MERGE_PAGES, self.npages - start)
                    data = src.read(n * ps)
                    if len(data) != n * ps:
                        raise OSError(errno.EIO, f"{self.path}: short read at page {start}")
                    buf = np.frombuffer(data, dtype=np.uint8)
                    rows = np.empty((_page_cells(buf, n, ps), self.ncols), dtype=np.int64)
                    _read_leaves(buf, n, ps, self.defs, rows)
                    last = start + n == self.npages
                    k = len(late) if last else int(np.searchsorted(late[:, 0], keys[start + n - 1], side="right"))
                    mat = rows
                    if k > j:  # both in id order: each late row goes in before the first larger id
                        at = np.searchsorted(rows[:, 0], late[j:k, 0])
                        if np.any(rows[np.minimum(at, len(rows) - 1), 0] == late[j:k, 0]):
                            return False  # (finally: the tail removed, the spool unchanged)
                        mat = np.insert(rows, at, late[j:k], axis=0)
                        j = k
                    pages, maxrow = self._build(mat)
                    dst.write(pages)
                    new_keys.append(maxrow)
                if j < len(late):  # ids past every spooled page (rows reserved, none spooled after them)
                    pages, maxrow = self._build(late[j:])
                    dst.write(pages)
                    new_keys.append(maxrow)
            self._f.close()
            with open(self.path, "r+b") as f, open(tail_path, "rb") as tail:
                f.truncate(first * ps)
                f.seek(first * ps)
                size = os.fstat(tail.fileno()).st_size
                if not _copy_range(tail, f, 0, first * ps, size):
                    while chunk := tail.read(64 << 20):
                        f.write(chunk)
            self._f = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        finally:
            tail_path.unlink(missing_ok=True)
        self.maxrows = [keys[:first], *new_keys]
        self.npages = first + sum(len(k) for k in new_keys)
        self.rows += len(late)
        return True

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def remove(self) -> None:
        try:
            self.close()  # flushes: fails on a full disk (the file is closed all the same)
        except OSError:
            pass
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _interior_page(page_size: int, children: list[tuple[int, int]]) -> bytes:
    """A table-interior page: cells (left child, key = its largest rowid), the last child on the right."""
    cells = []
    for pgno, key in children[:-1]:
        v = key
        var = bytearray()
        if v < 0x80:
            var.append(v)
        else:
            tmp = []
            while v:
                tmp.append((v & 0x7F) | 0x80)
                v >>= 7
            tmp[0] &= 0x7F
            var.extend(reversed(tmp))
        cells.append(struct.pack(">I", pgno) + bytes(var))
    page = bytearray(page_size)
    content = page_size
    ptrs = bytearray()
    for c in cells:
        content -= len(c)
        page[content: content + len(c)] = c
        ptrs += struct.pack(">H", content)
    page[0] = 0x05
    struct.pack_into(">HHHB", page, 1, 0, len(cells), content if content < 65536 else 0, 0)
    struct.pack_into(">I", page, 8, children[-1][0])
    page[12: 12 + len(ptrs)] = ptrs
    if 12 + len(ptrs) > content:  # pragma: no cover - fanout is computed to fit
        raise ValueError("interior page overflow")
    return bytes(page)


def _groups(items: list, size: int) -> list[list]:
    groups = [items[i: i + size] for i in range(0, len(items), size)]
    if len(groups) > 1 and len(groups[-1]) < 2:  # no interior page with a right child only
        groups[-1].insert(0, groups[-2].pop())
    return groups


def _group_starts(n: int, size: int) -> np.ndarray:
    """Bounds of :func:`_groups`' groups of ``n`` items (``starts[g]:starts[g + 1]``)."""
    starts = np.append(np.arange(0, n, size, dtype=np.int64), n)
    if len(starts) > 2 and n - starts[-2] < 2:  # no interior page with a right child only
        starts[-2] -= 1
    return starts


def warm() -> None:
    """:meth:`LeafSpool.merge`'s kernels compiled, for compiling ahead: only an export with many
    calls still open at its end merges (no shipped sample has enough)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ptexport-warm-") as tmp:
        spool = LeafSpool(Path(tmp) / "warm.spool", 3, 4096, [None, None, 0])
        try:
            spool.add(np.stack([np.arange(1, 2001, 2), np.arange(1000), np.zeros(1000, np.int64)], axis=1))
            spool.merge(np.array([[2, -1, 5], [4, -2, 0]], dtype=np.int64))
        finally:
            spool.remove()


def check_file(path: str | os.PathLike[str]) -> int | None:
    """The page size if the file's header allows splicing (no reserved bytes, format 4, no auto-vacuum)."""
    with open(path, "rb") as f:
        hdr = f.read(100)
    if len(hdr) < 100 or hdr[:16] != b"SQLite format 3\x00":
        return None
    page_size = struct.unpack(">H", hdr[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    reserved = hdr[20]
    schema_format = struct.unpack(">I", hdr[44:48])[0]
    autovacuum_root = struct.unpack(">I", hdr[52:56])[0]
    if reserved or schema_format != 4 or autovacuum_root:
        return None
    return page_size


class _PageFile:
    """Appends pages to a database file, skipping the pending-byte page; tracks the page count."""

    def __init__(self, db, page_size: int) -> None:
        self.db = db
        self.ps = page_size
        db.seek(0)
        self.hdr = bytearray(db.read(100))
        db.seek(0, os.SEEK_END)
        self.npages = db.tell() // page_size
        self.pending_page = PENDING_BYTE // page_size + 1

    def _runs(self, count: int):
        """(first page, pages, pages done before) of ``count`` new pages at the end, in runs
        around the pending-byte page (written as zeros: SQLite never uses it)."""
        done = 0
        while done < count:
            first = self.npages + 1
            if first == self.pending_page:
                self.db.seek((first - 1) * self.ps)
                self.db.write(bytes(self.ps))
                self.npages += 1
                continue
            k = count - done
            if first < self.pending_page <= first + k - 1:
                k = self.pending_page - first
            yield first, k, done
            self.npages += k
            done += k

    def append(self, data: bytes | memoryview, count: int = 1) -> list[int]:
        """Write ``count`` pages of ``data`` at the end; returns their page numbers."""
        numbers: list[int] = []
        for first, k, done in self._runs(count):
            self.db.seek((first - 1) * self.ps)
            self.db.write(data[done * self.ps: (done + k) * self.ps])
            numbers.extend(range(first, first + k))
        return numbers

    def copy_from(self, src, count: int) -> np.ndarray:
        """Append the first ``count`` pages of file ``src`` (copied in the kernel where it can);
        returns their page numbers."""
        numbers = np.empty(count, dtype=np.int64)
        ps = self.ps
        self.db.flush()
        for first, k, done in self._runs(count):
            numbers[done: done + k] = np.arange(first, first + k)
            if not _copy_range(src, self.db, done * ps, (first - 1) * ps, k * ps):
                block = max(1, (64 << 20) // ps)
                for j in range(0, k, block):
                    m = min(block, k - j)
                    src.seek((done + j) * ps)
                    self.db.seek((first - 1 + j) * ps)
                    self.db.write(src.read(m * ps))
                self.db.flush()
        return numbers

    def write_page(self, pgno: int, data: bytes | memoryview) -> None:
        self.db.seek((pgno - 1) * self.ps)
        self.db.write(data)

    def close(self) -> None:
        counter = (struct.unpack(">I", self.hdr[24:28])[0] + 1) & 0xFFFFFFFF
        struct.pack_into(">I", self.hdr, 24, counter)
        struct.pack_into(">I", self.hdr, 28, self.npages)
        struct.pack_into(">I", self.hdr, 92, counter)
        self.db.seek(0)
        self.db.write(self.hdr)


def _index_interior(ps: int, cells: list[bytes], right: int) -> bytes:
    page = bytearray(ps)
    content = ps
    ptrs = bytearray()
    for c in cells:
        content -= len(c)
        page[content: content + len(c)] = c
        ptrs += struct.pack(">H", content)
    page[0] = 0x02
    struct.pack_into(">HHHB", page, 1, 0, len(cells), content if content < 65536 else 0, 0)
    struct.pack_into(">I", page, 8, right)
    page[12: 12 + len(ptrs)] = ptrs
    return bytes(page)


def splice_index(db_path: str | os.PathLike[str], root_page: int, page_size: int,
                 keys: np.ndarray, rowids: np.ndarray) -> None:
    """Make the (empty) index whose root is ``root_page`` hold (key columns, rowid) for every row
    (``keys``: one column, or a row of key columns per rowid).

    Entries are sorted here (each key column, then the rowid: SQLite's order for integer
    columns); the leaves are built by a numba kernel, the interior pages
    (0x02, each cell a left child and a promoted entry) in Python.
    """
    n = int(len(rowids))
    if n == 0:
        return
    ent = np.ascontiguousarray(sort_entries(index_entries(keys, rowids)))
    ps = page_size
    cap = _leaf_capacity(n, ent.shape[1], ps)
    out = np.zeros(cap * ps, dtype=np.uint8)
    seps = np.zeros(cap, dtype=np.int64)
    npages, nsep = _build_index_leaves(ent, ps, out, seps)
    with open(db_path, "r+b") as db:
        pf = _PageFile(db, ps)
        if npages == 1:
            pf.write_page(root_page, memoryview(out)[:ps])
            pf.close()
            return
        children = pf.append(memoryview(out), npages)
        entries = index_records(ent, seps[:nsep])
        _index_interiors(pf, root_page, children, entries)
        pf.close()


def splice_index_blocks(db_path: str | os.PathLike[str], root_page: int, page_size: int,
                        blocks: Iterable[np.ndarray]) -> None:
    """:func:`splice_index` for entries already sorted, given as consecutive blocks (rows: key
    columns, then the rowid), in memory bounded by a block (for more entries than fit: see the
    SQLite writer's index runs).

    Each block but the last gives its leaves and, as the separator before the next block's first
    leaf, its last entry.  Needs at least two leaves' worth of entries in all.
    """
    ps = page_size
    children: list[int] = []
    entries: list[bytes] = []
    carry: np.ndarray | None = None
    with open(db_path, "r+b") as db:
        pf = _PageFile(db, ps)

        def leaves(e: np.ndarray) -> None:
            cap = _leaf_capacity(len(e), e.shape[1], ps)
            out = np.zeros(cap * ps, dtype=np.uint8)
            seps = np.zeros(cap, dtype=np.int64)
            npages, nsep = _build_index_leaves(e, ps, out, seps)
            children.extend(pf.append(memoryview(out), npages))
            entries.extend(index_records(e, seps[:nsep]))

        for block in blocks:
            e = np.ascontiguousarray(block if carry is None else np.concatenate([carry, block]), dtype=np.int64)
            if len(e) < 3:
                carry = e
                continue
            # hold the last two back: one may be needed as the final leaf's content, one as separator
            leaves(e[:-2])
            entries.append(index_record(e[-2].tolist()))
            carry = e[-1:]
        if not children or carry is None:
            raise ValueError("splice_index_blocks needs more entries than one leaf holds")
        leaves(carry)
        _index_interiors(pf, root_page, children, entries)
        pf.close()


def _index_interiors(pf: "_PageFile", root_page: int, children: list[int], entries: list[bytes]) -> None:
    """Interior levels over leaves ``children`` separated by ``entries``; the top one is ``root_page``."""
    ps = pf.ps
    while True:
        # children[j] | entries[j] | children[j + 1] ...; pack pages, promoting one entry per page break
        pages: list[tuple[list[bytes], int]] = []
        promoted: list[bytes] = []
        cells: list[bytes] = []
        used = 12
        j = 0
        m = len(entries)
        while j < m:
            cell = struct.pack(">I", children[j]) + entries[j]
            if cells and used + 2 + len(cell) > ps:
                if j == m - 1 and len(cells) > 1:  # keep a cell for the last page
                    cells.pop()
                    j -= 1
                pages.append((cells, children[j]))
                promoted.append(entries[j])
                cells, used = [], 12
                j += 1
                continue
            cells.append(cell)
            used += 2 + len(cell)
            j += 1
        pages.append((cells, children[m]))
        if len(pages) == 1:
            pf.write_page(root_page, _index_interior(ps, pages[0][0], pages[0][1]))
            return
        children = [pf.append(_index_interior(ps, c, r))[0] for c, r in pages]
        entries = promoted


def splice(db_path: str | os.PathLike[str], root_page: int, spool: LeafSpool) -> None:
    """Make the spooled leaves the content of the (empty) table whose root page is ``root_page``."""
    spool.close()
    ps = spool.page_size
    if spool.npages == 0:
        return
    pgnos = _adopt(db_path, spool) if spool.npages > 1 else None
    with open(db_path, "r+b") as db, open(spool.path if pgnos is None else db_path, "rb") as sp:
        pf = _PageFile(db, ps)
        if spool.npages == 1:
            pf.write_page(root_page, sp.read(ps))
        else:
            # the leaves (in place, or copied in large sequential runs), then the interior levels above them
            if pgnos is None:
                pgnos = pf.copy_from(sp, spool.npages)
            keys = np.concatenate(spool.maxrows).astype(np.int64)
            fanout = (ps - 12) // (2 + 4 + 9)
            while True:
                starts = _group_starts(len(pgnos), fanout)
                out = np.zeros((len(starts) - 1) * ps, dtype=np.uint8)
                _build_table_interiors(pgnos, keys, starts, ps, out)
                if len(starts) == 2:
                    pf.write_page(root_page, memoryview(out))
                    break
                pgnos = np.asarray(pf.append(memoryview(out), len(starts) - 1), dtype=np.int64)
                keys = keys[starts[1:] - 1]
        pf.close()


#: fallocate(2)'s FALLOC_FL_INSERT_RANGE (linux/falloc.h): a hole opened inside a file, the data
#: after it moved up by changing the file's extents, not by copying it.
_FALLOC_FL_INSERT_RANGE = 0x20
#: fallocate's errors that mean "not on this file system / kernel": the caller copies instead.
_NO_INSERT_RANGE = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM, errno.ENODEV})
_fallocate: Any = None


def _insert_range(fd: int, offset: int, length: int) -> bool:
    """Open a hole of ``length`` bytes at ``offset`` in the file (the bytes from ``offset`` on move
    up); False, having changed nothing, where the file system or the C library cannot."""
    global _fallocate
    if _fallocate is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fn = libc.fallocate
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            fn.restype = ctypes.c_int
            _fallocate = fn
        except (OSError, AttributeError):
            _fallocate = False
    if not _fallocate:
        return False
    if _fallocate(fd, _FALLOC_FL_INSERT_RANGE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_INSERT_RANGE:
        return False
    raise OSError(err, f"fallocate(FALLOC_FL_INSERT_RANGE): {os.strerror(err)}")


def _adopt(db_path: str | os.PathLike[str], spool: LeafSpool) -> np.ndarray | None:
    """Make the spool file the database: the database's pages go in front of the leaves, not the
    leaves after the database.

    The leaves are most of an export (the samples table: ~70 % of its bytes); copying them behind
    the database's own pages, even in the kernel, cost a second or more per 10 M samples.  Where
    the file system can open a hole at the start of a file (ext4, XFS: ``FALLOC_FL_INSERT_RANGE``,
    whole file-system blocks) the database's pages are written into that hole instead and the
    spool is renamed over the database (the same directory: atomic).  The leaves keep their order;
    the pending-byte page at 1 GiB, which SQLite never uses, gets a hole of its own if the leaves
    cross it.  Returns the leaves' page numbers, or None (nothing changed) where this cannot be
    done: the database is the bigger file, pages smaller than a file-system block, no such
    fallocate here.
    """
    ps = spool.page_size
    try:
        db_size = os.path.getsize(db_path)
        block = os.statvfs(spool.path).f_bsize
    except OSError:
        return None
    nleaves = spool.npages
    if db_size % ps or db_size == 0 or db_size >= nleaves * ps or block <= 0 or ps % block:
        return None
    front = db_size // ps
    pending = PENDING_BYTE // ps + 1
    with open(spool.path, "r+b") as sp:
        if not _insert_range(sp.fileno(), 0, front * ps):
            return None
        pgnos = np.arange(front + 1, front + nleaves + 1, dtype=np.int64)
        if front < pending <= front + nleaves:
            if not _insert_range(sp.fileno(), (pending - 1) * ps, ps):  # pragma: no cover - took the first
                raise OSError(errno.EOPNOTSUPP, "fallocate(FALLOC_FL_INSERT_RANGE) failed on its second hole")
            pgnos[pgnos >= pending] += 1
        with open(db_path, "rb") as db:
            done = 0
            while done < db_size:
                chunk = db.read(min(64 << 20, db_size - done))
                if not chunk:
                    raise OSError(errno.EIO, f"{db_path}: ended at {done} of {db_size} bytes")
                sp.seek(done)
                sp.write(chunk)
                done += len(chunk)
    os.replace(spool.path, db_path)
    return pgnos


#: copy_file_range's errors that mean "not here" (no such call, another file system, a seccomp
#: filter, files it does not take): copied through user space instead.  Any other error (ENOSPC,
#: EIO, EDQUOT...) is the storage failing: raised, never retried.
_NO_COPY_RANGE = frozenset({errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM, errno.EBADF})


def _copy_range(src, dst, src_off: int, dst_off: int, size: int) -> bool:
    """Copy ``size`` bytes between the files' descriptors with ``os.copy_file_range`` (no trip
    through user space); False, having copied nothing, where the system cannot."""
    copy = getattr(os, "copy_file_range", None)
    if copy is None:
        return False
    done = 0
    while done < size:
        try:
            n = copy(src.fileno(), dst.fileno(), size - done, src_off + done, dst_off + done)
        except OSError as e:
            if done or e.errno not in _NO_COPY_RANGE:
                raise
            return False
        if n <= 0:
            if done:
                raise OSError(f"copy_file_range stopped after {done} of {size} bytes")
            return False
        done += n
    return True
