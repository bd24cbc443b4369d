"""The server makes every request id on a socket; the client's id is only echoed back."""

from __future__ import annotations

from tests.api.conftest import usage_rows, wait_for
from tests.api.test_websocket import BODY, collect, socket


async def test_ten_requests_reusing_one_client_id_leave_ten_usage_rows(gateway, world):
    ws = socket(world["alice"])
    connected, _ = await ws.connect()
    assert connected
    server_ids = []
    for _ in range(10):
        await ws.send_json_to({"type": "request", "id": "1", "body": BODY})
        messages = await collect(ws, "1")
        assert messages[0]["type"] == "start" and messages[-1]["type"] == "done"
        server_ids.append(messages[0]["headers"]["x-request-id"])
    await ws.disconnect()
    assert len(set(server_ids)) == 10
    assert all(rid.startswith("chatcmpl-") for rid in server_ids)
    await wait_for(lambda: gateway.usage.pending == 0, 5)
    await gateway.usage.flush_once()
    rows = await usage_rows()
    assert sorted(r["request_id"] for r in rows) == sorted(server_ids)


async def test_a_long_client_id_is_echoed_but_not_stored(gateway, world):
    client_id = "c" * 64
    ws = socket(world["alice"])
    await ws.connect()
    await ws.send_json_to({"type": "request", "id": client_id, "body": BODY})
    messages = await collect(ws, client_id)
    assert messages[-1]["type"] == "done"
    await ws.disconnect()
    await gateway.usage.flush_once()
    rows = await usage_rows()
    assert [r["request_id"] for r in rows] == [messages[0]["headers"]["x-request-id"]]
    assert client_id not in rows[0]["request_id"]
