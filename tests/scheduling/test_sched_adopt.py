"""A scheduler taking over jobs already running (a new cluster leader) counts their slots and
charges their principals, as if it had dispatched them itself."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, ids, job, plain, scheduler

from scheduling.lanes import EntryState


def test_an_adopted_job_takes_its_backends_slot() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.adopt(job(ALICE), "b1", 0.0)
    waiting = job(BOB)
    s.submit(waiting, 0.0)
    assert s.select(0.0) == []
    assert s.backends["b1"].in_flight == 1


def test_completing_an_adopted_job_frees_its_slot_for_the_queue() -> None:
    s = scheduler(plain(max_in_flight=1))
    adopted = job(ALICE)
    s.adopt(adopted, "b1", 0.0)
    waiting = job(BOB)
    s.submit(waiting, 0.0)
    s.complete(adopted.id, 1.0)
    assert ids(s.select(0.0)) == [waiting.id]


def test_an_adopted_job_is_charged_to_its_principal() -> None:
    s = scheduler(plain(max_in_flight=8))
    s.adopt(job(ALICE, estimated_cost=5.0), "b1", 0.0)
    bob_first, bob_second, alice_next = job(BOB), job(BOB), job(ALICE)
    for queued in (bob_first, bob_second, alice_next):
        s.submit(queued, 0.0)
    assert ids(s.select(0.0)) == [bob_first.id, bob_second.id, alice_next.id]


def test_a_paused_job_adopted_from_an_old_leader_goes_first_in_its_lane() -> None:
    s = scheduler(plain(max_in_flight=1), within_principal="sjf")
    longer = job(ALICE, estimated_output_tokens=500)
    shorter = job(ALICE, estimated_output_tokens=10)
    s.submit(shorter, 0.0)
    s.adopt_paused(longer, 0.0)
    assert ids(s.select(0.0)) == [longer.id]


def test_a_paused_job_adopted_from_an_old_leader_never_expires() -> None:
    s = scheduler(plain(max_in_flight=0))
    paused = job(ALICE, deadline=5.0)
    s.adopt_paused(paused, 0.0)
    assert s.dispatch_once(10.0).expired == []
    assert s.entries[paused.id].state is EntryState.QUEUED


def test_a_queued_job_taken_over_counts_its_patience_from_the_take_over() -> None:
    s = scheduler(plain(max_in_flight=0))
    s.submit(j := job(patience=5.0), 100.0 - 30.0)  # it had waited 30 s under the last leader
    s.taken_over(j.id, 100.0)
    assert s.expire(104.9) == []
    assert s.expire(105.0) == [j]
