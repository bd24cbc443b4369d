"""The scheduler's state as typed, immutable views, for the dashboard, `/metrics` and `/readyz`.

Turned into JSON only at those edges (`dataclasses.asdict`); inside the gateway the fields are
read as attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduling.backend_state import BackendMetrics
from scheduling.core import Scheduler
from scheduling.gate import gate_open, is_usable
from scheduling.jobs import BANDS


@dataclass(frozen=True, slots=True)
class QueueView:
    """One non-empty or busy lane: a principal's jobs for one model in one band."""

    model: str
    band: int
    tenant: str
    user: str
    depth: int
    in_flight: int
    service: float


@dataclass(frozen=True, slots=True)
class GateView:
    band: int
    open: bool
    reason: str


@dataclass(frozen=True, slots=True)
class BackendView:
    name: str
    models: tuple[str, ...]
    in_flight: int
    max_in_flight: int
    capacity: int | None
    has_metrics: bool
    enabled: bool
    stale: bool
    usable: bool
    metrics: BackendMetrics | None
    gates: tuple[GateView, ...]


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    at: float
    queues: tuple[QueueView, ...]
    backends: tuple[BackendView, ...]
    totals: Mapping[str, int]

    def same_state(self, other: SchedulerSnapshot | None) -> bool:
        """Equal but for the time it was taken: nothing to publish again."""
        return other is not None and (self.queues, self.backends, self.totals) == (
            other.queues,
            other.backends,
            other.totals,
        )


def build_snapshot(scheduler: Scheduler, now: float) -> SchedulerSnapshot:
    """Queues (non-empty or busy lanes), backends with their gates per band, and totals."""
    config = scheduler.config
    queues = tuple(
        QueueView(
            lane.model,
            lane.band,
            lane.principal.tenant,
            lane.principal.user,
            lane.live,
            lane.in_flight,
            lane.service,
        )
        for lane in scheduler.lanes.values()
        if lane.live or lane.in_flight
    )
    bands = sorted(set(config.gates) | set(BANDS))
    backends = tuple(
        BackendView(
            name=state.name,
            models=tuple(sorted(state.config.models)),
            in_flight=state.in_flight,
            max_in_flight=state.config.max_in_flight,
            capacity=state.capacity,
            has_metrics=state.config.has_metrics,
            enabled=state.config.enabled,
            stale=state.is_stale(now, config.stale_after),
            usable=is_usable(state, now, config.stale_after),
            metrics=state.metrics,
            gates=tuple(
                GateView(band, d.open, d.reason)
                for band in bands
                for d in [gate_open(state, config.gates.get(band), now, config.stale_after)]
            ),
        )
        for state in scheduler.backends.values()
    )
    totals = {
        "queued": sum(p.queued for p in scheduler.principals.values()),
        "in_flight": sum(p.in_flight for p in scheduler.principals.values()),
        **scheduler.totals,
    }
    return SchedulerSnapshot(now, queues, backends, totals)
