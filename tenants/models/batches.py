"""The Batch API's records: files (uploaded batch input, batch output) and batches.

The bytes of a file live in the gateway's file store (`FILES_DIR`, `llmserver/batches/
storage.py`); a row here says whose it is and where it lies. A batch is owned by the API key that
created it: its tenant, its user and its limits; the gateway's batch runner claims a batch with a
lease (`runner`, `lease_until`), so that of several gateway processes only one runs it.
"""

from __future__ import annotations

import uuid

from django.db import models

from tenants.models.keys import ApiKey
from tenants.models.tenants import Tenant


def new_file_id() -> str:
    return "file-" + uuid.uuid4().hex[:24]


def new_batch_id() -> str:
    return "batch_" + uuid.uuid4().hex[:24]


class FilePurpose(models.TextChoices):
    BATCH = "batch", "batch input"
    BATCH_OUTPUT = "batch_output", "batch output"


class StoredFile(models.Model):
    """One file of `/v1/files`, as OpenAI has it; only its tenant ever sees it."""

    id = models.CharField(primary_key=True, max_length=40, default=new_file_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="files")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="files"
    )
    user = models.CharField(max_length=128, help_text="The user of the key that made it.")
    filename = models.CharField(max_length=255)
    purpose = models.CharField(max_length=16, choices=FilePurpose.choices)
    bytes = models.BigIntegerField(default=0)
    storage_name = models.CharField(
        max_length=255, help_text="Where its bytes lie, relative to FILES_DIR."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "file"
        indexes = [models.Index(fields=["tenant", "created_at"], name="file_tenant_time")]

    def __str__(self) -> str:
        return f"{self.id} {self.filename}"


class BatchStatus(models.TextChoices):
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


# The states a runner still has work in; the others are final.
ACTIVE_STATUSES = (
    BatchStatus.VALIDATING,
    BatchStatus.IN_PROGRESS,
    BatchStatus.FINALIZING,
    BatchStatus.CANCELLING,
)


class Batch(models.Model):
    """One batch of `/v1/batches`; its fields are OpenAI's batch object's."""

    id = models.CharField(primary_key=True, max_length=40, default=new_batch_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="batches")
    api_key = models.ForeignKey(
        ApiKey,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="batches",
        help_text="The key that created it: its lines run as this key's requests.",
    )
    user = models.CharField(max_length=128)
    endpoint = models.CharField(max_length=32)
    model = models.CharField(max_length=128, blank=True)
    input_file_id = models.CharField(max_length=40)
    output_file_id = models.CharField(max_length=40, blank=True)
    error_file_id = models.CharField(max_length=40, blank=True)
    completion_window = models.CharField(max_length=8, default="24h")
    status = models.CharField(
        max_length=12, choices=BatchStatus.choices, default=BatchStatus.VALIDATING
    )
    metadata = models.JSONField(null=True, blank=True)
    errors = models.JSONField(
        null=True, blank=True, help_text="Why validation failed: one entry per bad line."
    )
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    runner = models.CharField(
        max_length=128, blank=True, help_text="The gateway process running it now, if any."
    )
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"
        indexes = [
            models.Index(fields=["tenant", "created_at"], name="batch_tenant_time"),
            models.Index(fields=["status"], name="batch_status"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.status}"
