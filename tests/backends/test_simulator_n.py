"""`n > 1` as vLLM 0.32 serves it: n choices indexed 0..n-1 (a chat stream opens with a role
chunk per choice and every chunk names its choice), usage counting the prompt once and every
choice's tokens, each choice its own engine sequence; and vLLM's refusals (see
simulator/protocol.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import openai
import pytest
from backend_helpers import read_metrics, wait_for
from endpoint_helpers import hold_stream, sample, sse_json

from simulator.launcher import RunningSimulator, start_simulator

CHAT = {"messages": [{"role": "user", "content": "name three colours"}]}


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with start_simulator(speed=50) as running:
        yield running


async def post(sim: RunningSimulator, path: str, body: dict[str, object]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{sim.url}{path}", json=body)


async def test_a_chat_returns_n_choices_indexed_from_zero_each_its_own_text(sim) -> None:
    body = (await post(sim, "/v1/chat/completions", {**CHAT, "n": 3, "max_tokens": 4})).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    texts = [c["message"]["content"] for c in body["choices"]]
    assert len(set(texts)) == 3
    assert all(c["finish_reason"] == "length" for c in body["choices"])


async def test_usage_counts_the_prompt_once_and_every_choices_tokens(sim) -> None:
    one = (await post(sim, "/v1/chat/completions", {**CHAT, "max_tokens": 4})).json()["usage"]
    three = (await post(sim, "/v1/chat/completions", {**CHAT, "n": 3, "max_tokens": 4})).json()
    assert three["usage"]["prompt_tokens"] == one["prompt_tokens"]
    assert three["usage"]["completion_tokens"] == 12


async def test_a_text_completion_returns_n_choices(sim) -> None:
    body = (await post(sim, "/v1/completions", {"prompt": "once", "n": 2, "max_tokens": 3})).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"]["completion_tokens"] == 6


async def test_a_chat_stream_opens_each_choice_with_a_role_chunk(sim) -> None:
    body = {**CHAT, "n": 2, "max_tokens": 2, "stream": True}
    events = [data for _, data in sse_json((await post(sim, "/v1/chat/completions", body)).text)]
    opening = [e["choices"][0] for e in events[:2]]
    assert [(c["index"], c["delta"]) for c in opening] == [
        (0, {"role": "assistant", "content": ""}),
        (1, {"role": "assistant", "content": ""}),
    ]


async def test_every_streamed_chunk_names_its_choice_and_each_choice_finishes_once(sim) -> None:
    body = {**CHAT, "n": 3, "max_tokens": 4, "stream": True}
    events = [data for _, data in sse_json((await post(sim, "/v1/chat/completions", body)).text)]
    assert events[-1] == "[DONE]"
    chunks = [e["choices"][0] for e in events[:-1]]
    assert all(len(e["choices"]) == 1 for e in events[:-1])
    for index in range(3):
        mine = [c for c in chunks if c["index"] == index]
        assert len(mine) == 1 + 4  # its role chunk and its four tokens
        assert [c["finish_reason"] for c in mine].count("length") == 1
        assert mine[-1]["finish_reason"] == "length"


async def test_the_streamed_usage_chunk_sums_the_choices(sim) -> None:
    body = {**CHAT, "n": 2, "max_tokens": 5, "stream": True}
    body["stream_options"] = {"include_usage": True}
    events = [
        data
        for _, data in sse_json((await post(sim, "/v1/completions", {**body, "prompt": "x"})).text)
    ]
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10
    assert {e["choices"][0]["index"] for e in events[:-2]} == {0, 1}


async def test_n_below_one_is_refused_with_vllms_message(sim) -> None:
    response = await post(sim, "/v1/chat/completions", {**CHAT, "n": 0})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "n must be at least 1, got 0."


async def test_n_above_one_with_greedy_sampling_is_refused(sim) -> None:
    response = await post(sim, "/v1/chat/completions", {**CHAT, "n": 2, "temperature": 0})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "n must be 1 when using greedy sampling, got 2."


async def test_a_streamed_beam_search_text_completion_is_refused(sim) -> None:
    body = {"prompt": "x", "n": 2, "use_beam_search": True, "stream": True}
    response = await post(sim, "/v1/completions", body)
    assert response.status_code == 400
    assert (
        response.json()["error"]["message"]
        == "Streaming is not currently supported with beam search"
    )


async def test_the_openai_sdk_reads_n_choices(sim) -> None:
    client = openai.AsyncOpenAI(base_url=f"{sim.url}/v1", api_key="none")
    result = await client.chat.completions.create(
        model="demo-llama", messages=CHAT["messages"], n=2, max_tokens=3
    )
    assert [c.index for c in result.choices] == [0, 1]
    assert result.usage is not None and result.usage.completion_tokens == 6
    await client.close()


async def test_each_choice_takes_a_batch_slot_and_a_disconnect_aborts_them_all(simulator) -> None:
    sim = simulator("--max-num-seqs", "8")
    body = {**CHAT, "n": 3, "max_tokens": 5000, "stream": True}
    async with httpx.AsyncClient(timeout=10) as client:
        started = asyncio.Event()
        url = f"{sim.url}/v1/chat/completions"
        holder = asyncio.create_task(hold_stream(client, url, body, started))
        await asyncio.wait_for(started.wait(), 10)

        async def three_running() -> bool:
            return (await read_metrics(client, sim)).running == 3

        await wait_for(three_running)
        holder.cancel()
        await asyncio.gather(holder, return_exceptions=True)

        async def all_aborted() -> bool:
            m = await read_metrics(client, sim)
            aborts = await sample(
                client, sim, "vllm:request_success_total", finished_reason="abort"
            )
            return m.running == 0 and aborts == 3

        await wait_for(all_aborted)


async def test_each_choice_counts_its_prompt_and_its_tokens_in_the_metrics(simulator) -> None:
    sim = simulator(speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        body = {"prompt": "one two three", "n": 2, "max_tokens": 4}
        await client.post(f"{sim.url}/v1/completions", json=body)
        assert await sample(client, sim, "vllm:prompt_tokens_total") == 6
        assert await sample(client, sim, "vllm:generation_tokens_total") == 8
        lengths = await sample(client, sim, "vllm:request_success_total", finished_reason="length")
        assert lengths == 2
