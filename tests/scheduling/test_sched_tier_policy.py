"""A tier's own order within a principal (FIFO or shortest first) and aging period, carried by
its jobs, override the scheduler's for that tier only."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, ids, job, plain, scheduler


def test_a_tier_that_chooses_sjf_gets_its_jobs_shortest_first_under_a_fifo_scheduler() -> None:
    s = scheduler(plain(max_in_flight=10), within_principal="fifo")
    jobs = [job(ALICE, estimated_output_tokens=n, within_principal="sjf") for n in (30, 10, 20)]
    for j in jobs:
        s.submit(j, 0.0)
    assert ids(s.select(0.0)) == [jobs[1].id, jobs[2].id, jobs[0].id]


def test_a_tier_that_chooses_fifo_keeps_arrival_order_under_an_sjf_scheduler() -> None:
    s = scheduler(plain(max_in_flight=10), within_principal="sjf")
    jobs = [job(BOB, estimated_output_tokens=n, within_principal="fifo") for n in (30, 10, 20)]
    for j in jobs:
        s.submit(j, 0.0)
    assert ids(s.select(0.0)) == [j.id for j in jobs]


def test_a_tier_with_its_own_aging_period_is_promoted_when_the_scheduler_does_not_age() -> None:
    s = scheduler(plain(max_in_flight=0))
    s.submit(job(ALICE, band=2, aging_seconds=10.0), 0.0)
    s.select(10.0)
    assert s.lanes[("m", 1, ALICE)].live == 1


def test_a_tier_with_aging_zero_is_never_promoted_when_the_scheduler_ages() -> None:
    s = scheduler(plain(max_in_flight=0), aging_seconds=10.0)
    s.submit(job(ALICE, band=2, aging_seconds=0.0), 0.0)
    s.select(1e9)
    assert ("m", 1, ALICE) not in s.lanes
