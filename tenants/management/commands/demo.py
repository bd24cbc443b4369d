"""Load the demo: three tiers, a demo tenant with keys, prices, and a route to the simulator.

Idempotent: tiers, tenant, prices and backend are updated in place; the demo keys are replaced
(their secrets are never stored, so the only way to print them again is to make new ones).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from tenants.models import ApiKey, AppType, Backend, Band, CostRule, ModelRoute, Tenant, Tier

DEMO_MODEL = "demo-llama"
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


def _reset_demo_admin() -> str:
    """A staff login for the demo; a fresh random password each time, printed, never fixed."""
    from django.contrib.auth import get_user_model

    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(
        username="admin", defaults={"email": "admin@localhost"}
    )
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return password


class Command(BaseCommand):
    help = "Create the demo tiers, tenant, keys, prices and simulator route; print the keys."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--simulator-url", default="http://127.0.0.1:8100")
        parser.add_argument("--gateway-url", default="http://127.0.0.1:8000")
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--no-admin", action="store_true", help="Do not (re)set the demo admin's password."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            tiers = {
                name: Tier.objects.update_or_create(name=name, defaults=values)[0]
                for name, values in TIERS.items()
            }
            tenant, _ = Tenant.objects.update_or_create(
                slug="demo",
                defaults={
                    "name": "Demo Org",
                    "default_tier": tiers["interactive"],
                    "is_active": True,
                },
            )
            CostRule.objects.update_or_create(
                model=DEMO_MODEL,
                effective_from=datetime(2025, 1, 1, tzinfo=UTC),
                defaults={
                    "input_per_million": Decimal("0.20"),
                    "output_per_million": Decimal("0.80"),
                },
            )
            backend, _ = Backend.objects.update_or_create(
                name="simulator",
                defaults={
                    "base_url": options["simulator_url"],
                    "kind": "vllm",
                    "metrics_url": "",
                    "enabled": True,
                    "max_in_flight": 64,
                },
            )
            ModelRoute.objects.update_or_create(
                public_name=DEMO_MODEL, backend=backend, defaults={"upstream_model": DEMO_MODEL}
            )
            ApiKey.objects.filter(tenant=tenant, name=DEMO_KEY_NAME).delete()
            keys = []
            for user, app_type, tier_name in KEYS:
                key, secret = ApiKey.objects.create_key(
                    tenant=tenant,
                    user=user,
                    name=DEMO_KEY_NAME,
                    app_type=app_type,
                    tier_override=tiers[tier_name] if tier_name else None,
                )
                keys.append(
                    {"user": user, "app_type": app_type, "tier": key.tier.name, "key": secret}
                )
        admin_password = None if options["no_admin"] else _reset_demo_admin()
        if options["json"]:
            self.stdout.write(
                json.dumps({"model": DEMO_MODEL, "keys": keys, "admin_password": admin_password})
            )
            return
        if admin_password:
            self.stdout.write(
                f"Admin: {options['gateway_url']}/admin/  user 'admin', password {admin_password}"
            )
        self.stdout.write(
            f"Demo tenant 'demo', model {DEMO_MODEL!r} on {options['simulator_url']}."
        )
        for entry in keys:
            self.stdout.write(f"  {entry['user']:<13} {entry['tier']:<12} {entry['key']}")
        first = keys[0]["key"]
        self.stdout.write("Try it:")
        self.stdout.write(
            f"  curl -N {options['gateway_url']}/v1/chat/completions -H 'Authorization: Bearer {first}'"
            f' -H \'Content-Type: application/json\' -d \'{{"model": "{DEMO_MODEL}", "stream": true,'
            ' "messages": [{"role": "user", "content": "Hello"}]}\''
        )
