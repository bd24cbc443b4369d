"""Per-principal limits, deadlines and cancellation."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import ALICE, BOB, ids, job, plain, scheduler

from scheduling import Job, NoBackend, QueueFull, Scheduler


def test_it_rejects_a_job_when_the_principals_queue_is_full() -> None:
    s = scheduler(plain(max_in_flight=0), queue_full_retry_after=7.0)
    s.submit(job(ALICE, max_queued=2), 0.0)
    s.submit(job(ALICE, max_queued=2), 0.0)
    with pytest.raises(QueueFull) as err:
        s.submit(job(ALICE, max_queued=2), 0.0)
    assert err.value.retry_after == 7.0
    assert s.totals["rejected"] == 1


def test_it_counts_the_queue_limit_per_principal() -> None:
    s = scheduler(plain(max_in_flight=0))
    s.submit(job(ALICE, max_queued=1), 0.0)
    s.submit(job(BOB, max_queued=1), 0.0)
    assert s.principals[BOB].queued == 1


def test_it_rejects_a_job_for_a_model_no_backend_serves() -> None:
    s = scheduler(plain())
    with pytest.raises(NoBackend):
        s.submit(job(model="other"), 0.0)


def test_it_skips_a_principal_at_its_concurrency_limit_without_blocking_others() -> None:
    s = scheduler(plain(max_in_flight=10))
    a = [job(ALICE, max_concurrent=2) for _ in range(4)]
    b = [job(BOB, max_concurrent=2) for _ in range(1)]
    for j in a + b:
        s.submit(j, 0.0)
    out = ids(s.select(0.0))
    assert sorted(out) == sorted([a[0].id, a[1].id, b[0].id])


def test_it_resumes_a_principal_when_one_of_its_jobs_completes() -> None:
    s = scheduler(plain(max_in_flight=10))
    a = [job(ALICE, max_concurrent=1) for _ in range(2)]
    for j in a:
        s.submit(j, 0.0)
    s.select(0.0)
    s.complete(a[0].id, 1.0)
    assert ids(s.select(0.0)) == [a[1].id]


def test_it_expires_a_job_past_its_deadline() -> None:
    s = scheduler(plain(max_in_flight=0))
    s.submit(j := job(deadline=5.0), 0.0)
    assert s.expire(4.9) == []
    assert s.expire(5.0) == [j]
    assert s.totals["expired"] == 1


def third_of_a_queue_moving_at_four(**kw: Any) -> tuple[Scheduler, Job]:
    """Three of Alice's jobs queued at 0 s on one slot: the first runs from 0 s, the second
    from 4 s (her queue moves then); the third still waits."""
    s = scheduler(plain(max_in_flight=1))
    first, second, third = (job(**kw) for _ in range(3))
    for j in (first, second, third):
        s.submit(j, 0.0)
    s.select(0.0)
    s.complete(first.id)
    s.select(4.0)
    return s, third


def test_a_job_behind_its_own_principals_moving_queue_waits_past_its_patience() -> None:
    s, third = third_of_a_queue_moving_at_four(patience=5.0)
    assert s.expire(8.0) == []
    assert third in [e.job for e in s.entries.values()]


def test_a_job_expires_once_its_principals_queue_has_not_moved_for_its_patience() -> None:
    s, third = third_of_a_queue_moving_at_four(patience=5.0)
    assert s.expire(8.9) == []
    assert s.expire(9.0) == [third]


def test_another_principals_moving_queue_does_not_extend_a_jobs_patience() -> None:
    s = scheduler(plain(max_in_flight=1))
    alice = [job(ALICE, band=0, patience=100.0) for _ in range(3)]
    for j in alice:
        s.submit(j, 0.0)
    s.submit(bob := job(BOB, band=1, patience=5.0), 0.0)
    s.select(0.0)
    s.complete(alice[0].id)
    assert ids(s.select(4.0)) == [alice[1].id]  # Alice's band goes first: her queue moves
    assert s.expire(5.0) == [bob]


def test_a_deadline_holds_however_the_queue_moves() -> None:
    s, third = third_of_a_queue_moving_at_four(patience=5.0, deadline=6.0)
    assert s.expire(6.0) == [third]


def test_it_never_dispatches_an_expired_job() -> None:
    s = scheduler(plain(max_in_flight=0))
    s.submit(job(deadline=5.0), 0.0)
    s.configure(backends=[plain(max_in_flight=5)])
    step = s.dispatch_once(6.0)
    assert step.dispatched == [] and len(step.expired) == 1


def test_it_does_not_expire_a_dispatched_job() -> None:
    s = scheduler(plain())
    s.submit(job(deadline=5.0), 0.0)
    s.select(0.0)
    assert s.expire(10.0) == []


def test_it_never_dispatches_a_job_cancelled_while_queued() -> None:
    s = scheduler(plain(max_in_flight=0))
    s.submit(j := job(), 0.0)
    assert s.cancel(j.id) is True
    s.configure(backends=[plain(max_in_flight=5)])
    assert s.select(0.0) == []
    assert s.principals[ALICE].queued == 0


def test_it_frees_the_slot_when_a_dispatched_job_is_cancelled() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(a := job(), 0.0)
    s.submit(b := job(), 0.0)
    s.select(0.0)
    assert s.cancel(a.id) is False
    assert ids(s.select(0.0)) == [b.id]
