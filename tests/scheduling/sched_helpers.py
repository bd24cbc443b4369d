"""Shared builders for the scheduler tests: a cast of principals, backends and fresh metrics."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from scheduling import (
    BackendConfig,
    BackendMetrics,
    GateThresholds,
    Job,
    Principal,
    Scheduler,
    SchedulerConfig,
    TierPolicy,
)

ALICE = Principal("acme", "alice")
BOB = Principal("acme", "bob")
CHARLIE = Principal("globex", "charlie")

_ids = itertools.count()


POLICY_FIELDS = {f.name for f in fields(TierPolicy)}


def take_policy(kw: dict[str, Any]) -> TierPolicy:
    """The tier policy given field by field among a job's keywords (`weight=2.0`), taken out."""
    return TierPolicy(**{k: kw.pop(k) for k in POLICY_FIELDS & kw.keys()})


def job(principal: Principal = ALICE, band: int = 1, model: str = "m", **kw: Any) -> Job:
    policy = take_policy(kw)
    return Job(
        id=f"j{next(_ids)}", principal=principal, model=model, band=band, policy=policy, **kw
    )


def plain(
    name: str = "b1", max_in_flight: int = 64, models: Iterable[str] = ("m",)
) -> BackendConfig:
    """A backend without metrics: gated by max_in_flight only."""
    return BackendConfig(name, frozenset(models), max_in_flight=max_in_flight, has_metrics=False)


def metered(
    name: str = "b1", max_in_flight: int = 64, models: Iterable[str] = ("m",)
) -> BackendConfig:
    return BackendConfig(name, frozenset(models), max_in_flight=max_in_flight, has_metrics=True)


def fresh(
    now: float = 0.0, waiting: float = 0, tpot: float | None = 0.05, **kw: Any
) -> BackendMetrics:
    return BackendMetrics(waiting=waiting, tpot_seconds=tpot, healthy=True, scraped_at=now, **kw)


def scheduler(*backends: BackendConfig, **config: Any) -> Scheduler:
    return Scheduler(SchedulerConfig(**config), backends or (plain(),))


def ids(dispatches: Iterable[Any]) -> list[str]:
    return [d.job.id for d in dispatches]


# Every band's gate closed as soon as the backend's slots are taken (no time-per-token ceiling).
FULL_AT_CAPACITY = {
    band: GateThresholds(max_waiting=1, max_tpot_seconds=None) for band in (0, 1, 2)
}


def preempting(
    *names: str,
    capacity: int,
    preemption: bool = True,
    **config: Any,
) -> Scheduler:
    """Backends of `capacity` slots each with metrics (scraped idle) and preemption, every gate
    closing at capacity."""
    backends = [
        BackendConfig(
            name,
            frozenset({"m"}),
            has_metrics=True,
            capacity=capacity,
            preemption=preemption,
        )
        for name in names
    ]
    s = scheduler(*backends, gates=FULL_AT_CAPACITY, **config)
    for name in names:
        s.update_metrics(name, fresh(waiting=0, running=0))
    return s


def learning(*names: str) -> Scheduler:
    """Backends with metrics and preemption whose capacity is not set, scraped idle: the
    interactive band's gate lets each queue up to three until the capacity is learned."""
    backends = [
        BackendConfig(name, frozenset({"m"}), has_metrics=True, preemption=True) for name in names
    ]
    s = scheduler(*backends, gates=FULL_AT_CAPACITY | {1: GateThresholds(max_waiting=3)})
    for name in names:
        s.update_metrics(name, fresh(now=0.0, waiting=0, running=0))
    return s


def sent_before_learning(s: Scheduler, n: int) -> tuple[list[Job], list[str]]:
    """ALICE's `n` preemptible jobs sent to `learning`'s one backend as its gate allows: three
    at 0.0, then the rest, up to three, after a scrape at 0.1 sees those three running. Returns
    the jobs and the ids sent at 0.1."""
    jobs = [job(ALICE, preemptible=True, max_concurrent=64) for _ in range(n)]
    for j in jobs:
        s.submit(j, 0.0)
    s.select(0.0)
    s.update_metrics("b1", fresh(now=0.1, waiting=0, running=3))
    return jobs, ids(s.select(0.1))


def learn(s: Scheduler, running: int, waiting: int) -> None:
    """Two scrapes of every backend, full with work waiting: its capacity is learned."""
    for now in (0.2, 0.4):
        for name in s.backends:
            s.update_metrics(name, fresh(now=now, waiting=waiting, running=running))
