"""A principal's own queue for one (model, band): the order of its jobs, FIFO or shortest first.

Policies share one small interface and a factory (`create_principal_queue`). Entries are removed
lazily: an entry belongs to a queue only while `entry.where is queue`, so cancelling or moving a
job is O(1) and the queue drops the leftover when it reaches it.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from scheduling.jobs import Job, Principal, WithinPrincipal


class EntryState(enum.StrEnum):
    """Where a job is in its life: waiting in its lane, running on a backend, or ended."""

    QUEUED = "queued"
    DISPATCHED = "dispatched"
    DONE = "done"


QUEUED, DISPATCHED, DONE = EntryState.QUEUED, EntryState.DISPATCHED, EntryState.DONE


@dataclass(slots=True, eq=False)
class Entry:
    """The scheduler's record of one job over its life.

    `charged` is what its current dispatch added to its principal's account (the estimate) and
    `billed` all that its dispatches added, corrected to the real cost when it ends. `evicting`:
    an eviction was decided and its relay has not confirmed yet; `preempted`: it was evicted at
    least once (it then never expires in the queue: its client is already being served);
    `yield_to`: the lane it was evicted for, which goes first until that lane's next dispatch
    (its `dispatches` count passes `yield_mark`); `resumed_at` protects it from another
    eviction for a while, and `evictions` counts how often it gave up its slot. `recalled`:
    its last stop is a call back from the engine's own queue, where it had not started (under
    way while `evicting`), so it is not an eviction and only the yield above applies to it;
    cleared when it is sent again."""

    job: Job
    seq: int
    state: EntryState = QUEUED
    where: object | None = None
    lane: Lane | None = None
    backend: str | None = None
    charged: float = 0.0
    billed: float = 0.0
    dispatched_at: float = 0.0
    sent: int = 0  # the order of its last dispatch among all (an engine admits in that order)
    evicting: bool = False
    recalled: bool = False
    preempted: bool = False
    yield_to: Lane | None = None
    yield_mark: int = 0
    resumed_at: float | None = None
    evictions: int = 0
    # Tokens its earlier runs generated, as estimated when each was paused.
    generated: float = 0.0
    # The last preemption decision taken for it as a waiter (each is counted once).
    held_for: str = ""
    excluded: set[str] = field(default_factory=set)

    def may_use(self, backend: str) -> bool:
        """Whether the job may go to `backend`: one that serves its request (`Job.backends`)
        and has not failed it."""
        allowed = self.job.backends
        return backend not in self.excluded and (allowed is None or backend in allowed)

    def yields(self) -> bool:
        """Whether this evicted job still waits for the lane it was evicted for: while that
        lane has a job waiting (and, for a running slot given up, may be dispatched: not at its
        concurrency limit) and has not been dispatched since, so the place it gave up is not
        taken back; no longer, or a backlogged waiter would hold it back for good. A job called
        back from an engine's queue gave up a place in that queue, not a slot, and yields
        whatever holds the lane back meanwhile (its backend of choice being full)."""
        lane = self.yield_to
        if (
            lane is not None
            and lane.dispatches == self.yield_mark
            and (lane.token is not None or self.recalled)
            and lane.queue.peek() is not None
        ):
            return True
        self.yield_to = None
        return False


class PrincipalQueue(Protocol):
    """The order inside one principal's lane."""

    def push(self, entry: Entry) -> None: ...

    def push_front(self, entry: Entry) -> None: ...

    def peek(self) -> Entry | None: ...

    def pop(self) -> Entry: ...

    def ahead(self, entry: Entry) -> int:
        """How many of this queue's live entries go before `entry` (O(queue length))."""
        ...


class FifoQueue:
    """First come, first served."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[Entry] = deque()

    def push(self, entry: Entry) -> None:
        entry.where = self
        self._items.append(entry)

    def push_front(self, entry: Entry) -> None:
        entry.where = self
        self._items.appendleft(entry)

    def peek(self) -> Entry | None:
        items = self._items
        while items and items[0].where is not self:
            items.popleft()
        return items[0] if items else None

    def pop(self) -> Entry:
        entry = self.peek()
        if entry is None:
            raise IndexError("pop from an empty principal queue")
        self._items.popleft()
        entry.where = None
        return entry

    def ahead(self, entry: Entry) -> int:
        count = 0
        for item in self._items:
            if item is entry:
                return count
            if item.where is self:
                count += 1
        return count


_front = itertools.count(1)


class ShortestFirstQueue:
    """Shortest estimated output first (ties FIFO): cuts total waiting for the principal."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Entry]] = []

    def push(self, entry: Entry) -> None:
        entry.where = self
        heapq.heappush(self._heap, (entry.job.estimated_output_tokens, entry.seq, entry))

    def push_front(self, entry: Entry) -> None:
        # Below any real estimate (>= 0); the most recent push_front goes first.
        entry.where = self
        heapq.heappush(self._heap, (-1, -next(_front), entry))

    def peek(self) -> Entry | None:
        heap = self._heap
        while heap and heap[0][2].where is not self:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def pop(self) -> Entry:
        entry = self.peek()
        if entry is None:
            raise IndexError("pop from an empty principal queue")
        heapq.heappop(self._heap)
        entry.where = None
        return entry

    def ahead(self, entry: Entry) -> int:
        mine = next(((k, s) for k, s, e in self._heap if e is entry), None)
        if mine is None:
            return 0
        return sum(1 for k, s, e in self._heap if e.where is self and (k, s) < mine)


POLICIES: dict[WithinPrincipal, type[FifoQueue] | type[ShortestFirstQueue]] = {
    WithinPrincipal.FIFO: FifoQueue,
    WithinPrincipal.SJF: ShortestFirstQueue,
}


def create_principal_queue(policy: WithinPrincipal | str) -> PrincipalQueue:
    """Build the queue for a `within_principal` policy (or its name, checked)."""
    try:
        return POLICIES[WithinPrincipal(policy)]()
    except ValueError:
        raise ValueError(f"unknown within_principal policy {policy!r}") from None


@dataclass(slots=True, eq=False)
class Lane:
    """One principal's jobs for one (model, band), with its fair-share service account.

    `token` is the sequence number of the lane's one valid entry in its band heap, or None when
    the lane is not in the heap (idle, blocked at its concurrency limit, or being dispatched).
    `service` counts every dispatch's charge at once; `running` is the part of it still in
    flight, so `service - running` is what its principal has been served so far.
    """

    model: str
    band: int
    principal: Principal
    queue: PrincipalQueue
    live: int = 0
    in_flight: int = 0
    service: float = 0.0
    running: float = 0.0
    dispatches: int = 0
    token: int | None = None
    policy: WithinPrincipal | None = None  # its first job's; None: the scheduler's


@dataclass(slots=True, eq=False)
class PrincipalState:
    """Counters the tier limits apply to, across all of a principal's lanes, and per model when
    its queue last moved (dispatched a job, from any band), which a queued job's patience is
    counted from."""

    queued: int = 0
    in_flight: int = 0
    blocked: list[Lane] = field(default_factory=list)
    moved_at: dict[str, float] = field(default_factory=dict)
