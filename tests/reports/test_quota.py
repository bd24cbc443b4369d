"""Quota consumption and admission, measured in the database against hand-computed values."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from tenants.models import QuotaRule
from tenants.quota import check_quota, consumption, quota_status
from tests.reports.usage_data import at, load

NOW = at(3, 2, 18)  # after r3, r4 and r7, on the day after r1 and r2


def test_it_counts_requests_per_day_for_the_whole_tenant(cast: Any) -> None:
    load(cast)
    rule = QuotaRule.objects.create(tenant=cast.acme, window="day", metric="requests", limit=10)
    assert consumption(rule, cast.acme, "alice", NOW) == 2


def test_it_counts_only_the_users_own_rows_for_a_per_user_rule(cast: Any) -> None:
    load(cast)
    rule = QuotaRule.objects.create(
        tenant=cast.acme, window="month", metric="requests", limit=10, per_user=True
    )
    assert consumption(rule, cast.acme, "bob", NOW) == 2


def test_it_sums_tokens_over_the_month_for_a_model_pattern(cast: Any) -> None:
    load(cast)
    rule = QuotaRule.objects.create(
        tenant=cast.acme, model_pattern="lla*", window="month", metric="tokens", limit=10
    )
    assert consumption(rule, cast.acme, "alice", NOW) == 1500 + 3000 + 1500 + 0 + 2000


def test_it_sums_cost_across_a_price_change(cast: Any) -> None:
    load(cast)
    rule = QuotaRule.objects.create(tenant=cast.acme, window="month", metric="cost", limit=10)
    assert consumption(rule, cast.acme, "alice", NOW) == Decimal("0.025")


def test_it_ignores_rejected_requests(cast: Any) -> None:
    load(cast)
    rule = QuotaRule.objects.create(tenant=cast.acme, window="day", metric="requests", limit=10)
    assert consumption(rule, cast.acme, "alice", at(3, 3, 12)) == 1


def test_it_matches_a_question_mark_pattern_in_the_database(cast: Any) -> None:
    load(cast)
    rule = QuotaRule.objects.create(
        tenant=cast.acme, model_pattern="mistra?", window="month", metric="requests", limit=10
    )
    assert consumption(rule, cast.acme, "alice", NOW) == 1


def test_it_refuses_at_the_limit_until_the_window_ends(cast: Any) -> None:
    load(cast)
    QuotaRule.objects.create(tenant=cast.acme, window="day", metric="requests", limit=2)
    decision = check_quota(cast.alice, "llama", NOW)
    assert decision is not None
    assert decision.consumed == 2
    assert decision.retry_after == 6 * 3600


def test_it_admits_below_the_limit(cast: Any) -> None:
    load(cast)
    QuotaRule.objects.create(tenant=cast.acme, window="day", metric="requests", limit=3)
    assert check_quota(cast.alice, "llama", NOW) is None


def test_it_applies_the_tiers_rules_to_its_tenants(cast: Any) -> None:
    load(cast)
    QuotaRule.objects.create(tier=cast.interactive, window="month", metric="cost", limit="0.01")
    assert check_quota(cast.alice, "llama", NOW) is not None
    assert check_quota(cast.charlie, "llama", NOW) is not None


def test_it_does_not_count_another_tenants_usage(cast: Any) -> None:
    load(cast)
    QuotaRule.objects.create(tier=cast.interactive, window="month", metric="cost", limit="0.05")
    assert check_quota(cast.alice, "llama", NOW) is None
    assert check_quota(cast.charlie, "llama", NOW) is not None


def test_it_skips_rules_for_other_models(cast: Any) -> None:
    load(cast)
    QuotaRule.objects.create(
        tenant=cast.acme, model_pattern="mistral", window="day", metric="requests", limit=1
    )
    assert check_quota(cast.alice, "llama", NOW) is None
    assert check_quota(cast.alice, "mistral", NOW) is not None


def test_it_reports_the_exceeded_rule_that_resets_last(cast: Any) -> None:
    load(cast)
    QuotaRule.objects.create(tenant=cast.acme, window="day", metric="requests", limit=1)
    month = QuotaRule.objects.create(tenant=cast.acme, window="month", metric="requests", limit=1)
    decision = check_quota(cast.alice, "llama", NOW)
    assert decision is not None and decision.rule == month


def test_it_checks_many_rules_in_three_queries(cast: Any) -> None:
    """The rules, then one aggregate over the daily sums (day, month) and one over the records
    (minute, hour), however many rules there are."""
    load(cast)
    for window in ("minute", "hour", "day", "month", "minute", "month"):
        QuotaRule.objects.create(tenant=cast.acme, window=window, metric="tokens", limit=10**6)
    with CaptureQueriesContext(connection) as queries:
        assert check_quota(cast.alice, "llama", NOW) is None
    assert len(queries) == 3


def test_it_lists_every_rule_with_its_window_for_the_api(cast: Any) -> None:
    load(cast)
    QuotaRule.objects.create(tenant=cast.acme, window="day", metric="requests", limit=2)
    [status] = quota_status(cast.bob, NOW)
    assert (status.consumed, status.exceeded) == (2, True)
    assert (status.window_start, status.window_end) == (at(3, 2), at(3, 3))
