"""Usage retention: per-request records older than `USAGE_RETENTION_DAYS` whole UTC days are
deleted, a bounded batch at a time.

Their sums are already in the daily rows (a trigger added each record as it was inserted,
tenants/models/usage_daily.py), so pruning only deletes: there is nothing to roll up, so nothing
a crash could leave half rolled, and running it twice deletes nothing more. Each batch is one
short statement (its own transaction), so a prune never holds a long lock and usage writes go on
between batches; on PostgreSQL concurrent pruners take rows the others have not locked. Nothing
is deleted while the trigger is missing: a record not summed would be lost from the bill.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from django.db import connection

from tenants.models import StoredResponse, UsageRecord
from tenants.models.usage_daily import rollup_trigger_installed

BATCH = 5000
# The least retention: hourly and per-minute quota windows, the latency percentiles and the
# per-request list read per-request rows; whatever spans whole days reads the daily sums.
MIN_DAYS = 1


class RetentionError(Exception):
    """Pruning would lose usage: a retention too short, or inserts not being summed."""


def cutoff(now: datetime, days: int) -> datetime:
    """Records queued before this go: midnight (UTC) `days` whole days before today's."""
    return datetime.combine(now.astimezone(UTC).date() - timedelta(days=days), time.min, UTC)


def check(days: int) -> None:
    """Raise `RetentionError` unless records older than `days` may be deleted."""
    if days < MIN_DAYS:
        raise RetentionError(
            f"a retention of {days} days is shorter than {MIN_DAYS}: hourly and "
            "per-minute quota windows count per-request usage rows."
        )
    if not rollup_trigger_installed():
        raise RetentionError(
            "the daily usage trigger is missing, so deleted records would be lost from the bill: "
            "run `manage.py migrate`, which installs it."
        )


def prunable(before: datetime) -> int:
    """How many records a prune up to `before` would delete."""
    return UsageRecord.objects.filter(queued_at__lt=before).count()


def prune_batch(before: datetime, size: int = BATCH) -> int:
    """Delete up to `size` records queued before `before`; returns how many went. One statement,
    so one short transaction, whose rows the `queued_at` index finds."""
    table = connection.ops.quote_name(UsageRecord._meta.db_table)
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE id IN "
            f"(SELECT id FROM {table} WHERE queued_at < %s LIMIT %s{lock})",
            [connection.ops.adapt_datetimefield_value(before), size],
        )
        return max(int(cursor.rowcount), 0)


def prune_responses(now: datetime) -> int:
    """Forget the Responses state past its retention (each row's `expires_at`); how many went.
    Expired rows are already not found, so this only gives the space back."""
    deleted, _ = StoredResponse.objects.filter(expires_at__lte=now).delete()
    return deleted
