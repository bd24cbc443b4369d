"""Preemption: when every slot is busy and a job has waited past its `preempt_after`, the
scheduler evicts one running job of a lower band, or of an over-served principal of the same
band, and resumes it later from the head of its queue."""

from __future__ import annotations

from typing import Any

from sched_helpers import (
    ALICE,
    BOB,
    CHARLIE,
    FULL_AT_CAPACITY,
    fresh,
    ids,
    job,
    learn,
    learning,
    preempting,
    scheduler,
    sent_before_learning,
)

from scheduling import BackendConfig, GateThresholds, Job, Principal, Scheduler


def pool(capacity: int = 4, preemption: bool = True, **config: Any) -> Scheduler:
    """One backend of known capacity, so that a job that waits waits in the gateway's queue
    (jobs in the engine's own queue: see `test_sched_engine_queue`)."""
    return preempting("b1", capacity=capacity, preemption=preemption, **config)


def two_backends() -> Scheduler:
    """A pool of two backends of two slots each."""
    return preempting("b1", "b2", capacity=2)


def flood(s: Scheduler, n: int, band: int = 1, at: float = 0.0, **kw: Any) -> list[Job]:
    jobs = [job(ALICE, band=band, preemptible=True, max_concurrent=64, **kw) for _ in range(n)]
    for i, j in enumerate(jobs):
        s.submit(j, at)
        s.select(at + i * 0.001)  # dispatched one after another: the last is the newest
    return jobs


def light(band: int = 1, after: float | None = 0.15, **kw: Any) -> Job:
    return job(BOB, band=band, preempt_after=after, **kw)


def test_a_light_job_waiting_past_preempt_after_evicts_the_newest_job_of_the_flood():
    s = pool(capacity=4)
    jobs = flood(s, 4)
    s.submit(waiter := light(), 1.0)
    assert s.dispatch_once(1.1).evicted == []
    step = s.dispatch_once(1.2)
    assert [e.job_id for e in step.evicted] == [jobs[-1].id]
    assert step.evicted[0].backend == "b1"
    s.preempted(jobs[-1].id, real_cost=0.0, now=1.21)
    assert ids(s.select(1.21)) == [waiter.id]


def test_the_scheduler_wakes_when_a_waiter_becomes_entitled_to_preempt():
    s = pool(capacity=2)
    flood(s, 2)
    s.submit(light(after=0.15), 1.0)
    s.dispatch_once(1.0)
    assert s.next_wakeup() == 1.15


def test_a_waiter_without_preempt_after_never_evicts():
    s = pool(capacity=2)
    flood(s, 2)
    s.submit(light(after=None), 1.0)
    assert s.dispatch_once(60.0).evicted == []


def test_non_preemptible_jobs_are_never_evicted():
    s = pool(capacity=2)
    for _ in range(2):
        s.submit(job(ALICE, preemptible=False, max_concurrent=64), 0.0)
    s.select(0.0)
    s.submit(light(), 1.0)
    assert s.dispatch_once(5.0).evicted == []


def test_a_backend_with_preemption_off_is_never_asked_to_make_room():
    s = pool(capacity=2, preemption=False)
    flood(s, 2)
    s.submit(light(), 1.0)
    assert s.dispatch_once(5.0).evicted == []


def test_a_principal_within_its_fair_share_is_not_evicted_for_one_of_its_own_band():
    s = pool(capacity=4, preempt_slack=1.0)
    for who in (ALICE, BOB):  # two each: both exactly at their share of four slots
        for _ in range(2):
            s.submit(job(who, preemptible=True), 0.0)
    s.select(0.0)
    s.submit(job(CHARLIE, preempt_after=0.1), 1.0)
    assert s.dispatch_once(5.0).evicted == []


def test_a_lower_band_job_is_evicted_for_a_higher_band_waiter_even_within_its_share():
    s = pool(capacity=2)
    batch = flood(s, 2, band=2)
    s.submit(light(band=0), 1.0)
    evicted = s.dispatch_once(1.2).evicted
    assert [e.job_id for e in evicted] == [batch[-1].id]


def test_the_lowest_band_is_evicted_first():
    s = pool(capacity=2)
    standard = job(CHARLIE, band=1, preemptible=True)
    batch = job(ALICE, band=2, preemptible=True)
    for j in (batch, standard):
        s.submit(j, 0.0)
        s.select(0.0)
    s.submit(light(band=0), 1.0)
    assert [e.job_id for e in s.dispatch_once(1.2).evicted] == [batch.id]


