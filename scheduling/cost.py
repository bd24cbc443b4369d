"""The cost rule, in one place: how a job's size becomes a charge on its principal's account.

The unit decides what "fair" means: `requests` makes fair share plain round robin, `tokens`
charges `w_in * prompt + w_out * completion` (the VTC paper's form: output tokens cost the GPU
far more than prompt tokens, and by how much depends on the model), `money` charges the price
from the cost rules. Prices are per million tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

DEFAULT_OUTPUT_WEIGHT = 4.0


class CostUnit(StrEnum):
    REQUESTS = "requests"
    TOKENS = "tokens"
    MONEY = "money"


@dataclass(frozen=True, slots=True)
class TokenWeights:
    """`w_in` and `w_out` of the `tokens` unit."""

    input: float = 1.0
    output: float = DEFAULT_OUTPUT_WEIGHT


@dataclass(frozen=True, slots=True)
class CostPolicy:
    """The unit and the token weights in force: `per_model` overrides `default` for a model."""

    unit: CostUnit = CostUnit.TOKENS
    default: TokenWeights = field(default_factory=TokenWeights)
    per_model: Mapping[str, TokenWeights] = field(default_factory=dict)

    def weights(self, model: str) -> TokenWeights:
        return self.per_model.get(model, self.default)


def job_cost(
    unit: CostUnit | str,
    prompt_tokens: int,
    output_tokens: int,
    output_weight: float = DEFAULT_OUTPUT_WEIGHT,
    price_in: float = 0.0,
    price_out: float = 0.0,
    input_weight: float = 1.0,
) -> float:
    """A job's charge. At dispatch `output_tokens` is the estimate (e.g. max_tokens); at the end
    it is the real count, so the correction uses the same rule as the estimate."""
    unit = CostUnit(unit)
    if unit is CostUnit.REQUESTS:
        return 1.0
    if unit is CostUnit.TOKENS:
        return input_weight * float(prompt_tokens) + output_weight * float(output_tokens)
    return (prompt_tokens * price_in + output_tokens * price_out) / 1_000_000
