"""Operator settings the scheduler runs under; all immutable, replaced whole at run time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduling.jobs import BATCH, INTERACTIVE, STANDARD, WithinPrincipal


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
    principal; once its capacity is known, the gateway then never lets it queue (see
    `scheduling.gate`)."""

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
    is the Retry-After hint carried by `QueueFull`.

    Preemption (`Scheduler.preempt`) judges by the account dispatch orders by: a running job of
    the waiter's own band is evicted only where it started ahead of the waiter's turn (its
    principal's service less its own charge, above the waiter's service) by more than
    `preempt_slack` times its own charge, a bound on what the eviction costs (the aborted step
    and the re-prefill of its prompt and what it generated so far). The bounds against thrash:
    an evicted job, once running again, is not evicted for `preempt_protect_seconds`, nor more
    than `preempt_max_per_job` times in all; a backend sees at most
    `preempt_max_per_backend_second` evictions in any second, one at a time.

    Backend choice (`scheduling.prefix_index`): a fully cached prompt prefix is worth
    `affinity_slack` slots of extra load; the gateway's index of what each backend was sent holds
    `prefix_index_blocks` blocks per backend (about its prefix cache's size) for at most
    `prefix_ttl_seconds`. Batching (`scheduling.batching`): a job whose prompt shares at least
    `batch_min_blocks` leading blocks with the pool's last dispatch may go right after it, ahead
    of less-served principals, while its principal's service is within `batch_slack` (in the
    cost unit, weighted) of the least served; 0 turns batching off.
    """

    gates: Mapping[int, GateThresholds] = field(default_factory=article_gates)
    stale_after: float = 2.0
    within_principal: WithinPrincipal = WithinPrincipal.FIFO
    aging_seconds: float | None = None
    affinity_slack: int = 2
    queue_full_retry_after: float = 1.0
    prefix_index_blocks: int = 8192
    prefix_ttl_seconds: float = 600.0
    batch_slack: float = 0.0
    batch_min_blocks: int = 16
    preempt_slack: float = 1.0
    preempt_protect_seconds: float = 5.0
    preempt_max_per_job: int = 2
    preempt_max_per_backend_second: int = 4
