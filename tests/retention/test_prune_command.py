"""`manage.py prune_usage`: the retention from the settings, a dry run, and its refusals."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tenants.models import UsageRecord
from tenants.retention import cutoff
from tests.reports.usage_data import load, record


def prune_usage(*args: str) -> str:
    out = StringIO()
    call_command("prune_usage", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_counts_what_would_go_and_deletes_nothing(cast: Any) -> None:
    load(cast)
    assert "would delete 9 usage records queued before" in prune_usage("--dry-run")
    assert UsageRecord.objects.count() == 9


def test_it_keeps_the_days_the_setting_says(cast: Any, settings: Any) -> None:
    settings.LLMSERVER = {**settings.LLMSERVER, "USAGE_RETENTION_DAYS": 3}
    load(cast)  # March 2025: long past
    kept = record("recent", cast.acme, "alice", "llama", cutoff(timezone.now(), 3), 10, 10)
    assert "deleted 9 usage records" in prune_usage()
    assert list(UsageRecord.objects.all()) == [kept]


def test_days_on_the_command_line_override_the_setting(cast: Any) -> None:
    record("old", cast.acme, "alice", "llama", cutoff(timezone.now(), 2), 10, 10)
    assert "deleted 0 usage records" in prune_usage("--days", "3")
    assert "deleted 1 usage records" in prune_usage("--days", "1")


def test_it_refuses_a_retention_shorter_than_a_day(db: None) -> None:
    with pytest.raises(CommandError, match="shorter than 1"):
        prune_usage("--days", "0")
