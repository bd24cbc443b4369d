"""Create (or update) a tenant: `manage.py create_tenant acme "Acme Corp" --tier standard`."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.models import Tenant, Tier


class Command(BaseCommand):
    help = "Create a tenant, or update the one with this slug."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("name", nargs="?", help="Display name; defaults to the slug.")
        parser.add_argument("--tier", required=True, help="Name of the tenant's default tier.")
        parser.add_argument("--budget", help="Monthly budget in the cost rules' currency.")
        parser.add_argument("--inactive", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tier = Tier.objects.get(name=options["tier"])
        except Tier.DoesNotExist:
            known = ", ".join(Tier.objects.values_list("name", flat=True)) or "none yet"
            raise CommandError(f"No tier named {options['tier']!r} (known: {known}).") from None
        budget = None
        if options["budget"] is not None:
            try:
                budget = Decimal(options["budget"])
            except InvalidOperation:
                raise CommandError(
                    f"--budget must be a number; got {options['budget']!r}"
                ) from None
        tenant, created = Tenant.objects.update_or_create(
            slug=options["slug"],
            defaults={
                "name": options["name"] or options["slug"],
                "default_tier": tier,
                "monthly_budget": budget,
                "is_active": not options["inactive"],
            },
        )
        verb = "Created" if created else "Updated"
        self.stdout.write(f"{verb} tenant {tenant.slug} ({tenant.name}), tier {tier.name}.")
