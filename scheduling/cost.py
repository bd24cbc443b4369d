"""The cost rule, in one place: how a job's size becomes a charge on its principal's account.

The unit decides what "fair" means: `requests` makes fair share plain round robin, `tokens`
charges input plus weighted output (output tokens cost the GPU far more than prompt tokens),
`money` charges the price from the cost rules. Prices are per million tokens.
"""

from __future__ import annotations

from enum import StrEnum

DEFAULT_OUTPUT_WEIGHT = 4.0


class CostUnit(StrEnum):
    REQUESTS = "requests"
    TOKENS = "tokens"
    MONEY = "money"


def job_cost(
    unit: CostUnit | str,
    prompt_tokens: int,
    output_tokens: int,
    output_weight: float = DEFAULT_OUTPUT_WEIGHT,
    price_in: float = 0.0,
    price_out: float = 0.0,
) -> float:
    """A job's charge. At dispatch `output_tokens` is the estimate (e.g. max_tokens); at the end
    it is the real count, so the correction uses the same rule as the estimate."""
    unit = CostUnit(unit)
    if unit is CostUnit.REQUESTS:
        return 1.0
    if unit is CostUnit.TOKENS:
        return float(prompt_tokens) + output_weight * float(output_tokens)
    return (prompt_tokens * price_in + output_tokens * price_out) / 1_000_000
