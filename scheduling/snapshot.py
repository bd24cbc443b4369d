"""The scheduler's state as a JSON-serialisable dict, for the dashboard and `/metrics`."""

from __future__ import annotations

from typing import Any

from scheduling.core import Scheduler
from scheduling.gate import gate_open

DEFAULT_BANDS = (0, 1, 2)


def build_snapshot(scheduler: Scheduler, now: float) -> dict[str, Any]:
    """Queues (non-empty or busy lanes), backends with their gates per band, and totals."""
    config = scheduler.config
    queues = [
        {
            "model": lane.model,
            "band": lane.band,
            "tenant": lane.principal.tenant,
            "user": lane.principal.user,
            "depth": lane.live,
            "in_flight": lane.in_flight,
            "service": lane.service,
        }
        for lane in scheduler.lanes.values()
        if lane.live or lane.in_flight
    ]
    bands = sorted(set(config.gates) | set(DEFAULT_BANDS))
    backends = []
    for state in scheduler.backends.values():
        m = state.metrics
        gates = []
        for band in bands:
            decision = gate_open(state, config.gates.get(band), now, config.stale_after)
            gates.append({"band": band, "open": decision.open, "reason": decision.reason})
        backends.append(
            {
                "name": state.name,
                "models": sorted(state.config.models),
                "in_flight": state.in_flight,
                "max_in_flight": state.config.max_in_flight,
                "has_metrics": state.config.has_metrics,
                "enabled": state.config.enabled,
                "stale": state.is_stale(now, config.stale_after),
                "metrics": None
                if m is None
                else {
                    "waiting": m.waiting,
                    "running": m.running,
                    "kv_cache_usage": m.kv_cache_usage,
                    "tpot_seconds": m.tpot_seconds,
                    "ttft_seconds": m.ttft_seconds,
                    "healthy": m.healthy,
                    "scraped_at": m.scraped_at,
                },
                "gates": gates,
            }
        )
    totals: dict[str, int] = {
        "queued": sum(p.queued for p in scheduler.principals.values()),
        "in_flight": sum(p.in_flight for p in scheduler.principals.values()),
        **scheduler.totals,
    }
    return {"at": now, "queues": queues, "backends": backends, "totals": totals}
