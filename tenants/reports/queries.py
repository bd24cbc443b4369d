"""Usage aggregates over a date range, computed in the database from the daily sums.

Every record is in `UsageDaily` from the moment it is written (tenants/models/usage_daily.py),
so a report over whole UTC days reads only those rows, a few per user and model a day, however
many requests they sum and however long ago the records were pruned. Days are UTC calendar days
whatever `TIME_ZONE` says, so a report reads the same on every deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q, QuerySet, Sum

from tenants.models import UsageDaily, UsageRecord, UsageStatus

MEASURES = ("requests", "refused", "prompt_tokens", "completion_tokens", "total_tokens", "cost")

# Report dimension -> (daily roll-up fields, output names).
DIMENSIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "tenant": (("tenant__slug",), ("tenant",)),
    "user": (("tenant__slug", "user"), ("tenant", "user")),
    "model": (("model",), ("model",)),
    "day": (("day",), ("day",)),
    "status": (("status",), ("status",)),
    "endpoint": (("endpoint",), ("endpoint",)),
}
# A refused request (a 429, a full or expired queue: status "rejected") never reached a backend:
# it is counted apart, not among the requests served.
REFUSED = Q(status=UsageStatus.REJECTED)
SUMS = {
    "made": Sum("requests", filter=~REFUSED),
    "refusals": Sum("requests", filter=REFUSED),
    "prompt": Sum("prompt_tokens"),
    "completion": Sum("completion_tokens"),
    "spent": Sum("cost"),
}


@dataclass(frozen=True)
class UsageFilter:
    """A report's scope: an inclusive range of UTC days, optionally one tenant, model or user,
    and optionally only the usage of some keys (`keys`; empty: none at all)."""

    start: date
    end: date
    tenant_id: int | None = None
    model: str = ""
    user: str = ""
    keys: tuple[int, ...] | None = None

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
        found = UsageRecord.objects.filter(
            self._scope(), queued_at__gte=self.since, queued_at__lt=self.until
        )
        return found if self.keys is None else found.filter(api_key_id__in=self.keys)

    def daily(self) -> QuerySet[UsageDaily]:
        found = UsageDaily.objects.filter(self._scope(), day__gte=self.start, day__lte=self.end)
        return found if self.keys is None else found.filter(key_id__in=self.keys)


def _measures(row: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = int(row["prompt"] or 0), int(row["completion"] or 0)
    return {
        "requests": int(row["made"] or 0),
        "refused": int(row["refusals"] or 0),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "cost": _money(Decimal(row["spent"] or 0)),
    }


def _grouped(flt: UsageFilter, fields: tuple[str, ...], names: tuple[str, ...]) -> list[Any]:
    rows = flt.daily().values(*fields).annotate(**SUMS).order_by()
    out = [
        {**{n: row[f] for f, n in zip(fields, names, strict=True)}, **_measures(row)}
        for row in rows
    ]
    # Sorted here, not by the database's collation, so SQLite and PostgreSQL list alike.
    return sorted(out, key=lambda r: tuple(str(r[n]) for n in names))


def _money(value: Decimal) -> Decimal:
    """Costs to 8 places, the column's own precision, so SQLite and PostgreSQL print alike."""
    return Decimal(value).quantize(Decimal("0.00000001"))


def usage_by(dimension: str, flt: UsageFilter) -> list[dict[str, Any]]:
    """Requests, tokens and cost per `dimension` (tenant, user, model, day, status or endpoint)."""
    return _grouped(flt, *DIMENSIONS[dimension])


def usage_totals(flt: UsageFilter) -> dict[str, Any]:
    """The same measures over the whole scope: the footer of every table."""
    return _measures(flt.daily().aggregate(**SUMS))


def tokens_by_model_and_day(flt: UsageFilter) -> list[dict[str, Any]]:
    """Tokens per (day, model), for the stacked chart."""
    return _grouped(flt, ("day", "model"), ("day", "model"))


def error_types(flt: UsageFilter) -> list[dict[str, Any]]:
    """Failed and refused requests by status and error type (budget, quota, backend...)."""
    rows = (
        flt.daily()
        .exclude(status="ok")
        .values("status", "error_type")
        .annotate(requests=Sum("requests"))
        .order_by("status", "error_type")
    )
    return [dict(r) for r in rows]
