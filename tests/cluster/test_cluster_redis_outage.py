"""Redis gone: new jobs are refused and /readyz says so; Redis back: the member recovers by
itself, and the jobs it held (running and queued) are served under the new term."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from cluster_helpers import REDIS_URL, job, needs_redis, until
from cluster_proxy import CuttableProxy

from llmserver.cluster.node import UNAVAILABLE, ClusterScheduler
from llmserver.cluster.transport import ClusterUnavailable
from scheduling import BackendConfig, SchedulerConfig

pytestmark = needs_redis


async def test_a_member_recovers_after_redis_returns_and_serves_what_it_held(prefix: str) -> None:
    target = urlsplit(REDIS_URL)
    proxy = CuttableProxy(target.hostname or "127.0.0.1", target.port or 6379)
    await proxy.start()
    backend = BackendConfig("b1", frozenset({"m"}), max_in_flight=1, has_metrics=False)
    url = f"redis://127.0.0.1:{proxy.port}{target.path}"
    member = ClusterScheduler(url, prefix, 0.6, SchedulerConfig(gates={}), (backend,))
    await member.start()
    try:
        await until(lambda: member.leading and member.relay.epoch == member.lease.epoch)
        running = member.submit(job("alice"))
        await running.dispatched()
        queued = member.submit(job("bob"))
        await until(lambda: queued.job.id in member.local.core.entries)
        await proxy.cut()
        await until(lambda: member.state == UNAVAILABLE)
        with pytest.raises(ClusterUnavailable):
            member.submit(job("carol"))
        await proxy.start()
        await until(lambda: member.leading and member.relay.epoch == member.lease.epoch)
        await until(lambda: {running.job.id, queued.job.id} <= set(member.local.core.entries))
        assert queued.backend is None  # the running job's slot still counts
        member.complete(running, 1.0)
        assert await queued.dispatched() == "b1"
    finally:
        await member.stop()
        await proxy.cut()
