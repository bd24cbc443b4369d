"""The scheduler's state as typed, immutable views, for the dashboard, `/metrics` and `/readyz`.

Turned into JSON only at those edges (`dataclasses.asdict`); inside the gateway the fields are
read as attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduling.backend_state import BackendMetrics
from scheduling.config import GateThresholds
from scheduling.core import Scheduler
from scheduling.gate import GateDecision, gate_open, is_usable
from scheduling.jobs import BANDS
from scheduling.lanes import Lane


@dataclass(frozen=True, slots=True)
class QueueView:
    """One non-empty or busy lane: a principal's jobs for one model in one band.

    `waiting_reason` says why its queued jobs are not running yet ("" when none are queued);
    see `waiting_reason`."""

    model: str
    band: int
    tenant: str
    user: str
    depth: int
    in_flight: int
    service: float
    waiting_reason: str


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
    # Learned costs (`scheduling.engine_costs`); None until its scrapes showed such work.
    step_seconds: float | None = None
    prefill_seconds_per_token: float | None = None


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    at: float
    queues: tuple[QueueView, ...]
    backends: tuple[BackendView, ...]
    totals: Mapping[str, int]
    # Preemption's decisions by reason (`scheduling.preemption`).
    preemption: Mapping[str, int] = field(default_factory=dict)

    def same_state(self, other: SchedulerSnapshot | None) -> bool:
        """Equal but for the time it was taken: nothing to publish again."""
        return other is not None and (
            self.queues,
            self.backends,
            self.totals,
            self.preemption,
        ) == (other.queues, other.backends, other.totals, other.preemption)


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
            waiting_reason(scheduler, lane, now),
        )
        for lane in scheduler.active_lanes()
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
            step_seconds=state.costs.step_seconds,
            prefill_seconds_per_token=state.costs.prefill_seconds_per_token,
        )
        for state in scheduler.backends.values()
    )
    totals = {
        "queued": scheduler.queued_jobs,
        "in_flight": sum(p.in_flight for p in scheduler.principals.values()),
        **scheduler.totals,
    }
    return SchedulerSnapshot(now, queues, backends, totals, dict(scheduler.decisions))


def waiting_reason(scheduler: Scheduler, lane: Lane, now: float) -> str:
    """Why `lane`'s next job is still queued, in an operator's words, first cause first.

    The checks mirror `Scheduler._dispatch_one`: the principal at its concurrency cap; every
    gate of the model's pool closed for this band (each backend with the threshold that closed
    it); jobs of a higher band of the same model queued ahead; else it waits its fair-share
    turn. A job moved down a band for being over budget says so too.
    """
    head = lane.queue.peek() if lane.live else None
    if head is None:
        return ""
    reasons: list[str] = []
    principal = scheduler.principals.get(lane.principal)
    cap = head.job.policy.max_concurrent
    if principal is not None and principal.in_flight >= cap:
        reasons.append(f"per-user concurrency cap ({principal.in_flight} of {cap} in flight)")
    config = scheduler.config
    thresholds = config.gates.get(lane.band)
    pool = [s for s in scheduler.backends.values() if lane.model in s.config.models]
    decisions = [(s.name, gate_open(s, thresholds, now, config.stale_after)) for s in pool]
    if not any(d.open for _, d in decisions):
        closed = ", ".join(f"{name} {_threshold(d, thresholds)}" for name, d in decisions)
        reasons.append(f"gate closed: {closed or 'no backend serves this model'}")
    ahead = sum(
        other.live
        for other in scheduler.lanes.values()
        if other.model == lane.model and other.band < lane.band and other.live
    )
    if ahead:
        reasons.append(f"behind a higher band ({ahead} queued)")
    if not reasons:
        reasons.append("waiting its fair-share turn")
    if head.job.demoted:
        reasons.append("demoted to this band: over budget")
    return "; ".join(reasons)


def _threshold(decision: GateDecision, thresholds: GateThresholds | None) -> str:
    """The gate's reason with the limit it hit, e.g. "tpot >= 0.15 s"."""
    if thresholds is not None:
        if decision.reason == "waiting":
            return f"waiting >= {max(thresholds.max_waiting or 1, 1)}"
        if decision.reason == "tpot":
            return f"tpot >= {thresholds.max_tpot_seconds} s"
        if decision.reason == "kv_cache":
            return f"kv_cache >= {thresholds.max_kv_cache_usage}"
    return decision.reason
