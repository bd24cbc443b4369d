"""A preempting engine of known capacity holds one of our jobs in its own queue, so a slot that
frees is filled at its next step; a job that should go first calls the held one back, and a
job held there that should go before a running one makes room for itself."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, ids, job, preempting

from scheduling import Job, Scheduler


def engine(capacity: int = 4) -> Scheduler:
    return preempting("b1", capacity=capacity, held_in_engine=1)


def flood(s: Scheduler, n: int) -> list[Job]:
    jobs = [job(ALICE, preemptible=True, max_concurrent=64) for _ in range(n)]
    for j in jobs:
        s.submit(j, 0.0)
    s.select(0.0)
    return jobs


def light() -> Job:
    return job(BOB, preempt_after=0.15)


def test_one_job_beyond_the_slots_is_sent_to_wait_in_the_engine() -> None:
    s = engine(capacity=4)
    jobs = flood(s, 8)
    assert s.backends["b1"].in_flight == 5
    assert [s.entries[j.id].state for j in jobs].count("dispatched") == 5


def test_a_waiter_calls_back_the_held_job_and_a_running_job_makes_room_for_it() -> None:
    s = engine(capacity=4)
    jobs = flood(s, 8)
    s.submit(waiter := light(), 1.0)
    assert s.dispatch_once(1.1).evicted == []  # not yet due
    stopped = s.dispatch_once(1.2).evicted
    assert (stopped[0].job_id, stopped[0].recall) == (jobs[4].id, True)
    assert len(stopped) == 2 and not stopped[1].recall  # and a running one evicted
    s.preempted(jobs[4].id, real_cost=0.0, now=1.21)
    assert ids(s.select(1.21)) == [waiter.id]  # first in the engine's line for the freed slot


def test_a_job_called_back_from_the_engine_is_no_eviction() -> None:
    s = engine(capacity=4)
    jobs = flood(s, 8)
    s.submit(light(), 1.0)
    s.dispatch_once(1.2)
    s.preempted(jobs[4].id, real_cost=0.0, now=1.21)
    held = s.entries[jobs[4].id]
    assert (held.evictions, held.preempted, held.state) == (0, False, "queued")
    assert s.backends["b1"].evictions_in_last_second(1.21) == 1  # the running one's alone


def test_a_job_held_in_the_engine_makes_room_for_itself_where_it_should_go_first() -> None:
    s = engine(capacity=4)
    jobs = flood(s, 4)
    s.submit(waiter := light(), 1.0)
    assert ids(s.select(1.0)) == [waiter.id]  # sent to wait in the engine's queue
    assert s.dispatch_once(1.1).evicted == []
    assert [e.job_id for e in s.dispatch_once(1.2).evicted] == [jobs[-1].id]


def test_a_backlogged_principals_held_job_waits_for_a_slot_to_free() -> None:
    s = engine(capacity=4)
    flood(s, 8)
    assert s.dispatch_once(5.0).evicted == []


def two_engines() -> Scheduler:
    return preempting("b1", "b2", capacity=2, held_in_engine=1)


def test_a_job_called_back_leaves_its_place_to_the_waiter_until_the_waiter_is_sent() -> None:
    """The waiter's prompt is cached on the other engine, so it waits for that one: the job
    called back must not take its place again meanwhile, or the two trade it for ever."""
    s = two_engines()
    flood(s, 10)  # each engine: two running, one held
    s.prefixes.record("b2", (1, 2, 3), 0.0)
    s.submit(waiter := job(BOB, preempt_after=0.15, prefix_blocks=(1, 2, 3)), 1.0)
    recalled = [e.job_id for e in s.dispatch_once(1.2).evicted if s.entries[e.job_id].recalled]
    for job_id in recalled:
        s.preempted(job_id, real_cost=0.0, now=1.21)
    for t in (1.3, 1.4, 1.5):
        step = s.dispatch_once(t)
        assert not set(ids(step.dispatched)) & set(recalled)
        assert not {e.job_id for e in step.evicted} & set(recalled)
    assert s.entries[waiter.id].state == "queued" or waiter.id in ids(step.dispatched)
