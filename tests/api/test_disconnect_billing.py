"""A stream its client leaves is billed what the gateway delivered: the messages it handed to the
ASGI send, and whose send returned, before it read the client's `http.disconnect`. Not a token
that reaches the relay as the client goes, nor a message a server's flow control still held
back. For every streamed endpoint: chat, completions, responses and messages."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction

from tenants.models import Backend, ModelRoute
from tests.api.conftest import MODEL, post_scope, start, usage_rows, wait_for

BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 400},
    "/v1/completions": {"prompt": "Hi", "max_tokens": 400},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 400},
    "/v1/messages": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 400},
}
ENDPOINTS = list(BODIES)
NAMED_TEXT = (b"response.output_text.delta", b"content_block_delta")


def request_body(path: str) -> bytes:
    return json.dumps({"model": MODEL, "stream": True, **BODIES[path]}).encode()


def texts_in(body: bytes) -> int:
    """The events of generated text in a stream as its client has it, of any endpoint."""
    count = 0
    for block in body.split(b"\n\n"):
        lines = block.split(b"\n")
        name = next((x[7:] for x in lines if x.startswith(b"event: ")), None)
        data = next((x[6:] for x in lines if x.startswith(b"data: ")), b"")
        if name is not None:
            count += name in NAMED_TEXT
        elif data.startswith(b"{"):
            choices = json.loads(data).get("choices") or [{}]
            count += any(c.get("text") or (c.get("delta") or {}).get("content") for c in choices)
    return count


def sse(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


# Each endpoint's stream as an engine opens it (before any text), and one event of text.
OPENINGS = {
    "/v1/chat/completions": sse({"id": "x", "choices": [{"index": 0, "delta": {"role": "a"}}]}),
    "/v1/completions": b"",
    "/v1/responses": sse(
        {"type": "response.created", "response": {"id": "resp_x", "status": "in_progress"}},
        "response.created",
    ),
    "/v1/messages": sse(
        {"type": "message_start", "message": {"id": "x", "usage": {"input_tokens": 3}}},
        "message_start",
    ),
}
TEXTS = {
    "/v1/chat/completions": sse({"id": "x", "choices": [{"index": 0, "delta": {"content": "a"}}]}),
    "/v1/completions": sse({"id": "x", "choices": [{"index": 0, "text": "a"}]}),
    "/v1/responses": sse(
        {"type": "response.output_text.delta", "delta": "a"}, "response.output_text.delta"
    ),
    "/v1/messages": sse(
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "a"}},
        "content_block_delta",
    ),
}


class PacedBackend:
    """A real TCP server whose stream the test writes, event by event, when it chooses (`send`):
    a write on loopback is there for the gateway at the event loop's next poll."""

    def __init__(self) -> None:
        self.writer: asyncio.StreamWriter | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            self.writer = writer
            await reader.read()  # until the gateway closes the stream

    def send(self, events: bytes) -> None:
        assert self.writer is not None
        if events:
            self.writer.write(b"%x\r\n%s\r\n" % (len(events), events))


@transaction.atomic
def route_only_to(url: str) -> None:
    """One transaction: the config reload, woken by the first save, reads the tables from another
    thread, and SQLite's shared-cache test database refuses a second writer meanwhile."""
    paced = Backend.objects.create(name="paced", base_url=url, kind="openai", max_in_flight=8)
    endpoints = "chat,completions,responses,messages"
    ModelRoute.objects.create(public_name=MODEL, backend=paced, endpoints=endpoints)
    Backend.objects.filter(name="sim").update(enabled=False)


@contextlib.asynccontextmanager
async def paced_backend(gateway: Any) -> AsyncIterator[PacedBackend]:
    """The model's only backend, on every streamed endpoint, once the gateway has it."""
    backend = PacedBackend()
    server = await asyncio.start_server(backend.handle, "127.0.0.1", 0)
    await sync_to_async(route_only_to)(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    await wait_for(lambda: "paced" in gateway.backends.clients, 5)
    try:
        yield backend
    finally:
        if backend.writer is not None:
            backend.writer.close()
        server.close()


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_a_token_reaching_the_relay_as_the_client_leaves_is_neither_sent_nor_billed(
    gateway, world, path
):
    async with paced_backend(gateway) as backend:
        comm = await start(world["alice"], request_body(path), path)
        await wait_for(lambda: backend.writer is not None, 5)
        backend.send(OPENINGS[path] + TEXTS[path])
        assert (await comm.receive_output(10))["status"] == 200
        got = b""
        while not texts_in(got):
            got += (await comm.receive_output(10))["body"]

        await comm.send_input({"type": "http.disconnect"})
        backend.send(TEXTS[path])  # read by the gateway in the loop's turn that reads the hang-up
        await comm.wait(5)
    assert comm.output_queue.empty()  # nothing went to the client after it left
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert texts_in(got) == 1
    assert (row["status"], row["completion_tokens"]) == ("cancelled", 1)


class HeldBackClient:
    """The application run as a server with flow control runs it: one response message in flight
    at a time, so a send waits until the client has read the message before (daphne's send never
    waits; other ASGI servers' do, while their write buffer drains)."""

    def __init__(self, key: str, path: str) -> None:
        from llmserver.asgi import application

        body = request_body(path)
        self.window: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1)
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox.put_nowait({"type": "http.request", "body": body, "more_body": False})
        self.sends = self.received = 0  # the sends the application began, returned or not
        self.app = asyncio.ensure_future(
            application(post_scope(key, body, path), self.inbox.get, self._send)
        )

    async def _send(self, message: dict[str, Any]) -> None:
        self.sends += 1
        await self.window.put(message)

    async def receive(self) -> dict[str, Any]:
        message = await asyncio.wait_for(self.window.get(), 10)
        self.received += 1
        return message

    async def hang_up(self) -> bytes:
        """Disconnect; the body of the message whose send had returned, not yet read."""
        self.inbox.put_nowait({"type": "http.disconnect"})
        await asyncio.wait_for(self.app, 5)
        return self.window.get_nowait()["body"] if not self.window.empty() else b""


@pytest.mark.parametrize("path", ENDPOINTS)
async def test_a_message_the_server_still_held_back_when_the_client_left_is_not_billed(
    gateway, world, path
):
    client = HeldBackClient(world["alice"], path)
    try:
        assert (await client.receive())["status"] == 200
        got = b""
        while texts_in(got) < 2:
            got += (await client.receive())["body"]
        # One message sent into the window, and the send of one more waiting for room.
        await wait_for(lambda: client.sends == client.received + 2, 5)
        got += await client.hang_up()
    finally:
        client.app.cancel()
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["completion_tokens"]) == ("cancelled", texts_in(got))
