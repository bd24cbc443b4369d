"""Read the operator's configuration (backends, routes, tiers) from the database.

The result is plain data: the scheduler's configs plus the route table the API resolves model
names with. It is reloaded when the admin changes anything, and periodically as a safety net for
changes made from another process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.utils import timezone

from llmserver.backends.spec import BackendSpec
from llmserver.conf import GatewaySettings
from llmserver.runtime.pricing import Pricing
from scheduling import BackendConfig, CostPolicy, SchedulerConfig, TokenWeights
from tenants.backend_kinds import GENERATION, profile
from tenants.endpoints import Endpoint
from tenants.models import Backend, CostRule, FairSharePolicy, ModelRoute
from tenants.models.rules import rule_in_force
from tenants.models.tiers import band_gates


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
    # tenant id -> the same, for tenants with a price of their own in force
    tenant_prices: dict[int, dict[str, tuple[float, float]]] = field(default_factory=dict)
    # the cost unit and token weights of fair share, as the admin's fair-share policy says
    cost: CostPolicy = field(default_factory=CostPolicy)
    # public model name -> the backends (with their model name) whose /tokenize can key the
    # model's prompts, in order: those of its pool publishing KV cache events (blocks in tokens)
    tokenize_via: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    # public model name -> backend -> the endpoints it serves the model on
    served: dict[str, dict[str, frozenset[Endpoint]]] = field(default_factory=dict)

    def pool(self, model: str, endpoint: Endpoint) -> dict[str, str] | None:
        """The backends (with their model name) serving `model` on `endpoint`; None where no
        route serves the model at all."""
        routes = self.routes.get(model)
        if not routes:
            return None
        served = self.served.get(model, {})
        return {b: m for b, m in routes.items() if endpoint in served.get(b, GENERATION)}

    def pricing(self, tenant_id: int | None = None) -> Pricing:
        """The cost policy and prices in force for `tenant_id` (its own prices where it has
        them, else the list prices)."""
        own = self.tenant_prices.get(tenant_id) if tenant_id is not None else None
        return Pricing(self.cost, own or self.prices)


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
            kv_events_endpoint=b.kv_events_endpoint,
            kv_events_bind=b.kv_events_bind,
            first_byte_timeout=b.first_byte_timeout_seconds,
        )
        for b in Backend.objects.filter(enabled=True)
    }
    routes: dict[str, dict[str, str]] = {}
    served: dict[str, dict[str, frozenset[Endpoint]]] = {}
    for route in ModelRoute.objects.filter(enabled=True, backend__enabled=True).select_related(
        "backend"
    ):
        name, backend = route.public_name, route.backend
        routes.setdefault(name, {})[backend.name] = route.effective_upstream_model
        endpoints = route.declared_endpoints() or profile(backend.kind).endpoints
        served.setdefault(name, {})[backend.name] = endpoints
    own = set(
        CostRule.objects.filter(tenant__isnull=False, effective_from__lte=timezone.now())
        .values_list("tenant_id", flat=True)
        .distinct()
    )
    return GatewayConfig(
        backends,
        routes,
        scheduler_config(conf),
        scheduler_backends(backends, routes),
        prices_in_force(routes),
        {tenant: prices_in_force(routes, tenant) for tenant in own},
        cost_policy(conf),
        tokenize_via(backends, routes),
        served,
    )


def scheduler_config(conf: GatewaySettings) -> SchedulerConfig:
    """The scheduler's policy: the process settings, and one gate per band from the tiers."""
    return SchedulerConfig(
        gates=band_gates(),
        stale_after=conf.stale_after,
        within_principal=conf.within_principal,
        aging_seconds=conf.aging_seconds,
        affinity_slack=conf.affinity_slack,
        prefix_index_blocks=conf.prefix_index_blocks,
        batch_slack=conf.batch_slack,
        batch_min_blocks=conf.batch_min_blocks,
    )


def scheduler_backends(
    backends: dict[str, BackendSpec], routes: dict[str, dict[str, str]]
) -> tuple[BackendConfig, ...]:
    return tuple(
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


def tokenize_via(
    backends: dict[str, BackendSpec], routes: dict[str, dict[str, str]]
) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per model whose pool has backends publishing KV cache events: those backends by name,
    with their model name. Every backend of a pool serves the same model, so any one's
    tokenizer keys the prompt for all of them."""
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for model, pool in routes.items():
        via = tuple((n, pool[n]) for n in sorted(pool) if backends[n].kv_events_endpoint)
        if via:
            out[model] = via
    return out


def cost_policy(conf: GatewaySettings) -> CostPolicy:
    """The admin's fair-share policy; on the first load it is created from the environment's
    SCHEDULER_COST_UNIT and SCHEDULER_OUTPUT_TOKEN_WEIGHT, so an operator sees what is in force
    and changes it there."""
    row, _ = FairSharePolicy.objects.get_or_create(
        pk=1, defaults={"unit": conf.cost_unit.value, "output_weight": conf.output_token_weight}
    )
    per_model = {
        w.model: TokenWeights(w.input_weight, w.output_weight) for w in row.model_weights.all()
    }
    return row.as_policy(per_model)


def prices_in_force(
    models: Iterable[str], tenant_id: int | None = None
) -> dict[str, tuple[float, float]]:
    """Each model's (input, output) price per million tokens now, for `tenant_id` if given."""
    now = timezone.now()
    rules = list(CostRule.objects.filter(model__in=[*models, "*"], effective_from__lte=now))
    prices = {}
    for model in models:
        rule = rule_in_force(rules, model, now, tenant_id)
        if rule is not None:
            prices[model] = (float(rule.input_per_million), float(rule.output_per_million))
    return prices
