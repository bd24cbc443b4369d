"""This month's spend against each tenant's budget, for the report (one grouped query)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from tenants.models import Tenant, UsageRecord
from tenants.models.rules import Window, window_end, window_start


def budget_overview(now: datetime) -> list[dict[str, Any]]:
    """Tenants with a budget: spent, budget, percent used, exceeded, policy, refusals."""
    start, end = window_start(Window.MONTH, now), window_end(Window.MONTH, now)
    tenants = list(
        Tenant.objects.filter(monthly_budget__isnull=False).select_related("default_tier")
    )
    month = (
        UsageRecord.objects.filter(tenant__in=tenants, queued_at__gte=start, queued_at__lt=end)
        .values("tenant_id")
        .annotate(
            spent=Sum("cost"),
            refused=Count("id", filter=Q(status="rejected", error_type="budget_exceeded")),
        )
        .order_by()
    )
    by_tenant = {r["tenant_id"]: r for r in month}
    rows = []
    for t in tenants:
        r: Mapping[str, Any] = by_tenant.get(t.pk, {})
        spent = Decimal(r.get("spent") or 0)
        budget = t.monthly_budget or Decimal(0)
        rows.append(
            {
                "tenant": t.slug,
                "spent": spent.quantize(Decimal("0.0001")),
                "budget": budget,
                "used_percent": round(float(spent / budget * 100), 1) if budget else 100.0,
                "exceeded": spent >= budget,
                "policy": t.default_tier.over_budget,
                "refused": r.get("refused", 0),
            }
        )
    return rows
