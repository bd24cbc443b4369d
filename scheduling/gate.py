"""The gate: may this backend take one more job of this band, now? One named rule."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.backend_state import BackendState
from scheduling.config import GateThresholds


@dataclass(frozen=True, slots=True)
class GateDecision:
    open: bool
    reason: str


OPEN = GateDecision(True, "open")


def gate_open(
    state: BackendState | None,
    thresholds: GateThresholds | None,
    now: float,
    stale_after: float,
) -> GateDecision:
    """Whether `state` may receive one more job of a band with `thresholds`.

    Closed when, checked in this order:
      1. the backend is unknown or disabled ("disabled"), or a request found it unreachable
         within the last `UNREACHABLE_SECONDS` and no healthy scrape has been seen since
         ("unreachable");
      2. its in-flight count is at `max_in_flight` ("max_in_flight");
    and, only for a backend with metrics:
      3. no metrics were scraped yet ("no_metrics"), or the last scrape says unhealthy
         ("unhealthy"), or it is older than `stale_after` ("stale");
    and, only when the band has thresholds:
      4. the backend's queue is not below max(max_waiting, 1) ("waiting"): with a known capacity,
         the queue that one more dispatch would leave (exact: our in-flight plus others' load
         beyond the capacity), so 0 or 1 means "never make it queue"; without, the estimate
         max(0, scraped waiting + dispatched since scrape - completed since scrape). A backend
         with preemption and a known capacity is never made to queue (the threshold is 1,
         whatever the band's): a job that waits, waits here, where it can preempt, not in the
         engine's queue behind work it could have preempted;
      5. the scraped time per output token is not below `max_tpot_seconds` ("tpot");
      6. the scraped KV-cache usage is not below `max_kv_cache_usage` ("kv_cache").
    A metric the backend does not expose (None) does not close the gate.
    """
    if state is None or not state.config.enabled:
        return GateDecision(False, "disabled")
    if state.unreachable_until is not None and now < state.unreachable_until:
        return GateDecision(False, "unreachable")
    if state.in_flight >= state.config.max_in_flight:
        return GateDecision(False, "max_in_flight")
    health = _health(state, now, stale_after)
    if not health.open or not state.config.has_metrics or thresholds is None:
        return health
    m = state.metrics
    assert m is not None  # a healthy backend with metrics has been scraped
    if thresholds.max_waiting is not None and state.queue_for_gate() >= _waiting_limit(
        state, thresholds.max_waiting
    ):
        return GateDecision(False, "waiting")
    if (
        thresholds.max_tpot_seconds is not None
        and m.tpot_seconds is not None
        and m.tpot_seconds >= thresholds.max_tpot_seconds
    ):
        return GateDecision(False, "tpot")
    if (
        thresholds.max_kv_cache_usage is not None
        and m.kv_cache_usage is not None
        and m.kv_cache_usage >= thresholds.max_kv_cache_usage
    ):
        return GateDecision(False, "kv_cache")
    return OPEN


def _waiting_limit(state: BackendState, max_waiting: int) -> int:
    """Condition 4's threshold."""
    if state.config.preemption and state.capacity is not None:
        return 1
    return max(max_waiting, 1)


def _health(state: BackendState, now: float, stale_after: float) -> GateDecision:
    """Conditions 3 of `gate_open`: metrics present, healthy and fresh (when it has metrics)."""
    if not state.config.has_metrics:
        return OPEN
    m = state.metrics
    if m is None or m.scraped_at is None:
        return GateDecision(False, "no_metrics")
    if not m.healthy:
        return GateDecision(False, "unhealthy")
    if now - m.scraped_at > stale_after:
        return GateDecision(False, "stale")
    return OPEN


def is_usable(state: BackendState | None, now: float, stale_after: float) -> bool:
    """Could this backend serve at all now, busy or not: enabled, and with fresh healthy
    metrics where it has metrics. What `/readyz` asks."""
    return state is not None and state.config.enabled and _health(state, now, stale_after).open


def is_saturated(
    state: BackendState | None, thresholds: GateThresholds | None, now: float, stale_after: float
) -> bool:
    """The inverse of `gate_open`, under the name the inference-extension detector uses."""
    return not gate_open(state, thresholds, now, stale_after).open
