"""Operator settings the scheduler runs under; all immutable, replaced whole at run time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduling.jobs import BATCH, INTERACTIVE, STANDARD


@dataclass(frozen=True, slots=True)
class GateThresholds:
    """One band's gate. The gate is open while est. waiting < max(max_waiting, 1), so 0 and 1
    both mean "only when the backend queue is empty". None disables a condition."""

    max_waiting: int | None = 3
    max_tpot_seconds: float | None = 0.150
    max_kv_cache_usage: float | None = None


@dataclass(frozen=True, slots=True)
class BackendConfig:
    """One backend. `max_in_flight` is always enforced and is the only gate without metrics.

    `capacity` is how many sequences the engine runs at once (vLLM's `max_num_seqs`, llama.cpp's
    slots), set by the operator; None means learn it from the backend's metrics. `preemption`:
    its jobs may be evicted to make room for a waiting job of a higher band or an under-served
    principal."""

    name: str
    models: frozenset[str]
    max_in_flight: int = 64
    has_metrics: bool = True
    enabled: bool = True
    capacity: int | None = None
    preemption: bool = False


def article_gates() -> dict[int, GateThresholds]:
    """The source article's example: interactive below 3 waiting, batch only on an empty queue,
    both under a 150 ms time-per-output-token ceiling."""
    return {
        INTERACTIVE: GateThresholds(max_waiting=3, max_tpot_seconds=0.150),
        STANDARD: GateThresholds(max_waiting=2, max_tpot_seconds=0.150),
        BATCH: GateThresholds(max_waiting=0, max_tpot_seconds=0.150),
    }


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Scheduler-wide policy.

    A band missing from `gates` has no thresholds, only `max_in_flight` (and, for backends with
    metrics, fresh healthy metrics). `aging_seconds` promotes a job one band per period waited;
    it is off by default so batch never adds latency to interactive users. `queue_full_retry_after`
    is the Retry-After hint carried by `QueueFull`. A running job of the waiter's own band is
    evicted only while its principal holds more than its fair share of the pool's slots plus
    `preempt_slack`; a resumed job is not evicted again for `preempt_protect_seconds`.
    """

    gates: Mapping[int, GateThresholds] = field(default_factory=article_gates)
    stale_after: float = 2.0
    within_principal: str = "fifo"
    aging_seconds: float | None = None
    affinity_slack: int = 2
    queue_full_retry_after: float = 1.0
    affinity_capacity: int = 100_000
    preempt_slack: float = 1.0
    preempt_protect_seconds: float = 5.0
