"""What a principal's fair share is counted in: the cost unit and the token weights, edited in
the admin (one policy for the whole gateway, and per-model weights)."""

from __future__ import annotations

from typing import Any

from django.core.validators import MinValueValidator
from django.db import models

from scheduling import CostPolicy, CostUnit, TokenWeights


class CostUnitChoice(models.TextChoices):
    REQUESTS = CostUnit.REQUESTS.value, "requests (plain round robin)"
    TOKENS = CostUnit.TOKENS.value, "tokens (w_in x prompt + w_out x completion)"
    MONEY = CostUnit.MONEY.value, "money (the cost rules' price in force)"


class FairSharePolicy(models.Model):
    """The one row (pk 1). Created on the gateway's first configuration load from
    SCHEDULER_COST_UNIT and SCHEDULER_OUTPUT_TOKEN_WEIGHT; from then on this row governs."""

    unit = models.CharField(
        max_length=8,
        choices=CostUnitChoice.choices,
        default=CostUnitChoice.TOKENS,
        help_text="What a job costs its principal's account; a tier's weight divides it.",
    )
    input_weight = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.0)],
        help_text="w_in: the charge per prompt token in the tokens unit.",
    )
    output_weight = models.FloatField(
        default=4.0,
        validators=[MinValueValidator(0.0)],
        help_text="w_out: the charge per completion token in the tokens unit (a decode step "
        "costs the GPU far more than a prompt token's share of a prefill).",
    )

    class Meta:
        verbose_name = "fair-share policy"
        verbose_name_plural = "fair-share policy"

    def __str__(self) -> str:
        if self.unit == CostUnitChoice.TOKENS:
            return f"tokens: {self.input_weight:g} x prompt + {self.output_weight:g} x completion"
        return str(self.get_unit_display())

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.pk = 1
        super().save(*args, **kwargs)

    def as_policy(self, per_model: dict[str, TokenWeights]) -> CostPolicy:
        return CostPolicy(
            CostUnit(self.unit), TokenWeights(self.input_weight, self.output_weight), per_model
        )


class ModelTokenWeights(models.Model):
    """A model's own w_in and w_out, where its prompt and decode costs differ from the default's
    (a larger model, a longer context)."""

    policy = models.ForeignKey(
        FairSharePolicy, on_delete=models.CASCADE, related_name="model_weights"
    )
    model = models.CharField(max_length=128, unique=True, help_text="The public model name.")
    input_weight = models.FloatField(validators=[MinValueValidator(0.0)])
    output_weight = models.FloatField(validators=[MinValueValidator(0.0)])

    class Meta:
        ordering = ["model"]
        verbose_name = "model token weights"
        verbose_name_plural = "model token weights"

    def __str__(self) -> str:
        return f"{self.model}: {self.input_weight:g} / {self.output_weight:g}"
