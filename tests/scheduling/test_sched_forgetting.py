"""Idle principals are forgotten once their accounts no longer matter, so memory follows the
principals active now, not every one ever seen; a principal's debt is kept while it matters."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, CHARLIE, job, plain, scheduler

from scheduling import Scheduler
from scheduling.core import IDLE_SWEEP_SECONDS


def serve(s: Scheduler, now: float) -> None:
    """Dispatch what fits and complete it at its estimate."""
    for d in s.dispatch_once(now).dispatched:
        s.complete(d.job.id, d.job.estimated_cost)


def test_a_principal_alone_is_forgotten_a_sweep_after_it_goes_idle() -> None:
    s = scheduler(plain())
    s.submit(job(ALICE), 0.0)
    serve(s, 0.0)
    assert ALICE in s.principals
    s.dispatch_once(IDLE_SWEEP_SECONDS)
    assert not s.lanes and not s.principals


def test_a_principal_with_work_queued_or_running_is_kept() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(ALICE), 0.0)
    s.submit(job(ALICE), 0.0)
    s.dispatch_once(0.0)
    s.dispatch_once(IDLE_SWEEP_SECONDS)
    assert ALICE in s.principals and len(s.lanes) == 1


def test_an_idle_principal_at_or_below_the_floor_is_forgotten_while_others_work() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(20):
        s.submit(job(ALICE), 0.0)
    s.submit(job(BOB), 0.0)
    for t in range(4):  # alice, bob, alice, alice: bob idle, alice's served level passes his
        serve(s, float(t))
    s.dispatch_once(10.0)
    assert BOB not in s.principals
    assert [lane.principal for lane in s.lanes.values()] == [ALICE]


def test_an_idle_principal_ahead_of_the_floor_keeps_its_debt() -> None:
    """Bob took an expensive job; he comes back before the others caught up: he still waits for
    them, as he would had he never gone idle."""
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(BOB, estimated_cost=20.0), 0.0)
    for _ in range(10):
        s.submit(job(ALICE), 0.0)
    serve(s, 0.0)  # bob's big job first (tie broken by arrival)
    serve(s, 1.0)  # one of alice's
    s.dispatch_once(2.0 + IDLE_SWEEP_SECONDS)
    assert BOB in s.principals
    bob = next(lane for lane in s.lanes.values() if lane.principal == BOB)
    alice = next(lane for lane in s.lanes.values() if lane.principal == ALICE)
    assert bob.service > alice.service


def test_a_returning_principal_after_forgetting_starts_level_with_the_active_ones() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(20):
        s.submit(job(ALICE), 0.0)
    s.submit(job(CHARLIE), 0.0)
    for t in range(4):
        serve(s, float(t))
    s.dispatch_once(10.0)
    assert CHARLIE not in s.principals
    s.submit(job(CHARLIE), 11.0)
    charlie = next(lane for lane in s.lanes.values() if lane.principal == CHARLIE)
    alice = next(lane for lane in s.lanes.values() if lane.principal == ALICE)
    assert charlie.service == alice.service - alice.running
