"""A queued job's position is the number of jobs the scheduler will send before it."""

from __future__ import annotations

import pytest

from scheduling import queue_position
from tests.scheduling.sched_helpers import ALICE, BOB, CHARLIE, ids, job, plain, scheduler


def drain_one_at_a_time(s, first) -> list[str]:
    """Complete the running job, dispatch the next; the order the queue empties in."""
    order, running = [], first
    for step in range(100):
        s.complete(running, None)
        out = s.select(float(step + 1))
        if not out:
            return order
        running = out[0].job.id
        order.append(running)
    return order


@pytest.mark.parametrize("policy", ["fifo", "sjf"])
def test_positions_match_the_order_jobs_are_dispatched_in(policy):
    s = scheduler(plain(max_in_flight=1), within_principal=policy)
    blocker = job(CHARLIE, max_concurrent=10)
    s.submit(blocker, 0.0)
    assert ids(s.select(0.0)) == [blocker.id]
    queued = [job(p, max_concurrent=10) for p in (ALICE, ALICE, ALICE, BOB, BOB, CHARLIE)]
    for j in queued:
        s.submit(j, 0.0)
    predicted = {j.id: queue_position(s, j.id).position for j in queued}
    order = drain_one_at_a_time(s, blocker.id)
    assert sorted(predicted.values()) == list(range(len(queued)))
    assert predicted == {job_id: index for index, job_id in enumerate(order)}


def test_a_dispatched_job_is_running_and_a_finished_one_is_unknown():
    s = scheduler(plain(max_in_flight=1))
    first, second = job(), job()
    s.submit(first, 0.0)
    s.submit(second, 0.0)
    s.select(0.0)
    running = queue_position(s, first.id)
    assert (running.state, running.running) == ("running", 1)
    waiting = queue_position(s, second.id)
    assert (waiting.state, waiting.position, waiting.band, waiting.model) == ("queued", 0, 1, "m")
    s.complete(first.id, None)
    assert queue_position(s, first.id) is None


def test_a_job_in_another_band_or_pool_does_not_count():
    s = scheduler(plain(max_in_flight=0, models=("m", "n")))
    s.submit(job(ALICE, band=0), 0.0)
    s.submit(job(BOB, model="n"), 0.0)
    mine = job(CHARLIE, band=1)
    s.submit(mine, 0.0)
    assert queue_position(s, mine.id).position == 0
