"""`ClusterScheduler`: the scheduler transport over Redis, for many processes and machines.

Each process holds one: a relay for its own requests, and a contender for the lease. The one
that holds the lease leads: its own `LeaderService` (always configured and fed metrics by this
process's pollers) becomes the cluster's scheduler for the term. When the lease is lost, or Redis
fails, the term ends and the state it held is dropped: the next leader rebuilds it from the
relays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from llmserver.cluster import streams
from llmserver.cluster.leader import Leader, LeaderService
from llmserver.cluster.lease import Keys, Lease
from llmserver.cluster.relay import ClusterRelay
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

log = logging.getLogger(__name__)

LEADER = "leader"
FOLLOWER = "follower"
UNAVAILABLE = "redis_unavailable"
# A loop blocked in Redis sees that it is stopped within one blocking read (1 s).
STOP_SECONDS = 2.0


def node_name() -> str:
    """Unique per process and start: host, pid and a random tail."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class ClusterScheduler:
    """`SchedulerTransport` over Redis; see the module docstring."""

    def __init__(
        self,
        redis_url: str,
        prefix: str,
        lease_seconds: float,
        config: SchedulerConfig,
        backends: Iterable[BackendConfig] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node_name()
        self.redis: Redis = Redis.from_url(redis_url, health_check_interval=30)
        self.keys = Keys(prefix)
        self.lease_seconds = lease_seconds
        self.local = LeaderService(config, backends, clock)
        # A relay's heartbeat outlives two missed renewals; the leader checks at lease pace.
        heartbeat_ms = int(lease_seconds * 1000)
        self.relay = ClusterRelay(self.redis, self.keys, self.node, clock, heartbeat_ms)
        self.lease = Lease(self.redis, self.keys, self.node, lease_seconds)
        self._leader: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            return
        with contextlib.suppress(RedisError):
            # Alive and connected before the first submit: /readyz tells the truth at once.
            await self.relay.heartbeat()
            await self.relay.connect()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.relay.read_loop(), name="cluster-relay-read"),
            loop.create_task(self.relay.write_loop(), name="cluster-relay-write"),
            loop.create_task(self._lease_loop(), name="cluster-lease"),
        ]

    async def stop(self) -> None:
        """Leave: hand the lease back at once (a successor need not wait for it to expire)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        self.relay.wake_writer()
        await streams.stop_tasks(tasks, STOP_SECONDS)
        with contextlib.suppress(RedisError):
            await self.lease.release()
        await self._step_down()
        await self.relay.close()
        await self.redis.aclose()

    @property
    def leading(self) -> bool:
        return self._leader is not None and not self._leader.done()

    @property
    def state(self) -> str:
        if not self.relay.available:
            return UNAVAILABLE
        return LEADER if self.leading else FOLLOWER

    async def _lease_loop(self) -> None:
        """Heartbeat, then renew (leader) or contend (everyone else), three times per lease."""
        while not streams.cancelled_meanwhile():
            try:
                await self.relay.heartbeat()
                await self.lease_once()
            except RedisError as exc:
                if streams.cancelled_meanwhile():
                    raise asyncio.CancelledError from exc
                log.warning("cluster lease: Redis error %s", exc)
                await self._step_down()
            await asyncio.sleep(self.lease_seconds / 3)

    async def lease_once(self) -> None:
        """One step: keep the lease if held (stepping down if lost), or try to take it."""
        if self.leading:
            if not await self.lease.renew():
                log.warning("lost the lease: no longer leading")
                await self._step_down()
            return
        if self._leader is not None:  # the term ended by itself (deposed, Redis error)
            await self._step_down()
        if await self.lease.try_acquire():
            self.local.clear()
            term = Leader(self.redis, self.keys, self.lease, self.local, self.lease_seconds)
            self._leader = asyncio.get_running_loop().create_task(term.run(), name="cluster-lead")

    async def _step_down(self) -> None:
        task, self._leader = self._leader, None
        if task is not None:
            await streams.stop_tasks([task], STOP_SECONDS)
            await self.local.stop()
            self.local.clear()
            self.lease.value = None

    # the transport --------------------------------------------------------------------------

    def submit(self, job: Job) -> Ticket:
        return self.relay.submit(job)

    def complete(self, ticket: Ticket, real_cost: float | None = None) -> None:
        self.relay.finish(ticket, real_cost, completed=True)

    def cancel(self, ticket: Ticket, real_cost: float | None = None) -> None:
        self.relay.finish(ticket, real_cost, completed=False)

    def requeue(self, ticket: Ticket, failed_backend: str, unreachable: bool = False) -> None:
        self.relay.requeue(ticket, failed_backend, unreachable)

    def preempted(self, ticket: Ticket, real_cost: float) -> None:
        self.relay.preempted(ticket, real_cost)

    def keep_running(self, ticket: Ticket) -> None:
        self.relay.keep_running(ticket)

    def update_metrics(self, backend_name: str, metrics: BackendMetrics) -> None:
        self.local.update_metrics(backend_name, metrics)

    def cache_events(self, backend_name: str, events: Iterable[CacheEvent]) -> None:
        """Every process hears every backend's events, so whichever leads next knows them."""
        self.local.cache_events(backend_name, events)

    def configure(
        self, config: SchedulerConfig | None = None, backends: Iterable[BackendConfig] | None = None
    ) -> None:
        self.local.configure(config, backends)

    def position(self, job_id: str) -> QueuePosition | None:
        """Exact on the leader (it holds every queue); a follower's lower bound elsewhere."""
        if self.leading:
            return self.local.position(job_id)
        return self.relay.position(job_id)

    def snapshot(self) -> SchedulerSnapshot:
        """The cluster's queues on the leader; elsewhere this process's backend view only."""
        return self.local.snapshot()

    def backend_full(self, backend_name: str) -> bool:
        """As this process sees the backend (its scrapes; its count of requests on the leader)."""
        return self.local.backend_full(backend_name)
