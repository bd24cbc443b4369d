"""`--scheduling-policy priority` serves the waiting queue by lower `priority` first, as vLLM;
`fcfs` keeps arrival order and ignores the field."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from backend_helpers import read_metrics, wait_for

from simulator.launcher import RunningSimulator


async def _completion_order(client: httpx.AsyncClient, sim: RunningSimulator) -> list[str]:
    """Occupy the only slot, queue 'low' (priority 10) then 'high' (0); return finish order."""
    url = sim.url
    blocker = asyncio.create_task(
        client.post(f"{url}/v1/completions", json={"prompt": "block", "max_tokens": 60})
    )

    async def one_running() -> bool:
        return (await read_metrics(client, sim)).running == 1

    await wait_for(one_running)
    order: list[str] = []

    async def send(name: str, priority: int) -> None:
        body = {"prompt": name, "max_tokens": 3, "priority": priority}
        response = await client.post(f"{url}/v1/completions", json=body)
        response.raise_for_status()
        order.append(name)

    low = asyncio.create_task(send("low", 10))

    async def low_waiting() -> bool:
        return (await read_metrics(client, sim)).waiting == 1

    await wait_for(low_waiting)
    high = asyncio.create_task(send("high", 0))

    async def both_waiting() -> bool:
        return (await read_metrics(client, sim)).waiting == 2

    await wait_for(both_waiting)
    await asyncio.gather(blocker, low, high)
    return order


@pytest.mark.parametrize(
    ("policy", "expected"), [("priority", ["high", "low"]), ("fcfs", ["low", "high"])]
)
async def test_waiting_queue_order_follows_the_scheduling_policy(
    simulator, policy, expected
) -> None:
    sim = simulator("--max-num-seqs", "1", "--scheduling-policy", policy)
    async with httpx.AsyncClient(timeout=10) as client:
        assert await _completion_order(client, sim) == expected
