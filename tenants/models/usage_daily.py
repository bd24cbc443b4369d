"""Daily usage aggregates: what old usage records become once the operator rolls them up.

One row per UTC day, tenant, user, model, band and status. Latency percentiles cannot be
rolled up, so reports compute them from the records that are still kept.
"""

from __future__ import annotations

from django.db import models

from tenants.endpoints import Endpoint
from tenants.models.tenants import Tenant
from tenants.models.tiers import Band
from tenants.models.usage import UsageStatus


class UsageDaily(models.Model):
    day = models.DateField()
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="usage_daily")
    user = models.CharField(max_length=128)
    model = models.CharField(max_length=128)
    band = models.IntegerField(choices=Band.choices)
    status = models.CharField(max_length=10, choices=UsageStatus.choices)
    endpoint = models.CharField(
        max_length=16, choices=[(e.value, e.value) for e in Endpoint], default=Endpoint.CHAT.value
    )
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        ordering = ["-day", "tenant", "user", "model"]
        verbose_name = "daily usage"
        verbose_name_plural = "daily usage"
        constraints = [
            models.UniqueConstraint(
                fields=["day", "tenant", "user", "model", "band", "status", "endpoint"],
                name="one_usage_daily_row",
            )
        ]
        indexes = [models.Index(fields=["tenant", "day"], name="usage_daily_tenant_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.tenant_id} {self.user} {self.model} {self.status}"
