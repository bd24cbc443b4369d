"""Batching similar requests: a queued job sharing a long prefix with the last dispatch goes
right after it, to the same backend, but only within the fairness slack."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import ALICE, BOB, CHARLIE, ids, job, plain, scheduler

from scheduling import Job, Principal, Scheduler
from scheduling.prefix_index import block_hashes

P = block_hashes("tenant p system prompt " * 100)
Q = block_hashes("tenant q system prompt " * 100)


def three_queued(**config: float) -> tuple[Scheduler, list[Job]]:
    """alice and charlie share prefix P, bob has Q; each lane has two jobs."""
    s = scheduler(plain("b1"), plain("b2"), **config)
    jobs = []
    for who, blocks in ((ALICE, P), (BOB, Q), (CHARLIE, P)):
        for _ in range(2):
            jobs.append(j := job(who, prefix_blocks=blocks))
            s.submit(j, 0.0)
    return s, jobs


def test_without_a_slack_jobs_go_in_fair_share_order() -> None:
    s, jobs = three_queued(batch_slack=0.0)
    assert ids(s.select(0.0))[:3] == [jobs[0].id, jobs[2].id, jobs[4].id]
    assert s.batched == 0


def test_a_similar_job_within_the_slack_goes_right_after_to_the_same_backend() -> None:
    s, jobs = three_queued(batch_slack=1.0)
    out = s.select(0.0)
    assert ids(out)[:2] == [jobs[0].id, jobs[4].id]
    assert out[0].backend == out[1].backend
    assert s.batched >= 1


def charlie_ahead_by(service: float, slack: float) -> tuple[Scheduler, list[Job]]:
    """charlie has been served `service` already; then alice (P), bob (Q), charlie (P) queue."""
    s = scheduler(plain("b1"), batch_slack=slack)
    s.submit(early := job(CHARLIE, prefix_blocks=P), 0.0)
    s.select(0.0)
    s.complete(early.id, real_cost=service)
    jobs = [job(ALICE, prefix_blocks=P), job(BOB, prefix_blocks=Q), job(CHARLIE, prefix_blocks=P)]
    for j in jobs:
        s.submit(j, 0.0)
    return s, jobs


def test_batching_never_moves_a_job_past_the_fairness_slack() -> None:
    s, (a, b, c) = charlie_ahead_by(4.0, slack=3.0)  # bob, the least served, is at 0
    assert ids(s.select(0.0)) == [a.id, b.id, c.id]


def test_batching_moves_a_job_ahead_while_within_the_slack() -> None:
    s, (a, b, c) = charlie_ahead_by(4.0, slack=4.0)
    assert ids(s.select(0.0)) == [a.id, c.id, b.id]


def test_a_short_shared_prefix_is_not_batched() -> None:
    s, jobs = three_queued(batch_slack=1.0, batch_min_blocks=len(P) + 1)
    assert ids(s.select(0.0))[:3] == [jobs[0].id, jobs[2].id, jobs[4].id]


USERS = [Principal("t", f"u{i}") for i in range(4)]
PREFIXES = [P, Q]


@settings(max_examples=40, deadline=None)
@given(
    slack=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    work=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(1, 4)), max_size=40),
)
def test_each_dispatch_is_within_the_slack_of_the_least_served(
    slack: float, work: list[tuple[int, int, int]]
) -> None:
    s = scheduler(plain("b1", max_in_flight=1), batch_slack=slack, batch_min_blocks=4)
    for user, prefix, cost in work:
        s.submit(job(USERS[user], prefix_blocks=PREFIXES[prefix], estimated_cost=cost), 0.0)
    for _ in range(len(work)):
        backlogged = [lane for lane in s.lanes.values() if lane.queue.peek() is not None]
        floor = min(lane.service for lane in backlogged)
        (d,) = s.select(0.0)
        served = s.lanes[("m", 1, d.job.principal)]
        assert served.service - d.job.estimated_cost <= floor + slack
        s.complete(d.job.id)
