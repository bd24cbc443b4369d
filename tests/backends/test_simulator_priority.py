"""Priority as each server treats it: vLLM serves lower first under `--scheduling-policy
priority` and ignores it under `fcfs` (or, as its V0 engine, refuses it); SGLang serves higher
first; TGI has none."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
from backend_helpers import read_metrics, wait_for

from simulator.launcher import RunningSimulator


async def _completion_order(
    client: httpx.AsyncClient,
    sim: RunningSimulator,
    low_value: int = 10,
    high_value: int = 0,
    kind: str = "vllm",
) -> list[str]:
    """Occupy the only slot, queue 'low' then 'high', free the slot; return the finish order.
    The blocker is long (minutes of tokens) and hung up once both wait, so that a slow machine
    cannot let it finish, and 'low' run, before 'low' is seen waiting."""
    url = sim.url
    blocker = asyncio.create_task(
        client.post(
            f"{url}/v1/completions", json={"prompt": "block", "max_tokens": 10_000}, timeout=60
        )
    )

    async def one_running() -> bool:
        return (await read_metrics(client, sim, kind)).running == 1

    await wait_for(one_running)
    order: list[str] = []

    async def send(name: str, priority: int) -> None:
        body = {"prompt": name, "max_tokens": 3, "priority": priority}
        response = await client.post(f"{url}/v1/completions", json=body)
        response.raise_for_status()
        order.append(name)

    low = asyncio.create_task(send("low", low_value))

    async def low_waiting() -> bool:
        return (await read_metrics(client, sim, kind)).waiting == 1

    await wait_for(low_waiting)
    high = asyncio.create_task(send("high", high_value))

    async def both_waiting() -> bool:
        return (await read_metrics(client, sim, kind)).waiting == 2

    await wait_for(both_waiting)
    blocker.cancel()  # the client hangs up: the simulator aborts it at its next step
    with contextlib.suppress(asyncio.CancelledError):
        await blocker
    await asyncio.gather(low, high)
    return order


async def test_vllm_priority_mode_serves_lower_values_first(simulator) -> None:
    sim = simulator("--max-num-seqs", "1", "--scheduling-policy", "priority")
    async with httpx.AsyncClient(timeout=10) as client:
        assert await _completion_order(client, sim) == ["high", "low"]


async def test_vllm_v0_under_fcfs_refuses_a_nonzero_priority(simulator) -> None:
    sim = simulator("--scheduling-policy", "fcfs", "--refuse-priority-under-fcfs")
    async with httpx.AsyncClient(timeout=10) as client:
        body = {"prompt": "x", "max_tokens": 2, "priority": 2}
        response = await client.post(f"{sim.url}/v1/completions", json=body)
        zero = await client.post(f"{sim.url}/v1/completions", json={**body, "priority": 0})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "Got priority 2 but Priority scheduling is not enabled.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert zero.status_code == 200


async def test_sglang_priority_mode_serves_higher_values_first(simulator) -> None:
    sim = simulator("--max-num-seqs", "1", "--scheduling-policy", "priority", "--format", "sglang")
    async with httpx.AsyncClient(timeout=10) as client:
        order = await _completion_order(client, sim, low_value=0, high_value=10, kind="sglang")
    assert order == ["high", "low"]


@pytest.mark.parametrize("fmt", ["vllm", "tgi", "sglang"])
async def test_servers_without_priority_scheduling_ignore_the_field(simulator, fmt) -> None:
    """vLLM's V1 engine too, as the real 0.32 does (`tests/vllm/test_vllm_sdk.py`)."""
    sim = simulator("--max-num-seqs", "1", "--scheduling-policy", "fcfs", "--format", fmt)
    async with httpx.AsyncClient(timeout=10) as client:
        assert await _completion_order(client, sim, kind=fmt) == ["low", "high"]
