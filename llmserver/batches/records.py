"""The database side of `/v1/files` and `/v1/batches`, always as one key sees them.

Plain functions for `run_db` (worker threads). Every lookup is by id *and* what the key sees
(its tenant, and its user unless it is its tenant administrator's: `tenants/visibility.py`), so
another tenant's or another user's id is simply not found (404), never "forbidden".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from llmserver.batches.validation import COMPLETION_WINDOWS, CreateRequest
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.errors import (
    batch_not_found,
    cannot_cancel,
    file_in_use,
    file_not_found,
    invalid,
)
from tenants.models import Batch, BatchStatus, FilePurpose, StoredFile
from tenants.models.batches import ACTIVE_STATUSES

M = TypeVar("M", bound=Model)


def _seen(rows: QuerySet[M], key: KeyInfo) -> QuerySet[M]:
    """The rows of `rows` (files or batches) that `key` sees."""
    rows = rows.filter(tenant_id=key.tenant_id)
    return rows if key.sees_tenant else rows.filter(user=key.user)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: `after` is the id the previous page ended with."""

    after: str | None
    limit: int
    ascending: bool = False


def _page(rows: QuerySet[M], page: Page) -> tuple[list[M], bool]:
    """Newest first (or oldest, `ascending`), from just past `page.after`; and whether there is
    more after this page."""
    if page.after:
        anchor = rows.filter(pk=page.after).values_list("created_at", flat=True).first()
        if anchor is None:
            raise invalid(f"'after' names no object of this list: {page.after!r}.", "after")
        if page.ascending:
            rows = rows.filter(Q(created_at__gt=anchor) | Q(created_at=anchor, pk__gt=page.after))
        else:
            rows = rows.filter(Q(created_at__lt=anchor) | Q(created_at=anchor, pk__lt=page.after))
    order = ("created_at", "pk") if page.ascending else ("-created_at", "-pk")
    found = list(rows.order_by(*order)[: page.limit + 1])
    return list(found[: page.limit]), len(found) > page.limit


# files --------------------------------------------------------------------------------------


def create_file(
    key: KeyInfo, file_id: str, filename: str, purpose: str, size: int, storage_name: str
) -> StoredFile:
    return StoredFile.objects.create(
        id=file_id,
        tenant_id=key.tenant_id,
        api_key_id=key.key_id,
        user=key.user,
        filename=filename,
        purpose=purpose,
        bytes=size,
        storage_name=storage_name,
    )


def get_file(key: KeyInfo, file_id: str) -> StoredFile:
    found = _seen(StoredFile.objects.all(), key).filter(pk=file_id).first()
    if found is None:
        raise file_not_found(file_id)
    return found


def list_files(key: KeyInfo, purpose: str | None, page: Page) -> tuple[list[StoredFile], bool]:
    rows = _seen(StoredFile.objects.all(), key)
    if purpose:
        rows = rows.filter(purpose=purpose)
    return _page(rows, page)


def delete_file(key: KeyInfo, file_id: str) -> str:
    """Forget the file; returns where its bytes lie, for the store to delete them. The input of
    a batch still running (anyone's in the tenant) is refused: the runner reads it until the
    batch ends."""
    found = get_file(key, file_id)
    running = (
        Batch.objects.filter(tenant_id=key.tenant_id, input_file_id=file_id)
        .filter(status__in=ACTIVE_STATUSES)
        .values_list("pk", flat=True)
        .first()
    )
    if running is not None:
        raise file_in_use(file_id, running)
    found.delete()
    return found.storage_name


# batches ------------------------------------------------------------------------------------


def create_batch(key: KeyInfo, req: CreateRequest) -> Batch:
    source = _seen(StoredFile.objects.all(), key).filter(pk=req.input_file_id).first()
    if source is None:
        raise file_not_found(req.input_file_id)
    if source.purpose != FilePurpose.BATCH:
        raise invalid(
            f"The file {source.pk} was not uploaded for the purpose 'batch'.", "input_file_id"
        )
    now = timezone.now()
    return Batch.objects.create(
        tenant_id=key.tenant_id,
        api_key_id=key.key_id,
        user=key.user,
        endpoint=req.endpoint,
        input_file_id=req.input_file_id,
        completion_window=req.completion_window,
        metadata=req.metadata,
        expires_at=now + timedelta(seconds=COMPLETION_WINDOWS[req.completion_window]),
    )


def get_batch(key: KeyInfo, batch_id: str) -> Batch:
    found = _seen(Batch.objects.all(), key).filter(pk=batch_id).first()
    if found is None:
        raise batch_not_found(batch_id)
    return found


def list_batches(key: KeyInfo, page: Page) -> tuple[list[Batch], bool]:
    return _page(_seen(Batch.objects.all(), key), page)


def cancel_batch(key: KeyInfo, batch_id: str) -> Batch:
    """A running batch becomes `cancelling`; its runner sees it at its next progress report,
    sends no more lines, and ends it `cancelled` once the lines in flight have ended."""
    get_batch(key, batch_id)
    now = timezone.now()
    running = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)
    _seen(Batch.objects.all(), key).filter(pk=batch_id, status__in=running).update(
        status=BatchStatus.CANCELLING, cancelling_at=now
    )
    batch = get_batch(key, batch_id)
    if batch.status not in (BatchStatus.CANCELLING, BatchStatus.CANCELLED):
        raise cannot_cancel(batch_id, batch.status)
    return batch
