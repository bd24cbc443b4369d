"""The runner's hold on a batch, in the database: of several gateway processes, one runs it.

A process claims a batch by one conditional UPDATE (free, or its lease run out), which the
database applies to one row atomically whatever the engine; it renews the lease with each
progress report, and every later write of its own is conditional on still holding it. A process
that stops cleanly releases its batches at once; one that dies loses them when the lease ends
(`BATCH_LEASE_SECONDS`), and another process (or its own restart) resumes them. Plain functions
for `run_db`.

SQLite has one writer at a time. A write that finds another under way waits the connection's
timeout, but a transaction that has read and must then write is refused at once (SQLite does not
wait where waiting could deadlock), and an in-memory database with a shared cache refuses every
conflicting statement at once. Several batches ending together met exactly that, and a run that
was only waiting its turn was logged as failed. So `finish` writes first, and every function
here waits and tries again while SQLite says "locked" (`LOCK_PATIENCE`): each is one conditional
statement or one transaction, safe to repeat.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from tenants.models import Batch, BatchStatus, FilePurpose, StoredFile
from tenants.models.batches import ACTIVE_STATUSES

P = ParamSpec("P")
R = TypeVar("R")
LOCK_PATIENCE = 10.0  # seconds; past that a locked database is a failure, and logged as one


def waits_its_turn(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, tried again (backing off) while SQLite answers "database is locked"."""

    @functools.wraps(fn)
    def patient(*args: P.args, **kwargs: P.kwargs) -> R:
        deadline, delay = time.monotonic() + LOCK_PATIENCE, 0.01
        while True:
            try:
                return fn(*args, **kwargs)
            except OperationalError as exc:
                locked = connection.vendor == "sqlite" and "locked" in str(exc)
                if not locked or connection.in_atomic_block or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    return patient


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


@waits_its_turn
def claimable(limit: int, running_here: Collection[str]) -> list[str]:
    """Batches no process holds, oldest first."""
    rows = Batch.objects.filter(status__in=ACTIVE_STATUSES).filter(_free(timezone.now()))
    rows = rows.exclude(pk__in=list(running_here)).order_by("created_at")
    return list(rows.values_list("pk", flat=True)[:limit])


@waits_its_turn
def claim(batch_id: str, token: str, lease_seconds: float) -> Batch | None:
    now = timezone.now()
    taken = (
        Batch.objects.filter(pk=batch_id, status__in=ACTIVE_STATUSES)
        .filter(_free(now))
        .update(runner=token, lease_until=now + timedelta(seconds=lease_seconds))
    )
    return Batch.objects.get(pk=batch_id) if taken else None


@waits_its_turn
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


@waits_its_turn
def release(batch_id: str, token: str) -> None:
    Batch.objects.filter(pk=batch_id, runner=token).update(runner="", lease_until=None)


@waits_its_turn
def begin(batch_id: str, token: str, total: int, model: str) -> bool:
    """Validated: `in_progress` (False if it was cancelled meanwhile)."""
    return bool(
        Batch.objects.filter(pk=batch_id, runner=token, status=BatchStatus.VALIDATING).update(
            status=BatchStatus.IN_PROGRESS, in_progress_at=timezone.now(), total=total, model=model
        )
    )


@waits_its_turn
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


@waits_its_turn
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
        # Written first, so SQLite takes its write lock before any read (see the module);
        # PostgreSQL locks the row, as a SELECT FOR UPDATE would.
        held = Batch.objects.filter(pk=batch_id, runner=token).update(lease_until=timezone.now())
        batch = Batch.objects.filter(pk=batch_id, runner=token).first()
        if not held or batch is None:
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
