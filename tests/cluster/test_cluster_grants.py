"""A job submitted through any member is granted by the one leader, which counts every slot."""

from __future__ import annotations

import pytest
from cluster_helpers import job, needs_redis, node, two_members, until

pytestmark = needs_redis


async def test_a_job_submitted_through_a_follower_is_granted_by_the_leader(prefix: str) -> None:
    first, second = await two_members(prefix)
    try:
        ticket = second.submit(job())
        assert await ticket.dispatched() == "b1"
        assert not second.leading
    finally:
        await second.stop()
        await first.stop()


async def test_a_slot_freed_on_one_member_is_granted_to_a_job_on_another(prefix: str) -> None:
    first, second = await two_members(prefix, max_in_flight=1)
    try:
        running = first.submit(job("alice"))
        await running.dispatched()
        waiting = second.submit(job("bob"))
        await until(lambda: first.snapshot().queues != [] and first.local.core.entries != {})
        assert waiting.backend is None  # the one slot is taken, on another process
        first.complete(running, 1.0)
        assert await waiting.dispatched() == "b1"
    finally:
        await second.stop()
        await first.stop()


async def test_a_member_that_stops_hands_the_lease_on_at_once(prefix: str) -> None:
    first, second = node(prefix, lease=30.0), node(prefix, lease=30.0)
    await first.start()
    await until(lambda: first.leading)
    await second.start()
    await first.stop()
    try:
        await until(lambda: second.leading, seconds=30.0)
    finally:
        await second.stop()


@pytest.mark.parametrize("reason", ["queue_full", "no_backend"])
async def test_a_leaders_refusal_reaches_the_waiting_request(prefix: str, reason: str) -> None:
    from scheduling import NoBackend, QueueFull

    member = node(prefix)
    await member.start()
    try:
        await until(lambda: member.leading and member.relay.epoch == member.lease.epoch)
        refused = job(max_queued=0) if reason == "queue_full" else job()
        if reason == "no_backend":
            refused.model = "unknown"
        ticket = member.submit(refused)
        with pytest.raises(QueueFull if reason == "queue_full" else NoBackend):
            await ticket.dispatched()
    finally:
        await member.stop()


async def test_a_follower_knows_where_its_own_jobs_stand(prefix: str) -> None:
    first, second = await two_members(prefix, max_in_flight=1)
    try:
        running = second.submit(job("alice"))
        await running.dispatched()
        waiting = [second.submit(job("bob")) for _ in range(2)]
        running_at = second.position(running.job.id)
        later = second.position(waiting[1].job.id)
        assert running_at is not None and running_at.state == "running"
        assert later is not None and (later.state, later.position) == ("queued", 1)
    finally:
        await second.stop()
        await first.stop()
