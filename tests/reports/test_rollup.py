"""The roll-up turns old records into daily rows, deletes them, and reports stay the same."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tenants.models import UsageDaily, UsageRecord
from tenants.reports.queries import UsageFilter, usage_by, usage_totals
from tests.reports.usage_data import END, START, at, load, record


def rollup(*args: str) -> str:
    out = StringIO()
    call_command("rollup_usage", *args, stdout=out)
    return out.getvalue()


def test_it_keeps_the_reports_identical_after_rolling_up(cast: Any) -> None:
    load(cast)
    flt = UsageFilter(START, END)
    record("e1", cast.acme, "alice", "llama", at(3, 2), 500, 0, endpoint="embeddings")
    dimensions = ("tenant", "user", "model", "day", "status", "endpoint")
    before = {d: usage_by(d, flt) for d in dimensions}
    totals = usage_totals(flt)
    rollup("--older-than", "60")
    assert UsageRecord.objects.count() == 0
    assert {d: usage_by(d, flt) for d in before} == before
    assert usage_totals(flt) == totals


def test_it_writes_one_row_per_day_tenant_user_model_band_and_status(cast: Any) -> None:
    load(cast)
    rollup("--older-than", "60")
    assert UsageDaily.objects.count() == 9
    row = UsageDaily.objects.get(day="2025-03-02", user="charlie")
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (1, 10000, 10000)


def test_it_adds_to_existing_rows_when_run_twice(cast: Any) -> None:
    load(cast)
    rollup("--older-than", "60")
    from tests.reports.usage_data import at, record

    record("late", cast.globex, "charlie", "llama", at(3, 2, 16), 1000, 1000, api_key=cast.charlie)
    rollup("--older-than", "60")
    row = UsageDaily.objects.get(day="2025-03-02", user="charlie")
    assert (row.requests, row.prompt_tokens) == (2, 11000)


def test_it_changes_nothing_on_a_dry_run(cast: Any) -> None:
    load(cast)
    assert "would roll up 9 records over 5 days" in rollup("--older-than", "60", "--dry-run")
    assert UsageRecord.objects.count() == 9


def test_it_keeps_recent_records(cast: Any) -> None:
    load(cast)
    from tests.reports.usage_data import record

    record("recent", cast.acme, "alice", "llama", timezone.now() - timedelta(days=1), 10, 10)
    rollup("--older-than", "60")
    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["recent"]


def test_it_refuses_to_reach_into_the_current_month(cast: Any) -> None:
    with pytest.raises(CommandError):
        rollup("--older-than", "0")
