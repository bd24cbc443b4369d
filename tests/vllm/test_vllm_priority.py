"""vLLM started with `--scheduling-policy priority` behind a backend marked "priority
scheduling": the gateway hands each request its band as vLLM's priority (lower first), so an
interactive request that reaches the engine's queue goes before batch work queued there. vLLM
does not preempt running requests for it; the gateway's own preemption is off here, so what is
seen is the engine's order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmserver.testing.processes import GatewayProcess
from llmserver.testing.vllm_server import VllmServer, missing, start_vllm
from tests.real_engines import new_key
from tests.vllm.conftest import MODEL, gateway_for

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def one_slot() -> Iterator[VllmServer]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    server = start_vllm(slots=1, options=["--scheduling-policy", "priority"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(
    one_slot: VllmServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """Both bands may queue at the engine (its capacity is not told), none is paused."""
    queue = {"gate_max_waiting": 4, "max_concurrent_per_user": 8}
    gateway = gateway_for(
        one_slot,
        Path(tmp_path_factory.mktemp("vllm-priority")),
        "--priority-scheduling",
        tiers={"interactive": queue, "batch": queue},
        backend={"preemption": False},
    )
    yield gateway
    gateway.stop()
    gateway.database.drop()  # type: ignore[attr-defined]


async def finish_time(http: httpx.AsyncClient, url: str, key: str, max_tokens: int) -> float:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Describe the sea."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    headers = {"authorization": f"Bearer {key}"}
    response = await http.post(url + "/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return time.monotonic()


async def test_interactive_work_goes_before_batch_work_queued_in_the_engine(gateway, one_slot):
    batch, chat = new_key(gateway, "prio-batch", "batch"), new_key(gateway, "prio-chat")
    async with httpx.AsyncClient(timeout=300) as http:
        batches = [asyncio.create_task(finish_time(http, gateway.url, batch, 40)) for _ in range(3)]
        await asyncio.sleep(1.0)  # one runs, two wait in the engine's queue
        waiting = one_slot.metrics()["vllm:num_requests_waiting"]
        interactive = await finish_time(http, gateway.url, chat, 4)
        done = sorted(await asyncio.gather(*batches))
    assert waiting >= 1
    # Behind the batch request running when it came, ahead of those waiting with it.
    assert done[0] < interactive < done[1]
