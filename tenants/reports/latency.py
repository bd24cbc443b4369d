"""Queue wait and time-to-first-token percentiles per band, computed in the database.

Percentiles cannot be summed by day, so these read the records still kept (the retention's
days). Both databases give the nearest-rank value (`ceil(p * n) - 1`, zero-based). PostgreSQL
computes every band's and metric's in one pass (`percentile_disc`, which is nearest rank): the
report's default 30 days are about a million records at a year's scale, and one query per band,
metric and percentile sorted them 24 times (docs/BENCHMARKS.md, "Usage at a year's scale").
SQLite has no percentiles: it counts the band's rows, then fetches the value at the offset of
the rows ordered by the duration, one small query per band and percentile.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import connection
from django.db.models import Aggregate, Count, DurationField, ExpressionWrapper, F, QuerySet

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


class _Percentiles(Aggregate):
    """PostgreSQL's nearest-rank percentiles of a duration, NULLs left out: a list of them."""

    function = "percentile_disc"
    template = "%(function)s(ARRAY[{}]) WITHIN GROUP (ORDER BY %(expressions)s)".format(
        ", ".join(str(p / 100) for p in PERCENTILES)
    )
    output_field = ArrayField(DurationField())


def _row(band: int, metric: str, n: int, values: list[timedelta | None]) -> dict[str, Any]:
    return {
        "band": band,
        "band_name": Band(band).label,
        "metric": metric,
        "metric_name": METRICS[metric][1],
        "count": n,
        **{f"p{p}": _seconds(v) for p, v in zip(PERCENTILES, values, strict=True)},
    }


def _in_one_pass(flt: UsageFilter) -> list[dict[str, Any]]:
    measures: dict[str, Any] = {}
    for metric, (end_field, _) in METRICS.items():
        measures[f"{metric}_n"] = Count(end_field)
        measures[metric] = _Percentiles(F(end_field) - F("queued_at"))
    grouped: QuerySet[Any] = flt.records().values("band").annotate(**measures).order_by("band")
    return [
        _row(r["band"], metric, r[f"{metric}_n"], r[metric])
        for r in grouped
        for metric in METRICS
        if r[f"{metric}_n"]
    ]


def latency_by_band(flt: UsageFilter) -> list[dict[str, Any]]:
    """Rows of (band, metric, count, p50, p90, p99) in seconds, for bands that have data."""
    if connection.vendor == "postgresql":
        return _in_one_pass(flt)
    out: list[dict[str, Any]] = []
    for band in Band:
        for metric, (end_field, _) in METRICS.items():
            qs = _durations(flt, int(band), end_field)
            n = qs.count()
            if not n:
                continue
            values = [
                qs.values_list("duration", flat=True)[nearest_rank(p, n)] for p in PERCENTILES
            ]
            out.append(_row(int(band), metric, n, values))
    return out
