"""What the scheduler knows of one backend, as scraped from its own metrics.

The scraper (in the gateway) fills `BackendMetrics` from Prometheus text; the scheduler reads it
to decide whether a band's gate is open. Fields are None where the backend does not expose them.
"""

from __future__ import annotations

from dataclasses import dataclass


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
