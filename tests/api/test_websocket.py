"""Completions over a WebSocket: chunks, several requests on one socket, cancel, bad input."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from tests.api.conftest import MODEL, wait_for

BODY = {
    "model": MODEL,
    "stream": True,
    "max_tokens": 3,
    "messages": [{"role": "user", "content": "hi"}],
}


def socket(key: str | None) -> WebsocketCommunicator:
    from llmserver.asgi import application

    path = "/ws/v1/chat/completions" + (f"?api_key={key}" if key else "")
    return WebsocketCommunicator(application, path)


async def collect(ws: WebsocketCommunicator, request_id: str) -> list[dict]:
    messages = []
    while True:
        message = await ws.receive_json_from(10)
        assert message["id"] == request_id
        messages.append(message)
        if message["type"] in ("done", "error", "response", "cancelled"):
            return messages


async def test_two_requests_in_sequence_stream_on_one_socket(gateway, world):
    ws = socket(world["alice"])
    connected, _ = await ws.connect()
    assert connected
    for request_id in ("one", "two"):
        await ws.send_json_to({"type": "request", "id": request_id, "body": BODY})
        messages = await collect(ws, request_id)
        assert messages[0]["type"] == "start" and messages[-1]["type"] == "done"
        chunks = [m["data"] for m in messages if m["type"] == "chunk"]
        texts = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
        assert len([t for t in texts if t]) == 3
    await ws.disconnect()


async def test_a_non_streaming_request_gets_one_response(gateway, world):
    ws = socket(world["alice"])
    await ws.connect()
    await ws.send_json_to({"type": "request", "id": "w", "body": {**BODY, "stream": False}})
    messages = await collect(ws, "w")
    assert (
        messages[-1]["type"] == "response"
        and messages[-1]["data"]["usage"]["completion_tokens"] == 3
    )
    await ws.disconnect()


async def test_a_cancel_message_stops_the_stream_and_frees_the_slot(gateway, world):
    ws = socket(world["alice"])
    await ws.connect()
    await ws.send_json_to({"type": "request", "id": "long", "body": {**BODY, "max_tokens": 500}})
    assert (await ws.receive_json_from(10))["type"] == "start"
    await ws.send_json_to({"type": "cancel", "id": "long"})
    seen = await collect(ws, "long")
    assert seen[-1]["type"] == "cancelled"
    await wait_for(lambda: all(b.in_flight == 0 for b in gateway.snapshot().backends), 5)
    await ws.disconnect()


async def test_closing_the_socket_cancels_its_requests(gateway, world):
    ws = socket(world["alice"])
    await ws.connect()
    await ws.send_json_to({"type": "request", "id": "long", "body": {**BODY, "max_tokens": 500}})
    assert (await ws.receive_json_from(10))["type"] == "start"
    await ws.disconnect()
    await wait_for(lambda: all(b.in_flight == 0 for b in gateway.snapshot().backends), 5)


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"type": "request", "id": "x", "body": {"model": MODEL}}, "messages"),
        ({"type": "request", "id": "x", "body": "nope"}, "body"),
        ({"type": "shout", "id": "x"}, "type"),
        ({"type": "request", "body": BODY}, "id"),
    ],
)
async def test_bad_messages_get_an_error_and_the_socket_stays_open(gateway, world, message, param):
    ws = socket(world["alice"])
    await ws.connect()
    await ws.send_json_to(message)
    error = await ws.receive_json_from(10)
    assert (error["type"], error["status"], error["error"]["param"]) == ("error", 400, param)
    await ws.send_json_to({"type": "request", "id": "ok", "body": BODY})
    assert (await collect(ws, "ok"))[-1]["type"] == "done"
    await ws.disconnect()


async def test_a_socket_without_a_valid_key_is_closed(gateway, world):
    ws = socket("sk-llms-" + "x" * 40)
    connected, code = await ws.connect()
    assert not connected and code == 4401


async def test_a_lone_surrogate_or_deep_nesting_over_the_socket_is_an_error_not_a_crash(
    gateway, world
):
    ws = socket(world["alice"])
    assert (await ws.connect())[0]
    bad = {**BODY, "messages": [{"role": "user", "content": "\ud800"}]}
    await ws.send_json_to({"type": "request", "id": "s", "body": bad})
    [message] = await collect(ws, "s")
    assert (message["type"], message["status"]) == ("error", 400)
    await ws.send_to(text_data="[" * 5000 + "]" * 5000)
    message = await ws.receive_json_from(10)
    assert (message["type"], message["id"]) == ("error", None)
    await ws.send_json_to({"type": "request", "id": "ok", "body": BODY})
    assert (await collect(ws, "ok"))[-1]["type"] == "done"
    await ws.disconnect()


async def test_a_request_after_the_key_was_revoked_is_refused_and_the_socket_closed(gateway, world):
    from asgiref.sync import sync_to_async

    from tenants.models import ApiKey

    ws = socket(world["alice"])
    assert (await ws.connect())[0]
    await ws.send_json_to({"type": "request", "id": "before", "body": BODY})
    assert (await collect(ws, "before"))[-1]["type"] == "done"
    await sync_to_async(ApiKey.objects.all().delete)()
    await ws.send_json_to({"type": "request", "id": "after", "body": BODY})
    [error] = await collect(ws, "after")
    assert (error["type"], error["status"]) == ("error", 401)
    assert (await ws.receive_output(5))["type"] == "websocket.close"


def revoke_without_signals() -> None:
    """As another process or a SQL shell would: only the database's change counter tells."""
    from tenants.models import ApiKey

    ApiKey.objects.update(revoked=True)


def delete_in_the_admin() -> None:
    from tenants.models import ApiKey

    ApiKey.objects.all().delete()


@pytest.mark.parametrize("change", [revoke_without_signals, delete_in_the_admin])
async def test_an_idle_socket_is_closed_with_4401_soon_after_its_key_goes(gateway, world, change):
    import asyncio

    from asgiref.sync import sync_to_async

    from llmserver.api.websocket import KEY_RECHECK_SECONDS
    from llmserver.runtime.config_watch import WATCH_INTERVAL

    bound = WATCH_INTERVAL + KEY_RECHECK_SECONDS + 3  # and two database trips on a busy machine
    ws = socket(world["alice"])
    assert (await ws.connect())[0]
    await sync_to_async(change)()
    began = asyncio.get_running_loop().time()
    assert await ws.receive_output(bound) == {"type": "websocket.close", "code": 4401}
    assert asyncio.get_running_loop().time() - began < bound


async def test_an_idle_socket_stays_open_while_its_key_is_valid(gateway, world):
    from llmserver.api.websocket import KEY_RECHECK_SECONDS

    ws = socket(world["alice"])
    assert (await ws.connect())[0]
    await gateway.reload_once()
    gateway.keys.clear()  # a configuration change that leaves the key as it was
    assert await ws.receive_nothing(KEY_RECHECK_SECONDS * 2.5)
    await ws.send_json_to({"type": "request", "id": "still", "body": BODY})
    assert (await collect(ws, "still"))[-1]["type"] == "done"
    await ws.disconnect()
