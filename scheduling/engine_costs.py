"""What work costs on one engine, learned online from its own metrics, and what a pause costs.

Preemption pays for itself only where the waiter would otherwise wait longer than the pause and
resume cost the engine (`scheduling.preemption`). Both sides of that trade are in the engine's
units: its decode step (the time between two tokens of one stream, under its current load:
vLLM's `inter_token_latency_seconds`, llama.cpp's predicted-tokens counters) and its prefill
cost per prompt token it computes (vLLM's `request_prefill_time_seconds` over
`request_prefill_kv_computed_tokens`, which leaves out what its prefix cache held; llama.cpp's
`prompt_seconds_total` over `prompt_tokens_total`). Each scrape window's mean is smoothed here,
so one slow step does not swing a decision. Until both are known, nothing is estimated and
preemption keeps to its bounds alone.
"""

from __future__ import annotations

from dataclasses import dataclass

# The weight of a new window's mean: about the last ten windows count (2.5 s at the default
# scrape interval).
ALPHA = 0.2


@dataclass(slots=True)
class EngineCosts:
    """One backend's learned costs: seconds per decode step and per prompt token prefilled."""

    step_seconds: float | None = None
    prefill_seconds_per_token: float | None = None

    def observe(self, step_seconds: float | None, prefill_seconds_per_token: float | None) -> None:
        """One scrape window's means (None: the window saw no such work)."""
        self.step_seconds = _smoothed(self.step_seconds, step_seconds)
        self.prefill_seconds_per_token = _smoothed(
            self.prefill_seconds_per_token, prefill_seconds_per_token
        )

    @property
    def known(self) -> bool:
        return self.step_seconds is not None and self.prefill_seconds_per_token is not None

    def generated(self, prompt_tokens: int, running_seconds: float) -> float:
        """Tokens a job has likely generated after `running_seconds` on the engine: its prefill,
        then one token a step."""
        step, prefill = self._costs()
        return max(0.0, (running_seconds - prompt_tokens * prefill) / step)

    def seconds_left(self, output_tokens: int, generated: float) -> float:
        """Until a job that will generate about `output_tokens` ends, having `generated`."""
        step, _ = self._costs()
        return max(0.0, output_tokens - generated) * step

    def pause_seconds(self, prompt_tokens: int, generated: float) -> float:
        """What pausing a job and resuming it costs the engine: the step cut short, and the
        prefill of its prompt and the text it had generated again (an upper bound: where the
        engine's prefix cache still holds the start, less is computed)."""
        step, prefill = self._costs()
        return step + (prompt_tokens + generated) * prefill

    def _costs(self) -> tuple[float, float]:
        if self.step_seconds is None or self.prefill_seconds_per_token is None:
            raise ValueError("the engine's costs are not known yet")
        return self.step_seconds, self.prefill_seconds_per_token


def _smoothed(old: float | None, new: float | None) -> float | None:
    if new is None:
        return old
    return new if old is None else old + ALPHA * (new - old)
