"""Qt models: thin adapters over :mod:`ptexport_viewer.queries`.

* :class:`LazyTreeModel` - children are queried (in a worker) the first time a
  node is expanded; each node is an integer id (its index in a list) used as
  the QModelIndex internal id.  :class:`CallGraphModel` and
  :class:`CallTreeModel` define the levels.
* :class:`PagedTableModel` - rows arrive a page at a time by key; Qt's
  ``canFetchMore``/``fetchMore`` (and the fetch-more bar) ask for the next page.
* :class:`RowsModel` - a fixed list of rows (top calls, SQL console results).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from PySide6.QtCore import QAbstractItemModel, QAbstractTableModel, QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QFont

from . import queries as q
from .db import Database, Session
from .workers import Job, start

RIGHT = int((Qt.AlignRight | Qt.AlignVCenter).value)
LEFT = int((Qt.AlignLeft | Qt.AlignVCenter).value)
# Roles as plain ints: comparing against PySide6 enum members costs ~10x more in data().
DISPLAY = Qt.ItemDataRole.DisplayRole.value
TOOLTIP = Qt.ItemDataRole.ToolTipRole.value
ALIGN = Qt.ItemDataRole.TextAlignmentRole.value
FONT = Qt.ItemDataRole.FontRole.value


def show(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (bytes, memoryview)):
        return bytes(v).hex()
    return str(v)


# ----------------------------------------------------------------------------
# Lazy trees


@dataclass
class Node:
    kind: str                   # 'root', 'machine', 'vcpu', 'comm', 'thread', 'path', 'call'
    key: int                    # database id of what the node shows
    parent: int                 # parent node id (-1 for the root)
    row: int
    data: list[str]
    ctx: dict[str, Any] = field(default_factory=dict)   # comm_id, thread_id, machine_id, vcpu...
    values: tuple = ()          # (time, insn, cyc, branches) for percentages
    children: list[int] | None = None
    leaf: bool = False
    loading: bool = False


class LazyTreeModel(QAbstractItemModel):
    """A tree whose children are fetched by worker queries on first expansion."""

    headers: Sequence[str] = ()
    loaded = Signal(QModelIndex)          # children of this index have arrived
    failed = Signal(str)

    def __init__(self, db: Database, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.db = db
        self.nodes: list[Node] = [Node("root", 0, -1, 0, [], children=None)]
        self.jobs: list[Job] = []
        self.job_nodes: dict[Job, int] = {}
        self.pending = 0
        self.bold_rows = False

    # -- to define in subclasses -------------------------------------------
    def query_children(self, s: Session, node: Node) -> list[Node]:
        raise NotImplementedError

    # -- Qt interface --------------------------------------------------------
    def node(self, index: QModelIndex) -> Node:
        return self.nodes[index.internalId()] if index.isValid() else self.nodes[0]

    def node_id(self, index: QModelIndex) -> int:
        return index.internalId() if index.isValid() else 0

    def index(self, row: int, column: int, parent: QModelIndex = QModelIndex()) -> QModelIndex:
        if column < 0 or column >= len(self.headers) or row < 0:
            return QModelIndex()
        p = self.node(parent)
        if p.children is None or row >= len(p.children):
            return QModelIndex()
        return self.createIndex(row, column, p.children[row])

    def parent(self, index: QModelIndex = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        if not index.isValid():
            return QModelIndex()
        n = self.nodes[index.internalId()]
        if n.parent <= 0:
            return QModelIndex()
        p = self.nodes[n.parent]
        return self.createIndex(p.row, 0, n.parent)

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:
        if parent.isValid() and parent.column() != 0:
            return 0
        ch = self.node(parent).children
        return len(ch) if ch is not None else 0

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return len(self.headers)

    def hasChildren(self, parent: QModelIndex = QModelIndex()) -> bool:
        if parent.isValid() and parent.column() != 0:
            return False
        n = self.node(parent)
        if n.children is None:
            return not n.leaf
        return bool(n.children)

    def canFetchMore(self, parent: QModelIndex) -> bool:
        if parent.isValid() and parent.column() != 0:
            return False
        n = self.node(parent)
        return n.children is None and not n.leaf and not n.loading

    def fetchMore(self, parent: QModelIndex) -> None:
        if not self.canFetchMore(parent):
            return
        self.load(self.node_id(parent))

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.DisplayRole) -> Any:
        if orientation == Qt.Horizontal and role == Qt.DisplayRole and 0 <= section < len(self.headers):
            return self.headers[section]
        if orientation == Qt.Horizontal and role == Qt.TextAlignmentRole:
            return LEFT if section < 2 else RIGHT
        return None

    def data(self, index: QModelIndex, role: int = Qt.DisplayRole) -> Any:
        if not index.isValid():
            return None
        role = int(role)
        n = self.nodes[index.internalId()]
        if role == DISPLAY:
            c = index.column()
            return n.data[c] if c < len(n.data) else ""
        if role == ALIGN:
            return LEFT if index.column() < 2 else RIGHT
        if role == TOOLTIP and index.column() == 0:
            return n.data[0]
        return None

    def flags(self, index: QModelIndex) -> Qt.ItemFlags:
        if not index.isValid():
            return Qt.NoItemFlags
        return Qt.ItemIsEnabled | Qt.ItemIsSelectable

    # -- loading -------------------------------------------------------------
    def index_of(self, node_id: int, column: int = 0) -> QModelIndex:
        if node_id <= 0:
            return QModelIndex()
        n = self.nodes[node_id]
        return self.createIndex(n.row, column, node_id)

    def load(self, node_id: int, then: Callable[[], None] | None = None) -> None:
        """Query the children of ``node_id`` in a worker (once), then call ``then``."""
        n = self.nodes[node_id]
        if n.children is not None or n.leaf:
            if then:
                then()
            return
        callbacks = n.ctx.setdefault("_then", [])
        if then:
            callbacks.append(then)
        if n.loading:
            return
        n.loading = True
        self.pending += 1
        snapshot = Node(n.kind, n.key, n.parent, n.row, list(n.data), dict(n.ctx), n.values)
        snapshot.ctx.pop("_then", None)
        holder: list[Job] = []
        job = start(self.db, self._query, snapshot, on_result=lambda kids, i=node_id: self._insert(i, kids),
                    on_error=lambda msg, i=node_id: self._fail(i, msg),
                    on_finished=lambda: self._job_over(holder[0]))
        holder.append(job)
        self.jobs.append(job)
        self.job_nodes[job] = node_id

    def _query(self, s: Session, node: Node) -> list[Node]:
        return self.query_children(s, node)

    def _insert(self, node_id: int, kids: list[Node]) -> None:
        n = self.nodes[node_id]
        parent = self.index_of(node_id)
        if kids:
            self.beginInsertRows(parent, 0, len(kids) - 1)
        ids = []
        for row, k in enumerate(kids):
            k.parent = node_id
            k.row = row
            self.nodes.append(k)
            ids.append(len(self.nodes) - 1)
        n.children = ids
        n.loading = False          # only now: views may call fetchMore from the insert signals
        self.pending -= 1
        if kids:
            self.endInsertRows()
        else:
            # tell views the expander should go away
            self.dataChanged.emit(parent, parent)
        self.loaded.emit(parent)
        for cb in n.ctx.pop("_then", []):
            cb()

    def _fail(self, node_id: int, msg: str) -> None:
        n = self.nodes[node_id]
        n.loading = False
        n.ctx.pop("_then", None)
        self.pending -= 1
        self.failed.emit(msg)

    def _job_over(self, job: Job) -> None:
        if job in self.jobs:
            self.jobs.remove(job)
        self.job_nodes.pop(job, None)

    def cancel(self) -> None:
        """Stop every running query; the nodes they were loading can be expanded again."""
        for j in list(self.jobs):
            j.cancel()
            nid = self.job_nodes.pop(j, None)
            if nid is not None and self.nodes[nid].loading:
                n = self.nodes[nid]
                n.loading = False
                n.ctx.pop("_then", None)
                self.pending -= 1

    def expand_path(self, keys: Sequence[int], done: Callable[[QModelIndex], None]) -> None:
        """Load the nodes along ``keys`` (database ids level by level, machine/vcpu levels matched
        by the comm/thread they contain) and call ``done`` with the deepest index found."""
        def step(node_id: int, rest: list[int]) -> None:
            if not rest:
                done(self.index_of(node_id))
                return

            def after() -> None:
                n = self.nodes[node_id]
                for cid in n.children or []:
                    c = self.nodes[cid]
                    if c.kind in ("machine", "vcpu"):
                        continue
                    if c.key == rest[0]:
                        step(cid, rest[1:])
                        return
                # descend through machine/vcpu levels that hold the comm
                for cid in n.children or []:
                    c = self.nodes[cid]
                    if c.kind in ("machine", "vcpu") and self._may_contain(c, rest[0]):
                        step_through(cid, rest)
                        return
                done(self.index_of(node_id))

            self.load(node_id, after)

        def step_through(node_id: int, rest: list[int]) -> None:
            def after() -> None:
                n = self.nodes[node_id]
                for cid in n.children or []:
                    c = self.nodes[cid]
                    if c.kind in ("machine", "vcpu"):
                        if self._may_contain(c, rest[0]):
                            step_through(cid, rest)
                            return
                    elif c.key == rest[0]:
                        step(cid, rest[1:])
                        return
                done(self.index_of(node_id))
            self.load(node_id, after)

        step(0, list(keys))

    def _may_contain(self, node: Node, comm_id: int) -> bool:
        comms = node.ctx.get("comm_ids")
        return comms is None or comm_id in comms


class _CallModelBase(LazyTreeModel):
    """Shared levels of the call graph and call tree: [machine [vcpu]] comm, thread."""

    def __init__(self, db: Database, parent: QObject | None = None) -> None:
        self.ipc = db.caps.calls_ipc
        self.headers = self.make_headers()
        super().__init__(db, parent)

    def make_headers(self) -> list[str]:
        raise NotImplementedError

    def blank(self, text: str) -> list[str]:
        return [text] + [""] * (len(self.headers) - 1)

    def query_children(self, s: Session, node: Node) -> list[Node]:
        ctx = {k: v for k, v in node.ctx.items() if not k.startswith("_")}
        if node.kind == "root":
            if q.use_machine_level(s):
                out = []
                for m in q.machines(s, with_calls=True):
                    comms = [c for c, _ in q.comms_with_calls(s, machine_id=m.id)]
                    out.append(Node("machine", m.id, 0, 0, self.blank(m.label),
                                    {"machine_id": m.id, "comm_ids": comms}))
                return out
            return self.comm_nodes(s, ctx)
        if node.kind == "machine":
            vc = q.vcpus(s, node.key) if s.db.caps.samples_vcpu else []
            if vc:
                out = []
                for v in vc:
                    label = f"VCPU {v.vcpu}" + (f" (host thread {v.host_pid}:{v.host_tid})" if v.host_tid >= 0 else "")
                    comms = [c for c, _ in q.comms_with_calls(s, machine_id=node.key, vcpu=v.vcpu)]
                    out.append(Node("vcpu", v.vcpu, 0, 0, self.blank(label), dict(ctx, vcpu=v.vcpu, comm_ids=comms)))
                return out
            return self.comm_nodes(s, ctx)
        if node.kind == "vcpu":
            return self.comm_nodes(s, ctx)
        if node.kind == "comm":
            return [Node("thread", t, 0, 0, self.blank(f"{pid}:{tid}"), dict(ctx, thread_id=t))
                    for t, pid, tid in q.threads_of_comm(s, node.key, ctx.get("machine_id"))]
        kids = self.call_children(s, node, ctx)
        if node.kind == "thread" and "vcpu" not in ctx:
            kids += self.guest_vcpus_of(s, node.key)
        return kids

    def guest_vcpus_of(self, s: Session, thread_id: int) -> list[Node]:
        """Under a host thread that runs a guest VCPU (qemu's 'CPU n/KVM'): that VCPU's guest view."""
        out = []
        if not s.db.caps.samples_vcpu:
            return out
        for v in q.vcpus(s):
            if v.thread_id != thread_id:
                continue
            pid = next((m.pid for m in q.machines(s) if m.id == v.machine_id), "?")
            comms = [c for c, _ in q.comms_with_calls(s, machine_id=v.machine_id, vcpu=v.vcpu)]
            if comms:
                out.append(Node("vcpu", v.vcpu, 0, 0, self.blank(f"guest {pid} VCPU {v.vcpu}"),
                                {"machine_id": v.machine_id, "vcpu": v.vcpu, "comm_ids": comms}))
        return out

    def comm_nodes(self, s: Session, ctx: dict) -> list[Node]:
        ctx = {k: v for k, v in ctx.items() if k != "comm_ids"}
        return [Node("comm", c, 0, 0, self.blank(name), dict(ctx, comm_id=c))
                for c, name in q.comms_with_calls(s, ctx.get("machine_id"), ctx.get("vcpu"))]

    def call_children(self, s: Session, node: Node, ctx: dict) -> list[Node]:
        raise NotImplementedError

    def rows_with_percent(self, kids: list[q.CallNode], parent_values: tuple | None, kind: str,
                          ctx: dict, first_col: Callable[[q.CallNode], str]) -> list[Node]:
        if parent_values is None:   # thread level: the whole is the sum of the children (perf)
            parent_values = (sum(k.time for k in kids), sum(k.insn for k in kids), sum(k.cyc for k in kids),
                             sum(k.branches for k in kids))
        pt, pi, pc, pb = parent_values
        out = []
        for k in kids:
            if self.ipc:
                data = [k.name, k.dso, first_col(k), str(k.time), q.percent(k.time, pt), str(k.insn),
                        q.percent(k.insn, pi), str(k.cyc), q.percent(k.cyc, pc), q.ipc(k.insn, k.cyc),
                        str(k.branches), q.percent(k.branches, pb)]
            else:
                data = [k.name, k.dso, first_col(k), str(k.time), q.percent(k.time, pt), str(k.branches),
                        q.percent(k.branches, pb)]
            n = Node(kind, k.id, 0, 0, data, dict(ctx), (k.time, k.insn, k.cyc, k.branches))
            if kind == "call":
                n.ctx["call_time"] = k.count
                n.ctx["return_time"] = k.count + k.time
            out.append(n)
        return out


class CallGraphModel(_CallModelBase):
    """perf's context-sensitive call graph: comm > thread > call path, aggregated
    (over the calls overlapping ``window`` when one is given)."""

    def __init__(self, db: Database, parent: QObject | None = None,
                 window: tuple[int, int] | None = None) -> None:
        self.window = window
        super().__init__(db, parent)

    def make_headers(self) -> list[str]:
        if self.ipc:
            return ["Call Path", "Object", "Count", "Time (ns)", "Time (%)", "Insn Cnt", "Insn Cnt (%)",
                    "Cyc Cnt", "Cyc Cnt (%)", "IPC", "Branch Count", "Branch Count (%)"]
        return ["Call Path", "Object", "Count", "Time (ns)", "Time (%)", "Branch Count", "Branch Count (%)"]

    def call_children(self, s: Session, node: Node, ctx: dict) -> list[Node]:
        if node.kind == "thread":
            parent_cp = q.root_call_path(s)
            pv = None
        else:
            parent_cp = node.key
            pv = node.values
        kids = q.call_graph_children(s, ctx["comm_id"], ctx["thread_id"], parent_cp, ctx.get("vcpu"), self.window)
        return self.rows_with_percent(kids, pv, "path", ctx, lambda k: str(k.count))


class CallTreeModel(_CallModelBase):
    """perf's call tree: comm > thread > individual calls in time order."""

    def make_headers(self) -> list[str]:
        if self.ipc:
            return ["Call Path", "Object", "Call Time", "Time (ns)", "Time (%)", "Insn Cnt", "Insn Cnt (%)",
                    "Cyc Cnt", "Cyc Cnt (%)", "IPC", "Branch Count", "Branch Count (%)"]
        return ["Call Path", "Object", "Call Time", "Time (ns)", "Time (%)", "Branch Count", "Branch Count (%)"]

    def call_children(self, s: Session, node: Node, ctx: dict) -> list[Node]:
        if node.kind == "thread":
            parent_call = 0
            pv = None
        else:
            parent_call = node.key
            pv = node.values
        kids = q.call_tree_children(s, ctx["comm_id"], ctx["thread_id"], parent_call, ctx.get("vcpu"))
        return self.rows_with_percent(kids, pv, "call", ctx, lambda k: str(k.count))


# ----------------------------------------------------------------------------
# Tables


class RowsModel(QAbstractTableModel):
    """A fixed list of rows with column names."""

    def __init__(self, columns: Sequence[str] = (), rows: Sequence[Sequence[Any]] = (),
                 parent: QObject | None = None, right_align: Sequence[int] = ()) -> None:
        super().__init__(parent)
        self.columns = list(columns)
        self.rows = [tuple(r) for r in rows]
        self.right_align = set(right_align)
        self.mono_columns: set[int] = set()

    def set_rows(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.beginResetModel()
        self.columns = list(columns)
        self.rows = [tuple(r) for r in rows]
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.DisplayRole) -> Any:
        if role != Qt.DisplayRole:
            return None
        if orientation == Qt.Horizontal:
            return self.columns[section] if 0 <= section < len(self.columns) else None
        return str(section + 1)

    def data(self, index: QModelIndex, role: int = Qt.DisplayRole) -> Any:
        role = int(role)
        if role == DISPLAY or role == TOOLTIP:
            r, c = index.row(), index.column()
            if r >= len(self.rows) or c >= len(self.columns) or r < 0:
                return None
            return show(self.rows[r][c])
        if role == ALIGN:
            return RIGHT if index.column() in self.right_align else LEFT
        if role == FONT and index.column() in self.mono_columns:
            return QFont("Monospace")
        return None

    def flags(self, index: QModelIndex) -> Qt.ItemFlags:
        if not index.isValid():
            return Qt.NoItemFlags
        return Qt.ItemIsEnabled | Qt.ItemIsSelectable


class PagedTableModel(RowsModel):
    """Rows fetched a page at a time by key.

    ``fetch(session, after_key) -> (columns, rows, last_key, done)`` runs in a
    worker; ``fetch_rows(n)`` asks for at least n more rows (several pages) and
    reports progress through ``progress``.
    """

    progress = Signal(int)          # rows held so far
    busy = Signal(bool)
    failed = Signal(str)
    page_loaded = Signal(int)       # rows added

    def __init__(self, db: Database, fetch: Callable[[Session, Any], tuple], columns: Sequence[str] = (),
                 parent: QObject | None = None) -> None:
        super().__init__(columns, (), parent)
        self.db = db
        self.fetch = fetch
        self.after: Any = None
        self.done = False
        self.job: Job | None = None
        self.want = 0
        self.generation = 0

    def canFetchMore(self, parent: QModelIndex = QModelIndex()) -> bool:
        return not parent.isValid() and not self.done and self.job is None

    def fetchMore(self, parent: QModelIndex = QModelIndex()) -> None:
        if self.canFetchMore(parent):
            self.fetch_rows(1)

    @property
    def loading(self) -> bool:
        return self.job is not None

    def fetch_rows(self, n: int) -> None:
        """Fetch pages until at least ``n`` more rows have arrived or the table ends."""
        self.want = len(self.rows) + max(1, n)
        if self.job is None and not self.done:
            self._next_page()

    def _next_page(self) -> None:
        gen = self.generation
        self.busy.emit(True)
        self.job = start(self.db, self.fetch, self.after, on_result=lambda r, g=gen: self._page(g, r),
                         on_error=lambda m, g=gen: self._error(g, m))

    def _page(self, gen: int, result: tuple) -> None:
        if gen != self.generation:
            return
        columns, rows, last, done = result
        # key and end first: views may call fetchMore from the insert signals below
        self.after = last
        self.done = done
        if columns and list(columns) != self.columns:
            self.beginResetModel()
            self.columns = list(columns)
            self.endResetModel()
        if rows:
            first = len(self.rows)
            self.beginInsertRows(QModelIndex(), first, first + len(rows) - 1)
            self.rows.extend(tuple(r) for r in rows)
            self.endInsertRows()
        self.job = None
        self.page_loaded.emit(len(rows))
        self.progress.emit(len(self.rows))
        if not done and len(self.rows) < self.want:
            self._next_page()
        else:
            self.busy.emit(False)

    def _error(self, gen: int, msg: str) -> None:
        if gen != self.generation:
            return
        self.job = None
        self.done = True
        self.busy.emit(False)
        self.failed.emit(msg)

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.job = None
            self.want = len(self.rows)
            self.busy.emit(False)

    def restart(self, fetch: Callable[[Session, Any], tuple] | None = None) -> None:
        """Drop the rows and start again from the first page (new filter)."""
        self.cancel()
        self.generation += 1
        if fetch is not None:
            self.fetch = fetch
        self.beginResetModel()
        self.rows = []
        self.after = None
        self.done = False
        self.endResetModel()
        self.fetch_rows(1)


def branch_fetcher(where: str, params: dict, evsel_id: int | None, page: int = q.PAGE_SIZE
                   ) -> Callable[[Session, Any], tuple]:
    def fetch(s: Session, after: Any) -> tuple:
        p = q.branches_page(s, where, params, after or 0, page, evsel_id)
        cols = ["Id"] + q.branch_columns(s)
        return cols, p.rows, p.last_id, p.done
    return fetch


def table_fetcher(table: str, page: int = q.PAGE_SIZE) -> Callable[[Session, Any], tuple]:
    def fetch(s: Session, after: Any) -> tuple:
        p = q.table_page(s, table, after, page)
        return p.columns, p.rows, p.last_key, p.done
    return fetch
