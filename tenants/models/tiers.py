"""Tiers: a band (strict priority), a fair-share weight, per-user limits and the band's gate."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from scheduling import jobs


class Band(models.IntegerChoices):
    """The admin's names for the scheduler's bands (lower is served first); the numbers have their
    one home in `scheduling.jobs`."""

    INTERACTIVE = jobs.INTERACTIVE, "interactive"
    STANDARD = jobs.STANDARD, "standard"
    BATCH = jobs.BATCH, "batch"


class OverBudget(models.TextChoices):
    REJECT = "reject", "refuse with 429"
    DEMOTE = "demote", "demote to the batch band"


class Tier(models.Model):
    name = models.CharField(max_length=64, unique=True)
    band = models.IntegerField(choices=Band.choices, default=Band.STANDARD)
    weight = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.001)],
        help_text="Fair-share weight: a principal of weight 2 gets twice the service of weight 1.",
    )
    max_concurrent_per_user = models.PositiveIntegerField(default=4)
    max_queued_per_user = models.PositiveIntegerField(default=64)
    queue_timeout_seconds = models.FloatField(default=120.0, validators=[MinValueValidator(0.1)])
    gate_max_waiting = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=3,
        help_text="Dispatch only while the backend's waiting queue is below this; 0 or 1: only "
        "while it is empty (the article: 3 for interactive, 0 for batch). Blank: no limit.",
    )
    gate_max_tpot_ms = models.FloatField(
        null=True,
        blank=True,
        default=150.0,
        validators=[MinValueValidator(0.0)],
        help_text="Dispatch only while time per output token (last window) is below this.",
    )
    gate_max_kv_cache_usage = models.FloatField(
        null=True,
        blank=True,
        default=0.95,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Dispatch only while the backend's KV-cache usage (0..1) is below this.",
    )
    over_budget = models.CharField(
        max_length=8, choices=OverBudget.choices, default=OverBudget.REJECT
    )

    class Meta:
        ordering = ["band", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_band_display()})"
