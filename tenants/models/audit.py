"""The audit trail: one row per change to the configuration or to who may change it.

Written by `tenants.audit` from model signals (who, when, from where, what, the changed fields
before and after, secrets redacted), never by the completion path. Rows are only ever inserted:
the admin shows them read-only to holders of `tenants.view_auditentry`, and a tenant reads the
rows about its own objects through `GET /api/v1/audit`.
"""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from tenants.models.tenants import Tenant


class AuditAction(models.TextChoices):
    CREATE = "create", "create"
    UPDATE = "update", "update"
    DELETE = "delete", "delete"


class ActorKind(models.TextChoices):
    USER = "user", "admin user"
    API_KEY = "api_key", "API key"
    COMMAND = "command", "management command"
    SYSTEM = "system", "system"


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor = models.CharField(
        max_length=200,
        help_text="The admin user's name, the API key (prefix, tenant, user), "
        '"manage.py <command>", or "system".',
    )
    address = models.GenericIPAddressField(
        null=True, blank=True, help_text="The client's address (behind TRUSTED_PROXIES, forwarded)."
    )
    model = models.CharField(max_length=100, help_text='app label and model, e.g. "tenants.tier"')
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    action = models.CharField(max_length=6, choices=AuditAction.choices)
    changes = models.JSONField(
        default=dict,
        encoder=DjangoJSONEncoder,
        help_text="{field: [before, after]} of the fields that changed; secrets redacted.",
    )
    # The tenant the object belongs to, for the self-service list. No database constraint and
    # no cascade: the row outlives the tenant (its own deletion is recorded against it).
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-at", "-id"]
        # Append-only: no add, change or delete permission exists to grant.
        default_permissions = ("view",)
        indexes = [models.Index(fields=["tenant", "-id"], name="audit_tenant_newest")]
        verbose_name = "audit entry"
        verbose_name_plural = "audit trail"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.model} {self.object_repr}"
