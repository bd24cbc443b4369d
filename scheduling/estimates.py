"""How long a job's answer will be, for shortest-estimated-first within a principal.

`max_tokens` is only a ceiling, and clients often send the same large one for short and long
answers; a principal's recent answers on a model say more. The estimate is the smaller of the
two, once the principal has history: an exponentially weighted mean of its recent completion
lengths. Bounded: the least recently seen principals are forgotten past `capacity`.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from scheduling.jobs import Principal

ALPHA = 0.2  # weight of the newest answer: about the last ten count


class OutputLengths:
    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._mean: OrderedDict[tuple[Principal, str], float] = OrderedDict()

    def observe(self, principal: Principal, model: str, completion_tokens: int) -> None:
        key = (principal, model)
        old = self._mean.pop(key, None)
        tokens = float(completion_tokens)
        self._mean[key] = tokens if old is None else old + ALPHA * (tokens - old)
        while len(self._mean) > self.capacity:
            self._mean.popitem(last=False)

    def estimate(self, principal: Principal, model: str, max_tokens: int) -> int:
        """The expected completion length: `max_tokens`, or the principal's recent mean on
        `model` where that is smaller."""
        mean = self._mean.get((principal, model))
        if mean is None:
            return max_tokens
        return max(1, min(max_tokens, math.ceil(mean)))

    def __len__(self) -> int:
        return len(self._mean)
