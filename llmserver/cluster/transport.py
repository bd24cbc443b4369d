"""The seam between a relay (one request's way through this process) and the scheduler service.

A relay submits a job, awaits its ticket's grant, streams, and reports the end (`complete`,
`cancel`), a failed backend (`requeue`), or how it answered an eviction (`preempted`,
`keep_running`). `SchedulerService` is the in-process transport as it
stands: nothing in between, so one process pays nothing for the seam. `ClusterScheduler`
(`llmserver.cluster.node`) is the same surface over Redis, for several processes and machines
sharing one scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from scheduling import (
    BackendConfig,
    BackendMetrics,
    CacheEvent,
    Job,
    QueuePosition,
    SchedulerConfig,
    SchedulerSnapshot,
    Ticket,
)


class SchedulerTransport(Protocol):
    """What the gateway asks of the scheduler, wherever it runs.

    `submit` may raise QueueFull or NoBackend at once (in process) or later, from the ticket's
    `dispatched()` (remote); callers handle both places alike."""

    @property
    def leading(self) -> bool:
        """Whether this process holds the queues (always, in process; the leader, in a cluster)."""
        ...

    @property
    def state(self) -> str:
        """For /readyz: "local", or in a cluster "leader", "follower" or "redis_unavailable"."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def submit(self, job: Job) -> Ticket: ...

    def complete(self, ticket: Ticket, real_cost: float | None = None) -> None: ...

    def cancel(self, ticket: Ticket, real_cost: float | None = None) -> None: ...

    def requeue(self, ticket: Ticket, failed_backend: str, unreachable: bool = False) -> None: ...

    def preempted(self, ticket: Ticket, real_cost: float) -> None: ...

    def keep_running(self, ticket: Ticket) -> None: ...

    def update_metrics(self, backend_name: str, metrics: BackendMetrics) -> None: ...

    def cache_events(self, backend_name: str, events: Iterable[CacheEvent]) -> None: ...

    def configure(
        self, config: SchedulerConfig | None = None, backends: Iterable[BackendConfig] | None = None
    ) -> None: ...

    def position(self, job_id: str) -> QueuePosition | None: ...

    def snapshot(self) -> SchedulerSnapshot: ...

    def backend_full(self, backend_name: str) -> bool:
        """Whether a request sent to the backend now would wait in its queue."""
        ...


class ClusterUnavailable(Exception):
    """The shared scheduler cannot be reached (its Redis is down): new requests are refused
    with 503 and Retry-After until it answers again."""
