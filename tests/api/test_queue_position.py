"""A queued client is told where it stands: SSE comment lines, a WebSocket `queued` event and
GET /v1/requests/{id}; an error after the early headers still ends the stream properly."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async
from channels.testing import ApplicationCommunicator, WebsocketCommunicator

from llmserver.pipeline.completion import QUEUE_REPORT_SECONDS
from tenants.models import ApiKey
from tests.api.conftest import MODEL, chat_body, read_all, start, wait_for


def depth(gw) -> int:
    return sum(q.depth for q in gw.snapshot().queues)


async def occupy(gateway, key: str) -> ApplicationCommunicator:
    """A long stream that holds the tier's only slot (one at a time)."""
    running = await start(key, chat_body(max_tokens=2000))
    assert (await running.receive_output(10))["status"] == 200
    return running


async def get_status(key: str, request_id: str) -> tuple[int, dict]:
    from llmserver.asgi import application

    path = f"/v1/requests/{request_id}"
    comm = ApplicationCommunicator(
        application,
        {
            "type": "http",
            "http_version": "1.1",
            "method": "GET",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(b"authorization", f"Bearer {key}".encode())],
        },
    )
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    status, _, body = await read_all(comm)
    return status, json.loads(body)


async def test_a_queued_stream_gets_position_comments_then_its_tokens(gateway, world):
    running = await occupy(gateway, world["alice"])
    queued = await start(world["alice"], chat_body(max_tokens=3))
    head = await queued.receive_output(5)  # headers go out early, while it waits
    assert head["status"] == 200
    request_id = dict(head["headers"])[b"x-request-id"].decode()
    comment = (await queued.receive_output(5))["body"]
    assert comment.startswith(b": queued position=0 eta_s=")

    status, data = await get_status(world["alice"], request_id)
    assert status == 200
    assert (data["status"], data["position"], data["model"]) == ("queued", 0, MODEL)
    assert data["eta_s"] > 0

    await running.send_input({"type": "http.disconnect"})
    rest = b""
    while True:
        message = await queued.receive_output(10)
        rest += message.get("body", b"")
        if not message.get("more_body"):
            break
    events = [e for e in rest.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    ids = {json.loads(e[6:])["id"] for e in events[:-1]}
    assert ids == {request_id}


async def test_a_queued_stream_learns_its_queue_time_before_its_first_token(gateway, world):
    running = await occupy(gateway, world["alice"])
    queued = await start(world["alice"], chat_body(max_tokens=3))
    head = await queued.receive_output(5)
    assert b"x-queue-time-ms" not in dict(head["headers"])  # not known when the headers go out
    assert (await queued.receive_output(5))["body"].startswith(b": queued position=0")
    await running.send_input({"type": "http.disconnect"})
    rest = b""
    while True:
        message = await queued.receive_output(10)
        rest += message.get("body", b"")
        if not message.get("more_body"):
            break
    blocks = [b for b in rest.split(b"\n\n") if not b.startswith(b": queued")]
    assert blocks[0].startswith(b": dispatched queue_time_ms=")
    assert float(blocks[0].split(b"=")[1]) >= 1000 * QUEUE_REPORT_SECONDS
    assert blocks[1].startswith(b"data: ")


async def test_another_keys_request_is_not_found(gateway, world):
    running = await occupy(gateway, world["alice"])
    _, bob = await sync_to_async(ApiKey.objects.create_key)(tenant=world["tenant"], user="bob")
    status, data = await get_status(bob, "chatcmpl-nope")
    assert status == 404 and data["error"]["code"] == "not_found"
    queued = await start(world["alice"], chat_body(max_tokens=3))
    head = await queued.receive_output(5)
    request_id = dict(head["headers"])[b"x-request-id"].decode()
    assert (await get_status(bob, request_id))[0] == 404
    assert (await get_status(world["alice"], request_id))[0] == 200
    for comm in (running, queued):
        await comm.send_input({"type": "http.disconnect"})
    await wait_for(lambda: depth(gateway) == 0, 5)


async def test_a_queue_timeout_after_the_early_headers_ends_with_an_error_event_and_done(
    gateway, world
):
    tier = world["tier"]
    tier.queue_timeout_seconds = 1.5
    await sync_to_async(tier.save)()
    gateway.keys.clear()
    running = await occupy(gateway, world["alice"])
    status, _, body = await read_all(await start(world["alice"], chat_body()), timeout=10)
    assert status == 200
    assert body.startswith(b": queued position=0")
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert json.loads(events[0][6:])["error"]["code"] == "queue_timeout"
    assert events[-1] == b"data: [DONE]"
    await running.send_input({"type": "http.disconnect"})


async def test_a_queued_websocket_request_gets_a_queued_event(gateway, world):
    from llmserver.asgi import application

    running = await occupy(gateway, world["alice"])
    ws = WebsocketCommunicator(application, f"/ws/v1/chat/completions?api_key={world['alice']}")
    assert (await ws.connect())[0]
    body = json.loads(chat_body(max_tokens=3))
    await ws.send_json_to({"type": "request", "id": "q1", "body": body})
    event = await ws.receive_json_from(5)
    assert (event["type"], event["id"], event["position"]) == ("queued", "q1", 0)
    assert event["request_id"].startswith("chatcmpl-") and event["eta_s"] > 0
    await running.send_input({"type": "http.disconnect"})
    while (await ws.receive_json_from(10))["type"] != "done":
        pass
    await ws.disconnect()
