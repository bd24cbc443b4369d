"""What the retention tests share: usage spread over a month, and every number a report,
budget or quota check gives, to compare before and after pruning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Sum

from tenants.budget import month_spend
from tenants.models import QuotaRule, UsageRecord
from tenants.quota import consumption
from tenants.reports.budgets import budget_overview, rate_limit_report
from tenants.reports.queries import DIMENSIONS, UsageFilter, error_types, usage_by, usage_totals
from tests.reports.usage_data import prices, record

# Late in March 2025: the month's budget and quotas span records from the 1st on.
NOW = datetime(2025, 3, 20, 12, 30, tzinfo=UTC)
MONTH = UsageFilter(NOW.date().replace(day=1), NOW.date())


def spread(cast: Any) -> None:
    """Two records a day for alice, one for bob and one for charlie, from March 1st to now,
    with refusals, errors and embeddings among them; one in this very hour."""
    prices()
    day = MONTH.since
    n = 0
    while day < NOW:
        for user, tenant, key, hour in (
            ("alice", cast.acme, cast.alice, 3),
            ("alice", cast.acme, cast.alice, 23),
            ("bob", cast.acme, cast.bob, 9),
            ("charlie", cast.globex, cast.charlie, 11),
        ):
            n += 1
            status, error = (
                ("rejected", "budget_exceeded")
                if n % 7 == 0
                else ("rejected", "rate_limit_exceeded")
                if n % 11 == 0
                else ("error", "upstream_error")
                if n % 13 == 0
                else ("ok", "")
            )
            endpoint = "embeddings" if n % 5 == 0 else "chat"
            model = "llama" if n % 3 else "mistral"
            tokens = (100 * n, 0 if endpoint == "embeddings" else 37 * n)
            when = day + timedelta(hours=hour, minutes=n % 60)
            if when < NOW:
                record(
                    f"r{n}",
                    tenant,
                    user,
                    model,
                    when,
                    *tokens,
                    status=status,
                    api_key=key,
                    endpoint=endpoint,
                    error_type=error,
                )
        day += timedelta(days=1)
    record(
        "now", cast.acme, "alice", "llama", NOW - timedelta(minutes=5), 500, 50, api_key=cast.alice
    )


def everything(cast: Any) -> dict[str, Any]:
    """Every figure the product shows that pruning must not change."""
    QuotaRule.objects.get_or_create(tenant=cast.acme, window="month", metric="cost", limit=100)
    QuotaRule.objects.get_or_create(
        tenant=cast.acme, window="day", metric="tokens", limit=10**9, per_user=True
    )
    QuotaRule.objects.get_or_create(tenant=cast.acme, window="hour", metric="requests", limit=99)
    return {
        "usage": {d: usage_by(d, MONTH) for d in DIMENSIONS},
        "acme": {
            d: usage_by(d, UsageFilter(MONTH.start, MONTH.end, cast.acme.pk)) for d in DIMENSIONS
        },
        "totals": usage_totals(MONTH),
        "errors": error_types(MONTH),
        "budget": month_spend(cast.acme.pk, NOW),
        "key_budget": month_spend(cast.acme.pk, NOW, cast.alice.pk),
        "overview": budget_overview(NOW),
        "rate_limits": rate_limit_report(cast.alice, NOW),
        "quotas": [
            consumption(rule, cast.acme, "alice", NOW) for rule in QuotaRule.objects.order_by("pk")
        ],
    }


def from_records(
    flt: UsageFilter, *fields: str
) -> dict[tuple[Any, ...], tuple[int, int, int, Any]]:
    """The same sums straight from the records, grouped by record fields: what the daily rows
    must equal."""
    rows = (
        flt.records()
        .values(*fields)
        .annotate(
            n=Count("id"), p=Sum("prompt_tokens"), c=Sum("completion_tokens"), cost=Sum("cost")
        )
        .order_by()
    )
    return {tuple(r[f] for f in fields): (r["n"], r["p"], r["c"], r["cost"]) for r in rows}


def records() -> int:
    return UsageRecord.objects.count()
