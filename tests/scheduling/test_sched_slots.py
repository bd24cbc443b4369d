"""Exact slot accounting: with the engine's capacity known, the gateway knows when the backend
would queue, from its own in-flight count the moment it dispatches or releases, not from a
lagging scrape; the scrape only adds the traffic that did not come through the gateway."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, fresh, ids, job, scheduler

from scheduling import BackendConfig, GateThresholds

EMPTY_QUEUE = {1: GateThresholds(max_waiting=1, max_tpot_seconds=None)}


def slots(capacity: int | None = 2) -> BackendConfig:
    return BackendConfig("b1", frozenset({"m"}), has_metrics=True, capacity=capacity)


def test_it_fills_the_free_slots_and_no_more():
    s = scheduler(slots(2), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=0))
    for _ in range(4):
        s.submit(job(ALICE), 0.0)
    assert len(s.select(0.0)) == 2
    assert s.select(0.0) == []


def test_a_release_opens_a_slot_at_once_without_waiting_for_a_scrape():
    s = scheduler(slots(2), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=0))
    first, second, third = job(ALICE), job(BOB), job(ALICE)
    for j in (first, second, third):
        s.submit(j, 0.0)
    s.select(0.0)
    s.complete(first.id)
    assert ids(s.select(0.0)) == [third.id]


def test_traffic_that_did_not_come_through_the_gateway_takes_slots_too():
    s = scheduler(slots(3), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=2))  # someone else's two requests
    s.submit(job(ALICE), 0.0)
    s.submit(job(ALICE), 0.0)
    assert len(s.select(0.0)) == 1


def test_its_own_requests_in_a_scrape_are_not_counted_twice():
    s = scheduler(slots(2), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=0))
    s.submit(a := job(ALICE), 0.0)
    s.select(0.0)
    s.update_metrics("b1", fresh(waiting=0, running=1))  # that is our request, running
    s.submit(job(BOB), 0.0)
    assert len(s.select(0.0)) == 1
    s.complete(a.id)
    assert s.backends["b1"].estimated_waiting() == 0


def test_the_capacity_is_learned_as_the_most_running_seen_while_requests_waited():
    s = scheduler(slots(None), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=5))
    assert s.backends["b1"].capacity is None
    s.update_metrics("b1", fresh(waiting=2, running=16))
    s.update_metrics("b1", fresh(waiting=1, running=12))
    assert s.backends["b1"].capacity == 16


def test_a_configured_capacity_wins_over_what_is_learned():
    s = scheduler(slots(8), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=3, running=16))
    assert s.backends["b1"].capacity == 8


def test_a_capacity_the_server_reports_counts_when_none_is_configured():
    s = scheduler(slots(None), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=0, capacity=2))
    for _ in range(3):
        s.submit(job(ALICE), 0.0)
    assert len(s.select(0.0)) == 2


def test_a_request_the_engine_still_counts_for_one_scrape_after_its_release_takes_no_slot():
    s = scheduler(slots(2), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=0))
    s.submit(a := job(ALICE), 0.0)
    s.select(0.0)
    s.complete(a.id)
    s.update_metrics("b1", fresh(waiting=0, running=1))  # the engine frees it at its next step
    for _ in range(2):
        s.submit(job(BOB), 0.0)
    assert len(s.select(0.0)) == 2


def test_traffic_from_elsewhere_seen_by_two_scrapes_in_a_row_takes_slots():
    s = scheduler(slots(3), gates=EMPTY_QUEUE)
    s.update_metrics("b1", fresh(waiting=0, running=0))
    s.update_metrics("b1", fresh(waiting=0, running=2))
    s.update_metrics("b1", fresh(waiting=0, running=2))
    for _ in range(2):
        s.submit(job(ALICE), 0.0)
    assert len(s.select(0.0)) == 1
