"""A change to a backend in the admin never touches the requests under way on it: the old
connection pool is closed only once its last stream has ended."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async

from tenants.models import Backend
from tests.api.conftest import chat_body, read_all, start, usage_rows


def set_max_in_flight(name: str, value: int) -> None:
    Backend.objects.filter(name=name).update(max_in_flight=value)


async def test_editing_a_backend_leaves_its_live_stream_whole(gateway, world):
    comm = await start(world["alice"], chat_body(max_tokens=1500))
    head = await comm.receive_output(10)
    assert head["status"] == 200
    first = await comm.receive_output(10)
    assert first.get("more_body")
    await sync_to_async(set_max_in_flight)("sim", 7)
    await gateway.reload_once()
    assert gateway.backends.clients["sim"] is not None
    body = first["body"]
    while True:
        message = await comm.receive_output(20)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    assert not any(b'"error"' in e for e in events)
    text = [e for e in events if b'"content"' in e and b'"content":""' not in e]
    assert len(text) == 1500
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["completion_tokens"]) == ("ok", 1500)


async def test_a_request_after_the_edit_uses_the_new_configuration(gateway, world):
    await sync_to_async(set_max_in_flight)("sim", 7)
    await gateway.reload_once()
    status, _, body = await read_all(await start(world["alice"], chat_body(stream=False)))
    assert status == 200
    assert json.loads(body)["usage"]["completion_tokens"] == 8
    assert gateway.scheduler.core.backends["sim"].config.max_in_flight == 7
