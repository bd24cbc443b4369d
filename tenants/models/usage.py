"""Usage records: one append-only row per request, priced when it happened."""

from __future__ import annotations

from typing import Any

from django.db import models

from tenants.endpoints import Endpoint
from tenants.models.keys import ApiKey
from tenants.models.tenants import Tenant
from tenants.models.tiers import Band


class UsageStatus(models.TextChoices):
    OK = "ok", "ok"
    ERROR = "error", "error"
    CANCELLED = "cancelled", "cancelled"
    REJECTED = "rejected", "rejected"


class UsageRecord(models.Model):
    request_id = models.CharField(max_length=64, unique=True)
    endpoint = models.CharField(
        max_length=16,
        choices=[(e.value, e.value) for e in Endpoint],
        default=Endpoint.CHAT.value,
        help_text="The API endpoint the request came through.",
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="usage")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="usage"
    )
    user = models.CharField(max_length=128)
    model = models.CharField(max_length=128)
    backend = models.CharField(max_length=64, blank=True)
    tier = models.CharField(max_length=64, blank=True)
    band = models.IntegerField(choices=Band.choices)
    queued_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    first_token_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=18, decimal_places=8, default=0)
    status = models.CharField(max_length=10, choices=UsageStatus.choices)
    error_type = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-queued_at"]
        # Named permissions for what reads every tenant's usage at once: being staff is not
        # enough (a staff user may only be meant to edit tiers).
        permissions = [
            ("view_usage_report", "Can view the usage and cost reports of every tenant"),
            ("view_queue_dashboard", "Can view the live queue dashboard of every tenant"),
        ]
        indexes = [
            models.Index(fields=["tenant", "queued_at"], name="usage_tenant_time"),
            models.Index(fields=["model", "queued_at"], name="usage_model_time"),
            models.Index(fields=["tenant", "user", "queued_at"], name="usage_tenant_user_time"),
            models.Index(fields=["queued_at"], name="usage_time"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.model} {self.status}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ValueError("Usage records are append-only.")
        super().save(*args, **kwargs)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
