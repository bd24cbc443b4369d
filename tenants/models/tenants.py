"""Tenants: the organisations that hold API keys and pay for usage."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from tenants.models.tiers import Tier


class Tenant(models.Model):
    name = models.CharField(max_length=128)
    slug = models.SlugField(max_length=64, unique=True)
    default_tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="tenants")
    is_active = models.BooleanField(default=True)
    monthly_budget = models.DecimalField(
        max_digits=14,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Spending limit per calendar month (UTC) in the cost rules' currency; blank: none.",
    )
    rpm_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Requests per minute (sliding window) for all this tenant's keys together. "
        "Blank: no limit.",
    )
    tpm_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Tokens per minute (prompt estimate plus max_tokens) for all this tenant's keys "
        "together. Blank: no limit.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
