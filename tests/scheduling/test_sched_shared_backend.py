"""Pools that share a backend compete by account: a principal on an expensive model uses its
share of the backend faster than one on a cheap model; pools on separate backends do not hold
each other back."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, job, plain, scheduler
from test_sched_fairness import drain_one_by_one

from scheduling import Scheduler


def shared(max_in_flight: int = 1) -> Scheduler:
    """One backend serving two models: two pools, one set of slots."""
    return scheduler(plain(max_in_flight=max_in_flight, models=("cheap", "dear")))


def test_two_models_on_one_backend_share_it_by_cost_not_by_turns() -> None:
    s = shared()
    for _ in range(20):
        s.submit(job(ALICE, model="dear", estimated_cost=4.0), 0.0)
        s.submit(job(BOB, model="cheap", estimated_cost=1.0), 0.0)
    order = drain_one_by_one(s, 20)
    assert order.count("bob") == 16


def test_a_principal_returning_to_an_idle_model_gets_no_credit_over_the_other_model() -> None:
    s = shared()
    for _ in range(30):
        s.submit(job(ALICE, model="dear"), 0.0)
    drain_one_by_one(s, 10)
    for _ in range(10):
        s.submit(job(BOB, model="cheap"), 0.0)
    assert drain_one_by_one(s, 10).count("bob") == 5


def test_models_on_separate_backends_each_fill_their_own_backend() -> None:
    s = scheduler(
        plain("b1", max_in_flight=2, models=("cheap",)),
        plain("b2", max_in_flight=2, models=("dear",)),
    )
    for _ in range(5):
        s.submit(job(ALICE, model="dear", estimated_cost=100.0), 0.0)
        s.submit(job(BOB, model="cheap", estimated_cost=1.0), 0.0)
    dispatched = s.select(0.0)
    assert sorted(d.backend for d in dispatched) == ["b1", "b1", "b2", "b2"]
