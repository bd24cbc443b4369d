"""This month's spend against each budget, a tenant's or one API key's, for the report (one
grouped query each over the daily sums)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q, QuerySet, Sum

from tenants.models import ApiKey, Tenant, UsageDaily
from tenants.models.rules import Window, window_end, window_start


def _month(now: datetime) -> QuerySet[UsageDaily]:
    """The daily rows of the calendar month (UTC) containing `now`."""
    start, end = window_start(Window.MONTH, now), window_end(Window.MONTH, now)
    return UsageDaily.objects.filter(day__gte=start.date(), day__lt=end.date())


def budget_overview(now: datetime) -> list[dict[str, Any]]:
    """Tenants, then keys, with a budget: spent, budget, percent used, exceeded, policy, the
    requests it refused and those an RPM/TPM limit refused (for a key row, that key's)."""
    month = _month(now)
    sums = {
        "spent": Sum("cost"),
        "refused": Sum("requests", filter=Q(status="rejected", error_type="budget_exceeded")),
        "rate_limited": Sum("requests", filter=Q(error_type="rate_limit_exceeded")),
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
        r["key_id"]: r
        for r in month.filter(key_id__in=[k.pk for k in keys])
        .values("key_id")
        .annotate(**sums)
        .order_by()
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
        "refused": month.get("refused") or 0,
        "rate_limited": month.get("rate_limited") or 0,
    }


def rate_limit_report(key: ApiKey, now: datetime) -> dict[str, Any]:
    """One key's RPM/TPM limits (its tier's per key, its tenant's) and the requests they refused
    this month (UTC), for the self-service API."""
    refused = (
        _month(now)
        .filter(key_id=key.pk, error_type="rate_limit_exceeded")
        .aggregate(n=Sum("requests"))["n"]
        or 0
    )
    return {
        "requests_per_minute": key.tier.rpm_per_key,
        "tokens_per_minute": key.tier.tpm_per_key,
        "tenant_requests_per_minute": key.tenant.rpm_limit,
        "tenant_tokens_per_minute": key.tenant.tpm_limit,
        "refused_this_month": refused,
    }
