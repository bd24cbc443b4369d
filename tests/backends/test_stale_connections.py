"""A kept-alive connection that the backend closes must not fail the next request.

llama-server's HTTP library (cpp-httplib) closes a keep-alive connection after 5 s idle
(`CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND`). If the gateway reuses the pooled socket just as the
backend closes it, the request dies before any response byte (httpx said `RemoteProtocolError`,
aiohttp says `ServerDisconnectedError`): that was the 502 "unreachable: RemoteProtocolError" seen
in front of llama-server. The raw TCP server here
plays that race deterministically: it answers the first request on a connection with keep-alive,
then closes the connection when the next request arrives on it, without answering.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import pytest

from llmserver.backends.spec import BackendSpec
from llmserver.backends.upstream import BackendError, UpstreamClient

ANSWER = json.dumps({"choices": [{"text": "ok"}], "usage": {"completion_tokens": 1}}).encode()
STREAM = b"data: {}\n\ndata: [DONE]\n\n"


class KeepAliveThenClose:
    """Answers one request per connection with keep-alive, closes on the second, unanswered."""

    def __init__(self) -> None:
        self.connections = 0
        self.answered = 0
        self.dropped = 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def _read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        return head

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        head = await self._read_request(reader)
        if head is not None:
            streaming = head.startswith(b"POST /v1/chat/")  # this test's convention
            body, kind = (
                (STREAM, b"text/event-stream") if streaming else (ANSWER, b"application/json")
            )
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\n"
                b"Connection: keep-alive\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
            self.answered += 1
            if await self._read_request(reader) is not None:
                self.dropped += 1  # the close that raced the client's reuse of the socket
        writer.close()

    async def __aenter__(self) -> KeepAliveThenClose:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def backend() -> AsyncIterator[KeepAliveThenClose]:
    async with KeepAliveThenClose() as server:
        yield server


async def test_a_request_on_a_connection_the_backend_closed_is_retried_on_a_fresh_one(backend):
    client = UpstreamClient(BackendSpec("llama", "llamacpp", backend.url))
    try:
        for _ in range(3):
            status, data = await client.complete("/v1/completions", {"prompt": "hi"})
            assert (status, data["choices"][0]["text"]) == (200, "ok")
    finally:
        await client.aclose()
    assert backend.dropped >= 1  # the race happened, and nobody saw it


async def test_a_stream_on_a_connection_the_backend_closed_is_retried_on_a_fresh_one(backend):
    client = UpstreamClient(BackendSpec("any", "openai", backend.url))
    try:
        for _ in range(3):
            chunks = [c async for c in client.stream_chat("/v1/chat/completions", {"x": 1})]
            assert b"".join(chunks) == STREAM
            # Streams and plain calls share the pool: the next plain call meets the stale socket.
            await client.complete("/v1/completions", {"prompt": "hi"})
    finally:
        await client.aclose()
    assert backend.dropped >= 1


async def test_the_retry_happens_once_and_the_failure_is_logged_with_backend_and_request(
    caplog,
):
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    client = UpstreamClient(BackendSpec("llama-1", "llamacpp", f"http://{host}:{port}"))
    caplog.set_level(logging.WARNING, logger="llmserver.backends.upstream")
    try:
        with pytest.raises(BackendError) as info:
            await client.complete("/v1/completions", {}, request_id="chatcmpl-abc")
    finally:
        await client.aclose()
        server.close()
    assert info.value.retryable and "ServerDisconnectedError" in info.value.message
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # the first attempt (retried), then the retry (given up)
    assert all("llama-1" in w and "chatcmpl-abc" in w and "closed" in w for w in warnings)


async def test_idle_connections_leave_the_pool_before_the_backend_closes_them():
    client = UpstreamClient(BackendSpec("llama", "llamacpp", "http://127.0.0.1:1"))
    pooled, _fresh = client.sessions()
    # cpp-httplib closes idle keep-alive connections after 5 s; the pool lets go sooner.
    assert pooled.connector is not None
    assert pooled.connector._keepalive_timeout < 5.0  # type: ignore[attr-defined]
    await client.aclose()
