"""A backend that fails before the first token is retried on another backend of the pool."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction

from tenants.models import Backend, ModelRoute
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for


class FailingBackend:
    """A real TCP server that answers every request with a 500 before any token."""

    def __init__(self) -> None:
        self.hits = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hits += 1
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
        body = b'{"error": {"message": "engine dead", "type": "InternalServerError", "code": 500}}'
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n")
        writer.write(b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()


@pytest.fixture
async def failing() -> AsyncIterator[tuple[FailingBackend, str]]:
    backend = FailingBackend()
    server = await asyncio.start_server(backend.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield backend, f"http://127.0.0.1:{port}"
    server.close()
    await server.wait_closed()


@transaction.atomic
def add_failing_backend(url: str, only: bool = False) -> None:
    """One transaction: the gateway's config reload, woken by the first save, reads the tables
    from another thread, and SQLite's shared-cache test database refuses a second writer at once
    ("database table is locked") where a file database would wait."""
    # No metrics (kind openai), so only max_in_flight gates it; its name sorts first, so the
    # scheduler's least-load tie-break picks it before the simulator.
    broken = Backend.objects.create(name="a-broken", base_url=url, kind="openai", max_in_flight=8)
    ModelRoute.objects.create(public_name=MODEL, backend=broken)
    if only:
        Backend.objects.filter(name="sim").update(enabled=False)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_a_request_is_retried_on_another_backend_when_the_first_fails_early(
    gateway, world, failing, stream
):
    backend, url = failing
    await sync_to_async(add_failing_backend)(url)
    await gateway.reload_once()
    await wait_for(lambda: len(gateway.snapshot().backends) == 2, 5)

    status, _, body = await read_all(
        await start(world["alice"], chat_body(max_tokens=3, stream=stream))
    )
    assert status == 200 and backend.hits == 1
    assert b'"content"' in body
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["backend"]) == ("ok", "sim")


async def test_when_every_backend_fails_early_the_client_gets_a_502(gateway, world, failing):
    backend, url = failing
    await sync_to_async(add_failing_backend)(url, only=True)
    await gateway.reload_once()
    status, _, body = await read_all(await start(world["alice"], chat_body(max_tokens=3)))
    assert status == 502 and json.loads(body)["error"]["code"] == "upstream_error"
    assert backend.hits == 1


class DroppingBackend:
    """Streams one chunk, then drops the connection: a failure after the first token."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
        chunk = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
        writer.transport.abort()


async def test_a_backend_that_fails_after_the_first_token_ends_the_stream_with_an_error_event(
    gateway, world
):
    server = await asyncio.start_server(DroppingBackend().handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        await sync_to_async(add_failing_backend)(url, only=True)
        await gateway.reload_once()
        status, _, body = await read_all(await start(world["alice"], chat_body(max_tokens=3)))
    finally:
        server.close()
    assert status == 200
    events = [e for e in body.split(b"\n\n") if e]
    assert events[0].startswith(b'data: {"choices"')
    assert json.loads(events[-2][6:])["error"]["code"] == "upstream_error"
    assert events[-1] == b"data: [DONE]"
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["error_type"]) == ("error", "upstream_error")