def test_no_second_eviction_on_a_backend_until_the_first_is_confirmed():
    s = pool(capacity=4)
    jobs = flood(s, 4)
    s.submit(first := light(), 1.0)
    s.submit(job(CHARLIE, preempt_after=0.15), 1.0)
    assert len(s.dispatch_once(1.2).evicted) == 1
    assert s.dispatch_once(1.3).evicted == []  # not confirmed yet
    s.preempted(jobs[-1].id, real_cost=0.0, now=1.31)
    step = s.dispatch_once(1.31)  # the freed slot goes to one waiter; the other may evict now
    assert ids(step.dispatched) == [first.id] and len(step.evicted) == 1


def test_each_waiter_gets_its_own_eviction_across_the_backends_of_a_pool():
    s = two_backends()
    flood(s, 4)
    s.submit(light(), 1.0)
    s.submit(job(CHARLIE, preempt_after=0.15), 1.0)
    evicted = s.dispatch_once(1.2).evicted
    assert sorted(e.backend for e in evicted) == ["b1", "b2"]


def test_a_waiter_with_an_eviction_under_way_does_not_ask_for_another():
    s = two_backends()
    flood(s, 4)
    s.submit(light(), 1.0)
    assert len(s.dispatch_once(1.2).evicted) == 1
    assert s.dispatch_once(1.3).evicted == []


def test_an_evicted_job_resumes_from_the_head_of_its_queue_and_never_expires_there():
    s = pool(capacity=1, preempt_slack=0.0)
    (victim,) = flood(s, 1, deadline=2.0)
    s.submit(job(ALICE, max_concurrent=64), 0.5)  # queued behind it
    s.submit(waiter := light(), 1.0)
    s.dispatch_once(1.2)
    s.preempted(victim.id, real_cost=0.0, now=1.2)
    assert ids(s.select(1.2)) == [waiter.id]
    s.complete(waiter.id)
    s.update_metrics("b1", fresh(now=3.0, waiting=0, running=0))
    step = s.dispatch_once(3.0)  # past the victim's queue deadline
    assert step.expired == []
    assert ids(step.dispatched) == [victim.id]


def test_a_resumed_job_is_protected_from_another_eviction():
    s = pool(capacity=2, preempt_slack=0.0, preempt_protect_seconds=5.0)
    s.submit(job(ALICE, preemptible=False, max_concurrent=64), 0.0)  # never a victim
    (victim,) = flood(s, 1)
    s.submit(first := light(), 1.0)
    s.dispatch_once(1.2)
    s.preempted(victim.id, real_cost=0.0, now=1.2)
    s.select(1.2)
    s.complete(first.id)
    s.update_metrics("b1", fresh(now=1.3, waiting=0, running=0))
    assert ids(s.select(1.3)) == [victim.id]  # resumed
    s.submit(light(), 1.4)
    assert s.dispatch_once(3.0).evicted == []
    s.update_metrics("b1", fresh(now=6.4, waiting=0, running=1))
    assert [e.job_id for e in s.dispatch_once(6.4).evicted] == [victim.id]


def test_an_evicted_job_is_charged_for_what_is_left_then_corrected_to_its_real_total():
    s = pool(capacity=1, preempt_slack=0.0)
    (victim,) = flood(s, 1, estimated_cost=100.0)
    lane = s.entries[victim.id].lane
    assert lane is not None and lane.service == 100.0
    s.submit(waiter := light(), 1.0)
    s.dispatch_once(1.2)
    s.preempted(victim.id, real_cost=30.0, now=1.2)
    assert lane.service == 100.0  # it keeps the charge while it waits
    s.select(1.2)
    s.complete(waiter.id)
    s.select(1.3)  # resumed: charged the estimate of the 70 left
    assert lane.service == 170.0
    s.complete(victim.id, real_cost=90.0)
    assert lane.service == 90.0


def test_the_slot_an_evicted_job_gave_up_goes_to_the_job_it_was_evicted_for():
    s = pool(capacity=1, preempt_slack=0.0)
    (victim,) = flood(s, 1, estimated_cost=0.0)  # an account no higher than the waiter's
    s.submit(waiter := light(), 1.0)
    s.dispatch_once(1.2)
    s.preempted(victim.id, real_cost=0.0, now=1.2)
    assert ids(s.select(1.2)) == [waiter.id]


def test_a_declined_eviction_frees_the_backend_for_another_and_spares_that_job_for_good():
    s = pool(capacity=4)
    jobs = flood(s, 4)
    s.submit(light(), 1.0)
    (first,) = s.dispatch_once(1.2).evicted
    s.keep_running(first.job_id)
    (second,) = s.dispatch_once(1.3).evicted
    assert second.job_id == jobs[-2].id != first.job_id


