"""Backend choice (a cached prefix worth `affinity_slack` slots of load, least load) and requeue after a backend failure."""

from __future__ import annotations

import pytest
from sched_helpers import ALICE, BOB, fresh, ids, job, metered, plain, scheduler

from scheduling import NoBackend
from scheduling.core import UNREACHABLE_SECONDS

SYS = (11, 12, 13)


def test_it_sends_a_job_to_the_least_loaded_backend() -> None:
    s = scheduler(plain("b1"), plain("b2"))
    s.backends["b1"].in_flight = 3
    s.submit(job(), 0.0)
    assert s.select(0.0)[0].backend == "b2"


def test_it_prefers_the_backend_that_served_the_prefix() -> None:
    s = scheduler(plain("b1"), plain("b2"), affinity_slack=2)
    s.submit(first := job(prefix_blocks=SYS), 0.0)
    home = s.select(0.0)[0].backend
    s.submit(job(BOB, prefix_blocks=SYS), 0.0)
    assert s.select(0.0)[0].backend == home
    assert s.backends[home].in_flight == 2 and first.id in s.entries


def test_it_leaves_the_affine_backend_when_loaded_past_the_slack() -> None:
    s = scheduler(plain("b1"), plain("b2"), affinity_slack=2)
    s.submit(job(prefix_blocks=SYS), 0.0)
    home = s.select(0.0)[0].backend
    other = "b2" if home == "b1" else "b1"
    s.backends[home].in_flight = 3  # least loaded has 0: 3 > 0 + 2
    s.submit(job(BOB, prefix_blocks=SYS), 0.0)
    assert s.select(0.0)[0].backend == other


def test_it_stays_on_the_affine_backend_within_the_slack() -> None:
    s = scheduler(plain("b1"), plain("b2"), affinity_slack=2)
    s.submit(job(prefix_blocks=SYS), 0.0)
    home = s.select(0.0)[0].backend
    s.backends[home].in_flight = 2
    s.submit(job(BOB, prefix_blocks=SYS), 0.0)
    assert s.select(0.0)[0].backend == home


def test_it_never_chooses_a_failed_backend_again_after_requeue() -> None:
    s = scheduler(plain("b1"), plain("b2"))
    s.submit(j := job(), 0.0)
    first = s.select(0.0)[0].backend
    s.requeue(j.id, first)
    s.backends[first].in_flight = 0
    s.backends["b2" if first == "b1" else "b1"].in_flight = 50
    assert s.select(0.0)[0].backend != first


def test_it_releases_the_failed_backends_slot_on_requeue() -> None:
    s = scheduler(plain("b1", max_in_flight=1), plain("b2", max_in_flight=1))
    s.submit(j := job(), 0.0)
    first = s.select(0.0)[0].backend
    s.requeue(j.id, first)
    assert s.backends[first].in_flight == 0


def test_it_puts_a_requeued_job_at_the_head_of_its_principals_queue() -> None:
    s = scheduler(plain("b1", max_in_flight=1), plain("b2", max_in_flight=1))
    s.submit(a := job(ALICE), 0.0)
    s.submit(b := job(ALICE), 0.0)
    s.submit(c := job(ALICE), 0.0)
    assert ids(s.select(0.0)) == [a.id, b.id]
    s.complete(b.id, 1.0)
    s.requeue(a.id, s.entries[a.id].backend or "")
    assert ids(s.select(0.0)) == [a.id, c.id]


def test_it_refunds_the_charge_of_a_requeued_job() -> None:
    s = scheduler(plain("b1"), plain("b2"))
    s.submit(j := job(estimated_cost=5.0), 0.0)
    s.select(0.0)
    s.requeue(j.id, "b1")
    assert s.lanes[("m", 1, ALICE)].service == 0.0


def test_it_rejects_a_requeue_when_no_other_backend_is_left() -> None:
    s = scheduler(plain("b1"))
    s.submit(j := job(), 0.0)
    s.select(0.0)
    with pytest.raises(NoBackend):
        s.requeue(j.id, "b1")
    assert j.id not in s.entries and s.totals["rejected"] == 1


def test_it_lets_others_pass_a_job_whose_only_open_backend_failed_it() -> None:
    s = scheduler(plain("b1", max_in_flight=1), plain("b2", max_in_flight=0))
    s.submit(a := job(ALICE), 0.0)
    s.select(0.0)
    s.requeue(a.id, "b1")
    s.submit(b := job(BOB), 0.0)
    assert ids(s.select(0.0)) == [b.id]
    assert a.id in s.entries


def test_an_unreachable_backend_is_closed_to_every_job_until_a_healthy_scrape():
    s = scheduler(metered("b1"))
    s.update_metrics("b1", fresh(waiting=0))
    first, second = job(ALICE), job(BOB)
    s.submit(first, 0.0)
    s.select(0.0)
    s.submit(second, 0.0)
    s.requeue(first.id, "b1", unreachable_at=0.1)
    assert s.select(0.1) == []  # neither the failed job nor the one behind it
    s.update_metrics("b1", fresh(now=0.3, waiting=0))
    assert sorted(ids(s.select(0.3))) == sorted([first.id, second.id])  # not barred for good


def test_an_unreachable_backend_without_metrics_is_tried_again_after_a_while():
    s = scheduler(plain("b1"))
    j = job(ALICE)
    s.submit(j, 0.0)
    s.select(0.0)
    s.requeue(j.id, "b1", unreachable_at=1.0)
    assert s.select(1.5) == []
    assert s.next_wakeup() == 1.0 + UNREACHABLE_SECONDS
    assert ids(s.select(1.0 + UNREACHABLE_SECONDS)) == [j.id]


def test_jobs_go_to_another_backend_while_one_is_unreachable():
    s = scheduler(plain("b1"), plain("b2"))
    j = job(ALICE)
    s.submit(j, 0.0)
    (d,) = s.select(0.0)
    s.requeue(j.id, d.backend, unreachable_at=0.0)
    (again,) = s.select(0.0)
    assert again.backend != d.backend


def test_a_spent_unreachable_backoff_no_longer_wakes_the_scheduler():
    """Else a backend that was once unreachable and is never scraped (no metrics) or stays
    down would keep the service loop waking at once, forever."""
    s = scheduler(plain("b1"))
    j = job(ALICE)
    s.submit(j, 0.0)
    s.select(0.0)
    s.requeue(j.id, "b1", unreachable_at=1.0)
    s.dispatch_once(1.0 + UNREACHABLE_SECONDS)
    s.complete(j.id)
    s.dispatch_once(10.0)
    assert s.next_wakeup() is None
