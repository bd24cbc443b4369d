"""Delete per-request usage records past the retention, in bounded batches.

The gateway runs the same pruning every hour (llmserver/runtime/pruning.py), with the same
setting; this command is for a dry run, a first prune after an upgrade, or a deployment that
keeps no gateway running.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from llmserver.conf import gateway_settings
from tenants.retention import BATCH, RetentionError, check, cutoff, prunable, prune_batch


class Command(BaseCommand):
    help = (
        "Delete usage records older than the retention (USAGE_RETENTION_DAYS) in batches; "
        "their sums stay in the daily rows every report, budget and quota reads."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days", type=int, metavar="N", help="Keep N whole UTC days (default: the setting)."
        )
        parser.add_argument("--batch-size", type=int, default=BATCH, metavar="ROWS")
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(
        self, *args: Any, days: int | None, batch_size: int, dry_run: bool, **options: Any
    ) -> None:
        days = gateway_settings().usage_retention_days if days is None else days
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            check(days)
        except RetentionError as exc:
            raise CommandError(str(exc)) from None
        before = cutoff(timezone.now(), days)
        if dry_run:
            self.stdout.write(
                f"would delete {prunable(before)} usage records queued before {before}"
            )
            return
        started, deleted, batches = time.monotonic(), 0, 0
        while n := prune_batch(before, batch_size):
            deleted, batches = deleted + n, batches + 1
        seconds = time.monotonic() - started
        self.stdout.write(
            f"deleted {deleted} usage records queued before {before} in {batches} batches "
            f"({seconds:.1f} s)"
        )
