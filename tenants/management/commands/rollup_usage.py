"""Roll usage records older than N days up into daily aggregates, and delete them.

Records are kept forever unless the operator runs this. Each day is summarised and its records
deleted in one transaction, so a report never counts a day twice or loses one. The cut-off may not
reach into the current calendar month: quota and budget checks read only the raw records.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.db.models import Count, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from tenants.models import UsageDaily, UsageRecord
from tenants.models.rules import Window, window_start


class Command(BaseCommand):
    help = "Roll usage records older than --older-than days into daily rows and delete them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=int, default=90, metavar="DAYS")
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be rolled up; change nothing."
        )

    def handle(self, *args: Any, older_than: int, dry_run: bool, **options: Any) -> None:
        now = timezone.now()
        cutoff = datetime.combine((now - timedelta(days=older_than)).date(), time.min, tzinfo=UTC)
        if older_than < 1 or cutoff > window_start(Window.MONTH, now):
            raise CommandError(
                "--older-than must leave the current month untouched: quotas and budgets read it."
            )
        old = UsageRecord.objects.filter(queued_at__lt=cutoff)
        days = sorted(
            old.annotate(d=TruncDate("queued_at", tzinfo=UTC))
            .order_by("d")
            .values_list("d", flat=True)
            .distinct()
        )
        if dry_run:
            self.stdout.write(f"would roll up {old.count()} records over {len(days)} days")
            return
        records = rows = 0
        for day in days:
            r, n = self._roll_day(day)
            records, rows = records + r, rows + n
        self.stdout.write(f"rolled {records} records into {rows} daily rows over {len(days)} days")

    @transaction.atomic
    def _roll_day(self, day: Any) -> tuple[int, int]:
        since = datetime.combine(day, time.min, tzinfo=UTC)
        qs = UsageRecord.objects.filter(queued_at__gte=since, queued_at__lt=since + timedelta(1))
        groups = (
            qs.values("tenant_id", "user", "model", "band", "status", "endpoint")
            .annotate(
                n=Count("id"),
                p=Sum("prompt_tokens"),
                c=Sum("completion_tokens"),
                cost=Sum("cost"),
            )
            .order_by()
        )
        made = 0
        for g in groups:
            row, _ = UsageDaily.objects.select_for_update().get_or_create(
                day=day,
                tenant_id=g["tenant_id"],
                user=g["user"],
                model=g["model"],
                band=g["band"],
                status=g["status"],
                endpoint=g["endpoint"],
            )
            row.requests += g["n"]
            row.prompt_tokens += g["p"] or 0
            row.completion_tokens += g["c"] or 0
            row.cost += g["cost"] or 0
            row.save()
            made += 1
        deleted, _ = qs.delete()
        return deleted, made
