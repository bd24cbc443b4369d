"""Preemption across processes: the leader's eviction reaches the relay holding the job, and the
relay's answer (paused, or kept running) reaches the leader."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from cluster_helpers import die, job, needs_redis, two_members, until

pytestmark = needs_redis


async def test_an_eviction_decided_by_the_leader_pauses_a_job_on_another_process(
    prefix: str,
) -> None:
    first, second = await two_members(prefix, max_in_flight=1, preemption=True)
    try:
        batch = second.submit(job("alice", band=2, preemptible=True))
        await batch.dispatched()
        urgent = first.submit(job("bob", band=0, preempt_after=0.0))
        await until(lambda: batch.evict_requested)
        second.preempted(batch, 1.0)
        assert await urgent.dispatched() == "b1"
        first.complete(urgent, 1.0)
        assert await batch.dispatched() == "b1"  # resumed once the slot is free again
    finally:
        await second.stop()
        await first.stop()


async def test_a_resumed_job_keeps_its_protection_when_the_leader_changes(prefix: str) -> None:
    first, second = await two_members(prefix, max_in_flight=1, preemption=True)
    try:
        batch = second.submit(job("alice", band=2, preemptible=True))
        await batch.dispatched()
        urgent = second.submit(job("bob", band=0, preempt_after=0.0))
        await until(lambda: batch.evict_requested)
        second.preempted(batch, 1.0)
        await urgent.dispatched()
        second.complete(urgent, 1.0)
        await batch.dispatched()  # resumed: protected from another eviction for a while
        await die(first)
        await until(lambda: second.leading)
        await until(lambda: batch.job.id in second.local.core.entries)
        again = second.submit(job("carol", band=0, preempt_after=0.0))
        await until(lambda: again.job.id in second.local.core.entries)
        await asyncio.sleep(0.5)  # several of the new leader's steps with `again` waiting
        assert not batch.evict_requested
    finally:
        await second.stop()


async def test_a_paused_job_past_its_deadline_resumes_under_the_next_leader(prefix: str) -> None:
    """Paused after its queue deadline (its client has part of its answer), it never expires:
    the new leader takes it back as paused, not as an ordinary queued job long overdue."""
    first, second = await two_members(prefix, max_in_flight=1, preemption=True)
    try:
        batch = second.submit(
            replace(job("alice", band=2, preemptible=True), deadline=time.monotonic() + 1.0)
        )
        await batch.dispatched()
        urgent = second.submit(job("bob", band=0, preempt_after=0.0))
        await until(lambda: batch.evict_requested)
        second.preempted(batch, 1.0)
        await urgent.dispatched()
        await asyncio.sleep(1.2)  # past the paused job's deadline
        await die(first)
        await until(lambda: second.leading)
        await until(lambda: batch.job.id in second.local.core.entries)
        second.complete(urgent, 1.0)
        assert await asyncio.wait_for(batch.dispatched(), 5.0) == "b1"
    finally:
        await second.stop()
