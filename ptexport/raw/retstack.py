"""The return stack for compressed returns (libipt's ``pt_retstack``).

A call pushes its return address; a return whose TNT bit says "taken" pops
it.  The stack holds at most :data:`CAPACITY` entries (the hardware's
compression depth is 64); pushing onto a full stack drops the oldest entry.
"""

from __future__ import annotations

from collections import deque

CAPACITY = 64


class RetStackEmpty(Exception):
    """A compressed return with nothing on the return stack."""


class RetStack:
    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d: deque[int] = deque(maxlen=CAPACITY)

    def push(self, ip: int) -> None:
        self._d.append(ip)

    def pop(self) -> int:
        try:
            return self._d.pop()
        except IndexError:
            raise RetStackEmpty() from None

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)

    def is_empty(self) -> bool:
        return not self._d
