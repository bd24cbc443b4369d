"""Quota rules (limits per window) and cost rules (prices with an effective date)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from tenants.models.tenants import Tenant
from tenants.models.tiers import Tier

MILLION = Decimal(1_000_000)


class Window(models.TextChoices):
    MINUTE = "minute", "per minute"
    HOUR = "hour", "per hour"
    DAY = "day", "per day"
    MONTH = "month", "per calendar month"


class Metric(models.TextChoices):
    REQUESTS = "requests", "requests"
    TOKENS = "tokens", "tokens (prompt + completion)"
    COST = "cost", "cost"


def window_start(window: str, now: datetime) -> datetime:
    """The start of the fixed window that contains `now` (UTC boundaries)."""
    if window == Window.MINUTE:
        return now.replace(second=0, microsecond=0)
    if window == Window.HOUR:
        return now.replace(minute=0, second=0, microsecond=0)
    if window == Window.DAY:
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def window_end(window: str, now: datetime) -> datetime:
    start = window_start(window, now)
    if window == Window.MINUTE:
        return start + timedelta(minutes=1)
    if window == Window.HOUR:
        return start + timedelta(hours=1)
    if window == Window.DAY:
        return start + timedelta(days=1)
    return (start + timedelta(days=32)).replace(day=1)


class QuotaRule(models.Model):
    """A limit on requests, tokens or cost in a window, for one tenant or for every tenant of a tier."""

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="quota_rules"
    )
    tier = models.ForeignKey(
        Tier, on_delete=models.CASCADE, null=True, blank=True, related_name="quota_rules"
    )
    model_pattern = models.CharField(max_length=128, default="*")
    window = models.CharField(max_length=8, choices=Window.choices, default=Window.DAY)
    metric = models.CharField(max_length=8, choices=Metric.choices, default=Metric.REQUESTS)
    limit = models.DecimalField(max_digits=18, decimal_places=4, validators=[MinValueValidator(0)])
    per_user = models.BooleanField(
        default=False, help_text="Apply the limit to each user of the tenant rather than to all."
    )

    class Meta:
        ordering = ["tenant__name", "tier__name", "model_pattern", "window"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(tenant__isnull=False) | models.Q(tier__isnull=False),
                name="quota_rule_has_tenant_or_tier",
            )
        ]

    def __str__(self) -> str:
        who = self.tenant.slug if self.tenant else f"tier {self.tier.name if self.tier else '?'}"
        return (
            f"{who}: {self.limit} {self.metric} {self.get_window_display()} on {self.model_pattern}"
        )

    def clean(self) -> None:
        if self.tenant_id is None and self.tier_id is None:
            raise ValidationError("A quota rule applies to a tenant or to a tier; choose one.")

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.model_pattern)


class CostRuleManager(models.Manager["CostRule"]):
    def price_at(self, model: str, when: datetime, tenant_id: int | None = None) -> CostRule | None:
        """The rule in force for `model` at `when` (for `tenant_id`'s usage, if given)."""
        return rule_in_force(self.filter(model__in=(model, "*")), model, when, tenant_id)


def rule_in_force(
    rules: Iterable[CostRule], model: str, when: datetime, tenant_id: int | None = None
) -> CostRule | None:
    """Of `rules`, the latest effective at `when`, in this order: the tenant's own price for
    `model` (a negotiated rate), the list price for `model`, the tenant's `*`, the list `*`.
    A tenant's price overrides the list price only from its own effective date."""
    best: dict[tuple[int | None, str], CostRule] = {}
    for rule in rules:
        if rule.tenant_id not in (None, tenant_id) or rule.model not in (model, "*"):
            continue
        if rule.effective_from <= when:
            slot = (rule.tenant_id, rule.model)
            seen = best.get(slot)
            if seen is None or rule.effective_from > seen.effective_from:
                best[slot] = rule
    for slot in ((tenant_id, model), (None, model), (tenant_id, "*"), (None, "*")):
        if slot in best:
            return best[slot]
    return None


class CostRule(models.Model):
    model = models.CharField(
        max_length=128, help_text="The public model name, or * for the default price."
    )
    input_per_million = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    output_per_million = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(0)]
    )
    effective_from = models.DateTimeField()
    currency = models.CharField(
        max_length=3,
        default="USD",
        validators=[RegexValidator("^[A-Z]{3}$", "An ISO 4217 code such as USD or EUR.")],
        help_text="ISO 4217 code. Costs, spend and budgets are sums of these prices, so every "
        "rule must use the same currency.",
    )
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="cost_rules",
        help_text="A tenant's own (negotiated) price: from its effective date it overrides the "
        "list price for this tenant's usage. Blank: the list price.",
    )

    objects = CostRuleManager()

    class Meta:
        ordering = ["model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "effective_from"],
                condition=models.Q(tenant__isnull=True),
                name="one_price_per_instant",
            ),
            models.UniqueConstraint(
                fields=["tenant", "model", "effective_from"],
                condition=models.Q(tenant__isnull=False),
                name="one_tenant_price_per_instant",
            ),
        ]

    def __str__(self) -> str:
        whose = f" for {self.tenant}" if self.tenant_id is not None else ""
        return f"{self.model}{whose} from {self.effective_from:%Y-%m-%d}"

    def clean(self) -> None:
        """One currency for all prices: a month's spend adds them up."""
        other = CostRule.objects.exclude(pk=self.pk).exclude(currency=self.currency).first()
        if other is not None:
            raise ValidationError(
                {"currency": f"Other prices are in {other.currency}; every price must use one."}
            )

    def cost(self, prompt_tokens: int, completion_tokens: int) -> Decimal:
        return priced(
            prompt_tokens, completion_tokens, self.input_per_million, self.output_per_million
        )


def priced(
    prompt_tokens: int,
    completion_tokens: int,
    input_per_million: Decimal,
    output_per_million: Decimal,
) -> Decimal:
    """What tokens cost at per-million prices: the one rule of the bill, and of what an admitted
    request holds against a budget."""
    return (
        Decimal(prompt_tokens) * input_per_million + Decimal(completion_tokens) * output_per_million
    ) / MILLION
