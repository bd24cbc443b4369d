"""A relay's own enforcement of a queued job's patience: it still times out while no process
leads, and a relay that hears grants (a leader is dispatching) leaves the stall to the leader."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from llmserver.cluster import wire
from llmserver.cluster.relay import RemoteTicket
from scheduling import Job, Principal, QueueTimeout, Ticket


class Owner:
    """The ticket's owner: nothing of it is called while a job waits."""

    def keep_running(self, ticket: Ticket) -> None:
        raise AssertionError("not running")


def waiting(patience: float, granted: list[float]) -> RemoteTicket:
    job = Job(
        id=f"job-{uuid.uuid4().hex[:8]}",
        principal=Principal("acme", "alice"),
        model="m",
        band=1,
        patience=patience,
    )
    return RemoteTicket(job, time.monotonic, Owner(), lambda: granted[-1])


async def test_a_job_times_out_at_the_relay_where_no_grant_arrives_within_its_patience() -> None:
    ticket = waiting(0.2, [0.0])
    started = time.monotonic()
    with pytest.raises(QueueTimeout):
        await asyncio.wait_for(ticket.dispatched(), 5)
    assert 0.2 <= time.monotonic() - started < 2


async def test_a_grant_to_another_job_starts_a_waiting_jobs_patience_again() -> None:
    granted = [0.0]
    ticket = waiting(0.3, granted)
    waiter = asyncio.ensure_future(ticket.dispatched())
    await asyncio.sleep(0.2)
    granted.append(time.monotonic())  # a leader dispatches: this relay hears a grant
    await asyncio.sleep(0.2)  # past the patience from submission, within it from the grant
    assert not waiter.done()
    ticket.grant("b1", 1, 2)
    assert await asyncio.wait_for(waiter, 5) == "b1"


def test_a_jobs_patience_crosses_to_the_leader() -> None:
    job = waiting(7.5, [0.0]).job
    assert wire.decode_job(wire.encode_job(job, 100.0), 3.0).patience == 7.5
