"""How long a queued request will wait, roughly: for the queue-position reports and the status
endpoint. An estimate from what was observed, never a promise.

Per model, an exponentially weighted mean of how long a request holds its slot (dispatch to
end). A job with `position` jobs before it, while `running` jobs hold the pool's slots, waits
about (position + 1) / running of those durations: that many slots have to come free first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling import OutputLengths, Principal

DEFAULT_SECONDS = 1.0  # before anything was observed
ALPHA = 0.2


class ServiceTimes:
    def __init__(self) -> None:
        self._mean: dict[str, float] = {}

    def observe(self, model: str, seconds: float) -> None:
        old = self._mean.get(model)
        self._mean[model] = seconds if old is None else old + ALPHA * (seconds - old)

    def estimate(self, model: str, position: int, running: int) -> float:
        mean = self._mean.get(model, DEFAULT_SECONDS)
        return (position + 1) * mean / max(running, 1)


@dataclass(slots=True)
class Estimates:
    """What was learned from requests that ended well: how long one holds its slot (for wait
    estimates) and how long each principal's answers run (for shortest-first and preemption)."""

    service_times: ServiceTimes = field(default_factory=ServiceTimes)
    output_lengths: OutputLengths = field(default_factory=OutputLengths)

    def wait(self, model: str, position: int, running: int) -> float:
        """Roughly how long a job at `position` of `model`'s queue waits for its slot."""
        return self.service_times.estimate(model, position, running)

    def output_tokens(self, principal: Principal, model: str, max_tokens: int) -> int:
        """The expected length of `principal`'s answer on `model`, at most `max_tokens`."""
        return self.output_lengths.estimate(principal, model, max_tokens)

    def learn(self, principal: Principal, model: str, seconds: float, tokens: int) -> None:
        """A request that ended well held its slot `seconds` and answered in `tokens`."""
        self.service_times.observe(model, seconds)
        self.output_lengths.observe(principal, model, tokens)
