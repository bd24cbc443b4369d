"""Every record is added to its day's sums as it is inserted, exactly once."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from llmserver.runtime.usage import insert
from tenants.models import UsageDaily, UsageRecord
from tenants.models.usage_daily import roll_up_sql
from tenants.reports.queries import UsageFilter
from tests.reports.usage_data import at, load, record
from tests.retention.world import MONTH, from_records, spread

Sums = dict[tuple[Any, ...], tuple[int, int, int, Any]]
KEY = ("tenant_id", "user", "model", "band", "status", "endpoint", "error_type")


def daily_sums(*fields: str) -> Sums:
    out: Sums = {}
    for row in UsageDaily.objects.values(
        *fields, "requests", "prompt_tokens", "completion_tokens", "cost"
    ):
        key = tuple(row[f] for f in fields)
        n, p, c, cost = out.get(key, (0, 0, 0, 0))
        out[key] = (
            n + row["requests"],
            p + row["prompt_tokens"],
            c + row["completion_tokens"],
            cost + row["cost"],
        )
    return out


def test_the_daily_sums_equal_the_records_to_the_cent(cast: Any) -> None:
    spread(cast)
    assert daily_sums("key_id", *KEY) == from_records(MONTH, "api_key_id", *KEY)


def test_a_record_counts_on_the_utc_day_it_was_queued(cast: Any) -> None:
    load(cast)  # r0 at 02-28 23:59:59, r8 at 03-04 00:00 exactly
    by_day = {day: sums[0] for (day,), sums in daily_sums("day").items()}
    assert by_day == {
        at(2, 28).date(): 1,
        at(3, 1).date(): 2,
        at(3, 2).date(): 3,
        at(3, 3).date(): 2,
        at(3, 4).date(): 1,
    }


def test_a_batch_inserted_in_one_statement_adds_each_record_once(cast: Any) -> None:
    load(cast)
    alice = list(UsageRecord.objects.filter(user="alice"))
    for r in alice:
        r.pk, r.request_id = None, f"{r.request_id}-again"
    insert(alice)  # the usage writer's multi-row INSERT
    assert daily_sums("user")[("alice",)][0] == 2 * len(alice)


def test_a_record_without_a_key_is_summed_under_key_zero(cast: Any) -> None:
    record("keyless", cast.acme, "alice", "llama", at(3, 1), 10, 10)
    assert daily_sums("key_id") == {(0,): (1, 10, 10, 0)}


def test_the_upgrade_sums_the_records_kept_before_it(cast: Any) -> None:
    """Migration 0022 adds the records already there once; the trigger adds those after."""
    load(cast)
    summed = daily_sums("key_id", *KEY)
    UsageDaily.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(roll_up_sql(UsageRecord._meta.db_table))
    assert daily_sums("key_id", *KEY) == summed
    assert summed == from_records(UsageFilter(at(1, 1).date(), at(4, 1).date()), "api_key_id", *KEY)


@pytest.mark.django_db(transaction=True)
def test_migrating_back_past_the_sums_and_forward_again_counts_each_record_once(cast: Any) -> None:
    spread(cast)
    summed = daily_sums("key_id", *KEY)
    call_command("migrate", "tenants", "0021", verbosity=0)
    call_command("migrate", "tenants", verbosity=0)
    assert daily_sums("key_id", *KEY) == summed
