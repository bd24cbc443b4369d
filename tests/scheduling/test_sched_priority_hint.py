"""The coarse priority handed to a backend that schedules by priority: two steps per band, the
second for a principal over its fair share of the backend's slots."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, job, scheduler

from scheduling import BackendConfig


def backend(capacity: int = 4) -> BackendConfig:
    return BackendConfig("b1", frozenset({"m"}), has_metrics=False, capacity=capacity)


def test_a_principal_alone_is_within_its_share_of_the_slots():
    s = scheduler(backend(4))
    for _ in range(4):
        s.submit(job(ALICE, band=0, max_concurrent=10), 0.0)
    assert [d.priority for d in s.select(0.0)] == [0, 0, 0, 0]


def test_a_flood_is_marked_over_its_share_once_another_principal_shares_the_band():
    s = scheduler(backend(4))
    s.submit(job(BOB, band=0), 0.0)
    for _ in range(3):
        s.submit(job(ALICE, band=0, max_concurrent=10), 0.0)
    by_user = {}
    for d in s.select(0.0):
        by_user.setdefault(d.job.principal.user, []).append(d.priority)
    assert by_user["bob"] == [0]
    assert by_user["alice"][-1] == 1  # her third request: beyond 4 slots / 2 principals


def test_bands_stay_apart_in_the_priority():
    s = scheduler(backend(4))
    s.submit(job(ALICE, band=2), 0.0)
    s.submit(job(BOB, band=1), 0.0)
    assert sorted(d.priority for d in s.select(0.0)) == [2, 4]
