"""Queue wait and time-to-first-token percentiles per band, computed in the database.

SQLite has no `percentile_cont`, so both databases use the same portable method: count the
band's rows, then fetch the value at the nearest-rank offset (`ceil(p * n) - 1`) of the rows
ordered by the duration. That is one small query per band and percentile, never a Python loop
over the rows, and both databases give the same answer.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.db.models import DurationField, ExpressionWrapper, F, QuerySet

from tenants.models import Band
from tenants.reports.queries import UsageFilter

PERCENTILES = (50, 90, 99)
METRICS = {
    "wait": ("dispatched_at", "queue wait"),
    "ttft": ("first_token_at", "time to first token"),
}


def nearest_rank(p: int, n: int) -> int:
    """The zero-based offset of the p-th percentile among n ordered values."""
    return max(math.ceil(p / 100 * n) - 1, 0)


def _durations(flt: UsageFilter, band: int, end_field: str) -> QuerySet[Any]:
    return (
        flt.records()
        .filter(band=band, **{f"{end_field}__isnull": False})
        .annotate(
            duration=ExpressionWrapper(F(end_field) - F("queued_at"), output_field=DurationField())
        )
        .order_by("duration", "pk")
    )


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else round(value.total_seconds(), 3)


def latency_by_band(flt: UsageFilter) -> list[dict[str, Any]]:
    """Rows of (band, metric, count, p50, p90, p99) in seconds, for bands that have data."""
    out: list[dict[str, Any]] = []
    for band in Band:
        for metric, (end_field, label) in METRICS.items():
            qs = _durations(flt, int(band), end_field)
            n = qs.count()
            if not n:
                continue
            row: dict[str, Any] = {
                "band": int(band),
                "band_name": band.label,
                "metric": metric,
                "metric_name": label,
                "count": n,
            }
            for p in PERCENTILES:
                value = qs.values_list("duration", flat=True)[nearest_rank(p, n)]
                row[f"p{p}"] = _seconds(value)
            out.append(row)
    return out
