"""One poller per backend: scrape its /metrics on an interval and publish BackendMetrics.

`scrape_once()` is the step; `run()` repeats it until cancelled. A scrape that fails or takes
longer than `timeout` counts as a failure; after `failures_before_unhealthy` in a row the backend
is published unhealthy (keeping the last good `scraped_at`, so it also reads as stale). The first
good scrape after that publishes it healthy again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import httpx

from llmserver.backends.metrics import MetricsReader
from scheduling.backend_state import BackendMetrics

log = logging.getLogger(__name__)


class MetricsPoller:
    def __init__(
        self,
        name: str,
        kind: str,
        url: str,
        client: httpx.AsyncClient,
        on_metrics: Callable[[str, BackendMetrics], None],
        interval: float = 0.25,
        timeout: float = 1.0,
        failures_before_unhealthy: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.kind, self.url, self.client = name, kind, url, client
        self.on_metrics = on_metrics
        self.interval, self.timeout = interval, timeout
        self.failures_before_unhealthy = failures_before_unhealthy
        self.clock = clock
        self.reader = MetricsReader(kind)
        self.failures = 0
        self.last: BackendMetrics | None = None
        self.last_error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.last is not None and self.last.healthy

    async def _fetch(self) -> str:
        # Accept text/plain: asking for OpenMetrics changes vLLM's answer format.
        async with asyncio.timeout(self.timeout):
            response = await self.client.get(
                self.url, headers={"Accept": "text/plain"}, timeout=self.timeout
            )
        response.raise_for_status()
        return response.text

    async def scrape_once(self) -> BackendMetrics | None:
        """Scrape once; returns what was published, or None while failures are tolerated."""
        try:
            metrics = self.reader.read(await self._fetch(), self.clock())
        except (httpx.HTTPError, TimeoutError, ValueError) as exc:
            return self._failed(exc)
        if self.failures >= self.failures_before_unhealthy:
            log.info("backend %s metrics recovered", self.name)
        self.failures, self.last_error, self.last = 0, None, metrics
        self.on_metrics(self.name, metrics)
        return metrics

    def _failed(self, exc: BaseException) -> BackendMetrics | None:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self.failures < self.failures_before_unhealthy:
            return None
        if self.failures == self.failures_before_unhealthy:
            log.warning("backend %s unhealthy: %s", self.name, self.last_error)
        metrics = replace(self.last or BackendMetrics(), healthy=False)
        self.last = metrics
        self.on_metrics(self.name, metrics)
        return metrics

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await self.scrape_once()
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))
