"""What the scheduler knows of one backend, as scraped from its own metrics.

The scraper (in the gateway) fills `BackendMetrics` from Prometheus text; the scheduler reads it
to decide whether a band's gate is open. Fields are None where the backend does not expose them.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.config import BackendConfig


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


@dataclass(slots=True, eq=False)
class BackendState:
    """The scheduler's live view of one backend: its config, last scrape, and what the
    scheduler itself did since that scrape (so a slow scrape cannot hide a burst)."""

    config: BackendConfig
    metrics: BackendMetrics | None = None
    in_flight: int = 0
    dispatched_since_scrape: int = 0
    completed_since_scrape: int = 0

    @property
    def name(self) -> str:
        return self.config.name

    def estimated_waiting(self) -> float:
        """The backend's own queue as last scraped, plus our dispatches since, minus completions."""
        scraped = 0.0
        if self.metrics is not None and self.metrics.waiting is not None:
            scraped = self.metrics.waiting
        return max(0.0, scraped + self.dispatched_since_scrape - self.completed_since_scrape)

    def is_stale(self, now: float, stale_after: float) -> bool:
        """No metrics yet, or older than `stale_after`: only meaningful for backends with metrics."""
        if not self.config.has_metrics:
            return False
        m = self.metrics
        return m is None or m.scraped_at is None or now - m.scraped_at > stale_after

    def record_scrape(self, metrics: BackendMetrics) -> None:
        self.metrics = metrics
        self.dispatched_since_scrape = 0
        self.completed_since_scrape = 0

    def record_dispatch(self) -> None:
        self.in_flight += 1
        self.dispatched_since_scrape += 1

    def record_release(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.completed_since_scrape += 1
