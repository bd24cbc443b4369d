"""Every report aggregate against the hand-computed values of `usage_data` (see its table)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from tenants.reports.latency import latency_by_band, nearest_rank
from tenants.reports.queries import (
    UsageFilter,
    error_types,
    tokens_by_model_and_day,
    usage_by,
    usage_totals,
)
from tests.reports.usage_data import END, START, load

D = Decimal


def measures(rows: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:
    return [
        (
            *(r[k] for k in keys),
            r["requests"],
            r["refused"],
            r["prompt_tokens"],
            r["completion_tokens"],
            r["cost"],
        )
        for r in rows
    ]


@pytest.fixture
def data(cast: Any) -> Any:
    load(cast)
    return cast


def test_it_sums_usage_per_tenant(data: Any) -> None:
    rows = usage_by("tenant", UsageFilter(START, END))
    assert measures(rows, "tenant") == [
        ("acme", 5, 1, 8000, 4000, D("0.016")),
        ("globex", 1, 0, 10000, 10000, D("0.09")),
    ]


def test_it_sums_usage_per_user_within_each_tenant(data: Any) -> None:
    rows = usage_by("user", UsageFilter(START, END))
    assert measures(rows, "tenant", "user") == [
        ("acme", "alice", 3, 1, 6000, 3000, D("0.012")),
        ("acme", "bob", 2, 0, 2000, 1000, D("0.004")),
        ("globex", "charlie", 1, 0, 10000, 10000, D("0.09")),
    ]


def test_it_prices_each_model_at_the_price_of_the_day(data: Any) -> None:
    rows = usage_by("model", UsageFilter(START, END))
    assert measures(rows, "model") == [
        ("llama", 5, 1, 14000, 12000, D("0.102")),
        ("mistral", 1, 0, 4000, 2000, D("0.004")),
    ]


def test_it_groups_by_utc_day(data: Any) -> None:
    rows = usage_by("day", UsageFilter(START, END))
    assert measures(rows, "day") == [
        (date(2025, 3, 1), 2, 0, 3000, 1500, D("0.006")),
        (date(2025, 3, 2), 3, 0, 15000, 12500, D("0.1")),
        (date(2025, 3, 3), 1, 1, 0, 0, D("0")),
    ]


def test_it_keeps_utc_days_whatever_the_time_zone(data: Any, settings: Any) -> None:
    settings.TIME_ZONE = "America/New_York"
    rows = usage_by("day", UsageFilter(START, END))
    assert [r["day"] for r in rows] == [date(2025, 3, 1), date(2025, 3, 2), date(2025, 3, 3)]
    assert rows[0]["requests"] == 2


def test_it_totals_the_range(data: Any) -> None:
    totals = usage_totals(UsageFilter(START, END))
    assert (totals["requests"], totals["refused"]) == (6, 1)
    assert (totals["total_tokens"], totals["cost"]) == (32000, D("0.106"))


def test_it_counts_requests_by_status(data: Any) -> None:
    rows = usage_by("status", UsageFilter(START, END))
    assert [(r["status"], r["requests"], r["refused"]) for r in rows] == [
        ("error", 1, 0),
        ("ok", 5, 0),
        ("rejected", 0, 1),
    ]


def test_it_filters_by_tenant_model_and_user(data: Any) -> None:
    flt = UsageFilter(START, END, tenant_id=data.acme.pk, model="llama", user="alice")
    assert measures(usage_by("day", flt), "day") == [
        (date(2025, 3, 1), 1, 0, 1000, 500, D("0.002")),
        (date(2025, 3, 2), 1, 0, 1000, 500, D("0.006")),
        (date(2025, 3, 3), 0, 1, 0, 0, D("0")),
    ]


def test_it_splits_tokens_by_model_and_day(data: Any) -> None:
    rows = tokens_by_model_and_day(UsageFilter(START, END, tenant_id=data.acme.pk))
    assert [(r["day"].day, r["model"], r["total_tokens"]) for r in rows] == [
        (1, "llama", 4500),
        (2, "llama", 1500),
        (2, "mistral", 6000),
        (3, "llama", 0),
    ]


def test_it_lists_failures_by_error_type(data: Any) -> None:
    assert error_types(UsageFilter(START, END)) == [
        {"status": "error", "error_type": "", "requests": 1},
        {"status": "rejected", "error_type": "", "requests": 1},
    ]


def test_it_takes_nearest_rank_offsets() -> None:
    assert [nearest_rank(p, 5) for p in (50, 90, 99)] == [2, 4, 4]
    assert [nearest_rank(p, 4) for p in (50, 90, 99)] == [1, 3, 3]
    assert nearest_rank(50, 1) == 0


def test_it_computes_wait_and_ttft_percentiles_per_band(data: Any) -> None:
    rows = latency_by_band(UsageFilter(START, END))
    got = [(r["band"], r["metric"], r["count"], r["p50"], r["p90"], r["p99"]) for r in rows]
    assert got == [
        (0, "wait", 5, 2.0, 4.0, 4.0),  # 1, 1, 2, 3, 4 (r1, r5, r4, r2, r7)
        (0, "ttft", 4, 4.0, 6.0, 6.0),  # 2, 4, 5, 6 (r1, r4, r2, r7)
        (2, "wait", 1, 10.0, 10.0, 10.0),
        (2, "ttft", 1, 12.0, 12.0, 12.0),
    ]
