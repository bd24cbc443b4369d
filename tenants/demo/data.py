"""The demo's tiers, tenant, price and simulator route, created or updated in place."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from tenants.models import AppType, Backend, Band, CostRule, ModelRoute, Tenant, Tier

DEMO_MODEL = "demo-llama"
# The simulator serves embeddings, rerank and score too (vLLM serves them from a pooling model
# of its own).
DEMO_EMBEDDING_MODEL = "demo-embed"
DEMO_KEY_NAME = "demo"
TIERS = {
    "interactive": dict(
        band=Band.INTERACTIVE,
        weight=1.0,
        max_concurrent_per_user=4,
        max_queued_per_user=64,
        queue_timeout_seconds=60.0,
        gate_max_waiting=3,
        gate_max_tpot_ms=150.0,
        gate_max_kv_cache_usage=0.95,
    ),
    "standard": dict(
        band=Band.STANDARD,
        weight=1.0,
        max_concurrent_per_user=8,
        max_queued_per_user=256,
        queue_timeout_seconds=300.0,
        gate_max_waiting=2,
        gate_max_tpot_ms=150.0,
        gate_max_kv_cache_usage=0.9,
    ),
    "batch": dict(
        band=Band.BATCH,
        weight=1.0,
        max_concurrent_per_user=64,
        max_queued_per_user=10_000,
        queue_timeout_seconds=3600.0,
        gate_max_waiting=0,
        gate_max_tpot_ms=150.0,
        gate_max_kv_cache_usage=0.85,
    ),
}
# (user, app type, tier override)
KEYS = [
    ("alice", AppType.CHAT, None),
    ("bob", AppType.CHAT, None),
    ("nightly-eval", AppType.BATCH, "batch"),
]


def load_demo(simulator_url: str) -> tuple[Tenant, dict[str, Tier]]:
    """Tiers, the demo tenant, the demo model's price and its route to the simulator."""
    tiers = {
        name: Tier.objects.update_or_create(name=name, defaults=values)[0]
        for name, values in TIERS.items()
    }
    tenant, _ = Tenant.objects.update_or_create(
        slug="demo",
        defaults={"name": "Demo Org", "default_tier": tiers["interactive"], "is_active": True},
    )
    CostRule.objects.update_or_create(
        model=DEMO_MODEL,
        effective_from=datetime(2025, 1, 1, tzinfo=UTC),
        defaults={"input_per_million": Decimal("0.20"), "output_per_million": Decimal("0.80")},
    )
    backend, _ = Backend.objects.update_or_create(
        name="simulator",
        defaults={
            "base_url": simulator_url,
            "kind": "vllm",
            "metrics_url": "",
            "enabled": True,
            "max_in_flight": 64,
        },
    )
    ModelRoute.objects.update_or_create(
        public_name=DEMO_MODEL, backend=backend, defaults={"upstream_model": DEMO_MODEL}
    )
    ModelRoute.objects.update_or_create(
        public_name=DEMO_EMBEDDING_MODEL,
        backend=backend,
        defaults={"upstream_model": DEMO_MODEL, "endpoints": "embeddings,rerank,score"},
    )
    return tenant, tiers