def test_a_job_that_ends_while_being_evicted_ends_the_eviction_too():
    s = pool(capacity=4)
    jobs = flood(s, 4)
    s.submit(light(), 1.0)
    assert len(s.dispatch_once(1.2).evicted) == 1
    s.complete(jobs[-1].id)
    assert s.backends["b1"].evicting == 0


def test_a_flood_whose_own_queued_jobs_may_preempt_does_not_hide_a_light_waiter():
    """The power user's queued jobs are entitled to preempt too (same tier), and its lane can
    be the least served by account; it holds every slot, so it has no victim, and the light
    user behind it must still get its eviction."""
    s = pool(capacity=4)
    jobs = flood(s, 6, preempt_after=0.15)  # four run, two queue, due at 0.15
    s.submit(waiter := light(estimated_cost=50.0), 1.0)
    step = s.dispatch_once(1.2)
    assert [e.job_id for e in step.evicted] == [jobs[3].id]
    s.preempted(jobs[3].id, real_cost=0.0, now=1.21)
    assert ids(s.select(1.21)) == [waiter.id]


def test_a_job_adopted_from_an_old_leader_keeps_what_is_left_of_its_resume_protection():
    s = pool(capacity=2, preempt_slack=0.0, preempt_protect_seconds=5.0)
    older, victim = (job(ALICE, band=1, preemptible=True, max_concurrent=64) for _ in range(2))
    s.adopt(older, "b1", now=9.9, resumed_ago=0.9)  # both resumed at 9.0 under the old leader
    s.adopt(victim, "b1", now=10.0, resumed_ago=1.0)
    s.submit(light(), 10.0)
    s.update_metrics("b1", fresh(now=13.5, waiting=0, running=1))
    assert s.dispatch_once(13.5).evicted == []
    s.update_metrics("b1", fresh(now=14.1, waiting=0, running=1))
    assert [e.job_id for e in s.dispatch_once(14.1).evicted] == [victim.id]


def test_a_light_user_returning_during_a_flood_is_behind_it_by_the_floods_work_in_flight():
    s = pool(capacity=4)
    jobs = flood(s, 6, estimated_cost=10.0)  # four run, two wait
    for done in jobs[:2]:
        s.complete(done.id)  # 40 charged, 20 of it still in flight
    s.submit(light(), 1.0)
    bob = s.lanes[("m", 1, BOB)]
    assert bob.service == 20.0  # what the flood has been served, not what it was charged


def test_backlogged_principals_with_longer_answers_are_not_evicted_for_equals():
    """Fair share by cost rightly gives the long-answer principal more slots; preemption by the
    same account leaves them."""
    s = pool(capacity=4)
    for _ in range(8):
        s.submit(job(ALICE, preemptible=True, preempt_after=0.15, estimated_cost=5.0), 0.0)
        s.submit(job(BOB, preemptible=True, preempt_after=0.15, estimated_cost=1.0), 0.0)
    s.select(0.0)
    assert s.dispatch_once(5.0).evicted == []


def test_an_evicted_job_yields_only_until_its_waiter_has_had_one_dispatch():
    s = pool(capacity=2, preempt_slack=0.0)
    jobs = flood(s, 2, estimated_cost=10.0)
    waiters = [light(estimated_cost=50.0) for _ in range(3)]  # backlogged, soon ahead
    for w in waiters:
        s.submit(w, 1.0)
    (eviction,) = s.dispatch_once(1.2).evicted
    s.preempted(eviction.job_id, real_cost=0.0, now=1.21)
    assert ids(s.select(1.21)) == [waiters[0].id]
    s.complete(jobs[0].id)
    assert ids(s.select(1.3)) == [eviction.job_id]  # bob is ahead now: it yields no more


def test_a_job_is_evicted_at_most_preempt_max_per_job_times():
    s = pool(capacity=1, preempt_max_per_job=1, preempt_protect_seconds=0.0)
    (victim,) = flood(s, 1, estimated_cost=100.0)
    s.submit(first := light(), 1.0)
    s.dispatch_once(1.2)
    s.preempted(victim.id, real_cost=0.0, now=1.2)
    s.select(1.2)
    s.complete(first.id)
    assert ids(s.select(1.3)) == [victim.id]
    s.submit(light(), 1.4)
    assert s.dispatch_once(9.0).evicted == []


