"""The simulator's Responses store, as vLLM keeps one with `VLLM_ENABLE_RESPONSES_API_STORE=1`
(`vllm/entrypoints/openai/responses/serving.py`): for every caller alike, so that the gateway's
tests can show that nothing of it is ever used (tests/api/test_responses_state.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, tokenize


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with start_simulator("--enable-responses-store", speed=50) as running:
        yield running


async def post(sim: RunningSimulator, **body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(
            f"{sim.url}/v1/responses",
            json={"model": "demo-llama", "max_output_tokens": 3, **body},
        )


async def test_a_stored_response_is_continued_by_any_caller_with_its_conversation(sim) -> None:
    first = (await post(sim, input="My name is Ada", instructions="Be brief")).json()
    second = await post(sim, input="Name?", previous_response_id=first["id"])
    assert second.status_code == 200
    conversation = [
        {"role": "user", "content": "My name is Ada"},
        {"role": "assistant", "content": first["output"][0]["content"][0]["text"]},
        {"role": "user", "content": "Name?"},
    ]
    assert second.json()["usage"]["input_tokens"] == len(tokenize(chat_prompt(conversation)))


async def test_a_response_sent_with_store_false_is_not_kept(sim) -> None:
    first = (await post(sim, input="x", store=False)).json()
    second = await post(sim, input="y", previous_response_id=first["id"])
    assert second.status_code == 404


async def test_a_stored_response_is_retrieved_by_its_id(sim) -> None:
    first = (await post(sim, input="x")).json()
    async with httpx.AsyncClient(timeout=10) as client:
        got = await client.get(f"{sim.url}/v1/responses/{first['id']}")
    assert got.status_code == 200 and got.json()["id"] == first["id"]
