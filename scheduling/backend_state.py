"""What the scheduler knows of one backend, as scraped from its own metrics.

The scraper (in the gateway) fills `BackendMetrics` from Prometheus text; the scheduler reads it
to decide whether a band's gate is open. Fields are None where the backend does not expose them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from scheduling.config import BackendConfig
from scheduling.engine_costs import EngineCosts


@dataclass(frozen=True, slots=True)
class BackendMetrics:
    """One scrape's view of a backend.

    `tpot_seconds` and `ttft_seconds` are means over the last scrape window (histogram sum and
    count deltas between two scrapes), not since the backend started. `scraped_at` is on the
    scheduler's clock (monotonic seconds).
    """

    waiting: float | None = None
    running: float | None = None
    kv_cache_usage: float | None = None
    tpot_seconds: float | None = None
    ttft_seconds: float | None = None
    healthy: bool = False
    scraped_at: float | None = None
    # How many sequences the server says it runs at once (llama.cpp's /props), where it says.
    capacity: int | None = None
    # Seconds of prefill per prompt token computed, over the last scrape window.
    prefill_seconds_per_token: float | None = None


@dataclass(slots=True, eq=False)
class BackendState:
    """The scheduler's live view of one backend: its config, last scrape, and what the
    scheduler itself did since that scrape (so a slow scrape cannot hide a burst).

    With a capacity (configured, reported by the server, or learned as the highest `running`
    seen while requests were waiting), the queue is computed exactly: the gateway counts its own
    requests in flight the moment it dispatches or releases one, and the scrapes only add the
    traffic that did not come through this gateway."""

    config: BackendConfig
    metrics: BackendMetrics | None = None
    in_flight: int = 0
    dispatched_since_scrape: int = 0
    completed_since_scrape: int = 0
    _external: float = 0.0
    _external_last: float | None = None
    learned_capacity: int | None = None
    reported_capacity: int | None = None
    # Evictions decided here and not yet confirmed by their relays (the upstream request
    # closed); no other is decided here meanwhile, so evictions never storm.
    evicting: int = 0
    # When the evictions of the last second were decided, oldest first (their rate is bounded).
    evicted_at: deque[float] = field(default_factory=deque)
    # A request found no server there (connection refused): closed to every job until this time
    # or a healthy scrape, whichever comes first, so a queue is not fed to a dead backend.
    unreachable_until: float | None = None
    # Its decode step and prefill per token, learned from its scrapes (what a pause costs).
    costs: EngineCosts = field(default_factory=EngineCosts)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def capacity(self) -> int | None:
        return self.config.capacity or self.reported_capacity or self.learned_capacity

    def external_load(self) -> float:
        """Sequences at the backend (running or waiting) that are not this gateway's: what the
        last two scrapes both showed beyond our own in-flight count then. One scrape alone can
        show a phantom: a request we released is still counted by the engine until its next
        step (an abort, a stream whose end we read first), one we dispatched is not yet."""
        return self._external

    def estimated_waiting(self) -> float:
        """How many requests the backend queues now. With a capacity: everything at the backend
        (ours, counted exactly, plus others' as scraped) beyond it. Without: the queue as last
        scraped, plus our dispatches since, minus our completions since."""
        capacity = self.capacity
        if capacity is not None:
            return max(0.0, self.in_flight + self.external_load() - capacity)
        scraped = 0.0
        if self.metrics is not None and self.metrics.waiting is not None:
            scraped = self.metrics.waiting
        return max(0.0, scraped + self.dispatched_since_scrape - self.completed_since_scrape)

    def queue_for_gate(self) -> float:
        """The queue the gate compares with its threshold: with a capacity, the one that one more
        dispatch would leave (so dispatching never makes the backend queue past it)."""
        if self.capacity is not None:
            return max(0.0, self.in_flight + 1 + self.external_load() - self.capacity)
        return self.estimated_waiting()

    def is_full(self) -> bool:
        """Every slot taken (by the gateway's count against its capacity or `max_in_flight`) or
        work waiting in its own queue at the last scrape: a request sent now waits there."""
        slots = self.capacity or self.config.max_in_flight
        waiting = self.metrics.waiting if self.metrics is not None else None
        return self.in_flight >= slots or (waiting or 0) > 0

    def is_stale(self, now: float, stale_after: float) -> bool:
        """No metrics yet, or older than `stale_after`: only meaningful for backends with metrics."""
        if not self.config.has_metrics:
            return False
        m = self.metrics
        return m is None or m.scraped_at is None or now - m.scraped_at > stale_after

    def record_scrape(self, metrics: BackendMetrics) -> None:
        last = self.metrics
        self.metrics = metrics
        if metrics.healthy:
            self.unreachable_until = None
        self.dispatched_since_scrape = 0
        self.completed_since_scrape = 0
        seen = max(0.0, (metrics.running or 0.0) + (metrics.waiting or 0.0) - self.in_flight)
        before = self._external_last
        self._external = seen if before is None else min(seen, before)
        self._external_last = seen
        if metrics.capacity:
            self.reported_capacity = metrics.capacity
        self.costs.observe(metrics.tpot_seconds, metrics.prefill_seconds_per_token)
        # Full, and for a whole scrape interval: what runs is what fits. One scrape with a queue
        # is no proof: a request that has just arrived waits for the engine's next step.
        if metrics.running and metrics.waiting and last is not None and last.waiting:
            running = max(metrics.running, last.running or 0.0)
            self.learned_capacity = max(self.learned_capacity or 0, int(running))

    def evictions_in_last_second(self, now: float) -> int:
        while self.evicted_at and self.evicted_at[0] <= now - 1.0:
            self.evicted_at.popleft()
        return len(self.evicted_at)

    def record_dispatch(self) -> None:
        self.in_flight += 1
        self.dispatched_since_scrape += 1

    def record_release(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.completed_since_scrape += 1
