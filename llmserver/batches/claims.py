"""The runner's hold on a batch, in the database: of several gateway processes, one runs it.

A process claims a batch by one conditional UPDATE (free, or its lease run out), which the
database applies to one row atomically whatever the engine; it renews the lease with each
progress report, and every later write of its own is conditional on still holding it. A process
that stops cleanly releases its batches at once; one that dies loses them when the lease ends
(`BATCH_LEASE_SECONDS`), and another process (or its own restart) resumes them. Plain functions
for `run_db`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from tenants.models import Batch, BatchStatus, FilePurpose, StoredFile
from tenants.models.batches import ACTIVE_STATUSES


@dataclass(frozen=True, slots=True)
class Progress:
    completed: int
    failed: int
    input_tokens: int
    output_tokens: int

    def fields(self) -> dict[str, int]:
        return {
            "completed": self.completed,
            "failed": self.failed,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


@dataclass(frozen=True, slots=True)
class Output:
    """One of a batch's output files: which of the two, where it lies, how big."""

    field: str  # "output_file_id" or "error_file_id"
    storage_name: str
    size: int


def _free(now: datetime) -> Q:
    return Q(runner="") | Q(lease_until__isnull=True) | Q(lease_until__lt=now)


def claimable(limit: int, running_here: Collection[str]) -> list[str]:
    """Batches no process holds, oldest first."""
    rows = Batch.objects.filter(status__in=ACTIVE_STATUSES).filter(_free(timezone.now()))
    rows = rows.exclude(pk__in=list(running_here)).order_by("created_at")
    return list(rows.values_list("pk", flat=True)[:limit])


def claim(batch_id: str, token: str, lease_seconds: float) -> Batch | None:
    now = timezone.now()
    taken = (
        Batch.objects.filter(pk=batch_id, status__in=ACTIVE_STATUSES)
        .filter(_free(now))
        .update(runner=token, lease_until=now + timedelta(seconds=lease_seconds))
    )
    return Batch.objects.get(pk=batch_id) if taken else None


def renew(batch_id: str, token: str, lease_seconds: float, progress: Progress) -> str | None:
    """Report progress and extend the lease; the batch's status now (a cancel shows here), or
    None if this process no longer holds it."""
    until = timezone.now() + timedelta(seconds=lease_seconds)
    held = Batch.objects.filter(pk=batch_id, runner=token).update(
        lease_until=until, **progress.fields()
    )
    if not held:
        return None
    return Batch.objects.filter(pk=batch_id).values_list("status", flat=True).first()


def release(batch_id: str, token: str) -> None:
    Batch.objects.filter(pk=batch_id, runner=token).update(runner="", lease_until=None)


def begin(batch_id: str, token: str, total: int, model: str) -> bool:
    """Validated: `in_progress` (False if it was cancelled meanwhile)."""
    return bool(
        Batch.objects.filter(pk=batch_id, runner=token, status=BatchStatus.VALIDATING).update(
            status=BatchStatus.IN_PROGRESS, in_progress_at=timezone.now(), total=total, model=model
        )
    )


def finalizing(batch_id: str, token: str) -> bool:
    """Every line answered: `finalizing` (False if it was cancelled meanwhile)."""
    return bool(
        Batch.objects.filter(pk=batch_id, runner=token, status=BatchStatus.IN_PROGRESS).update(
            status=BatchStatus.FINALIZING, finalizing_at=timezone.now()
        )
    )


_ENDED_AT = {
    BatchStatus.COMPLETED: "completed_at",
    BatchStatus.FAILED: "failed_at",
    BatchStatus.EXPIRED: "expired_at",
    BatchStatus.CANCELLED: "cancelled_at",
}


def finish(
    batch_id: str,
    token: str,
    status: BatchStatus,
    progress: Progress | None,
    outputs: tuple[Output, ...] = (),
    errors: list[dict[str, Any]] | None = None,
) -> bool:
    """The batch's end, in one transaction: its output files become files of its owner's, and
    the batch takes its final status and lets go of its runner. False: not ours any more."""
    with transaction.atomic():
        batch = Batch.objects.select_for_update().filter(pk=batch_id, runner=token).first()
        if batch is None:
            return False
        for output in outputs:
            if output.size == 0:
                continue
            stored = StoredFile.objects.create(
                tenant_id=batch.tenant_id,
                api_key_id=batch.api_key_id,
                user=batch.user,
                filename=f"{batch_id}_{'output' if output.field == 'output_file_id' else 'error'}.jsonl",
                purpose=FilePurpose.BATCH_OUTPUT,
                bytes=output.size,
                storage_name=output.storage_name,
            )
            setattr(batch, output.field, stored.pk)
        if progress is not None:
            for name, value in progress.fields().items():
                setattr(batch, name, value)
        if errors is not None:
            batch.errors = errors
        batch.status = status
        setattr(batch, _ENDED_AT[status], timezone.now())
        batch.runner, batch.lease_until = "", None
        batch.save()
    return True
