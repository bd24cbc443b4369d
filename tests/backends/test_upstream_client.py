"""The upstream client streams through without buffering, aborts upstream when closed, passes
`priority` only to kinds that take it, and says whether a failure may be retried."""

from __future__ import annotations

import json

import httpx
import pytest
from backend_helpers import counter, wait_for

from llmserver.backends.upstream import BackendError, UpstreamClient

CHAT = {"model": "demo-llama", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _mock(handler) -> UpstreamClient:
    return UpstreamClient("http://b", "vllm", transport=httpx.MockTransport(handler))


async def test_stream_chat_relays_the_simulators_chunks(simulator) -> None:
    sim = simulator()
    client = UpstreamClient(sim.url, "vllm")
    data = b"".join(
        [c async for c in client.stream_chat("/v1/chat/completions", {**CHAT, "max_tokens": 3}, 0)]
    )
    await client.aclose()
    assert data.endswith(b"data: [DONE]\n\n") and data.count(b"data: ") == 5


async def test_closing_the_stream_mid_way_aborts_the_upstream_request(simulator) -> None:
    sim = simulator()
    client = UpstreamClient(sim.url, "vllm")
    stream = client.stream_chat("/v1/chat/completions", {**CHAT, "max_tokens": 5000}, None)
    await anext(stream)
    await anext(stream)
    await stream.aclose()
    aborts = 'vllm:request_success_total{engine="0",finished_reason="abort"'
    async with httpx.AsyncClient() as probe:
        await wait_for(lambda: _equals(counter(probe, sim, aborts), 1.0))
    await client.aclose()


async def _equals(value, expected: float) -> bool:
    return await value == expected


@pytest.mark.parametrize(
    ("kind", "sent"), [("vllm", 3), ("sglang", 3), ("tgi", None), ("openai", None)]
)
async def test_priority_is_passed_only_to_kinds_that_take_it(kind, sent) -> None:
    bodies: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": []})

    client = UpstreamClient("http://b", kind, transport=httpx.MockTransport(handler))
    await client.complete("/v1/chat/completions", {"messages": [], "priority": 9}, 3)
    assert bodies[0].get("priority") == sent


async def test_a_5xx_before_the_first_byte_is_retryable() -> None:
    client = _mock(lambda r: httpx.Response(503, json={"error": {"message": "busy", "code": 503}}))
    with pytest.raises(BackendError) as info:
        [c async for c in client.stream_chat("/v1/chat/completions", CHAT, None)]
    assert info.value.retryable and info.value.status == 503 and info.value.message == "busy"


async def test_a_connect_error_is_retryable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(BackendError) as info:
        await _mock(refuse).complete("/v1/completions", {"prompt": "x"}, None)
    assert info.value.retryable and info.value.status is None


async def test_a_4xx_is_not_retryable_and_keeps_the_body() -> None:
    body = {"error": {"message": "bad", "type": "BadRequestError", "param": None, "code": 400}}
    client = _mock(lambda r: httpx.Response(400, json=body))
    with pytest.raises(BackendError) as info:
        [c async for c in client.stream_chat("/v1/chat/completions", CHAT, None)]
    assert not info.value.retryable and info.value.body == body


async def test_a_failure_after_the_first_chunk_is_not_retryable() -> None:
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b"data: {}\n\n"
            raise httpx.ReadError("reset")

    client = _mock(lambda r: httpx.Response(200, stream=Broken()))
    stream = client.stream_chat("/v1/chat/completions", CHAT, None)
    assert await anext(stream) == b"data: {}\n\n"
    with pytest.raises(BackendError) as info:
        await anext(stream)
    assert not info.value.retryable


def test_the_pool_is_not_capped_at_httpx_default_of_100() -> None:
    client = UpstreamClient("http://b", "vllm", max_connections=500)
    pool = client.client._transport._pool  # httpx exposes its limits only here
    assert pool._max_connections == 500 and pool._max_keepalive_connections == 500
