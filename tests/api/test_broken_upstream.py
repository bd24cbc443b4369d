"""A broken upstream is an `upstream_error`, to the client and in the usage row: garbage in a
stream is not passed on, and a stream that stops without a finish reason is not billed as ok."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import sync_to_async

from tests.api.conftest import chat_body, read_all, start, usage_rows
from tests.api.test_retry import add_failing_backend

TEXT = b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
GARBAGE = b"data: <html>502 Bad Gateway</html>\n\n"
DONE = b"data: [DONE]\n\n"


def sse_backend(events: list[bytes]):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        for event in events:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    return handle


@contextlib.asynccontextmanager
async def serving(events: list[bytes]) -> AsyncIterator[str]:
    server = await asyncio.start_server(sse_backend(events), "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@pytest.mark.parametrize(
    "events",
    [[TEXT, GARBAGE, DONE], [TEXT, DONE], [TEXT]],
    ids=["garbage-after-text", "no-finish-reason", "cut-without-done"],
)
async def test_a_broken_stream_ends_with_an_upstream_error_and_is_billed_as_one(
    gateway, world, events
):
    async with serving(events) as url:
        await sync_to_async(add_failing_backend)(url, only=True)
        await gateway.reload_once()
        status, _, body = await read_all(await start(world["alice"], chat_body(max_tokens=3)))
    assert status == 200
    sent = [e for e in body.split(b"\n\n") if e]
    assert b"<html>" not in body
    assert json.loads(sent[-2][6:])["error"]["code"] == "upstream_error"
    assert sent[-1] == b"data: [DONE]"
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["error_type"]) == ("error", "upstream_error")


async def test_garbage_before_the_first_token_is_a_502(gateway, world):
    async with serving([GARBAGE, DONE]) as url:
        await sync_to_async(add_failing_backend)(url, only=True)
        await gateway.reload_once()
        status, _, body = await read_all(await start(world["alice"], chat_body(max_tokens=3)))
    assert status == 502 and b"<html>" not in body
    assert json.loads(body)["error"]["code"] == "upstream_error"


ALMOST_JSON = b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "hi"}}], x}\n\n'


@pytest.mark.parametrize("broken", [ALMOST_JSON, b"data: {x}\n\n"], ids=["after-text", "bare"])
async def test_an_event_that_is_not_json_never_reaches_a_websocket_client(gateway, world, broken):
    from tests.api.test_websocket import BODY, collect, socket

    async with serving([TEXT, broken, DONE]) as url:
        await sync_to_async(add_failing_backend)(url, only=True)
        await gateway.reload_once()
        ws = socket(world["alice"])
        assert (await ws.connect())[0]
        await ws.send_json_to({"type": "request", "id": "b", "body": BODY})
        # Every frame is JSON (receive_json_from parses each): the text, then the stream's error.
        messages = await collect(ws, "b")
        await ws.disconnect()
    assert [m["type"] for m in messages] == ["start", "chunk", "chunk", "done"]
    assert messages[2]["data"]["error"]["code"] == "upstream_error"
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["error_type"]) == ("error", "upstream_error")
