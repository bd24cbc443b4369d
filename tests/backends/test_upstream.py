"""The upstream client: priority only where the backend reads it, errors that say if retry is safe."""

from __future__ import annotations

import json

import httpx
import pytest

from llmserver.backends.upstream import BackendError, UpstreamClient


def client_for(kind: str, handler, priority_scheduling: bool = True) -> UpstreamClient:
    return UpstreamClient(
        "http://backend",
        kind,
        api_key="secret",
        transport=httpx.MockTransport(handler),
        priority_scheduling=priority_scheduling,
    )


@pytest.mark.parametrize(
    ("kind", "sent"), [("vllm", 2), ("sglang", -2), ("tgi", None), ("openai", None)]
)
async def test_priority_is_passed_in_each_kinds_polarity_only_to_backends_that_read_it(kind, sent):
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        assert request.headers["authorization"] == "Bearer secret"
        return httpx.Response(200, json={"choices": []})

    client = client_for(kind, handler)
    await client.complete("/v1/chat/completions", {"model": "m"}, priority=2)
    await client.aclose()
    assert bodies[0].get("priority") == sent


@pytest.mark.parametrize(
    ("status", "body", "retryable", "message"),
    [
        (500, {"error": {"message": "boom", "code": 500}}, True, "boom"),
        (429, {"error": {"message": "busy"}}, True, "busy"),
        (400, {"error": {"message": "too long", "code": 400}}, False, "too long"),
        (
            422,
            {"error": "Input validation error", "error_type": "validation"},
            False,
            "Input validation error",
        ),
    ],
)
async def test_upstream_errors_say_whether_another_backend_may_be_tried(
    status, body, retryable, message
):
    client = client_for("vllm", lambda r: httpx.Response(status, json=body))
    with pytest.raises(BackendError) as info:
        await client.complete("/v1/chat/completions", {})
    assert (info.value.retryable, info.value.status, info.value.message) == (
        retryable,
        status,
        message,
    )
    with pytest.raises(BackendError) as info:
        async for _ in client.stream_chat("/v1/chat/completions", {}):
            pass
    assert info.value.retryable == retryable
    await client.aclose()


async def test_an_unreachable_backend_is_retryable():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = client_for("vllm", handler)
    with pytest.raises(BackendError) as info:
        async for _ in client.stream_chat("/v1/chat/completions", {}):
            pass
    assert info.value.retryable and info.value.status is None
    await client.aclose()


async def test_a_stream_is_passed_through_as_it_arrives():
    class Body(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b"data: 1\n\n"
            yield b"data: [DONE]\n\n"

    class Streaming(httpx.AsyncBaseTransport):
        # MockTransport reads the whole body first; this one hands the stream over as it is.
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, stream=Body())

    client = UpstreamClient("http://backend", "vllm", transport=Streaming())
    chunks = [c async for c in client.stream_chat("/v1/chat/completions", {})]
    assert chunks == [b"data: 1\n\n", b"data: [DONE]\n\n"]
    await client.aclose()


def test_the_connection_pool_is_sized_explicitly():
    client = UpstreamClient("http://backend", "vllm", max_connections=777)
    pool = client.http._transport._pool
    assert pool._max_connections == 777


async def test_no_priority_goes_to_a_backend_not_marked_as_priority_scheduling():
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": []})

    client = client_for("vllm", handler, priority_scheduling=False)
    await client.complete("/v1/chat/completions", {"model": "m"}, priority=2)
    await client.aclose()
    assert "priority" not in bodies[0]
