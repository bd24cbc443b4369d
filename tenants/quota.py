"""Quota checks: consumption per rule, aggregated in the database, and the admission decision.

`check_quota` runs on every API request, so it costs at most three queries whatever the number of
rules: one for the rules that apply to the key, and one conditional aggregate that measures all
of them over the daily sums (day and month windows) and one over the records (hours, minutes).
Records count from the moment they were queued; rejected requests count for nothing, so a
refused client does not extend its own lockout. Usage is written in batches off the request path,
so consumption may lag the last second or so of traffic.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce

from tenants.models import (
    ApiKey,
    Metric,
    QuotaRule,
    Tenant,
    UsageDaily,
    UsageRecord,
    UsageStatus,
)
from tenants.models.rules import Window, window_end, window_start

ZERO = Decimal(0)
# Windows that are whole UTC days, read from the daily sums (a month's is a few rows per user
# and model a day); the shorter ones count the records, which retention always keeps.
WHOLE_DAYS = (Window.DAY, Window.MONTH)


@dataclass(frozen=True)
class QuotaDecision:
    """An exceeded rule: what was used, the limit, and how long until its window resets."""

    rule: QuotaRule
    consumed: Decimal
    limit: Decimal
    window_end: datetime
    retry_after: float


@dataclass(frozen=True)
class QuotaStatus:
    """One rule's standing for the self-service API."""

    rule: QuotaRule
    consumed: Decimal
    window_start: datetime
    window_end: datetime

    @property
    def exceeded(self) -> bool:
        return self.consumed >= self.rule.limit


def model_q(pattern: str) -> Q:
    """A filter for the usage rows whose model matches a `fnmatch` pattern (`*` and `?`)."""
    if pattern in ("", "*"):
        return Q()
    if not any(c in pattern for c in "*?["):
        return Q(model=pattern)
    if pattern.endswith("*") and not any(c in pattern[:-1] for c in "*?["):
        return Q(model__startswith=pattern[:-1])
    # A regex both SQLite (Python's re) and PostgreSQL (ARE) read the same way.
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return Q(model__regex="^" + "".join(parts) + "$")


def _rule_q(rule: QuotaRule, user: str, now: datetime) -> Q:
    start, end = window_start(rule.window, now), window_end(rule.window, now)
    if rule.window in WHOLE_DAYS:
        q = Q(day__gte=start.date(), day__lt=end.date())
    else:
        q = Q(queued_at__gte=start, queued_at__lt=end)
    if rule.per_user:
        q &= Q(user=user)
    return q & model_q(rule.model_pattern)


def _measure(rule: QuotaRule, q: Q) -> Any:
    if rule.metric == Metric.REQUESTS:
        return Count("id", filter=q) if rule.window not in WHOLE_DAYS else Sum("requests", filter=q)
    if rule.metric == Metric.TOKENS:
        return Coalesce(Sum(F("prompt_tokens") + F("completion_tokens"), filter=q), Value(0))
    return Sum("cost", filter=q)


def _consumed(rules: list[QuotaRule], tenant_id: int, user: str, now: datetime) -> list[Decimal]:
    """One conditional aggregate over the daily rows for the rules whose windows are whole days,
    one over the records for the others (hours, minutes)."""
    used = [ZERO] * len(rules)
    for whole_days in (True, False):
        part = {i: r for i, r in enumerate(rules) if (r.window in WHOLE_DAYS) == whole_days}
        if not part:
            continue
        earliest = min(window_start(r.window, now) for r in part.values())
        rows: QuerySet[Any] = (
            UsageDaily.objects.filter(tenant_id=tenant_id, day__gte=earliest.date())
            if whole_days
            else UsageRecord.objects.filter(tenant_id=tenant_id, queued_at__gte=earliest)
        )
        aggregates = {f"r{i}": _measure(r, _rule_q(r, user, now)) for i, r in part.items()}
        row = rows.exclude(status=UsageStatus.REJECTED).aggregate(**aggregates)
        for i in part:
            used[i] = Decimal(row[f"r{i}"] or 0)
    return used


def consumption(rule: QuotaRule, tenant: Tenant, user: str, now: datetime) -> Decimal:
    """What `tenant` (or `user`, for a per-user rule) used of `rule` in the window around `now`."""
    return _consumed([rule], tenant.pk, user, now)[0]


def rules_for(tenant_id: int, tier_id: int) -> list[QuotaRule]:
    """Every rule that binds a key of this tenant and tier: the tenant's own and the tier's."""
    return list(
        QuotaRule.objects.filter(Q(tenant_id=tenant_id) | Q(tier_id=tier_id)).order_by("pk")
    )


def quota_status(api_key: ApiKey, now: datetime) -> list[QuotaStatus]:
    """Current consumption against each rule that binds the key, whatever its model."""
    rules = rules_for(api_key.tenant_id, api_key.tier.pk)
    used = _consumed(rules, api_key.tenant_id, api_key.user, now)
    return [
        QuotaStatus(r, u, window_start(r.window, now), window_end(r.window, now))
        for r, u in zip(rules, used, strict=True)
    ]


def check_quota(api_key: ApiKey, model: str, now: datetime) -> QuotaDecision | None:
    return check_quota_for(api_key.tenant_id, api_key.tier.pk, api_key.user, model, now)


def check_quota_for(
    tenant_id: int,
    tier_id: int,
    user: str,
    model: str,
    now: datetime,
    pending: Callable[[QuotaRule], Decimal] | None = None,
) -> QuotaDecision | None:
    """The exceeded rule for a request on `model`, or None when it may go ahead.

    `pending(rule)` adds what is admitted but not yet recorded. When several rules are exceeded,
    the one whose window ends last is returned: retrying before that would only be refused again.
    """
    rules = [r for r in rules_for(tenant_id, tier_id) if r.matches(model)]
    used = _consumed(rules, tenant_id, user, now)
    if pending is not None:
        used = [u + pending(r) for r, u in zip(rules, used, strict=True)]
    worst: QuotaDecision | None = None
    for rule, consumed in zip(rules, used, strict=True):
        if consumed < rule.limit:
            continue
        end = window_end(rule.window, now)
        if worst is None or end > worst.window_end:
            retry = max((end - now).total_seconds(), 1.0)
            worst = QuotaDecision(rule, consumed, rule.limit, end, retry)
    return worst
