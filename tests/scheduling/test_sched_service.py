"""The asyncio service: tickets, waking on events, deadlines, cancel and requeue."""

from __future__ import annotations

import asyncio

import pytest
from sched_helpers import ALICE, fresh, job, metered, plain

from scheduling import JobCancelled, QueueTimeout, SchedulerConfig, SchedulerService


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def service(*backends, **config) -> tuple[SchedulerService, FakeClock]:
    clock = FakeClock()
    return SchedulerService(SchedulerConfig(**config), backends or (plain(),), clock=clock), clock


async def test_it_resolves_a_ticket_with_the_chosen_backend() -> None:
    svc, _ = service()
    ticket = svc.submit(job())
    svc.dispatch_once()
    assert await ticket.dispatched() == "b1"


def test_a_job_alone_in_the_queue_is_dispatched_by_submit_itself() -> None:
    svc, _ = service()
    assert svc.submit(job()).backend == "b1"  # no loop turn: the loop is not even started


def test_a_job_behind_others_waits_for_the_loop() -> None:
    svc, _ = service(plain(max_in_flight=1))
    svc.submit(job())
    svc.submit(job())
    third = svc.submit(job())
    assert third.backend is None
    assert svc.core.queued_jobs == 2


async def test_it_wakes_the_loop_on_new_metrics() -> None:
    svc, _ = service(metered())
    await svc.start()
    try:
        ticket = svc.submit(job())
        await asyncio.sleep(0)
        assert ticket.backend is None
        svc.update_metrics("b1", fresh(waiting=0))
        assert await asyncio.wait_for(ticket.dispatched(), 2.0) == "b1"
    finally:
        await svc.stop()


async def test_it_wakes_the_loop_on_a_completion() -> None:
    svc, _ = service(plain(max_in_flight=1))
    await svc.start()
    try:
        first = svc.submit(job())
        second = svc.submit(job())
        await asyncio.wait_for(first.dispatched(), 2.0)
        svc.complete(first, 1.0)
        assert await asyncio.wait_for(second.dispatched(), 2.0) == "b1"
    finally:
        await svc.stop()


async def test_it_raises_queue_timeout_past_the_deadline() -> None:
    svc, clock = service(plain(max_in_flight=0))
    ticket = svc.submit(job(deadline=5.0))
    clock.now = 5.0
    svc.dispatch_once()
    with pytest.raises(QueueTimeout):
        await ticket.dispatched()


async def test_it_raises_job_cancelled_to_a_waiter_when_cancelled_while_queued() -> None:
    svc, _ = service(plain(max_in_flight=0))
    ticket = svc.submit(job())
    waiter = asyncio.ensure_future(ticket.dispatched())
    await asyncio.sleep(0)
    svc.cancel(ticket)
    with pytest.raises(JobCancelled):
        await waiter


async def test_it_frees_the_principals_slot_when_a_dispatched_ticket_is_cancelled() -> None:
    svc, _ = service()
    ticket = svc.submit(job())
    svc.dispatch_once()
    svc.cancel(ticket)
    assert svc.core.principals[ALICE].in_flight == 0


async def test_it_redispatches_a_requeued_ticket_elsewhere() -> None:
    svc, _ = service(plain("b1"), plain("b2"))
    ticket = svc.submit(job())
    svc.dispatch_once()
    first = await ticket.dispatched()
    svc.requeue(ticket, first)
    svc.dispatch_once()
    assert await ticket.dispatched() != first


async def test_it_keeps_queued_tickets_across_configure() -> None:
    svc, _ = service(plain(max_in_flight=0))
    ticket = svc.submit(job())
    svc.configure(backends=[plain("b9")])
    svc.dispatch_once()
    assert await ticket.dispatched() == "b9"


async def test_it_expires_a_waiting_ticket_from_the_loop_at_its_deadline() -> None:
    svc, clock = service(plain(max_in_flight=0))
    ticket = svc.submit(job(deadline=0.05))
    await svc.start()
    try:
        clock.now = 0.05
        with pytest.raises(QueueTimeout):
            await asyncio.wait_for(ticket.dispatched(), 2.0)
    finally:
        await svc.stop()


class CountingService(SchedulerService):
    steps = 0

    def dispatch_once(self):  # type: ignore[no-untyped-def]
        self.steps += 1
        return super().dispatch_once()


async def test_it_does_not_step_again_until_something_happens() -> None:
    svc = CountingService(SchedulerConfig(), [plain(max_in_flight=0)], clock=FakeClock())
    svc.submit(job())
    await svc.start()
    try:
        for _ in range(5):
            await asyncio.sleep(0)
        settled = svc.steps
        for _ in range(20):
            await asyncio.sleep(0)
        assert svc.steps == settled
        svc.update_metrics("b1", fresh())
        for _ in range(5):
            await asyncio.sleep(0)
        assert svc.steps == settled + 1
    finally:
        await svc.stop()


async def test_a_request_that_never_waits_never_wakes_the_loop() -> None:
    svc = CountingService(SchedulerConfig(), [plain()], clock=FakeClock())
    await svc.start()
    try:
        await asyncio.sleep(0)
        settled = svc.steps
        ticket = svc.submit(job())
        svc.complete(ticket, 1.0)
        for _ in range(5):
            await asyncio.sleep(0)
        assert svc.steps == settled + 1  # the one step submit took itself
    finally:
        await svc.stop()
