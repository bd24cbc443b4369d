"""A backend that takes a request and sends nothing (a hung engine behind a live HTTP server) is
given up after its first-byte timeout, not the read timeout: the request goes to another backend
of the pool, or its client gets a 502 that the usage row records. A whole (non-streamed) answer
is given up once the engine also leaves a one-token stream unanswered for as long."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from asgiref.sync import sync_to_async

from tenants.models import Backend
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for
from tests.api.test_retry import add_failing_backend

HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


@contextlib.asynccontextmanager
async def hung_backend(send_headers: bool) -> AsyncIterator[str]:
    """Reads the request, answers nothing (or only the headers) and holds the connection."""
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            if send_headers:
                writer.write(HEADERS)
                await writer.drain()
            await reader.read()  # until the gateway gives up and closes

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()


async def hung_backend_added(gateway, url: str, only: bool) -> None:
    """The hung backend in the pool with a 0.5 s first-byte timeout, once the gateway has it
    (reloads started by the first save may finish after the second)."""
    await sync_to_async(add_failing_backend)(url, only=only)
    await sync_to_async(Backend.objects.filter(name="a-broken").update)(
        first_byte_timeout_seconds=0.5
    )

    def applied() -> bool:
        client = gateway.backends.clients.get("a-broken")
        return client is not None and client.first_byte_timeout == 0.5

    await wait_for(applied, 5)


@pytest.mark.parametrize("send_headers", [False, True], ids=["silent", "headers-only"])
async def test_a_hung_only_backend_is_a_502_after_its_first_byte_timeout(
    gateway, world, send_headers
):
    async with hung_backend(send_headers) as url:
        await hung_backend_added(gateway, url, only=True)
        began = time.monotonic()
        status, _, body = await read_all(await start(world["alice"], chat_body(max_tokens=3)))
        waited = time.monotonic() - began
    assert status == 502 and json.loads(body)["error"]["code"] == "upstream_error"
    assert b"nothing within 0.5 s" in body
    assert waited < 5
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["error_type"], row["completion_tokens"]) == (
        "error",
        "upstream_error",
        0,
    )


async def test_a_non_streamed_request_to_a_hung_only_backend_is_a_502_after_its_probe(
    gateway, world
):
    async with hung_backend(send_headers=False) as url:
        await hung_backend_added(gateway, url, only=True)
        began = time.monotonic()
        body = chat_body(max_tokens=3, stream=False)
        status, _, raw = await read_all(await start(world["alice"], body), timeout=15)
        waited = time.monotonic() - began
    assert status == 502 and b"nothing within 0.5 s" in raw
    assert waited < 5
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["error_type"]) == ("error", "upstream_error")


async def sim_first_byte_timeout(gateway, seconds: float) -> None:
    await sync_to_async(Backend.objects.filter(name="sim").update)(
        first_byte_timeout_seconds=seconds
    )

    def applied() -> bool:
        client = gateway.backends.clients.get("sim")
        return client is not None and client.first_byte_timeout == seconds

    await wait_for(applied, 5)


async def test_a_long_non_streamed_answer_from_a_live_engine_is_waited_for(gateway, world):
    await sim_first_byte_timeout(gateway, 0.2)
    began = time.monotonic()
    body = chat_body(max_tokens=1000, stream=False)
    status, _, raw = await read_all(await start(world["alice"], body), timeout=30)
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 1000
    assert time.monotonic() - began > 0.6  # it outlived three first-byte timeouts


@contextlib.asynccontextmanager
async def engine_filled(url: str, streams: int) -> AsyncIterator[None]:
    """`streams` long streams sent straight to the engine, running until the block ends."""
    body = {
        "model": MODEL,
        "stream": True,
        "max_tokens": 1000,
        "messages": [{"role": "user", "content": "go"}],
    }
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        # Each stream's reader is kept: one dropped would close its connection, and the engine
        # would abort the stream.
        readers = []
        for _ in range(streams):
            response = await stack.enter_async_context(
                client.stream("POST", "/v1/chat/completions", json=body)
            )
            readers.append(response.aiter_bytes())
            await anext(readers[-1])  # its first output: running, not queued
        yield


async def test_a_non_streamed_answer_on_a_full_engine_is_waited_for(gateway, world):
    """Three of the engine's four slots taken by streams sent straight to it, the fourth by the
    request: the probe waits in the engine's own queue, and that silence is not a hang."""
    await sim_first_byte_timeout(gateway, 0.2)
    async with engine_filled(world["sim"].url, 3):
        body = chat_body(max_tokens=1000, stream=False)
        status, _, raw = await read_all(await start(world["alice"], body), timeout=30)
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 1000


async def test_a_stream_waiting_in_a_full_engines_queue_is_waited_for(gateway, world):
    """Every slot taken by streams sent straight to the engine: the gateway's stream waits in the
    engine's queue, where vLLM sends nothing until it runs, and that silence is not a hang."""
    await sim_first_byte_timeout(gateway, 0.2)
    async with engine_filled(world["sim"].url, 4):
        status, _, raw = await read_all(await start(world["alice"], chat_body(max_tokens=5)), 30)
    assert status == 200 and raw.count(b'"content"') >= 5 and b"[DONE]" in raw


async def test_a_request_on_a_hung_backend_goes_to_another_of_the_pool(gateway, world):
    async with hung_backend(send_headers=True) as url:
        await hung_backend_added(gateway, url, only=False)
        status, _, body = await read_all(await start(world["alice"], chat_body(max_tokens=3)))
    assert status == 200 and b'"content"' in body
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["backend"]) == ("ok", "sim")
