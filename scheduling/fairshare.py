"""Fair share inside one (pool, band): a heap of lanes keyed by weighted service.

The lane with the least service goes next (a virtual token counter). Entries are
`(service, seq, lane)`; the seq both breaks ties (equal accounts rotate: round robin) and marks
the one valid entry per lane, so changing a key is a push and stale entries are dropped when they
surface. Every operation is O(log n) in active principals.
"""

from __future__ import annotations

import heapq
import itertools

from scheduling.lanes import Lane

_seq = itertools.count()


class BandHeap:
    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Lane]] = []

    def push(self, lane: Lane) -> None:
        """Insert or re-key `lane`; any earlier entry of it becomes stale."""
        token = next(_seq)
        lane.token = token
        heapq.heappush(self._heap, (lane.service, token, lane))

    def _clean(self) -> None:
        heap = self._heap
        while heap and (heap[0][2].token != heap[0][1] or heap[0][2].live == 0):
            lane = heapq.heappop(heap)[2]
            if lane.live == 0 and lane.token is not None:
                lane.token = None

    def peek(self) -> Lane | None:
        self._clean()
        return self._heap[0][2] if self._heap else None

    def pop(self) -> Lane | None:
        """Remove and return the lane with the least service, or None."""
        self._clean()
        if not self._heap:
            return None
        lane = heapq.heappop(self._heap)[2]
        lane.token = None
        return lane

    def min_service(self) -> float | None:
        """The least service among backlogged lanes: an idle lane returning is lifted to it."""
        lane = self.peek()
        return None if lane is None else lane.service

    def lanes(self) -> list[Lane]:
        """The backlogged lanes now in the heap, in no order (read-only; for queue positions)."""
        return [lane for _, token, lane in self._heap if lane.token == token and lane.live > 0]

    def __bool__(self) -> bool:
        return self.peek() is not None
