"""Jobs of ours waiting in a preempting engine's own queue, sent before its capacity was learned:
a job that should go first calls them back, and one of them that should go before a running job
makes room for itself."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, ids, job, learn, learning, sent_before_learning

from scheduling import Job


def flood(n: int) -> list[Job]:
    return [job(ALICE, preemptible=True, max_concurrent=64) for _ in range(n)]


def test_a_job_called_back_from_the_engine_queue_is_no_eviction() -> None:
    s = learning("b1")
    jobs, _ = sent_before_learning(s, 6)  # four run, two wait in the engine
    learn(s, running=4, waiting=2)
    s.submit(job(BOB, preempt_after=0.15), 1.0)
    s.dispatch_once(1.2)
    s.preempted(jobs[-1].id, real_cost=0.0, now=1.21)
    queued = s.entries[jobs[-1].id]
    assert (queued.evictions, queued.preempted, queued.state) == (0, False, "queued")


def test_a_job_in_the_engine_queue_makes_room_for_itself_where_it_should_go_first() -> None:
    s = learning("b1")
    jobs, second = sent_before_learning(s, 4)
    assert second == [jobs[-1].id]  # four run
    s.submit(waiter := job(BOB, preempt_after=0.15), 0.15)
    assert ids(s.select(0.15)) == [waiter.id]  # and bob's waits in the engine's queue
    learn(s, running=4, waiting=1)
    assert s.dispatch_once(0.2).evicted == []  # not yet due
    assert [e.job_id for e in s.dispatch_once(1.0).evicted] == [jobs[-1].id]


def test_a_job_called_back_leaves_its_place_to_the_waiter_until_the_waiter_is_sent() -> None:
    """The waiter's prompt is cached on the other engine, so it waits for that one: the job
    called back must not take its place again meanwhile, or the two trade it for ever."""
    s = learning("b1", "b2")
    for j in flood(10):
        s.submit(j, 0.0)
    s.select(0.0)  # three each
    learn(s, running=2, waiting=1)  # each engine: two running, one waiting
    s.prefixes.record("b2", (1, 2, 3), 0.0)
    s.submit(waiter := job(BOB, preempt_after=0.15, prefix_blocks=(1, 2, 3)), 1.0)
    step = s.dispatch_once(1.2)
    recalled = [e.job_id for e in step.evicted if s.entries[e.job_id].recalled]
    assert recalled
    for job_id in recalled:
        s.preempted(job_id, real_cost=0.0, now=1.21)
    waiter_sent = waiter.id in ids(step.dispatched)
    for t in (1.3, 1.4, 1.5):
        step = s.dispatch_once(t)
        sent = ids(step.dispatched)
        for job_id in set(sent) & set(recalled):  # only once the waiter has gone ahead
            assert waiter_sent or sent.index(waiter.id) < sent.index(job_id)
        assert not {e.job_id for e in step.evicted} & set(recalled)
        waiter_sent = waiter_sent or waiter.id in sent
