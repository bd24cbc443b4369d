"""Without its Redis, a member refuses new jobs (503 upstream of here) and says why."""

from __future__ import annotations

import pytest
from cluster_helpers import job

from llmserver.cluster.node import UNAVAILABLE, ClusterScheduler
from llmserver.cluster.transport import ClusterUnavailable
from scheduling import SchedulerConfig
from simulator.launcher import free_port


async def test_a_member_without_redis_refuses_new_jobs() -> None:
    url = f"redis://127.0.0.1:{free_port()}/4"  # nothing listens there
    member = ClusterScheduler(url, "unreachable", 0.6, SchedulerConfig())
    await member.start()
    try:
        assert member.state == UNAVAILABLE
        with pytest.raises(ClusterUnavailable):
            member.submit(job())
    finally:
        await member.stop()
