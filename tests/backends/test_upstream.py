"""The upstream client: priority only where the backend reads it, errors that say if retry is safe.

Each test runs a real HTTP server on a free loopback port (aiohttp's web server) with the
handler it needs, stopped at the end of the test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from llmserver.backends.spec import BackendSpec
from llmserver.backends.upstream import BackendError, UpstreamClient
from llmserver.conf import GatewaySettings

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """`await serve(handler)` starts a server answering every POST with `handler`; its URL."""
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("kind", "sent"), [("vllm", 2), ("sglang", -2), ("tgi", None), ("openai", None)]
)
async def test_priority_is_passed_in_each_kinds_polarity_only_to_backends_that_read_it(
    serve, kind, sent
):
    bodies = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        assert request.headers["authorization"] == "Bearer secret"
        return web.json_response({"choices": []})

    client = UpstreamClient(
        BackendSpec("b", kind, await serve(handler), api_key="secret", priority_scheduling=True)
    )
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
    serve, status, body, retryable, message
):
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(body, status=status)

    client = UpstreamClient(BackendSpec("b", "vllm", await serve(handler)))
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
    # A port nobody listens on: the connection is refused.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    client = UpstreamClient(BackendSpec("b", "vllm", f"http://127.0.0.1:{port}"))
    with pytest.raises(BackendError) as info:
        async for _ in client.stream_chat("/v1/chat/completions", {}):
            pass
    assert info.value.retryable and info.value.status is None
    await client.aclose()


async def test_a_stream_is_passed_through_as_it_arrives(serve):
    second = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: 1\n\n")
        await second.wait()  # the client has the first event before the second is written
        await response.write(b"data: [DONE]\n\n")
        return response

    client = UpstreamClient(BackendSpec("b", "vllm", await serve(handler)))
    chunks = []
    async for chunk in client.stream_chat("/v1/chat/completions", {}):
        chunks.append(chunk)
        second.set()
    assert chunks == [b"data: 1\n\n", b"data: [DONE]\n\n"]
    await client.aclose()


async def test_a_stream_the_gateway_stops_reading_closes_its_upstream_connection(serve):
    closed = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            while True:
                await response.write(b"data: {}\n\n")
                await asyncio.sleep(0.01)
        except (ConnectionError, asyncio.CancelledError):
            closed.set()
            raise

    client = UpstreamClient(BackendSpec("b", "vllm", await serve(handler)))
    stream = client.stream_chat("/v1/chat/completions", {})
    assert await anext(stream) == b"data: {}\n\n"
    await stream.aclose()
    await asyncio.wait_for(closed.wait(), 5)
    await client.aclose()


async def test_the_connection_pool_is_sized_explicitly():
    client = UpstreamClient(
        BackendSpec("b", "vllm", "http://backend"), GatewaySettings(upstream_max_connections=777)
    )
    pooled, _fresh = client.sessions()
    assert pooled.connector is not None and pooled.connector.limit == 777
    await client.aclose()


async def test_no_priority_goes_to_a_backend_not_marked_as_priority_scheduling(serve):
    bodies = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(json.loads(await request.read()))
        return web.json_response({"choices": []})

    client = UpstreamClient(
        BackendSpec("b", "vllm", await serve(handler), priority_scheduling=False)
    )
    await client.complete("/v1/chat/completions", {"model": "m"}, priority=2)
    await client.aclose()
    assert "priority" not in bodies[0]
