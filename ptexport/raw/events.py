"""Decoder events (libipt's ``struct pt_event``) and the event queue.

An :class:`Event` is a small mutable record: ``type`` is one of the names in
:data:`EVENT_TYPES`, ``ip`` the address it binds to (for async branches
``frm``/``to``, for async disables ``at``/``ip``), plus the payload fields of
its type.  Events are rare next to instructions, so a plain object is fine.
"""

from __future__ import annotations

import copy

EVENT_TYPES = (
    "enabled", "disabled", "async_disabled", "async_branch", "paging", "async_paging",
    "overflow", "exec_mode", "tsx", "stop", "vmcs", "async_vmcs", "exstop", "mwait", "pwre",
    "pwrx", "ptwrite", "tick", "cbr", "mnt", "tip", "tnt", "iflags", "interrupt", "iret",
    "smi", "rsm", "sipi", "init", "vmentry", "vmexit", "shutdown", "uintr", "uiret", "trig",
    "ignore",
)


class Event:
    """One decoder event; unset payload fields read as 0/False."""

    type = ""
    status_update = False
    ip_suppressed = False
    has_tsc = False
    tsc = 0
    lost_mtc = 0
    lost_cyc = 0
    ip = 0
    at = 0
    frm = 0
    to = 0
    mode = 0
    speculative = False
    aborted = False
    cr3 = 0
    non_root = False
    base = 0
    hints = 0
    ext = 0
    state = 0
    sub_state = 0
    hw = False
    last = 0
    deepest = 0
    interrupt = False
    store = False
    autonomous = False
    payload = 0
    size = 0
    ratio = 0
    iflag = False
    vector = 0
    has_cr2 = False
    cr2 = 0
    has_vector = False
    has_vmxr = False
    vmxr = 0
    has_vmxq = False
    vmxq = 0
    trbv = 0
    mult = False
    icnt = 0
    resumed = False
    bits = 0
    nbits = 0

    def __init__(self, type: str = "", **kw) -> None:
        self.type = type
        for k, v in kw.items():
            setattr(self, k, v)

    def copy(self) -> "Event":
        return copy.copy(self)

    def __repr__(self) -> str:
        return f"Event({self.type!r}, {vars(self)!r})"


# Event bindings (pt_event_binding): what packet an enqueued event waits for.
EVB_PSBEND = 1
EVB_TIP = 2
EVB_FUP = 4
EVB_FUP_BOUND = 8
EVB_EXSTOP = 16
EVB_CFE = 32
# PWRE waits for the next PWRE/PWRX (or a flush at OVF/PSB) to be published.
EVB_PWR = 64
EVB_ALL = 0x7F

EVQ_CAPACITY = 6


class EventQueue:
    """Pending events with their bindings, oldest first (libipt pt_event_queue)."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: list[list] = []  # [binding, event]

    def clear(self) -> None:
        self._q.clear()

    def enqueue(self, evb: int, ev: Event | None = None) -> Event | None:
        """Append a new (or the given) event bound to ``evb``; None when full."""
        if len(self._q) >= EVQ_CAPACITY:
            return None
        if ev is None:
            ev = Event()
        self._q.append([evb, ev])
        return ev

    def insert_before(self, target: Event, evb: int, ev: Event) -> Event | None:
        """Insert ``ev`` just before ``target`` (ordering VMCS before PIP)."""
        if len(self._q) >= EVQ_CAPACITY:
            return None
        for i, (_, e) in enumerate(self._q):
            if e is target:
                self._q.insert(i, [evb, ev])
                return ev
        self._q.append([evb, ev])
        return ev

    def swap_in(self, target: Event, ev: Event, evb: int) -> bool:
        """Put ``ev`` in ``target``'s slot and re-append ``target`` (bound to ``evb``)."""
        if len(self._q) >= EVQ_CAPACITY:
            return False
        for entry in self._q:
            if entry[1] is target:
                entry[1] = ev
                self._q.append([evb, target])
                return True
        return False

    def dequeue_swapped(self, evb: int, wanted: Event) -> Event | None:
        """Remove the oldest ``evb`` entry, returning ``wanted`` and leaving the
        removed entry's event in ``wanted``'s slot (libipt's async-branch swap)."""
        first = None
        for i, entry in enumerate(self._q):
            if entry[0] & evb:
                first = i
                break
        if first is None:
            return None
        head = self._q[first][1]
        if head is not wanted:
            for entry in self._q:
                if entry[1] is wanted:
                    entry[1] = head
                    break
        del self._q[first]
        return wanted

    def dequeue(self, evb: int) -> Event | None:
        """Remove and return the oldest event whose binding matches ``evb``."""
        for i, entry in enumerate(self._q):
            if entry[0] & evb:
                del self._q[i]
                return entry[1]
        return None

    def find(self, evb: int, evtype: str) -> Event | None:
        for b, e in self._q:
            if (b & evb) and e.type == evtype:
                return e
        return None

    def peek(self, evb: int) -> Event | None:
        for b, e in self._q:
            if b & evb:
                return e
        return None

    def pending(self, evb: int) -> bool:
        return any(b & evb for b, _ in self._q)

    def __len__(self) -> int:
        return len(self._q)
