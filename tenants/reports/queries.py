"""Usage aggregates over a date range, computed in the database.

Raw usage records and the daily roll-ups (`UsageDaily`) are aggregated separately, each with one
GROUP BY, and the two small grouped results are merged; a day lives in one or the other, never
both, because the roll-up deletes the records it summarised in the same transaction. Days are
UTC calendar days whatever `TIME_ZONE` says, so a report reads the same on every deployment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from tenants.models import UsageDaily, UsageRecord

MEASURES = ("requests", "prompt_tokens", "completion_tokens", "total_tokens", "cost")

# Report dimension -> (raw record fields, daily roll-up fields, output names).
DIMENSIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "tenant": (("tenant__slug",), ("tenant__slug",), ("tenant",)),
    "user": (("tenant__slug", "user"), ("tenant__slug", "user"), ("tenant", "user")),
    "model": (("model",), ("model",), ("model",)),
    "day": (("day",), ("day",), ("day",)),
    "status": (("status",), ("status",), ("status",)),
    "endpoint": (("endpoint",), ("endpoint",), ("endpoint",)),
}


@dataclass(frozen=True)
class UsageFilter:
    """A report's scope: an inclusive range of UTC days, optionally one tenant, model or user."""

    start: date
    end: date
    tenant_id: int | None = None
    model: str = ""
    user: str = ""

    @property
    def since(self) -> datetime:
        return datetime.combine(self.start, time.min, tzinfo=UTC)

    @property
    def until(self) -> datetime:
        return datetime.combine(self.end + timedelta(days=1), time.min, tzinfo=UTC)

    def _scope(self) -> Q:
        q = Q()
        if self.tenant_id is not None:
            q &= Q(tenant_id=self.tenant_id)
        if self.model:
            q &= Q(model=self.model)
        if self.user:
            q &= Q(user=self.user)
        return q

    def records(self) -> QuerySet[UsageRecord]:
        return UsageRecord.objects.filter(
            self._scope(), queued_at__gte=self.since, queued_at__lt=self.until
        )

    def daily(self) -> QuerySet[UsageDaily]:
        return UsageDaily.objects.filter(self._scope(), day__gte=self.start, day__lte=self.end)


def _raw_grouped(flt: UsageFilter, fields: tuple[str, ...]) -> QuerySet[Any]:
    qs = flt.records()
    if "day" in fields:
        qs = qs.annotate(day=TruncDate("queued_at", tzinfo=UTC))
    grouped: QuerySet[Any] = (
        qs.values(*fields)
        .annotate(
            requests=Count("id"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            spent=Sum("cost"),
        )
        .order_by()
    )
    return grouped


def _daily_grouped(flt: UsageFilter, fields: tuple[str, ...]) -> QuerySet[Any]:
    grouped: QuerySet[Any] = (
        flt.daily()
        .values(*fields)
        .annotate(
            requests=Sum("requests"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            spent=Sum("cost"),
        )
        .order_by()
    )
    return grouped


def _merge(
    groups: Iterable[tuple[tuple[str, ...], Iterable[dict[str, Any]]]], names: tuple[str, ...]
) -> list[dict[str, Any]]:
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for fields, rows in groups:
        for row in rows:
            key = tuple(row[f] for f in fields)
            out = merged.setdefault(
                key,
                {
                    **dict(zip(names, key, strict=True)),
                    "requests": 0,
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "cost": Decimal(0),
                },
            )
            out["requests"] += int(row["requests"] or 0)
            out["prompt_tokens"] += int(row["prompt"] or 0)
            out["completion_tokens"] += int(row["completion"] or 0)
            out["cost"] += Decimal(row["spent"] or 0)
    for out in merged.values():
        out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
        out["cost"] = _money(out["cost"])
    return [merged[k] for k in sorted(merged, key=lambda k: tuple(str(v) for v in k))]


def _money(value: Decimal) -> Decimal:
    """Costs to 8 places, the column's own precision, so SQLite and PostgreSQL print alike."""
    return Decimal(value).quantize(Decimal("0.00000001"))


def usage_by(dimension: str, flt: UsageFilter) -> list[dict[str, Any]]:
    """Requests, tokens and cost per `dimension` (tenant, user, model, day or status)."""
    raw_fields, daily_fields, names = DIMENSIONS[dimension]
    return _merge(
        [
            (raw_fields, _raw_grouped(flt, raw_fields)),
            (daily_fields, _daily_grouped(flt, daily_fields)),
        ],
        names,
    )


def usage_totals(flt: UsageFilter) -> dict[str, Any]:
    """The same measures over the whole scope: the footer of every table."""
    rows = _merge([((), [_raw_total(flt)]), ((), [_daily_total(flt)])], ())
    if rows:
        return rows[0]
    zero: dict[str, Any] = dict.fromkeys(MEASURES, 0)
    return {**zero, "cost": _money(Decimal(0))}


def _raw_total(flt: UsageFilter) -> dict[str, Any]:
    return flt.records().aggregate(
        requests=Count("id"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        spent=Sum("cost"),
    )


def _daily_total(flt: UsageFilter) -> dict[str, Any]:
    return flt.daily().aggregate(
        requests=Sum("requests"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        spent=Sum("cost"),
    )


def tokens_by_model_and_day(flt: UsageFilter) -> list[dict[str, Any]]:
    """Tokens per (day, model), for the stacked chart."""
    raw = _raw_grouped(flt, ("day", "model"))
    daily = _daily_grouped(flt, ("day", "model"))
    return _merge([(("day", "model"), raw), (("day", "model"), daily)], ("day", "model"))


def error_types(flt: UsageFilter) -> list[dict[str, Any]]:
    """Failed and refused requests by status and error type (budget, quota, backend...)."""
    rows = (
        flt.records()
        .exclude(status="ok")
        .values("status", "error_type")
        .annotate(requests=Count("id"))
        .order_by("status", "error_type")
    )
    return [dict(r) for r in rows]
