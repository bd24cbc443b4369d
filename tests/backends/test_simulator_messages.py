"""POST /v1/messages (Anthropic's Messages API) as vLLM 0.32 serves it (text only): the body
and the named event stream, usage in `message_start` and `message_delta`, stop reasons, and the
two error shapes, Anthropic's for what the handler refuses and OpenAI's for a body pydantic
rejects (see simulator/messages.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from backend_helpers import read_metrics, wait_for
from endpoint_helpers import hold_stream, sample, sse_json

from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, natural_length, tokenize

HI = [{"role": "user", "content": "hi"}]
HI_TOKENS = len(tokenize(chat_prompt(HI)))


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with start_simulator(speed=50) as running:
        yield running


async def post(
    sim: RunningSimulator, body: dict[str, object], path: str = "/v1/messages"
) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{sim.url}{path}", json=body)


def request(**extra: object) -> dict[str, object]:
    return {"model": "demo-llama", "max_tokens": 3, "messages": HI, **extra}


async def test_a_body_has_anthropics_message_shape(sim) -> None:
    body = (await post(sim, request())).json()
    assert body == {
        "id": body["id"],
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "the quick brown"}],
        "model": "demo-llama",
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": HI_TOKENS, "output_tokens": 3},
    }
    assert body["id"].startswith("chatcmpl-")


async def test_a_stream_sends_anthropics_named_events_in_order(sim) -> None:
    events = sse_json((await post(sim, request(stream=True))).text)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == data["type"] for name, data in events)


async def test_the_stream_carries_the_text_in_text_deltas_of_block_zero(sim) -> None:
    events = sse_json((await post(sim, request(stream=True))).text)
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    deltas = [d for n, d in events if n == "content_block_delta"]
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for d in deltas)
    assert "".join(d["delta"]["text"] for d in deltas) == "the quick brown"


async def test_message_start_has_the_input_tokens_and_message_delta_the_final_usage(sim) -> None:
    events = sse_json((await post(sim, request(stream=True))).text)
    start = events[0][1]["message"]
    assert start["usage"] == {"input_tokens": HI_TOKENS, "output_tokens": 0}
    assert start["content"] == [] and start["stop_reason"] is None
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"] == {"input_tokens": HI_TOKENS, "output_tokens": 3}


async def test_system_comes_first_in_the_prompt(sim) -> None:
    body = (await post(sim, request(system="be brief"))).json()
    expected = chat_prompt([{"role": "system", "content": "be brief"}, *HI])
    assert body["usage"]["input_tokens"] == len(tokenize(expected))


async def test_text_blocks_count_as_the_messages_text(sim) -> None:
    blocks = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    body = (await post(sim, request(messages=blocks))).json()
    assert body["usage"]["input_tokens"] == HI_TOKENS


async def test_a_missing_max_tokens_is_refused_in_openais_validation_shape(sim) -> None:
    response = await post(sim, {"model": "demo-llama", "messages": HI})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "Bad Request" and error["param"] == "body.max_tokens"
    assert error["code"] == 400


async def test_max_tokens_below_one_is_refused_in_openais_validation_shape(sim) -> None:
    response = await post(sim, request(max_tokens=0))
    assert response.status_code == 400
    assert "max_tokens must be positive" in response.json()["error"]["message"]


async def test_an_unknown_model_is_an_anthropic_shaped_404(sim) -> None:
    response = await post(sim, request(model="nope"))
    assert response.status_code == 404
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "NotFoundError",
            "message": "The model `nope` does not exist. Valid aliases: demo-llama.",
        },
    }


async def test_count_tokens_counts_the_chat_prompt(sim) -> None:
    body = (
        await post(sim, {"model": "demo-llama", "messages": HI}, "/v1/messages/count_tokens")
    ).json()
    assert body == {
        "input_tokens": HI_TOKENS,
        "context_management": {"original_input_tokens": HI_TOKENS},
    }


async def test_max_tokens_above_the_context_is_an_anthropic_shaped_400(simulator) -> None:
    sim = simulator("--max-model-len", "32", speed=50)
    response = await post(sim, request(max_tokens=33))
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "BadRequestError"
    assert body["error"]["message"].startswith("max_completion_tokens=33 cannot be greater")


async def test_an_answer_that_ends_on_its_own_stops_with_end_turn(simulator) -> None:
    sim = simulator("--natural-stop", "always", speed=50)
    body = (await post(sim, request(max_tokens=1000))).json()
    assert body["stop_reason"] == "end_turn"
    assert body["usage"]["output_tokens"] == natural_length(tokenize(chat_prompt(HI)))


async def test_a_disconnect_aborts_the_message(simulator) -> None:
    sim = simulator()
    body = request(max_tokens=5000, stream=True)
    async with httpx.AsyncClient(timeout=10) as client:
        started = asyncio.Event()
        holder = asyncio.create_task(hold_stream(client, f"{sim.url}/v1/messages", body, started))
        await asyncio.wait_for(started.wait(), 10)

        async def running() -> bool:
            return (await read_metrics(client, sim)).running == 1

        await wait_for(running)
        holder.cancel()
        await asyncio.gather(holder, return_exceptions=True)

        async def aborted() -> bool:
            m = await read_metrics(client, sim)
            aborts = await sample(
                client, sim, "vllm:request_success_total", finished_reason="abort"
            )
            return m.running == 0 and aborts == 1

        await wait_for(aborted)
