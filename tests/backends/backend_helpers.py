"""Helpers for the backend tests: fixture texts, metrics reads, polling a loopback server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx

from llmserver.backends.metrics import MetricsReader
from scheduling.backend_state import BackendMetrics
from simulator.launcher import RunningSimulator

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


async def read_metrics(
    client: httpx.AsyncClient, sim: RunningSimulator, kind: str = "vllm"
) -> BackendMetrics:
    response = await client.get(sim.metrics_url, headers={"Accept": "text/plain"})
    return MetricsReader(kind).read(response.text, 0.0)


async def counter(client: httpx.AsyncClient, sim: RunningSimulator, line_start: str) -> float:
    """The value of the first sample line that starts with `line_start`."""
    text = (await client.get(sim.metrics_url)).text
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start!r}")


async def wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    """Poll an async predicate until it is true (a loopback server gives no other signal)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)
