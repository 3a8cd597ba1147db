"""perf's auxtrace queue heap, whose tie-breaking decides sample order.

perf runs the AUX queue with the smallest timestamp first (``auxtrace_heap``
in tools/perf/util/auxtrace.c).  Which of two queues at the same timestamp
runs first follows from how its binary heap sifts: an item moves up only
past strictly larger ordinals, and a pop walks the hole down choosing the
right child unless the left one is strictly smaller (the right child may be
the last item: on a tie it moves up), moves a lone left child up and stops,
or else re-inserts the last item at the hole.  Both the whole-trace order and
the streamed order use this one implementation (the compiled order,
:mod:`ptexport.session.queues_compiled`, the same over arrays).
"""

from __future__ import annotations


class PerfQueueHeap(list):
    """Items ``[ordinal, queue]``; ``self[0]`` is the next queue to run."""

    def push(self, queue: int, ordinal: int) -> None:
        item = [ordinal, queue]
        self.append(item)
        self._sift_up(len(self) - 1, item)

    def pop_top(self) -> None:
        """Remove ``self[0]`` (perf's auxtrace_heap__pop)."""
        cnt = len(self)
        pos = 0
        while True:
            left = 2 * pos + 1
            if left >= cnt:
                break
            right = left + 1
            if right >= cnt:  # a lone left child (the last item) fills the hole
                self[pos] = self[left]
                self.pop()
                return
            if self[left][0] < self[right][0]:
                self[pos] = self[left]
                pos = left
            else:  # ties go right, also when the right child is the last item
                self[pos] = self[right]
                pos = right
        last = self.pop()
        if pos < cnt - 1:
            self._sift_up(pos, last)

    def _sift_up(self, pos: int, item: list[int]) -> None:
        while pos:
            parent = (pos - 1) >> 1
            if item[0] >= self[parent][0]:
                break
            self[pos] = self[parent]
            pos = parent
        self[pos] = item
