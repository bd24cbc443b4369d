"""Tiers: a band (strict priority), a fair-share weight, per-user limits and the band's gate."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from scheduling import GateThresholds, TierPolicy, WithinPrincipal, jobs


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
    queue_timeout_seconds = models.FloatField(
        default=120.0,
        validators=[MinValueValidator(0.1)],
        help_text="A queued request fails with queue_timeout once its user's queue for the model "
        "has dispatched nothing for this long: a request behind its own user's work that is "
        "being served waits for its turn however long that takes.",
    )
    gate_max_waiting = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=3,
        help_text="Send this tier's requests to a backend only while fewer than this many "
        "requests wait inside it; 0 or 1: only while none wait. Low for batch (0: it never "
        "delays anyone), higher for interactive (3). Blank: no limit.",
    )
    gate_max_tpot_ms = models.FloatField(
        null=True,
        blank=True,
        default=150.0,
        validators=[MinValueValidator(0.0)],
        help_text="Send requests only while the backend's time per output token (its recent "
        "average, in ms) is below this: above it, users already see slow typing. Blank: no limit.",
    )
    gate_max_kv_cache_usage = models.FloatField(
        null=True,
        blank=True,
        default=0.95,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Send requests only while the backend's KV-cache (GPU memory for running "
        "requests, 0 to 1) is below this full: near 1 it starts evicting work. Blank: no limit.",
    )
    over_budget = models.CharField(
        max_length=8, choices=OverBudget.choices, default=OverBudget.REJECT
    )
    preemptible = models.BooleanField(
        default=True,
        help_text="This tier's running requests may be paused to make room for a higher tier or "
        "for a user who has had less than their share; a paused stream continues where it "
        "stopped, and its client sees one uninterrupted answer.",
    )
    preempt_after_ms = models.FloatField(
        null=True,
        blank=True,
        default=50.0,
        validators=[MinValueValidator(0.0)],
        help_text="When a request of this tier has waited this long (ms) while every backend "
        "slot is busy, one running request of a lower tier, or of a user over their share, is "
        "paused for it, unless a running request should end sooner than the pause would cost "
        "the engine (learned from its metrics). Blank: this tier never pauses others.",
    )
    within_principal = models.CharField(
        max_length=4,
        blank=True,
        choices=[
            (WithinPrincipal.FIFO.value, "first come, first served"),
            (WithinPrincipal.SJF.value, "shortest estimated first"),
        ],
        help_text="The order of one user's own waiting requests: shortest first (the smaller of "
        "max_tokens and the user's recent mean answer on the model) cuts their total wait. Blank: the gateway's SCHEDULER_WITHIN_PRINCIPAL.",
    )
    aging_seconds = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="A request of this tier waiting this long moves up one band, and again after "
        "each further period, so it is never starved; 0: never. Blank: the gateway's "
        "SCHEDULER_AGING_SECONDS.",
    )
    max_output_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="The most tokens one answer of this tier may ask for: a request asking more "
        "is refused (400, naming this limit), and one that names no maximum is sent with this "
        "one. Blank: no limit of the tier's own; a request without max_tokens runs to the "
        "engine's own end (the model's context).",
    )
    rpm_per_key = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Requests per minute (sliding window) each key of this tier may send; above "
        "it, 429 with Retry-After. Blank: no limit.",
    )
    tpm_per_key = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Tokens per minute (prompt estimate plus max_tokens, counted at admission, as "
        "OpenAI does) each key of this tier may send. Blank: no limit.",
    )

    class Meta:
        ordering = ["band", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_band_display()})"

    def scheduling_policy(self) -> TierPolicy:
        """What the scheduler needs of this tier, as the one value every job of it carries."""
        return TierPolicy(
            weight=self.weight,
            max_queued=self.max_queued_per_user,
            max_concurrent=self.max_concurrent_per_user,
            preemptible=self.preemptible,
            preempt_after=None if self.preempt_after_ms is None else self.preempt_after_ms / 1000,
            within_principal=WithinPrincipal(self.within_principal)
            if self.within_principal
            else None,
            aging_seconds=self.aging_seconds,
        )


def _strictest(values: list[float | int | None]) -> float | int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def band_gates() -> dict[int, GateThresholds]:
    """One gate per band; where several tiers share a band, the strictest threshold wins (the
    scheduler gates bands, not tiers). The gateway loads these; the tier admin shows them."""
    by_band: dict[int, list[Tier]] = {}
    for tier in Tier.objects.all():
        by_band.setdefault(tier.band, []).append(tier)
    gates = {}
    for band, tiers in by_band.items():
        tpot_ms = _strictest([t.gate_max_tpot_ms for t in tiers])
        waiting = _strictest([t.gate_max_waiting for t in tiers])
        gates[band] = GateThresholds(
            max_waiting=int(waiting) if waiting is not None else None,
            max_tpot_seconds=tpot_ms / 1000.0 if tpot_ms is not None else None,
            max_kv_cache_usage=_strictest([t.gate_max_kv_cache_usage for t in tiers]),
        )
    return gates
