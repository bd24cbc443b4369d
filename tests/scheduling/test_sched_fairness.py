"""Fair share inside a band: round robin, weights, real-cost correction, idle-return lifting."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, CHARLIE, ids, job, plain, scheduler

from scheduling import Scheduler


def drain_one_by_one(s: Scheduler, n: int) -> list[str]:
    """Dispatch n jobs through a single slot, completing each at its estimate."""
    order: list[str] = []
    for _ in range(n):
        (d,) = s.select(0.0)
        order.append(d.job.principal.user)
        s.complete(d.job.id, d.job.estimated_cost)
    return order


def test_it_round_robins_equal_principals_with_request_cost() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(4):
        s.submit(job(ALICE), 0.0)
    for _ in range(2):
        s.submit(job(BOB), 0.0)
    assert drain_one_by_one(s, 6) == ["alice", "bob", "alice", "bob", "alice", "alice"]


def test_it_serves_a_light_user_before_a_power_users_backlog() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(50):
        s.submit(job(ALICE), 0.0)
    drain_one_by_one(s, 3)
    s.submit(job(BOB), 0.0)
    assert drain_one_by_one(s, 2).count("bob") == 1


def test_it_honours_weights_in_proportion() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(60):
        s.submit(job(ALICE, weight=3.0), 0.0)
        s.submit(job(BOB, weight=1.0), 0.0)
    order = drain_one_by_one(s, 40)
    assert order.count("alice") == 30
    assert order.count("bob") == 10


def test_it_charges_estimated_cost_not_request_count() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(10):
        s.submit(job(ALICE, estimated_cost=4.0), 0.0)
        s.submit(job(BOB, estimated_cost=1.0), 0.0)
    order = drain_one_by_one(s, 10)
    assert order.count("bob") == 8


def test_it_corrects_the_account_to_the_real_cost_on_completion() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(j := job(ALICE, estimated_cost=1.0, weight=2.0), 0.0)
    s.select(0.0)
    s.complete(j.id, real_cost=9.0)
    assert s.lanes[("m", 1, ALICE)].service == 4.5


def test_it_lifts_a_principal_returning_from_idle_to_the_least_active_account() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(20):
        s.submit(job(ALICE), 0.0)
        s.submit(job(BOB), 0.0)
    drain_one_by_one(s, 20)
    s.submit(job(CHARLIE), 0.0)
    assert s.lanes[("m", 1, CHARLIE)].service == min(
        s.lanes[("m", 1, ALICE)].service, s.lanes[("m", 1, BOB)].service
    )


def test_it_gives_a_returning_principal_no_banked_credit() -> None:
    s = scheduler(plain(max_in_flight=1))
    for _ in range(30):
        s.submit(job(ALICE), 0.0)
    drain_one_by_one(s, 10)
    for _ in range(10):
        s.submit(job(BOB), 0.0)
    order = drain_one_by_one(s, 10)
    assert order.count("bob") == 5


def test_it_keeps_fairness_separate_per_band() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(ALICE, band=2), 0.0)
    assert s.lanes[("m", 2, ALICE)].service == 0.0
    assert ("m", 1, ALICE) not in s.lanes


def test_it_orders_a_principals_jobs_fifo_by_default() -> None:
    s = scheduler(plain(max_in_flight=10))
    jobs = [job(ALICE, estimated_output_tokens=n) for n in (30, 10, 20)]
    for j in jobs:
        s.submit(j, 0.0)
    assert ids(s.select(0.0)) == [j.id for j in jobs]


def test_it_orders_a_principals_jobs_shortest_first_with_sjf() -> None:
    s = scheduler(plain(max_in_flight=10), within_principal="sjf")
    jobs = [job(ALICE, estimated_output_tokens=n) for n in (30, 10, 20)]
    for j in jobs:
        s.submit(j, 0.0)
    assert ids(s.select(0.0)) == [jobs[1].id, jobs[2].id, jobs[0].id]
