"""GET /api/v1/quota: consumption against each rule that binds the key, and the budget."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tenants import budget
from tenants.models import ApiKey, QuotaRule, Tenant, Tier
from tests.reports.usage_data import record


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    budget.cache.clear()


def get(key: str) -> Any:
    return Client().get("/api/v1/quota", HTTP_AUTHORIZATION=f"Bearer {key}")


def test_it_reports_consumption_against_each_rule(cast: Any) -> None:
    now = timezone.now()
    record("a1", cast.acme, "alice", "llama", now, 100, 50)
    record("b1", cast.acme, "bob", "llama", now, 10, 5)
    QuotaRule.objects.create(tenant=cast.acme, window="day", metric="tokens", limit=1000)
    QuotaRule.objects.create(
        tier=cast.interactive, window="hour", metric="requests", limit=1, per_user=True
    )
    body = get(cast.alice_key).json()
    assert [(r["scope"], r["metric"], r["consumed"], r["exceeded"]) for r in body["rules"]] == [
        ("tenant", "tokens", "165.00000000", False),
        ("tier", "requests", "1.00000000", True),
    ]
    assert body["rules"][0]["remaining"] == "835.0000"


def test_it_shows_the_monthly_budget(cast: Any) -> None:
    Tenant.objects.filter(pk=cast.acme.pk).update(monthly_budget=Decimal("0.0001"))
    record("a1", cast.acme, "alice", "llama", timezone.now(), 100, 50)
    from tenants.models import CostRule

    assert CostRule.objects.count() == 0  # unpriced: cost 0, so still within budget
    body = get(cast.alice_key).json()
    assert body["budget"]["exceeded"] is False
    assert body["budget"]["budget"] == "0.0001"


def test_it_shows_the_keys_own_budget_and_only_that_keys_spend(cast: Any) -> None:
    from tests.reports.usage_data import prices

    prices()
    ApiKey.objects.filter(pk=cast.alice.pk).update(monthly_budget=Decimal("0.001"))
    record("a1", cast.acme, "alice", "other", timezone.now(), 1000, 1000, api_key=cast.alice)
    record("b1", cast.acme, "bob", "other", timezone.now(), 1000, 1000, api_key=cast.bob)
    key_budget = get(cast.alice_key).json()["key_budget"]
    assert (key_budget["budget"], key_budget["exceeded"]) == ("0.0010", True)
    assert Decimal(key_budget["spent"]) == Decimal("0.0015")


def test_it_shows_charlie_only_globex_rules(cast: Any) -> None:
    QuotaRule.objects.create(tenant=cast.acme, window="day", metric="tokens", limit=1000)
    body = get(cast.charlie_key).json()
    assert (body["tenant"], body["rules"]) == ("globex", [])


def test_it_shows_the_keys_rate_limits_and_what_they_refused_this_month(cast: Any) -> None:
    Tier.objects.filter(pk=cast.interactive.pk).update(rpm_per_key=60, tpm_per_key=None)
    Tenant.objects.filter(pk=cast.acme.pk).update(tpm_limit=100_000)
    record(
        "r1",
        cast.acme,
        "alice",
        "llama",
        timezone.now(),
        status="rejected",
        api_key=cast.alice,
        error_type="rate_limit_exceeded",
    )
    record("r2", cast.acme, "bob", "llama", timezone.now(), api_key=cast.bob)
    assert get(cast.alice_key).json()["rate_limits"] == {
        "requests_per_minute": 60,
        "tokens_per_minute": None,
        "tenant_requests_per_minute": None,
        "tenant_tokens_per_minute": 100_000,
        "refused_this_month": 1,
    }
