"""The poller publishes each scrape, marks a failing or slow backend unhealthy after N failures
in a row, and recovers by itself when the endpoint answers again."""

from __future__ import annotations

import asyncio

import httpx
from backend_helpers import fixture_text

from llmserver.backends.poller import MetricsPoller
from scheduling.backend_state import BackendMetrics


class FlakyBackend:
    """A metrics endpoint that can be taken down and brought back."""

    def __init__(self) -> None:
        self.up = True
        self.slow = False
        self.accepts: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.accepts.append(request.headers.get("accept", ""))
        if self.slow:
            await asyncio.sleep(1.0)
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, text=fixture_text("vllm_v1.txt"))


def _poller(
    backend: FlakyBackend, seen: list[BackendMetrics], timeout: float = 1.0
) -> MetricsPoller:
    client = httpx.AsyncClient(transport=httpx.MockTransport(backend))
    ticks = iter(range(1000))
    return MetricsPoller(
        "gpu-1",
        "vllm",
        "http://gpu-1/metrics",
        client,
        lambda name, m: seen.append(m),
        interval=0.01,
        timeout=timeout,
        failures_before_unhealthy=3,
        clock=lambda: float(next(ticks)),
    )


async def test_a_scrape_publishes_healthy_metrics_on_the_given_clock() -> None:
    seen: list[BackendMetrics] = []
    backend = FlakyBackend()
    await _poller(backend, seen).scrape_once()
    assert seen[-1].healthy and seen[-1].waiting == 2.0 and seen[-1].scraped_at == 0.0
    assert backend.accepts == ["text/plain"]


async def test_a_backend_that_goes_down_is_unhealthy_after_three_failures_then_recovers() -> None:
    seen: list[BackendMetrics] = []
    backend = FlakyBackend()
    poller = _poller(backend, seen)
    await poller.scrape_once()
    backend.up = False
    assert await poller.scrape_once() is None
    assert await poller.scrape_once() is None
    down = await poller.scrape_once()
    assert down is not None and not down.healthy and down.scraped_at == 0.0
    assert not poller.healthy
    backend.up = True
    up = await poller.scrape_once()
    assert up is not None and up.healthy and poller.failures == 0


async def test_a_slow_endpoint_counts_as_a_failure() -> None:
    seen: list[BackendMetrics] = []
    backend = FlakyBackend()
    backend.slow = True
    poller = _poller(backend, seen, timeout=0.05)
    for _ in range(3):
        await poller.scrape_once()
    assert poller.failures == 3 and seen and not seen[-1].healthy


async def test_run_repeats_scrape_once_until_cancelled() -> None:
    seen: list[BackendMetrics] = []
    task = asyncio.create_task(_poller(FlakyBackend(), seen).run())
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(seen) >= 3
