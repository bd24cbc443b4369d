"""Create an API key and print its secret once: `manage.py create_api_key acme alice`."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tenants.models import ApiKey, AppType, Tenant, Tier


class Command(BaseCommand):
    help = "Create an API key for a tenant's user; the secret is printed once and never stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="Tenant slug.")
        parser.add_argument("user", help="The user this key acts for (the fairness principal).")
        parser.add_argument("--name", default="")
        parser.add_argument("--tier", help="Tier override for this key.")
        parser.add_argument("--app-type", choices=list(AppType.values), default=AppType.CHAT)
        parser.add_argument("--models", default="", help="Comma-separated allowed models/patterns.")
        parser.add_argument("--expires-days", type=int, help="Expire after this many days.")
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = Tenant.objects.get(slug=options["tenant"])
        except Tenant.DoesNotExist:
            raise CommandError(f"No tenant with slug {options['tenant']!r}.") from None
        tier = None
        if options["tier"]:
            tier = Tier.objects.filter(name=options["tier"]).first()
            if tier is None:
                raise CommandError(f"No tier named {options['tier']!r}.")
        expires_at = None
        if options["expires_days"] is not None:
            if options["expires_days"] <= 0:
                raise CommandError("--expires-days must be positive.")
            expires_at = timezone.now() + timedelta(days=options["expires_days"])
        key, secret = ApiKey.objects.create_key(
            tenant=tenant,
            user=options["user"],
            name=options["name"],
            tier_override=tier,
            app_type=options["app_type"],
            allowed_models=options["models"],
            expires_at=expires_at,
        )
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "key": secret,
                        "prefix": key.prefix,
                        "tenant": tenant.slug,
                        "user": key.user,
                        "tier": key.tier.name,
                        "app_type": key.app_type,
                        "expires_at": expires_at.isoformat() if expires_at else None,
                    }
                )
            )
            return
        self.stdout.write(f"API key for {tenant.slug}/{key.user} (tier {key.tier.name}):")
        self.stdout.write(secret)
        self.stdout.write("Store it now: it is not shown again.")
