"""When the leader dies, another member leads and rebuilds the state from what relays hold."""

from __future__ import annotations

from cluster_helpers import die, job, needs_redis, two_members, until

pytestmark = needs_redis


async def test_a_new_leader_counts_the_running_job_and_grants_the_queued_one(prefix: str) -> None:
    first, second = await two_members(prefix, max_in_flight=1)
    try:
        running = second.submit(job("alice"))
        await running.dispatched()
        queued = second.submit(job("bob"))
        await until(lambda: queued.job.id in first.local.core.entries)
        await die(first)
        await until(lambda: second.leading)
        core = second.local.core
        await until(lambda: {running.job.id, queued.job.id} <= set(core.entries))
        assert core.backends["b1"].in_flight == 1  # the running job's slot, rebuilt
        assert queued.backend is None
        second.complete(running, 1.0)
        assert await queued.dispatched() == "b1"
    finally:
        await second.stop()


async def test_queued_jobs_keep_their_order_across_a_change_of_leader(prefix: str) -> None:
    first, second = await two_members(prefix, max_in_flight=1)
    try:
        blocker = second.submit(job("alice"))
        await blocker.dispatched()
        waiting = [second.submit(job("bob")) for _ in range(3)]
        await until(lambda: all(t.job.id in first.local.core.entries for t in waiting))
        await die(first)
        await until(lambda: second.leading)
        await until(lambda: all(t.job.id in second.local.core.entries for t in waiting))
        second.complete(blocker, 1.0)
        order: list[object] = []
        for _ in waiting:
            await until(lambda: any(t.backend and t not in order for t in waiting))
            granted = next(t for t in waiting if t.backend and t not in order)
            order.append(granted)
            second.complete(granted, 1.0)
        assert order == waiting
    finally:
        await second.stop()


async def test_the_jobs_of_a_member_that_died_are_dropped_by_the_leader(prefix: str) -> None:
    first, second = await two_members(prefix, max_in_flight=1)
    try:
        held = second.submit(job("alice"))
        await held.dispatched()
        await die(second)
        waiting = first.submit(job("bob"))
        assert await waiting.dispatched() == "b1"  # the dead member's slot came free
    finally:
        await first.stop()


async def test_a_job_that_ends_while_the_new_leader_settles_frees_its_slot(prefix: str) -> None:
    first, second = await two_members(prefix, max_in_flight=1)
    try:
        running = second.submit(job("alice"))
        await running.dispatched()
        old_epoch = second.relay.epoch
        await die(first)
        await until(lambda: second.relay.epoch != old_epoch)  # re-registered, leader settling
        second.complete(running, 1.0)
        waiting = second.submit(job("bob"))
        assert await waiting.dispatched() == "b1"
    finally:
        await second.stop()
