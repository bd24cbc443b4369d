"""This month's spend against each budget, a tenant's or one API key's, for the report (one
grouped query each)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from tenants.models import ApiKey, Tenant, UsageRecord
from tenants.models.rules import Window, window_end, window_start


def budget_overview(now: datetime) -> list[dict[str, Any]]:
    """Tenants, then keys, with a budget: spent, budget, percent used, exceeded, policy and the
    requests it refused (for a key row, those of that key)."""
    start, end = window_start(Window.MONTH, now), window_end(Window.MONTH, now)
    month = UsageRecord.objects.filter(queued_at__gte=start, queued_at__lt=end)
    sums = {
        "spent": Sum("cost"),
        "refused": Count("id", filter=Q(status="rejected", error_type="budget_exceeded")),
    }
    tenants = list(
        Tenant.objects.filter(monthly_budget__isnull=False).select_related("default_tier")
    )
    by_tenant = {
        r["tenant_id"]: r
        for r in month.filter(tenant__in=tenants).values("tenant_id").annotate(**sums).order_by()
    }
    keys = list(
        ApiKey.objects.filter(monthly_budget__isnull=False).select_related(
            "tenant__default_tier", "tier_override"
        )
    )
    by_key = {
        r["api_key_id"]: r
        for r in month.filter(api_key__in=keys).values("api_key_id").annotate(**sums).order_by()
    }
    rows = [
        _row(t.slug, "", by_tenant.get(t.pk, {}), t.monthly_budget, t.default_tier.over_budget)
        for t in tenants
    ]
    rows += [
        _row(
            k.tenant.slug,
            f"{k.prefix}… ({k.user})",
            by_key.get(k.pk, {}),
            k.monthly_budget,
            k.tier.over_budget,
        )
        for k in keys
    ]
    return rows


def _row(
    tenant: str, key: str, month: Mapping[str, Any], budget: Decimal | None, policy: str
) -> dict[str, Any]:
    spent = Decimal(month.get("spent") or 0)
    limit = budget or Decimal(0)
    return {
        "tenant": tenant,
        "key": key,
        "spent": spent.quantize(Decimal("0.0001")),
        "budget": limit,
        "used_percent": round(float(spent / limit * 100), 1) if limit else 100.0,
        "exceeded": spent >= limit,
        "policy": policy,
        "refused": month.get("refused", 0),
    }
