"""The engine's waiting queue behind one small interface, as vLLM's `RequestQueue`.

`fcfs` is a FIFO deque; `priority` is a heap ordered by (priority, arrival, counter), lower
priority value first as in vLLM. Removed entries are dropped lazily from the heap.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Protocol, TypeVar

POLICIES = ("fcfs", "priority")


class Queued(Protocol):
    priority: int
    arrived: float
    removed: bool


T = TypeVar("T", bound=Queued)


class RequestQueue(Protocol[T]):
    def add(self, item: T) -> None: ...
    def push_front(self, item: T) -> None: ...
    def peek(self) -> T | None: ...
    def pop(self) -> T: ...
    def remove(self, item: T) -> None: ...
    def __len__(self) -> int: ...


class FcfsQueue(RequestQueue[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()

    def add(self, item: T) -> None:
        self._items.append(item)

    def push_front(self, item: T) -> None:
        """A preempted sequence goes back to the head, as vLLM does."""
        self._items.appendleft(item)

    def peek(self) -> T | None:
        return self._items[0] if self._items else None

    def pop(self) -> T:
        return self._items.popleft()

    def remove(self, item: T) -> None:
        if item in self._items:
            self._items.remove(item)

    def __len__(self) -> int:
        return len(self._items)


class PriorityQueue(RequestQueue[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, T]] = []
        self._order = itertools.count()
        self._live = 0

    def add(self, item: T) -> None:
        item.removed = False
        heapq.heappush(self._heap, (item.priority, item.arrived, next(self._order), item))
        self._live += 1

    def push_front(self, item: T) -> None:
        """Ordering is by (priority, arrival), so a preempted sequence keeps its old place."""
        self.add(item)

    def _drop_removed(self) -> None:
        while self._heap and self._heap[0][3].removed:
            heapq.heappop(self._heap)

    def peek(self) -> T | None:
        self._drop_removed()
        return self._heap[0][3] if self._heap else None

    def pop(self) -> T:
        self._drop_removed()
        item = heapq.heappop(self._heap)[3]
        item.removed = True
        self._live -= 1
        return item

    def remove(self, item: T) -> None:
        """`removed` is True whenever the item is not queued, so this is safe to call on any."""
        if not item.removed:
            item.removed = True
            self._live -= 1

    def __len__(self) -> int:
        return self._live


def create_request_queue(policy: str) -> RequestQueue[T]:
    if policy == "fcfs":
        return FcfsQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy {policy!r}; expected one of {POLICIES}")