def test_a_backend_sees_at_most_its_evictions_per_second_and_the_scheduler_wakes_after():
    s = pool(capacity=8, preempt_max_per_backend_second=2)
    flood(s, 8, estimated_cost=10.0)
    waiters = [job(p, preempt_after=0.15) for p in (BOB, CHARLIE, Principal("initech", "dave"))]
    for w in waiters:
        s.submit(w, 1.0)
    done = []
    for t in (1.2, 1.3, 1.4):
        step = s.dispatch_once(t)
        for e in step.evicted:
            s.preempted(e.job_id, real_cost=0.0, now=t)
            done.append(t)
    assert done == [1.2, 1.3]
    assert s.next_wakeup() == 2.2
    s.update_metrics("b1", fresh(now=2.2, waiting=0, running=8))
    assert len(s.dispatch_once(2.2).evicted) == 1


def test_jobs_sent_before_the_capacity_was_learned_leave_the_engine_queue_for_a_waiter():
    """Before its capacity is known the engine may queue some of the flood; once it is, a light
    waiter would sit behind them in the engine's FIFO queue whatever it evicted, so those come
    back to the gateway's queue, as a running job makes room for it."""
    s = learning("b1")
    jobs, _ = sent_before_learning(s, 6)  # three, then three more: four run, two wait there
    learn(s, running=4, waiting=2)
    assert s.backends["b1"].capacity == 4
    s.submit(light(), 1.0)
    step = s.dispatch_once(1.2)
    assert sorted(e.job_id for e in step.evicted) == sorted(j.id for j in jobs[3:])


def test_jobs_called_back_from_the_engine_queue_leave_the_per_second_bound_to_running_work():
    """Stopping a job the engine has not started costs nothing: the backend's evictions per
    second bound running work only, so a waiter is not held back by the queue's clearing."""
    backend = BackendConfig("b1", frozenset({"m"}), has_metrics=True, preemption=True)
    s = scheduler(
        backend,
        gates=FULL_AT_CAPACITY | {1: GateThresholds(max_waiting=5)},
        preempt_max_per_backend_second=2,
    )
    s.update_metrics("b1", fresh(now=0.0, waiting=0, running=0))
    jobs = [job(ALICE, preemptible=True, max_concurrent=64) for _ in range(8)]
    for j in jobs:
        s.submit(j, 0.0)
    s.select(0.0)
    s.update_metrics("b1", fresh(now=0.1, waiting=0, running=5))
    s.select(0.1)  # eight sent: four run, four wait inside the engine
    s.update_metrics("b1", fresh(now=0.2, waiting=4, running=4))
    s.update_metrics("b1", fresh(now=0.4, waiting=4, running=4))
    s.submit(light(), 1.0)
    stopped = {e.job_id for e in s.dispatch_once(1.2).evicted}
    assert stopped > {j.id for j in jobs[4:]} and len(stopped) == 5  # and a running job
    assert s.backends["b1"].evictions_in_last_second(1.2) == 1


def test_no_job_leaves_the_engine_queue_while_nobody_is_due_to_preempt():
    backend = BackendConfig("b1", frozenset({"m"}), has_metrics=True, preemption=True)
    s = scheduler(backend, gates={1: GateThresholds(max_waiting=3, max_tpot_seconds=None)})
    s.update_metrics("b1", fresh(now=0.0, waiting=0, running=0))
    for _ in range(6):
        s.submit(job(ALICE, preemptible=True, max_concurrent=64), 0.0)
    s.select(0.0)
    s.update_metrics("b1", fresh(now=0.1, waiting=0, running=3))
    s.select(0.1)
    s.update_metrics("b1", fresh(now=0.2, waiting=2, running=4))
    s.update_metrics("b1", fresh(now=0.4, waiting=2, running=4))
    assert s.backends["b1"].estimated_waiting() == 2
    assert s.dispatch_once(1.0).evicted == []


def test_jobs_of_ours_within_the_capacity_stay_when_others_traffic_is_what_queues():
    backend = BackendConfig("b1", frozenset({"m"}), has_metrics=True, capacity=4, preemption=True)
    s = scheduler(backend, gates=FULL_AT_CAPACITY)
    s.update_metrics("b1", fresh(now=0.0, waiting=0, running=0))
    for _ in range(3):
        s.submit(job(ALICE, preemptible=True, max_concurrent=64), 0.0)
    s.select(0.0)  # three of ours; then another gateway's three arrive: four run, two wait
    s.update_metrics("b1", fresh(now=0.2, waiting=2, running=4))
    s.update_metrics("b1", fresh(now=0.4, waiting=2, running=4))
    assert s.backends["b1"].estimated_waiting() == 2
    s.submit(light(), 1.0)
    assert len(s.dispatch_once(1.2).evicted) == 1  # the waiter's own victim, nothing more
