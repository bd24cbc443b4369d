"""The chat API without its gaps, and embeddings through the scheduler: several choices, no
silent cap on the answer, `service_tier` echoed as served, the endpoint on the usage row."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async

from llmserver.pipeline.relay import upstream_body
from llmserver.wire.validation import TokenLimits, validate
from tenants.models import Backend, ModelRoute
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for

EMBEDDER = "demo-embed"


def events(body: bytes) -> list[dict]:
    lines = [x[6:] for x in body.decode().split("\n") if x.startswith("data: ")]
    return [json.loads(x) for x in lines if x != "[DONE]"]


async def test_several_choices_are_served_and_billed_as_one_request(gateway, world):
    status, _, body = await read_all(
        await start(world["alice"], chat_body(max_tokens=5, stream=False, n=2))
    )
    data = json.loads(body)
    assert status == 200 and [c["index"] for c in data["choices"]] == [0, 1]
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert row["completion_tokens"] == data["usage"]["completion_tokens"] == 10


async def test_a_streamed_answer_of_several_choices_carries_each_choices_index(gateway, world):
    status, _, body = await read_all(
        await start(
            world["alice"], chat_body(max_tokens=3, n=2, stream_options={"include_usage": True})
        )
    )
    chunks = events(body)
    indexes = {c["index"] for chunk in chunks for c in chunk.get("choices", [])}
    assert status == 200 and indexes == {0, 1}
    assert chunks[-1]["usage"]["completion_tokens"] == 6


async def test_a_chat_without_max_tokens_is_not_cut_at_a_gateway_default(gateway, world):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Tell me"}]})
    status, _, raw = await read_all(await start(world["alice"], body.encode()))
    data = json.loads(raw)
    assert status == 200 and data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"]["completion_tokens"] > gateway.settings.default_max_tokens // 16


async def test_a_tiers_maximum_is_sent_for_a_request_that_names_none(gateway, world):
    await sync_to_async(type(world["tier"]).objects.filter(pk=world["tier"].pk).update)(
        max_output_tokens=3
    )
    gateway.keys.clear()
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Tell me"}]})
    status, _, raw = await read_all(await start(world["alice"], body.encode()))
    data = json.loads(raw)
    assert status == 200 and data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 3


async def test_service_tier_is_named_in_every_chunk_as_it_was_served(gateway, world):
    status, _, body = await read_all(
        await start(world["alice"], chat_body(max_tokens=3, service_tier="priority"))
    )
    chunks = events(body)
    assert status == 200 and chunks and {c["service_tier"] for c in chunks} == {"priority"}


async def test_flex_is_named_flex_in_a_whole_answer(gateway, world):
    status, _, body = await read_all(
        await start(world["alice"], chat_body(max_tokens=3, stream=False, service_tier="flex"))
    )
    assert status == 200 and json.loads(body)["service_tier"] == "flex"


def test_max_completion_tokens_is_sent_as_max_tokens_to_a_server_that_reads_only_that():
    req = validate(
        "chat",
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 9},
        TokenLimits(16, 100),
    )
    assert upstream_body(req, "up", reads_max_completion_tokens=False)["max_tokens"] == 9
    assert upstream_body(req, "up")["max_completion_tokens"] == 9


def add_embedder(url: str) -> None:
    backend = Backend.objects.create(name="embedder", base_url=url, kind="vllm")
    ModelRoute.objects.create(public_name=EMBEDDER, backend=backend, endpoints="embeddings")


async def test_embeddings_are_served_through_the_queue_and_billed_by_their_input(gateway, world):
    await sync_to_async(add_embedder)(world["sim"].url)
    await gateway.reload_once()
    body = json.dumps({"model": EMBEDDER, "input": ["first text", "second text"]}).encode()
    status, headers, raw = await read_all(await start(world["alice"], body, "/v1/embeddings"))
    data = json.loads(raw)
    assert status == 200 and [d["index"] for d in data["data"]] == [0, 1]
    assert data["model"] == EMBEDDER and b"x-request-id" in headers
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["status"], row["completion_tokens"]) == ("embeddings", "ok", 0)
    assert row["prompt_tokens"] == data["usage"]["prompt_tokens"] > 0


async def test_a_model_not_served_on_an_endpoint_is_a_404_that_says_so(gateway, world):
    body = json.dumps({"model": MODEL, "input": "text"}).encode()
    status, _, raw = await read_all(await start(world["alice"], body, "/v1/embeddings"))
    error = json.loads(raw)["error"]
    assert (status, error["code"]) == (404, "model_not_found")
    assert "embeddings" in error["message"]


async def test_a_chat_is_never_sent_to_a_backend_that_serves_only_embeddings(gateway, world):
    await sync_to_async(add_embedder)(world["sim"].url)
    await sync_to_async(ModelRoute.objects.filter(public_name=EMBEDDER).update)(public_name=MODEL)
    await gateway.reload_once()
    for _ in range(4):
        status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
        assert status == 200
    await gateway.usage.flush_once()
    assert {r["backend"] for r in await usage_rows()} == {"sim"}


async def test_the_usage_row_names_the_endpoint_a_request_came_through(gateway, world):
    text = json.dumps({"model": MODEL, "prompt": "Once", "max_tokens": 2}).encode()
    await read_all(await start(world["alice"], text, "/v1/completions"))
    await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    await gateway.usage.flush_once()
    assert [r["endpoint"] for r in await usage_rows()] == ["completions", "chat"]


def named_events(body: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


RESPONSE = {"model": MODEL, "input": "Tell me something", "max_output_tokens": 6}
MESSAGE = {"model": MODEL, "max_tokens": 6, "messages": [{"role": "user", "content": "Hello"}]}


async def test_a_streamed_response_keeps_its_named_events_and_is_billed_from_its_last(
    gateway, world
):
    body = json.dumps({**RESPONSE, "stream": True}).encode()
    status, _, raw = await read_all(await start(world["alice"], body, "/v1/responses"))
    events = named_events(raw)
    names = [name for name, _ in events]
    assert status == 200 and names[0] == "response.created" and names[-1] == "response.completed"
    assert all(data["type"] == name for name, data in events) and b"[DONE]" not in raw
    usage = events[-1][1]["response"]["usage"]
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["status"]) == ("responses", "ok")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (
        usage["input_tokens"],
        usage["output_tokens"],
    ) and usage["output_tokens"] == 6


async def test_a_whole_response_is_billed_from_its_usage(gateway, world):
    status, _, raw = await read_all(
        await start(world["alice"], json.dumps(RESPONSE).encode(), "/v1/responses")
    )
    data = json.loads(raw)
    assert status == 200 and data["object"] == "response" and data["model"] == MODEL
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert row["completion_tokens"] == data["usage"]["output_tokens"] == 6


async def test_a_streamed_message_ends_with_message_stop_and_is_billed_once(gateway, world):
    body = json.dumps({**MESSAGE, "stream": True}).encode()
    status, _, raw = await read_all(await start(world["alice"], body, "/v1/messages"))
    names = [name for name, _ in named_events(raw)]
    assert status == 200 and names[0] == "message_start" and names[-1] == "message_stop"
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["status"], row["completion_tokens"]) == ("messages", "ok", 6)
    assert row["prompt_tokens"] > 0


async def test_a_message_refusal_is_in_anthropics_error_shape(gateway, world):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}).encode()
    status, _, raw = await read_all(await start(world["alice"], body, "/v1/messages"))
    assert status == 400 and json.loads(raw) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "'max_tokens' is required."},
    }


async def test_anthropics_x_api_key_header_authenticates(gateway, world):
    body = json.dumps(MESSAGE).encode()
    comm = await start(None, body, "/v1/messages", [(b"x-api-key", world["alice"].encode())])
    status, _, raw = await read_all(comm)
    assert status == 200 and json.loads(raw)["type"] == "message"


def text_events_in(body: bytes, name: bytes) -> int:
    return sum(1 for block in body.split(b"\n\n") if block.startswith(b"event: " + name + b"\n"))


async def hang_up_after(comm, events: int) -> bytes:
    """Read the head and `events` body messages, then disconnect; the body the gateway sent.
    That is more than was read where the relay sent further events before the hang-up reached
    it (a send is a put on the communicator's queue: several upstream events that came in one
    read go out together), so the rest is taken from the queue once the request has ended."""
    head = await comm.receive_output(10)
    assert head["status"] == 200
    got = b"".join([(await comm.receive_output(10))["body"] for _ in range(events)])
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(5)
    while not comm.output_queue.empty():
        got += comm.output_queue.get_nowait().get("body", b"")
    return got


async def test_a_response_stream_the_client_leaves_is_billed_the_text_it_received(gateway, world):
    body = json.dumps({**RESPONSE, "max_output_tokens": 400, "stream": True}).encode()
    comm = await start(world["alice"], body, "/v1/responses")
    got = await hang_up_after(comm, 8)
    await wait_for(lambda: not gateway.inflight.tasks, 5)
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["status"]) == ("responses", "cancelled")
    assert row["completion_tokens"] == text_events_in(got, b"response.output_text.delta") > 0


async def test_a_message_stream_the_client_leaves_is_billed_the_text_it_received(gateway, world):
    body = json.dumps({**MESSAGE, "max_tokens": 400, "stream": True}).encode()
    comm = await start(world["alice"], body, "/v1/messages")
    got = await hang_up_after(comm, 8)
    await wait_for(lambda: not gateway.inflight.tasks, 5)
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["status"]) == ("messages", "cancelled")
    assert row["completion_tokens"] == text_events_in(got, b"content_block_delta") > 0


async def test_a_response_the_backend_refuses_is_its_refusal_and_costs_nothing(gateway, world):
    # The engine is sent `store: false` (the gateway keeps the state), which `background` needs.
    body = json.dumps({**RESPONSE, "background": True}).encode()
    status, _, raw = await read_all(await start(world["alice"], body, "/v1/responses"))
    assert status == 400 and "background" in json.loads(raw)["error"]["message"]
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["completion_tokens"], float(row["cost"])) == ("error", 0, 0.0)
