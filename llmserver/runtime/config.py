"""Read the operator's configuration (backends, routes, tiers) from the database.

The result is plain data: the scheduler's configs plus the route table the API resolves model
names with. It is reloaded when the admin changes anything, and periodically as a safety net for
changes made from another process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.utils import timezone

from llmserver.conf import GatewaySettings
from scheduling import BackendConfig, GateThresholds, SchedulerConfig
from tenants.models import Backend, CostRule, ModelRoute, Tier
from tenants.models.rules import rule_in_force


@dataclass(frozen=True, slots=True)
class BackendSpec:
    name: str
    kind: str
    base_url: str
    metrics_url: str
    api_key: str
    max_in_flight: int
    capacity: int | None
    priority_scheduling: bool
    preemption: bool = False


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    backends: dict[str, BackendSpec]
    # public model name -> {backend name: upstream model name}
    routes: dict[str, dict[str, str]]
    scheduler: SchedulerConfig
    scheduler_backends: tuple[BackendConfig, ...]
    # public model name -> (input, output) price per million tokens in force at load time; the
    # `money` cost unit charges these (reloaded every few seconds, so effective dates take hold)
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)


def _strictest(values: list[float | int | None]) -> float | int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def band_gates() -> dict[int, GateThresholds]:
    """One gate per band; where several tiers share a band, the strictest threshold wins."""
    by_band: dict[int, list[Tier]] = {}
    for tier in Tier.objects.all():
        by_band.setdefault(tier.band, []).append(tier)
    gates = {}
    for band, tiers in by_band.items():
        tpot_ms = _strictest([t.gate_max_tpot_ms for t in tiers])
        waiting = _strictest([t.gate_max_waiting for t in tiers])
        gates[band] = GateThresholds(
            max_waiting=int(waiting) if waiting is not None else None,
            max_tpot_seconds=tpot_ms / 1000.0 if tpot_ms is not None else None,
            max_kv_cache_usage=_strictest([t.gate_max_kv_cache_usage for t in tiers]),
        )
    return gates


def load_gateway_config(conf: GatewaySettings) -> GatewayConfig:
    backends = {
        b.name: BackendSpec(
            name=b.name,
            kind=b.kind,
            base_url=b.base_url.rstrip("/"),
            metrics_url=b.effective_metrics_url,
            api_key=b.api_key,
            max_in_flight=b.max_in_flight,
            capacity=b.capacity,
            priority_scheduling=b.priority_scheduling,
            preemption=b.preemption,
        )
        for b in Backend.objects.filter(enabled=True)
    }
    routes: dict[str, dict[str, str]] = {}
    for route in ModelRoute.objects.filter(enabled=True, backend__enabled=True).select_related(
        "backend"
    ):
        routes.setdefault(route.public_name, {})[route.backend.name] = (
            route.effective_upstream_model
        )
    scheduler_backends = tuple(
        BackendConfig(
            name=spec.name,
            models=frozenset(m for m, pool in routes.items() if spec.name in pool),
            max_in_flight=spec.max_in_flight,
            capacity=spec.capacity,
            has_metrics=bool(spec.metrics_url),
            preemption=spec.preemption,
        )
        for spec in backends.values()
    )
    scheduler = SchedulerConfig(
        gates=band_gates(),
        stale_after=conf.stale_after,
        within_principal=conf.within_principal,
        aging_seconds=conf.aging_seconds,
    )
    return GatewayConfig(backends, routes, scheduler, scheduler_backends, prices_in_force(routes))


def prices_in_force(models: Iterable[str]) -> dict[str, tuple[float, float]]:
    now = timezone.now()
    rules = list(CostRule.objects.filter(model__in=[*models, "*"], effective_from__lte=now))
    prices = {}
    for model in models:
        rule = rule_in_force(rules, model, now)
        if rule is not None:
            prices[model] = (float(rule.input_per_million), float(rule.output_per_million))
    return prices
