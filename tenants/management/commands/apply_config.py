"""`manage.py apply_config SPEC.json`: change tiers and backends and create keys from one file.

For scripted set-ups (benchmarks, provisioning): the spec is
`{"tenant": "demo", "tiers": {name: {field: value}}, "backends": {name: {field: value}},
"routes": {public name: {"backend": name, "upstream_model": name}},
"prices": {model: [input, output per million]}, "policy": {field: value},
"keys": [[user, tier name, app type], ...]}`; every part is optional. A tier that does not exist
is created; `policy` is the fair-share policy (unit, input_weight, output_weight); a price takes
effect at once. It runs in one transaction and prints the new keys' secrets as JSON,
`{user: secret}` (shown once, as always).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from tenants.models import (
    ApiKey,
    Backend,
    CostRule,
    FairSharePolicy,
    ModelRoute,
    Tenant,
    Tier,
)


class Command(BaseCommand):
    help = "Apply a JSON spec of tier and backend changes and new keys; prints the keys as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("spec", help="Path of the JSON spec, or - for standard input.")

    def handle(self, *args: Any, **options: Any) -> None:
        source = options["spec"]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
            spec = json.loads(text)
        except (OSError, ValueError) as exc:
            raise CommandError(f"Cannot read the spec: {exc}") from exc
        if not isinstance(spec, dict):
            raise CommandError("The spec must be a JSON object.")
        try:
            with transaction.atomic():
                keys = apply(spec)
        except (
            FieldDoesNotExist,
            Tier.DoesNotExist,
            Tenant.DoesNotExist,
            Backend.DoesNotExist,
            TypeError,
            ValueError,
        ) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(keys))


def apply(spec: dict[str, Any]) -> dict[str, str]:
    for name, values in spec.get("tiers", {}).items():
        _check_fields(Tier, values)
        Tier.objects.update_or_create(name=name, defaults=values)
    for name, values in spec.get("backends", {}).items():
        _check_fields(Backend, values)
        Backend.objects.filter(name=name).update(**values)
    for public, route in spec.get("routes", {}).items():
        backend = Backend.objects.get(name=route["backend"])
        ModelRoute.objects.update_or_create(
            public_name=public,
            backend=backend,
            defaults={"upstream_model": route.get("upstream_model", "")},
        )
    now = timezone.now()
    for model, (price_in, price_out) in spec.get("prices", {}).items():
        CostRule.objects.create(
            model=model,
            input_per_million=price_in,
            output_per_million=price_out,
            effective_from=now,
        )
    if "policy" in spec:
        _check_fields(FairSharePolicy, spec["policy"])
        FairSharePolicy.objects.update_or_create(pk=1, defaults=spec["policy"])
    keys: dict[str, str] = {}
    if spec.get("keys"):
        tenant = Tenant.objects.get(slug=spec.get("tenant", "demo"))
        for user, tier, app in spec["keys"]:
            _, keys[user] = ApiKey.objects.create_key(
                tenant=tenant, user=user, tier_override=Tier.objects.get(name=tier), app_type=app
            )
    return keys


def _check_fields(
    model: type[Tier] | type[Backend] | type[FairSharePolicy], values: dict[str, Any]
) -> None:
    for field in values:
        model._meta.get_field(field)
