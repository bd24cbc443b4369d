"""Pruning deletes old records in bounded batches and changes no figure the product shows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from tenants.models import UsageDaily, UsageRecord
from tenants.models.usage_daily import drop_rollup_trigger, install_rollup_trigger
from tenants.retention import RetentionError, check, cutoff, prune_batch
from tests.retention.world import NOW, everything, records, spread


def prune(days: int, size: int = 5000) -> int:
    check(days)
    before, deleted = cutoff(NOW, days), 0
    while n := prune_batch(before, size):
        deleted += n
    return deleted


def test_it_deletes_the_records_older_than_the_retention_and_keeps_the_rest(cast: Any) -> None:
    spread(cast)
    before = cutoff(NOW, 7)
    old = UsageRecord.objects.filter(queued_at__lt=before).count()
    kept = records() - old
    assert prune(7) == old > 0
    assert records() == kept
    assert not UsageRecord.objects.filter(queued_at__lt=before).exists()


def test_the_cutoff_is_midnight_utc_whole_days_back() -> None:
    assert cutoff(NOW, 7) == NOW.replace(day=13, hour=0, minute=0)


def test_a_batch_deletes_no_more_than_its_size(cast: Any) -> None:
    spread(cast)
    start = records()
    assert prune_batch(cutoff(NOW, 1), 10) == 10
    assert records() == start - 10


def test_pruning_again_deletes_nothing_and_keeps_the_sums(cast: Any) -> None:
    spread(cast)
    prune(1)
    sums = list(UsageDaily.objects.order_by("pk").values())
    assert prune(1) == 0
    assert list(UsageDaily.objects.order_by("pk").values()) == sums


def test_every_report_budget_and_quota_is_the_same_after_pruning_to_one_day(cast: Any) -> None:
    spread(cast)
    before = everything(cast)
    assert prune(1) > 0
    assert everything(cast) == before


def test_a_prune_stopped_halfway_through_a_day_changes_nothing_shown(cast: Any) -> None:
    spread(cast)
    before = everything(cast)
    assert prune_batch(cutoff(NOW, 1), 3) == 3
    assert everything(cast) == before


def test_the_monthly_budget_counts_the_pruned_days(cast: Any) -> None:
    spread(cast)
    spent = everything(cast)["budget"]
    prune(1)
    assert not UsageRecord.objects.filter(queued_at__lt=NOW - timedelta(days=2)).exists()
    assert everything(cast)["budget"] == spent > 0


def test_it_refuses_a_retention_shorter_than_a_day() -> None:
    with pytest.raises(RetentionError, match="shorter than 1"):
        check(0)


@pytest.mark.django_db(transaction=True)
def test_it_deletes_nothing_while_inserts_are_not_summed(cast: Any) -> None:
    spread(cast)
    drop_rollup_trigger(connection.alias)
    try:
        with pytest.raises(RetentionError, match="trigger is missing"):
            check(1)
    finally:
        install_rollup_trigger(connection.alias)
    check(1)
