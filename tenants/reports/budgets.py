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
    """Tenants, then keys, with a budget: spent, budget, percent used, exceeded, policy, the
    requests it refused and those an RPM/TPM limit refused (for a key row, that key's)."""
    start, end = window_start(Window.MONTH, now), window_end(Window.MONTH, now)
    month = UsageRecord.objects.filter(queued_at__gte=start, queued_at__lt=end)
    sums = {
        "spent": Sum("cost"),
        "refused": Count("id", filter=Q(status="rejected", error_type="budget_exceeded")),
        "rate_limited": Count("id", filter=Q(error_type="rate_limit_exceeded")),
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
        "rate_limited": month.get("rate_limited", 0),
    }


def rate_limit_report(key: ApiKey, now: datetime) -> dict[str, Any]:
    """One key's RPM/TPM limits (its tier's per key, its tenant's) and the requests they refused
    this month (UTC), for the self-service API."""
    refused = UsageRecord.objects.filter(
        api_key=key,
        error_type="rate_limit_exceeded",
        queued_at__gte=window_start(Window.MONTH, now),
        queued_at__lt=window_end(Window.MONTH, now),
    ).count()
    return {
        "requests_per_minute": key.tier.rpm_per_key,
        "tokens_per_minute": key.tier.tpm_per_key,
        "tenant_requests_per_minute": key.tenant.rpm_limit,
        "tenant_tokens_per_minute": key.tenant.tpm_limit,
        "refused_this_month": refused,
    }
