"""The report's budget table shows who is over budget and how many requests it refused."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from tenants.models import ApiKey, Tenant
from tenants.reports.budgets import budget_overview
from tests.reports.usage_data import prices, record


def test_it_flags_the_tenant_past_its_budget_and_counts_refusals(cast: Any) -> None:
    prices()
    now = timezone.now()
    Tenant.objects.filter(pk=cast.acme.pk).update(monthly_budget=Decimal("0.001"))
    Tenant.objects.filter(pk=cast.globex.pk).update(monthly_budget=Decimal(10))
    record("a", cast.acme, "alice", "other", now - timedelta(seconds=5), 1000, 1000)
    record(
        "b",
        cast.acme,
        "alice",
        "other",
        now,
        status="rejected",
        wait=None,
        error_type="budget_exceeded",
    )
    acme, globex = budget_overview(now)
    assert (acme["tenant"], acme["spent"], acme["exceeded"], acme["refused"]) == (
        "acme",
        Decimal("0.0015"),
        True,
        1,
    )
    assert (globex["exceeded"], globex["used_percent"], globex["policy"]) == (False, 0.0, "reject")


def test_a_key_with_its_own_budget_gets_a_row_with_only_its_spend(cast: Any) -> None:
    prices()
    now = timezone.now()
    ApiKey.objects.filter(pk=cast.alice.pk).update(monthly_budget=Decimal("0.001"))
    record("a", cast.acme, "alice", "other", now, 1000, 1000, api_key=cast.alice)
    record("b", cast.acme, "bob", "other", now, 1000, 1000, api_key=cast.bob)
    [row] = budget_overview(now)
    assert (row["tenant"], row["key"]) == ("acme", f"{cast.alice.prefix}… (alice)")
    assert (row["spent"], row["exceeded"]) == (Decimal("0.0015"), True)


def test_a_budget_row_counts_the_rate_limit_refusals_of_the_month(cast: Any) -> None:
    Tenant.objects.filter(pk=cast.acme.pk).update(monthly_budget=Decimal(10))
    record(
        "r",
        cast.acme,
        "alice",
        "other",
        timezone.now(),
        status="rejected",
        error_type="rate_limit_exceeded",
    )
    [acme] = budget_overview(timezone.now())
    assert (acme["rate_limited"], acme["refused"]) == (1, 0)
