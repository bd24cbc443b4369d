"""What a request costs: on its principal's fair-share account (the scheduler's unit) and in money
(the usage row's price), from the prices and the fair-share policy in force for its tenant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduling import CostPolicy, job_cost


@dataclass(frozen=True, slots=True)
class Pricing:
    """The fair-share cost policy and the prices (public model -> (input, output) per million
    tokens) in force for one tenant: the list prices, or the tenant's own where it has them."""

    policy: CostPolicy = field(default_factory=CostPolicy)
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def charge(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """A job's charge on its principal's account, in the policy's unit: the estimate at
        dispatch and the real figure at the end use this one rule. In `tokens`, the model's own
        weights where it has them; in `money`, the model's price in force (a model without a
        price costs nothing, as in the usage rows)."""
        price_in, price_out = self.prices.get(model, (0.0, 0.0))
        weights = self.policy.weights(model)
        return job_cost(
            self.policy.unit,
            prompt_tokens,
            completion_tokens,
            weights.output,
            price_in,
            price_out,
            weights.input,
        )
