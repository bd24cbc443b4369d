"""POST /v1/responses as vLLM 0.32 serves it (text only): the typed event stream, each event
with an `event:` line and a sequence number, usage only in `response.completed`, a cut answer
"incomplete", the response body, and vLLM's refusals (see simulator/responses.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import openai
import pytest
from backend_helpers import read_metrics, wait_for
from endpoint_helpers import hold_stream, sample, sse_json

from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, natural_length, tokenize

EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with start_simulator(speed=50) as running:
        yield running


async def post(sim: RunningSimulator, body: dict[str, object]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{sim.url}/v1/responses", json={"model": "demo-llama", **body})


async def stream(sim: RunningSimulator, **body: object) -> list[tuple[str | None, dict]]:
    response = await post(sim, {**body, "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    return sse_json(response.text)  # type: ignore[return-value]


async def test_a_stream_sends_vllms_event_sequence(sim) -> None:
    events = await stream(sim, input="hello", max_output_tokens=3)
    assert [name for name, _ in events] == EVENTS


async def test_each_event_is_named_on_its_event_line_and_numbered_in_order(sim) -> None:
    events = await stream(sim, input="hello", max_output_tokens=3)
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(EVENTS)))


async def test_usage_is_only_in_the_completed_response(sim) -> None:
    events = await stream(sim, input="hello", max_output_tokens=3)
    created, completed = events[0][1]["response"], events[-1][1]["response"]
    assert created["usage"] is None and created["status"] == "in_progress"
    usage = completed["usage"]
    assert usage["output_tokens"] == 3
    assert usage["input_tokens"] == len(
        tokenize(chat_prompt([{"role": "user", "content": "hello"}]))
    )
    assert usage["total_tokens"] == usage["input_tokens"] + 3


async def test_the_completed_response_holds_the_streamed_text_in_the_streamed_item(sim) -> None:
    events = await stream(sim, input="hello", max_output_tokens=3)
    deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    item_id = events[2][1]["item"]["id"]
    [item] = events[-1][1]["response"]["output"]
    assert item["id"] == item_id and item["status"] == "completed"
    assert item["content"][0]["text"] == deltas == "the quick brown"


async def test_an_answer_cut_by_max_output_tokens_completes_as_incomplete(sim) -> None:
    events = await stream(sim, input="hello", max_output_tokens=3)
    final = events[-1][1]["response"]
    assert events[-1][0] == "response.completed"
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_an_unlimited_answer_ends_on_its_own_and_is_completed(sim) -> None:
    body = (await post(sim, {"input": "hello"})).json()
    tokens = natural_length(tokenize(chat_prompt([{"role": "user", "content": "hello"}])))
    assert body["status"] == "completed" and body["incomplete_details"] is None
    assert body["usage"]["output_tokens"] == tokens


async def test_a_body_has_the_output_message_and_usage(sim) -> None:
    body = (await post(sim, {"input": "hello", "max_output_tokens": 2})).json()
    assert body["object"] == "response" and body["id"].startswith("resp_")
    [item] = body["output"]
    assert (item["type"], item["role"]) == ("message", "assistant")
    assert item["content"] == [
        {"annotations": [], "text": "the quick", "type": "output_text", "logprobs": None}
    ]
    assert body["max_output_tokens"] == 2 and body["usage"]["output_tokens"] == 2


async def test_without_max_output_tokens_the_response_echoes_the_rest_of_the_context(sim) -> None:
    body = (await post(sim, {"input": "hello"})).json()
    prompt = body["usage"]["input_tokens"]
    assert body["max_output_tokens"] == 131_072 - prompt


async def test_instructions_come_first_as_a_system_message(sim) -> None:
    body = (
        await post(sim, {"input": "hello", "instructions": "be brief", "max_output_tokens": 1})
    ).json()
    expected = chat_prompt(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    )
    assert body["usage"]["input_tokens"] == len(tokenize(expected))
    assert body["instructions"] == "be brief"


async def test_input_may_be_a_list_of_messages(sim) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]},
    ]
    body = (await post(sim, {"input": messages, "max_output_tokens": 1})).json()
    plain = [{"role": m["role"], "content": m["content"]} for m in messages]
    assert body["usage"]["input_tokens"] == len(tokenize(chat_prompt(plain)))


async def test_a_previous_response_id_is_not_found_as_vllm_stores_nothing(sim) -> None:
    response = await post(sim, {"input": "x", "previous_response_id": "resp_abc"})
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "Response with id 'resp_abc' not found.",
        "type": "invalid_request_error",
        "param": "response_id",
        "code": 404,
    }


async def test_retrieving_a_response_is_not_found(sim) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"{sim.url}/v1/responses/resp_abc")
    assert response.status_code == 404 and response.json()["error"]["param"] == "response_id"


async def test_background_is_refused_without_a_response_store(sim) -> None:
    response = await post(sim, {"input": "x", "background": True})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "background" and "VLLM_ENABLE_RESPONSES_API_STORE" in error["message"]


async def test_a_prompt_template_is_refused(sim) -> None:
    response = await post(sim, {"input": "x", "prompt": {"id": "pmpt_1"}})
    assert response.status_code == 400
    message = "prompt template is not supported (parameter=prompt)"
    assert response.json()["error"]["message"] == message


async def test_a_missing_input_is_a_validation_error(sim) -> None:
    response = await post(sim, {})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "Bad Request" and error["param"] == "body.input"


async def test_the_openai_sdk_reads_the_body_and_the_stream(sim) -> None:
    client = openai.AsyncOpenAI(base_url=f"{sim.url}/v1", api_key="none")
    body = await client.responses.create(model="demo-llama", input="hi", max_output_tokens=2)
    assert body.output_text == "the quick"
    assert body.usage is not None and body.usage.output_tokens == 2
    events = [
        e
        async for e in await client.responses.create(
            model="demo-llama", input="hi", max_output_tokens=2, stream=True
        )
    ]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "the quick"
    await client.close()


async def test_max_output_tokens_above_the_context_is_refused(simulator) -> None:
    sim = simulator("--max-model-len", "32", speed=50)
    response = await post(sim, {"input": "x", "max_output_tokens": 33})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "max_output_tokens"


async def test_a_disconnect_aborts_the_response(simulator) -> None:
    sim = simulator()
    body = {"input": "tell me a long story", "max_output_tokens": 5000, "stream": True}
    async with httpx.AsyncClient(timeout=10) as client:
        started = asyncio.Event()
        holder = asyncio.create_task(hold_stream(client, f"{sim.url}/v1/responses", body, started))
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
