"""Run-time replacement of settings, and optional aging between bands."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, ids, job, plain, scheduler

from scheduling import Scheduler, SchedulerConfig
from scheduling.lanes import EntryState


def test_it_keeps_queued_jobs_when_backends_are_replaced() -> None:
    s = scheduler(plain("b1", max_in_flight=0))
    s.submit(j := job(), 0.0)
    s.configure(backends=[plain("b2", max_in_flight=4)])
    assert [(d.job.id, d.backend) for d in s.select(0.0)] == [(j.id, "b2")]


def test_it_keeps_queued_jobs_and_accounts_when_the_config_is_replaced() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(3):
        s.submit(job(ALICE), 0.0)
    s.select(0.0)
    s.configure(config=SchedulerConfig(within_principal="sjf", stale_after=9.0))
    assert s.principals[ALICE].queued == 2
    assert s.lanes[("m", 1, ALICE)].service == 1.0
    s.complete(_dispatched(s), 1.0)
    assert len(s.select(0.0)) == 1


def _dispatched(s: Scheduler) -> str:
    return next(e.job.id for e in s.entries.values() if e.state is EntryState.DISPATCHED)


def test_it_keeps_in_flight_counts_of_a_backend_that_stays() -> None:
    s = scheduler(plain("b1", max_in_flight=1))
    s.submit(job(), 0.0)
    s.select(0.0)
    s.configure(backends=[plain("b1", max_in_flight=2)])
    assert s.backends["b1"].in_flight == 1


def test_it_completes_a_job_whose_backend_was_removed() -> None:
    s = scheduler(plain("b1"), plain("b2"))
    s.submit(j := job(), 0.0)
    d = s.select(0.0)[0]
    s.configure(backends=[plain("b2" if d.backend == "b1" else "b1")])
    s.complete(j.id, 1.0)
    assert s.principals[ALICE].in_flight == 0


def test_it_does_not_age_batch_jobs_by_default() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(ALICE, band=2), 0.0)
    s.select(1e9)
    assert ("m", 1, ALICE) not in s.lanes


def test_it_promotes_a_job_one_band_after_the_aging_period() -> None:
    s = scheduler(plain(max_in_flight=0), aging_seconds=10.0)
    s.submit(job(ALICE, band=2), 0.0)
    s.select(9.9)
    assert s.lanes[("m", 2, ALICE)].live == 1
    s.select(10.0)
    assert s.lanes[("m", 1, ALICE)].live == 1 and s.lanes[("m", 2, ALICE)].live == 0


def test_it_lets_an_aged_batch_job_overtake_newer_standard_work_of_the_same_band() -> None:
    s = scheduler(plain(max_in_flight=0), aging_seconds=10.0)
    s.submit(old := job(ALICE, band=2), 0.0)
    s.select(25.0)
    s.submit(job(BOB, band=1), 25.0)
    s.configure(backends=[plain(max_in_flight=1)])
    assert ids(s.select(25.0)) == [old.id]


def test_it_starts_aging_when_enabled_at_run_time() -> None:
    s = scheduler(plain(max_in_flight=0))
    s.submit(job(ALICE, band=2), 0.0)
    s.configure(config=SchedulerConfig(aging_seconds=5.0))
    s.select(5.0)
    assert s.lanes[("m", 1, ALICE)].live == 1
