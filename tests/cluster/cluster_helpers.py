"""Small builders for the cluster tests: nodes on one backend, jobs, bounded waits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from llmserver.cluster.node import ClusterScheduler
from scheduling import BackendConfig, Job, Principal, SchedulerConfig
from tests.scheduling.sched_helpers import take_policy

MODEL = "m"
REDIS_URL = os.environ.get("CLUSTER_TEST_REDIS_URL", "redis://127.0.0.1:6379/4")


def redis_reachable() -> bool:
    parts = urlsplit(REDIS_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 0.5):
            return True
    except OSError:
        return False


needs_redis = pytest.mark.skipif(not redis_reachable(), reason=f"no Redis at {REDIS_URL}")


def delete_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def node(
    prefix: str, max_in_flight: int = 1, lease: float = 0.6, preemption: bool = False
) -> ClusterScheduler:
    """A cluster member whose one backend `b1` takes `max_in_flight` jobs (no metrics)."""
    backend = BackendConfig(
        "b1",
        frozenset({MODEL}),
        max_in_flight=max_in_flight,
        has_metrics=False,
        preemption=preemption,
    )
    return ClusterScheduler(REDIS_URL, prefix, lease, SchedulerConfig(gates={}), (backend,))


def job(user: str = "alice", band: int = 1, **kw: Any) -> Job:
    """A job whose deadline bounds every wait on it (a test never hangs on a lost grant)."""
    return Job(
        id=f"job-{uuid.uuid4().hex[:8]}",
        principal=Principal("acme", user),
        model=MODEL,
        band=band,
        deadline=time.monotonic() + 20.0,
        policy=take_policy(kw),
        **kw,
    )


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait, bounded, for a condition that the system must reach."""
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


async def two_members(prefix: str, **options: Any) -> tuple[ClusterScheduler, ClusterScheduler]:
    """Two started members of one cluster (`node(prefix, **options)` each): the first leads,
    and the second has heard of its epoch. The caller stops them."""
    first, second = node(prefix, **options), node(prefix, **options)
    await first.start()
    try:
        await until(lambda: first.leading)
        await second.start()
        await until(lambda: second.relay.epoch == first.lease.epoch)
    except BaseException:
        await second.stop()
        await first.stop()
        raise
    return first, second


async def die(member: ClusterScheduler) -> None:
    """As kill -9 would: every task gone, the lease left to expire, nothing cleaned up."""
    tasks = [*member._tasks, *([member._leader] if member._leader else [])]
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    await member.local.stop()
    await member.redis.aclose()
